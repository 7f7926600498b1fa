"""The environment protocol and the environment registry.

An environment plays the simulated user (and its judge) for one dialogue:
`reset(scenario)` returns the user's first message; `step(response)` scores the
policy's reply and returns the user's next message, the action vector v_t, whether
the dialogue ended, and details (state, distance, levels, done reason, ...).
Rewards need D_0: from the scenario's `initial_state`, from P_1 - v_1 when the info
has `state`, or else from `initial_distance` in the first step's info.
One instance serves one trajectory; the rollout makes one per trajectory.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple, Protocol, runtime_checkable

from mapo.types import Scenario


class StepResult(NamedTuple):
    user_message: str
    action: tuple[float, ...]
    done: bool
    info: dict[str, Any]


@runtime_checkable
class Environment(Protocol):
    def reset(self, scenario: Scenario, seed: int | None = None) -> str: ...

    def step(self, response: str) -> StepResult: ...


ENVIRONMENTS: dict[str, Callable[..., Environment]] = {}
# Built-in environments register on import; make_environment imports them on first use,
# so importing mapo stays light (no role or model is loaded until an environment is made).
BUILTIN_ENVIRONMENTS = {"empathy": "mapo.envs.empathy.env", "emotion": "mapo.envs.emotion"}


def register_environment(name: str) -> Callable[[Callable[..., Environment]], Callable[..., Environment]]:
    """Decorator: make an environment class (or factory) available by name."""

    def wrap(factory: Callable[..., Environment]) -> Callable[..., Environment]:
        if name in ENVIRONMENTS and ENVIRONMENTS[name] is not factory:
            raise ValueError(f"environment {name!r} is already registered")
        ENVIRONMENTS[name] = factory
        return factory

    return wrap


def make_environment(name: str, **kwargs: Any) -> Environment:
    if name not in ENVIRONMENTS and name in BUILTIN_ENVIRONMENTS:
        import importlib

        importlib.import_module(BUILTIN_ENVIRONMENTS[name])
    if name not in ENVIRONMENTS:
        known = ", ".join(sorted(set(ENVIRONMENTS) | set(BUILTIN_ENVIRONMENTS))) or "none"
        raise ValueError(f"unknown environment {name!r}; registered: {known}")
    return ENVIRONMENTS[name](**kwargs)
