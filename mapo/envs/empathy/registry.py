"""The role registry: which judge, actor and director implementation a name means.

`register_role("judge", "mine")` decorates a factory (a class, or a function taking the
role's options as keywords) so that `EmpathyEnvironment(judge="mine")` builds it.
`make_role(role, spec)` accepts

- an object that already implements the role (used as is);
- a kind name resolved in `ROLES[role]` (a `mapo.registry.Registry`): the built-ins
  "offline" (rules + sentence embeddings: `judge.py`, `actor.py`, `director.py`) and
  "llm" (any OpenAI-compatible chat server, `llm.py`), anything registered, an entry
  point of group "mapo.roles.<role>" (e.g. "mapo.roles.judge"), or "package.module:Factory";
- a mapping {"kind": name, **options}, as written in a config file.

A name registered before its first use takes precedence over a built-in of that name.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from mapo.registry import Registry

ROLE_NAMES = ("judge", "actor", "director")
_ROLE_METHOD = {"judge": "judge", "actor": "reply", "director": "direct"}

ROLES: dict[str, Registry[Callable[..., Any]]] = {
    "judge": Registry(
        "empathy judge kind",
        group="mapo.roles.judge",
        builtins={"offline": "mapo.envs.empathy.judge:OfflineJudge", "llm": "mapo.envs.empathy.registry:llm_judge"},
    ),
    "actor": Registry(
        "empathy actor kind",
        group="mapo.roles.actor",
        builtins={"offline": "mapo.envs.empathy.actor:OfflineActor", "llm": "mapo.envs.empathy.registry:llm_actor"},
    ),
    "director": Registry(
        "empathy director kind",
        group="mapo.roles.director",
        builtins={"offline": "mapo.envs.empathy.director:RuleDirector", "llm": "mapo.envs.empathy.registry:llm_director"},
    ),
}


def llm_judge(**options: Any) -> Any:
    from mapo.envs.empathy.llm import make_llm_role

    return make_llm_role("judge", options)


def llm_actor(**options: Any) -> Any:
    from mapo.envs.empathy.llm import make_llm_role

    return make_llm_role("actor", options)


def llm_director(**options: Any) -> Any:
    from mapo.envs.empathy.llm import make_llm_role

    return make_llm_role("director", options)


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
        if "kind" not in spec:
            raise ValueError(f"roles.{role}: a role mapping needs a 'kind' (e.g. offline or llm), got keys {sorted(spec)}")
        kind = spec.pop("kind")
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
