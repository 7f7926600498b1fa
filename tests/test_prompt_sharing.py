"""Log-probs with each shared prompt computed once (mapo.prompt_sharing) are the plain forward's."""

from __future__ import annotations

import copy
import dataclasses

import pytest
import torch
from tiny_policy import tiny_policy

from mapo.config import load_config
from mapo.core.losses import LossSpec, TrainSequence, collate
from mapo.core.update import feed_order, micro_batches, update
from mapo.prompt_sharing import fed_tokens, layout_if_worth, shared_layout, supports_sharing


def test_the_layout_keeps_the_common_prefix_once_and_each_distinct_prompt_once():
    rows = [[1, 2, 3, 4, 5, 9], [1, 2, 3, 4, 5, 8, 7], [1, 2, 6, 5, 9], [1, 2, 3, 4, 5, 9]]
    firsts = [5, 5, 4, 5]  # a prompt is the ids before first - 1: [1,2,3,4] three times, [1,2,6] once
    layout = shared_layout(rows, firsts)
    assert layout.prefix == [1, 2]
    assert layout.rests == [[3, 4], [6]] and layout.rest_of_row == [0, 0, 1, 0]
    assert layout.tails == [[5, 9], [5, 8, 7], [5, 9], [5, 9]]
    assert [layout.split(r) for r in range(4)] == [4, 4, 3, 4]
    assert layout.fed_tokens() == 2 + 2 * 2 + 4 * 3  # 18 against a plain 4 x 7 = 28
    assert fed_tokens(rows, firsts, share=True) == 18 and fed_tokens(rows, firsts, share=False) == 28


def test_no_layout_where_it_would_not_pay():
    assert layout_if_worth([[1, 2, 3, 4]], [3]) is None  # one row
    assert layout_if_worth([[1, 2, 3], [4, 5, 6]], [2, 2]) is None  # nothing shared
    assert layout_if_worth([[1, 2, 3], [1, 2, 3]], [2, None]) is None  # a row with nothing trained
    assert layout_if_worth([[7, 1, 2, 3, 4, 5], [7, 9, 8, 6, 5, 4]], [5, 5]) is None  # one token of twelve saved


def _rows(policy) -> list[TrainSequence]:
    """Replies after a shared system prompt: two after the same state, one after another, one whose
    prompt is the others' common prefix, and a packed two-reply dialogue (a user turn between)."""
    system = "We play a guessing game. Ask one question per reply."
    first = policy.first_prompt_ids(system, "Candidates: kite, onion, knife. Replies left: 3.")
    other = policy.first_prompt_ids(system, "Candidates: kite, sock. Replies left: 2.")
    shortest = policy.first_prompt_ids(system, "Candidates:")
    reply = [*policy.encode("Is it sharp?"), policy.end_of_turn_id]
    sequences = []
    for prompt, answer in ((first, reply), (first, [*policy.encode("Guess: kite"), policy.end_of_turn_id]),
                           (other, reply), (shortest, reply)):
        sequences.append(TrainSequence([*prompt, *answer], [False] * len(prompt) + [True] * len(answer),
                                       [0.0] * len(prompt) + [0.7] * len(answer), [0.0] * (len(prompt) + len(answer))))
    second = policy.next_prompt_ids("No.")
    ids = [*first, *reply, *second, *reply]
    trained = [False] * len(first) + [True] * len(reply) + [False] * len(second) + [True] * len(reply)
    sequences.append(TrainSequence(ids, trained, [-0.4 * t for t in trained], [0.0] * len(ids)))
    return sequences


@pytest.mark.parametrize("temperature, top_p", [(1.0, 1.0), (0.7, 0.9)])
def test_shared_log_probs_entropy_and_gradients_are_the_plain_forwards(temperature, top_p):
    policy = tiny_policy(lora=True)
    batch = collate(_rows(policy), policy.pad_id)
    assert policy.share_prompts and policy._sharing_layout(batch.input_ids, batch.attention_mask, batch.trained)
    results = []
    for share in (False, True):
        policy.share_prompts = share
        policy.model.zero_grad(set_to_none=True)
        logp, entropy = policy.token_logprobs(batch.input_ids, batch.attention_mask, batch.trained,
                                              temperature=temperature, with_entropy=True, top_p=top_p)
        mask = batch.trained[:, torch.nonzero(batch.trained.any(dim=0)).squeeze(-1)]
        mask &= torch.isfinite(logp)  # top_p < 1: an id outside the nucleus has log-prob -inf
        torch.where(mask, logp, 0.0).sum().backward()
        grads = torch.cat([p.grad.flatten() for p in policy.trainable_parameters()])
        results.append((torch.where(mask, logp, 0.0).detach(), torch.where(mask, entropy, 0.0), grads))
    (plain_logp, plain_entropy, plain_grad), (logp, entropy, grad) = results
    assert plain_logp.abs().sum() > 0
    torch.testing.assert_close(logp, plain_logp, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(entropy, plain_entropy, atol=1e-4, rtol=1e-4)
    assert float((grad - plain_grad).norm() / plain_grad.norm()) < 1e-4


def test_an_update_with_shared_prompts_moves_the_weights_as_the_plain_one():
    policy = tiny_policy(lora=True)
    sequences = _rows(policy)
    optim = dataclasses.replace(load_config(None).optim, micro_batch_tokens=80)  # several micro-batches
    moved, stats = [], []
    for share in (False, True):
        trial = copy.deepcopy(policy)
        trial.share_prompts = share
        optimizer = torch.optim.AdamW(trial.trainable_parameters(), lr=1e-3)
        stats.append(update(trial, optimizer, sequences, optim, LossSpec(), off_policy=True))
        moved.append(torch.cat([p.detach().flatten() for p in trial.trainable_parameters()]))
    assert len(micro_batches([sequences[i] for i in feed_order(sequences, True)], 80, True)) < len(
        micro_batches([sequences[i] for i in feed_order(sequences, False)], 80, False))
    torch.testing.assert_close(moved[1], moved[0], atol=1e-6, rtol=1e-5)
    for key in ("pg_loss", "entropy", "grad_norm", "trained_tokens"):
        assert stats[1][key] == pytest.approx(stats[0][key], rel=1e-4, abs=1e-6)


def test_a_model_with_sliding_window_layers_computes_every_row_in_full():
    policy = tiny_policy()
    assert supports_sharing(policy.model)
    sliding = copy.deepcopy(policy.model)
    sliding.config.layer_types = ["full_attention", "sliding_attention"]  # as Gemma 3 declares its layers
    assert not supports_sharing(sliding)
