"""Where the policy runs and in what precision (`policy.device`, `policy.dtype`).

`policy.dtype` names the weights' dtype and, with `bf16-mixed`, a compute dtype:

- `float32`, `bfloat16`: weights and arithmetic in that dtype;
- `bf16-mixed`: float32 weights (so float32 master weights and optimizer state for
  the trained parameters) with forward passes under bfloat16 autocast;
- `auto`: on a GPU bfloat16 weights with SDPA attention (FlashAttention 2 when the
  `flash_attn` package is installed); on a CPU with native bfloat16 arithmetic
  (avx512_bf16 or AMX) that is faster than its float32 (`cpu_bf16_support`) `bf16-mixed`;
  on any other CPU float32.
"""

from __future__ import annotations

import functools
import importlib.util
import re
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

import torch

AUTO = "auto"
MIXED = "bf16-mixed"
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
CPU_BF16_FLAGS = ("avx512_bf16", "amx_bf16")  # /proc/cpuinfo flags of native bfloat16 dot products
BF16_MIN_SPEEDUP = 1.3  # bfloat16 matmul over float32 below which autocast is not worth its rounding
_DEVICE = re.compile(r"^(auto|cpu|cuda(:\d+)?)$")


@dataclass(frozen=True)
class Precision:
    """The weights' dtype, the autocast dtype of forward passes (None: none), and why."""

    weights: torch.dtype
    compute: torch.dtype | None
    reason: str

    def describe(self) -> str:
        weights = str(self.weights).removeprefix("torch.")
        if self.compute is None:
            return f"{weights} ({self.reason})"
        return f"{str(self.compute).removeprefix('torch.')} autocast over {weights} weights ({self.reason})"

    @property
    def name(self) -> str:
        """The `policy.dtype` value that gives exactly this precision (what `auto` chose, pinned)."""
        if self.compute is not None:
            return MIXED
        return next(name for name, dtype in DTYPES.items() if dtype == self.weights)


def cpu_flags(path: Path = Path("/proc/cpuinfo")) -> set[str]:
    """The CPU feature flags the kernel reports (empty where there is no /proc/cpuinfo)."""
    try:
        text = path.read_text()
    except OSError:
        return set()
    for line in text.splitlines():
        if line.startswith("flags"):
            return set(line.partition(":")[2].split())
    return set()


def torch_cpu_bf16() -> bool:
    """Whether torch's own probes find bfloat16 support on this CPU (its native-instruction probes
    where this torch has them, else oneDNN's bfloat16 check)."""
    native = [getattr(torch._C._cpu, name, None) for name in ("_is_avx512_bf16_supported", "_is_amx_tile_supported")]
    found = [bool(probe()) for probe in native if probe is not None]
    if found:
        return any(found)
    try:
        return bool(torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


@functools.cache
def bf16_matmul_speedup(n: int = 512, pairs: int = 5, seconds: float = 0.04) -> float:
    """bfloat16 over float32 matmul throughput on this CPU with torch's threads: the median of
    `pairs` back-to-back pairs (a busy moment slows both sides of a pair), measured once per process."""
    a32, b32 = torch.randn(n, n), torch.randn(n, n)
    a16, b16 = a32.bfloat16(), b32.bfloat16()

    def rate(a: torch.Tensor, b: torch.Tensor) -> float:
        count, start = 0, time.perf_counter()
        while (elapsed := time.perf_counter() - start) < seconds:
            torch.mm(a, b)
            count += 1
        return count / elapsed

    rate(a16, b16), rate(a32, b32)  # warm-up: kernel selection, weight packing
    return statistics.median(rate(a16, b16) / rate(a32, b32) for _ in range(pairs))


def cpu_bf16_support() -> tuple[bool, str]:
    """(bfloat16 pays off on this CPU, why): the kernel's flags and torch's probe must report native
    bfloat16, and a bfloat16 matmul must beat float32 by BF16_MIN_SPEEDUP measured here.

    Native instructions are not enough: a CPU whose avx512_bf16 runs at half rate (one of the
    machines this was built on) made a SmolLM2 update 2x slower under bfloat16 autocast.
    """
    flags = sorted(set(CPU_BF16_FLAGS) & cpu_flags())
    if not flags:
        return False, f"this CPU reports none of {', '.join(CPU_BF16_FLAGS)}"
    if not torch_cpu_bf16():
        return False, f"the CPU reports {', '.join(flags)} but torch finds no bfloat16 support"
    speedup = bf16_matmul_speedup()
    if speedup < BF16_MIN_SPEEDUP:
        return False, f"the CPU has {', '.join(flags)} but a bfloat16 matmul ran {speedup:.2f}x float32's speed here"
    return True, f"this CPU has native bfloat16 ({', '.join(flags)}), a matmul {speedup:.2f}x float32's speed"


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


def resolve_precision(name: str, device: torch.device) -> Precision:
    """What `policy.dtype: name` means on `device` (module docstring); a clear error for an unknown name."""
    if name == AUTO:
        if device.type == "cuda":
            return Precision(torch.bfloat16, None, "policy.dtype auto on a GPU")
        native, why = cpu_bf16_support()
        if native:
            return Precision(torch.float32, torch.bfloat16, f"policy.dtype auto: {why}")
        return Precision(torch.float32, None, f"policy.dtype auto: {why}")
    if name == MIXED:
        return Precision(torch.float32, torch.bfloat16, f"policy.dtype {MIXED}")
    if name not in DTYPES:
        raise ValueError(f"policy.dtype: {name!r} is not one of auto, {MIXED}, {', '.join(DTYPES)}")
    return Precision(DTYPES[name], None, f"policy.dtype {name}")


def resolve_dtype(name: str, device: torch.device) -> torch.dtype:
    """The weights' dtype `policy.dtype: name` gives on `device` (resolve_precision)."""
    return resolve_precision(name, device).weights


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
