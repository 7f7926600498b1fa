"""Advantage estimators for multi-turn groups: MAPO's mixed advantage and baselines.

A group is N trajectories of one scenario, given as N lists of per-turn rewards
(lengths may differ). Every estimator returns the same nested shape with one
advantage per turn, or None where a turn gets no advantage and no loss.
The maths is DESIGN.md section 2:

- G_{i,t} = sum_{k>=t} gamma^(k-t) r_{i,k};  norm(x; S) = (x - mean S) / (std S + eps),
  population std, and exactly 0 when S holds one value (all equal) or comes from a
  single trajectory (N = 1; with scope="batch", a batch of one trajectory).
- `turn`:  A = norm(G_{i,t}; {G_{j,t}}_j) for t <= T_min = min_i T_i; None beyond.
- `batch`: A = norm(r_{i,t}; every retained reward of the group, or of the whole
  batch with scope="batch"); None beyond T_min.
- `mapo`:  alpha * turn + (1 - alpha) * batch.
- `mapo_ragged`: MAPO without the T_min cut (not the paper's rule): turn t's statistics pool
  the trajectories that reach t, the batch pool holds every turn; every turn is trained.
- `mapo_state`: mapo_ragged whose turn half normalises G_{i,t} among the group's turns that share
  its state key (turn.info["state_key"]), else by turn index (mapo.core.advantage_state).
- `grpo`:  norm(R_i; {R_j}) with R_i = sum_t r_{i,t}, on every turn (no T_min cut);
  `reinforce_pp` the same with statistics over the whole batch; `rloo`: R_i minus
  the mean of the others' R_j.

Estimators are registered by name with `@register_estimator` (or come from a plug-in
package, see `mapo.registry`); each takes the padded groups of a batch ([N, T_max]
rewards plus a mask, and each turn's optional state key) and its parameters, and returns
advantages, the mask of trained turns and named components for logging.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

from mapo.core.advantage_input import GroupKeys, PaddedGroup, pad_group, state_keys
from mapo.core.types import Group, Nested
from mapo.registry import Registry

SCOPES = ("group", "batch")


@dataclass(frozen=True)
class AdvantageParams:
    """The estimators' knobs, validated on construction."""

    gamma: float = 1.0
    alpha: float = 0.5
    eps: float = 1e-6
    scope: str = "group"

    def __post_init__(self) -> None:
        for name in ("gamma", "alpha", "eps"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)) \
                    or not math.isfinite(value):
                raise ValueError(f"{name} must be a finite number, got {value!r}")
        if not 0.0 < self.gamma <= 1.0:
            raise ValueError(f"gamma must be in (0, 1], got {self.gamma!r}")
        if not 0.0 <= self.alpha <= 1.0:
            raise ValueError(f"alpha must be in [0, 1], got {self.alpha!r}")
        if self.eps <= 0.0:
            raise ValueError(f"eps must be > 0, got {self.eps!r}")
        if self.scope not in SCOPES:
            raise ValueError(f"unknown scope {self.scope!r}; expected one of {', '.join(SCOPES)}")


PARAM_NAMES = tuple(f.name for f in fields(AdvantageParams))  # every estimator's parameters


@dataclass(frozen=True)
class AdvantageSpec(AdvantageParams):
    """The training config's `advantage` section: which estimator, the shared knobs it inherits,
    and a plug-in estimator's own parameters (`options`), all checked on construction."""

    estimator: str = "mapo"  # a registered estimator or "package.module:function"
    options: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        try:
            ESTIMATORS.resolve(self.estimator)
        except ValueError as err:
            raise ValueError(f"advantage.estimator: {err}") from None
        try:
            # the estimator's own parameter object, built once (the shared knobs are checked there)
            object.__setattr__(self, "validated", estimator_params(self.estimator, self.params()))
        except (TypeError, ValueError) as err:
            raise ValueError(f"advantage.{err}") from None

    def params(self) -> dict[str, Any]:
        """The keyword parameters of `compute_batch`: the shared knobs and the options."""
        return {**{name: getattr(self, name) for name in PARAM_NAMES}, **self.options}


@dataclass
class EstimatorOutput:
    """Per group: advantages [N, T_max], the trained-turn mask, and logging components."""

    advantages: list[np.ndarray]
    trained: list[np.ndarray]
    components: dict[str, list[np.ndarray]] = field(default_factory=dict)


Estimator = Callable[[list[PaddedGroup], AdvantageParams], EstimatorOutput]
# Plug-ins: `@register_estimator`, an entry point of group "mapo.estimators", or "package.module:function".
ESTIMATORS: Registry[Estimator] = Registry(
    "advantage estimator", group="mapo.estimators", builtins={"mapo_state": "mapo.core.advantage_state:mapo_state_estimator"})


def register_estimator(name: str, params: type[AdvantageParams] = AdvantageParams) -> Callable[[Estimator], Estimator]:
    """Decorator: make an estimator available to `compute_group` / `compute_batch` by name.

    `params` is the estimator's parameter class: AdvantageParams or a frozen dataclass
    extending it with the estimator's own knobs (they arrive as keyword parameters, and
    from a config's `advantage.options`). An estimator named by path sets `params_type`.
    """

    def wrap(fn: Estimator) -> Estimator:
        if params is not AdvantageParams:
            fn.params_type = params  # type: ignore[attr-defined]
        return ESTIMATORS.add(name, fn)

    return wrap


def get_estimator(name: str) -> Estimator:
    return ESTIMATORS.resolve(name)


def estimator_params(name: str, params: dict[str, Any]) -> AdvantageParams:
    """The validated parameters of estimator `name` (its own `params_type`, else AdvantageParams)."""
    cls = getattr(get_estimator(name), "params_type", AdvantageParams)
    known = [f.name for f in fields(cls)]
    unknown = sorted(set(params) - set(known))
    if unknown:
        raise ValueError(f"unknown advantage parameter(s) {', '.join(unknown)} for {name!r}; expected {', '.join(known)}")
    return cls(**params)


# ---------------------------------------------------------------- the maths


def returns(rewards: Sequence[float], gamma: float = 1.0) -> list[float]:
    """Monte Carlo returns G_t = sum_{k>=t} gamma^(k-t) r_k of one trajectory."""
    AdvantageParams(gamma=gamma)  # validates gamma
    padded = pad_group([rewards], where="returns")
    return [float(x) for x in discounted_returns(padded.rewards, gamma)[0]]


def discounted_returns(rewards: np.ndarray, gamma: float) -> np.ndarray:
    """G for a padded [N, T] reward array (padding must be 0), by G_t = r_t + gamma G_{t+1}.

    Elementwise per row (not a matmul), so identical trajectories get bit-identical
    returns and an all-equal pool is recognised as such.
    """
    out = np.zeros_like(rewards, dtype=float)
    running = np.zeros(rewards.shape[0])
    for t in range(rewards.shape[1] - 1, -1, -1):
        running = rewards[:, t] + gamma * running
        out[:, t] = running
    return out


def normalise(values: np.ndarray, pool: np.ndarray, eps: float, axis: int | None = None) -> np.ndarray:
    """(values - mean(pool)) / (std(pool) + eps), population std; exactly 0 where the pool is constant."""
    mean = pool.mean(axis=axis)
    std = pool.std(axis=axis)
    constant = pool.max(axis=axis) == pool.min(axis=axis)
    return np.where(constant, 0.0, (values - mean) / (std + eps))


def _retained(group: PaddedGroup) -> np.ndarray:
    """Mask of the turns t <= T_min (the same columns for every trajectory)."""
    keep = np.zeros_like(group.mask)
    keep[:, : group.t_min] = True
    return keep


def _turn_level(group: PaddedGroup, params: AdvantageParams, keep: np.ndarray) -> np.ndarray:
    """norm(G_{i,t}; G_{j,t} of the kept trajectories at t), column by column; 0 where fewer than 2 are kept."""
    g = discounted_returns(group.rewards, params.gamma)
    out = np.zeros_like(group.rewards)
    for t in range(g.shape[1]):
        rows = keep[:, t]
        if rows.sum() > 1:
            out[rows, t] = normalise(g[rows, t], g[rows, t], params.eps)
    return out


def _batch_level(groups: list[PaddedGroup], params: AdvantageParams, keeps: list[np.ndarray]) -> list[np.ndarray]:
    use_batch = params.scope == "batch"
    batch_pool = np.concatenate([grp.rewards[keep] for grp, keep in zip(groups, keeps)]) if use_batch else None
    batch_trajectories = sum(grp.rewards.shape[0] for grp in groups)
    out = []
    for grp, keep in zip(groups, keeps):
        adv = np.zeros_like(grp.rewards)
        # A pool drawn from a single trajectory has nothing to compare against: 0 (the N = 1 rule).
        if (batch_trajectories if use_batch else grp.rewards.shape[0]) > 1:
            pool = batch_pool if use_batch else grp.rewards[keep]
            adv[keep] = normalise(grp.rewards[keep], pool, params.eps)
        out.append(adv)
    return out


def _mixed(groups: list[PaddedGroup], params: AdvantageParams, alpha: float, ragged: bool = False) -> EstimatorOutput:
    # ragged: every turn that exists is kept (no T_min cut); else the turns t <= T_min.
    keeps = [grp.mask.copy() if ragged else _retained(grp) for grp in groups]
    turn = [_turn_level(grp, params, keep) for grp, keep in zip(groups, keeps)]
    batch = _batch_level(groups, params, keeps)
    mixed = [alpha * a_t + (1.0 - alpha) * a_b for a_t, a_b in zip(turn, batch)]
    return EstimatorOutput(advantages=mixed, trained=keeps, components={"turn": turn, "batch": batch, "mixed": mixed})


def _outcomes(groups: list[PaddedGroup]) -> list[np.ndarray]:
    return [grp.rewards.sum(axis=1) for grp in groups]


def _outcome_normalised(groups: list[PaddedGroup], params: AdvantageParams, batch_stats: bool) -> EstimatorOutput:
    outcomes = _outcomes(groups)
    batch_pool = np.concatenate(outcomes) if batch_stats else None
    advantages = []
    for grp, r in zip(groups, outcomes):
        a = normalise(r, batch_pool if batch_pool is not None else r, params.eps)
        advantages.append(np.where(grp.mask, a[:, None], 0.0))
    return EstimatorOutput(
        advantages=advantages,
        trained=[grp.mask.copy() for grp in groups],
        components={"outcome": [np.where(g.mask, r[:, None], 0.0) for g, r in zip(groups, outcomes)]},
    )


# ---------------------------------------------------------------- the estimators


@register_estimator("mapo")
def mapo_estimator(groups: list[PaddedGroup], params: AdvantageParams) -> EstimatorOutput:
    """MAPO: alpha * turn-level + (1 - alpha) * batch-level, on turns t <= T_min."""
    return _mixed(groups, params, params.alpha)


@register_estimator("mapo_ragged")
def mapo_ragged_estimator(groups: list[PaddedGroup], params: AdvantageParams) -> EstimatorOutput:
    """MAPO without the T_min cut: every turn is trained; the turn-level statistics at t pool the
    trajectories that reach t, the batch-level pool every turn of the group (or batch)."""
    return _mixed(groups, params, params.alpha, ragged=True)


@register_estimator("turn")
def turn_estimator(groups: list[PaddedGroup], params: AdvantageParams) -> EstimatorOutput:
    """Turn-level only (MAPO with alpha = 1; `alpha` is ignored)."""
    return _mixed(groups, params, 1.0)


@register_estimator("batch")
def batch_estimator(groups: list[PaddedGroup], params: AdvantageParams) -> EstimatorOutput:
    """Batch-level only (MAPO with alpha = 0; `alpha` is ignored)."""
    return _mixed(groups, params, 0.0)


@register_estimator("grpo")
def grpo_estimator(groups: list[PaddedGroup], params: AdvantageParams) -> EstimatorOutput:
    """GRPO on the dialogue outcome R_i = sum_t r_{i,t}, on every turn; scope="batch" pools the batch."""
    return _outcome_normalised(groups, params, batch_stats=params.scope == "batch")


@register_estimator("reinforce_pp")
def reinforce_pp_estimator(groups: list[PaddedGroup], params: AdvantageParams) -> EstimatorOutput:
    """REINFORCE++: as GRPO, always with statistics over every trajectory of the batch."""
    return _outcome_normalised(groups, params, batch_stats=True)


@register_estimator("rloo")
def rloo_estimator(groups: list[PaddedGroup], params: AdvantageParams) -> EstimatorOutput:
    """RLOO: R_i minus the mean outcome of the group's other trajectories, on every turn."""
    outcomes = _outcomes(groups)
    advantages, baselines = [], []
    for grp, r in zip(groups, outcomes):
        n = r.size
        if n == 1 or r.max() == r.min():
            baseline = r.copy()
        else:
            baseline = (r.sum() - r) / (n - 1)
        advantages.append(np.where(grp.mask, (r - baseline)[:, None], 0.0))
        baselines.append(np.where(grp.mask, baseline[:, None], 0.0))
    return EstimatorOutput(
        advantages=advantages,
        trained=[grp.mask.copy() for grp in groups],
        components={"outcome": [np.where(g.mask, r[:, None], 0.0) for g, r in zip(groups, outcomes)], "baseline": baselines},
    )


# ---------------------------------------------------------------- public entry points


def _unpad(values: np.ndarray, trained: np.ndarray, group: PaddedGroup) -> list[list[float | None]]:
    lengths = group.lengths
    return [
        [float(values[i, t]) if trained[i, t] else None for t in range(int(lengths[i]))]
        for i in range(values.shape[0])
    ]


def compute_batch(
    name: str,
    groups: Sequence[Sequence[Sequence[float]]],
    return_components: bool = False,
    keys: Sequence[GroupKeys] | None = None,
    **params: Any,
) -> Nested | tuple[Nested, dict[str, Nested]]:
    """Advantages for a batch of groups (the shape of `groups`, None where no loss).

    `keys`: each turn's state key, the shape of `groups` (None = no key; only mapo_state reads them).
    Params: gamma (1.0), alpha (0.5), eps (1e-6), scope ("group" or "batch").
    With return_components=True also returns the estimator's parts for logging,
    each in the same nested shape: "turn", "batch", "mixed" for mapo/turn/batch;
    "outcome" for grpo/reinforce_pp; "outcome", "baseline" for rloo; mapo_state adds "state_keyed".
    """
    return _estimate(name, groups, estimator_params(name, params), return_components, keys)


def compute_advantages(groups: Sequence[Group], spec: AdvantageSpec) -> tuple[Nested, dict[str, Nested]]:
    """A training step's advantages [group][trajectory][turn] from its turns' rewards (and state
    keys, turn.info["state_key"]), and the estimator's components (for logging), with the
    parameters the spec validated once."""
    keys = state_keys(groups)
    return _estimate(spec.estimator, [g.rewards for g in groups], spec.validated, True, keys)  # type: ignore[return-value]


def _estimate(
    name: str, groups: Sequence[Sequence[Sequence[float]]], params: AdvantageParams, return_components: bool,
    keys: Sequence[GroupKeys] | None = None,
) -> Nested | tuple[Nested, dict[str, Nested]]:
    estimator = get_estimator(name)
    if isinstance(groups, (str, bytes)) or not isinstance(groups, (Sequence, np.ndarray)) or len(groups) == 0:
        raise ValueError("groups: expected a non-empty list of groups (each a list of per-trajectory reward lists)")
    if keys is not None and (isinstance(keys, (str, bytes)) or not isinstance(keys, Sequence) or len(keys) != len(groups)):
        raise ValueError(f"keys: expected the state keys of each of the {len(groups)} groups, got {keys!r:.80}")
    padded = [pad_group(g, f"group {k}", None if keys is None else keys[k]) for k, g in enumerate(groups)]
    out = estimator(padded, params)
    advantages = [_unpad(a, m, g) for a, m, g in zip(out.advantages, out.trained, padded)]
    if not return_components:
        return advantages
    components = {
        key: [_unpad(v, m, g) for v, m, g in zip(values, out.trained, padded)] for key, values in out.components.items()
    }
    return advantages, components


def compute_group(
    name: str,
    rewards: Sequence[Sequence[float]],
    return_components: bool = False,
    keys: GroupKeys | None = None,
    **params: Any,
) -> list[list[float | None]] | tuple[list[list[float | None]], dict[str, list[list[float | None]]]]:
    """Advantages for one group: N per-trajectory reward lists (and their state keys) in, the same shape out."""
    result = compute_batch(name, [rewards], return_components, None if keys is None else [keys], **params)
    if not return_components:
        return result[0]  # type: ignore[return-value]
    advantages, components = result
    return advantages[0], {key: value[0] for key, value in components.items()}
