#!/usr/bin/env bash
# The weak warm start of the game in the state view, by one command:
#   bash experiments/game_state/build_warm_start.sh [OUT] [GAMES] [MODEL]
#   (defaults: runs/game-state-warm, 100, embedded)
# 1. GAMES games of the random player on the training secrets at the tight setting (pool 8, 5 replies,
#    the replies left shown, the policy reading the state alone): they teach the format (one listed
#    question a reply, "Guess: <name>" once one candidate is left or on the last reply) and how to read
#    the state, not the strategy (the random player asks whatever, splitting or not). Each reply is one
#    record: the state it was chosen in, then the reply.
# 2. `mapo sft` on them, one epoch, LoRA at 1e-3, one CPU thread.
# 3. The held-out evaluation at the same setting, 20 test secrets x 8 games, the three reference players
#    beside it (eval.json's summary.references); OUT/warm_start_eval.json is its summary.
# Resumable: a finished step is skipped, an interrupted SFT resumes from its last checkpoint.
# The model is not committed (the tracked tree's 32 MiB would not hold its 7.8 MB adapter): rebuilt on the
# project's AMD EPYC it is bit-identical (it evaluated exactly as the committed summary on 2026-12-01 and
# 12-02; its model.safetensors' SHA-256, recorded since, is warm_start.sha256, checked below), so shares of
# the study run there pair by seed;
# a rebuild on another CPU differs in float32's last bits, and `mapo ablate --export` refuses to pair a
# seed's runs across two starts. Its evaluation moved when the rollout became continuous (12-02): 36.9 %
# (59 of 160) in waves, 37.5 % (60 of 160) continuously, the same model.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=${1:-runs/game-state-warm}
GAMES=${2:-100}
MODEL=${3:-embedded}
GAME=(--env-option pool_size=8 --env-option max_turns=5 --env-option view=state --env-option show_turns_left=true
      --env-option scoring=forfeit_unsolved)
mkdir -p "$OUT"
[ -f "$OUT/demos.jsonl" ] || mapo env demos twenty-questions --player random --games "$GAMES" --split train --seed 0 \
    "${GAME[@]}" --out "$OUT/demos.jsonl"
if [ -d "$OUT/sft" ] && [ ! -d "$OUT/sft/final" ]; then
    mapo sft --resume "$OUT/sft"
elif [ ! -d "$OUT/sft/final" ]; then
    mapo sft --data "$OUT/demos.jsonl" --set sft.epochs=1 --set sft.lr=1e-3 --set threads=1 --set seed=0 \
        --set policy.model="$MODEL" --output "$OUT/sft"
fi
if ! (cd "$OUT/sft/final" && sha256sum --quiet -c "$HERE/warm_start.sha256"); then
    echo "note: this warm start is not the recorded one (another CPU or software): pair its runs only with each other" >&2
fi
[ -f "$OUT/eval/eval.json" ] || mapo eval --model "$OUT/sft" --env twenty-questions --scenarios test --samples 8 \
    --max-turns 5 --seed 0 "${GAME[@]}" --output "$OUT/eval"
python experiments/game_table/summarize.py "$OUT/eval" "$OUT/warm_start_eval.json"
