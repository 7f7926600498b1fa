#!/usr/bin/env bash
# Issue 59 item 4: MAPO against GRPO from one empathy warm start, on the judge that pays nothing for
# repetition, one unit per core, resumable (run it again after a stop: finished units are skipped):
#   bash experiments/empathy_warm/again.sh SEED [SEED ...]
#   OUT=runs/empathy-reask bash experiments/empathy_warm/again.sh 0 1 2   # a new study on today's judge
# 1. the warm start, built once (`mapo sft` on the 108 dialogues, 2 epochs at 5e-4: held-out loss
#    3.620 -> 3.128, reproducible by seed; 25 minutes on one core);
# 2. `--plan empathy-warm` MAPO and GRPO at the seeds given, two units at a time in one folder,
#    OUT, default runs/empathy-again (the start evaluated once as its base; about 75 minutes a unit on one core:
#    30 steps, then 12 test cards x 2 dialogues x 13 turns);
# 3. per seed, the blind set docs/blind/<basename of OUT>-s<seed>: its rater/ folder goes to a reader
#    who sees nothing else; key.json is moved out of the repository (runs/blind-keys/) until the
#    ratings are in (docs/blind-rating.md), then `mapo compare --score-blind` as in docs/results.md.
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: bash experiments/empathy_warm/again.sh SEED [SEED ...]" >&2; exit 2; }
START=runs/empathy-sft
OUT=${OUT:-runs/empathy-again}
NAME=$(basename "$OUT")
if [ ! -d "$START/final" ]; then
    mapo sft --data mapo/data/sft/empathy/train.jsonl --eval-data mapo/data/sft/empathy/heldout.jsonl \
        --set sft.epochs=2 --set sft.lr=5e-4 --set threads=1 --output "$START"
fi
seeds=()
for seed in "$@"; do seeds+=(--seed "$seed"); done
mapo ablate --plan empathy-warm --variant mapo-idr --variant grpo-idr "${seeds[@]}" --jobs 2 \
    --set policy.model="$START/final" --output "$OUT"
for seed in "$@"; do
    blind=docs/blind/$NAME-s$seed
    if [ ! -d "$blind" ]; then
        mapo compare --blind "$OUT/evals/grpo-idr-s$seed" "$OUT/evals/mapo-idr-s$seed" \
            --label grpo --label mapo --output "$blind"
        mkdir -p runs/blind-keys && mv "$blind/key.json" "runs/blind-keys/$NAME-s$seed.json"
    fi
done
