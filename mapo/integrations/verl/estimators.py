"""MAPO's advantage estimators for verl, and the per-turn reward layout they read.

A verl row is one whole dialogue: `responses` holds every assistant turn and every
user message after the first, `response_mask` is 1 on the assistant's own tokens
and 0 elsewhere, so each assistant turn is one run of 1s. The agent loop puts
turn t's reward on the last token of run t (`place_turn_rewards`); an estimator
reads it back as the sum of `token_level_rewards` over the run (`turn_rewards`;
a per-token KL penalty from `algorithm.use_kl_in_reward` lands on the turn it
belongs to). Rows are grouped by verl's `uid` (the `index` argument), the groups go
to `mapo.core.advantages.compute_batch`, and every token of turn t gets A_{i,t}; turns
beyond the group's T_min get 0.

Registered names (`algorithm.adv_estimator=...`): `mapo` (mixed), `mapo_turn`
(alpha = 1), `mapo_batch` (alpha = 0), `mapo_ragged` (mixed, without the T_min cut). `algorithm.gamma` is the discount; mapo's
own knobs go under `algorithm.mapo` (add them with Hydra's `+`):
`+algorithm.mapo.alpha=0.5 +algorithm.mapo.eps=1e-6 +algorithm.mapo.scope=group`.

`returns` holds the Monte Carlo return G_{i,t} on the same tokens (what verl logs
as critic/returns; no critic is trained by these estimators).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from verl.trainer.ppo.core_algos import register_adv_est

from mapo.core.advantages import PARAM_NAMES, compute_batch, returns

# verl name -> mapo.core.advantages estimator name
ESTIMATOR_NAMES: dict[str, str] = {"mapo": "mapo", "mapo_turn": "turn", "mapo_batch": "batch", "mapo_ragged": "mapo_ragged"}
CONFIG_KEY = "mapo"  # algorithm.mapo.{alpha, eps, scope}
PARAM_KEYS = tuple(k for k in PARAM_NAMES if k != "gamma")  # gamma is verl's own algorithm.gamma


class TurnLayoutError(ValueError):
    """Token-level rewards or masks that do not follow the one-run-per-turn layout."""


def _as_array(values: Any, what: str) -> np.ndarray:
    if isinstance(values, torch.Tensor):
        values = values.detach().to("cpu", torch.float64).numpy()
    arr = np.asarray(values, dtype=float)
    if arr.ndim != 1:
        raise TurnLayoutError(f"{what}: expected one row (1-D), got shape {arr.shape}")
    return arr


def turn_spans(response_mask: Sequence[int] | np.ndarray | torch.Tensor) -> list[tuple[int, int]]:
    """[start, end) of each run of 1s in one row's response mask: the assistant turns, in order."""
    mask = _as_array(response_mask, "response_mask")
    if not np.isin(mask, (0.0, 1.0)).all():
        bad = sorted({float(x) for x in mask[~np.isin(mask, (0.0, 1.0))]})
        raise TurnLayoutError(f"response_mask must hold only 0 and 1, found {bad[:5]}")
    edges = np.diff(np.concatenate(([0], mask.astype(np.int8), [0])))
    starts = np.flatnonzero(edges == 1)
    ends = np.flatnonzero(edges == -1)
    return [(int(s), int(e)) for s, e in zip(starts, ends)]


def place_turn_rewards(
    turn_scores: Sequence[float], response_mask: Sequence[int] | np.ndarray | torch.Tensor
) -> list[float]:
    """Per-token rewards for one row: turn t's score on the last token of assistant run t, 0 elsewhere."""
    spans = turn_spans(response_mask)
    if len(spans) != len(turn_scores):
        raise TurnLayoutError(
            f"{len(turn_scores)} turn scores for {len(spans)} assistant turns in response_mask; "
            "every scored turn needs its own run of assistant tokens"
        )
    placed = [0.0] * len(_as_array(response_mask, "response_mask"))
    for (_, end), score in zip(spans, turn_scores):
        value = float(score)
        if not np.isfinite(value):
            raise TurnLayoutError(f"turn score {score!r} is not finite")
        placed[end - 1] = value
    return placed


def turn_rewards(
    token_level_rewards: torch.Tensor | np.ndarray, response_mask: torch.Tensor | np.ndarray
) -> list[list[float]]:
    """Per-turn rewards of every row: the sum of its token rewards over each assistant run.

    A reward on a token outside every assistant run (a user token, padding) or a
    row without assistant tokens is a layout error, named by row and token.
    """
    rewards = token_level_rewards
    if isinstance(rewards, torch.Tensor):
        rewards = rewards.detach().to("cpu", torch.float64).numpy()
    mask = response_mask.detach().cpu().numpy() if isinstance(response_mask, torch.Tensor) else response_mask
    rewards, mask = np.asarray(rewards, dtype=float), np.asarray(mask)
    if rewards.ndim != 2 or rewards.shape != mask.shape:
        raise TurnLayoutError(
            f"token_level_rewards {rewards.shape} and response_mask {mask.shape} must be the same [batch, tokens] shape"
        )
    out = []
    for row in range(rewards.shape[0]):
        spans = turn_spans(mask[row])
        if not spans:
            raise TurnLayoutError(f"row {row}: response_mask has no assistant tokens, so the dialogue has no turn")
        outside = (mask[row] == 0) & (rewards[row] != 0)
        if outside.any():
            token = int(np.flatnonzero(outside)[0])
            raise TurnLayoutError(
                f"row {row}, token {token}: reward {rewards[row, token]} sits outside every assistant turn "
                "(response_mask is 0 there); per-turn rewards belong on each turn's last assistant token"
            )
        if not np.isfinite(rewards[row]).all():
            raise TurnLayoutError(f"row {row}: token_level_rewards holds a non-finite value")
        out.append([float(rewards[row, s:e].sum()) for s, e in spans])
    return out


def estimator_params(config: Any) -> dict[str, Any]:
    """gamma from verl's `algorithm.gamma`; alpha / eps / scope from `algorithm.mapo` (defaults otherwise)."""
    if config is None:
        return {}
    params: dict[str, Any] = {}
    gamma = config.get("gamma", None)
    if gamma is not None:
        params["gamma"] = float(gamma)
    section = config.get(CONFIG_KEY, None)
    if section is None:
        return params
    if not hasattr(section, "items"):  # a dict, a DictConfig
        raise ValueError(f"algorithm.{CONFIG_KEY} must be a mapping of {', '.join(PARAM_KEYS)}, got {section!r}")
    for key, value in section.items():
        if key not in PARAM_KEYS:
            expected = ", ".join(PARAM_KEYS)
            raise ValueError(f"algorithm.{CONFIG_KEY}.{key}: unknown parameter; expected one of {expected}")
        params[str(key)] = value
    return params


def _groups(index: Any, batch_size: int) -> list[list[int]]:
    """Row numbers per uid, in order of first appearance."""
    if index is None:
        raise ValueError(
            "MAPO needs verl's group ids (the `uid` of each prompt, passed as `index`) to normalise within groups"
        )
    if len(index) != batch_size:
        raise ValueError(f"index has {len(index)} entries for a batch of {batch_size} rows")
    rows: dict[Any, list[int]] = {}
    for row, uid in enumerate(index):
        rows.setdefault(uid, []).append(row)
    return list(rows.values())


def compute_token_advantages(
    name: str,
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Any,
    config: Any = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Token-level (advantages, returns) for `mapo.core.advantages` estimator `name` on a verl batch."""
    params = estimator_params(config)
    per_turn = turn_rewards(token_level_rewards, response_mask)
    groups = _groups(index, len(per_turn))
    advantages = compute_batch(name, [[per_turn[row] for row in rows] for rows in groups], **params)
    mask_np = response_mask.detach().cpu().numpy()
    adv = np.zeros(mask_np.shape)
    ret = np.zeros(mask_np.shape)
    gamma = params.get("gamma", 1.0)
    for rows, group_adv in zip(groups, advantages):
        for row, row_adv in zip(rows, group_adv):
            row_returns = returns(per_turn[row], gamma)
            for (start, end), a, g in zip(turn_spans(mask_np[row]), row_adv, row_returns):
                if a is not None:  # None: beyond T_min, no advantage and no return
                    adv[row, start:end] = a
                    ret[row, start:end] = g
    device, dtype = token_level_rewards.device, token_level_rewards.dtype
    return torch.as_tensor(adv, dtype=dtype, device=device), torch.as_tensor(ret, dtype=dtype, device=device)


def _verl_estimator(verl_name: str, mapo_name: str) -> Any:
    def estimator(
        token_level_rewards: torch.Tensor,
        response_mask: torch.Tensor,
        index: Any = None,
        config: Any = None,
        **kwargs: Any,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        with torch.no_grad():
            return compute_token_advantages(mapo_name, token_level_rewards, response_mask, index, config)

    estimator.__name__ = f"compute_{verl_name}_advantage"
    estimator.__qualname__ = estimator.__name__
    estimator.__doc__ = (
        f"verl advantage estimator {verl_name!r}: mapo.core.advantages {mapo_name!r} on per-turn rewards "
        "read from token_level_rewards (see mapo.integrations.verl.estimators)."
    )
    return register_adv_est(verl_name)(estimator)


VERL_ESTIMATORS = {verl_name: _verl_estimator(verl_name, mapo_name) for verl_name, mapo_name in ESTIMATOR_NAMES.items()}
