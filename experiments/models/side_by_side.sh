#!/usr/bin/env bash
# Issue 60 item 3: a policy model beside the embedded SmolLM2-135M, on empathy and on the game, resumable
# (run it again after a stop: what is finished is skipped):
#   bash experiments/models/side_by_side.sh MODEL OUT          e.g. gemma3-270m runs/models-gemma
#   TABLES="false" bash experiments/models/side_by_side.sh embedded runs/models-smollm2
# Empathy (MODEL other than embedded): the warm start as experiments/empathy_warm/again.sh builds
# SmolLM2's (`mapo sft` on the 108 dialogues, 2 epochs at 5e-4, one thread), its held-out evaluation
# with --plan empathy-warm's settings (12 test cards x 2 dialogues x 13 turns, seed 0), and a blind
# set against SmolLM2's warm start evaluated the same way (runs/empathy-again/evals/base), written to
# docs/blind/<basename of OUT>-vs-smollm2 with its key moved to runs/blind-keys/ until the ratings are in.
# Game (TABLES, default "true false"): the weak warm start at the tight setting with the table shown
# or hidden (experiments/game_table/build_warm_start.sh), then MAPO from it at seeds 0 and 1, 10
# steps (`table_tight_plan` or `hidden_tight_plan`). SmolLM2 with the table is the table study's own
# start and units (runs/game-table-warm, docs/study/game-table-tight seeds 0-1).
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: bash experiments/models/side_by_side.sh MODEL OUT" >&2; exit 2; }
MODEL=$1
OUT=$2
NAME=$(basename "$OUT")
mkdir -p "$OUT"
if [ "$MODEL" != embedded ]; then
    SMOL_EVAL=runs/empathy-again/evals/base
    [ -f "$SMOL_EVAL/eval.json" ] || { echo "$SMOL_EVAL is missing: run experiments/empathy_warm/again.sh first" >&2; exit 1; }
    if [ -d "$OUT/empathy-sft" ] && [ ! -d "$OUT/empathy-sft/final" ]; then
        mapo sft --resume "$OUT/empathy-sft"
    elif [ ! -d "$OUT/empathy-sft/final" ]; then
        mapo sft --data mapo/data/sft/empathy/train.jsonl --eval-data mapo/data/sft/empathy/heldout.jsonl \
            --set sft.epochs=2 --set sft.lr=5e-4 --set threads=1 --set policy.model="$MODEL" --output "$OUT/empathy-sft"
    fi
    if [ ! -f "$OUT/empathy-eval/eval.json" ]; then
        mapo eval --model "$OUT/empathy-sft/final" --scenarios test --samples 2 --max-turns 13 --max-new-tokens 96 \
            --max-sentences 3 --seed 0 --output "$OUT/empathy-eval"
    fi
    blind=docs/blind/$NAME-vs-smollm2
    if [ ! -d "$blind" ]; then
        mapo compare --blind "$SMOL_EVAL" "$OUT/empathy-eval" --label smollm2 --label "$NAME" --output "$blind"
        mkdir -p runs/blind-keys && mv "$blind/key.json" "runs/blind-keys/$NAME-vs-smollm2.json"
    fi
fi
for table in ${TABLES:-true false}; do
    if [ "$table" = true ]; then plan=table_tight_plan; else plan=hidden_tight_plan; fi
    warm=$OUT/game-warm-table-$table
    [ -f "$warm/warm_start_eval.json" ] || bash experiments/game_table/build_warm_start.sh "$warm" random "$MODEL" "$table"
    mapo ablate --plan "experiments.game_table.plan:$plan" --variant mapo-idr-lr2e-4 --seeds 2 --steps 10 --jobs 2 \
        --set policy.model="$warm/sft/final" --output "$OUT/game-table-$table"
done
