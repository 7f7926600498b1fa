"""Is bfloat16 autocast faster than float32 on this CPU? Paired, back-to-back measurements.

The bf16/fp32 matmul ratio `policy.dtype: auto` decides with (mapo.device.bf16_matmul_speedup),
then a LoRA forward + backward of the default policy (SmolLM2-135M, top 12 layers) over
4 sequences, float32 and bf16-mixed alternating in one process; the median of the
per-pair ratios is the figure (a busy moment slows both sides of a pair).

    PYTHONPATH=. python scripts/bf16_speed.py [--threads 2] [--length 256] [--pairs 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch

from mapo.config import load_config
from mapo.device import bf16_matmul_speedup
from mapo.policy import load_policy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument("--length", type=int, default=256)
    parser.add_argument("--pairs", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"{args.threads} threads; matmul bf16/fp32 {bf16_matmul_speedup():.2f}x", flush=True)
    policy = load_policy(load_config(None, ["policy.dtype=float32"]).policy)
    ids = torch.randint(0, len(policy.tokenizer), (4, args.length), generator=torch.Generator().manual_seed(0))
    targets = torch.zeros_like(ids, dtype=torch.bool)
    targets[:, args.length // 2 :] = True

    def step(dtype: torch.dtype | None) -> float:
        policy.set_compute_dtype(dtype)
        start = time.perf_counter()
        logp, _ = policy.token_logprobs(ids, torch.ones_like(ids), targets)
        logp.sum().backward()
        policy.model.zero_grad(set_to_none=True)
        return time.perf_counter() - start

    step(torch.bfloat16), step(None)  # warm-up
    pairs = [(step(None), step(torch.bfloat16)) for _ in range(args.pairs)]
    for fp32, bf16 in pairs:
        print(f"float32 {fp32:.2f} s  bf16-mixed {bf16:.2f} s  ratio {fp32 / bf16:.2f}x")
    print(f"forward+backward bf16-mixed speedup (median of pairs): {statistics.median(f / b for f, b in pairs):.2f}x")


if __name__ == "__main__":
    main()
