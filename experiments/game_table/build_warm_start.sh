#!/usr/bin/env bash
# The weak warm start of the game with the table in view (issue 56 item 4), rebuilt by one command:
#   bash experiments/game_table/build_warm_start.sh [OUT] [PLAYER] [MODEL] [SHOW_TABLE]
#   (defaults: runs/game-table-warm, random, embedded, true; PLAYER informative: the imitation reference, a
#   start that has seen a splitting player's games; MODEL any policy.model, e.g. gemma3-270m, docs/models.md;
#   SHOW_TABLE false: the same games with the table hidden, the start of `hidden_tight_plan`)
# 1. 160 games of the random player on the training secrets, at the tight budget (pool 8, 5 replies),
#    the table and the replies left shown: they teach the format (one listed question a reply,
#    "Guess: <name>" once one candidate is left or on the last reply) and the table's reading,
#    not the strategy (the random player asks whatever, splitting or not);
# 2. `mapo sft` on them (one epoch: 18 steps of 8 games, 16 held out for the loss; LoRA at 1e-3,
#    one CPU thread: about 10 minutes on a free core);
# 3. the held-out evaluation at the same setting: 20 test secrets x 8 games, with the three
#    reference players beside it (eval.json's summary.references).
# The model is not committed: this rebuilds it; OUT/warm_start_eval.json is the evaluation's summary
# (summarize.py), committed as experiments/game_table/warm_start_eval.json.
set -euo pipefail
OUT=${1:-runs/game-table-warm}
PLAYER=${2:-random}
MODEL=${3:-embedded}
SHOW_TABLE=${4:-true}
GAME=(--env-option pool_size=8 --env-option max_turns=5 --env-option show_table="$SHOW_TABLE" --env-option show_turns_left=true
      --env-option forfeit_on_failure=true --env-option forfeit_on_timeout=true)
mkdir -p "$OUT"
# Resumable: a finished step is skipped, an interrupted SFT resumes from its last checkpoint.
[ -f "$OUT/demos.jsonl" ] || mapo env demos twenty-questions --player "$PLAYER" --games 160 --split train --seed 0 "${GAME[@]}" \
    --out "$OUT/demos.jsonl"
if [ -d "$OUT/sft" ] && [ ! -d "$OUT/sft/final" ]; then
    mapo sft --resume "$OUT/sft"
elif [ ! -d "$OUT/sft/final" ]; then
    mapo sft --data "$OUT/demos.jsonl" --set sft.epochs=1 --set sft.lr=1e-3 --set threads=1 --set seed=0 --set policy.model="$MODEL" \
        --output "$OUT/sft"
fi
[ -f "$OUT/eval/eval.json" ] || mapo eval --model "$OUT/sft" --env twenty-questions --scenarios test --samples 8 --max-turns 5 --seed 0 \
    "${GAME[@]}" --output "$OUT/eval"
python experiments/game_table/summarize.py "$OUT/eval" "$OUT/warm_start_eval.json"
