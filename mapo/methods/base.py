"""The hook protocol that attaches an optional training method to the trainer.

A method is built from the training config (`from_config` returns None when the config
leaves it off) and is then asked, at fixed points of every step, to change one thing;
every hook's default changes nothing. The trainer calls the active methods in the
order `mapo.methods.attached_methods` gives:

    rollout_spec -> wrap_environment -> rollout_function        (set-up, once)
    rollout -> rewards -> shape_rewards -> advantages -> select
    -> auxiliary_loss -> update -> after_update                 (every step)

`transcript_keys` are the turn-info keys the method adds that the transcripts keep;
`state_dict` / `load_state_dict` carry its state through checkpoints (under its `name`).

A method's own config section (a dataclass, like `rapo` or `reasoning`) is registered by
name in `mapo.config.METHOD_SECTIONS`, which imports it on first use: the core modules
import no method. The section may check the whole config when it loads (`check_config`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from mapo.core.types import Group, Nested


class TrainingMethod:
    """No-op defaults of every hook; a method overrides the ones it needs."""

    name: str = ""
    transcript_keys: tuple[str, ...] = ()

    @classmethod
    def from_config(cls, config: Any) -> TrainingMethod | None:
        """The method as the TrainConfig asks for it, or None when it is off."""
        raise NotImplementedError

    def rollout_spec(self, spec: Any) -> Any:
        """The rollout settings to sample with (a RolloutSpec)."""
        return spec

    def wrap_environment(self, make_env: Callable[[], Any]) -> Callable[[], Any]:
        """The environment factory the rollout uses."""
        return make_env

    def rollout_function(self, rollout: Callable[..., list[Group]]) -> Callable[..., list[Group]]:
        """The function that rolls out a step (same signature as mapo.core.rollout.rollout)."""
        return rollout

    def shape_rewards(self, groups: Sequence[Group]) -> dict[str, float]:
        """Change the turns' rewards in place (after the reward kind set them); returns metrics."""
        return {}

    def select(self, groups: Sequence[Group], advantages: Nested) -> tuple[Nested, dict[str, float]]:
        """Change which turns are trained and with what advantage; returns them and metrics."""
        return advantages, {}

    def auxiliary_loss(self, policy: Any, groups: Sequence[Group], temperature: float) -> Callable[[], torch.Tensor] | None:
        """A loss term added at every optimizer step of this update, or None."""
        return None

    def after_update(self, policy: Any) -> dict[str, float]:
        """Called after the step's update; returns metrics."""
        return {}

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any], policy: Any) -> None:
        pass
