"""A fault-injecting HTTP proxy for OpenAI-compatible chat servers (judge, director, actor).

Put it between mapo and a real server to see what a flaky endpoint does to a run:

    with FaultProxy("http://127.0.0.1:8080", rate=0.2, seed=0) as proxy:
        ...  # point the role's base_url at proxy.base_url (".../v1")
    print(proxy.counts)  # faults injected, per kind, and requests forwarded

At `rate`, a request gets one of `kinds` (chosen at random, seeded) instead of the
server's reply:

- transport faults, which the backend retries: ``server_error`` (HTTP 500),
  ``rate_limit`` (HTTP 429 with Retry-After), ``hang`` (no reply for `hang_seconds`,
  past the client's timeout), ``close`` (connection closed without a reply),
  ``truncated`` (a 200 whose JSON body is cut in half), ``not_json`` (a 200 HTML page);
- content faults, which reach the role's JSON validation (repair, then fallback):
  ``missing_field`` (the first key of the reply's JSON object dropped) and
  ``out_of_range`` (every integer in the reply's JSON object set to 7);
- ``prose``: a well-formed 200 completion whose message is a sentence, not JSON, without asking
  the upstream (what a small model asked for JSON without constrained decoding often writes).
  Not among the default kinds; name it in `kinds`.

Everything else is forwarded unchanged, headers (the API key) included. Listens on
127.0.0.1 only.
"""

from __future__ import annotations

import json
import random
import threading
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

TRANSPORT_FAULTS = ("server_error", "rate_limit", "hang", "close", "truncated", "not_json")
CONTENT_FAULTS = ("missing_field", "out_of_range")
FAULT_KINDS = TRANSPORT_FAULTS + CONTENT_FAULTS  # the default kinds
PROSE_REPLY = "The listener seems kind and I would rate this reply as fairly good overall."
KNOWN_KINDS = FAULT_KINDS + ("prose",)
_FORWARDED_HEADERS = ("authorization", "content-type", "accept")


def _mutate_content(body: bytes, kind: str) -> bytes:
    """The completion `body` with its message's JSON object broken as `kind` says (as is if it has none)."""
    try:
        completion = json.loads(body)
        message = completion["choices"][0]["message"]
        content = json.loads(message["content"])
    except (ValueError, KeyError, IndexError, TypeError):
        return body
    if not isinstance(content, dict) or not content:
        return body
    if kind == "missing_field":
        content.pop(next(iter(content)))
    else:
        content = _every_int(content, 7)
    message["content"] = json.dumps(content)
    return json.dumps(completion).encode()


def _every_int(value: Any, new: int) -> Any:
    if isinstance(value, dict):
        return {k: _every_int(v, new) for k, v in value.items()}
    if isinstance(value, list):
        return [_every_int(v, new) for v in value]
    if isinstance(value, int) and not isinstance(value, bool):
        return new
    return value


class FaultProxy:
    """A threaded proxy on 127.0.0.1 injecting faults into a fraction `rate` of POST requests."""

    def __init__(
        self,
        upstream: str,
        *,
        rate: float = 0.2,
        kinds: Sequence[str] = FAULT_KINDS,
        seed: int = 0,
        retry_after: float = 0.05,
        hang_seconds: float = 5.0,
        upstream_timeout: float = 120.0,
    ) -> None:
        if not 0.0 <= rate <= 1.0:
            raise ValueError(f"FaultProxy: rate must be in [0, 1], got {rate}")
        unknown = sorted(set(kinds) - set(KNOWN_KINDS))
        if unknown or not kinds:
            raise ValueError(f"FaultProxy: unknown fault kind(s) {unknown or '(none given)'}; known: {', '.join(KNOWN_KINDS)}")
        self.upstream = upstream.rstrip("/")
        self.rate, self.kinds = rate, tuple(kinds)
        self.retry_after, self.hang_seconds, self.upstream_timeout = retry_after, hang_seconds, upstream_timeout
        self.counts: Counter[str] = Counter()
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="mapo-fault-proxy", daemon=True)
        self._thread.start()

    @property
    def base_url(self) -> str:
        """The proxy's URL with the upstream's path (e.g. http://127.0.0.1:PORT/v1)."""
        path = self.upstream.split("://", 1)[1].partition("/")[2]
        return f"http://127.0.0.1:{self._server.server_address[1]}" + (f"/{path}" if path else "")

    def _draw(self) -> str | None:
        with self._lock:
            kind = self._rng.choice(self.kinds) if self._rng.random() < self.rate else None
            self.counts[kind or "forwarded"] += 1
            return kind

    def _forward(self, handler: BaseHTTPRequestHandler, body: bytes | None) -> tuple[int, bytes, dict[str, str]]:
        prefix = self.upstream.split("://", 1)[1].partition("/")[2]
        path = handler.path
        if prefix and path.startswith(f"/{prefix}"):
            path = path[len(prefix) + 1 :]
        headers = {k: v for k, v in handler.headers.items() if k.lower() in _FORWARDED_HEADERS}
        request = urllib.request.Request(self.upstream + path, data=body, headers=headers, method=handler.command)
        try:
            with urllib.request.urlopen(request, timeout=self.upstream_timeout) as reply:
                return reply.status, reply.read(), {"Content-Type": reply.headers.get("Content-Type", "application/json")}
        except urllib.error.HTTPError as err:
            return err.code, err.read(), {"Content-Type": err.headers.get("Content-Type", "application/json")}
        except OSError as err:
            return 502, json.dumps({"error": {"message": f"upstream unreachable: {err}"}}).encode(), {}

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def _send(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
                self.send_response(status)
                for key, value in {"Content-Type": "application/json", **(headers or {})}.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                self._send(*proxy._forward(self, None))

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                kind = proxy._draw()
                if kind == "server_error":
                    return self._send(500, b'{"error": {"message": "injected internal error"}}')
                if kind == "rate_limit":
                    return self._send(429, b'{"error": {"message": "injected rate limit"}}',
                                      {"Retry-After": f"{proxy.retry_after:g}"})
                if kind == "hang":
                    proxy._stopping.wait(proxy.hang_seconds)
                    self.close_connection = True
                    return None
                if kind == "close":
                    self.close_connection = True
                    return None
                if kind == "not_json":
                    return self._send(200, b"<html><body>502 Bad Gateway</body></html>", {"Content-Type": "text/html"})
                if kind == "prose":
                    return self._send(200, json.dumps({
                        "id": "prose", "object": "chat.completion", "model": "fault-proxy",
                        "choices": [{"index": 0, "finish_reason": "stop",
                                     "message": {"role": "assistant", "content": PROSE_REPLY}}],
                    }).encode())
                status, reply, headers = proxy._forward(self, body)
                if kind == "truncated" and status == 200:
                    reply = reply[: len(reply) // 2]
                elif kind in CONTENT_FAULTS and status == 200:
                    reply = _mutate_content(reply, kind)
                return self._send(status, reply, headers)

        return Handler

    def close(self) -> None:
        self._stopping.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)

    def __enter__(self) -> FaultProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
