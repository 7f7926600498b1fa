"""Which training turns got an advantage (MAPO's T_min cut), by what the turn was, from a run's transcripts.jsonl."""
import json, sys, collections
from pathlib import Path
for run in sys.argv[1:]:
    rows = [json.loads(l) for l in open(Path(run) / "transcripts.jsonl")]
    seen = collections.Counter(); trained = collections.Counter(); adv = collections.defaultdict(list)
    for r in rows:
        before = r["turns"][0].get("pool_size") or 8
        for t in r["turns"]:
            kind = t["kind"]
            label = ("guess_right" if kind == "guess_right" else "guess_wrong" if kind == "guess_wrong"
                     else "stall (n=1)" if before == 1 else "question (n>1)")
            seen[label] += 1
            if t.get("advantage") is not None:
                trained[label] += 1; adv[label].append(t["advantage"])
            before = t.get("candidates_left", before)
    print(Path(run).name, len(rows), "dialogues")
    for k in ("question (n>1)", "stall (n=1)", "guess_right", "guess_wrong"):
        a = adv[k]
        print(f"   {k:15s} trained {trained[k]:4d} of {seen[k]:4d} ({100*trained[k]/max(seen[k],1):3.0f} %)  mean advantage {sum(a)/max(len(a),1):+.2f}")
