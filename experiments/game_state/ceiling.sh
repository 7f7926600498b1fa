#!/usr/bin/env bash
# Imitation's ceiling in the questioning game: the same optimal-player games learned twice, once in
# the state view (each reply a record: the state it was chosen in, then the reply) and once in the
# transcript view (each game a record, the table in view), then both evaluated held out beside the
# three reference players, so what the policy is taught and what it reads come apart.
#   bash experiments/game_state/ceiling.sh [OUT] [GAMES] [EPOCHS]   (defaults: runs/ceiling, 300, 1)
# Resumable: a finished step is skipped, an interrupted SFT resumes from its last checkpoint.
set -euo pipefail
OUT=${1:-runs/ceiling}
GAMES=${2:-300}
EPOCHS=${3:-1}
GAME=(--env-option pool_size=8 --env-option max_turns=5 --env-option show_turns_left=true
      --env-option scoring=forfeit_unsolved)
mkdir -p "$OUT"
run_view() {  # $1: state | transcript (the game's view: state, or table with the whole transcript)
    local name=$1 view=$1
    [ "$view" = transcript ] && view=table
    [ -f "$OUT/demos-$name.jsonl" ] || mapo env demos twenty-questions --player optimal --games "$GAMES" --split train \
        --seed 0 "${GAME[@]}" --env-option view="$view" --out "$OUT/demos-$name.jsonl"
    if [ -d "$OUT/sft-$name" ] && [ ! -d "$OUT/sft-$name/final" ]; then
        mapo sft --resume "$OUT/sft-$name"
    elif [ ! -d "$OUT/sft-$name/final" ]; then
        mapo sft --data "$OUT/demos-$name.jsonl" --set sft.epochs="$EPOCHS" --set sft.lr=1e-3 --set threads=1 --set seed=0 \
            --output "$OUT/sft-$name"
    fi
    [ -f "$OUT/eval-$name/eval.json" ] || mapo eval --model "$OUT/sft-$name" --env twenty-questions --scenarios test \
        --samples 8 --max-turns 5 --seed 0 "${GAME[@]}" --env-option view="$view" --output "$OUT/eval-$name"
}
run_view state > "$OUT/state.log" 2>&1 &
run_view transcript > "$OUT/transcript.log" 2>&1 &
wait
