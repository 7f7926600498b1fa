"""Where a policy's information comes from: per evaluation, the mean bits of the opening question
and of the later ones, and the most common opening with how many of the games it opens.

    python experiments/game_forfeit/questions.py EVAL [EVAL ...]   # evaluation folders (mapo eval, ablation evals/*)
"""
from __future__ import annotations

import argparse
import collections
from pathlib import Path

from mapo.validation import compressed_or_plain, read_records


def question_figures(rows: list[dict]) -> tuple[float, float, str, int]:
    """(mean bits of a first-turn question, mean bits of a later question, top opening, games it opens)."""
    first, later = [], []
    openings: collections.Counter[str] = collections.Counter()
    for row in rows:
        for index, turn in enumerate(row["turns"]):
            if index == 0:
                openings[turn["response"].strip()] += 1
            if turn.get("kind") == "question":
                (first if index == 0 else later).append(float(turn.get("bits") or 0.0))
    opening, count = openings.most_common(1)[0] if openings else ("", 0)
    return _mean(first), _mean(later), opening, count


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("evals", nargs="+", type=Path)
    args = parser.parse_args()
    print("| evaluation | games | bits, first question | bits, later questions | most common opening (games) |")
    print("| --- | ---: | ---: | ---: | --- |")
    for folder in args.evals:
        rows = read_records(compressed_or_plain(folder, "transcripts.jsonl"), "transcripts")
        first, later, opening, count = question_figures(rows)
        print(f"| {folder.name} | {len(rows)} | {first:.2f} | {later:.2f} | \"{opening}\" ({count}) |")


if __name__ == "__main__":
    main()
