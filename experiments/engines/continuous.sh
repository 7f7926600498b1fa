#!/usr/bin/env bash
# vLLM's continuous batching against its waves and hf, on a quiet machine (nothing else running):
#   bash experiments/engines/continuous.sh [OUT]   (default: docs/bench)
# 1. the default workload (16 dialogues x 3 turns, the config's 96-token cap, 3 sentences, T 0.7);
# 2. the game as the study trains it (--config twenty-questions: pool 8, 5 replies, the state view).
# Each is one `mapo bench rollout`, modes alternated over 2 repeats: hf, vllm (continuous), vllm-waves.
set -euo pipefail
OUT=${1:-docs/bench}
mkdir -p "$OUT"
mapo bench rollout --no-sequential --repeats 2 --output runs/bench-continuous-default
cp runs/bench-continuous-default/*.json "$OUT/rollout-default-continuous.json"
mapo bench rollout --no-sequential --repeats 2 --config twenty-questions --output runs/bench-continuous-game
cp runs/bench-continuous-game/*.json "$OUT/rollout-game-continuous.json"
