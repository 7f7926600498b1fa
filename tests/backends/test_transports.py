"""mapo.backends.transports: a chat transport plugged in by path serves an LLM role; bad ones are named."""

from __future__ import annotations

import json

import pytest

from mapo.backends.openai_compat import ChatBackend
from mapo.backends.transports import TRANSPORTS, chat_client
from mapo.envs.empathy.env import EmpathyEnvironment
from mapo.envs.empathy.cards import bundled_scenarios
from mapo.envs.empathy.roles import NEUTRAL_LEVELS

SEEN: list[list[dict]] = []


class CannedJudgeModel:
    """An in-process "model" that rates every reply as validating the user's feelings (A_prog = 1)."""

    def __init__(self, evidence: str = "") -> None:
        self.evidence = evidence

    def chat(self, messages, **overrides) -> str:
        SEEN.append([dict(m) for m in messages])
        levels = {k: {"level": 0, "evidence": ""} for k in NEUTRAL_LEVELS}
        levels["A_prog"] = {"level": 1, "evidence": self.evidence}
        return json.dumps(levels)


class NotAClient:
    pass


def test_the_default_transport_is_the_shared_openai_backend():
    client = chat_client({"base_url": "http://127.0.0.1:9/v1", "model": "m"})
    assert isinstance(client, ChatBackend)
    assert chat_client({"transport": "openai", "base_url": "http://127.0.0.1:9/v1", "model": "m"}) is client
    assert "openai" in TRANSPORTS.names()


def test_a_transport_named_by_path_serves_the_llm_judge():
    SEEN.clear()
    scenario = bundled_scenarios("test")[0]
    reply = "That sounds exhausting, and it makes sense you feel worn down."
    judge = {"kind": "llm", "transport": f"{__name__}:CannedJudgeModel", "evidence": "sounds exhausting"}
    env = EmpathyEnvironment(roles={"judge": judge}, max_turns=5)
    env.reset(scenario, seed=0)
    result = env.step(reply)
    assert result.info["levels"]["A_prog"] == 1 and not result.info["judge_fallback"]
    assert result.info["evidence"]["A_prog"] == "sounds exhausting"
    assert reply in SEEN[0][-1]["content"]  # the judge's prompt went through the plugged-in transport


def test_bad_transports_are_named():
    with pytest.raises(ValueError, match="unknown chat transport 'pigeon'"):
        chat_client({"transport": "pigeon"})
    with pytest.raises(ValueError, match=r"made a NotAClient, which has no chat\(messages\) method"):
        chat_client({"transport": f"{__name__}:NotAClient"})
