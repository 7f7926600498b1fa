"""`mapo bench gpu` on a CPU with a tiny shape (the GPU numbers are in docs/gpu.md), and its FLOP count."""

from __future__ import annotations

import json

import torch

from mapo.config import load_config
from mapo.lab.bench.gpu import ATTENTION_FLOPS, bench_gpu, markdown


def test_bench_gpu_reports_every_figure_per_shape(tmp_path):
    shape = tmp_path / "config.json"
    shape.write_text(json.dumps({
        "model_type": "qwen2", "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 49152, "tie_word_embeddings": True,
    }))
    config = load_config(None, ["policy.device=cpu", "policy.lora.r=4", "policy.lora.top_layers=null"])
    results = bench_gpu(config, (str(shape),), contexts=2, new_tokens=3, sequences=2, length=32, repeats=1)
    row = results["modes"][str(shape)]
    assert results["device"] == "cpu" and results["settings"]["dtype"] == "float32"
    assert row["rollout_tokens_per_s"] > 0 and row["sequential_tokens_per_s"] > 0
    assert row["batched_over_sequential"] == results["ratios"][f"batched_over_sequential_{shape}"]
    assert 0 < row["mfu"] < 1 and row["update_tokens_per_s"] > 0
    assert row["peak_memory_gib"] != row["peak_memory_gib"]  # NaN: no device memory to measure on a CPU
    assert f"| {shape} |" in markdown(results)


def test_attention_flops_count_grouped_query_heads_and_halve_causal_kernels():
    forward = ATTENTION_FLOPS[torch.ops.aten._scaled_dot_product_flash_attention]
    q, kv = (2, 12, 256, 64), (2, 2, 256, 64)  # 12 query heads share 2 key/value heads
    full = 2 * (2 * 2 * 12 * 256 * 256 * 64)  # QK^T and PV, per query head
    assert forward(q, kv, kv, 0.0, False) == full
    assert forward(q, kv, kv, 0.0, True) == full // 2
    backward = ATTENTION_FLOPS[torch.ops.aten._scaled_dot_product_efficient_attention_backward]
    args = (q, q, kv, kv, None, q, None, None, None, 0.0, None)
    assert backward(*args, True) * 2 == backward(*args, False) > forward(q, kv, kv, 0.0, False)
