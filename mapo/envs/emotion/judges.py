"""The judges of the K = 1 emotion-score environment: how much the latest reply changed the
user's emotion (0-100 scale), as an `EmotionJudgement`.

- `OfflineEmotionJudge` scores with sentence embeddings (`mapo.envs.embeddings`,
  all-MiniLM-L6-v2). Five cosine similarities of the reply, each turned into points by
  a clipped linear ramp (`_ramp(x, lo, hi)` is 0 at `lo`, 1 at `hi`):

      engage   = max sim to the sentences of the user's opening message, the background and the topic
                 (not to the user's later reactions: "you really get it" would make platitudes relevant)
      insight  = max sim to the hidden-intention sentences and the card's cues (topic if there are none)
      relevance = max(engage, insight)
                 -> +8 * ramp(relevance, 0.20, 0.50), and down to -6 as it falls from 0.20 to 0
      insight  -> +7 * ramp(insight, 0.25, 0.50)            (speaking to the unstated need)
      dismiss  = max sim to DISMISSIVE exemplars -> -20 * ramp(dismiss, 0.35, 0.50)
      template = max sim to TEMPLATED exemplars  -> -8 * ramp(template, 0.60, 0.80)
      repeat   = max sim to the policy's own earlier replies -> -10 * ramp(repeat, 0.85, 0.95)

  change = round(sum), clipped to [-15, +15]; an empty reply is -10. The constants were
  set on hand-written replies to four personas: a specific reply that speaks to the
  unstated need scores +14 to +15, a warm reply about what they said +1 to +10, bare
  advice about +2, a generic question 0, off-topic chat -3, platitudes -3 to -7,
  dismissal -12 to -15. It is a cheap, reproducible proxy for the LLM judge, not a
  substitute for one.
- `LLMEmotionJudge` asks any chat client for `{"change": int in [-15, 15], "reason": str}`
  (one repair, then change 0 with `fallback=True`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field

from mapo.envs.emotion.persona import Persona
from mapo.text import sentences

log = logging.getLogger(__name__)

MAX_CHANGE = 15


@dataclass
class EmotionJudgement:
    change: float
    components: dict[str, float] = field(default_factory=dict)
    reason: str = ""
    fallback: bool = False


class EmotionJudge(Protocol):
    def score(self, persona: Persona, history: list[dict[str, str]], response: str) -> EmotionJudgement: ...


# -- offline judge ------------------------------------------------------------------

# Our own exemplars of replies that hurt: brushing the person off, and stock phrases.
DISMISSIVE = (
    "Just get over it.",
    "That's not a big deal.",
    "You're overreacting.",
    "Stop complaining, other people have it worse.",
    "Honestly, that's your own fault.",
    "Whatever, I don't really care.",
    "Calm down, it's nothing.",
)
TEMPLATED = (
    "I understand how you feel.",
    "I'm sorry to hear that.",
    "Everything will be okay.",
    "Stay positive!",
    "That must be hard.",
    "I'm here for you.",
)


def _ramp(x: float, lo: float, hi: float) -> float:
    return min(1.0, max(0.0, (x - lo) / (hi - lo)))


class OfflineEmotionJudge:
    """Embedding-similarity scorer; see the module docstring for the formula."""

    def score(self, persona: Persona, history: list[dict[str, str]], response: str) -> EmotionJudgement:
        from mapo.envs.embeddings import similarity

        if not response.strip():
            return EmotionJudgement(change=-10.0, components={"empty": 1.0}, reason="empty reply")
        opening = next((m["content"] for m in history if m["role"] == "user"), "")
        context = [t for t in [*sentences(opening), *sentences(persona.background), persona.topic] if t]
        intent = sentences(persona.hidden_intention) + persona.needs or [persona.topic or persona.persona]
        own = [m["content"] for m in history if m["role"] == "assistant" and m["content"].strip()]

        engage = float(similarity([response], context).max()) if context else 0.0
        insight = float(similarity([response], intent).max())
        dismiss = float(similarity([response], list(DISMISSIVE)).max())
        template = float(similarity([response], list(TEMPLATED)).max())
        repeat = float(similarity([response], own).max()) if own else 0.0

        relevance = max(engage, insight)
        points = (
            8.0 * _ramp(relevance, 0.20, 0.50)
            - 6.0 * _ramp(0.20 - relevance, 0.0, 0.20)
            + 7.0 * _ramp(insight, 0.25, 0.50)
            - 20.0 * _ramp(dismiss, 0.35, 0.50)
            - 8.0 * _ramp(template, 0.60, 0.80)
            - 10.0 * _ramp(repeat, 0.85, 0.95)
        )
        change = float(max(-MAX_CHANGE, min(MAX_CHANGE, round(points))))
        components = {"engage": engage, "insight": insight, "dismiss": dismiss, "template": template, "repeat": repeat}
        return EmotionJudgement(change=change, components={k: round(v, 4) for k, v in components.items()})


# -- LLM judge --------------------------------------------------------------------

LLM_JUDGE_SYSTEM = """\
You estimate how a person seeking support would feel after reading one reply.
You know their hidden profile, including what they really need but have not said.
Their mood is a number from 0 (desperate) to 100 (fully relieved and ready to act).
Judge ONLY the latest reply, as this person would: a reply that notices what they
actually said and speaks to their real need raises the mood; stock phrases,
lecturing, premature advice, repetition or brushing them off lower it.
Answer with JSON only: {"change": <integer from -15 to 15>, "reason": "<one short sentence>"}"""


class EmotionChange(BaseModel):
    model_config = ConfigDict(extra="ignore")
    change: int = Field(ge=-MAX_CHANGE, le=MAX_CHANGE)
    reason: str = ""


def _profile(persona: Persona) -> str:
    parts = [f"Person: {persona.persona}", f"Background: {persona.background}", f"Topic: {persona.topic}",
             f"Hidden need: {persona.hidden_intention}"]
    return "\n".join(p for p in parts if not p.endswith(": "))


class LLMEmotionJudge:
    """Any chat backend with `chat(messages, **overrides) -> str` (see `mapo.backends`)."""

    def __init__(self, backend: Any, *, temperature: float = 0.0, max_tokens: int = 200) -> None:
        self.backend = backend
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.counters = {"calls": 0, "repairs": 0, "fallbacks": 0}

    def score(self, persona: Persona, history: list[dict[str, str]], response: str) -> EmotionJudgement:
        from mapo.backends.json_output import request_json

        transcript = "\n".join(f"{'Person' if m['role'] == 'user' else 'Supporter'}: {m['content']}" for m in history)
        prompt = (
            f"{_profile(persona)}\n\nConversation so far:\n{transcript}\n\n"
            f"Latest reply to judge:\n<<<\n{response}\n>>>"
        )
        messages = [{"role": "system", "content": LLM_JUDGE_SYSTEM}, {"role": "user", "content": prompt}]
        self.counters["calls"] += 1
        reply = request_json(
            self.backend, messages, EmotionChange, temperature=self.temperature, max_tokens=self.max_tokens
        )
        self.counters["repairs"] += int(reply.repaired)
        if reply.value is None:
            self.counters["fallbacks"] += 1
            log.warning("emotion judge gave no usable JSON (%s); using change 0", "; ".join(reply.errors))
            return EmotionJudgement(change=0.0, reason="; ".join(reply.errors), fallback=True)
        return EmotionJudgement(change=float(reply.value.change), reason=reply.value.reason)
