"""Chat transports: how an LLM role (judge, actor, director, ranker, hindsight) reaches a model.

A transport is a factory called with a role's backend options as keywords that returns a
chat client: an object with `chat(messages, **overrides) -> str` (`mapo.backends.ChatClient`),
where `messages` are {"role", "content"} dicts and `overrides` per-request settings
(temperature, max_tokens, seed, response_format). The options' `transport` key names it:

- "openai" (the default): any OpenAI-compatible HTTP server, one shared `ChatBackend` per
  distinct endpoint config (`mapo.backends.openai_compat.shared_backend`);
- anything registered in `TRANSPORTS`, an entry point of group "mapo.transports", or a
  "package.module:factory" path (an in-process model, a queue, a recorded replay ...).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Callable

from mapo.backends.json_output import ChatClient
from mapo.registry import Registry

TRANSPORTS: Registry[Callable[..., ChatClient]] = Registry(
    "chat transport", group="mapo.transports", builtins={"openai": "mapo.backends.transports:openai_transport"}
)


def openai_transport(**options: Any) -> ChatClient:
    """The shared OpenAI-compatible backend for these ChatBackendConfig options."""
    from mapo.backends.openai_compat import shared_backend

    return shared_backend(options)


def chat_client(options: Mapping[str, Any]) -> ChatClient:
    """The client for a role's backend options (`transport` picks the factory, default "openai")."""
    options = dict(options)
    name = options.pop("transport", "openai")
    client = TRANSPORTS.resolve(name)(**options)
    if not callable(getattr(client, "chat", None)):
        raise ValueError(f"chat transport {name!r} made a {type(client).__name__}, which has no chat(messages) method")
    return client
