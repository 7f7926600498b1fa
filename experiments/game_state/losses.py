"""Where a policy's held-out replies went, games won against games lost: each outcome's mean replies
a game by kind (a question that split the candidates left, one that split nothing, a re-ask, an
invalid reply, the right or a wrong guess), and the guesses by the reply they were made at and how
many candidates were still possible then.

    python experiments/game_state/losses.py docs/study/game-state-tight/evals/mapo_state-idr-lr2e-4-s0 [more evals]

Each argument is an evaluation folder holding transcripts.jsonl(.gz) (a run's eval, an export's).
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path
from typing import Any

from mapo.envs.questioning.metrics import GUESS_KINDS, candidates_before
from mapo.lab.ablate.state import read_transcripts


def reply_kind(turn: dict[str, Any]) -> str:
    if turn["kind"] == "question":
        return "split" if turn.get("split") else "split_nothing"
    return turn["kind"]


def where_replies_went(dialogues: list[dict[str, Any]]) -> dict[str, Any]:
    by_outcome: dict[str, Any] = {}
    for outcome in ("won", "lost"):
        games = [d for d in dialogues if (d["outcome"] == "success") == (outcome == "won")]
        kinds = Counter(reply_kind(t) for d in games for t in d["turns"] if "kind" in t)
        by_outcome[outcome] = {"games": len(games), **{k: round(v / len(games), 2) for k, v in sorted(kinds.items())}}
    guesses: Counter[str] = Counter()
    for d in dialogues:
        turns = [t for t in d["turns"] if "kind" in t]
        for number, (turn, left) in enumerate(candidates_before(turns), 1):
            if turn["kind"] in GUESS_KINDS:
                guesses[f"{turn['kind']} at reply {number} with {left} left"] += 1
    by_outcome["guesses"] = dict(sorted(guesses.items()))
    return by_outcome


def main(folders: list[str]) -> None:
    for folder in folders:
        dialogues = read_transcripts(Path(folder))
        if not dialogues:
            raise SystemExit(f"{folder}: no transcripts.jsonl(.gz)")
        print(folder, where_replies_went(dialogues))


if __name__ == "__main__":
    main(sys.argv[1:])
