"""`mapo bench mfu`: training tokens/s against the machine's own matmul peak, fp32 and bf16.

Per dtype, in one process: the matmul peak (GFLOP/s of a square n x n matmul, the
best this CPU does with torch's threads) and the trainer's `update` over
`sequences` packed sequences of `length` tokens. The FLOPs of an update are counted,
not estimated: torch's FlopCounterMode records every matmul and attention kernel of
one update (forward and backward), so LoRA's skipped weight gradients and the LM head
applied to trained positions only are reflected. MFU is those FLOPs per second over the
peak. The textbook 6 x params x tokens figure is reported beside it for comparison;
with LoRA it overstates the work done by about 2x.

Both the peak and the update time are the best of several samples, so a busy moment on a
shared machine inflates neither side of the ratio.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from typing import Any

import numpy as np
import torch
from torch.utils.flop_counter import (
    FlopCounterMode,
    flop_registry,
    register_flop_formula,
    sdpa_backward_flop_count,
    sdpa_flop_count,
)

from mapo.config import TrainConfig
from mapo.core.losses import TrainSequence, collate
from mapo.policy import Policy

# policy.dtype -> the dtype its matmuls run in (bf16-mixed: bfloat16 autocast over float32 weights)
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "bf16-mixed": torch.bfloat16}

# torch counts the CUDA attention kernels but not the CPU one transformers' SDPA runs here;
# same work, so the same formulas (torch's own, grouped-query heads included), halved when the
# kernel is causal: it skips the masked upper triangle (torch's CUDA formulas do not halve,
# which would overstate MFU).
_CPU_ATTENTION = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
_CPU_ATTENTION_BACKWARD = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward
if _CPU_ATTENTION not in flop_registry:

    @register_flop_formula(_CPU_ATTENTION)
    def _cpu_attention_flops(query_shape, key_shape, value_shape, dropout_p=0.0, is_causal=False, *args, out_shape=None, **kwargs) -> int:  # type: ignore[no-untyped-def]
        flops = sdpa_flop_count(query_shape, key_shape, value_shape)
        return flops // 2 if is_causal else flops


if _CPU_ATTENTION_BACKWARD not in flop_registry:

    @register_flop_formula(_CPU_ATTENTION_BACKWARD)
    def _cpu_attention_backward_flops(grad_out_shape, query_shape, key_shape, value_shape, _out, _logsumexp, dropout_p=0.0, is_causal=False, *args, out_shape=None, **kwargs) -> int:  # type: ignore[no-untyped-def]
        flops = sdpa_backward_flop_count(grad_out_shape, query_shape, key_shape, value_shape)
        return flops // 2 if is_causal else flops


def matmul_gflops(dtype: torch.dtype, n: int = 1024, seconds: float = 1.0) -> float:
    """Sustained GFLOP/s of n x n @ n x n matmuls (2 n^3 FLOPs each) over about `seconds`."""
    a, b = torch.randn(n, n).to(dtype), torch.randn(n, n).to(dtype)
    for _ in range(2):
        a @ b  # warm-up: thread pool and kernel selection off the clock
    count, start = 0, time.perf_counter()
    while True:
        a @ b
        count += 1
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            return 2.0 * n**3 * count / elapsed / 1e9


def matmul_peak(dtype: torch.dtype, sizes: tuple[int, ...] = (512, 1024, 2048), samples: int = 2) -> float:
    """The best `matmul_gflops` over square sizes and repeated samples: the machine's peak, conservatively high."""
    return max(matmul_gflops(dtype, n) for n in sizes for _ in range(samples))


def synthetic_sequences(policy: Policy, count: int, length: int, seed: int = 0) -> list[TrainSequence]:
    """`count` sequences of `length` random ids, the second half trained with +-1 advantages and
    the policy's own log-probs as the old ones (ratio 1: the loss takes its usual path)."""
    rng = np.random.default_rng(seed)
    vocab = int(policy.model.get_input_embeddings().weight.shape[0])
    sequences = []
    for k in range(count):
        ids = rng.integers(0, vocab, size=length).tolist()
        trained = [j >= length // 2 for j in range(length)]
        advantages = [(1.0 if k % 2 == 0 else -1.0) if t else 0.0 for t in trained]
        sequences.append(TrainSequence(ids, trained, advantages, [0.0] * length))
    batch = collate(sequences, policy.pad_id)
    with torch.no_grad():
        logp, _ = policy.token_logprobs(batch.input_ids, batch.attention_mask, batch.trained)
    positions = torch.nonzero(batch.trained.any(dim=0)).squeeze(-1).tolist()
    for row, seq in enumerate(sequences):
        for col, p in enumerate(positions):
            if seq.trained[p]:
                seq.old_logprobs[p] = float(logp[row, col])
    return sequences


def model_parameters(policy: Policy) -> int:
    """Distinct parameters of the model (tied embeddings counted once, LoRA adapters included)."""
    return sum({id(p): p.numel() for p in policy.model.parameters()}.values())


def counted_flops(step: Any) -> tuple[int, dict[str, int]]:
    """FLOPs `step()` performs (matmuls and attention, forward and backward), total and per op."""
    with FlopCounterMode(display=False) as counter:
        step()
    per_op = {str(op).rsplit(".", 1)[-1]: int(n) for op, n in counter.get_flop_counts()["Global"].items()}
    return int(counter.get_total_flops()), per_op


def best_seconds(step: Any, repeats: int) -> float:
    """Fastest of `repeats` timed calls of `step()`."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return min(times)


def bench_mfu(
    config: TrainConfig,
    dtypes: tuple[str, ...] = ("float32", "bfloat16", "bf16-mixed"),
    sequences: int = 4,
    length: int = 512,
    repeats: int = 3,
) -> dict[str, Any]:
    """Per dtype: matmul peak, trained tokens/s of `update`, counted FLOPs, and MFU against the
    fp32 and own-dtype peaks."""
    from mapo.core.update import make_optimizer, update
    from mapo.policy import load_policy

    unknown = [d for d in dtypes if d not in DTYPES]
    if unknown:
        raise ValueError(f"unknown dtype(s) {unknown}; choose from {list(DTYPES)}")
    # The peak is the best of several sizes and samples, taken again after the training timings:
    # on a shared machine one sample can land in a busy moment and make MFU look above 100 %.
    peaks = {name: matmul_peak(DTYPES[name]) for name in {"float32", *dtypes}}  # bf16-mixed: its own bf16 sample
    modes: dict[str, dict[str, Any]] = {}
    optim = dataclasses.replace(config.optim, ppo_epochs=1, minibatches=1)
    for name in dtypes:
        policy = load_policy(dataclasses.replace(config.policy, dtype=name), seed=config.seed)
        seqs = synthetic_sequences(policy, sequences, length, config.seed)
        optimizer = make_optimizer(policy, config.optim)
        step = functools.partial(update, policy, optimizer, seqs, optim, config.loss)
        flops, per_op = counted_flops(step)  # also the warm-up pass, off the clock
        seconds = best_seconds(step, repeats)
        tokens = sequences * length
        params = model_parameters(policy)
        modes[name] = {
            "params_millions": params / 1e6,
            "tokens": float(tokens),
            "seconds": seconds,
            "tokens_per_s": tokens / seconds,
            "counted_gflop_per_update": flops / 1e9,
            "model_gflops": flops / seconds / 1e9,
            "six_n_gflops": 6.0 * params * tokens / seconds / 1e9,
            "flops_by_op": per_op,
        }
        del step, policy, optimizer
    peaks = {name: max(peak, matmul_peak(DTYPES[name])) for name, peak in peaks.items()}
    for name, row in modes.items():
        row["matmul_peak_gflops"] = peaks[name]
        row["mfu_vs_own_peak"] = row["model_gflops"] / peaks[name]
        row["mfu_vs_fp32_peak"] = row["model_gflops"] / peaks["float32"]
        row["six_n_mfu_vs_fp32_peak"] = row["six_n_gflops"] / peaks["float32"]
    ratios = {f"mfu_{name}": row["mfu_vs_fp32_peak"] for name, row in modes.items()}
    if "bfloat16" in modes and "float32" in modes:
        ratios["bf16_over_fp32_tokens_per_s"] = modes["bfloat16"]["tokens_per_s"] / modes["float32"]["tokens_per_s"]
        ratios["bf16_over_fp32_matmul_peak"] = peaks["bfloat16"] / peaks["float32"]
    if "bf16-mixed" in modes and "float32" in modes:
        ratios["bf16_mixed_over_fp32_tokens_per_s"] = modes["bf16-mixed"]["tokens_per_s"] / modes["float32"]["tokens_per_s"]
    result = {
        "settings": {"sequences": sequences, "length": length, "repeats": repeats, "lora": config.policy.lora.enabled,
                     "threads": torch.get_num_threads()},
        "modes": modes,
        "ratios": ratios,
        "target": {"mfu_float32": 0.40},
    }
    if any(row["mfu_vs_own_peak"] > 1.0 for row in modes.values()):
        result["note"] = "MFU above 100 %: the matmul peak was measured while the machine was busier; rerun on an idle machine"
    return result


COLUMNS = [
    ("params_millions", "params (M)", "{:.1f}"),
    ("tokens_per_s", "train tok/s", "{:.0f}"),
    ("model_gflops", "counted GFLOP/s", "{:.1f}"),
    ("six_n_gflops", "6N GFLOP/s", "{:.1f}"),
    ("matmul_peak_gflops", "matmul peak GFLOP/s", "{:.1f}"),
    ("mfu_vs_own_peak", "MFU (own dtype peak)", "{:.1%}"),
    ("mfu_vs_fp32_peak", "MFU (fp32 peak)", "{:.1%}"),
]
