"""EMPA dynamics: level mappings, scripted dialogues through each ending, EPM-Q by hand."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mapo.envs.dynamics import (
    EPMQ_INDICES,
    DynamicsConfig,
    NeedState,
    alignment,
    axis_alignment,
    epmq,
    initial_vector,
    levels_to_vector,
)

NEUTRAL = {"C_prog": 0, "A_prog": 0, "P_prog": 0, "C_neg": 0, "A_neg": 0, "P_neg": 0}


def lv(**changes: int) -> dict[str, int]:
    return {**NEUTRAL, **changes}


# P_0 = (0, -6, -8): A1 = 1 (-2) + A2 = 1 (core, -4) = -6; P2 = 2 (core, -8) = -8.
# D_0 = 10, v*_0 = (0, 0.6, 0.8); eps_dist = eps_dir = 1, eps_energy = 10.
INDICATORS = {"C1": 0, "C2": 0, "C3": 0, "A1": 1, "A2": 1, "A3": 0, "P1": 0, "P2": 2, "P3": 0}


def run(levels: list[dict[str, int]], config: DynamicsConfig | None = None) -> tuple[NeedState, list]:
    state = NeedState(initial_vector(INDICATORS), config)
    infos = [state.step(levels_to_vector(x), x) for x in levels]
    return state, infos


# ---------------------------------------------------------------- mappings


def test_levels_to_vector():
    assert levels_to_vector(NEUTRAL) == (0.0, 0.0, 0.0)
    # prog 0/1/2 -> 0/+1/+3 on each axis
    assert levels_to_vector(lv(C_prog=1, A_prog=2, P_prog=1)) == (1.0, 3.0, 1.0)
    # C_neg -1/-2 -> -2/-4; A_neg, P_neg -1/-2 -> -2/-5
    assert levels_to_vector(lv(C_neg=-2, A_neg=-2, P_neg=-1)) == (-4.0, -5.0, -2.0)
    # per axis prog + neg: C 3 - 2 = 1, A 1 - 5 = -4, P 0 - 5 = -5
    assert levels_to_vector(lv(C_prog=2, C_neg=-1, A_prog=1, A_neg=-2, P_neg=-2)) == (1.0, -4.0, -5.0)


def test_initial_vector_weights():
    assert initial_vector({k: 0 for k in INDICATORS}) == (0.0, 0.0, 0.0)
    # all at 3: C = 6 + 6 + 9 = 21; A and P = 6 + 12 + 9 = 27 (the [-27, 0] bound)
    assert initial_vector({k: 3 for k in INDICATORS}) == (-21.0, -27.0, -27.0)
    # all at 1: C = 2 + 2 + 3 = 7; A, P = 2 + 4 + 3 = 9
    assert initial_vector({k: 1 for k in INDICATORS}) == (-7.0, -9.0, -9.0)
    # one at a time: priority C3 = 2 -> -6, core A2 = 2 -> -8, standard P1 = 2 -> -4
    assert initial_vector({**{k: 0 for k in INDICATORS}, "C3": 2, "A2": 2, "P1": 2}) == (-6.0, -8.0, -4.0)
    assert initial_vector(INDICATORS) == (0.0, -6.0, -8.0)


@pytest.mark.parametrize(
    ("levels", "message"),
    [
        (lv(C_prog=3), r"C_prog=3 is not one of \[0, 1, 2\]"),
        (lv(A_prog=-1), r"A_prog=-1 is not one of \[0, 1, 2\]"),
        (lv(P_neg=1), r"P_neg=1 is not one of \[-2, -1, 0\]"),
        (lv(C_neg=-3), r"C_neg=-3 is not one of"),
        (lv(A_prog=1.5), r"A_prog=1.5 is not one of"),
        (lv(A_prog="1"), r"A_prog='1' is not one of"),
        (lv(C_prog=True), r"C_prog=True is not one of"),
        (lv(P_prog=float("nan")), r"P_prog=nan is not one of"),
        ({k: v for k, v in NEUTRAL.items() if k != "A_neg"}, "missing key 'A_neg'"),
        ({**NEUTRAL, "E_prog": 1}, "unknown key.*E_prog"),
        ("C_prog=1", "expected a dict"),
    ],
)
def test_bad_levels_are_named(levels, message):
    with pytest.raises(ValueError, match=message):
        levels_to_vector(levels)


@pytest.mark.parametrize(
    ("indicators", "message"),
    [
        ({**INDICATORS, "A2": 4}, r"A2=4 is not one of \[0, 1, 2, 3\]"),
        ({**INDICATORS, "C1": -1}, r"C1=-1 is not one of"),
        ({k: v for k, v in INDICATORS.items() if k != "P3"}, "missing key 'P3'"),
        ({**INDICATORS, "Q1": 0}, "unknown key.*Q1"),
    ],
)
def test_bad_indicators_are_named(indicators, message):
    with pytest.raises(ValueError, match=message):
        initial_vector(indicators)


def test_bad_vectors_are_named():
    with pytest.raises(ValueError, match="non-finite"):
        NeedState([0.0, float("nan"), -1.0])
    state = NeedState([0.0, -6.0, -8.0])
    with pytest.raises(ValueError, match=r"action vector v_1: non-finite"):
        state.step([0.0, float("inf"), 0.0])
    with pytest.raises(ValueError, match=r"v_1: expected 3 components"):
        state.step([1.0, 2.0])
    with pytest.raises(ValueError, match="C_prog=5"):
        state.step([0.0, 0.0, 0.0], lv(C_prog=5))
    assert state.turn == 0  # nothing was applied


# ---------------------------------------------------------------- one step by hand


def test_step_quantities_by_hand():
    state = NeedState((0.0, -6.0, -8.0))
    assert state.target.tolist() == [0.0, 0.6, 0.8]
    assert state.projection == pytest.approx(-10.0)  # P_0 . v*_0 = -D_0
    # v_1 = (0, 3, 3): Delta E = 0.6*3 + 0.8*3 = 4.2; P_1 = (0, -3, -5), D_1 = sqrt 34
    # projection = -3*0.6 - 5*0.8 = -5.8; cos(v, v*_0) = 4.2/sqrt 18; deficit -P_0 = (0, 6, 8) -> same
    info = state.step((0.0, 3.0, 3.0))
    assert info.delta_e == pytest.approx(4.2)
    assert info.distance == pytest.approx(math.sqrt(34))
    assert info.projection == pytest.approx(-5.8)
    assert info.alignment_target == pytest.approx(4.2 / math.sqrt(18))
    assert info.alignment_deficit == pytest.approx(4.2 / math.sqrt(18))
    assert info.status is None and state.turn == 1
    # v_2 = (1, -2, 0): Delta E = -1.2; deficit -P_1 = (0, 3, 5):
    # cos = (0 - 6 + 0)/(sqrt 5 * sqrt 34) = -0.46018; by axis (0, -6, 0)/(sqrt 5 sqrt 34)
    info = state.step((1.0, -2.0, 0.0))
    assert info.delta_e == pytest.approx(-1.2)
    assert info.alignment_deficit == pytest.approx(-6 / math.sqrt(5 * 34))
    assert info.alignment_deficit_by_axis == pytest.approx((0.0, -6 / math.sqrt(5 * 34), 0.0))
    assert sum(info.alignment_target_by_axis) == pytest.approx(info.alignment_target)
    assert state.energy == pytest.approx(3.0)
    assert state.p.tolist() == [1.0, -5.0, -5.0]
    assert state.distances == pytest.approx([10.0, math.sqrt(34), math.sqrt(51)])
    # deepest axis: most negative component of (1, -5, -5) -> A (first on the tie)
    assert state.deepest_axis() == "A"
    state.step((0.0, 1.0, 0.0))
    assert state.deepest_axis() == "P"


def test_alignment_zero_cases():
    assert alignment((0, 0, 0), (1, 2, 3)) == 0.0
    assert alignment((1, 2, 3), (0, 0, 0)) == 0.0
    assert alignment((1, 0, 0), (-2, 0, 0)) == -1.0
    assert axis_alignment((0, 0, 0), (1, 1, 1)) == (0.0, 0.0, 0.0)


# ---------------------------------------------------------------- scripted endings


def test_success_at_turn_12():
    # Turns 1-3 A_prog = P_prog = 2: v = (0, 3, 3), Delta E = 4.2 each.
    #   P: (0,-3,-5) -> (0,0,-2) -> (0,3,1); E_total = 12.6 >= eps_energy = 10;
    #   projection_3 = 0.6*3 + 0.8*1 = 2.6 >= -eps_dir = -1. Success holds from turn 3,
    # but is checked only from turn 12; turns 4-12 neutral (Delta E = 0: no regression).
    state, infos = run([lv(A_prog=2, P_prog=2)] * 3 + [NEUTRAL] * 9)
    assert [i.status for i in infos[:11]] == [None] * 11
    assert infos[11].status == "success" and infos[11].turn == 12
    assert state.status() == "success"
    assert state.energy == pytest.approx(12.6)
    assert state.projection == pytest.approx(2.6)
    with pytest.raises(RuntimeError, match="already ended"):
        state.step((0.0, 0.0, 0.0))


def test_success_by_distance_needs_energy_too():
    # Reaching the origin exactly: 2x (0,3,3) -> (0,0,-2); then P_prog=1 twice -> (0,0,0).
    # E_total = 4.2 + 4.2 + 0.8 + 0.8 = 10 = eps_energy (up to rounding) and D = 0 <= 1.
    # With energy_frac = 1.1 the energy bar (11) is not met: no success, a timeout at 14 instead.
    plan = [lv(A_prog=2, P_prog=2)] * 2 + [lv(P_prog=1)] * 2 + [NEUTRAL] * 10
    state, infos = run(plan, DynamicsConfig(energy_frac=1.1, max_turns=14))
    assert state.distance == 0.0
    assert [i.status for i in infos[:13]] == [None] * 13 and infos[13].status == "timeout"


@pytest.mark.parametrize("level", [1, 3])
def test_landing_exactly_on_the_origin_is_a_success(level):
    # Undo P_0 one unit per turn (all-1: 25 turns, all-3: 75). In exact arithmetic
    # E_total = (0 - P_0) . v*_0 = D_0 = eps_energy, a tie; summed in floats it comes out
    # 3.6e-15 (all-1) and 1.4e-14 (all-3) short. The tie must still count as success, on landing.
    p0 = initial_vector({k: level for k in INDICATORS})
    state = NeedState(p0, DynamicsConfig(max_turns=200))
    units = [np.eye(3)[k] for k in range(3) for _ in range(int(-p0[k]))]
    infos = [state.step(unit) for unit in units]
    assert [i.status for i in infos[:-1]] == [None] * (len(units) - 1)
    assert state.distance == 0.0 and infos[-1].status == "success"
    assert state.energy < state.d0  # the float sum really is short of the threshold


def test_collapse_after_five_negative_delta_e():
    # Turns 1-6 P_prog = 1: v = (0,0,1), Delta E = 0.8 each -> E = 4.8 < 10 (no success).
    # Turns 7-12 neutral. Turns 13-17 A_neg = -1: v = (0,-2,0), Delta E = -1.2 each.
    # Turn 16: only four negatives in a row; last 8 Delta E (9..16) hold 4 negatives (< 6).
    # Turn 17: the last five Delta E are all < 0 -> failure.
    state, infos = run([lv(P_prog=1)] * 6 + [NEUTRAL] * 6 + [lv(A_neg=-1)] * 5)
    assert [i.status for i in infos[:16]] == [None] * 16
    assert infos[16].status == "failure" and state.turn == 17
    assert state.delta_e[-5:] == pytest.approx([-1.2] * 5)
    assert state.energy == pytest.approx(4.8 - 6.0)


REGRESS = lv(A_neg=-1)  # v = (0, -2, 0), Delta E = -1.2
WOBBLE_UP = lv(A_prog=1, A_neg=-1, P_prog=1)  # v = (0, -1, 1), Delta E = (-6 + 8)/10 = +0.2
WOBBLE_DOWN = lv(A_prog=1, P_prog=1, P_neg=-1)  # v = (0, 1, -1), Delta E = (6 - 8)/10 = -0.2
STAGNATE = [NEUTRAL] * 5 + [REGRESS] * 4 + [WOBBLE_UP, WOBBLE_DOWN, WOBBLE_UP, WOBBLE_DOWN]


def test_stagnation_with_regression_fails():
    # Turns 1-5 neutral; 6-9 regress (a run of 4, never 5); 10-13 wobble up/down/up/down.
    # P_9 = (0,-14,-8), D = sqrt 260 = 16.1245; a wobble up gives (0,-15,-7), D = sqrt 274 = 16.5529,
    # the next wobble down returns. Turn 13: last 5 D = 16.12, 16.55, 16.12, 16.55, 16.12:
    #   std = 0.4284 * sqrt(0.4 * 0.6) = 0.2099 < 0.5;
    #   last 8 Delta E (6..13) = -1.2 x4, +0.2, -0.2, +0.2, -0.2: 6 negatives, sum -5.2 < -1 -> failure.
    # Turn 12: last 8 (5..12) hold 5 negatives only -> still running.
    state, infos = run(STAGNATE)
    assert [i.status for i in infos[:12]] == [None] * 12
    assert infos[12].status == "failure" and state.turn == 13
    assert float(np.std(state.distances[-5:])) == pytest.approx(0.4284 * math.sqrt(0.24), abs=1e-3)
    # never five negatives in a row: it was the stagnation rule
    assert max(len(run_) for run_ in "".join("n" if x < 0 else "." for x in state.delta_e).split(".")) == 4


def test_stagnation_rule_follows_its_config():
    # The same dialogue with a stricter std bar (0.1 < 0.2099) does not fail; it runs to its timeout.
    plan = STAGNATE + [NEUTRAL] * 2
    _, infos = run(plan, DynamicsConfig(stagnation_std=0.1, max_turns=15))
    assert [i.status for i in infos] == [None] * 14 + ["timeout"]


def test_timeout_at_max_turns():
    # 45 neutral turns: Delta E = 0 (no success, no regression) -> timeout exactly at 45.
    state, infos = run([NEUTRAL] * 45)
    assert [i.status for i in infos[:44]] == [None] * 44
    assert infos[44].status == "timeout" and state.turn == 45
    _, infos = run([NEUTRAL] * 6, DynamicsConfig(max_turns=6))
    assert infos[-1].status == "timeout"


@pytest.mark.parametrize(
    ("field", "value"),
    [("max_turns", 0), ("success_from_turn", 1.5), ("regression_run", -1), ("dist_frac", -0.1),
     ("stagnation_min_negative", 9), ("energy_frac", float("nan"))],
)
def test_bad_config_is_named(field, value):
    with pytest.raises(ValueError, match=f"DynamicsConfig.{field}"):
        DynamicsConfig(**{field: value})


# ---------------------------------------------------------------- EPM-Q


def test_epmq_by_hand():
    # P_0 = (0,-6,-8), r0 = D_0 = 10, v*_0 = (0, .6, .8).
    # t1 A_prog=2, P_prog=2 -> v = (0,3,3),  dE =  4.2, P = (0,-3,-5)
    # t2 C_prog=1, A_neg=-1 -> v = (1,-2,0), dE = -1.2, P = (1,-5,-5)
    # t3 C_prog=1, P_prog=2 -> v = (1,0,3),  dE =  2.4, P = (2,-5,-2), D_3 = sqrt 33
    levels = [lv(A_prog=2, P_prog=2), lv(C_prog=1, A_neg=-1), lv(C_prog=1, P_prog=2)]
    state, _ = run(levels)
    score = epmq(state.record())
    assert epmq(json.loads(json.dumps(state.record()))) == score  # the record is plain JSON
    d3 = math.sqrt(33)
    rdi = (100 * (10 - d3) / 10 + 100) / 2  # 71.277
    etot = 5.4 / (1.2 * 10) * 100  # E_total = 4.2 - 1.2 + 2.4 = 5.4 -> 45
    snet = 7 / (1.5 * 10) * 100  # levels sum (2+2) + (1-1) + (1+2) = 7 -> 46.667
    rho = (5.4 / 3) / 2.5 * 100  # 72
    sproj = rho  # mean Delta E = E_total / turns
    path = math.sqrt(18) + math.sqrt(5) + math.sqrt(10)  # 9.6410
    displacement = math.sqrt(41)  # P_3 - P_0 = (2, 1, 6)
    tau = (3 - path / displacement) / 2 * 100  # 74.716
    rpos = 100 * 2 / 3  # turns 1 and 3 have dE > 0
    cosines = [4.2 / math.sqrt(18), -1.2 / math.sqrt(5), 2.4 / math.sqrt(10)]  # .98995, -.53666, .75895
    align = (sum(cosines) / 3 + 1) / 2 * 100  # 70.204
    pen = (3 - 1 / 3) / 3 * 100  # sum |neg| = 1 over 3 turns -> 88.889
    outcome, efficiency, stability = (rdi + etot + snet) / 3, (rho + sproj + tau) / 3, (rpos + align + pen) / 3
    expected = {
        "RDI": rdi, "Etot": etot, "Snet": snet, "Rho": rho, "Sproj": sproj, "Tau": tau,
        "Rpos": rpos, "Align": align, "Pen": pen,
        "outcome": outcome, "efficiency": efficiency, "stability": stability,
        "epmq": 0.4 * outcome + 0.2 * efficiency + 0.4 * stability,
    }
    assert set(score) == set(expected)
    for key, value in expected.items():
        assert score[key] == pytest.approx(value, rel=1e-12), key
    assert score["epmq"] == pytest.approx(66.408, abs=1e-3)


def test_epmq_reads_a_hand_built_record():
    record = {
        "p0": [0.0, -6.0, -8.0],
        "vectors": [[0.0, 3.0, 3.0]],
        "levels": [lv(A_prog=2, P_prog=2)],
    }
    score = epmq(record)
    # D_1 = sqrt 34: RDI = (100 (10 - sqrt 34)/10 + 100)/2; Snet = 4/15*100; Pen = 100; Rpos = 100
    assert score["RDI"] == pytest.approx((100 * (10 - math.sqrt(34)) / 10 + 100) / 2)
    assert score["Snet"] == pytest.approx(400 / 15)
    assert score["Pen"] == 100.0 and score["Rpos"] == 100.0
    # a single straight move: path = displacement -> Tau = (3 - 1)/2*100 = 100
    assert score["Tau"] == pytest.approx(100.0)


def test_zero_start_never_divides_by_zero():
    # P_0 = 0: v*_0 = 0, every Delta E and target alignment 0; RDI, Etot, Snet = 0 (they divide by r0).
    state = NeedState((0.0, 0.0, 0.0))
    assert state.target.tolist() == [0.0, 0.0, 0.0]
    info = state.step((1.0, 0.0, -2.0), lv(C_prog=1, P_neg=-1))
    assert info.delta_e == 0.0 and info.alignment_target == 0.0 and info.alignment_deficit == 0.0
    score = epmq(state.record())
    assert score["RDI"] == score["Etot"] == score["Snet"] == 0.0
    assert all(math.isfinite(v) for v in score.values())
    # zero displacement (a move and its undo): Tau = 0, not a division by zero
    record = {"p0": [0.0, -6.0, -8.0], "vectors": [[0.0, 3.0, 3.0], [0.0, -3.0, -3.0]],
              "levels": [lv(A_prog=2, P_prog=2), lv(A_prog=1, A_neg=-2, P_prog=1, P_neg=-2)]}
    assert epmq(record)["Tau"] == 0.0


@pytest.mark.parametrize(
    ("record", "message"),
    [
        ({"vectors": [], "levels": []}, "missing key 'p0'"),
        ({"p0": [0, -6, -8], "vectors": [], "levels": []}, "no turns"),
        ({"p0": [0, -6, -8], "vectors": [[0, 1, 1]], "levels": [None]}, r"levels\[0\] \(turn 1\) is missing"),
        ({"p0": [0, -6, -8], "vectors": [[0, 1, 1]], "levels": []}, "0 levels for 1 vectors"),
        ({"p0": [0, -6, -8], "vectors": [[0, 1, float("nan")]], "levels": [NEUTRAL]}, r"vectors\[0\]: non-finite"),
        ({"p0": [0, -6, -8], "vectors": [[0, 1, 1]], "levels": [lv(P_prog=4)]}, "P_prog=4"),
    ],
)
def test_bad_epmq_records_are_named(record, message):
    with pytest.raises(ValueError, match=message):
        epmq(record)


# ---------------------------------------------------------------- properties

level_dicts = st.fixed_dictionaries(
    {
        "C_prog": st.sampled_from([0, 1, 2]),
        "A_prog": st.sampled_from([0, 1, 2]),
        "P_prog": st.sampled_from([0, 1, 2]),
        "C_neg": st.sampled_from([0, -1, -2]),
        "A_neg": st.sampled_from([0, -1, -2]),
        "P_neg": st.sampled_from([0, -1, -2]),
    }
)
indicator_dicts = st.fixed_dictionaries({k: st.integers(0, 3) for k in INDICATORS})


@settings(max_examples=60, deadline=None)
@given(indicator_dicts, st.lists(level_dicts, min_size=1, max_size=30))
def test_dynamics_invariants(indicators, levels):
    p0 = initial_vector(indicators)
    assert all(-27 <= x <= 0 for x in p0)
    state = NeedState(p0, DynamicsConfig(max_turns=len(levels)))
    for x in levels:
        info = state.step(levels_to_vector(x), x)
        assert -1.0 <= info.alignment_deficit <= 1.0
        if info.status is not None:
            break
    # E_total = (P_T - P_0) . v*_0 = projection_T + D_0 (v*_0 a unit vector, or 0 at a zero start)
    assert state.energy == pytest.approx(state.projection + (state.d0 if state.d0 else 0.0), abs=1e-9)
    assert state.status() is not None  # max_turns = len(levels): it has ended one way or another
    score = epmq(state.record())
    assert set(EPMQ_INDICES) <= set(score)
    assert all(math.isfinite(v) for v in score.values())
    assert 0.0 <= score["RDI"] <= 100.0 and 0.0 <= score["Tau"] <= 100.0 and 0.0 <= score["Align"] <= 100.0
