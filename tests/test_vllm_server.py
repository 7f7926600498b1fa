"""The tests' local OpenAI-compatible server (`vllm serve`, mapo.testing.vllm_server): a server that
cannot start says why with its log, and a started one constrains JSON to a schema compactly."""

from __future__ import annotations

import json
import urllib.request

import pytest

from mapo.testing.vllm_server import ServerError, VllmServer, missing_requirement


@pytest.mark.slow  # about 25 s: the server's processes import vLLM before they fail
def test_a_server_that_cannot_start_says_why_with_its_log(tmp_path):
    if missing_requirement():
        pytest.skip(missing_requirement())
    with pytest.raises(ServerError, match="vllm serve exited with") as raised:
        VllmServer(model=tmp_path / "no-such-model", log_file=tmp_path / "server.log", ready_timeout=120)
    assert "no-such-model" in str(raised.value)  # the log's tail names what it could not load


def _chat(base_url: str, body: dict) -> str:
    request = urllib.request.Request(f"{base_url}/chat/completions", json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=120) as response:
        return json.loads(response.read())["choices"][0]["message"]["content"]


@pytest.mark.slow  # starts vllm serve (about a minute)
def test_json_under_a_schema_is_one_compact_object(local_server):
    schema = {"type": "object", "properties": {"level": {"type": "integer"}, "why": {"type": "string", "maxLength": 40}},
              "required": ["level", "why"]}
    reply = _chat(local_server, {
        "model": "smollm2", "max_tokens": 60, "temperature": 0,
        "messages": [{"role": "user", "content": "Rate your mood from -2 to 2 and say why, as JSON."}],
        "response_format": {"type": "json_schema", "json_schema": {"name": "mood", "schema": schema}},
    })
    data = json.loads(reply)  # a whole object within the cap: no whitespace padding
    assert set(data) == {"level", "why"} and isinstance(data["level"], int)
    assert "\n" not in reply and ": " not in reply
