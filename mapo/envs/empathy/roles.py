"""The three roles of the empathy environment: what they exchange, and which implementation a name means.

Each role has an offline implementation (rules + sentence embeddings, `offline/`) and an LLM
one (any chat transport, `llm/`); the environment composes any three, chosen per role in the
config. `card` is a validated `ScenarioCard`; `history` is the dialogue so far as chat
messages, where "user" is the simulated user and "assistant" the policy; `state` is the live
`NeedState` (read it, never write it).

The role registry: `register_role("judge", "mine")` decorates a factory (a class, or a
function taking the role's options as keywords) so that `EmpathyEnvironment(judge="mine")`
builds it. `make_role(role, spec)` accepts

- an object that already implements the role (used as is);
- a kind name resolved in `ROLES[role]` (a `mapo.registry.Registry`): the built-ins
  "offline" and "llm", anything registered, an entry point of group "mapo.roles.<role>"
  (e.g. "mapo.roles.judge"), or "package.module:Factory";
- a mapping {"kind": name, **options}, as written in a config file (no kind: the offline one).

A name registered before its first use takes precedence over a built-in of that name.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

from mapo.envs.dynamics import LEVEL_KEYS
from mapo.registry import Registry

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


# ---------------------------------------------------------------- the role registry

ROLE_NAMES = ("judge", "actor", "director")
_ROLE_METHOD = {"judge": "judge", "actor": "reply", "director": "direct"}

ROLES: dict[str, Registry[Callable[..., Any]]] = {
    "judge": Registry(
        "empathy judge kind",
        group="mapo.roles.judge",
        builtins={
            "offline": "mapo.envs.empathy.offline.judge:OfflineJudge",
            "llm": "mapo.envs.empathy.llm:llm_judge",
            "learned": "mapo.envs.empathy.learned.judge:LearnedJudge",
        },
    ),
    "actor": Registry(
        "empathy actor kind",
        group="mapo.roles.actor",
        builtins={"offline": "mapo.envs.empathy.offline.actor:OfflineActor", "llm": "mapo.envs.empathy.llm:llm_actor"},
    ),
    "director": Registry(
        "empathy director kind",
        group="mapo.roles.director",
        builtins={"offline": "mapo.envs.empathy.offline.director:RuleDirector", "llm": "mapo.envs.empathy.llm:llm_director"},
    ),
}


def register_role(role: str, kind: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator: make a factory of `role` ("judge", "actor" or "director") available as `kind`."""
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r}; expected one of {', '.join(ROLE_NAMES)}")
    return ROLES[role].register(kind)


def make_role(role: str, spec: Any, options: Mapping[str, Any] | None = None) -> Any:
    """Build (or pass through) one role from an instance, a kind name or a {"kind": ...} mapping."""
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r}; expected one of {', '.join(ROLE_NAMES)}")
    options = dict(options or {})
    if isinstance(spec, Mapping):
        spec = dict(spec)
        kind = spec.pop("kind", "offline")  # options alone tune the default (offline) role, as a config's nested --set does
        options = {**spec, **options}
    elif isinstance(spec, str):
        kind = spec
    else:
        if options:
            raise ValueError(f"roles.{role}: options {sorted(options)} given for a ready-made {type(spec).__name__}")
        if not callable(getattr(spec, _ROLE_METHOD[role], None)) or not callable(getattr(spec, "reset", None)):
            raise ValueError(
                f"roles.{role}: {type(spec).__name__} does not implement the {role} protocol "
                f"(reset and {_ROLE_METHOD[role]}; see mapo.envs.empathy.roles)"
            )
        return spec
    if not isinstance(kind, str) or not kind:
        raise ValueError(f"roles.{role}: kind must be a non-empty string, got {kind!r}")
    try:
        factory = ROLES[role].resolve(kind)
        return factory(**options)
    except (TypeError, ValueError) as exc:  # an unknown kind, or an option the factory does not take
        message = str(exc)
        raise ValueError(message if message.startswith(f"roles.{role}") else f"roles.{role}: {message}") from None
