"""Per-turn rewards from distances, by hand."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mapo.core.advantages import returns
from mapo.core.rewards import REWARD_KINDS, rewards_from_distances


# ---------------------------------------------------------------- rewards from distances


def test_reward_kinds_by_hand():
    d = [10.0, 8.0, 9.0, 5.0]
    # IDR: D_{t-1} - D_t = [10-8, 8-9, 9-5]
    assert rewards_from_distances(d) == [2.0, -1.0, 4.0]
    assert rewards_from_distances(d, kind="idr") == [2.0, -1.0, 4.0]
    # ADR: -D_t
    assert rewards_from_distances(d, kind="adr") == [-8.0, -9.0, -5.0]
    # outcome: zeros but the last, which gets D_0 - D_T = 10 - 5
    assert rewards_from_distances(d, kind="outcome") == [0.0, 0.0, 5.0]
    # one turn: outcome and IDR agree
    assert rewards_from_distances([3.0, 1.0], kind="outcome") == rewards_from_distances([3.0, 1.0]) == [2.0]
    assert set(REWARD_KINDS) >= {"idr", "adr", "outcome"}


def test_idr_returns_by_hand():
    # IDR [2, -1, 4] with gamma = 1: G = [2 - 1 + 4, -1 + 4, 4] = [5, 3, 4] = D_{t-1} - D_T = [10-5, 8-5, 9-5]
    assert returns(rewards_from_distances([10.0, 8.0, 9.0, 5.0]), gamma=1.0) == [5.0, 3.0, 4.0]


@pytest.mark.parametrize(
    ("distances", "kind", "message"),
    [
        ([10.0], "idr", "need D_0 and at least one turn"),
        ([], "idr", "need D_0 and at least one turn"),
        ([10.0, float("nan")], "idr", "D_1 = nan is not a finite non-negative distance"),
        ([10.0, 2.0, float("inf")], "adr", "D_2 = inf"),
        ([10.0, -1.0], "idr", "D_1 = -1.0"),
        ([10.0, "x"], "idr", "expected a list of numbers"),
        ([10.0, 9.0], "dense", r"unknown reward kind 'dense'; registered: adr, idr, outcome"),
    ],
)
def test_bad_distances_are_named(distances, kind, message):
    with pytest.raises(ValueError, match=message):
        rewards_from_distances(distances, kind=kind)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(min_value=0, max_value=60, allow_nan=False), min_size=2, max_size=20))
def test_idr_returns_telescope(distances):
    # sum_{k>=t} (D_{k-1} - D_k) = D_{t-1} - D_T
    g = returns(rewards_from_distances(distances, "idr"), gamma=1.0)
    for t, value in enumerate(g, start=1):
        assert value == pytest.approx(distances[t - 1] - distances[-1], abs=1e-9)
    # the outcome reward pays the same total, all at the end
    assert sum(rewards_from_distances(distances, "outcome")) == pytest.approx(g[0], abs=1e-9)
