"""Shared by the offline judge's tests: the bundled cards and a judge context built from a dialogue."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from mapo.core.types import Scenario
from mapo.envs.empathy.cards import ScenarioCard, bundled_scenarios
from mapo.envs.empathy.offline.features import JudgeContext


@pytest.fixture(scope="module")
def cards() -> dict[str, Scenario]:
    return {s.id: s for s in bundled_scenarios("all")}


@pytest.fixture(scope="module")
def judge_context(cards: dict[str, Scenario]) -> Callable[[str, list[str], list[str]], JudgeContext]:
    """`judge_context(card id, what they said, the listener's earlier replies)`: the context of the
    listener's next reply, their messages interleaved with its earlier ones, the last message theirs."""

    def build(sid: str, said: list[str], before: list[str]) -> JudgeContext:
        card = ScenarioCard.model_validate(cards[sid].card)
        history = []
        for k, user in enumerate(said[-len(before) - 1 :] if before else said):
            history.append({"role": "user", "content": user})
            if k < len(before):
                history.append({"role": "assistant", "content": before[k]})
        return JudgeContext(
            situation=card.situation,
            cues={"C": card.cues.understanding, "A": card.cues.validation, "P": card.cues.empowerment},
            user_turns=[m["content"] for m in history if m["role"] == "user"],
            own_turns=list(before),
            deepest_axis="A",
            background=card.background(),
            history=history,
        )

    return build
