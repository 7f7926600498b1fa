"""How often a listener says again what it already said: the offline judge's repeats, counted.

Per reply, against the listener's earlier replies in its dialogue:

- *re-asked by meaning*: a question the judge's `repeats.repeated_moves` finds already asked,
  however it is phrased (MiniLM cosine, the judge's thresholds);
- *re-asked by prefix*: the reward-hacking monitor's `degeneracy.reasked_question` (a question
  opening with the same four words as an earlier one);
- *any repeated move*: any repeat the judge finds (a question, a statement said again, an
  opening formula), and the share of each kind.

Both counts, because they answer different questions: the prefix count is what the monitor
reports during training, the meaning count is what the judge refuses to pay for. Two runs are
compared by the first minus the second, set by set (docs/blind-rating.md).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from mapo.degeneracy import reasked_question
from mapo.envs.empathy.offline.repeats import repeated_moves
from mapo.lab.blind.dialogue_sets import Dialogue
from mapo.text import sentences

KINDS = ("question", "statement", "opening")


@dataclass(frozen=True)
class ReplyRepeats:
    """What one reply repeats of the listener's earlier replies."""

    by_meaning: bool  # re-asks a question (repeats.py)
    by_prefix: bool  # re-asks a question (the monitor's prefix test)
    kinds: frozenset[str]  # the kinds of repeated move (question, statement, opening)


def reply_repeats(reply: str, earlier: list[str]) -> ReplyRepeats:
    """The repeats of `reply` given the listener's `earlier` replies in the same dialogue."""
    kinds = frozenset(r.kind for r in repeated_moves(sentences(reply), earlier))
    return ReplyRepeats("question" in kinds, reasked_question(reply, earlier) is not None, kinds)


def dialogue_repeats(dialogue: Dialogue) -> list[ReplyRepeats]:
    replies = [reply for _, reply in dialogue.turns]
    return [reply_repeats(reply, replies[:n]) for n, reply in enumerate(replies)]


def repeat_rates(dialogues: Iterable[Dialogue]) -> dict[str, Any]:
    """Shares of replies: re-asked by meaning, by prefix, by meaning only (what the prefix test
    misses), with any repeated move, and with each kind; plus the counts they come from."""
    found = [r for dialogue in dialogues for r in dialogue_repeats(dialogue)]
    n = len(found)
    counts = {
        "reask_meaning": sum(r.by_meaning for r in found),
        "reask_prefix": sum(r.by_prefix for r in found),
        "reask_meaning_only": sum(r.by_meaning and not r.by_prefix for r in found),
        "any_repeat": sum(bool(r.kinds) for r in found),
        **{f"repeat_{kind}": sum(kind in r.kinds for r in found) for kind in KINDS},
    }
    return {"replies": n, "counts": counts, **{name: count / n if n else None for name, count in counts.items()}}
