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

    from mapo.core.losses import collate, packed_sequence
    from mapo.core.rollout import RolloutSpec, rollout

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
        assert torch.allclose(logp[0].cpu(), batch.old_logprobs[0, positions], atol=1e-4)


# ---------------------------------------------------------------- CPU bfloat16 (policy.dtype auto / bf16-mixed)


def _cpuinfo(tmp_path, flags):
    path = tmp_path / "cpuinfo"
    path.write_text(f"processor\t: 0\nflags\t\t: fpu sse2 avx2 {flags}\n\nprocessor\t: 1\nflags\t\t: fpu sse2 avx2 {flags}\n")
    return path


def test_cpu_flags_are_read_from_cpuinfo(tmp_path):
    from mapo.device import cpu_flags

    assert {"avx2", "avx512_bf16"} <= cpu_flags(_cpuinfo(tmp_path, "avx512_bf16"))
    assert cpu_flags(tmp_path / "absent") == set()


@pytest.mark.parametrize(
    ("flags", "torch_says", "speedup", "native"),
    [
        ("avx512_bf16", True, 2.0, True),
        ("amx_bf16 amx_tile", True, 4.0, True),
        ("avx512f", True, 2.0, False),  # no native instructions
        ("avx512_bf16", False, 2.0, False),  # torch cannot use them
        ("avx512_bf16", True, 0.6, False),  # native but slower than float32 here
    ],
)
def test_auto_on_a_cpu_is_bf16_mixed_only_where_native_bf16_is_faster(monkeypatch, tmp_path, flags, torch_says, speedup, native):
    import mapo.device as device

    info, read = _cpuinfo(tmp_path, flags), device.cpu_flags
    monkeypatch.setattr(device, "cpu_flags", lambda path=None: read(info))
    monkeypatch.setattr(device, "torch_cpu_bf16", lambda: torch_says)
    monkeypatch.setattr(device, "bf16_matmul_speedup", lambda: speedup)
    precision = device.resolve_precision("auto", torch.device("cpu"))
    assert precision.weights is torch.float32  # float32 master weights either way
    assert precision.compute is (torch.bfloat16 if native else None)
    assert device.cpu_bf16_support()[0] is native
    # an explicit float32 always wins; bf16-mixed is there on any CPU
    assert device.resolve_precision("float32", torch.device("cpu")).compute is None
    assert device.resolve_precision("bf16-mixed", torch.device("cpu")).compute is torch.bfloat16


def test_a_policy_loaded_with_auto_falls_back_to_float32_without_native_bf16(monkeypatch):
    import mapo.device as device
    from tiny_policy import tiny_policy

    monkeypatch.setattr(device, "cpu_flags", lambda path=None: {"avx2", "avx512f"})
    policy = tiny_policy(dtype="auto", device="cpu")  # a CPU's rule, also on a machine with a GPU
    assert policy.compute_dtype is None and next(policy.model.parameters()).dtype is torch.float32
    monkeypatch.setattr(device, "cpu_flags", lambda path=None: {"avx2", "avx512_bf16"})
    monkeypatch.setattr(device, "torch_cpu_bf16", lambda: True)
    monkeypatch.setattr(device, "bf16_matmul_speedup", lambda: 2.0)
    policy = tiny_policy(dtype="auto", lora=True, device="cpu")
    assert policy.compute_dtype is torch.bfloat16
    assert all(p.dtype is torch.float32 for p in policy.trainable_parameters())  # master weights stay float32


def test_bf16_mixed_log_probs_keep_a_float32_head_and_stay_close_to_float32():
    from tiny_policy import tiny_policy

    policy = tiny_policy(dtype="bf16-mixed", device="cpu")
    ids = torch.randint(3, 200, (2, 12), generator=torch.Generator().manual_seed(0))
    targets = torch.zeros_like(ids, dtype=torch.bool)
    targets[:, 4:] = True
    with torch.no_grad():
        mixed, _ = policy.token_logprobs(ids, torch.ones_like(ids), targets)
        seen = []
        hook = policy.model.get_output_embeddings().register_forward_hook(lambda m, a, out: seen.append(out.dtype))
        with policy.computing():
            inner = policy.model(input_ids=ids).logits
        hook.remove()
        policy.set_compute_dtype(None)
        full, _ = policy.token_logprobs(ids, torch.ones_like(ids), targets)
    assert inner.dtype is torch.float32 and seen == [torch.float32]  # the output projection ran outside autocast
    assert not torch.equal(mixed, full)  # the layers did compute in bfloat16
    assert torch.allclose(mixed, full, atol=0.05)


def test_the_bf16_speed_probe_is_a_positive_ratio_measured_once():
    from mapo.device import bf16_matmul_speedup

    first = bf16_matmul_speedup()
    assert first > 0 and bf16_matmul_speedup() == first  # cached: one measurement per process
