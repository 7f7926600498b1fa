"""Off-policy correctness: the importance weights right in every setting.

pi_old, pi_theta and the sampler's behaviour log-probs are probabilities of one and the
same distribution (temperature and top-p nucleus from the rollout that sampled); every
engine, hf included, is corrected and logged; every trained weight reaches the engine. The
vLLM engine's own checks (nucleus log-probs, reloads, faults) are in test_engine_vllm.py.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from tiny_policy import tiny_policy

from mapo.config import load_config
from mapo.core.losses import LossSpec, TrainSequence, collate
from mapo.core.update import batch_loss
from mapo.engines.hf import HfEngine
from mapo.methods.base import TrainingMethod
from mapo.nucleus import nucleus_mask
from mapo.run_folder import RunFolder

TINY_RUN = [
    "env.name=empathy", "policy.model=tiny", "policy.lora.r=4", "threads=1", "steps=1",
    "rollout.scenarios_per_step=1", "rollout.samples_per_scenario=2", "rollout.max_turns=2",
    "rollout.max_new_tokens=8", "rollout.engine=hf",
]


def _logprobs(policy, context, reply, temperature, top_p):
    ids = torch.tensor([list(context) + list(reply)])
    targets = torch.zeros_like(ids, dtype=torch.bool)
    targets[0, len(context) :] = True
    with torch.no_grad():
        logp, _ = policy.token_logprobs(ids, torch.ones_like(ids), targets, temperature, top_p=top_p)
    return logp[0, : len(reply)].cpu().numpy()


# ---------------------------------------------------------------- 1. top_p < 1


def test_the_trainers_nucleus_is_the_smallest_set_reaching_top_p():
    rng = np.random.default_rng(3)
    logits = rng.normal(0, 3, size=(64, 500)).astype(np.float32)
    for top_p in (0.5, 0.9, 0.99):
        torch_kept = nucleus_mask(torch.from_numpy(logits), top_p).numpy()
        probs = np.exp(logits - logits.max(axis=1, keepdims=True))
        probs /= probs.sum(axis=1, keepdims=True)
        mass = (probs * torch_kept).sum(axis=1)
        assert (mass >= top_p - 1e-6).all()  # the nucleus reaches top_p ...
        assert (mass - (probs * torch_kept).min(axis=1, where=torch_kept, initial=1.0) < top_p).all()  # ... minimally


def test_top_p_hf_samples_and_pi_old_share_the_renormalised_nucleus():
    """hf `generate` draws from the nucleus; its recorded log-prob and the trainer's pi_old
    (token_logprobs with the same top_p) are both the renormalised nucleus probability."""
    policy = tiny_policy()
    torch.manual_seed(4)
    contexts = [policy.first_prompt_ids("Be kind.", f"Hello number {k}.") for k in range(3)]
    samples = HfEngine(policy).sample(contexts, max_new_tokens=10, temperature=0.7, top_p=0.9)
    for context, sample in zip(contexts, samples):
        old = _logprobs(policy, context, sample.ids, 0.7, 0.9)
        assert np.allclose(sample.logprobs, old, atol=1e-4)
        full = _logprobs(policy, context, sample.ids, 0.7, 1.0)
        assert (old - full > 0.01).all()  # the nucleus mass, which the full softmax would leave out


def test_a_token_outside_the_trainers_nucleus_trains_nothing():
    """A sampled id the trainer's nucleus excludes (a boundary id another engine's numerics let in)
    has pi_old = 0: importance weight 0, finite loss and gradient, and it is counted."""
    policy = tiny_policy(lora=True)
    context = policy.first_prompt_ids("Be kind.", "Hello.")
    torch.manual_seed(5)
    reply = HfEngine(policy).sample([context], max_new_tokens=6, temperature=0.7, top_p=0.5)[0]
    ids = torch.tensor([context + reply.ids[:-1]])
    with torch.no_grad():
        rare = int(policy.model(input_ids=ids.to(policy.device)).logits[0, -1].argmin())  # never in the nucleus
    sequences = []
    for last in (reply.ids[-1], rare):  # the same reply, and one whose last id is the rare one
        tokens = [*reply.ids[:-1], last]
        behaviour = [*reply.logprobs[:-1], -5.0]
        n = len(context)
        sequences.append(
            TrainSequence(context + tokens, [False] * n + [True] * len(tokens), [0.0] * n + [1.0] * len(tokens),
                          [0.0] * n + behaviour)
        )
    batch = collate(sequences, policy.pad_id)
    total = int(batch.trained.sum())
    terms = batch_loss(policy, batch, LossSpec(), total, 0.7, importance="current", top_p=0.5)
    terms.loss.backward()
    assert torch.isfinite(terms.loss) and all(torch.isfinite(p.grad).all() for p in policy.trainable_parameters())
    old, behaviour = terms.old_and_behaviour
    assert np.isneginf(old).sum() == 1  # the rare id: pi_old = 0 ...
    from mapo.engines.importance import mismatch_stats, truncated_importance_weights

    assert truncated_importance_weights(old, behaviour).min() == 0.0  # ... so weight 0
    stats = mismatch_stats(old, behaviour)
    assert stats.outside_nucleus_fraction == pytest.approx(1 / total) and np.isfinite(stats.kl_behaviour_old)


# ---------------------------------------------------------------- 2. one temperature; 4. hf corrected and logged


class _HotterSampling(TrainingMethod):
    """A method that samples hotter, with a nucleus, than config.rollout says."""

    name = "hotter"

    def __init__(self) -> None:
        self.aux_temperatures: list[float] = []

    def rollout_spec(self, spec):
        return dataclasses.replace(spec, temperature=1.6, top_p=0.8)

    def auxiliary_loss(self, policy, groups, temperature):
        self.aux_temperatures.append(temperature)
        return None


def test_the_update_uses_the_distribution_the_rollout_sampled_from(tmp_path, monkeypatch):
    """A method changes the rollout's temperature and top_p: the update's pi_old and the auxiliary
    loss use the rollout spec's values, not config.rollout's, so behaviour and pi_old agree."""
    import mapo.core.trainer
    from mapo.core.trainer import train

    method = _HotterSampling()
    monkeypatch.setattr(mapo.core.trainer, "attached_methods", lambda config: [method])
    run = train(load_config(None, TINY_RUN), output=tmp_path / "run", show_progress=False).run_dir
    (metrics,) = RunFolder(run).read_metrics()
    assert method.aux_temperatures == [1.6]
    assert metrics["tis_tokens"] > 0
    assert metrics["tis_kl_behaviour_old"] < 1e-5 and metrics["tis_logprob_abs_diff_mean"] < 1e-3
    assert metrics["tis_weight_mean"] == pytest.approx(1.0, abs=1e-3)


def test_the_hf_engine_is_corrected_and_logged_like_any_engine(tmp_path):
    """The hf engine's log-probs come from `generate` (KV cache, padding; bf16 on a GPU): the
    trainer takes pi_old from its own forward pass and logs the tis_* figures for it too."""
    from mapo.core.trainer import train

    run = train(load_config(None, TINY_RUN), output=tmp_path / "run", show_progress=False).run_dir
    (metrics,) = RunFolder(run).read_metrics()
    assert metrics["tis_tokens"] == metrics["trained_tokens"] > 0
    assert metrics["tis_weight_mean"] == pytest.approx(1.0, abs=1e-3)  # float32 on a CPU: equal to float error
    assert metrics["tis_truncated_fraction"] == 0 and metrics["ratio_mean"] == pytest.approx(1.0)


# ---------------------------------------------------------------- 3. every trained weight reaches the engine


def test_a_sync_carries_trained_weights_outside_lora_too():
    """The engine reloads the merged model: an unfrozen norm trains and its new values go with the LoRA deltas."""
    from mapo.engines.weights import dense_weights

    policy = tiny_policy(lora=True)
    norm = policy.model.get_base_model().model.norm.weight
    norm.requires_grad_(True)  # an unfrozen norm: trained, but not a LoRA matrix
    with torch.no_grad():
        norm.mul_(1.5)
    assert torch.equal(dict(dense_weights(policy.model))["model.norm.weight"], norm.detach())
