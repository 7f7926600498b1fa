"""When a policy guesses, by what it can see (candidates left) and what it may not (replies left).

From an evaluation's transcripts: among the replies made with 2 to 4 candidates consistent, the
share that were guesses on the last reply (where a guess wins 1 / n of the games and a question
none) and with 2 or more replies left (where a question is worth more: the reference players
ask). A policy that acts on the whole state guesses on the last reply and asks before it; one
that cannot see the budget guesses by candidates alone, at the same rate in both. `--states`
adds, per state (n, replies left) where 8+ games did not guess, the share of those games that
went on to be solved (any reply other than a guess counts as asking), against 1 / n. Last, the
share of guesses that name the first candidate of the opening list: a positional guess, not a
deduced one (1 / n of them by chance when the guess is among the candidates left).

    python experiments/game_forfeit/guess_value.py EVAL_FOLDER... [--max-turns 7] [--states]
"""
import argparse
import collections
from pathlib import Path

from mapo.validation import compressed_or_plain, read_records

parser = argparse.ArgumentParser()
parser.add_argument("evals", nargs="+", type=Path)
parser.add_argument("--max-turns", type=int, default=7, help="the game's turn limit (the plans': 7)")
parser.add_argument("--states", action="store_true", help="print every state where 8+ games did not guess")
args = parser.parse_args()

for folder in args.evals:
    rows = read_records(compressed_or_plain(folder, "transcripts.jsonl"), "transcripts")
    seen, guessed, asked, solved_after_asking = (collections.Counter() for _ in range(4))
    guesses = guesses_of_first = 0
    for row in rows:
        n = row["turns"][0]["pool_size"]
        first_listed = row["turns"][0]["user"].split("Candidates:")[1].split(",")[0].strip().lower()
        for turn in row["turns"]:
            state = (n, args.max_turns - turn["turn"] + 1)
            seen[state] += 1
            if turn["kind"] in ("guess_right", "guess_wrong"):
                guessed[state] += 1
                guesses += 1
                guesses_of_first += turn["guess"].strip().lower() == first_listed
            else:
                asked[state] += 1
                solved_after_asking[state] += row["done_reason"] == "success"
            n = turn["candidates_left"]

    def share(last: bool) -> str:
        states = [s for s in seen if 2 <= s[0] <= 4 and (s[1] == 1) == last]
        visits = sum(seen[s] for s in states)
        return f"{100 * sum(guessed[s] for s in states) / max(visits, 1):3.0f} % of {visits:3d}"

    solved = sum(r["done_reason"] == "success" for r in rows)
    print(f"{folder}: {solved} of {len(rows)} solved; guesses at 2-4 candidates: "
          f"last reply {share(True)}, 2+ replies left {share(False)}; "
          f"guesses naming the first candidate listed {100 * guesses_of_first / max(guesses, 1):.0f} % of {guesses}")
    if args.states:
        for s in sorted((s for s in seen if s[0] > 1 and asked[s] >= 8), key=lambda s: (-s[1], -s[0])):
            print(f"   n={s[0]} replies left={s[1]}: {seen[s]:4d} visits, guessed {guessed[s] / seen[s]:.2f}; "
                  f"solved after a question {solved_after_asking[s] / asked[s]:.2f}, by a guess {1 / s[0]:.2f}")
