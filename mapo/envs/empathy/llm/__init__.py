"""LLM-backed judge, actor and director for the empathy environment.

Each role talks to any chat backend (`mapo.backends`: an OpenAI-compatible server
or anything with `chat(messages, **overrides) -> str`) and implements the
protocols of `roles.py`, so the environment can mix LLM and offline roles.

- `LLMJudge` sees the persona's hidden profile (incl. growth arc and cues) and the
  whole dialogue but scores only the latest assistant turn: six levels, each with
  a piece of evidence quoted from that turn, as JSON validated by pydantic. One
  repair attempt, then the neutral levels with `Judgement.fallback = True`, logged.
- `LLMDirector` decides the next user move as JSON; the code keeps the story in
  order and refuses to end before the minimum turns.
- `LLMActor` speaks as the persona, in short turns, and never repeats a line of its own.

Every role keeps `counters` (calls, repairs, fallbacks, ...) for the run's logs.
Judge and director take `json_format` to have servers that support it constrain
decoding to their JSON schema (see `mapo.backends.json_output.response_format`).
The prompts are ours, in English (`prompts.py`).

    prompts   the prompt texts
    common    rendering a card, the need state and the dialogue; the roles' base classes
    judge / director / actor    one role each
    (here)    building a role from its config section, over a chat transport
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from typing import Any

from mapo.envs.empathy.llm.actor import LLMActor
from mapo.envs.empathy.llm.director import LLMDirector
from mapo.envs.empathy.llm.judge import LLMJudge

LLM_ROLES = {"judge": LLMJudge, "director": LLMDirector, "actor": LLMActor}


def make_llm_role(role: str, options: Mapping[str, Any]) -> LLMJudge | LLMDirector | LLMActor:
    """Build one LLM role from its config section.

    Backend keys (base_url, model, api_key_env, concurrency, timeout, retries, ...)
    select a shared `ChatBackend` (one per distinct endpoint config); the role's
    own keys (temperature, max_tokens, min_turns, json_format, ...) go to the role.
    With `transport` set to another chat transport (mapo.backends.transports), every
    key that is not the role's goes to that transport instead.
    """
    from mapo.backends.endpoint import ChatBackendConfig
    from mapo.backends.transports import chat_client

    if role not in LLM_ROLES:
        raise ValueError(f"unknown empathy role {role!r}; expected one of {sorted(LLM_ROLES)}")
    cls = LLM_ROLES[role]
    options = {k: v for k, v in options.items() if k != "kind"}
    role_keys = {"temperature", "max_tokens", "min_turns", "own_lines", "history_messages", "max_words", "json_format"}
    backend_keys = {f.name for f in fields(ChatBackendConfig)} - {"temperature", "max_tokens"}
    unknown = sorted(set(options) - role_keys - backend_keys - {"api_key", "transport"})
    if unknown and options.get("transport", "openai") == "openai":
        raise ValueError(
            f"roles.{role}: unknown key(s) {unknown} for an llm {role}; "
            f"backend keys: {sorted(backend_keys)}; role keys: {sorted(role_keys)}"
        )
    try:
        backend = chat_client({k: v for k, v in options.items() if k not in role_keys})
    except ValueError as exc:
        raise ValueError(f"roles.{role}: {exc}") from None
    try:
        return cls(backend, **{k: v for k, v in options.items() if k in role_keys})
    except TypeError as exc:  # a role key this role does not take, e.g. min_turns for the judge
        raise ValueError(f"roles.{role}: {exc}") from None


# Factories of the role registry's built-in kind "llm" (mapo.envs.empathy.roles.ROLES).
def llm_judge(**options: Any) -> LLMJudge:
    return make_llm_role("judge", options)  # type: ignore[return-value]


def llm_actor(**options: Any) -> LLMActor:
    return make_llm_role("actor", options)  # type: ignore[return-value]


def llm_director(**options: Any) -> LLMDirector:
    return make_llm_role("director", options)  # type: ignore[return-value]


__all__ = ["LLMActor", "LLMDirector", "LLMJudge", "make_llm_role"]
