#!/usr/bin/env bash
# The default `mapo train` (10 steps, engine start included) on the llama.cpp engine against vLLM,
# alternated twice on one machine (docs/results.md, 2026-12-01). The llama.cpp side runs the tree
# from before vLLM replaced it, checked out beside this one; one virtualenv holds both engines
# (scripts/install.sh, then pip install 'llama-cpp-python>=0.3').
#
#   git worktree add /tmp/llamacpp-tree d189686
#   bash experiments/engines/train_time.sh /tmp/llamacpp-tree runs/train-time
set -euo pipefail
OLD=${1:?the tree before vLLM (git worktree add DIR d189686)}
OUT=${2:-runs/train-time}
NEW=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$OUT"
export HF_HUB_OFFLINE=1
for round in 1 2; do
  for engine in llamacpp vllm; do
    tree=$NEW; [ "$engine" = llamacpp ] && tree=$OLD
    run=$(realpath -m "$OUT/$engine-$round"); rm -rf "$run"
    start=$(date +%s.%N)
    (cd "$tree" && PYTHONPATH="$tree" python -c "import sys; from mapo.cli import main; sys.argv = ['mapo', 'train', '--output', sys.argv[1]]; main()" "$run") > "$run.log" 2>&1
    echo "$engine round $round: $(echo "$(date +%s.%N) - $start" | bc) s" | tee -a "$OUT/summary.txt"
  done
done
