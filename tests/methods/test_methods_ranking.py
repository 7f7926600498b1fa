"""RAPO generative ranking (offline and LLM with repair/fallback) and one-turn-lookahead branching."""

from __future__ import annotations

import math

import pytest
from scripted_client import ScriptedClient
from tiny_policy import ToyEnvironment, tiny_policy, toy_scenarios

from mapo.core.rollout import RolloutSpec
from mapo.methods.branching import branching_rollout
from mapo.methods.ranking import Candidate, LLMRanker, OfflineRanker
from mapo.methods.rapo import Rapo, RapoSpec, ranking_advantages

CANDIDATES = [
    Candidate("I hear you.", "Thanks, I guess.", 0.0, {"C_prog": 0}),
    Candidate("What part weighs most?", "The money, honestly.", 2.0, {"C_prog": 2}),
    Candidate("Just cheer up.", "That hurt.", -3.0, {"A_neg": -2}),
]
CONTEXT = [
    {"role": "system", "content": "Be kind."},
    {"role": "user", "content": "I lost my job."},
]


def test_offline_ranker_orders_by_the_judges_reward():
    ranking = OfflineRanker().rank(CONTEXT, CANDIDATES)
    assert [r.rank for r in ranking.items] == [2, 1, 3]
    assert ranking.items[0].score == pytest.approx(0.5)
    assert ranking.items[1].score == pytest.approx(1 / (1 + math.exp(-2.0)))
    assert "badly set back the user's feelings" in ranking.items[2].critique and not ranking.fallback


GOOD = (
    '{"rankings": [{"candidate": 0, "rank": 2, "score": 0.4, "critique": "Generic."},'
    ' {"candidate": 1, "rank": 1, "score": 0.9, "critique": "Specific question."},'
    ' {"candidate": 2, "rank": 3, "score": 0.05, "critique": "Dismissive."}]}'
)


def test_llm_ranker_validates_repairs_and_falls_back():
    client = ScriptedClient([GOOD])
    ranking = LLMRanker(client).rank(CONTEXT, CANDIDATES)
    assert [(r.rank, r.score) for r in ranking.items] == [
        (2, 0.4),
        (1, 0.9),
        (3, 0.05),
    ] and not ranking.fallback
    prompt = client.seen[0][1]["content"]
    assert "Person's reaction: That hurt." in prompt and "Person: I lost my job." in prompt
    duplicate_rank = GOOD.replace('"rank": 3', '"rank": 1')
    repaired = ScriptedClient([duplicate_rank, GOOD])
    assert [r.rank for r in LLMRanker(repaired).rank(CONTEXT, CANDIDATES).items] == [
        2,
        1,
        3,
    ]
    assert "ranks must be 1..3" in repaired.seen[1][-1]["content"]  # the repair request names the problem
    broken = LLMRanker(ScriptedClient(["no json", '{"rankings": []}'])).rank(CONTEXT, CANDIDATES)
    assert broken.fallback and [r.rank for r in broken.items] == [
        2,
        1,
        3,
    ]  # the offline ranking, marked


def test_branching_groups_share_a_prefix_and_train_only_the_candidates():
    policy = tiny_policy(lora=True)
    spec = RolloutSpec(samples_per_scenario=3, max_turns=3, max_new_tokens=6, system_prompt="Be kind.")
    make_env = lambda: ToyEnvironment(end_early=False)
    groups, metrics = branching_rollout(policy, toy_scenarios(2), make_env, spec, OfflineRanker(), seed=5, turn=2)
    assert metrics["branch_turn"] == 2 and metrics["branch_groups"] == 2 and metrics["ranker_fallbacks"] == 0
    for group in groups:
        assert len(group.trajectories) == 3
        first = group.trajectories[0]
        for i, traj in enumerate(group.trajectories):
            assert len(traj) == 2 and traj.turns[0] is first.turns[0] and traj.turns[0].info["branch_prefix"]
            last = traj.turns[-1]
            assert traj.token_ids[last.prompt_length : last.prompt_length + len(last.response_ids)] == last.response_ids
            assert traj.token_ids[: last.prompt_length] == first.token_ids[: last.prompt_length]
            # the toy env's action follows the reply's length: each candidate got its own judgement
            assert last.action[0] == float(len(last.response) % 3 - 1)
            assert {"rank", "rank_score", "critique", "reaction"} <= set(last.info)
        assert sorted(t.turns[-1].info["rank"] for t in group.trajectories) == [1, 2, 3]
    advantages = ranking_advantages(groups)
    for group, adv in zip(groups, advantages):
        assert all(a[0] is None for a in adv)
        scores = [t.turns[-1].reward for t in group.trajectories]
        last = [a[-1] for a in adv]
        assert sum(last) == pytest.approx(0.0, abs=1e-9)
        assert scores == [t.turns[-1].info["rank_score"] for t in group.trajectories]
        if max(scores) > min(scores):
            assert last.index(max(last)) == scores.index(max(scores))
    rapo = Rapo(RapoSpec(branching=True, distill=True))
    rapo.branch_metrics = metrics
    _, selected = rapo.select(groups, advantages)
    assert selected["branch_groups"] == 2
    distill = rapo.distillation(policy, groups, temperature=1.0)
    assert len(distill.targets) == 2  # the worst candidate of each group, taught with its own reaction
