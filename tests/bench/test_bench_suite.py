"""Helpers of the speed suite (mapo/lab/bench/{mfu,env,grpo,suite}.py); no timing assertions."""

from __future__ import annotations

import pytest
import torch
from tiny_policy import ToyEnvironment, tiny_policy, toy_scenarios

from mapo.config import load_config
from mapo.core.losses import collate
from mapo.lab.bench.env import judge_kind, run_dialogues, step_latencies
from mapo.lab.bench.grpo import brevity_reward
from mapo.lab.bench.mfu import counted_flops, matmul_gflops, model_parameters, synthetic_sequences
from mapo.lab.bench.suite import BENCHMARKS, QUICK_SIZES, summary_markdown
from mapo.testing.vllm_server import free_port


def test_matmul_peak_is_a_positive_rate():
    assert matmul_gflops(torch.float32, n=64, seconds=0.01) > 0


def test_counted_flops_follow_what_autograd_actually_computes():
    x, w = torch.randn(8, 16, requires_grad=True), torch.randn(16, 32)  # w frozen, as LoRA's base weights
    flops, per_op = counted_flops(lambda: (x @ w).sum().backward())
    assert flops == 2 * (2 * 8 * 16 * 32)  # forward and the input gradient; no weight gradient
    assert set(per_op) == {"mm"}


def test_counted_flops_include_the_cpu_attention_kernel():
    q, k, v = (torch.randn(1, 2, 8, 4, requires_grad=True) for _ in range(3))
    forward, per_op = counted_flops(lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v))
    assert forward == 2 * (2 * 2 * 8 * 8 * 4) and len(per_op) == 1  # QK^T and AV per head
    total, per_op = counted_flops(lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v).sum().backward())
    assert total > forward and len(per_op) == 2  # the backward kernel is counted too
    causal, _ = counted_flops(lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True).sum().backward())
    assert causal == total // 2  # the masked upper triangle is skipped


def test_synthetic_sequences_carry_the_policys_own_logprobs():
    policy = tiny_policy()
    seqs = synthetic_sequences(policy, count=2, length=16)
    assert [len(s.input_ids) for s in seqs] == [16, 16] and all(s.n_trained == 8 for s in seqs)
    assert {a for s in seqs for a, t in zip(s.advantages, s.trained) if t} == {1.0, -1.0}
    batch = collate(seqs, policy.pad_id)
    with torch.no_grad():
        logp, _ = policy.token_logprobs(batch.input_ids, batch.attention_mask, batch.trained)
    old = torch.tensor([[s.old_logprobs[p] for p in range(8, 16)] for s in seqs])
    assert torch.allclose(logp, old, atol=1e-5)  # ratio 1 at the start of the update


def test_model_parameters_count_tied_weights_once():
    from types import SimpleNamespace

    embedding = torch.nn.Embedding(10, 4)
    head = torch.nn.Linear(4, 10, bias=False)
    head.weight = embedding.weight  # tied, as in SmolLM2
    model = torch.nn.ModuleDict({"embed": embedding, "head": head, "mlp": torch.nn.Linear(4, 4)})
    assert model_parameters(SimpleNamespace(model=model)) == 40 + 16 + 4


def test_step_latencies_time_every_step_and_restart_dialogues():
    made = []

    def make_env():
        made.append(ToyEnvironment(end_early=False))
        return made[-1]

    latencies = step_latencies(make_env, toy_scenarios(2), steps=7, turns=3)
    assert len(latencies) == 7 and all(t >= 0 for t in latencies)
    assert len(made) == 3  # steps 0, 3, 6 start a new dialogue


def test_the_env_latency_row_names_the_configured_judge():
    assert judge_kind(load_config(None)) == "offline"
    assert judge_kind(load_config(None, ["env.options.roles.judge.kind=learned", "env.options.roles.judge.path=j"])) == "learned"
    assert judge_kind(load_config(None, ["env.options.roles.judge=llm"])) == "llm"
    assert judge_kind(load_config(None, ["env.options.roles.judge=learned", "env.options.roles.judge.path=j"])) == "learned"
    assert judge_kind(load_config(None, ["env.options.roles.judge.degenerate_gate=false"])) == "offline"
    assert judge_kind(load_config(None, ["env.name=twenty-questions"])) is None


def test_run_dialogues_counts_turns_and_role_calls():
    row = run_dialogues(lambda: ToyEnvironment(end_early=False), toy_scenarios(2), trajectories=3, turns=2, concurrency=2)
    assert row["trajectories"] == 3 and row["turns"] == 6 and row["turns_per_s"] > 0
    assert row["llm_calls"] == 0 and row["fallbacks"] == 0  # the toy environment has no LLM roles


def test_brevity_reward_peaks_at_the_target_length():
    assert brevity_reward(" ".join(["w"] * 20)) == 1.0
    assert brevity_reward(" ".join(["w"] * 30)) == pytest.approx(0.5)
    assert brevity_reward("") == 0.0 and brevity_reward(" ".join(["w"] * 80)) == 0.0


def test_summary_marks_targets_skips_and_failures():
    machine = {"cpu": "Test CPU", "cores": 2, "memory_gib": 24.0, "load_average_1min": 1.0, "torch": "2.x",
               "torch_threads": 2}
    results = {
        "rollout": {"modes": {}, "ratios": {"tokens_per_s_generate": 5.0}, "target": {"tokens_per_s_generate": 4.0}},
        "mfu": {"modes": {}, "ratios": {"mfu_float32": 0.25}, "target": {"mfu_float32": 0.4}},
        "llm-env": {"modes": {}, "ratios": {}, "skipped": "vLLM is not installed"},
        "grpo": {"modes": {}, "ratios": {}, "error": "RuntimeError: boom\ntrace"},
    }
    text = summary_markdown(results, machine, quick=True)
    assert "Test CPU, 2 cores" in text and "mapo bench all --quick" in text
    assert "| rollout | tokens_per_s_generate | 5.00x | >= 4x | met |" in text
    assert "| mfu | mfu_float32 | 25.0% | >= 40% | **not met** |" in text
    assert "skipped: vLLM is not installed" in text
    assert "failed: RuntimeError: boom |" in text


def test_every_benchmark_has_quick_sizes_and_a_free_port_is_usable():
    assert set(QUICK_SIZES) == set(BENCHMARKS)
    assert 0 < free_port() < 65536


def test_our_grpo_step_samples_through_the_configured_engine_and_trains() -> None:
    """`mapo bench grpo`'s side of ours on the tiny model: the engine named in the config samples,
    every completion is counted and timed (the TRL side runs only where TRL is installed)."""
    from mapo.config import load_config
    from mapo.envs.empathy.cards import card_scenarios
    from mapo.lab.bench.grpo import bench_grpo

    config = load_config(None, ["policy.model=tiny", "rollout.engine=hf", "policy.lora.enabled=false"])
    result = bench_grpo(config, card_scenarios("train"), prompts=2, group=2, max_new_tokens=4, timed=1)
    assert result["settings"]["engine"] == "hf"
    ours = result["modes"]["mapo"]
    assert ours["completions"] == 4 and 0 < ours["completion_tokens"] <= 16
    assert ours["seconds"] > 0 and 0.0 <= ours["reward_mean"] <= 1.0
