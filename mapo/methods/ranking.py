"""RAPO generative ranking: a group's candidate replies to one context, judged together.

The ranker sees the dialogue so far and, for each candidate reply, the simulated user's
reaction to it; it returns per candidate a rank (1 = best, each used once), a score in
[0, 1] and a short critique. Two backends:

- `offline` (default): ranks by the offline judge's reward for the candidate (IDR), score
  = logistic(reward), critique templated from the judge's six levels. No extra calls.
- `llm`: one chat request per group through `mapo.backends.json_output` (validated JSON,
  one repair attempt); when both replies are unusable, the offline ranking is used and
  the result is marked `fallback` (counted in the step's metrics).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from pydantic import BaseModel, Field, ValidationInfo, model_validator

from mapo.backends.json_output import ChatClient, request_json

AXIS_WORDS = {
    "C": "grasp of their situation",
    "A": "feelings",
    "P": "sense of what to do next",
}


def critique_from_levels(levels: Mapping[str, int]) -> str:
    """A short templated critique of a reply from the judge's six levels (C/A/P progress and setback)."""
    if not levels:
        return "The judge gave no rating for this reply."
    parts = []
    for axis, words in AXIS_WORDS.items():
        prog, neg = (
            int(levels.get(f"{axis}_prog", 0)),
            int(levels.get(f"{axis}_neg", 0)),
        )
        if neg <= -2:
            parts.append(f"it badly set back the user's {words}")
        elif neg == -1:
            parts.append(f"it somewhat set back the user's {words}")
        if prog >= 2:
            parts.append(f"it clearly helped the user's {words}")
        elif prog == 1:
            parts.append(f"it helped the user's {words} a little")
        elif neg == 0:
            parts.append(f"it did nothing for the user's {words}")
    return "The reply: " + "; ".join(parts) + "."


@dataclass
class Candidate:
    """One candidate reply with what followed it: the user's reaction and the offline judge's verdict."""

    reply: str
    reaction: str
    reward: float  # the judge's per-turn reward (IDR) for this reply
    levels: dict[str, int]


@dataclass
class Ranked:
    rank: int  # 1 = best
    score: float  # in [0, 1]
    critique: str


@dataclass
class GroupRanking:
    items: list[Ranked]
    fallback: bool = False  # the LLM ranker's replies were unusable; these are the offline ranking's


class Ranker(Protocol):
    def rank(self, context: Sequence[Mapping[str, str]], candidates: Sequence[Candidate]) -> GroupRanking: ...


class OfflineRanker:
    """Ranks by the offline judge's reward; ties keep the candidates' order."""

    def rank(self, context: Sequence[Mapping[str, str]], candidates: Sequence[Candidate]) -> GroupRanking:
        if not candidates:
            raise ValueError("rank: no candidates")
        order = sorted(range(len(candidates)), key=lambda i: -candidates[i].reward)
        ranks = {i: position + 1 for position, i in enumerate(order)}
        return GroupRanking(
            [
                Ranked(
                    ranks[i],
                    1.0 / (1.0 + math.exp(-max(min(c.reward, 50.0), -50.0))),
                    critique_from_levels(c.levels),
                )
                for i, c in enumerate(candidates)
            ]
        )


# ---------------------------------------------------------------- the LLM ranker


class RankedItem(BaseModel):
    candidate: int
    rank: int
    score: float = Field(ge=0.0, le=1.0)
    critique: str = Field(min_length=1)


class RankingOutput(BaseModel):
    rankings: list[RankedItem]

    @model_validator(mode="after")
    def one_entry_per_candidate(self, info: ValidationInfo) -> RankingOutput:
        n = (info.context or {}).get("n")
        if n is None:
            return self
        if sorted(item.candidate for item in self.rankings) != list(range(n)):
            raise ValueError(f"give exactly one entry for each candidate 0..{n - 1}")
        if sorted(item.rank for item in self.rankings) != list(range(1, n + 1)):
            raise ValueError(f"ranks must be 1..{n}, each used once")
        return self


RANKER_SYSTEM = (
    "You review replies written by a supportive listener. You see a conversation so far, then several "
    "candidate replies to the person's latest message, each followed by how the person reacted to it. "
    "Judge every candidate by the reaction it earned and by whether it understood the person's situation, "
    "met their feelings and helped them toward a next step of their own. Count against a candidate: stock "
    "phrases of sympathy, lecturing, repeating itself, length without substance, anything that left the "
    "person feeling worse or unheard."
)
RANKER_REQUEST = (
    "Conversation so far:\n{conversation}\n\nCandidates:\n{candidates}\n\n"
    "Reply with only a JSON object of this shape: "
    '{{"rankings": [{{"candidate": <index>, "rank": <1 = best; each rank used once>, '
    '"score": <number from 0 to 1>, "critique": "<one or two sentences about this candidate alone>"}}, ...]}} '
    "with one entry for each of the {n} candidates."
)


def ranking_messages(context: Sequence[Mapping[str, str]], candidates: Sequence[Candidate]) -> list[dict[str, str]]:
    speaker = {"user": "Person", "assistant": "Listener"}
    conversation = "\n".join(f"{speaker[m['role']]}: {m['content']}" for m in context if m["role"] in speaker)
    listed = "\n".join(
        f"[{i}] Listener: {c.reply}\n    Person's reaction: {c.reaction}" for i, c in enumerate(candidates)
    )
    return [
        {"role": "system", "content": RANKER_SYSTEM},
        {
            "role": "user",
            "content": RANKER_REQUEST.format(conversation=conversation, candidates=listed, n=len(candidates)),
        },
    ]


class LLMRanker:
    """Ranks through a chat model; falls back to the offline ranking (marked) when its JSON is unusable."""

    def __init__(self, client: ChatClient, json_format: str | None = None) -> None:
        self.client = client
        self.json_format = json_format
        self.offline = OfflineRanker()

    def rank(self, context: Sequence[Mapping[str, str]], candidates: Sequence[Candidate]) -> GroupRanking:
        reply = request_json(
            self.client,
            ranking_messages(context, candidates),
            RankingOutput,
            context={"n": len(candidates)},
            json_format=self.json_format,
        )
        if reply.value is None:
            fallback = self.offline.rank(context, candidates)
            return GroupRanking(fallback.items, fallback=True)
        by_candidate = {item.candidate: item for item in reply.value.rankings}
        return GroupRanking(
            [
                Ranked(
                    by_candidate[i].rank,
                    by_candidate[i].score,
                    by_candidate[i].critique,
                )
                for i in range(len(candidates))
            ]
        )


def make_ranker(kind: str, backend: Mapping[str, Any]) -> Ranker:
    """`offline`, or `llm` with `backend` = a ChatBackendConfig mapping (base_url, model, ...; json_format and
    transport optional, mapo.backends.transports)."""
    if kind == "offline":
        return OfflineRanker()
    if kind == "llm":
        from mapo.backends.transports import chat_client

        options = dict(backend)
        json_format = options.pop("json_format", None)
        return LLMRanker(chat_client(options), json_format)
    raise ValueError(f"rapo.ranker must be offline or llm, got {kind!r}")
