"""The advantage estimators' input: one group's per-turn rewards, and optionally each turn's state
key, validated and padded to [N, T_max] (`PaddedGroup`). `mapo.core.advantages` re-exports these
names; nothing here imports an estimator.

A state key names the state in which a reply was chosen (any hashable, e.g. a string; None = no
key). It comes from the environment's step info, `turn.info["state_key"]`; estimators that do
not group turns by state ignore it.
"""

from __future__ import annotations

import numbers
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import numpy as np

from mapo.core.types import Group

STATE_KEY = "state_key"  # the turn-info entry an environment fills with the state a reply was chosen in

GroupKeys = Sequence[Sequence[Hashable | None]]
"""One group's state keys, [trajectory][turn], the shape of its rewards; None = that turn has no key."""


@dataclass(frozen=True)
class PaddedGroup:
    """One group's rewards padded to [N, T_max]; `mask` marks the turns that exist; `keys` holds
    each turn's state key ([N, T_max] objects, None on padding and unkeyed turns), or is None
    when no turn of the group has one."""

    rewards: np.ndarray  # [N, T_max] float, 0 on padding
    mask: np.ndarray  # [N, T_max] bool
    keys: np.ndarray | None = None  # [N, T_max] object

    @property
    def lengths(self) -> np.ndarray:
        return self.mask.sum(axis=1)

    @property
    def t_min(self) -> int:
        return int(self.lengths.min())


def _is_list(x: object) -> bool:
    return not isinstance(x, (str, bytes)) and isinstance(x, (Sequence, np.ndarray))


def pad_group(rewards: Sequence[Sequence[float]], where: str = "group", keys: GroupKeys | None = None) -> PaddedGroup:
    """Validate one group of per-trajectory reward lists (and their state keys) and pad it to [N, T_max]."""
    if not _is_list(rewards):
        raise ValueError(f"{where}: expected a list of per-trajectory reward lists, got {type(rewards).__name__}")
    if len(rewards) == 0:
        raise ValueError(f"{where} is empty: a group needs at least one trajectory")
    rows = []
    for i, traj in enumerate(rewards):
        if not _is_list(traj):
            raise ValueError(f"{where}, trajectory {i}: expected a list of per-turn rewards, got {type(traj).__name__}")
        if len(traj) == 0:
            raise ValueError(f"{where}, trajectory {i} is empty: every trajectory needs at least one turn")
        for t, x in enumerate(traj):
            if not isinstance(x, numbers.Real):
                raise ValueError(f"{where}, trajectory {i}, turn {t + 1}: reward {x!r} is not a number")
        row = np.asarray(traj, dtype=float)
        bad = np.flatnonzero(~np.isfinite(row))
        if bad.size:
            t = int(bad[0])
            raise ValueError(f"{where}, trajectory {i}, turn {t + 1}: reward {float(row[t])} is not finite")
        rows.append(row)
    t_max = max(r.size for r in rows)
    padded = np.zeros((len(rows), t_max))
    mask = np.zeros((len(rows), t_max), dtype=bool)
    for i, row in enumerate(rows):
        padded[i, : row.size] = row
        mask[i, : row.size] = True
    return PaddedGroup(rewards=padded, mask=mask, keys=None if keys is None else _pad_keys(keys, mask, where))


def _pad_keys(keys: GroupKeys, mask: np.ndarray, where: str) -> np.ndarray | None:
    """The keys as an [N, T_max] object array (None on padding); None when no turn has a key."""
    if not _is_list(keys) or len(keys) != mask.shape[0]:
        raise ValueError(f"{where}: expected state keys for each of its {mask.shape[0]} trajectories, got {keys!r:.80}")
    out = np.full(mask.shape, None, dtype=object)
    for i, row in enumerate(keys):
        n = int(mask[i].sum())
        if not _is_list(row) or len(row) != n:
            raise ValueError(f"{where}, trajectory {i}: expected {n} state keys (one per turn), got {row!r:.60}")
        for t, key in enumerate(row):
            try:
                hash(key)
            except TypeError:
                raise ValueError(f"{where}, trajectory {i}, turn {t + 1}: state key {key!r:.80} is not hashable") from None
            out[i, t] = key  # one cell at a time: a tuple key must stay one object, not broadcast
    return out if any(key is not None for key in out.flat) else None


def state_keys(groups: Sequence[Group]) -> list[list[list[Hashable | None]]]:
    """Each turn's state key, [group][trajectory][turn], from the environment's step info."""
    return [[[turn.info.get(STATE_KEY) for turn in traj.turns] for traj in g.trajectories] for g in groups]
