"""Replies sampled from contexts of their own (`Environment.reply_context`, `rollout.history_window`):
the questioning game's `view: state` with the tiny policy. Each turn keeps the ids it was sampled
from, and trains as its own sequence on exactly those ids."""

from __future__ import annotations

import copy

import pytest
import torch
from tiny_policy import tiny_policy

from mapo.core.losses import check_reply_ids, packed_sequence, training_sequences
from mapo.core.rollout import RolloutSpec, rollout
from mapo.envs.base import environment_factory, load_scenarios, make_environment

TQ = "twenty-questions"
STATE = {"view": "state", "max_turns": 3, "show_turns_left": True}


@pytest.fixture(scope="module")
def policy():
    return tiny_policy()


def _roll(policy, samples=2, history_window=0):
    torch.manual_seed(0)
    spec = RolloutSpec(samples_per_scenario=samples, max_turns=2, max_new_tokens=6, history_window=history_window)
    groups = rollout(policy, load_scenarios(TQ, "test")[:1], environment_factory(TQ, STATE), spec, seed=1)
    trajectories = [t for g in groups for t in g.trajectories]
    # the tiny policy's replies are not moves of the game: both turns are played (fixed seeds)
    assert trajectories and all(len(t.turns) == 2 for t in trajectories)
    return trajectories


@pytest.fixture(scope="module")
def trajectories(policy):
    return _roll(policy)


def test_each_reply_is_sampled_after_the_state_alone(policy, trajectories):
    scenario = load_scenarios(TQ, "test")[0]
    for trajectory in trajectories:
        assert trajectory.token_ids == []  # no dialogue-long sequence: every reply has its own
        env = make_environment(TQ, **STATE)
        opening = env.reset(scenario)
        for turn in trajectory.turns:
            state = env.reply_context()
            assert turn.context_message == state and "\nCandidates still possible: " in f"\n{state}"
            assert turn.context_ids == policy.first_prompt_ids(trajectory.system_prompt, state)
            assert turn.context_ids[-len(policy.next_prompt_ids(state)):] == policy.next_prompt_ids(state)  # ends with the state
            assert turn.prompt_length == len(turn.context_ids)
            assert env.step(turn.response).info == turn.info  # the environment's step info, kept
        # the transcript still records the whole dialogue
        assert trajectory.turns[0].user_message == opening
        assert trajectory.turns[1].context_message.startswith("Last answer: ")
        assert trajectory.turns[1].user_message != trajectory.turns[1].context_message
        check_reply_ids(trajectory)  # the trained ids are the sampled ids, after their own context


def test_a_turn_whose_context_was_changed_is_refused(trajectories):
    tampered = copy.deepcopy(trajectories[0])
    tampered.turns[0].context_ids = tampered.turns[0].context_ids[1:]
    with pytest.raises(AssertionError, match="the trained ids are not the sampled ids"):
        check_reply_ids(tampered)


def test_each_trained_reply_is_one_sequence_on_its_own_context(policy, trajectories):
    for trajectory in trajectories:
        n = len(trajectory.turns)
        advantages = [1.0 - 0.5 * k for k in range(n)]
        sequences = training_sequences(trajectory, advantages)
        assert len(sequences) == n
        for turn, seq, advantage in zip(trajectory.turns, sequences, advantages):
            context, reply = turn.context_ids, turn.response_ids
            assert seq.input_ids == context + reply
            assert seq.trained == [False] * len(context) + [True] * len(reply)  # only the reply trains
            assert seq.advantages == [0.0] * len(context) + [advantage] * len(reply)
            assert seq.old_logprobs[len(context):] == pytest.approx(turn.old_logprobs)
            # the training forward on that sequence gives the sampling log-probs
            ids = torch.tensor([seq.input_ids], device=policy.device)
            trained = torch.tensor([seq.trained], device=policy.device)
            logp, _ = policy.token_logprobs(ids, torch.ones_like(ids), trained, temperature=RolloutSpec().temperature)
            assert torch.allclose(logp[0].cpu(), torch.tensor(turn.old_logprobs), atol=1e-4)
        # a reply with no advantage trains nowhere
        skipped = training_sequences(trajectory, [None] + advantages[1:])
        assert len(skipped) == n - 1 and all(s.input_ids[: len(t.context_ids)] == t.context_ids
                                             for s, t in zip(skipped, trajectory.turns[1:]))
        with pytest.raises(ValueError, match="contexts of their own"):
            packed_sequence(trajectory, advantages)


def test_a_history_window_keeps_the_last_exchanges_before_the_state(policy):
    (trajectory,) = _roll(policy, samples=1, history_window=1)
    first = trajectory.turns[0]
    assert first.context_ids == policy.first_prompt_ids(trajectory.system_prompt, first.context_message)  # none yet
    second = trajectory.turns[1]
    expected = policy.first_prompt_ids(trajectory.system_prompt, first.user_message) + first.response_ids
    if first.response_ids[-1:] != [policy.end_of_turn_id]:
        expected.append(policy.end_of_turn_id)
    assert second.context_ids == expected + policy.next_prompt_ids(second.context_message)
    check_reply_ids(trajectory)
    with pytest.raises(ValueError, match="history_window must be an integer >= 0"):
        RolloutSpec(history_window=-1)


def test_the_bench_mismatch_reads_each_reply_after_its_own_context(policy, trajectories):
    # `mapo bench rollout` on the game's state view: the trainer's log-probs of every sampled reply
    # token, on the sequences training builds, against the sampler's (here the same hf model)
    from mapo.core.types import Group
    from mapo.lab.bench.rollout import trainer_and_sampler_logprobs

    groups = [Group(scenario_id=trajectories[0].scenario_id, trajectories=trajectories)]
    trainer, sampler = trainer_and_sampler_logprobs(policy, groups, temperature=RolloutSpec().temperature)
    expected = [x for t in trajectories for turn in t.turns for x in turn.old_logprobs]
    assert len(trainer) == len(sampler) == len(expected) > 0
    assert sampler.tolist() == pytest.approx(expected) and trainer == pytest.approx(sampler, abs=1e-4)
