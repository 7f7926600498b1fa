"""RAPO hindsight selection as the paper does it: an LLM reads each finished dialogue and says which
of the assistant's replies are worth learning from.

One chat request per dialogue through `mapo.backends.json_output` (validated JSON, one repair
attempt) on any OpenAI-compatible server, the same backend the environment's LLM roles use.
When both replies are unusable the dialogue keeps every turn (as without selection) and the
step counts a fallback. `mapo.methods.rapo` keeps the two cheaper proxies (`quantile`, `judge`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from pydantic import BaseModel, ValidationInfo, model_validator

from mapo.backends.json_output import ChatClient, request_json
from mapo.core.types import Group, Trajectory
from mapo.methods.compeer import seen_reply

HINDSIGHT_SYSTEM = (
    "You look back at a finished conversation between a person who is going through a hard time and a "
    "supportive listener, to pick the listener's replies worth learning from. A reply is worth learning from "
    "when it clearly moved the person forward (understood their situation, met their feelings, helped them "
    "toward a next step of their own) or clearly set them back (stock sympathy, lecturing, repetition, "
    "advice too early, leaving them unheard). Replies that changed little are not."
)
# the first line marks the request for mapo.testing.JudgeServer, which answers it offline
HINDSIGHT_HEADER = "Conversation, each listener reply numbered:"
HINDSIGHT_REQUEST = (
    HINDSIGHT_HEADER + "\n{conversation}\n\n"
    'Reply with only a JSON object of this shape: {{"turns": [{{"turn": <reply number>, "worth_learning": '
    '<true or false>}}, ...]}} with one entry for each of the {n} listener replies.'
)


def one_line(text: str) -> str:
    return " ".join(text.split())


def hindsight_messages(trajectory: Trajectory) -> list[dict[str, str]]:
    """The request for one dialogue: its messages in order, the listener's replies numbered from 1."""
    lines = []
    for turn in trajectory.turns:
        lines.append(f"Person: {one_line(turn.user_message)}")
        lines.append(f"Listener [{turn.index}]: {one_line(seen_reply(turn))}")
    request = HINDSIGHT_REQUEST.format(conversation="\n".join(lines), n=len(trajectory.turns))
    return [{"role": "system", "content": HINDSIGHT_SYSTEM}, {"role": "user", "content": request}]


class TurnVerdict(BaseModel):
    turn: int
    worth_learning: bool


class HindsightOutput(BaseModel):
    turns: list[TurnVerdict]

    @model_validator(mode="after")
    def one_entry_per_reply(self, info: ValidationInfo) -> HindsightOutput:
        n = (info.context or {}).get("n")
        if n is not None and sorted(v.turn for v in self.turns) != list(range(1, n + 1)):
            raise ValueError(f"give exactly one entry for each listener reply 1..{n}")
        return self


class LLMHindsight:
    """Asks a chat model which turns of each dialogue are pivotal; `workers` dialogues in flight."""

    def __init__(self, client: ChatClient, json_format: str | None = None, workers: int = 8) -> None:
        self.client = client
        self.json_format = json_format
        self.workers = workers

    def judge(self, trajectory: Trajectory) -> list[bool] | None:
        """Per turn: worth learning from; None when the model's replies were unusable."""
        if not trajectory.turns:
            return []
        reply = request_json(
            self.client,
            hindsight_messages(trajectory),
            HindsightOutput,
            context={"n": len(trajectory.turns)},
            json_format=self.json_format,
        )
        if reply.value is None:
            return None
        verdicts = {v.turn: v.worth_learning for v in reply.value.turns}
        return [verdicts[turn.index] for turn in trajectory.turns]

    def pivotal(self, groups: Sequence[Group]) -> tuple[list[list[list[bool]]], dict[str, float]]:
        """[group][trajectory][turn] verdicts (a dialogue without usable verdicts keeps every turn)."""
        trajectories = [t for g in groups for t in g.trajectories]
        with ThreadPoolExecutor(max_workers=max(1, min(self.workers, len(trajectories)))) as pool:
            verdicts = list(pool.map(self.judge, trajectories))
        fallbacks = sum(v is None for v in verdicts)
        flat = iter(v if v is not None else [True] * len(t.turns) for v, t in zip(verdicts, trajectories))
        return [[next(flat) for _ in g.trajectories] for g in groups], {"hindsight_fallbacks": float(fallbacks)}


def make_llm_hindsight(backend: Mapping[str, Any]) -> LLMHindsight:
    """From `rapo.hindsight_backend`: a ChatBackendConfig mapping (base_url, model, ...; json_format and
    transport optional, mapo.backends.transports)."""
    from mapo.backends.transports import chat_client

    options = dict(backend)
    json_format = options.pop("json_format", None)
    client = chat_client(options)
    config = getattr(client, "config", None)  # an OpenAI-compatible backend says how many requests it takes at once
    return LLMHindsight(client, json_format, workers=getattr(config, "concurrency", 1))
