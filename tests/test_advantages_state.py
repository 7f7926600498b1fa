"""`mapo_state` (mapo.core.advantage_state): the state-keyed turn baseline against hand-computed numbers,
its fall-backs to mapo_ragged, the keys' path from turn.info, and the logged share."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mapo.core.advantages import AdvantageSpec, compute_advantages, compute_batch, compute_group, get_estimator, pad_group
from mapo.core.types import Group, Trajectory, Turn
from mapo.records import rollout_metrics

EPS = 1e-6

# The running example of test_advantages.py, gamma = 1:
#   rewards   r0 = [1, 0, 2]     r1 = [0, 1]     r2 = [2, 2, 0, 1]       T_min = 2
#   returns   G0 = [3, 2, 2]     G1 = [1, 1]     G2 = [5, 3, 1, 1]
GROUP = [[1.0, 0.0, 2.0], [0.0, 1.0], [2.0, 2.0, 0.0, 1.0]]
K1 = 2.0 / (math.sqrt(8.0 / 3.0) + EPS)  # turn 1 by index: G {3, 1, 5}, mean 3, std sqrt(8/3)
K2 = 1.0 / (math.sqrt(2.0 / 3.0) + EPS)  # turn 2 by index: G {2, 1, 3}, mean 2, std sqrt(2/3); also the batch pool
K3 = 0.5 / (0.5 + EPS)  # turn 3 by index: G {2 (traj 0), 1 (traj 2)}, mean 1.5, std 0.5
# mapo_ragged on GROUP (test_advantages.py works these out)
RAGGED_TURN = [[0.0, 0.0, K3], [-K1, -K2], [K1, K2, -K3, 0.0]]
BATCH = [[0.0, -K2, K2], [-K2, 0.0], [K2, K2, -K2, 0.0]]  # all 9 rewards: mean 1, var 6/9

# Keys: every game starts in state "s"; "x" is reached by trajectory 0 at turn 2, trajectory 1 at
# turn 2 and trajectory 2 at turn 3 (different turn indices); "y", "z", "w" are held by one turn each.
KEYS = [["s", "x", "y"], ["s", "x"], ["s", "z", "x", "w"]]
#   "s":  G {3, 1, 5} -- the turn-1 pool again -> 0, -K1, +K1
#   "x":  G {G0[2] = 2, G1[2] = 1, G2[3] = 1}, mean 4/3, var ((2/3)^2 + 2 (1/3)^2)/3 = 2/9, std sqrt(2)/3
#         -> traj 0 turn 2: (2 - 4/3)/(sqrt(2)/3 + eps) = +P ~ +1.414211, the other two -Q ~ -0.707105
#   "y" (traj 0 turn 3) falls back to turn 3 by index: +K3 (the pool keeps traj 2's turn 3, keyed or not)
#   "z" (traj 2 turn 2) falls back to turn 2 by index: G2[2] = 3 -> +K2
#   "w" (traj 2 turn 4) falls back to turn 4 by index: one trajectory reaches it -> 0
P = (2.0 / 3.0) / (math.sqrt(2.0) / 3.0 + EPS)
Q = (1.0 / 3.0) / (math.sqrt(2.0) / 3.0 + EPS)
STATE_TURN = [[0.0, P, K3], [-K1, -Q], [K1, K2, -Q, 0.0]]
STATE_KEYED = [[1.0, 1.0, 0.0], [1.0, 1.0], [1.0, 0.0, 1.0, 0.0]]  # 6 of the 9 turns by state


def assert_nested(actual, expected, rel=1e-9):
    assert len(actual) == len(expected)
    for row_a, row_e in zip(actual, expected):
        assert len(row_a) == len(row_e)
        for a, e in zip(row_a, row_e):
            assert a is not None and a == pytest.approx(e, rel=rel, abs=1e-12)


def mixed(turn, batch, alpha):
    return [[alpha * a + (1 - alpha) * b for a, b in zip(rt, rb)] for rt, rb in zip(turn, batch)]


@pytest.mark.parametrize("params", [{}, {"alpha": 0.25}, {"gamma": 0.8}, {"scope": "batch"}])
def test_no_keys_is_mapo_ragged_exactly(params):
    # (a) no keys at all, and keys that are all None: bit-identical advantages and shared components
    ragged, ragged_parts = compute_group("mapo_ragged", GROUP, return_components=True, **params)
    for keys in (None, [[None] * len(r) for r in GROUP]):
        got, parts = compute_group("mapo_state", GROUP, return_components=True, keys=keys, **params)
        assert got == ragged
        assert {k: parts[k] for k in ragged_parts} == ragged_parts
        assert parts["state_keyed"] == [[0.0] * len(r) for r in GROUP]
    groups = [GROUP, [[0.5, 1.0], [2.0, -1.0], [0.0]]]
    assert compute_batch("mapo_state", groups, **params) == compute_batch("mapo_ragged", groups, **params)


def test_shared_key_across_turn_indices_by_hand():
    # (b) the pools worked out above; the batch half stays mapo_ragged's
    got, parts = compute_group("mapo_state", GROUP, return_components=True, keys=KEYS)
    assert P == pytest.approx(1.414211, abs=1e-6) and Q == pytest.approx(0.707105, abs=1e-6)
    assert_nested(parts["turn"], STATE_TURN)
    assert_nested(parts["batch"], BATCH)
    assert_nested(got, mixed(STATE_TURN, BATCH, 0.5))
    # traj 0 turn 2 written out: 0.5 * P + 0.5 * (-K2) = 0.5 * 1.414211 - 0.5 * 1.224743 ~ 0.094734
    assert got[0][1] == pytest.approx(0.094734, abs=1e-6)
    alpha = compute_group("mapo_state", GROUP, keys=KEYS, alpha=0.25)
    assert_nested(alpha, mixed(STATE_TURN, BATCH, 0.25))


def test_keys_only_one_trajectory_holds_fall_back_to_the_turn_index():
    # (c) every key a singleton ("a", "b", ...) -> every turn by index, i.e. mapo_ragged, none state-keyed
    singletons = [[f"{i}-{t}" for t in range(len(r))] for i, r in enumerate(GROUP)]
    got, parts = compute_group("mapo_state", GROUP, return_components=True, keys=singletons)
    assert got == compute_group("mapo_ragged", GROUP)
    assert parts["state_keyed"] == [[0.0] * len(r) for r in GROUP]
    # A key trajectory 2 revisits (turns 3 and 4, "loop") is held by one trajectory only: it compares no
    # alternatives, so both turns keep their turn-index values (-K3, 0), the rest as in (b) with "w" gone.
    revisit = [["s", "x", "y"], ["s", "x"], ["s", "z", "loop", "loop"]]
    # "x" now holds G0[2] = 2 and G1[2] = 1 only (both turn 2): mean 1.5, std 0.5 -> +K3, -K3
    got, parts = compute_group("mapo_state", GROUP, return_components=True, keys=revisit)
    assert_nested(parts["turn"], [[0.0, K3, K3], [-K1, -K3], [K1, K2, -K3, 0.0]])
    assert parts["state_keyed"] == [[1.0, 1.0, 0.0], [1.0, 1.0], [1.0, 0.0, 0.0, 0.0]]
    # A shared key wins over the turn index even when its pool is all equal (then exactly 0):
    # r = [1, 2], [2, 0] -> G0 = [3, 2], G1 = [2, 0]; "b" holds G0[2] = 2 and G1[1] = 2 -> 0, 0;
    # "a" falls back to turn 1 {3, 2}: +K3; "c" to turn 2 {2, 0}: (0 - 1)/(1 + eps)
    _, parts = compute_group("mapo_state", [[1.0, 2.0], [2.0, 0.0]], keys=[["a", "b"], ["b", "c"]], return_components=True)
    assert_nested(parts["turn"], [[K3, 0.0], [0.0, -1 / (1 + EPS)]])
    assert parts["turn"][0][1] == 0.0 and parts["turn"][1][0] == 0.0  # exactly
    assert parts["state_keyed"] == [[0.0, 1.0], [1.0, 0.0]]


def test_every_turn_is_trained_beyond_t_min():
    # (d) T_min = 2, yet turns 3 and 4 get advantages; the trained mask is the turns that exist
    got = compute_group("mapo_state", GROUP, keys=KEYS)
    assert [len(r) for r in got] == [3, 2, 4] and all(a is not None for r in got for a in r)
    groups = [pad_group(GROUP, keys=KEYS)]
    out = get_estimator("mapo_state")(groups, AdvantageSpec(estimator="mapo_state").validated)
    assert (out.trained[0] == groups[0].mask).all()


def dialogues(rewards, keys):
    trajectories = [
        Trajectory("sc", i, initial_state=(1.0,), turns=[
            Turn(t + 1, "q", "a", reward=r, distance=1.0, response_ids=[1], info={} if k is None else {"state_key": k})
            for t, (r, k) in enumerate(zip(rs, ks))])
        for i, (rs, ks) in enumerate(zip(rewards, keys))
    ]
    return [Group("sc", trajectories)]


def test_keys_come_from_turn_info_and_the_log_shows_the_share():
    # (e) compute_advantages reads turn.info["state_key"]; the step's metrics carry the share, 6/9
    groups = dialogues(GROUP, KEYS)
    advantages, components = compute_advantages(groups, AdvantageSpec(estimator="mapo_state"))
    assert_nested(advantages[0], mixed(STATE_TURN, BATCH, 0.5))
    assert components["state_keyed"][0] == STATE_KEYED
    metrics = rollout_metrics(groups, advantages, components)
    assert metrics["adv_state_keyed_mean"] == pytest.approx(6 / 9)
    # turns without the info entry: no keys, mapo_ragged, share 0
    bare = dialogues(GROUP, [[None] * len(r) for r in GROUP])
    advantages, components = compute_advantages(bare, AdvantageSpec(estimator="mapo_state"))
    assert advantages == compute_advantages(bare, AdvantageSpec(estimator="mapo_ragged"))[0]
    assert rollout_metrics(bare, advantages, components)["adv_state_keyed_mean"] == 0.0
    # the other estimators ignore the keys
    assert compute_advantages(groups, AdvantageSpec(estimator="mapo"))[0] == [compute_group("mapo", GROUP)]


@pytest.mark.parametrize(
    ("keys", "message"),
    [
        ([["s", "x", "y"], ["s", "x"]], "state keys for each of its 3 trajectories"),
        ([["s", "x"], ["s", "x"], ["s", "z", "x", "w"]], "trajectory 0: expected 3 state keys"),
        ([["s", "x", "y"], ["s", ["x"]], ["s", "z", "x", "w"]], r"trajectory 1, turn 2: state key \['x'\] is not hashable"),
        ("sxy", "state keys for each of its 3 trajectories"),
    ],
)
def test_bad_keys_are_named(keys, message):
    with pytest.raises(ValueError, match=message):
        compute_group("mapo_state", GROUP, keys=keys)
    with pytest.raises(ValueError, match="keys: expected the state keys of each of the 1 groups"):
        compute_batch("mapo_state", [GROUP], keys=[KEYS, KEYS])


reward = st.floats(min_value=-20, max_value=20, allow_nan=False, allow_infinity=False)
turn = st.tuples(reward, st.sampled_from(["a", "b", "c", None]))
group = st.lists(st.lists(turn, min_size=1, max_size=6), min_size=1, max_size=5)


@settings(max_examples=40, deadline=None)
@given(group, st.sampled_from([1.0, 0.9]))
def test_state_pools_have_mean_zero_and_nothing_is_nan(turns, gamma):
    rewards = [[r for r, _ in traj] for traj in turns]
    keys = [[k for _, k in traj] for traj in turns]
    got, parts = compute_group("mapo_state", rewards, return_components=True, keys=keys, gamma=gamma)
    assert [len(r) for r in got] == [len(r) for r in rewards]
    assert all(a is not None and math.isfinite(a) for r in got for a in r)
    pools: dict[str, list[float]] = {}
    for i, traj in enumerate(keys):
        for t, key in enumerate(traj):
            if parts["state_keyed"][i][t]:
                pools.setdefault(key, []).append(parts["turn"][i][t])
    for values in pools.values():  # each state pool is normalised among itself
        assert abs(float(np.mean(values))) < 1e-6
