"""Per-turn rewards from the distance sequence.

Rewards are pure functions of D_0..D_T (D_t = ||P_t||, DESIGN.md section 2):
IDR r_t = D_{t-1} - D_t (the default: each turn is paid for its own progress),
ADR r_t = -D_t, outcome: 0 on every turn but the last, which gets D_0 - D_T.
Kinds are registered by name with `@register_reward` (or come from a plug-in package,
see `mapo.registry`). `fill_rewards` writes them into a training step's groups; an
optional method reshapes them afterwards (its `shape_rewards` hook, mapo.methods).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from mapo.core.types import Group
from mapo.registry import Registry

RewardFn = Callable[[np.ndarray], np.ndarray]
# Plug-ins: `@register_reward`, an entry point of group "mapo.rewards", or "package.module:function".
REWARD_KINDS: Registry[RewardFn] = Registry("reward kind", group="mapo.rewards")


def register_reward(name: str) -> Callable[[RewardFn], RewardFn]:
    """Decorator: a reward kind maps distances [D_0..D_T] to rewards [r_1..r_T]."""
    return REWARD_KINDS.register(name)


@register_reward("idr")
def incremental_distance_reward(d: np.ndarray) -> np.ndarray:
    """r_t = D_{t-1} - D_t: positive when the turn moved the user toward the goal."""
    return d[:-1] - d[1:]


@register_reward("adr")
def absolute_distance_reward(d: np.ndarray) -> np.ndarray:
    """r_t = -D_t: the remaining distance after the turn."""
    return -d[1:]


@register_reward("outcome")
def outcome_reward(d: np.ndarray) -> np.ndarray:
    """0 on every turn but the last, which gets the whole progress D_0 - D_T."""
    r = np.zeros(d.size - 1)
    r[-1] = d[0] - d[-1]
    return r


def rewards_from_distances(distances: Sequence[float], kind: str = "idr") -> list[float]:
    """Per-turn rewards r_1..r_T from distances D_0..D_T (T >= 1)."""
    reward = REWARD_KINDS.resolve(kind)
    try:
        if any(isinstance(x, (str, bytes)) for x in distances):
            raise TypeError("text in distances")
        d = np.asarray(distances, dtype=float)
    except (TypeError, ValueError) as err:
        raise ValueError(f"distances: expected a list of numbers D_0..D_T, got {distances!r}") from err
    if d.ndim != 1 or d.size < 2:
        raise ValueError(f"distances: need D_0 and at least one turn (D_0..D_T, T >= 1), got {list(np.ravel(d))}")
    bad = np.flatnonzero(~np.isfinite(d) | (d < 0))
    if bad.size:
        t = int(bad[0])
        raise ValueError(f"distances: D_{t} = {float(d[t])} is not a finite non-negative distance")
    r = np.asarray(reward(d), dtype=float)
    if r.shape != (d.size - 1,) or not np.all(np.isfinite(r)):
        raise ValueError(f"reward kind {kind!r}: expected {d.size - 1} finite rewards for D_0..D_{d.size - 1}, got {r.tolist()}")
    return [float(x) for x in r]


def fill_rewards(groups: Sequence[Group], kind: str) -> None:
    """Set every turn's reward from its trajectory's distances with reward kind `kind`.

    Reward shaping is an optional training method's `shape_rewards` hook, applied after this.
    """
    for group in groups:
        for trajectory in group.trajectories:
            for turn, reward in zip(trajectory.turns, rewards_from_distances(trajectory.distances, kind)):
                turn.reward = reward
