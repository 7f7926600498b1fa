"""Device and precision choices (mapo.device) on a machine without a GPU, and where the policy lives."""

from __future__ import annotations

import pytest
import torch

from mapo.device import attention_implementation, resolve_device, resolve_dtype


def test_auto_is_the_cpu_in_float32_without_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    device = resolve_device("auto")
    assert device == torch.device("cpu")
    assert resolve_dtype("auto", device) is torch.float32
    assert attention_implementation(device, torch.float32) is None  # transformers' CPU default, unchanged


def test_auto_on_a_gpu_means_bfloat16_and_sdpa():
    gpu = torch.device("cuda")
    assert resolve_dtype("auto", gpu) is torch.bfloat16
    assert resolve_dtype("float32", gpu) is torch.float32
    assert attention_implementation(gpu, torch.bfloat16) in ("sdpa", "flash_attention_2")
    assert attention_implementation(gpu, torch.float32) == "sdpa"


@pytest.mark.parametrize("name", ["gpu", "cuda:x", "tpu", ""])
def test_an_unknown_device_is_refused_with_the_key(name):
    with pytest.raises(ValueError, match="policy.device"):
        resolve_device(name)


def test_asking_for_cuda_without_one_says_so(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ValueError, match="no CUDA GPU"):
        resolve_device("cuda:0")


def test_an_unknown_dtype_is_refused():
    with pytest.raises(ValueError, match="policy.dtype"):
        resolve_dtype("float8", torch.device("cpu"))



def test_a_static_cache_rollout_records_the_training_forwards_logprobs():
    from tiny_policy import ToyEnvironment, tiny_policy, toy_scenarios

    from mapo.losses import collate, packed_sequence
    from mapo.rollout import RolloutSpec, rollout

    policy = tiny_policy(lora=True)
    policy.static_cache = True
    torch.manual_seed(0)
    spec = RolloutSpec(samples_per_scenario=2, scenarios_per_step=2, max_turns=3, max_new_tokens=6, system_prompt="Be kind.")
    groups = rollout(policy, toy_scenarios(2), lambda: ToyEnvironment(end_early=False), spec, seed=1)
    for trajectory in (t for g in groups for t in g.trajectories):
        assert len(trajectory.turns) == 3
        batch = collate([packed_sequence(trajectory, [1.0] * 3)], policy.pad_id)
        with torch.no_grad():
            logp, _ = policy.token_logprobs(batch.input_ids, batch.attention_mask, batch.trained, spec.temperature)
        positions = torch.nonzero(batch.trained.any(0)).squeeze(-1)
        assert torch.allclose(logp[0], batch.old_logprobs[0, positions], atol=1e-4)
