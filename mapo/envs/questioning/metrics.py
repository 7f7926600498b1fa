"""The game's figures over a set of dialogues, from each turn's `kind` and `bits` (the step info
the environment writes, kept in transcripts through its `transcript_keys`).

- success_rate: dialogues ended by the right guess;
- turns_to_success: mean turns of the solved dialogues (None when none was solved);
- bits_per_question: information gained per non-guess turn (questions, repeats and
  invalid replies: a wasted turn counts as 0 bits); the optimal questioner is near 1;
- bits_mean: information gained per dialogue (log2(pool) when solved);
- invalid_rate, repeat_rate: their share of all turns;
- wrong_guesses: mean wrong guesses per dialogue;
- early_guesses: mean guesses per dialogue made while two or more candidates were still
  consistent (a blind guess; the reference players make none);
- stalled_turns: mean replies per dialogue other than a guess made while one candidate was left
  (the answer known and not given; the reference players make none);
- split_rate, most_even_rate: of the replies that ask a listed question (re-asks included), those
  that split the candidates still possible, and those that split them as evenly as any question not
  asked yet could; split_share, most_even_share: the same over all replies (None without the
  environment's `split` / `most_even` info).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

QUESTION_KINDS = ("question", "repeat", "invalid")
FIGURES = ("success_rate", "turns_to_success", "bits_per_question", "bits_mean", "invalid_rate", "repeat_rate", "wrong_guesses",
           "early_guesses", "stalled_turns", "split_rate", "most_even_rate", "split_share", "most_even_share")
GUESS_KINDS = ("guess_right", "guess_wrong")


def candidates_before(turns: Sequence[Mapping[str, Any]]) -> Iterator[tuple[Mapping[str, Any], int]]:
    """Each turn with the candidates still consistent when it was chosen: a turn's `candidates_left`
    is after its move; before the first it is the pool."""
    left = None
    for turn in turns:
        before = left if left is not None else turn.get("pool_size", 0)
        yield turn, before
        left = turn.get("candidates_left", before)


def _guess_timing(turns: Sequence[Mapping[str, Any]]) -> tuple[int, int]:
    """(guesses made while two or more candidates were consistent, other replies made while one was)."""
    early = stalled = 0
    for turn, before in candidates_before(turns):
        guessed = turn["kind"] in GUESS_KINDS
        early += guessed and before > 1
        stalled += not guessed and before == 1
    return early, stalled


def game_summary(dialogues: Sequence[Mapping[str, Any]]) -> dict[str, float | None]:
    """The figures above for `dialogues`: mappings with "done_reason" and "turns" (each turn a
    mapping with "kind" and "bits"); turns without a "kind" are not the game's and are skipped."""
    if not dialogues:
        raise ValueError("no dialogues to summarise")
    per_dialogue = [[t for t in d["turns"] if "kind" in t] for d in dialogues]
    turns = [t for game in per_dialogue for t in game]
    solved = [d for d in dialogues if d.get("done_reason") == "success"]
    asked = [t for t in turns if t["kind"] in QUESTION_KINDS]
    early, stalled = zip(*map(_guess_timing, per_dialogue))

    def share(kind: str) -> float:
        return sum(t["kind"] == kind for t in turns) / len(turns) if turns else 0.0

    def rate(key: str, over: Sequence[Mapping[str, Any]]) -> float | None:
        judged = [t for t in turns if t.get(key) is not None]
        return sum(bool(t[key]) for t in judged) / len(over) if judged and over else None

    questions = [t for t in turns if t.get("split") is not None]

    return {
        "success_rate": len(solved) / len(dialogues),
        "turns_to_success": sum(len(d["turns"]) for d in solved) / len(solved) if solved else None,
        "bits_per_question": sum(float(t["bits"]) for t in asked) / len(asked) if asked else None,
        "bits_mean": sum(float(t["bits"]) for t in turns) / len(dialogues),
        "invalid_rate": share("invalid"),
        "repeat_rate": share("repeat"),
        "wrong_guesses": sum(t["kind"] == "guess_wrong" for t in turns) / len(dialogues),
        "early_guesses": sum(early) / len(dialogues),
        "stalled_turns": sum(stalled) / len(dialogues),
        "split_rate": rate("split", questions),
        "most_even_rate": rate("most_even", questions),
        "split_share": rate("split", turns),
        "most_even_share": rate("most_even", turns),
    }

