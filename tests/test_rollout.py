"""mapo.core.rollout: batched multi-turn sampling with the sampled ids kept end to end."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch
from tiny_policy import ToyEnvironment, tiny_policy, toy_scenarios

from mapo.core.losses import check_reply_ids, packed_sequence
from mapo.core.rewards import rewards_from_distances
from mapo.core.rollout import RolloutSpec, rollout
from mapo.core.types import Scenario
from mapo.envs.base import StepResult


@pytest.fixture(scope="module")
def policy():
    return tiny_policy()


@pytest.fixture(scope="module")
def groups(policy):
    torch.manual_seed(0)
    spec = RolloutSpec(samples_per_scenario=3, max_turns=3, max_new_tokens=8, system_prompt="Be kind.")
    return rollout(policy, toy_scenarios(2), lambda: ToyEnvironment(), spec, seed=5)


def test_shape_and_records(groups):
    assert [g.scenario_id for g in groups] == ["toy-0", "toy-1"]
    starts = {s.id: s.initial_state for s in toy_scenarios(2)}
    for group in groups:
        assert [t.sample_index for t in group.trajectories] == [0, 1, 2]
        for traj in group.trajectories:
            assert traj.initial_state == pytest.approx(starts[traj.scenario_id])  # P_0 = P_1 - v_1
            assert 1 <= len(traj) <= 3
            assert traj.done_reason in ("success", "max_turns")
            assert (traj.done_reason == "max_turns") == (len(traj) == 3 and traj.turns[-1].info["done_reason"] is None)
            assert traj.turns[0].user_message.startswith("Hello, I am toy")
            for k, turn in enumerate(traj.turns, start=1):
                assert turn.index == k
                assert 1 <= len(turn.response_ids) <= 8 and len(turn.old_logprobs) == len(turn.response_ids)
                assert all(lp <= 0 for lp in turn.old_logprobs)
                assert turn.truncated == (len(turn.response_ids) == 8 and turn.response_ids[-1] != 2)
                assert len(turn.action) == 3 and len(turn.state) == 3
                assert turn.distance == pytest.approx(sum(x * x for x in turn.state) ** 0.5)


def test_dialogue_ids_are_prompts_plus_sampled_replies(policy, groups):
    for traj in (t for g in groups for t in g.trajectories):
        expected = policy.first_prompt_ids("Be kind.", traj.turns[0].user_message)
        for k, turn in enumerate(traj.turns):
            if k:
                expected += policy.next_prompt_ids(turn.user_message)
            assert turn.prompt_length == len(expected)
            expected += turn.response_ids + ([policy.end_of_turn_id] if turn.truncated else [])
        assert traj.token_ids == expected
        check_reply_ids(traj)  # the ids trained on are the ids sampled


@pytest.mark.parametrize("reuse_cache", [True, False])
def test_old_logprobs_are_the_training_forwards_logprobs(policy, reuse_cache):
    torch.manual_seed(2)
    spec = RolloutSpec(samples_per_scenario=2, max_turns=3, max_new_tokens=5, reuse_cache=reuse_cache)
    groups = rollout(policy, toy_scenarios(2), lambda: ToyEnvironment(end_early=False), spec)
    for traj in (t for g in groups for t in g.trajectories):
        seq = packed_sequence(traj, [1.0] * len(traj))
        ids = torch.tensor([seq.input_ids], device=policy.device)
        trained = torch.tensor([seq.trained], device=policy.device)
        logp, _ = policy.token_logprobs(ids, torch.ones_like(ids), trained, temperature=spec.temperature)
        old = torch.tensor([lp for turn in traj.turns for lp in turn.old_logprobs])
        assert torch.allclose(logp[0].cpu(), old, atol=1e-4)


def test_a_tampered_dialogue_is_refused(groups):
    import copy

    traj = copy.deepcopy(groups[0].trajectories[0])
    turn = traj.turns[0]
    traj.token_ids[turn.prompt_length] = (traj.token_ids[turn.prompt_length] + 1) % 1000
    with pytest.raises(AssertionError, match="not the sampled ids"):
        packed_sequence(traj, [0.5] * len(traj))


class DistanceOnlyEnvironment:
    """Reports D_t (10, 9, 8, ...) but no state; optionally D_0 in its first step's info."""

    def __init__(self, report_d0: bool) -> None:
        self.report_d0 = report_d0

    def reset(self, scenario, seed=None):
        self.distance = 10.0
        return "Hello."

    def step(self, response):
        info = {"initial_distance": self.distance} if self.report_d0 and self.distance == 10.0 else {}
        self.distance -= 1.0
        return StepResult("Go on.", (1.0,), False, {**info, "distance": self.distance})


def test_an_env_with_distances_but_no_state_needs_d0(policy):
    spec = RolloutSpec(samples_per_scenario=1, max_turns=3, max_new_tokens=4, system_prompt="Be kind.")
    with pytest.raises(ValueError, match=r"scenario 'plain': .*D_0 is unknown.*'initial_distance'"):
        rollout(policy, [Scenario(id="plain")], lambda: DistanceOnlyEnvironment(report_d0=False), spec)
    (group,) = rollout(policy, [Scenario(id="plain")], lambda: DistanceOnlyEnvironment(report_d0=True), spec)
    (trajectory,) = group.trajectories
    assert trajectory.distances == [10.0, 9.0, 8.0, 7.0]
    assert rewards_from_distances(trajectory.distances, "idr") == [1.0, 1.0, 1.0]  # not [-9, 1, 1]
    assert rewards_from_distances(trajectory.distances, "outcome") == [0.0, 0.0, 3.0]


class _MeetingEnvironment(ToyEnvironment):
    """A step passes only once another dialogue's step is in flight too (else it fails after a minute):
    concurrency observed, not inferred from a sleep, so a busy machine cannot fake or hide it."""

    meeting = threading.Barrier(2, timeout=60)

    def step(self, response: str) -> StepResult:
        self.meeting.wait()
        return super().step(response)


def test_environments_step_concurrently(policy):
    spec = RolloutSpec(samples_per_scenario=4, max_turns=1, max_new_tokens=2, env_workers=4)
    with ThreadPoolExecutor(4) as pool:
        (group,) = rollout(policy, toy_scenarios(1), _MeetingEnvironment, spec, pool=pool)
    assert [len(t) for t in group.trajectories] == [1, 1, 1, 1]  # every step met another one in flight


def test_context_limit_ends_a_dialogue(policy):
    opening = len(policy.first_prompt_ids("Be kind.", "Hello, I am toy 0."))
    spec = RolloutSpec(
        samples_per_scenario=1, max_turns=5, max_new_tokens=8, max_context_tokens=opening + 12, system_prompt="Be kind."
    )
    torch.manual_seed(0)
    (group,) = rollout(policy, toy_scenarios(1), lambda: ToyEnvironment(end_early=False), spec)
    assert group.trajectories[0].done_reason == "context_limit" and len(group.trajectories[0]) == 1
    with pytest.raises(ValueError, match="opening prompt"):
        rollout(policy, toy_scenarios(1), ToyEnvironment, RolloutSpec(max_new_tokens=8, max_context_tokens=opening))


def test_bench_rollout_command_writes_the_ratio(tmp_path):
    import json

    from typer.testing import CliRunner

    from mapo.cli import app
    from mapo.engines.vllm_setup import missing_requirement

    args = ["bench", "rollout", "--trajectories", "4", "--turns", "2", "--max-new-tokens", "3"]
    args += ["--output", str(tmp_path)]
    args += ["--set", "policy.model=tiny", "--set", "env.name=toy-test", "--set", "rollout.samples_per_scenario=2",
             "--set", "rollout.vllm.kv_cache_gb=0.25"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    data = json.loads((tmp_path / "bench_rollout.json").read_text())
    assert data["modes"]["hf"]["trajectories"] == data["modes"]["sequential"]["trajectories"] == 4
    assert data["ratios"]["sequential_over_hf_tokens_per_s_generate"] > 0
    assert "ratio sequential_over_hf_tokens_per_s_generate" in result.output
    if missing_requirement():  # without vLLM the engine mode is skipped, and says why
        assert data["skipped"]["vllm"] == missing_requirement() and "vllm" not in data["modes"]
    else:  # the same dialogues through vLLM: its start-up, sync and mismatch to torch apart
        assert data["modes"]["vllm"]["trajectories"] == 4 and data["ratios"]["vllm_over_hf_turns_per_s_wall"] > 0
        vllm = data["engines"]["vllm"]
        assert vllm["start_s"] > 0 and vllm["first_sync_s"] > 0 and vllm["sync_mb"] > 0
        assert vllm["mismatch"]["tokens"] == data["modes"]["vllm"]["generated_tokens"]
        assert data["modes"]["vllm"]["engine"]["tokens_kept"] == data["modes"]["vllm"]["generated_tokens"]


class FixedReplies:
    """A text-only policy (the ChatPolicy protocol of an OpenAI-compatible endpoint): replies, no ids."""

    def chat_replies(self, conversations, max_new_tokens, temperature, top_p):
        return [f"Reply number {len(c)}." for c in conversations]


def test_text_only_policies_roll_out_without_token_ids():
    spec = RolloutSpec(scenarios_per_step=2, samples_per_scenario=2, max_turns=3, env_workers=1)
    groups = rollout(FixedReplies(), toy_scenarios(2), lambda: ToyEnvironment(end_early=False), spec, seed=0)
    trajectories = [t for g in groups for t in g.trajectories]
    assert all(len(t.turns) == 3 and t.token_ids == [] for t in trajectories)
    assert all(turn.response.startswith("Reply number") and not turn.response_ids for t in trajectories for turn in t.turns)
