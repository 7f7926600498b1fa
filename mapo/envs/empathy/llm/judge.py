"""`LLMJudge`: the six EMPA levels of the latest assistant turn from an LLM, as JSON validated by
pydantic, each non-zero level with evidence quoted from that turn. It sees the persona's hidden
profile (growth arc and cues included) and the whole dialogue, but scores only the latest turn.
One repair attempt, then the neutral levels with `Judgement.fallback = True`, logged."""

from __future__ import annotations

import logging
import re
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationInfo, model_validator

from mapo.backends.json_output import ChatClient, request_json, response_format
from mapo.envs.dynamics import LEVEL_KEYS
from mapo.envs.empathy.llm.common import (
    LLMRole,
    card_profile,
    context_profile,
    history_without,
    normalise,
    sampling,
    standing,
    transcript,
)
from mapo.envs.empathy.llm.prompts import JUDGE_SYSTEM, JUDGE_USER
from mapo.envs.empathy.roles import NEUTRAL_LEVELS, Judgement

if TYPE_CHECKING:
    from mapo.envs.dynamics import NeedState
    from mapo.envs.empathy.cards import ScenarioCard
    from mapo.envs.empathy.offline.features import JudgeContext

log = logging.getLogger(__name__)
CONTEXT_PERSON = "Person"  # how the transcript names the person of a context without a card


class ProgLevel(BaseModel):
    model_config = ConfigDict(extra="forbid")
    level: Literal[0, 1, 2]
    evidence: str = ""


class NegLevel(BaseModel):
    model_config = ConfigDict(extra="forbid")
    level: Literal[0, -1, -2]
    evidence: str = ""


def _is_quoted(evidence: str, response: str) -> bool:
    """Whether `evidence` is copied from `response`, allowing '...' between fragments and case/punctuation changes."""
    fragments = [normalise(f) for f in re.split(r"\.\.\.|…", evidence)]
    fragments = [f for f in fragments if f]
    target = normalise(response)
    return bool(fragments) and all(f in target for f in fragments)


class JudgeOutput(BaseModel):
    """The judge's reply: six levels, each with evidence quoted from the rated turn."""

    model_config = ConfigDict(extra="forbid")
    C_prog: ProgLevel
    A_prog: ProgLevel
    P_prog: ProgLevel
    C_neg: NegLevel
    A_neg: NegLevel
    P_neg: NegLevel

    @model_validator(mode="after")
    def _evidence_is_quoted(self, info: ValidationInfo) -> JudgeOutput:
        response = (info.context or {}).get("response")
        if response is None:
            return self
        for key in LEVEL_KEYS:
            item = getattr(self, key)
            if item.level != 0 and not _is_quoted(item.evidence, response):
                raise ValueError(
                    f"{key}.evidence must be words copied exactly from the latest assistant reply "
                    f"(level {item.level} needs a quote), got {item.evidence!r}"
                )
        return self


class LLMJudge(LLMRole):
    """Scores the latest assistant turn with an LLM; neutral levels (counted, logged) when it cannot."""

    def __init__(
        self,
        backend: ChatClient,
        *,
        temperature: float = 0.0,
        max_tokens: int = 400,
        json_format: str | None = None,
    ) -> None:
        super().__init__(backend, temperature, max_tokens)
        response_format(JudgeOutput, json_format)  # reject an unknown format now, not mid-run
        self.json_format = json_format

    def judge(self, card: ScenarioCard, history: list[dict[str, str]], response: str, state: NeedState) -> Judgement:
        where = f"{card.id} turn {state.turn + 1}"
        overrides = sampling(self.temperature, self.max_tokens, self._seed, state.turn)
        prompt = JUDGE_USER.format(
            profile=card_profile(card, hidden=True),
            standing=standing(state),
            transcript=transcript(history_without(history, response), card.persona.name),
            response=response,
        )
        return self._rate(prompt, response, where, overrides)

    def score(self, context: JudgeContext, response: str) -> Judgement:
        """Levels for a reply in a labelled context without a card (`mapo env calibrate`): the profile
        holds what the context says (situation, what is not said yet, cues), the standing its deepest axis."""
        prompt = JUDGE_USER.format(
            profile=context_profile(context),
            standing=f"Deepest need now: {context.deepest_axis}.",
            transcript=transcript(history_without(context.history, response), CONTEXT_PERSON),
            response=response,
        )
        return self._rate(prompt, response, "a calibration context", sampling(self.temperature, self.max_tokens, None, 0))

    def _rate(self, prompt: str, response: str, where: str, overrides: dict[str, Any]) -> Judgement:
        self.counters["calls"] += 1
        messages = [{"role": "system", "content": JUDGE_SYSTEM}, {"role": "user", "content": prompt}]
        reply = request_json(
            self.backend, messages, JudgeOutput, context={"response": response}, json_format=self.json_format, **overrides
        )
        info = {"replies": reply.replies, "errors": reply.errors, "repaired": reply.repaired}
        if reply.fallback:
            self.counters["fallbacks"] += 1
            log.warning(
                "LLM judge: no valid judgement for %s after one repair; using neutral levels. Reason: %s",
                where,
                reply.errors[-1],
            )
            return Judgement(levels=dict(NEUTRAL_LEVELS), fallback=True, info={**info, "reason": reply.errors[-1]})
        self.counters["repaired"] += reply.repaired
        out = reply.value
        levels = {key: getattr(out, key).level for key in LEVEL_KEYS}
        evidence = {key: getattr(out, key).evidence for key in LEVEL_KEYS if getattr(out, key).level != 0}
        return Judgement(levels=levels, evidence=evidence, info=info)
