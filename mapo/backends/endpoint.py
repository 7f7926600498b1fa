"""What a chat backend talks to and what can go wrong: the endpoint config (hashable, so equal
configs share one backend), where its API key comes from, the message format, and the errors.

The API key is read from the environment variable named by `api_key_env` or from the file
named by `api_key_file`; it is never stored in the config.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any

ROLES = ("system", "user", "assistant")


class BackendError(RuntimeError):
    """A chat request that did not produce a reply; the message names the server, never the key."""

    def __init__(self, message: str, *, url: str, cause: str, status: int | None = None) -> None:
        super().__init__(message)
        self.url = url
        self.cause = cause
        self.status = status


class BackendUnavailable(BackendError):
    """The server could not be reached or kept failing (connection, timeout, 429, 5xx) after every retry."""


class BackendRequestError(BackendError):
    """The server rejected the request (a 4xx other than 429): retrying would not help."""


@dataclass(frozen=True)
class ChatBackendConfig:
    """Where and how to ask for chat completions. Hashable, so equal configs share one backend."""

    base_url: str
    model: str
    api_key_env: str | None = "OPENAI_API_KEY"  # name of the env var holding the key, not the key
    api_key_file: str | None = None  # or a file holding the key (first line); wins over api_key_env
    temperature: float = 0.7
    max_tokens: int = 256
    concurrency: int = 8  # requests in flight at once, per backend
    timeout: float = 60.0  # seconds per request
    max_retries: int = 4
    backoff_base: float = 0.5  # first backoff in seconds, doubled per retry
    backoff_max: float = 20.0
    max_retry_after: float = 120.0  # longest Retry-After we are willing to wait

    def __post_init__(self) -> None:
        if not isinstance(self.base_url, str) or not self.base_url.startswith(("http://", "https://")):
            raise ValueError(f"backend config: base_url must be an http(s):// URL, got {self.base_url!r}")
        if not isinstance(self.model, str) or not self.model.strip():
            raise ValueError("backend config: model must be a non-empty string")
        if self.api_key_env is not None and (not isinstance(self.api_key_env, str) or not self.api_key_env):
            raise ValueError("backend config: api_key_env must name an environment variable (or be null)")
        if self.api_key_file is not None and (not isinstance(self.api_key_file, str) or not self.api_key_file):
            raise ValueError("backend config: api_key_file must be the path of a file holding the key (or null)")
        if not 0.0 <= self.temperature <= 2.0:
            raise ValueError(f"backend config: temperature must be in [0, 2], got {self.temperature}")
        for name in ("max_tokens", "concurrency"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise ValueError(f"backend config: {name} must be a positive integer, got {getattr(self, name)!r}")
        if not isinstance(self.max_retries, int) or self.max_retries < 0:
            raise ValueError(f"backend config: max_retries must be an integer >= 0, got {self.max_retries!r}")
        for name in ("timeout", "backoff_base", "backoff_max", "max_retry_after"):
            if getattr(self, name) <= 0:
                raise ValueError(f"backend config: {name} must be > 0, got {getattr(self, name)!r}")

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> ChatBackendConfig:
        """Build from a config mapping; unknown keys (and a literal api_key) are errors."""
        if "api_key" in raw:
            raise ValueError(
                "backend config: do not put the API key in the config; put it in an environment "
                "variable and name that variable in api_key_env"
            )
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(raw) - known)
        if unknown:
            raise ValueError(f"backend config: unknown key(s) {unknown}; known: {sorted(known)}")
        missing = [k for k in ("base_url", "model") if k not in raw]
        if missing:
            raise ValueError(f"backend config: missing required key(s) {missing}")
        return cls(**dict(raw))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def read_key(config: ChatBackendConfig) -> str:
    """The API key from `api_key_file` (first line) or the `api_key_env` variable; "" when neither is set."""
    if config.api_key_file:
        try:
            with open(os.path.expanduser(config.api_key_file), encoding="utf-8") as handle:
                return handle.readline().strip()
        except OSError as err:
            raise ValueError(f"backend config: api_key_file {config.api_key_file}: cannot read it ({err.strerror})") from None
    return os.environ.get(config.api_key_env, "") if config.api_key_env else ""


def validate_messages(messages: Sequence[Mapping[str, str]]) -> list[dict[str, str]]:
    """Check a chat message list; raise ValueError naming the bad entry."""
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence) or not messages:
        raise ValueError("messages must be a non-empty list of {'role', 'content'} dicts")
    out = []
    for i, message in enumerate(messages):
        if not isinstance(message, Mapping):
            raise ValueError(f"messages[{i}] must be a dict, got {type(message).__name__}")
        role, content = message.get("role"), message.get("content")
        if role not in ROLES:
            raise ValueError(f"messages[{i}].role must be one of {ROLES}, got {role!r}")
        if not isinstance(content, str):
            raise ValueError(f"messages[{i}].content must be a string, got {type(content).__name__}")
        out.append({"role": role, "content": content})
    return out
