"""How well simple figures predict a blind reader, and which opener the judge pays (docs/results.md,
eighth session). Usage:

    python experiments/empathy_warm/reader_proxies.py docs/blind/empathy-warm-s* [--runs runs/empathy-warm/runs]

For each rated pair: is the side with fewer re-asked questions (`hack_reask`), or with higher
distinct-2, the one the reader preferred? Then, per set and run, how many notes name a loop or
blame on that run's side (`note_faults`). With --runs: the share of training replies opening
"That / It / So it sounds like" at the first and last logged step of each run, and the judge's
mean reward for such replies against the rest.
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import statistics
from pathlib import Path

from mapo.degeneracy import distinct_n, reasked_question
from mapo.validation import compressed_or_plain, read_records

OPENER = re.compile(r"^(That|It|So it) sounds like", re.IGNORECASE)


def listener_replies(side: list[dict]) -> list[str]:
    return [t["text"] for t in side if t["speaker"] == "listener"]


def reask_share(replies: list[str]) -> float:
    return sum(reasked_question(r, replies[:i]) is not None for i, r in enumerate(replies)) / len(replies)


def ratings(folder: Path) -> list[dict[str, str]]:
    """A blind set's rows of ratings.csv (pair, preferred, scores, note)."""
    lines = [line for line in (folder / "rater" / "ratings.csv").read_text().splitlines() if not line.startswith("#")]
    return list(csv.DictReader(lines))


def reader_agreement(blind_sets: list[Path]) -> None:
    fewer = [0, 0]  # [agrees, disagrees] over decisive pairs whose sides differ
    varied = [0, 0]
    for folder in blind_sets:
        pairs = {p["pair"]: p for p in read_records(folder / "rater" / "pairs.jsonl", "blind pairs")}
        for row in ratings(folder):
            if row["preferred"] not in ("A", "B"):
                continue
            a, b = (listener_replies(pairs[row["pair"]][s]) for s in ("A", "B"))
            if reask_share(a) != reask_share(b):
                fewer[("A" if reask_share(a) < reask_share(b) else "B") != row["preferred"]] += 1
            if distinct_n(a) != distinct_n(b):
                varied[("A" if distinct_n(a) > distinct_n(b) else "B") != row["preferred"]] += 1
    print(f"fewer re-asked questions preferred: {fewer[0]} of {sum(fewer)} pairs")
    print(f"higher distinct-2 preferred: {varied[0]} of {sum(varied)} pairs")


NOTE_FAULTS = {"loop": "loop|repeat|verbatim", "blame": "blam|dismiss|invalidat"}


def note_faults(blind_sets: list[Path]) -> None:
    """Unblinded, a rough count of what the rater's notes name on each run's side: a side's letter
    followed, within its clause, by a loop word or a blame word (reads key.json: after rating only)."""
    for folder in blind_sets:
        key = json.loads((folder / "key.json").read_text())["pairs"]
        counts: dict[str, dict[str, int]] = {}
        for row in ratings(folder):
            for side in ("A", "B"):
                run = counts.setdefault(key[row["pair"]][side], dict.fromkeys(NOTE_FAULTS, 0))
                for fault, words in NOTE_FAULTS.items():
                    run[fault] += bool(re.search(rf"\b{side}\b[^;.]*\b({words})", row["note"] or ""))
        print(f"{folder}: notes naming, by run: {counts}")


def openers(runs: Path) -> None:
    rewards: dict[bool, list[float]] = {True: [], False: []}
    for run in sorted(p for p in runs.iterdir() if compressed_or_plain(p, "transcripts.jsonl").is_file()):
        records = read_records(compressed_or_plain(run, "transcripts.jsonl"), "transcripts")
        steps = sorted({r["step"] for r in records})
        shares = []
        for step in (steps[0], steps[-1]):
            replies = [t["response"] for r in records if r["step"] == step for t in r["turns"]]
            shares.append(f"step {step}: {sum(bool(OPENER.match(x)) for x in replies) / len(replies):.0%}")
        for r in records:
            for t in r["turns"]:
                rewards[bool(OPENER.match(t["response"]))].append(t["reward"])
        print(f"{run.name}: 'sounds like' openers {', '.join(shares)}")
    print(f"judge reward a turn: 'sounds like' {statistics.mean(rewards[True]):.2f} (n={len(rewards[True])}), "
          f"the rest {statistics.mean(rewards[False]):.2f} (n={len(rewards[False])})")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("blind_sets", nargs="+", type=Path)
    parser.add_argument("--runs", type=Path)
    args = parser.parse_args()
    reader_agreement(args.blind_sets)
    note_faults(args.blind_sets)
    if args.runs:
        openers(args.runs)
