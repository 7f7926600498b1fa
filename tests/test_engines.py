"""Rollout engines, vLLM aside: the importance-sampling correction, the `hf` engine, choosing an
engine, the weights a sync streams, and the sentence stop rule."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from mapo.engines.base import StaleWeightsError
from mapo.engines.hf import HfEngine
from mapo.engines.importance import mismatch_stats, truncated_importance_weights
from tests.tiny_policy import tiny_policy

# ---------------------------------------------------------------- truncated importance sampling


def test_weights_are_one_when_behaviour_is_old():
    logp = np.log(np.array([0.9, 0.05, 0.3, 1.0]))
    assert np.array_equal(truncated_importance_weights(logp, logp.copy()), np.ones(4))
    stats = mismatch_stats(logp, logp.copy())
    assert (stats.weight_mean, stats.ratio_mean, stats.ratio_max) == (1.0, 1.0, 1.0)
    assert stats.truncated_fraction == 0.0 and stats.kl_behaviour_old == 0.0 and stats.tokens == 4


def test_weights_ratio_and_cap():
    behaviour = np.log(np.array([0.4, 0.1, 0.5]))
    old = np.log(np.array([0.2, 0.3, 0.5]))  # ratios 0.5, 3, 1
    weights = truncated_importance_weights(old, behaviour, cap=2.0)
    assert weights == pytest.approx([0.5, 2.0, 1.0])
    stats = mismatch_stats(old, behaviour, cap=2.0)
    assert stats.ratio_max == pytest.approx(3.0)
    assert stats.ratio_mean == pytest.approx(4.5 / 3)
    assert stats.weight_mean == pytest.approx(3.5 / 3)
    assert stats.truncated_fraction == pytest.approx(1 / 3)
    k3 = [r - 1 - math.log(r) for r in (0.5, 3.0, 1.0)]
    assert stats.kl_behaviour_old == pytest.approx(sum(k3) / 3)
    assert stats.as_metrics()["tis_truncated_fraction"] == pytest.approx(1 / 3)


def test_huge_gap_stays_finite():
    weights = truncated_importance_weights(np.array([-1e-3]), np.array([-900.0]), cap=2.0)
    assert weights.tolist() == [2.0]
    assert math.isfinite(mismatch_stats(np.array([-1e-3]), np.array([-900.0])).ratio_max)


def test_kl_estimate_matches_the_exact_kl():
    rng = np.random.default_rng(0)
    b = np.array([0.5, 0.3, 0.15, 0.05])
    p = np.array([0.4, 0.35, 0.2, 0.05])
    draws = rng.choice(4, size=200_000, p=b)
    stats = mismatch_stats(np.log(p[draws]), np.log(b[draws]), cap=10.0)
    exact = float((b * np.log(b / p)).sum())
    assert stats.kl_behaviour_old == pytest.approx(exact, rel=0.05)
    assert stats.ratio_mean == pytest.approx(1.0, abs=0.01)  # E_b[p / b] = 1


@pytest.mark.parametrize(
    ("old", "behaviour", "cap", "message"),
    [
        ([-1.0, -2.0], [-1.0], 2.0, "differ in shape"),
        ([-1.0, float("nan")], [-1.0, -1.0], 2.0, "old log-probs must be finite"),
        ([-1.0, 0.5], [-1.0, -1.0], 2.0, "old log-probs must be finite and <= 0"),
        ([-1.0], [-1.0], 0.5, "loss.tis_cap must be a finite number >= 1"),
    ],
)
def test_bad_inputs_are_named(old, behaviour, cap, message):
    with pytest.raises(ValueError, match=message):
        truncated_importance_weights(np.array(old), np.array(behaviour), cap=cap)


def test_no_tokens_gives_zero_stats():
    assert mismatch_stats(np.array([]), np.array([])).tokens == 0


# ---------------------------------------------------------------- the hf engine


def test_hf_engine_correction_is_the_identity():
    """The hf engine is the trainer's model: its behaviour log-probs are pi_old, so w = 1."""
    policy = tiny_policy()
    engine = HfEngine(policy)
    engine.sync(0)
    engine.check_version(0)
    torch.manual_seed(0)
    contexts = [policy.first_prompt_ids("Be kind.", f"Hello number {k}.") for k in range(3)]
    samples = engine.sample(contexts, max_new_tokens=12, temperature=0.7)
    behaviour, old = [], []
    for context, sample in zip(contexts, samples):
        ids = torch.tensor([context + sample.ids])
        targets = torch.zeros_like(ids, dtype=torch.bool)
        targets[0, len(context) :] = True
        logp, _ = policy.token_logprobs(ids, torch.ones_like(ids), targets, temperature=0.7)
        old += logp[0].tolist()
        behaviour += sample.logprobs
    weights = truncated_importance_weights(np.array(old), np.array(behaviour))
    assert len(weights) == sum(len(s.ids) for s in samples) > 0
    assert np.allclose(weights, 1.0, atol=1e-4)
    assert mismatch_stats(np.array(old), np.array(behaviour)).truncated_fraction == 0.0


def test_hf_engine_version_check():
    engine = HfEngine(tiny_policy())
    engine.sync(3)
    engine.check_version(3)
    with pytest.raises(StaleWeightsError, match="serves weights of step 3, but the trainer is at step 4"):
        engine.check_version(4)


# ---------------------------------------------------------------- choosing the engine


def test_auto_engine_falls_back_to_hf_and_says_why_once(monkeypatch, caplog):
    import mapo.engines.factory as factory

    policy = tiny_policy()
    monkeypatch.setattr(factory, "missing_requirement", lambda: "vLLM is not installed (test)")
    monkeypatch.setattr(factory, "_said", set())
    with caplog.at_level("WARNING", logger="mapo.engines"):
        assert factory.resolve_engine("auto", policy) == "hf"
        assert factory.resolve_engine("auto", policy) == "hf"
    assert [r.getMessage() for r in caplog.records] == [
        "rollout.engine=auto: sampling with the hf engine (vLLM is not installed (test))"
    ]
    assert isinstance(factory.make_engine("auto", policy, slots=2, context_per_slot=256), HfEngine)
    with pytest.raises(Exception, match="rollout.engine=vllm: vLLM is not installed"):
        factory.make_engine("vllm", policy, slots=2, context_per_slot=256)


def test_auto_engine_picks_vllm_for_a_model_it_serves_when_installed(monkeypatch):
    import mapo.engines.factory as factory

    policy = tiny_policy()
    monkeypatch.setattr(factory, "missing_requirement", lambda: None)
    monkeypatch.setattr(factory, "supports", lambda model: None)
    assert factory.resolve_engine("auto", policy) == "vllm"
    monkeypatch.setattr(factory, "supports", lambda model: "vLLM has no model class for ['Phi9ForCausalLM']")
    assert factory.resolve_engine("auto", policy) == "hf"
    assert factory.resolve_engine("hf", policy) == "hf"
    with pytest.raises(ValueError, match="rollout.engine must be one of auto, hf, vllm; got 'llamacpp'"):
        factory.resolve_engine("llamacpp", policy)


def test_merged_weights_are_the_plain_model_with_each_lora_delta_added():
    """What a sync streams to the engine: transformers names, W + scale * B A, no tied head twice."""
    from mapo.engines.weights import dense_weights, lora_pairs

    policy = tiny_policy(lora=True)
    with torch.no_grad():
        for name, param in policy.model.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.1)
    merged = dict(dense_weights(policy.model))
    assert "lm_head.weight" not in merged and "model.embed_tokens.weight" in merged  # tied
    assert not any("lora_" in n or "base_layer" in n for n in merged)
    pairs = lora_pairs(policy.model)
    assert pairs
    name, pair = next(iter(pairs.items()))
    base = policy.model.get_base_model().get_submodule(name).base_layer.weight
    assert torch.allclose(merged[f"{name}.weight"], base + pair.scale * pair.b @ pair.a)
    policy.model.merge_adapter()  # peft's own merge computes the same matrices
    try:
        for key, tensor in policy.model.get_base_model().state_dict().items():
            if key.endswith("base_layer.weight"):
                assert torch.allclose(merged[key.replace(".base_layer", "")], tensor, atol=1e-6)
    finally:
        policy.model.unmerge_adapter()


# ---------------------------------------------------------------- the corrected loss


def _sequences(policy, seed: int = 0):
    from mapo.core.losses import TrainSequence

    torch.manual_seed(seed)
    out = []
    for k in range(2):
        context = policy.first_prompt_ids("Be kind.", f"Tell me something, friend {k}.")
        sample = HfEngine(policy).sample([context], max_new_tokens=6, temperature=0.7)[0]
        ids = context + sample.ids
        trained = [False] * len(context) + [True] * len(sample.ids)
        out.append(TrainSequence(ids, trained, [0.5 - k] * len(ids), [0.0] * len(context) + sample.logprobs))
    return out


def test_corrected_loss_equals_the_plain_loss_when_behaviour_is_old():
    """The hf engine's samples: importance weighting changes neither the loss nor its gradient."""
    from mapo.core.losses import LossSpec, collate
    from mapo.core.update import batch_loss

    policy = tiny_policy(lora=True)
    batch = collate(_sequences(policy), policy.pad_id)
    n = int(batch.trained.sum())
    plain = batch_loss(policy, batch, LossSpec(), n, 0.7)
    plain.loss.backward()
    plain_grads = [p.grad.clone() for p in policy.trainable_parameters()]
    policy.model.zero_grad()
    for importance in ("given", "current"):
        corrected = batch_loss(policy, batch, LossSpec(), n, 0.7, importance=importance)
        corrected.loss.backward()
        assert float(corrected.loss.detach()) == pytest.approx(float(plain.loss.detach()), rel=1e-4, abs=1e-6)
        for p, g in zip(policy.trainable_parameters(), plain_grads):
            assert torch.allclose(p.grad, g, atol=1e-5)
        policy.model.zero_grad()
        old, behaviour = corrected.old_and_behaviour
        assert np.allclose(truncated_importance_weights(old, behaviour), 1.0, atol=1e-4)


def test_corrected_loss_weights_each_token():
    """A behaviour policy that gave a token half the old probability doubles (caps) its weight."""
    from mapo.core.losses import LossSpec, collate
    from mapo.core.update import batch_loss

    policy = tiny_policy(lora=True)
    sequences = _sequences(policy)
    for seq in sequences:  # behaviour log-probs: log(old) - log 4 on every trained token
        seq.behaviour_logprobs = [lp - math.log(4.0) if t else 0.0 for lp, t in zip(seq.old_logprobs, seq.trained)]
    batch = collate(sequences, policy.pad_id)
    n = int(batch.trained.sum())
    plain = batch_loss(policy, batch, LossSpec(), n, 0.7)
    capped = batch_loss(policy, batch, LossSpec(tis_cap=2.0), n, 0.7, importance="given")
    assert float(capped.loss.detach()) == pytest.approx(2.0 * float(plain.loss.detach()), rel=1e-4)  # w = min(4, 2) on every token
    loose = batch_loss(policy, batch, LossSpec(tis_cap=10.0), n, 0.7, importance="given")
    assert float(loose.loss.detach()) == pytest.approx(4.0 * float(plain.loss.detach()), rel=1e-4)


def test_update_with_several_optimizer_steps_takes_pi_old_from_a_first_pass():
    from mapo.config import OptimSpec
    from mapo.core.losses import LossSpec
    from mapo.core.update import make_optimizer, update, with_trainer_logprobs

    policy = tiny_policy(lora=True)
    sequences = _sequences(policy)
    for seq in sequences:
        seq.old_logprobs = [lp - 0.1 if t else 0.0 for lp, t in zip(seq.old_logprobs, seq.trained)]  # "engine" numbers
    prepared = with_trainer_logprobs(policy, sequences, 4096, 0.7)
    for before, after in zip(sequences, prepared):
        assert after.behaviour_logprobs == before.old_logprobs
        trained = [a - b for a, b, t in zip(after.old_logprobs, before.old_logprobs, before.trained) if t]
        assert np.allclose(trained, 0.1, atol=1e-4)  # the model's own log-probs, 0.1 above the engine's
    optim = OptimSpec(ppo_epochs=2, minibatches=2)
    stats = update(policy, make_optimizer(policy, optim), sequences, optim, LossSpec(), 0.7, off_policy=True)
    assert stats["tis_ratio_mean"] == pytest.approx(math.exp(0.1), rel=1e-3)
    assert stats["tis_tokens"] == sum(s.n_trained for s in sequences)


# ---------------------------------------------------------------- the sentence stop rule, counted incrementally


def test_incremental_sentence_count_equals_decoding_the_whole_reply_at_every_step():
    """SentenceCounter decodes only the ids after its last settled split, yet its count is
    count_sentences(decode(reply so far)) after every id: on replies built from real sentences
    (ends with quotes, ellipses, line breaks, multi-byte characters) and on random ids."""
    from mapo.engines.stops import SentenceCounter, sentence_stop
    from mapo.text import count_sentences

    tokenizer = tiny_policy().tokenizer

    def decode(ids):
        return tokenizer.decode(ids, skip_special_tokens=True)

    texts = [
        'I hear you. That sounds hard! "Really?" she asked... Yes.\nNew line here?! Ok',
        "Wait... what?\u201d He left. Caf\u00e9 \u2014 na\u00efve r\u00e9sum\u00e9. \U0001F600 Fine. (Sure.) [Done.]",
        "No punctuation at all just words and more words",
    ]
    rng = np.random.default_rng(0)
    replies = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]
    replies += [rng.integers(0, len(tokenizer), size=40).tolist() for _ in range(20)]
    replies += [[int(x) for x in rng.choice(replies[0] + replies[1], size=50)] for _ in range(20)]
    for reply in replies:
        counter = SentenceCounter(decode)
        for k, token in enumerate(reply):
            assert counter.push(token) == count_sentences(decode(reply[: k + 1])), (reply, k)
        full = next((k + 1 for k in range(len(reply)) if count_sentences(decode(reply[: k + 1])) >= 2), None)
        assert sentence_stop(decode, reply, 2) == full
