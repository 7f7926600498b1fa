"""EMPA-style eval metrics on hand-made trajectories: per dialogue and aggregated."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mapo.core.types import Scenario, Trajectory, Turn
from mapo.envs.dynamics import epmq, levels_to_vector
from mapo.envs.empathy.cards import EmpathyScenario
from mapo.evaluate.empa import aggregate, dialogue_metrics, outcome_of, per_scenario, transcript_record

NEUTRAL = {"C_prog": 0, "A_prog": 0, "P_prog": 0, "C_neg": 0, "A_neg": 0, "P_neg": 0}


def make_trajectory(p0, levels_per_turn, done_reason="timeout", scenario_id="s1", sample=0, info=None, keep_p0=True):
    state = np.asarray(p0, dtype=float)
    turns = []
    for t, levels in enumerate(levels_per_turn, start=1):
        v = levels_to_vector({**NEUTRAL, **levels}) if levels is not None else (0.0, 0.0, 0.0)
        state = state + v
        turns.append(
            Turn(index=t, user_message=f"user {t}", response=f"reply {t}", action=tuple(v), state=tuple(state),
                 distance=float(np.linalg.norm(state)), levels={**NEUTRAL, **levels} if levels is not None else {},
                 info=dict((info or {}).get(t, {})))
        )
    return Trajectory(scenario_id, sample, tuple(p0) if keep_p0 else (), turns, done_reason)


def scenario(axis="A", sid="s1"):
    return EmpathyScenario(id=sid, title=f"title {sid}", category="health", dominant_axis=axis)


def test_outcome_classes():
    assert [outcome_of(r) for r in ("success", "failure", "timeout", "max_turns", "context_limit", None)] == [
        "success", "failure", "timeout", "timeout", "other", "other"]


def test_dialogue_metrics_by_hand():
    p0 = (-3.0, -4.0, 0.0)  # D_0 = 5, v*_0 = (0.6, 0.8, 0)
    traj = make_trajectory(p0, [{"A_prog": 2}, {"C_prog": 1}, {"A_neg": -1}], done_reason="max_turns")
    m = dialogue_metrics(traj, scenario())
    assert m["outcome"] == "timeout" and m["reason"] == "max_turns" and m["turns"] == 3
    assert m["title"] == "title s1" and m["dominant_axis"] == "A"
    # a scenario of another environment has no dominant axis
    plain = dialogue_metrics(traj, Scenario(id="s1", title="title s1", category="health"))
    assert plain["dominant_axis"] == "" and plain["title"] == "title s1" and plain["category"] == "health"
    assert dialogue_metrics(traj)["dominant_axis"] == ""
    # v = (0,3,0), (1,0,0), (0,-2,0); P: (-3,-1,0), (-2,-1,0), (-2,-3,0)
    assert m["distances"] == pytest.approx([5.0, math.sqrt(10), math.sqrt(5), math.sqrt(13)])
    assert m["final_state"] == [-2.0, -3.0, 0.0]
    # alignment to v*_0: cos = 0.8, 0.6, -0.8
    assert m["alignment"]["target"] == pytest.approx((0.8 + 0.6 - 0.8) / 3)
    assert m["alignment"]["target_by_axis"] == pytest.approx({"C": 0.6 / 3, "A": 0.0, "P": 0.0})
    # alignment to the deficit -P_{t-1}: (3,4,0)->0.8, (3,1,0)->3/sqrt(10), (2,1,0)->-1/sqrt(5)
    deficit = [0.8, 3 / math.sqrt(10), -1 / math.sqrt(5)]
    assert m["alignment"]["deficit"] == pytest.approx(sum(deficit) / 3)
    assert sum(m["alignment"]["deficit_by_axis"].values()) == pytest.approx(m["alignment"]["deficit"])
    # EPM-Q: the dynamics' own score of the same record, with Rpos = 2 of 3 turns positive
    assert m["epmq"]["Rpos"] == pytest.approx(200 / 3)
    assert m["epmq"]["RDI"] == pytest.approx((100 * (5 - math.sqrt(13)) / 5 + 100) / 2)
    record = {"p0": list(p0), "vectors": [list(t.action) for t in traj.turns], "levels": [t.levels for t in traj.turns]}
    assert m["epmq"] == pytest.approx(epmq(record))
    assert m["energy"] == pytest.approx(2.4 + 0.6 - 1.6)


def test_missing_levels_leave_epmq_out_and_p0_is_recovered():
    traj = make_trajectory((-3.0, -4.0, 0.0), [{"A_prog": 1}, None], keep_p0=False)
    m = dialogue_metrics(traj)
    assert m["initial_state"] == [-3.0, -4.0, 0.0]
    assert m["epmq"] is None
    assert m["turns"] == 2 and m["distances"][0] == pytest.approx(5.0)


def test_fallbacks_are_counted_per_role():
    info = {1: {"fallbacks": {"judge": True, "actor": False}}, 2: {"judge_fallback": True, "director_fallback": 1}}
    m = dialogue_metrics(make_trajectory((-3.0, -4.0, 0.0), [{"A_prog": 1}, {"C_prog": 1}], info=info))
    assert m["fallbacks"] == {"judge": 2, "director": 1}


def test_aggregate_pass_rate_axes_alignment_and_fallbacks():
    dialogues = [
        dialogue_metrics(make_trajectory((-3.0, -4.0, 0.0), [{"A_prog": 2}] * 2, "success", "a"), scenario("A", "a")),
        dialogue_metrics(make_trajectory((-3.0, -4.0, 0.0), [{"A_neg": -2}] * 2, "failure", "a", 1), scenario("A", "a")),
        dialogue_metrics(
            make_trajectory((-4.0, 0.0, -3.0), [{"C_prog": 2}, None], "success", "b", info={1: {"judge_fallback": True}}),
            scenario("C", "b"),
        ),
    ]
    s = aggregate(dialogues)
    assert s["dialogues"] == 3 and s["scenarios"] == 2
    assert s["pass_count"] == 2 and s["pass_rate"] == pytest.approx(2 / 3)
    assert s["outcomes"] == {"success": 2, "failure": 1, "timeout": 0, "other": 0}
    assert s["success_by_axis"] == {"A": {"dialogues": 2, "passes": 1, "rate": 0.5}, "C": {"dialogues": 1, "passes": 1, "rate": 1.0}}
    # EPM-Q averages the dialogues that have judge levels on every turn (the third lacks one)
    assert s["epmq_scored"] == 2
    assert s["epmq"]["epmq"] == pytest.approx((dialogues[0]["epmq"]["epmq"] + dialogues[1]["epmq"]["epmq"]) / 2)
    expected_a = np.mean([d["alignment"]["target_by_axis"]["A"] for d in dialogues])
    assert s["alignment"]["target_by_axis"]["A"] == pytest.approx(expected_a)
    assert s["alignment"]["target"] == pytest.approx(np.mean([d["alignment"]["target"] for d in dialogues]))
    assert s["fallbacks"] == {"judge": 1} and s["fallback_total"] == 1
    assert s["turns_mean"] == 2.0

    groups = per_scenario(dialogues)
    assert [g["scenario_id"] for g in groups] == ["a", "b"]
    assert groups[0]["pass_rate"] == 0.5 and len(groups[0]["samples"]) == 2 and groups[1]["epmq_mean"] is None
    with pytest.raises(ValueError, match="no dialogues"):
        aggregate([])


def test_transcript_record_carries_turns_and_verdict():
    traj = make_trajectory((-3.0, -4.0, 0.0), [{"A_prog": 2}], "success")
    m = dialogue_metrics(traj, scenario())
    record = transcript_record(traj, m)
    assert record["outcome"] == "success" and record["epmq"] == pytest.approx(m["epmq"]["epmq"])
    assert record["turns"][0]["state"] == [-3.0, -1.0, 0.0] and record["turns"][0]["levels"]["A_prog"] == 2
