"""Advantage estimators against hand-computed numbers, properties, and bad input."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mapo.core.advantages import ESTIMATORS, compute_batch, compute_group, register_estimator, returns

EPS = 1e-6
NAMES = ("mapo", "mapo_ragged", "mapo_state", "turn", "batch", "grpo", "reinforce_pp", "rloo")

# The running example: three trajectories of unequal length, gamma = 1.
#   rewards   r0 = [1, 0, 2]     r1 = [0, 1]     r2 = [2, 2, 0, 1]       T_min = 2
#   returns   G0 = [3, 2, 2]     G1 = [1, 1]     G2 = [5, 3, 1, 1]
#   turn t=1: G = {3, 1, 5}, mean 3, population var (0 + 4 + 4)/3 = 8/3  -> (G - 3)/(sqrt(8/3) + eps)
#   turn t=2: G = {2, 1, 3}, mean 2, population var (0 + 1 + 1)/3 = 2/3  -> (G - 2)/(sqrt(2/3) + eps)
#   batch pool (t <= 2): {1, 0, 0, 1, 2, 2}, mean 1, var (0+1+1+0+1+1)/6 = 2/3 -> (r - 1)/(sqrt(2/3) + eps)
#   outcomes  R = {3, 1, 5} (same pool as turn t=1)
GROUP = [[1.0, 0.0, 2.0], [0.0, 1.0], [2.0, 2.0, 0.0, 1.0]]
K1 = 2.0 / (math.sqrt(8.0 / 3.0) + EPS)  # |G - mean| = 2 at turn 1
K2 = 1.0 / (math.sqrt(2.0 / 3.0) + EPS)  # |G - mean| = 1 at turn 2, and |r - mean| = 1 in the batch pool

TURN = [[0.0, 0.0, None], [-K1, -K2], [K1, K2, None, None]]
BATCH = [[0.0, -K2, None], [-K2, 0.0], [K2, K2, None, None]]


def assert_nested(actual, expected, rel=1e-9):
    assert len(actual) == len(expected)
    for row_a, row_e in zip(actual, expected):
        assert len(row_a) == len(row_e)
        for a, e in zip(row_a, row_e):
            if e is None:
                assert a is None
            else:
                assert a is not None and a == pytest.approx(e, rel=rel, abs=1e-12)


def test_turn_level_unequal_lengths_cuts_at_t_min():
    assert_nested(compute_group("turn", GROUP), TURN)


def test_batch_level_unequal_lengths_cuts_at_t_min():
    assert_nested(compute_group("batch", GROUP), BATCH)


@pytest.mark.parametrize("alpha", [0.0, 0.5, 1.0])
def test_mapo_mixes_turn_and_batch(alpha):
    # A = alpha * turn + (1 - alpha) * batch, e.g. alpha = 0.5, trajectory 1 turn 1: (-K1 - K2)/2;
    # K1 = 2/sqrt(8/3) = 1/sqrt(2/3) = K2 up to eps, so that is about -1.2247.
    expected = [
        [None if t is None else alpha * t + (1 - alpha) * b for t, b in zip(rt, rb)] for rt, rb in zip(TURN, BATCH)
    ]
    assert_nested(compute_group("mapo", GROUP, alpha=alpha), expected)


def test_mapo_alpha_half_by_hand():
    # alpha = 0.5 written out: trajectory 0 = [(0 + 0)/2, (0 - K2)/2] = [0, -0.6124]
    got = compute_group("mapo", GROUP)
    assert got[0][0] == 0.0
    assert got[0][1] == pytest.approx(-0.5 * K2)
    assert got[0][1] == pytest.approx(-0.612372, abs=1e-6)
    assert got[1][0] == pytest.approx(-1.224744, abs=1e-6)
    assert got[0][2] is None and got[2][2:] == [None, None]


def test_mapo_ragged_trains_every_turn_by_hand():
    # No T_min cut. Turn 3: G = {2 (traj 0), 1 (traj 2)}, mean 1.5, std 0.5 -> +-K3; turn 4 has one
    # trajectory left -> 0. Batch pool = all 9 rewards {1,0,2, 0,1, 2,2,0,1}: mean 1, var 6/9 -> K2 again.
    k3 = 0.5 / (0.5 + EPS)
    turn = [[0.0, 0.0, k3], [-K1, -K2], [K1, K2, -k3, 0.0]]
    batch = [[0.0, -K2, K2], [-K2, 0.0], [K2, K2, -K2, 0.0]]
    got, parts = compute_group("mapo_ragged", GROUP, alpha=0.25, return_components=True)
    assert_nested(parts["turn"], turn)
    assert_nested(parts["batch"], batch)
    assert_nested(got, [[0.25 * a + 0.75 * b for a, b in zip(rt, rb)] for rt, rb in zip(turn, batch)])


def test_mapo_ragged_is_mapo_when_lengths_are_equal():
    group = [[1.0, 0.5, 2.0], [0.0, 1.0, 1.5], [2.0, 2.0, 0.0]]
    assert_nested(compute_group("mapo_ragged", group), compute_group("mapo", group))
    assert_nested(compute_group("mapo_ragged", [group[0]] * 2 + [group[1]], scope="batch"),
                  compute_group("mapo", [group[0]] * 2 + [group[1]], scope="batch"))


def test_grpo_uses_outcome_on_every_turn():
    # R = {3, 1, 5}: (R - 3)/(sqrt(8/3) + eps) = {0, -K1, +K1}, broadcast to every turn, no cut.
    expected = [[0.0] * 3, [-K1] * 2, [K1] * 4]
    assert_nested(compute_group("grpo", GROUP), expected)
    assert_nested(compute_group("reinforce_pp", GROUP), expected)


def test_rloo_leave_one_out():
    # A_0 = 3 - (1 + 5)/2 = 0; A_1 = 1 - (3 + 5)/2 = -3; A_2 = 5 - (3 + 1)/2 = 3.
    assert_nested(compute_group("rloo", GROUP), [[0.0] * 3, [-3.0] * 2, [3.0] * 4])


def test_gamma_below_one():
    # gamma = 0.5, r0 = [1, 0, 2], r1 = [0, 1]; T_min = 2.
    # G0 = [1 + 0.5*(0 + 0.5*2), 0 + 0.5*2, 2] = [1.5, 1, 2];  G1 = [0 + 0.5*1, 1] = [0.5, 1]
    # turn t=1: {1.5, 0.5}, mean 1, std 0.5 -> +-0.5/(0.5 + eps);  t=2: {1, 1} all equal -> exactly 0
    # batch pool {1, 0, 0, 1}: mean 0.5, std 0.5 -> +-0.5/(0.5 + eps)
    a = 0.5 / (0.5 + EPS)
    group = [[1.0, 0.0, 2.0], [0.0, 1.0]]
    assert returns([1.0, 0.0, 2.0], gamma=0.5) == [1.5, 1.0, 2.0]
    turn = compute_group("turn", group, gamma=0.5)
    assert_nested(turn, [[a, 0.0, None], [-a, 0.0]])
    assert turn[0][1] == 0.0 and turn[1][1] == 0.0  # exactly, not approximately
    # mapo: [(a + a)/2, (0 - a)/2] and [(-a - a)/2, (0 + a)/2]
    assert_nested(compute_group("mapo", group, gamma=0.5), [[a, -a / 2, None], [-a, a / 2]])
    # gamma never enters the outcome estimators: R = {3, 1}, +-1/(1 + eps)
    b = 1.0 / (1.0 + EPS)
    assert_nested(compute_group("grpo", group, gamma=0.5), [[b] * 3, [-b] * 2])


@pytest.mark.parametrize("name", NAMES)
def test_single_trajectory_gives_zero(name):
    # N = 1: every pool comes from one trajectory -> exactly 0 on every trained turn.
    got = compute_group(name, [[1.0, -2.0, 5.0]])
    assert got == [[0.0, 0.0, 0.0]]


@pytest.mark.parametrize("name", NAMES)
def test_all_equal_rewards_give_exact_zero(name):
    # 0.1 is not exact in binary: a naive (x - mean)/(0 + eps) would leave ~1e-11, not 0.
    got = compute_group(name, [[0.1, 0.1, 0.1]] * 4)
    assert got == [[0.0, 0.0, 0.0]] * 4


@pytest.mark.parametrize("name", ["turn", "grpo", "reinforce_pp", "rloo"])
def test_identical_trajectories_give_exact_zero(name):
    # Seven copies of one dialogue: every per-turn pool (returns, outcomes) is constant -> exactly 0.
    traj = [0.1, -0.7, 0.3, 2.9, -1.1, 0.05, 0.2, 0.4, -0.3]
    assert compute_group(name, [traj] * 7, gamma=0.9) == [[0.0] * len(traj)] * 7


def test_reinforce_pp_and_batch_scope_use_whole_batch():
    # Two groups, N = 2, one turn each: rewards {1, 3} and {5, 7}.
    # batch scope: pool {1, 3, 5, 7}, mean 4, var (9 + 1 + 1 + 9)/4 = 5 -> (r - 4)/(sqrt 5 + eps)
    # group scope: pools {1, 3} and {5, 7}, std 1 -> +-1/(1 + eps)
    groups = [[[1.0], [3.0]], [[5.0], [7.0]]]
    s = math.sqrt(5.0) + EPS
    wide = [[[-3 / s], [-1 / s]], [[1 / s], [3 / s]]]
    narrow = [[[-1 / (1 + EPS)], [1 / (1 + EPS)]]] * 2
    for got, want in zip(compute_batch("reinforce_pp", groups), wide):
        assert_nested(got, want)
    for got, want in zip(compute_batch("batch", groups, scope="batch"), wide):
        assert_nested(got, want)
    for got, want in zip(compute_batch("grpo", groups, scope="batch"), wide):
        assert_nested(got, want)
    for got, want in zip(compute_batch("grpo", groups), narrow):
        assert_nested(got, want)
    for got, want in zip(compute_batch("batch", groups), narrow):
        assert_nested(got, want)


def test_batch_scope_with_single_trajectory_groups():
    # Two N = 1 groups [1, 2] and [3, 4]: turn-level 0 (one trajectory per pool); the batch pool
    # {1, 2, 3, 4} has mean 2.5 and var (2.25 + 0.25 + 0.25 + 2.25)/4 = 1.25 -> nonzero.
    s = math.sqrt(1.25) + EPS
    got = compute_batch("mapo", [[[1.0, 2.0]], [[3.0, 4.0]]], scope="batch")
    assert_nested(got[0], [[0.5 * -1.5 / s, 0.5 * -0.5 / s]])
    assert_nested(got[1], [[0.5 * 0.5 / s, 0.5 * 1.5 / s]])


def test_components_are_returned_for_logging():
    adv, parts = compute_group("mapo", GROUP, return_components=True)
    assert set(parts) == {"turn", "batch", "mixed"}
    assert_nested(parts["turn"], TURN)
    assert_nested(parts["batch"], BATCH)
    assert parts["mixed"] == adv
    _, rloo_parts = compute_group("rloo", GROUP, return_components=True)
    # baseline of trajectory 1 = (3 + 5)/2 = 4 on each of its two turns
    assert rloo_parts["baseline"][1] == [4.0, 4.0]
    assert rloo_parts["outcome"][2] == [5.0] * 4


def test_registry_accepts_new_estimator_and_refuses_a_clash():
    assert set(NAMES) <= set(ESTIMATORS.names())  # mapo_state is a built-in imported on first use

    @register_estimator("zeros_for_test")
    def zeros(groups, params):
        from mapo.core.advantages import EstimatorOutput

        return EstimatorOutput([g.rewards * 0 for g in groups], [g.mask for g in groups])

    try:
        assert compute_group("zeros_for_test", [[1.0, 2.0], [3.0]]) == [[0.0, 0.0], [0.0]]
        with pytest.raises(ValueError, match="already registered"):
            register_estimator("zeros_for_test")(lambda groups, params: None)
    finally:
        ESTIMATORS.remove("zeros_for_test")


# ---------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("rewards", "message"),
    [
        ([], "group 0 is empty"),
        ([[1.0], []], "trajectory 1 is empty"),
        ([[1.0, float("nan")]], r"trajectory 0, turn 2: reward nan is not finite"),
        ([[1.0], [float("inf")]], r"trajectory 1, turn 1: reward inf is not finite"),
        ([[1.0], [-float("inf"), 0.0]], "reward -inf is not finite"),
        ([[1.0, "a"]], r"trajectory 0, turn 2: reward 'a' is not a number"),
        ([[1.0], [None]], "trajectory 1, turn 1: reward None is not a number"),
        ([[[1.0, 2.0]]], r"reward \[1.0, 2.0\] is not a number"),
    ],
)
def test_bad_rewards_are_named(rewards, message):
    with pytest.raises(ValueError, match=message):
        compute_group("mapo", rewards)


def test_unknown_estimator_lists_registered():
    with pytest.raises(ValueError, match=r"unknown advantage estimator 'ppo'.*batch, grpo, mapo, mapo_ragged, mapo_state, reinforce_pp, rloo, turn"):
        compute_group("ppo", GROUP)


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"alpha": -0.1}, r"alpha must be in \[0, 1\]"),
        ({"alpha": 1.5}, r"alpha must be in \[0, 1\]"),
        ({"alpha": float("nan")}, "alpha must be a finite number"),
        ({"gamma": 0.0}, r"gamma must be in \(0, 1\]"),
        ({"gamma": 1.01}, r"gamma must be in \(0, 1\]"),
        ({"eps": 0.0}, "eps must be > 0"),
        ({"eps": -1e-3}, "eps must be > 0"),
        ({"scope": "global"}, "unknown scope 'global'"),
        ({"gama": 0.9}, "unknown advantage parameter"),
    ],
)
def test_bad_params_are_named(params, message):
    with pytest.raises(ValueError, match=message):
        compute_group("mapo", GROUP, **params)


def test_empty_batch_is_refused():
    with pytest.raises(ValueError, match="non-empty list of groups"):
        compute_batch("mapo", [])


# ---------------------------------------------------------------- properties

reward = st.floats(min_value=-50, max_value=50, allow_nan=False, allow_infinity=False)
trajectory = st.lists(reward, min_size=1, max_size=8)
group = st.lists(trajectory, min_size=1, max_size=6)


@settings(max_examples=60, deadline=None)
@given(group, st.sampled_from([1.0, 0.9, 0.5]))
def test_turn_level_has_mean_zero_per_retained_turn(rewards, gamma):
    got = compute_group("turn", rewards, gamma=gamma)
    t_min = min(len(r) for r in rewards)
    for t in range(t_min):
        column = [row[t] for row in got]
        assert all(v is not None for v in column)
        assert abs(float(np.mean(column))) < 1e-6
    for row in got:
        assert all(v is None for v in row[t_min:])


@settings(max_examples=60, deadline=None)
@given(group, st.sampled_from([1.0, 0.8]))
def test_mapo_with_alpha_one_equals_turn(rewards, gamma):
    assert compute_group("mapo", rewards, alpha=1.0, gamma=gamma) == compute_group("turn", rewards, gamma=gamma)


@settings(max_examples=40, deadline=None)
@given(group, st.sampled_from(NAMES), st.floats(min_value=0, max_value=1))
def test_shape_kept_and_never_nan(rewards, name, alpha):
    got = compute_group(name, rewards, alpha=alpha)
    assert [len(r) for r in got] == [len(r) for r in rewards]
    for row in got:
        assert all(v is None or math.isfinite(v) for v in row)


@settings(max_examples=30, deadline=None)
@given(group)
def test_reinforce_pp_on_one_group_equals_grpo(rewards):
    assert compute_group("reinforce_pp", rewards) == compute_group("grpo", rewards)


def test_the_design_contract_path_is_the_core_estimator():
    import mapo.advantages
    import mapo.core.advantages

    assert mapo.advantages.compute_group is mapo.core.advantages.compute_group
    assert mapo.advantages.compute_group("grpo", [[1.0, 0.0], [0.0]]) == compute_group("grpo", [[1.0, 0.0], [0.0]])
