#!/usr/bin/env bash
# One pilot run of the table study (issue 56 item 6): MAPO on IDR at lr 2e-4, one seed, from the weak
# warm start, at the tight setting of experiments/game_table/plan.py (pool 8, 5 replies, the table
# and the replies left shown, losses forfeited), then its held-out evaluation at the warm start's
# own settings (20 test secrets x 8 games, seed 0), so the two evaluations compare game for game.
#   bash experiments/game_table/pilot.sh [OUT] [WARM_START_MODEL] [STEPS]
# (defaults: runs/game-table-pilot, runs/game-table-warm/sft/final, 10)
set -euo pipefail
OUT=${1:-runs/game-table-pilot}
WARM=${2:-runs/game-table-warm/sft/final}
STEPS=${3:-10}
# the plan's training settings and the variant's overrides, one --set each
mapfile -t SETS < <(python - "$WARM" <<'PY'
import sys
from experiments.game_table.plan import table_tight_plan
from mapo.lab.ablate.plan import VARIANTS
plan = table_tight_plan()
kept = [s for s in plan.train if not s.startswith("policy.model=")]
for setting in [*kept, *VARIANTS.resolve("mapo-idr-lr2e-4").overrides, f"policy.model={sys.argv[1]}"]:
    print("--set"); print(setting)
PY
)
mapo train --config twenty-questions "${SETS[@]}" --set steps="$STEPS" --set seed=0 --set threads=1 --output "$OUT/run"
mapo eval --model "$OUT/run" --env twenty-questions --scenarios test --samples 8 --max-turns 5 --seed 0 \
    --env-option pool_size=8 --env-option max_turns=5 --env-option show_table=true --env-option show_turns_left=true \
    --env-option forfeit_on_failure=true --env-option forfeit_on_timeout=true --output "$OUT/eval"
python experiments/game_table/summarize.py "$OUT/eval" "$OUT/pilot_eval.json" "$(dirname "$(dirname "$WARM")")/eval"
