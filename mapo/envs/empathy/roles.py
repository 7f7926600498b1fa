"""The three roles of the empathy environment and what they exchange.

Each role has an offline implementation (rules + sentence embeddings) and an LLM
one (any OpenAI-compatible server); the environment composes any three, chosen
per role in the config. `card` is a validated `ScenarioCard`; `history` is the
dialogue so far as chat messages, where "user" is the simulated user and
"assistant" the policy; `state` is the live `NeedState` (read it, never write it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

from mapo.envs.dynamics import LEVEL_KEYS

if TYPE_CHECKING:
    from mapo.envs.dynamics import NeedState
    from mapo.envs.empathy.cards import ScenarioCard

NEUTRAL_LEVELS: dict[str, int] = {k: 0 for k in LEVEL_KEYS}

DirectorAction = Literal["continue", "reveal_stage", "reveal_memory", "steer", "turning_point", "confused", "end"]


@dataclass
class Judgement:
    """The judge's six levels for the latest assistant turn.

    `fallback` is True when no valid judgement could be had and the neutral levels
    were used instead: the environment counts it, it is never silent.
    """

    levels: dict[str, int]
    evidence: dict[str, str] = field(default_factory=dict)
    fallback: bool = False
    info: dict[str, Any] = field(default_factory=dict)


@dataclass
class Direction:
    """The director's decision for the user's next message."""

    action: DirectorAction = "continue"
    stage: int | None = None  # index into card.stages to reveal now
    memory: int | None = None  # index into card.memories to reveal now
    focus_axis: str | None = None  # the deepest deficit axis, C/A/P
    note: str = ""  # free-text guidance for the actor
    fallback: bool = False
    repaired: bool = False  # an LLM director's first reply was invalid, its repair was used


class Judge(Protocol):
    def reset(self, card: ScenarioCard, seed: int | None = None) -> None: ...

    def judge(self, card: ScenarioCard, history: list[dict[str, str]], response: str, state: NeedState) -> Judgement: ...


class Director(Protocol):
    def reset(self, card: ScenarioCard, seed: int | None = None) -> None: ...

    def direct(self, card: ScenarioCard, history: list[dict[str, str]], state: NeedState) -> Direction: ...


class Actor(Protocol):
    def reset(self, card: ScenarioCard, seed: int | None = None) -> None: ...

    def opening(self, card: ScenarioCard) -> str: ...

    def reply(
        self, card: ScenarioCard, history: list[dict[str, str]], state: NeedState, direction: Direction
    ) -> str: ...
