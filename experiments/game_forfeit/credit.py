"""Which training turns got an advantage (MAPO's T_min cut) from a run's training transcripts: by
what the turn was, and whether each dialogue's last turn, where a game's outcome lands (a solve, a
forfeited wrong guess or timeout), was trained."""
import collections
import sys
from pathlib import Path

from mapo.validation import compressed_or_plain, read_records

for run in sys.argv[1:]:
    rows = read_records(compressed_or_plain(Path(run), "transcripts.jsonl"), "transcripts")
    seen, trained = collections.Counter(), collections.Counter()
    adv = collections.defaultdict(list)
    for r in rows:
        before = r["turns"][0].get("pool_size") or 8
        for t in r["turns"]:
            kind = t["kind"]
            label = kind if kind in ("guess_right", "guess_wrong") else "stall (n=1)" if before == 1 else "question (n>1)"
            seen[label] += 1
            if t.get("advantage") is not None:
                trained[label] += 1
                adv[label].append(t["advantage"])
            before = t.get("candidates_left", before)
        seen["last turn: " + r["done_reason"]] += 1
        trained["last turn: " + r["done_reason"]] += r["turns"][-1].get("advantage") is not None
    print(Path(run).name, len(rows), "dialogues")
    for k in ("question (n>1)", "stall (n=1)", "guess_right", "guess_wrong"):
        a = adv[k]
        print(f"   {k:22s} trained {trained[k]:4d} of {seen[k]:4d} ({100 * trained[k] / max(seen[k], 1):3.0f} %)"
              f"  mean advantage {sum(a) / max(len(a), 1):+.2f}")
    for k in ("last turn: success", "last turn: failure", "last turn: timeout"):
        print(f"   {k:22s} trained {trained[k]:4d} of {seen[k]:4d} ({100 * trained[k] / max(seen[k], 1):3.0f} %)")
