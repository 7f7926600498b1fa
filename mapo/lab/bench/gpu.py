"""`mapo bench gpu`: rollout and update throughput of random-init models on one device.

Per model shape (`random:<shape>`, mapo/data/shapes: SmolLM2-135M and Qwen2.5-1.5B by
default; weights are random, only the shapes matter for speed), in one process:

- rollout tokens/s: `contexts` dialogue prompts sampled in one batched `generate`
  call, and the same prompts one at a time (their ratio is the batching gain);
- update tokens/s: the trainer's `update` over `sequences` packed sequences of
  `length` tokens, half of each trained (the usual loss path);
- MFU: FLOPs of one update counted by torch's FlopCounterMode, per second, over the
  bf16 (the policy's dtype) matmul peak measured in the same run;
- peak device memory of the shape's whole run (loading, rollout, update).

On a CPU the same code runs (tests use a tiny shape); peak memory is then not measured.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch.utils.flop_counter import (
    FlopCounterMode,
    sdpa_backward_flop_count,
    sdpa_flop_count,
)

from mapo.config import TrainConfig
from mapo.device import resolve_device, resolve_dtype
from mapo.engines.hf import HfEngine
from mapo.lab.bench.mfu import model_parameters, synthetic_sequences
from mapo.policy import Policy

SHAPES = ("smollm2-135m", "qwen2.5-1.5b")
PROMPT = "I lost my job last week and I keep telling myself it does not matter, but I cannot sleep."


_aten = torch.ops.aten
# the position of `is_causal` in each CUDA attention kernel's arguments (forward, then backward)
_CAUSAL_ARGUMENT = {
    _aten._scaled_dot_product_flash_attention: 4,
    _aten._scaled_dot_product_efficient_attention: 6,
    _aten._scaled_dot_product_cudnn_attention: 6,
    _aten._scaled_dot_product_flash_attention_backward: 11,
    _aten._scaled_dot_product_efficient_attention_backward: 11,
    _aten._scaled_dot_product_cudnn_attention_backward: 14,
}


def _attention_flops(op: Any) -> Callable[..., int]:
    """A FLOP formula for a CUDA attention kernel that, unlike torch's own, accepts grouped-query
    heads (keys/values shared by several query heads) and halves a causal kernel's count (it
    skips the masked upper triangle)."""
    index, backward = _CAUSAL_ARGUMENT[op], str(op).endswith("_backward")

    def formula(*args: Any, out_shape: Any = None, **kwargs: Any) -> int:
        causal = bool(kwargs.get("is_causal", args[index] if len(args) > index else False))
        grad, (q, k, v) = (args[0], args[1:4]) if backward else (None, args[:3])
        k, v = (*k[:1], q[1], *k[2:]), (*v[:1], q[1], *v[2:])  # the work done per query head
        flops = sdpa_backward_flop_count(grad, q, k, v) if backward else sdpa_flop_count(q, k, v)
        return flops // 2 if causal else flops

    return formula


ATTENTION_FLOPS = {op: _attention_flops(op) for op in _CAUSAL_ARGUMENT}


def counted_flops(step: Callable[[], Any]) -> int:
    """FLOPs `step()` performs (matmuls and attention, forward and backward)."""
    with FlopCounterMode(display=False, custom_mapping=ATTENTION_FLOPS) as counter:
        step()
    return int(counter.get_total_flops())


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(step: Callable[[], Any], device: torch.device, repeats: int) -> tuple[float, Any]:
    """Fastest of `repeats` calls of `step()` (the device drained before and after) and its last result."""
    best, result = float("inf"), None
    for _ in range(repeats):
        synchronize(device)
        start = time.perf_counter()
        result = step()
        synchronize(device)
        best = min(best, time.perf_counter() - start)
    return best, result


def matmul_peak(dtype: torch.dtype, device: torch.device, sizes: tuple[int, ...], repeats: int = 10) -> float:
    """Best GFLOP/s of n x n @ n x n products over `sizes` on `device` (2 n^3 FLOPs each)."""
    best = 0.0
    for n in sizes:
        a = torch.randn(n, n, device=device).to(dtype)
        b = torch.randn(n, n, device=device).to(dtype)
        a @ b  # warm-up: kernel selection off the clock
        seconds, _ = timed(functools.partial(_products, a, b, repeats), device, 3)
        best = max(best, 2.0 * n**3 * repeats / seconds / 1e9)
    return best


def _products(a: torch.Tensor, b: torch.Tensor, count: int) -> None:
    for _ in range(count):
        a @ b


def rollout_speed(policy: Policy, contexts: int, new_tokens: int, repeats: int) -> dict[str, float]:
    """Generated tokens/s of one batched `sample` call over `contexts` prompts, and one at a time."""
    prompts = [policy.first_prompt_ids("You are a caring listener.", f"{PROMPT} ({k})") for k in range(contexts)]
    HfEngine(policy).sample(prompts[:2], 4)  # first-call overheads (kernels, allocator) off the clock
    rows = {}
    for mode, batches in (("batched", [prompts]), ("sequential", [[p] for p in prompts])):
        step = functools.partial(_sample_all, policy, batches, new_tokens)
        seconds, samples = timed(step, policy.device, repeats)
        tokens = sum(len(s.ids) for s in samples)
        rows[mode] = {"generated_tokens": float(tokens), "seconds": seconds, "tokens_per_s": tokens / seconds}
    return {
        "rollout_tokens_per_s": rows["batched"]["tokens_per_s"],
        "sequential_tokens_per_s": rows["sequential"]["tokens_per_s"],
        "batched_over_sequential": rows["batched"]["tokens_per_s"] / rows["sequential"]["tokens_per_s"],
    }


def _sample_all(policy: Policy, batches: list[list[list[int]]], new_tokens: int) -> list[Any]:
    return [sample for batch in batches for sample in HfEngine(policy).sample(batch, new_tokens)]


def update_speed(policy: Policy, config: TrainConfig, sequences: int, length: int, repeats: int) -> dict[str, float]:
    """Trained tokens/s of the trainer's `update` and its counted FLOPs per second."""
    from mapo.core.update import make_optimizer, update

    seqs = synthetic_sequences(policy, sequences, length, config.seed)
    optimizer = make_optimizer(policy, config.optim)
    optim = dataclasses.replace(config.optim, ppo_epochs=1, minibatches=1)
    step = functools.partial(update, policy, optimizer, seqs, optim, config.loss)
    flops = counted_flops(step)  # also the warm-up pass
    seconds, _ = timed(step, policy.device, repeats)
    tokens = sequences * length
    return {"update_tokens_per_s": tokens / seconds, "update_seconds": seconds, "model_gflops": flops / seconds / 1e9}


def bench_shape(
    config: TrainConfig, shape: str, contexts: int, new_tokens: int, sequences: int, length: int, repeats: int
) -> dict[str, float]:
    from mapo.policy import load_policy

    spec = dataclasses.replace(config.policy, model=f"random:{shape}")
    device = resolve_device(spec.device)
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
    policy = load_policy(spec, seed=config.seed)
    row: dict[str, float] = {"params_millions": model_parameters(policy) / 1e6}
    row.update(rollout_speed(policy, contexts, new_tokens, repeats))
    row.update(update_speed(policy, config, sequences, length, repeats))
    row["peak_memory_gib"] = torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else float("nan")
    del policy
    return row


def bench_gpu(
    config: TrainConfig,
    shapes: tuple[str, ...] = SHAPES,
    contexts: int = 16,
    new_tokens: int = 64,
    sequences: int = 8,
    length: int = 1024,
    repeats: int = 3,
) -> dict[str, Any]:
    """Per shape: rollout and update tokens/s, MFU against the measured matmul peak, peak memory."""
    from mapo.model_source import shape_config

    for shape in shapes:
        shape_config(shape)  # an unknown shape fails before anything slow
    device = resolve_device(config.policy.device)
    dtype = resolve_dtype(config.policy.dtype, device)
    peak_sizes = (4096, 8192) if device.type == "cuda" else (256, 512)  # a CPU's peak is reached early
    peak = matmul_peak(dtype, device, peak_sizes)
    modes = {shape: bench_shape(config, shape, contexts, new_tokens, sequences, length, repeats) for shape in shapes}
    peak = max(peak, matmul_peak(dtype, device, peak_sizes))  # again after: a busy moment must not inflate MFU
    for row in modes.values():
        row["matmul_peak_gflops"] = peak
        row["mfu"] = row["model_gflops"] / peak
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    return {
        "device": name,
        "settings": {
            "dtype": str(dtype).removeprefix("torch."), "contexts": contexts, "new_tokens": new_tokens,
            "sequences": sequences, "length": length, "repeats": repeats, "lora": config.policy.lora.enabled,
            "lora_top_layers": config.policy.lora.top_layers, "torch": torch.__version__,
        },
        "modes": modes,
        "ratios": {f"batched_over_sequential_{shape}": row["batched_over_sequential"] for shape, row in modes.items()},
        "mfu_mean": float(np.mean([row["mfu"] for row in modes.values()])),
    }


COLUMNS = [
    ("params_millions", "params (M)", "{:.0f}"),
    ("rollout_tokens_per_s", "rollout tok/s", "{:.0f}"),
    ("batched_over_sequential", "batched / sequential", "{:.1f}x"),
    ("update_tokens_per_s", "update tok/s", "{:.0f}"),
    ("model_gflops", "counted GFLOP/s", "{:.0f}"),
    ("mfu", "MFU (vs measured peak)", "{:.1%}"),
    ("peak_memory_gib", "peak memory (GiB)", "{:.1f}"),
]


def markdown(results: dict[str, Any]) -> str:
    """The table docs/gpu.md shows, with the device and settings it was measured with."""
    header = "| shape | " + " | ".join(h for _, h, _ in COLUMNS) + " |"
    rule = "|---|" + "---:|" * len(COLUMNS)
    rows = []
    for shape, row in results["modes"].items():
        cells = [fmt.format(row[key]) for key, _, fmt in COLUMNS]
        rows.append(f"| {shape} | " + " | ".join(cells) + " |")
    peak = next(iter(results["modes"].values()))["matmul_peak_gflops"] / 1000
    s = results["settings"]
    return (
        f"Device: {results['device']}; {s['dtype']} matmul peak measured in the same run {peak:.1f} TFLOP/s; "
        f"torch {s['torch']}; rollout {s['contexts']} prompts x {s['new_tokens']} new tokens; update "
        f"{s['sequences']} sequences x {s['length']} tokens (half trained); LoRA {s['lora']} "
        f"(top layers {s['lora_top_layers']}); best of {s['repeats']}.\n\n" + "\n".join([header, rule, *rows]) + "\n"
    )
