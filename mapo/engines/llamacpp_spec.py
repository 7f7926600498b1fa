"""The llama.cpp engine's settings (the `rollout.llamacpp` config section) and how they resolve.

`LlamaCppSpec` is the config; `resolve_base_type` and `engine_threads` turn its `auto` and
`idle` values into what the worker runs; `missing_requirement` says why the engine cannot run.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import torch

from mapo.policy import Policy
from mapo.runtime import IDLE, check_threads, usable_cores

SYNC_MODES = ("adapter", "merged")
SOURCE = "source"
AUTO = "auto"
BASE_TYPES = ("F32", "F16", "BF16", "Q8_0")  # Q4_0 re-quantised from Q4_1 weights: KL 0.58 to torch, unusable
MERGED_FROM_SOURCE = (
    "rollout.llamacpp.sync=merged with base_type=source would re-quantise the merged weights to the shipped "
    "file's 4-bit types after every step, so small updates vanish and the engine lags the trainer; set "
    "rollout.llamacpp.base_type to F16 (what torch computes), Q8_0 or F32"
)
# what the engine writes into its working folder; a killed run's leftovers are removed at start
WORKDIR_FILES = ("base.gguf", "adapter-*.gguf", "model-*.gguf", "*.tmp")


@dataclass
class LlamaCppSpec:
    """The llama.cpp engine's knobs (the `rollout.llamacpp` config section)."""

    # sequences decode on this many threads; None: the count from 1 to every core the process may use
    # that decodes fastest, measured as it decodes (mapo.engines.llamacpp_decoder.ThreadTuner);
    # "idle": the cores idle right now, per request (for a shared CPU: a thread more than the idle
    # cores stalls every barrier, 2 threads on 2 busy cores decoded 10x slower than 1 there)
    threads: int | str | None = None
    sync: str = "adapter"  # adapter: LoRA as a GGUF adapter | merged: whole model in base_type, reloaded
    # the base model llama.cpp runs: "source" = the policy's GGUF file as shipped, or a tensor
    # type (F16, BF16, Q8_0, F32) to write from the torch weights; "auto" = BF16 when the policy
    # computes in bfloat16 (bf16-mixed: BF16 decodes faster and its KL to that policy is F16's),
    # else F16 (KL 1e-5 to a float32 policy on SmolLM2; BF16 20x more). docs/engines.md
    base_type: str = AUTO
    batch_tokens: int = 512  # ids per llama_decode call while prefilling
    timeout_s: float = 900.0  # a request unanswered this long counts as a dead worker

    def __post_init__(self) -> None:
        if self.sync not in SYNC_MODES:
            raise ValueError(f"rollout.llamacpp.sync must be one of {', '.join(SYNC_MODES)}, got {self.sync!r}")
        if self.base_type not in (AUTO, SOURCE, *BASE_TYPES):
            raise ValueError(
                f"rollout.llamacpp.base_type must be {AUTO!r}, {SOURCE!r} or one of {', '.join(BASE_TYPES)}, got {self.base_type!r}"
            )
        if self.sync == "merged" and self.base_type == SOURCE:
            raise ValueError(MERGED_FROM_SOURCE)
        check_threads(self.threads, "rollout.llamacpp.threads")
        if self.batch_tokens < 1 or not self.timeout_s > 0:
            raise ValueError("rollout.llamacpp.batch_tokens must be >= 1 and timeout_s > 0")


def resolve_base_type(base_type: str, policy: Policy) -> str:
    """The base type to run: as configured, or for `auto` BF16 under a bfloat16-computing policy, else F16."""
    if base_type != AUTO:
        return base_type
    return "BF16" if policy.compute_dtype is torch.bfloat16 else "F16"


def engine_threads(threads: int | str | None) -> int:
    """The threads of one request: as configured, every usable core (None), or the idle ones (`idle`)."""
    if threads is None:
        return usable_cores()
    return idle_cores() if threads == IDLE else int(threads)


def idle_cores() -> int:
    """Usable CPU cores not running anything else right now (at least 1): cores - (running threads - this one)."""
    cores = usable_cores()
    try:
        running = int(Path("/proc/loadavg").read_text().split()[3].split("/")[0])
    except (OSError, IndexError, ValueError):
        running = int(os.getloadavg()[0] + 0.5) + 1
    return max(1, min(cores, cores - (running - 1)))


def missing_requirement() -> str | None:
    """Why the engine cannot run here (a message), or None when it can."""
    import importlib.util

    if importlib.util.find_spec("llama_cpp") is None:
        return "llama-cpp-python is not installed (pip install 'llama-cpp-python>=0.3', or scripts/install.sh)"
    return None


def remove_leftovers(workdir: Path) -> None:
    """Delete the weight files (and half-written .tmp files) an engine left in `workdir`."""
    for pattern in WORKDIR_FILES:
        for path in Path(workdir).glob(pattern):
            path.unlink(missing_ok=True)
    shutil.rmtree(Path(workdir) / "tokenizer", ignore_errors=True)
