#!/usr/bin/env bash
# Issue 60 item 3: the default run's training step for SmolLM2-135M and Gemma 3 270M on this CPU, alternated
# (SmolLM2, Gemma, SmolLM2, Gemma, ...) so that a drift of this shared machine falls on both:
#   bash experiments/models/step_time.sh [OUT] [ROUNDS]      (defaults runs/models-step-time, 2)
# Each run is `mapo train` on the default config (empathy, llama.cpp engine, BF16 base, adapter sync) for 3
# steps from the model's base weights; the first step (caches, first sync) is left out. Prints per model the
# median step, rollout and update seconds and the rollout tokens/s, and the Gemma / SmolLM2 ratios.
set -euo pipefail
OUT=${1:-runs/models-step-time}
ROUNDS=${2:-2}
for round in $(seq 1 "$ROUNDS"); do
    for model in embedded gemma3-270m; do
        [ -f "$OUT/$model-$round/metrics.jsonl" ] || mapo train --set policy.model="$model" --set steps=3 --output "$OUT/$model-$round"
    done
done
python - "$OUT" <<'PY'
import json, statistics, sys
from pathlib import Path
out = Path(sys.argv[1])
keys = ("step_time", "time_rollout", "time_update", "tokens_per_s_rollout")
figures = {}
for model in ("embedded", "gemma3-270m"):
    steps = [json.loads(line) for run in sorted(out.glob(f"{model}-*")) for line in (run / "metrics.jsonl").open()
             if line.strip()]
    steps = [s for s in steps if s.get("step", 0) > 1 and "step_time" in s]
    figures[model] = {k: statistics.median(s[k] for s in steps) for k in keys}
    print(model, f"({len(steps)} steps):", ", ".join(f"{k} {v:.2f}" for k, v in figures[model].items()))
print("gemma3-270m / embedded:", ", ".join(f"{k} {figures['gemma3-270m'][k] / figures['embedded'][k]:.2f}x" for k in keys))
json.dump(figures, (out / "step_time.json").open("w"), indent=2)
PY
