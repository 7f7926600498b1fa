"""An OpenAI-compatible chat server whose "model" is the offline judge.

It answers `LLMJudge`'s requests: it reads the persona (or, for a calibration context,
the situation, what is not said yet and the cues), the dialogue and the reply to rate
from the judge prompt, scores the reply with `OfflineJudge` (rules +
sentence embeddings), and replies with the six levels as the JSON the judge asks
for. So an LLM-judge configuration (backend, retries, JSON validation, repair,
fallback) can run end to end without a GPU or a model download, e.g. behind a
`FaultProxy`:

    with JudgeServer() as server:
        options = {"judge": {"kind": "llm", "base_url": server.base_url, "model": "offline-judge"}}

Evidence is the offline judge's phrase when it is quoted from the reply, else the
whole reply (the LLM judge requires quotes). It also answers RAPO's hindsight requests
(`mapo.methods.hindsight_llm`): a listener reply is worth learning from when the offline
judge, seeing the conversation before it, rates any non-zero level. Other requests
(director, actor) get HTTP 400. `authorizations` records the Authorization headers received.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from mapo.core.types import Scenario
from mapo.envs.dynamics import LEVEL_KEYS
from mapo.envs.empathy.cards import ScenarioCard, bundled_scenarios
from mapo.envs.empathy.llm.judge import CONTEXT_PERSON, _is_quoted
from mapo.envs.empathy.offline.features import CUE_FIELDS, JudgeContext
from mapo.envs.empathy.offline.judge import OfflineJudge
from mapo.methods.hindsight_llm import HINDSIGHT_HEADER

_NAME = re.compile(r"^Name: ([^,\n]+),", re.MULTILINE)
_SITUATION = re.compile(r"^Situation: (.*)$", re.MULTILINE)
_CUE = re.compile(r"^- ([CAP]), [a-z]+: (.*)$", re.MULTILINE)
_BACKGROUND = re.compile(r"^Not said yet: (.*)$", re.MULTILINE)
_DEEPEST = re.compile(r"Deepest need now: ([CAP])\.")
_REPLY = re.compile(r"LATEST ASSISTANT REPLY[^\n]*\n<<<\n(.*)\n>>>\n", re.DOTALL)
_LISTENER = re.compile(r"^Listener \[(\d+)\]: (.*)$")
_TRANSCRIPT = re.compile(r"CONVERSATION SO FAR\n(.*)\n\nLATEST ASSISTANT REPLY", re.DOTALL)


class JudgePromptError(ValueError):
    """A request that is not an `LLMJudge` prompt about a known persona."""


def _history(transcript: str, name: str) -> list[dict[str, str]]:
    if transcript.strip() == "(nothing yet)":
        return []
    messages: list[dict[str, str]] = []
    speakers = {f"{name}: ": "user", "Assistant: ": "assistant"}
    for line in transcript.split("\n"):
        prefix = next((p for p in speakers if line.startswith(p)), None)
        if prefix is not None:
            messages.append({"role": speakers[prefix], "content": line[len(prefix) :]})
        elif messages:  # a message spanning lines
            messages[-1]["content"] += "\n" + line
    return messages


class JudgeServer:
    """A threaded OpenAI-compatible server on 127.0.0.1 serving offline-judge levels as JSON."""

    def __init__(self, scenarios: Sequence[Scenario] | None = None) -> None:
        cards = [ScenarioCard.model_validate(s.card) for s in (scenarios or bundled_scenarios("all"))]
        self.cards = {card.persona.name: card for card in cards}
        self.judge = OfflineJudge()
        self.judge.score(JudgeContext("", {}, [], [], "C"), "Warm-up.")  # load the embeddings before the first request
        self.requests = 0
        self.authorizations: list[str] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="mapo-judge-server", daemon=True)
        self._thread.start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def levels_json(self, prompt: str) -> str:
        """The judge JSON for one `LLMJudge` user prompt: about a card's persona (`judge`) or a context (`score`)."""
        name, reply, transcript = _NAME.search(prompt), _REPLY.search(prompt), _TRANSCRIPT.search(prompt)
        situation = _SITUATION.search(prompt)
        if not (reply and transcript and (name or situation)):
            raise JudgePromptError("not an LLM judge prompt (no profile, conversation or reply to rate)")
        response = reply.group(1)
        if name:
            card = self.cards.get(name.group(1).strip())
            if card is None:
                raise JudgePromptError(f"no scenario card for the persona {name.group(1)!r}")
            history = _history(transcript.group(1), card.persona.name)
            situation_text = card.situation
            cues = {axis: list(getattr(card.cues, field)) for axis, field in CUE_FIELDS.items()}
            background: list[str] = []
        else:  # a context's profile (LLMJudge.score): what it says is all there is
            history = _history(transcript.group(1), CONTEXT_PERSON)
            situation_text = situation.group(1)
            cues = {axis: [m.group(2) for m in _CUE.finditer(prompt) if m.group(1) == axis] for axis in CUE_FIELDS}
            background = [m.group(1) for m in _BACKGROUND.finditer(prompt)]
        deepest = _DEEPEST.search(prompt)
        context = JudgeContext(
            situation=situation_text,
            cues=cues,
            user_turns=[m["content"] for m in history if m["role"] == "user"],
            own_turns=[m["content"] for m in history if m["role"] == "assistant"],
            deepest_axis=deepest.group(1) if deepest else "C",
            background=background,
        )
        judgement = self.judge.score(context, response)
        out: dict[str, dict[str, Any]] = {}
        for key in LEVEL_KEYS:
            level, evidence = judgement.levels[key], judgement.evidence.get(key, "")
            if level != 0 and not _is_quoted(evidence, response):
                evidence = response
            if level != 0 and not _is_quoted(evidence, response):  # nothing quotable (an empty reply)
                level, evidence = 0, ""
            out[key] = {"level": level, "evidence": evidence if level else ""}
        return json.dumps(out)

    def hindsight_json(self, prompt: str) -> str:
        """The hindsight JSON for one `mapo.methods.hindsight_llm` request."""
        user_turns: list[str] = []
        own_turns: list[str] = []
        verdicts = []
        for line in prompt.split("\n"):
            if line.startswith("Person: "):
                user_turns.append(line[len("Person: ") :])
            elif listener := _LISTENER.match(line):
                reply = listener.group(2)
                judgement = self.judge.score(JudgeContext("", {}, list(user_turns), list(own_turns), "C"), reply)
                worth = any(judgement.levels[key] != 0 for key in LEVEL_KEYS)
                verdicts.append({"turn": int(listener.group(1)), "worth_learning": worth})
                own_turns.append(reply)
        if not verdicts:
            raise JudgePromptError("a hindsight request without numbered listener replies")
        return json.dumps({"turns": verdicts})

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def _send(self, status: int, payload: dict[str, Any]) -> None:
                body = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                if self.path.rstrip("/").endswith("/models"):
                    return self._send(200, {"object": "list", "data": [{"id": "offline-judge", "object": "model"}]})
                return self._send(404, {"error": {"message": f"no route {self.path}"}})

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                with server._lock:
                    server.requests += 1
                    server.authorizations.append(self.headers.get("Authorization", ""))
                if not self.path.rstrip("/").endswith("/chat/completions"):
                    return self._send(404, {"error": {"message": f"no route {self.path}"}})
                try:
                    request = json.loads(body)
                    prompt = next(m["content"] for m in request["messages"] if m["role"] == "user")  # a repair turn follows it
                    hindsight = prompt.startswith(HINDSIGHT_HEADER)
                    content = server.hindsight_json(prompt) if hindsight else server.levels_json(prompt)
                except (ValueError, KeyError, TypeError, StopIteration) as err:
                    return self._send(400, {"error": {"message": f"judge server: {err}"}})
                return self._send(200, {
                    "id": f"judge-{server.requests}",
                    "object": "chat.completion",
                    "created": int(time.time()),
                    "model": request.get("model", "offline-judge"),
                    "choices": [{"index": 0, "finish_reason": "stop",
                                 "message": {"role": "assistant", "content": content}}],
                    "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
                })

        return Handler

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)

    def __enter__(self) -> JudgeServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
