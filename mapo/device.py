"""Where the policy runs and in what precision (`policy.device`, `policy.dtype`).

`auto` keeps the CPU path exactly as it always was (float32, transformers' default
attention) and, when CUDA is present, picks the GPU, bfloat16 weights and SDPA
attention (FlashAttention 2 when the `flash_attn` package is installed).
"""

from __future__ import annotations

import importlib.util
import re

import torch

AUTO = "auto"
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
_DEVICE = re.compile(r"^(auto|cpu|cuda(:\d+)?)$")


def resolve_device(name: str) -> torch.device:
    """`auto` (CUDA when present, else CPU), `cpu`, `cuda` or `cuda:N`; a clear error when absent."""
    if not _DEVICE.match(name):
        raise ValueError(f"policy.device: {name!r} is not one of auto, cpu, cuda, cuda:N")
    if name == AUTO:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"policy.device: {name!r} but this torch build sees no CUDA GPU; use cpu or auto")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise ValueError(f"policy.device: {name!r} but only {torch.cuda.device_count()} GPU(s) are visible")
    return device


def resolve_dtype(name: str, device: torch.device) -> torch.dtype:
    """`auto`: bfloat16 on a GPU, float32 on a CPU (its fast path here); or the named dtype."""
    if name == AUTO:
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    if name not in DTYPES:
        raise ValueError(f"policy.dtype: {name!r} is not one of auto, {', '.join(DTYPES)}")
    return DTYPES[name]


def attention_implementation(device: torch.device, dtype: torch.dtype) -> str | None:
    """The attention kernel to ask transformers for; None leaves its CPU default untouched."""
    if device.type != "cuda":
        return None
    if dtype in (torch.bfloat16, torch.float16) and importlib.util.find_spec("flash_attn") is not None:
        return "flash_attention_2"
    return "sdpa"


def model_device(model: torch.nn.Module) -> torch.device:
    """The device of a model's first parameter (the whole model lives on one device here)."""
    return next(model.parameters()).device
