"""What a decode step could cost at best on this machine: the roofline of its weights' matmuls.

One decode step of b sequences multiplies every weight matrix by b vectors: 2 x params x b
FLOPs, and reads every weight once (the GGUF file's bytes: with tied embeddings, as in
SmolLM2, the output projection reads the whole embedding matrix). Its best time is the larger
of the FLOPs over the measured matmul peak and the bytes over the measured memory bandwidth;
the bound in tokens/s is b over that time. Attention over the cached ids is not counted (about
a tenth of the FLOPs at a few hundred ids), so the bound is a little high and the fraction of it
reached a little low.
"""

from __future__ import annotations

import time

import torch

from mapo.lab.bench.mfu import matmul_gflops


def memory_gb_s(megabytes: int = 256, repeats: int = 5) -> float:
    """Sustained memory bandwidth in GB/s: the best of `repeats` copies of a `megabytes` buffer
    (read + write counted), on torch's threads."""
    source = torch.ones(megabytes * (1 << 20) // 4)
    target = torch.empty_like(source)
    best = float("inf")
    for _ in range(repeats):
        began = time.perf_counter()
        target.copy_(source)
        best = min(best, time.perf_counter() - began)
    return 2 * source.numel() * 4 / best / 1e9


def machine_limits(seconds: float = 1.0) -> dict[str, float]:
    """This machine's bfloat16 and float32 matmul peaks (GFLOP/s, best of two 1024-square runs) and
    memory bandwidth (GB/s), measured now with torch's threads."""
    return {
        "matmul_peak_bf16_gflops": max(matmul_gflops(torch.bfloat16, 1024, seconds) for _ in range(2)),
        "matmul_peak_fp32_gflops": max(matmul_gflops(torch.float32, 1024, seconds) for _ in range(2)),
        "memory_gb_s": memory_gb_s(),
    }


def decode_bound(params: int, weight_bytes: int, rows: float, peak_gflops: float, memory_gb_s: float) -> dict[str, float]:
    """The best decode rate at `rows` sequences a step: its step time and tokens/s, and which limit binds."""
    compute_s = 2.0 * params * rows / (peak_gflops * 1e9)
    memory_s = weight_bytes / (memory_gb_s * 1e9)
    step_s = max(compute_s, memory_s)
    return {
        "rows": rows,
        "compute_s": compute_s,
        "memory_s": memory_s,
        "bound_step_s": step_s,
        "bound_tokens_per_s": rows / step_s,
        "bound_by": "compute" if compute_s >= memory_s else "memory",
    }
