#!/usr/bin/env bash
# The weak warm start of the game in the state view, by one command:
#   bash experiments/game_state/build_warm_start.sh [OUT]          (default runs/game-state-warm)
#   REBUILD=1 bash experiments/game_state/build_warm_start.sh [OUT] [GAMES] [MODEL]   (100, embedded)
# The warm start is committed: experiments/game_state/warm_start/, its LoRA adapter (7.5 MB, on the
# embedded SmolLM2-135M), built by the REBUILD steps below on 2026-12-03 (an Intel Xeon with AMX). By
# default it is put where the plan names its start (OUT/sft/final, a policy.model as it is: the base
# loaded and the adapter merged in, bit-identical to the SFT's own merged model there) and evaluated.
# A warm start rebuilt on another CPU differs in float32's last bits (the AMD EPYC of earlier sessions
# built another whose held-out evaluation was the same, 60 of 160), so every share of the study starts
# from the committed one and pairs by seed with the others.
# REBUILD=1 (a few minutes of games, then about 15 minutes of SFT):
# 1. GAMES games of the random player on the training secrets at the tight setting (pool 8, 5 replies,
#    the replies left shown, the policy reading the state alone): they teach the format (one listed
#    question a reply, "Guess: <name>" once one candidate is left or on the last reply) and how to read
#    the state, not the strategy (the random player asks whatever, splitting or not). Each reply is one
#    record: the state it was chosen in, then the reply.
# 2. `mapo sft` on them, one epoch, LoRA at 1e-3, one CPU thread; its adapter is checked against the
#    committed one (warm_start.sha256).
# Then, either way: the held-out evaluation at the same setting, 20 test secrets x 8 games, the three
# reference players beside it (eval.json's summary.references); OUT/warm_start_eval.json is its summary.
# Resumable: a finished step is skipped, an interrupted SFT resumes from its last checkpoint.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=${1:-runs/game-state-warm}
GAMES=${2:-100}
MODEL=${3:-embedded}
GAME=(--env-option pool_size=8 --env-option max_turns=5 --env-option view=state --env-option show_turns_left=true
      --env-option scoring=forfeit_unsolved)
mkdir -p "$OUT"
if [ "${REBUILD:-0}" = 1 ]; then
    [ -f "$OUT/demos.jsonl" ] || mapo env demos twenty-questions --player random --games "$GAMES" --split train --seed 0 \
        "${GAME[@]}" --out "$OUT/demos.jsonl"
    if [ -d "$OUT/sft" ] && [ ! -d "$OUT/sft/final" ]; then
        mapo sft --resume "$OUT/sft"
    elif [ ! -d "$OUT/sft/final" ]; then
        mapo sft --data "$OUT/demos.jsonl" --set sft.epochs=1 --set sft.lr=1e-3 --set threads=1 --set seed=0 \
            --set policy.model="$MODEL" --output "$OUT/sft"
    fi
    if ! (cd "$OUT/sft/adapter" && sha256sum --quiet -c "$HERE/warm_start.sha256"); then
        echo "note: this rebuilt warm start is not the committed one (another CPU or software): pair its runs only with each other" >&2
    fi
elif [ ! -e "$OUT/sft/final" ]; then
    mkdir -p "$OUT/sft"
    cp -r "$HERE/warm_start" "$OUT/sft/final"
fi
[ -f "$OUT/eval/eval.json" ] || mapo eval --model "$OUT/sft/final" --env twenty-questions --scenarios test --samples 8 \
    --max-turns 5 --seed 0 "${GAME[@]}" --output "$OUT/eval"
python experiments/game_table/summarize.py "$OUT/eval" "$OUT/warm_start_eval.json"
