"""Chat backend for any OpenAI-compatible server (vLLM, SGLang, llama.cpp, Ollama, hosted APIs).

One `ChatBackend` owns one `AsyncOpenAI` client, one event loop running in a
background thread, and one semaphore that bounds the requests in flight. Every
call, sync or async, runs on that loop, so worker threads can call `chat()`
concurrently and the semaphore is a true per-endpoint limit.

Retries are ours (the client's own are disabled so every retry is counted):
exponential backoff with jitter on connection errors, timeouts, 5xx and
malformed replies; a Retry-After from the server (429, 503) is honoured. Other 4xx are
not retried. The API key is read from the environment variable named by
`api_key_env` or from the file named by `api_key_file`; it is never stored in the
config and is scrubbed from any error.
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import logging
import random
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

import openai

from mapo.backends.endpoint import (
    BackendRequestError,
    BackendUnavailable,
    ChatBackendConfig,
    read_key,
    validate_messages,
)

log = logging.getLogger(__name__)

RETRY_CAUSES = ("connection", "timeout", "rate_limit", "server_error", "bad_response")
_NO_KEY = "not-needed"  # local servers ignore the key; the client insists on one


class _BadResponse(Exception):
    """A 2xx reply that is not a usable chat completion."""


def _content_of(body: str) -> str:
    """The first choice's message text from a chat-completion body, or _BadResponse."""
    try:
        data = json.loads(body)
    except ValueError:
        raise _BadResponse(f"reply is not JSON: {body[:120]!r}") from None
    try:
        content = data["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError):
        raise _BadResponse(f"reply has no choices[0].message.content: {body[:200]!r}") from None
    if not isinstance(content, str):
        raise _BadResponse(f"choices[0].message.content is {type(content).__name__}, not text")
    return content


def _retry_after(headers: Mapping[str, str] | None) -> float | None:
    """Seconds to wait from Retry-After (seconds or an HTTP date) or retry-after-ms."""
    if not headers:
        return None
    if (ms := headers.get("retry-after-ms")) is not None:
        try:
            return max(0.0, float(ms) / 1000.0)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        parsed = email.utils.parsedate_tz(value)
        return None if parsed is None else max(0.0, email.utils.mktime_tz(parsed) - time.time())


class ChatBackend:
    """Chat completions from one OpenAI-compatible endpoint, usable from async code and from threads."""

    def __init__(self, config: ChatBackendConfig) -> None:
        self.config = config
        self._api_key = read_key(config)
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._client: openai.AsyncOpenAI | None = None
        self._semaphore: asyncio.Semaphore | None = None
        self._counts = {"requests": 0, "successes": 0, "failures": 0, "backoff_seconds": 0.0}
        self._retries = dict.fromkeys(RETRY_CAUSES, 0)

    # -- public API ---------------------------------------------------------

    async def achat(self, messages: Sequence[Mapping[str, str]], **overrides: Any) -> str:
        """The assistant's reply text. `overrides` go to the request (temperature, max_tokens, seed, stop, ...)."""
        messages = validate_messages(messages)
        loop = self._ensure_loop()
        if asyncio.get_running_loop() is loop:
            return await self._request(messages, overrides)
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(self._request(messages, overrides), loop))

    def chat(self, messages: Sequence[Mapping[str, str]], **overrides: Any) -> str:
        """Blocking `achat`, safe to call from many threads at once."""
        messages = validate_messages(messages)
        loop = self._ensure_loop()
        self._refuse_own_loop(loop, "chat")
        return asyncio.run_coroutine_threadsafe(self._request(messages, overrides), loop).result()

    def chat_many(self, batch: Sequence[Sequence[Mapping[str, str]]], **overrides: Any) -> list[str]:
        """Replies to many conversations, in order, at most `concurrency` in flight; raises the first error."""
        batch = [validate_messages(m) for m in batch]
        if not batch:
            return []
        loop = self._ensure_loop()
        self._refuse_own_loop(loop, "chat_many")

        async def run_all() -> list[Any]:
            return await asyncio.gather(*(self._request(m, overrides) for m in batch), return_exceptions=True)

        results = asyncio.run_coroutine_threadsafe(run_all(), loop).result()
        for result in results:
            if isinstance(result, BaseException):
                raise result
        return results

    def stats(self) -> dict[str, Any]:
        """Counters so far: requests, successes, failures, retries per cause, seconds spent backing off."""
        with self._lock:
            return {**self._counts, "retries": dict(self._retries)}

    def close(self) -> None:
        """Close the HTTP client and stop the loop thread (a later call starts them again)."""
        with self._lock:
            loop, thread, client = self._loop, self._thread, self._client
            self._loop = self._thread = self._client = self._semaphore = None
        if loop is None:
            return
        if client is not None:
            asyncio.run_coroutine_threadsafe(client.close(), loop).result(timeout=10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        loop.close()

    def __enter__(self) -> ChatBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"ChatBackend(base_url={self.config.base_url!r}, model={self.config.model!r})"

    # -- internals ----------------------------------------------------------

    def _ensure_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                ready = threading.Event()

                def run() -> None:
                    asyncio.set_event_loop(loop)
                    loop.call_soon(ready.set)
                    loop.run_forever()

                thread = threading.Thread(target=run, name=f"mapo-chat {self.config.base_url}", daemon=True)
                thread.start()
                ready.wait()
                self._loop, self._thread = loop, thread
            return self._loop

    def _refuse_own_loop(self, loop: asyncio.AbstractEventLoop, name: str) -> None:
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            return
        if running is loop:
            raise RuntimeError(f"{name}() was called on the backend's own event loop; await achat() there instead")

    def _setup_on_loop(self) -> tuple[openai.AsyncOpenAI, asyncio.Semaphore]:
        # created on the loop thread: both bind to the loop that uses them
        if self._client is None:
            self._client = openai.AsyncOpenAI(
                base_url=self.config.base_url,
                api_key=self._api_key or _NO_KEY,
                timeout=self.config.timeout,
                max_retries=0,
            )
            self._semaphore = asyncio.Semaphore(self.config.concurrency)
        return self._client, self._semaphore

    def _scrub(self, text: str) -> str:
        return text.replace(self._api_key, "***") if self._api_key else text

    def _count(self, key: str, amount: float = 1) -> None:
        with self._lock:
            self._counts[key] += amount

    def _backoff(self, retry: int) -> float:
        delay = min(self.config.backoff_max, self.config.backoff_base * 2**retry)
        return delay * random.uniform(0.5, 1.0)

    async def _request(self, messages: list[dict[str, str]], overrides: dict[str, Any]) -> str:
        cfg = self.config
        client, semaphore = self._setup_on_loop()
        params = {"model": cfg.model, "temperature": cfg.temperature, "max_tokens": cfg.max_tokens, **overrides}
        self._count("requests")
        for attempt in range(cfg.max_retries + 1):
            wait: float | None = None
            try:
                async with semaphore:
                    raw = await client.chat.completions.with_raw_response.create(messages=messages, **params)
                    text = _content_of(raw.text)
                self._count("successes")
                return text
            except openai.APITimeoutError:
                cause, detail = "timeout", f"no reply within {cfg.timeout:g} s"
            except openai.APIConnectionError as exc:
                cause, detail = "connection", f"{exc} ({type(exc.__cause__).__name__ if exc.__cause__ else 'no detail'})"
            except openai.RateLimitError as exc:
                cause, detail = "rate_limit", "HTTP 429 Too Many Requests"
                wait = _retry_after(exc.response.headers)
            except openai.APIStatusError as exc:
                if exc.status_code < 500:
                    self._count("failures")
                    raise self._rejected(exc) from None
                cause, detail = "server_error", f"HTTP {exc.status_code}: {exc.message}"
                wait = _retry_after(exc.response.headers)  # e.g. 503 while a model loads
            except _BadResponse as exc:
                cause, detail = "bad_response", str(exc)
            if attempt == cfg.max_retries:
                self._count("failures")
                raise BackendUnavailable(
                    self._scrub(
                        f"chat request to the OpenAI-compatible server at {cfg.base_url} (model {cfg.model!r}) "
                        f"failed after {attempt + 1} attempt(s); last error: {cause}: {detail}. "
                        "Check that the server is running and reachable at that URL."
                    ),
                    url=cfg.base_url,
                    cause=cause,
                ) from None
            delay = min(wait, cfg.max_retry_after) if wait is not None else self._backoff(attempt)
            with self._lock:
                self._retries[cause] += 1
                self._counts["backoff_seconds"] += delay
            log.warning(
                "%s: %s (%s); retry %d/%d in %.2f s",
                cfg.base_url,
                cause,
                self._scrub(detail),
                attempt + 1,
                cfg.max_retries,
                delay,
            )
            await asyncio.sleep(delay)
        raise AssertionError("unreachable")  # the loop returns or raises

    def _rejected(self, exc: openai.APIStatusError) -> BackendRequestError:
        cfg, status = self.config, exc.status_code
        hint = ""
        if status in (401, 403):
            hint = (
                f" Check the API key in {cfg.api_key_file}."
                if cfg.api_key_file
                else f" Check the API key in the environment variable {cfg.api_key_env}."
                if cfg.api_key_env
                else " The server wants an API key: set api_key_env to the variable holding it."
            )
        elif status == 404:
            hint = " Check base_url (it usually ends in /v1) and the model name."
        return BackendRequestError(
            self._scrub(
                f"the OpenAI-compatible server at {cfg.base_url} rejected the chat request for model "
                f"{cfg.model!r} with HTTP {status}: {exc.message}.{hint}"
            ),
            url=cfg.base_url,
            cause="rejected",
            status=status,
        )


_SHARED: dict[ChatBackendConfig, ChatBackend] = {}
_SHARED_LOCK = threading.Lock()


def shared_stats() -> dict[str, float]:
    """The counters of every shared backend of this process, summed: requests, successes,
    failures, backoff_seconds and retries_<cause> (a run logs their change per step)."""
    with _SHARED_LOCK:
        backends = list(_SHARED.values())
    totals: dict[str, float] = dict.fromkeys(
        ["requests", "successes", "failures", "backoff_seconds", *(f"retries_{c}" for c in RETRY_CAUSES)], 0
    )
    for backend in backends:
        stats = backend.stats()
        for key, value in [*((k, v) for k, v in stats.items() if k != "retries"),
                           *((f"retries_{c}", n) for c, n in stats["retries"].items())]:
            totals[key] += value
    return totals


def shared_backend(config: ChatBackendConfig | Mapping[str, Any]) -> ChatBackend:
    """One backend per distinct config in this process, so every role and every environment
    instance talking to the same endpoint shares one client, loop and concurrency limit."""
    if not isinstance(config, ChatBackendConfig):
        config = ChatBackendConfig.from_dict(config)
    with _SHARED_LOCK:
        if config not in _SHARED:
            _SHARED[config] = ChatBackend(config)
        return _SHARED[config]
