"""The OpenAI-compatible backend against a real local HTTP server that injects faults,
and the JSON extraction / repair / fallback helper."""

from __future__ import annotations

import asyncio
import email.utils
import json
import logging
import socket
import threading
import time
from collections import deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Literal

import pytest
from pydantic import BaseModel, Field

from mapo.backends import (
    BackendRequestError,
    BackendUnavailable,
    ChatBackend,
    ChatBackendConfig,
    JSONOutputError,
    request_json,
    shared_backend,
)
from mapo.backends.json_output import extract_json_object, parse_json_reply, response_format
from mapo.backends.openai_compat import _retry_after

SECRET = "sk-test-5ecret-never-print-me"


class FaultServer:
    """`/v1/chat/completions` that plays a script of behaviours, then answers normally.

    Behaviours: ("ok", content) | ("500",) | ("429" or "503", retry_after) | ("hang", seconds) |
    ("close",) | ("nonjson",) | ("missing",) | ("status", code) | ("slow", seconds) |
    ("gather", n, seconds): wait until n requests are in flight (at most 10 s), then answer after
    `seconds`, so a concurrency bound is reached however slowly a busy machine starts the threads.
    A hang ends after its seconds or when the server closes, whichever comes first; it never answers.
    A plain success echoes the last user message.
    """

    def __init__(self) -> None:
        self.script: deque[tuple] = deque()
        self.requests: list[dict] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self.lock = threading.Lock()
        self.closing = threading.Event()  # ends every hang
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:  # keep test output clean
                pass

            def do_POST(self) -> None:  # noqa: N802 (stdlib name)
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                with server.lock:
                    server.requests.append(
                        {"t": time.monotonic(), "path": self.path, "body": body, "auth": self.headers.get("Authorization")}
                    )
                    behaviour = server.script.popleft() if server.script else ("ok", None)
                    server.in_flight += 1
                    server.max_in_flight = max(server.max_in_flight, server.in_flight)
                try:
                    server.play(self, behaviour, body)
                finally:
                    with server.lock:
                        server.in_flight -= 1

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
        self.thread.start()

    @staticmethod
    def send(handler: BaseHTTPRequestHandler, code: int, body: bytes, ctype: str, headers: dict | None = None) -> None:
        handler.send_response(code)
        handler.send_header("Content-Type", ctype)
        handler.send_header("Content-Length", str(len(body)))
        for key, value in (headers or {}).items():
            handler.send_header(key, value)
        handler.end_headers()
        handler.wfile.write(body)

    def play(self, handler: BaseHTTPRequestHandler, behaviour: tuple, body: dict) -> None:
        kind = behaviour[0]
        if kind in ("ok", "slow", "gather"):
            if kind == "gather":
                deadline = time.monotonic() + 10.0
                while self.in_flight < behaviour[1] and time.monotonic() < deadline:
                    time.sleep(0.01)
            if kind in ("slow", "gather"):
                time.sleep(behaviour[-1])
            content = behaviour[1] if kind == "ok" and behaviour[1] is not None else "echo: " + body["messages"][-1]["content"]
            reply = {
                "id": "x",
                "object": "chat.completion",
                "created": 0,
                "model": body["model"],
                "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": content}}],
            }
            self.send(handler, 200, json.dumps(reply).encode(), "application/json")
        elif kind == "500":
            self.send(handler, 500, b'{"error": {"message": "boom"}}', "application/json")
        elif kind in ("429", "503"):
            headers = {"Retry-After": str(behaviour[1])}
            self.send(handler, int(kind), b'{"error": {"message": "slow down"}}', "application/json", headers)
        elif kind == "status":
            self.send(handler, behaviour[1], b'{"error": {"message": "nope"}}', "application/json")
        elif kind == "hang":
            self.closing.wait(behaviour[1])
        elif kind == "close":
            handler.close_connection = True  # no response at all: the client sees a dropped connection
        elif kind == "nonjson":
            self.send(handler, 200, b"<html>gateway says hi</html>", "application/json")
        elif kind == "missing":
            self.send(handler, 200, b'{"id": "x", "object": "chat.completion"}', "application/json")

    def close(self) -> None:
        self.closing.set()
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server():
    srv = FaultServer()
    yield srv
    srv.close()


@pytest.fixture
def make_backend(monkeypatch):
    monkeypatch.setenv("MAPO_TEST_KEY", SECRET)
    made: list[ChatBackend] = []

    def make(url: str, **kw) -> ChatBackend:
        cfg = dict(model="tiny", api_key_env="MAPO_TEST_KEY", timeout=2.0, max_retries=4, backoff_base=0.01, backoff_max=0.05)
        cfg.update(kw)
        backend = ChatBackend(ChatBackendConfig(base_url=url, **cfg))
        made.append(backend)
        return backend

    yield make
    for backend in made:
        backend.close()


USER = [{"role": "user", "content": "hello"}]


def test_success_sends_model_key_and_params(server, make_backend):
    backend = make_backend(server.url, temperature=0.3, max_tokens=17)
    assert backend.chat(USER) == "echo: hello"
    req = server.requests[0]
    assert req["path"] == "/v1/chat/completions"
    assert req["auth"] == f"Bearer {SECRET}"
    assert req["body"]["model"] == "tiny" and req["body"]["temperature"] == 0.3 and req["body"]["max_tokens"] == 17
    assert backend.chat(USER, temperature=0.0) == "echo: hello"
    assert server.requests[1]["body"]["temperature"] == 0.0
    assert backend.stats() == {
        "requests": 2,
        "successes": 2,
        "failures": 0,
        "backoff_seconds": 0.0,
        "retries": {"connection": 0, "timeout": 0, "rate_limit": 0, "server_error": 0, "bad_response": 0},
    }


def test_each_fault_is_retried_and_counted_by_cause(server, make_backend):
    server.script.extend([("500",), ("close",), ("nonjson",), ("missing",), ("ok", "finally")])
    backend = make_backend(server.url, max_retries=4)
    assert backend.chat(USER) == "finally"
    stats = backend.stats()
    assert stats["retries"] == {"connection": 1, "timeout": 0, "rate_limit": 0, "server_error": 1, "bad_response": 2}
    assert stats["successes"] == 1 and stats["failures"] == 0
    assert len(server.requests) == 5
    assert 0 < stats["backoff_seconds"] <= 4 * 0.05


def test_backoff_grows_exponentially(server, make_backend):
    server.script.extend([("500",)] * 3)
    backend = make_backend(server.url, max_retries=3, backoff_base=0.1, backoff_max=10.0)
    assert backend.chat(USER) == "echo: hello"
    gaps = [b["t"] - a["t"] for a, b in zip(server.requests, server.requests[1:])]
    # jittered delays lie in [0.5, 1] x 0.1 * 2^k
    for k, gap in enumerate(gaps):
        assert 0.05 * 2**k <= gap < 0.1 * 2**k + 0.15, gaps


def test_429_honours_retry_after(server, make_backend):
    server.script.extend([("429", 1)])
    backend = make_backend(server.url, backoff_base=0.01)
    assert backend.chat(USER) == "echo: hello"
    gap = server.requests[1]["t"] - server.requests[0]["t"]
    assert gap >= 0.95
    assert backend.stats()["retries"]["rate_limit"] == 1
    assert backend.stats()["backoff_seconds"] == pytest.approx(1.0)


def test_503_with_retry_after_is_honoured(server, make_backend):
    server.script.extend([("503", 0.4)])
    backend = make_backend(server.url, backoff_base=0.01)
    assert backend.chat(USER) == "echo: hello"
    assert server.requests[1]["t"] - server.requests[0]["t"] >= 0.38
    assert backend.stats()["retries"]["server_error"] == 1


def test_retry_after_formats():
    future = email.utils.formatdate(time.time() + 30, usegmt=True)
    assert _retry_after({"retry-after": "2"}) == 2.0
    assert _retry_after({"retry-after-ms": "250", "retry-after": "9"}) == 0.25
    assert 28 <= _retry_after({"retry-after": future}) <= 30
    assert _retry_after({"retry-after": "soon"}) is None and _retry_after({}) is None


def test_timeout_is_retried(server, make_backend):
    server.script.extend([("hang", 30.0)])  # far past the client timeout: the server closes it when the test ends
    backend = make_backend(server.url, timeout=0.3)
    assert backend.chat(USER) == "echo: hello"
    # the retry went out while the first request still hung: the client gave up on it, it did not outwait it
    assert len(server.requests) == 2 and server.max_in_flight == 2
    assert backend.stats()["retries"]["timeout"] == 1


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_unreachable_server_gives_clear_error_without_the_key(make_backend, caplog):
    url = f"http://127.0.0.1:{_closed_port()}/v1"
    backend = make_backend(url, max_retries=2)
    with caplog.at_level(logging.WARNING), pytest.raises(BackendUnavailable) as info:
        backend.chat(USER)
    message = str(info.value)
    assert url in message and "after 3 attempt(s)" in message and "connection" in message
    assert info.value.url == url and info.value.cause == "connection"
    assert SECRET not in message and SECRET not in caplog.text
    stats = backend.stats()
    assert stats["retries"]["connection"] == 2 and stats["failures"] == 1 and stats["successes"] == 0


def test_persistent_server_errors_fail_after_retries(server, make_backend):
    server.script.extend([("500",)] * 10)
    backend = make_backend(server.url, max_retries=3)
    with pytest.raises(BackendUnavailable, match="server_error: HTTP 500") as info:
        backend.chat(USER)
    assert server.url in str(info.value) and SECRET not in str(info.value)
    assert len(server.requests) == 4
    assert backend.stats()["retries"]["server_error"] == 3 and backend.stats()["failures"] == 1


@pytest.mark.parametrize("code, hint", [(400, "HTTP 400"), (401, "MAPO_TEST_KEY"), (404, "ends in /v1")])
def test_other_4xx_is_not_retried(server, make_backend, code, hint):
    server.script.extend([("status", code)])
    backend = make_backend(server.url)
    with pytest.raises(BackendRequestError) as info:
        backend.chat(USER)
    assert hint in str(info.value) and server.url in str(info.value) and SECRET not in str(info.value)
    assert info.value.status == code
    assert len(server.requests) == 1
    assert sum(backend.stats()["retries"].values()) == 0 and backend.stats()["failures"] == 1


def test_threads_share_the_backend_and_the_semaphore_bounds_concurrency(server, make_backend):
    server.script.extend([("gather", 2, 0.15)] * 8)
    backend = make_backend(server.url, concurrency=2)
    results: dict[int, str] = {}

    def worker(i: int) -> None:
        results[i] = backend.chat([{"role": "user", "content": f"m{i}"}])

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == {i: f"echo: m{i}" for i in range(8)}
    assert server.max_in_flight == 2


def test_chat_many_keeps_order_and_bounds_concurrency(server, make_backend):
    server.script.extend([("gather", 3, 0.1)] * 6)
    backend = make_backend(server.url, concurrency=3)
    batch = [[{"role": "user", "content": f"q{i}"}] for i in range(6)]
    assert backend.chat_many(batch) == [f"echo: q{i}" for i in range(6)]
    assert server.max_in_flight == 3
    assert backend.chat_many([]) == []


def test_chat_many_raises_the_first_error(server, make_backend):
    server.script.extend([("status", 400)])
    backend = make_backend(server.url, concurrency=1)
    with pytest.raises(BackendRequestError):
        backend.chat_many([USER, USER])


def test_achat_from_a_caller_event_loop(server, make_backend):
    backend = make_backend(server.url)

    async def main() -> list[str]:
        return await asyncio.gather(backend.achat(USER), backend.achat([{"role": "user", "content": "b"}]))

    assert asyncio.run(main()) == ["echo: hello", "echo: b"]


def test_bad_messages_and_configs_are_named():
    backend = ChatBackend(ChatBackendConfig(base_url="http://127.0.0.1:9/v1", model="m"))
    with pytest.raises(ValueError, match=r"messages\[0\]\.role"):
        backend.chat([{"role": "robot", "content": "x"}])
    with pytest.raises(ValueError, match="non-empty list"):
        backend.chat("hello")
    with pytest.raises(ValueError, match="api_key_env"):
        ChatBackendConfig.from_dict({"base_url": "http://x/v1", "model": "m", "api_key": "sk-1"})
    with pytest.raises(ValueError, match="unknown key"):
        ChatBackendConfig.from_dict({"base_url": "http://x/v1", "model": "m", "temprature": 0.1})
    with pytest.raises(ValueError, match="base_url"):
        ChatBackendConfig(base_url="localhost:8000", model="m")
    with pytest.raises(ValueError, match="concurrency"):
        ChatBackendConfig(base_url="http://x/v1", model="m", concurrency=0)


def test_shared_backend_is_one_per_config():
    a = shared_backend({"base_url": "http://127.0.0.1:9/v1", "model": "m"})
    b = shared_backend(ChatBackendConfig(base_url="http://127.0.0.1:9/v1", model="m"))
    c = shared_backend({"base_url": "http://127.0.0.1:9/v1", "model": "other"})
    assert a is b and a is not c


# -- JSON output ------------------------------------------------------------


class Verdict(BaseModel):
    label: Literal["yes", "no"]
    score: int = Field(ge=0, le=2)


@pytest.mark.parametrize(
    "text",
    [
        '{"label": "yes", "score": 1}',
        'Sure! Here is my answer:\n```json\n{"label": "yes", "score": 1}\n```\nHope that helps.',
        'Reasoning {not json} then {"label": "yes", "score": 1} and trailing words',
        "```\n{\"label\": \"yes\", \"score\": 1}\n```",
    ],
)
def test_extract_json_object_finds_the_object(text):
    assert extract_json_object(text) == {"label": "yes", "score": 1}


def test_extract_json_object_keeps_nesting_and_takes_the_first():
    assert extract_json_object('x {"a": {"b": [1, {"c": 2}]}} {"z": 1}') == {"a": {"b": [1, {"c": 2}]}}


@pytest.mark.parametrize("text", ["", "   ", "no json here", "[1, 2, 3]", '{"label": "yes",'])
def test_extract_json_object_rejects(text):
    with pytest.raises(JSONOutputError):
        extract_json_object(text)


def test_extract_json_object_says_when_the_object_is_cut_off():
    # an inner complete object must not be mistaken for the answer
    with pytest.raises(JSONOutputError, match="cut off"):
        extract_json_object('{"a": {"level": 1, "evidence": "x"}, "b": {"level": 2, "evid')


def test_extract_json_object_skips_a_broken_object_whole():
    text = '{C_prog: {"level": 1}} then {"label": "a } in \\"quotes\\""}'
    assert extract_json_object(text) == {"label": 'a } in "quotes"'}


def test_parse_json_reply_names_the_bad_field():
    with pytest.raises(JSONOutputError, match="field score"):
        parse_json_reply('{"label": "yes", "score": 7}', Verdict)


def test_response_format_kinds():
    assert response_format(Verdict, None) is None
    assert response_format(Verdict, "json_object") == {"type": "json_object"}
    schema = Verdict.model_json_schema()
    assert response_format(Verdict, "json_schema") == {
        "type": "json_schema",
        "json_schema": {"name": "Verdict", "schema": schema},
    }
    assert response_format(Verdict, "llama_cpp") == {"type": "json_object", "schema": schema}
    with pytest.raises(ValueError, match="unknown json_format 'yaml'"):
        response_format(Verdict, "yaml")


class ScriptedClient:
    """Fault injection for the repair loop: replies from a list, records what it was sent."""

    def __init__(self, replies: list[str]) -> None:
        self.replies = deque(replies)
        self.sent: list[list[dict]] = []

    def chat(self, messages, **overrides) -> str:
        self.sent.append([dict(m) for m in messages])
        return self.replies.popleft()


def test_request_json_first_try():
    client = ScriptedClient(['{"label": "no", "score": 0}'])
    out = request_json(client, USER, Verdict)
    assert out.value == Verdict(label="no", score=0)
    assert not out.repaired and not out.fallback and len(client.sent) == 1


def test_request_json_repairs_once_with_the_error():
    client = ScriptedClient(['{"label": "maybe", "score": 1}', 'ok: {"label": "yes", "score": 2}'])
    out = request_json(client, USER, Verdict)
    assert out.value == Verdict(label="yes", score=2) and out.repaired and not out.fallback
    repair = client.sent[1]
    assert repair[-2] == {"role": "assistant", "content": '{"label": "maybe", "score": 1}'}
    assert "field label" in repair[-1]["content"] and "only the corrected JSON" in repair[-1]["content"]


def test_request_json_falls_back_after_the_repair_fails():
    client = ScriptedClient(["I cannot do that.", '{"label": "yes"}'])
    out = request_json(client, USER, Verdict)
    assert out.value is None and out.fallback and not out.repaired
    assert len(out.errors) == 2 and "no JSON object" in out.errors[0] and "field score" in out.errors[1]
    assert out.replies == ["I cannot do that.", '{"label": "yes"}']


def test_request_json_over_http_with_repair(server, make_backend):
    server.script.extend([("ok", "Here you go: {label: yes}"), ("ok", '```json\n{"label": "yes", "score": 1}\n```')])
    out = request_json(make_backend(server.url), USER, Verdict, json_format="json_object", temperature=0.0)
    assert out.value == Verdict(label="yes", score=1) and out.repaired
    assert server.requests[1]["body"]["temperature"] == 0.0
    assert server.requests[1]["body"]["response_format"] == {"type": "json_object"}
    assert len(server.requests[1]["body"]["messages"]) == 3
