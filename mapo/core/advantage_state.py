"""`mapo_state`: MAPO without the T_min cut, with a state-keyed turn baseline after verl-agent's
GiGPO anchor-state grouping.

Turn t's reply is judged against the replies chosen in the same state rather than at the same turn
index: G_{i,t} is normalised among the group's turns, of any trajectory and any turn index, whose
state key (turn.info["state_key"], see mapo.core.advantage_input) equals its own. A turn with no key, or
whose key no other trajectory of its group holds, keeps mapo_ragged's turn-index statistic (turn t
over the trajectories that reach t). The batch half is mapo_ragged's; A = alpha * turn +
(1 - alpha) * batch, on every turn. Without keys it is mapo_ragged exactly.

Component `state_keyed` is 1 on the turns normalised by state and 0 on the others, so the training
log's `adv_state_keyed_mean` is the step's share of turns normalised by state.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable

import numpy as np

from mapo.core.advantages import (
    AdvantageParams,
    EstimatorOutput,
    PaddedGroup,
    discounted_returns,
    mapo_ragged_estimator,
    normalise,
    register_estimator,
)


def state_pools(group: PaddedGroup) -> dict[Hashable, tuple[np.ndarray, np.ndarray]]:
    """State key -> (rows, columns) of the group's turns that hold it, for the keys that at least
    two trajectories hold (a key that only one trajectory reaches, once or more, is left out)."""
    cells: dict[Hashable, list[tuple[int, int]]] = defaultdict(list)
    if group.keys is not None:
        for i, t in zip(*np.nonzero(group.mask)):
            if (key := group.keys[i, t]) is not None:
                cells[key].append((int(i), int(t)))
    pools: dict[Hashable, tuple[np.ndarray, np.ndarray]] = {}
    for key, where in cells.items():
        rows, cols = (np.array(axis) for axis in zip(*where))
        # A pool from one trajectory compares no alternatives (its returns are nested sums of one
        # rollout): DESIGN's single-trajectory rule would give 0, so those turns fall back instead.
        if np.unique(rows).size > 1:
            pools[key] = (rows, cols)
    return pools


@register_estimator("mapo_state")
def mapo_state_estimator(groups: list[PaddedGroup], params: AdvantageParams) -> EstimatorOutput:
    """mapo_ragged whose turn half normalises G_{i,t} among the group's turns that share its state
    key, and by turn index where no other trajectory shares it; every turn is trained."""
    ragged = mapo_ragged_estimator(groups, params)
    turn, keyed = [], []
    for grp, by_index in zip(groups, ragged.components["turn"]):
        a_turn, hit = by_index.copy(), np.zeros_like(grp.rewards)
        g = discounted_returns(grp.rewards, params.gamma)
        for rows, cols in state_pools(grp).values():
            a_turn[rows, cols] = normalise(g[rows, cols], g[rows, cols], params.eps)
            hit[rows, cols] = 1.0
        turn.append(a_turn)
        keyed.append(hit)
    batch = ragged.components["batch"]
    # the same expression as mapo_ragged's mix, so no keys gives bit-identical advantages
    mixed = [params.alpha * a_t + (1.0 - params.alpha) * a_b for a_t, a_b in zip(turn, batch)]
    components = {"turn": turn, "batch": batch, "mixed": mixed, "state_keyed": keyed}
    return EstimatorOutput(advantages=mixed, trained=ragged.trained, components=components)
