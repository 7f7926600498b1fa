"""Per-evaluation game figures recomputed from transcripts.jsonl (or an export's .jsonl.gz) with this checkout's game_summary."""
import sys
from pathlib import Path
from mapo.envs.questioning.metrics import game_summary
from mapo.validation import compressed_or_plain, read_records
out = Path(sys.argv[1])  # an ablation folder (mapo ablate --output)
print("| policy | success | bits per question | wrong guesses per game | guesses with 2+ left per game | turns stalled with 1 left per game | guessed when 1 left | timeouts |")
print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
for ev in sorted((out / "evals").iterdir()):
    rows = read_records(compressed_or_plain(ev, "transcripts.jsonl"), "transcripts")
    g = game_summary(rows)
    at1 = guessed1 = 0
    for r in rows:
        before = r["turns"][0].get("pool_size") or 8
        for t in r["turns"]:
            if before == 1:
                at1 += 1; guessed1 += str(t["kind"]).startswith("guess")
            before = t.get("candidates_left", before)
    timeouts = sum(r["outcome"] == "timeout" for r in rows)
    print(f"| {ev.name} | {100*g['success_rate']:.1f} % | {g['bits_per_question']:.3f} | {g['wrong_guesses']:.2f} | "
          f"{g['early_guesses']:.2f} | {g['stalled_turns']:.2f} | {guessed1} of {at1} ({100*guessed1/max(at1,1):.0f} %) | {timeouts} of {len(rows)} |")
