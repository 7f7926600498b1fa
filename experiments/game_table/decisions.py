"""What a policy does at each reply of the game with the table in view, against what the informative
player would do (issue 56: what stops it, measured).

From an evaluation's transcripts, each reply is placed by the state it answered: n candidates
consistent before it, r replies left (counting it). The informative player asks a question that
splits the candidates while n > 1 and r > 1, and guesses once n = 1 or on the last reply. So each
reply is one of:

- `split`: a question that split the candidates (n > 1, r > 1): the informative player's move;
- `no_split`: a listed question that split nothing (both answers leave the same candidates);
- `early_guess`: a guess with n > 1 and replies to spare (wins 1 / n of the time; asking wins more);
- `late_question`: a question with n = 1 (the answer is known: it only spends a reply);
- `last_guess`: a guess on the last reply with n > 1 (the informative player's move there too);
- `last_question`: a question on the last reply (the game then times out);
- `right_guess`: a guess with n = 1;
- `repeat`: a question already asked in this game (the answer is known);
- `invalid`: anything else (an unlisted question, a guess off the list, no question at all).

Shares are of all replies; `opening_split` is the share of games whose first question split.

    python experiments/game_table/decisions.py EVAL_FOLDER... [--max-turns 5]
"""

from __future__ import annotations

import argparse
import collections
from pathlib import Path

from mapo.validation import compressed_or_plain, read_records

KINDS = ["split", "no_split", "early_guess", "late_question", "last_guess", "last_question", "right_guess", "repeat", "invalid"]


def decision(kind: str, bits: float, before: int, replies_left: int) -> str:
    """The class of one reply (module docstring) from its outcome and the state it answered."""
    guess = kind in ("guess_right", "guess_wrong")
    question = kind == "question"
    if kind == "repeat":
        return "repeat"
    if not (guess or question):
        return "invalid"
    if before == 1:
        return "right_guess" if guess else "late_question"
    if replies_left == 1:
        return "last_guess" if guess else "last_question"
    if guess:
        return "early_guess"
    return "split" if bits > 0 else "no_split"


def tally(folder: Path, max_turns: int) -> tuple[collections.Counter, int, int]:
    """(class counts over every reply, games, games whose opening question split) of one evaluation."""
    counts: collections.Counter = collections.Counter()
    games = opening_splits = 0
    for row in read_records(compressed_or_plain(folder, "transcripts.jsonl"), "transcripts"):
        games += 1
        before = row["turns"][0]["pool_size"]
        for turn in row["turns"]:
            label = decision(turn["kind"], turn["bits"], before, max_turns - turn["turn"] + 1)
            counts[label] += 1
            if turn["turn"] == 1:
                opening_splits += label == "split"
            before = turn["candidates_left"]
    return counts, games, opening_splits


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("evals", nargs="+", type=Path)
    parser.add_argument("--max-turns", type=int, default=5, help="the game's reply budget (the tight plan's: 5)")
    args = parser.parse_args()
    print("eval".ljust(40) + "".join(k.rjust(14) for k in ["opening_split", *KINDS]))
    for folder in args.evals:
        counts, games, opening = tally(folder, args.max_turns)
        replies = sum(counts.values()) or 1
        shares = [opening / max(games, 1), *(counts[k] / replies for k in KINDS)]
        print(str(folder)[-40:].ljust(40) + "".join(f"{100 * s:13.1f}%" for s in shares))


if __name__ == "__main__":
    main()
