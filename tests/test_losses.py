"""mapo.core.losses: packing, masking, the clipped surrogate and its token-mean normalisation.

`policy_loss` is tested on tensors alone; the tests with a model go through the update's
forward pass (`mapo.core.update.batch_loss`)."""

from __future__ import annotations

import copy

import pytest
import torch
from tiny_policy import ToyEnvironment, tiny_policy, toy_scenarios

from mapo.core.losses import (
    LossSpec,
    TrainSequence,
    clipped_surrogate,
    collate,
    kl_k3,
    packed_sequence,
    per_turn_sequences,
    policy_loss,
)
from mapo.core.rollout import RolloutSpec, rollout
from mapo.core.update import batch_loss


@pytest.fixture(scope="module")
def policy():
    return tiny_policy(lora=True)


@pytest.fixture(scope="module")
def trajectories(policy):
    torch.manual_seed(1)
    spec = RolloutSpec(samples_per_scenario=2, max_turns=3, max_new_tokens=6, system_prompt="Be kind.")
    groups = rollout(policy, toy_scenarios(2), lambda: ToyEnvironment(end_early=False), spec)
    return [t for g in groups for t in g.trajectories]


def _grads(policy, sequences, total):
    policy.model.zero_grad(set_to_none=True)
    loss = batch_loss(policy, collate(sequences, policy.pad_id), LossSpec(), total).loss
    loss.backward()
    grads = [p.grad.clone() for p in policy.trainable_parameters()]
    policy.model.zero_grad(set_to_none=True)
    return loss.detach(), grads


def _perturb_lora(policy, scale=0.05):
    # LoRA B starts at 0; move it so the policy differs from the sampler and gradients are generic
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in policy.trainable_parameters():
            p.add_(torch.randn(p.shape, generator=gen) * scale)


def test_clipped_surrogate_values_and_gradients():
    logp = torch.log(torch.tensor([1.5, 1.5, 0.5, 0.5, 1.1])).requires_grad_()
    old = torch.zeros(5)
    adv = torch.tensor([1.0, -1.0, 1.0, -1.0, 2.0])
    loss, clipped = clipped_surrogate(logp, old, adv, eps_low=0.2, eps_high=0.28)
    # rho 1.5 A+ -> capped at 1.28; rho 1.5 A- -> -1.5 (unclipped, pessimistic); rho 0.5 A+ -> 0.5; A- -> floor 0.8
    assert torch.allclose(loss, -torch.tensor([1.28, -1.5, 0.5, -0.8, 2.2]), atol=1e-6)
    assert clipped.tolist() == [True, False, False, True, False]
    loss.sum().backward()
    assert logp.grad[0] == 0 and logp.grad[3] == 0  # clipped branches carry no gradient
    assert logp.grad[1] != 0 and logp.grad[2] != 0 and logp.grad[4] != 0


def test_kl_k3_is_zero_at_equality_and_positive_otherwise():
    a = torch.tensor([-1.0, -2.0, -0.5])
    assert torch.all(kl_k3(a, a) == 0)
    assert torch.all(kl_k3(a, a + torch.tensor([0.3, -0.2, 0.1])) > 0)


def _tokens(*rows):
    return torch.tensor(rows, dtype=torch.float32)


def test_policy_loss_on_tensors_is_the_token_mean_of_the_masked_surrogate():
    logp = _tokens([-1.0, -0.5, -2.0], [-0.3, -9.0, -1.2]).requires_grad_()
    old = _tokens([-1.0, -0.7, -2.0], [-0.5, -9.0, -1.0])
    adv = _tokens([1.0, 2.0, -1.0], [0.5, 7.0, -2.0])
    mask = torch.tensor([[True, True, False], [True, False, True]])
    terms = policy_loss(logp, old, adv, mask, LossSpec(), total_tokens=8)
    expected, clipped = clipped_surrogate(logp[mask].detach(), old[mask], adv[mask], 0.2, 0.28)
    assert float(terms.loss.detach()) == pytest.approx(float(expected.sum()) / 8)
    assert terms.sums["pg_loss"] == pytest.approx(float(expected.sum()))
    assert terms.sums["clipped"] == float(clipped.sum())
    assert terms.sums["ratio"] == pytest.approx(float(torch.exp(logp.detach()[mask] - old[mask]).sum()))
    terms.loss.backward()
    assert torch.all(logp.grad[~mask] == 0) and logp.grad[mask].abs().sum() > 0
    assert terms.old_and_behaviour is None and terms.sums["kl"] == 0.0


def test_policy_loss_never_reads_values_outside_the_mask():
    logp, old, adv = _tokens([-1.0, -0.5]), _tokens([-1.2, -0.4]), _tokens([1.0, -1.0])
    mask = torch.tensor([[True, False]])
    clean = policy_loss(logp, old, adv, mask, LossSpec(kl_beta=0.1), 1, ref_logprobs=_tokens([-1.1, -0.6]))
    poison = torch.tensor([[0.0, float("nan")]])
    dirty = policy_loss(logp + poison, old + poison, adv + poison, mask, LossSpec(kl_beta=0.1), 1,
                        ref_logprobs=_tokens([-1.1, -0.6]) + poison, entropy=poison)
    assert torch.isfinite(dirty.loss) and float(dirty.loss) == float(clean.loss)


def test_policy_loss_weights_by_the_truncated_importance_ratio_and_adds_the_kl():
    logp, adv, mask = _tokens([-4.0, -4.0]), _tokens([1.0, 1.0]), torch.tensor([[True, True]])
    behaviour = _tokens([-4.0 - 0.5, -4.0 + 3.0])  # pi_old / b = e^0.5 and e^-3
    plain = policy_loss(logp, logp, adv, mask, LossSpec(), 2)
    weighted = policy_loss(logp, logp, adv, mask, LossSpec(tis_cap=1.5), 2, behaviour_logprobs=behaviour)
    assert float(plain.loss) == pytest.approx(-1.0)  # ratio 1, advantage 1, token mean
    assert float(weighted.loss) == pytest.approx(-(1.5 + torch.exp(torch.tensor(-3.0)).item()) / 2)
    assert weighted.old_and_behaviour is not None and len(weighted.old_and_behaviour[0]) == 2
    ref = _tokens([-4.2, -3.8])
    with_kl = policy_loss(logp, logp, adv, mask, LossSpec(kl_beta=0.5), 2, ref_logprobs=ref)
    assert float(with_kl.loss - plain.loss) == pytest.approx(0.5 * float(kl_k3(logp[mask], ref[mask]).sum()) / 2, rel=1e-5)
    with pytest.raises(ValueError, match="reference"):
        policy_loss(logp, logp, adv, mask, LossSpec(kl_beta=0.5), 2)


def test_policy_loss_trains_nothing_on_a_token_outside_the_nucleus():
    logp = _tokens([float("-inf"), -1.0]).requires_grad_()
    terms = policy_loss(logp, _tokens([-1.0, -1.0]), _tokens([1.0, 1.0]), torch.tensor([[True, True]]), LossSpec(), 2)
    assert torch.isfinite(terms.loss) and float(terms.loss.detach()) == pytest.approx(-0.5)
    terms.loss.backward()
    assert torch.isfinite(logp.grad).all() and logp.grad[0, 0] == 0


def test_packed_sequence_marks_only_reply_tokens(trajectories):
    traj = trajectories[0]
    seq = packed_sequence(traj, [0.5, None, -1.0])
    trained = [p for p, t in enumerate(seq.trained) if t]
    first, third = traj.turns[0], traj.turns[2]
    expected = list(range(first.prompt_length, first.prompt_length + len(first.response_ids)))
    expected += list(range(third.prompt_length, third.prompt_length + len(third.response_ids)))
    assert trained == expected
    assert len(seq.input_ids) == third.prompt_length + len(third.response_ids)
    assert {seq.advantages[p] for p in trained[: len(first.response_ids)]} == {0.5}
    assert [seq.old_logprobs[p] for p in trained[: len(first.response_ids)]] == first.old_logprobs
    # nothing trains after the last trained reply: the sequence stops there
    assert len(packed_sequence(traj, [0.5, None, None]).input_ids) == first.prompt_length + len(first.response_ids)
    assert packed_sequence(traj, [None, None, None]) is None
    with pytest.raises(ValueError, match="2 advantages for 3 turns"):
        packed_sequence(traj, [0.1, 0.2])


def test_untrained_tokens_get_no_gradient_and_their_values_are_never_read(policy, trajectories):
    _perturb_lora(policy)
    try:
        seqs = [packed_sequence(trajectories[0], [0.7, -0.4, 1.1]), packed_sequence(trajectories[1], [0.7, -0.4, None])]
        total = sum(s.n_trained for s in seqs)
        loss, grads = _grads(policy, seqs, total)
        poisoned = []
        for s in seqs:
            p = copy.deepcopy(s)
            for j, trained in enumerate(p.trained):
                if not trained:
                    p.advantages[j] = float("nan")
                    p.old_logprobs[j] = float("nan")
            poisoned.append(p)
        loss2, grads2 = _grads(policy, poisoned, total)
        assert torch.isfinite(loss2) and loss2 == loss
        assert all(torch.equal(a, b) for a, b in zip(grads, grads2))
        # padding: different pad ids leave the loss unchanged
        batch = collate(seqs, pad_id=policy.pad_id)
        other = collate(seqs, pad_id=7)
        assert not torch.equal(batch.input_ids, other.input_ids)
        spec = LossSpec()
        assert batch_loss(policy, batch, spec, total).loss == batch_loss(policy, other, spec, total).loss
        # the per-position log-probs of user/system tokens receive no gradient
        b = collate(seqs[:1], policy.pad_id)
        logits = policy.model(input_ids=b.input_ids, attention_mask=b.attention_mask).logits
        logits.retain_grad()
        logp = torch.log_softmax(logits[:, :-1].float(), -1).gather(-1, b.input_ids[:, 1:, None]).squeeze(-1)
        mask = b.trained[:, 1:]
        per_token, _ = clipped_surrogate(logp[mask], b.old_logprobs[:, 1:][mask], b.advantages[:, 1:][mask], 0.2, 0.28)
        per_token.sum().backward()
        row_grad = logits.grad[0, :-1].abs().sum(-1)
        assert torch.all(row_grad[~mask[0]] == 0) and row_grad[mask[0]].sum() > 0  # (a clipped token may get 0 too)
        policy.model.zero_grad(set_to_none=True)
    finally:
        _perturb_lora(policy, scale=-0.05)


def test_packed_and_per_turn_losses_give_the_same_gradient(policy, trajectories):
    _perturb_lora(policy)
    try:
        advantages = [[0.9, -0.3, 0.4], [-1.2, 0.5, None], [0.2, 0.2, -0.6], [None, 1.0, 0.1]]
        packed = [s for t, a in zip(trajectories, advantages) if (s := packed_sequence(t, a)) is not None]
        per_turn = [s for t, a in zip(trajectories, advantages) for s in per_turn_sequences(t, a)]
        total = sum(s.n_trained for s in packed)
        assert total == sum(s.n_trained for s in per_turn) and len(per_turn) == 10
        loss_p, grads_p = _grads(policy, packed, total)
        loss_t, grads_t = _grads(policy, per_turn, total)
        assert torch.allclose(loss_p, loss_t, atol=1e-6)
        for a, b in zip(grads_p, grads_t):
            assert torch.allclose(a, b, atol=1e-6, rtol=1e-4)
        # micro-batching (one sequence per forward) accumulates to the same gradient
        accumulated = None
        for s in packed:
            _, g = _grads(policy, [s], total)
            accumulated = g if accumulated is None else [x + y for x, y in zip(accumulated, g)]
        for a, b in zip(grads_p, accumulated):
            assert torch.allclose(a, b, atol=1e-6, rtol=1e-4)
    finally:
        _perturb_lora(policy, scale=-0.05)


def test_kl_to_the_reference(policy, trajectories):
    seqs = [packed_sequence(trajectories[0], [1.0, 1.0, 1.0])]
    total = seqs[0].n_trained
    terms = batch_loss(policy, collate(seqs, policy.pad_id), LossSpec(kl_beta=0.5), total)
    assert terms.sums["kl"] == pytest.approx(0.0, abs=1e-6)  # fresh LoRA = the reference
    _perturb_lora(policy)
    try:
        with_kl = batch_loss(policy, collate(seqs, policy.pad_id), LossSpec(kl_beta=0.5), total)
        without = batch_loss(policy, collate(seqs, policy.pad_id), LossSpec(kl_beta=0.0), total)
        assert with_kl.sums["kl"] > 0 and without.sums["kl"] == 0
        assert float((with_kl.loss - without.loss).detach()) == pytest.approx(0.5 * with_kl.sums["kl"] / total, rel=1e-4)
    finally:
        _perturb_lora(policy, scale=-0.05)


def test_loss_needs_trained_tokens(policy):
    seq = TrainSequence([1, 2, 3], [False, True, True], [0.0, 1.0, 1.0], [0.0, -1.0, -1.0])
    with pytest.raises(ValueError, match="total_tokens"):
        batch_loss(policy, collate([seq], policy.pad_id), LossSpec(), 0)
    with pytest.raises(ValueError, match="total_tokens"):
        policy_loss(_tokens([-1.0]), _tokens([-1.0]), _tokens([1.0]), torch.tensor([[True]]), LossSpec(), 0)
