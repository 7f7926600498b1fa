"""What the LLM roles share: how a card, the need state and the dialogue are written into a prompt,
the per-request sampling settings, and the roles' base classes (client, settings, seed, counters)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from mapo.backends.json_output import ChatClient
from mapo.core.types import AXES
from mapo.envs.empathy.llm.prompts import AXIS_NAMES

if TYPE_CHECKING:
    from mapo.envs.dynamics import NeedState
    from mapo.envs.empathy.cards import ScenarioCard
    from mapo.envs.empathy.offline.features import JudgeContext


def card_profile(card: ScenarioCard, hidden: bool) -> str:
    p = card.persona
    lines = [
        f"Name: {p.name}, {p.age}, {p.occupation}",
        f"Traits: {'; '.join(p.traits)}",
        f"Speaking style: {p.speaking_style}",
        f"Situation: {card.situation}",
    ]
    if hidden:
        lines += [f"Story stage {i + 1}, {s.title}: {s.content}" for i, s in enumerate(card.stages)]
        lines += [f"Memory {i + 1}: {m}" for i, m in enumerate(card.memories)]
        lines += [
            f"How they could grow: {card.growth_arc}",
            "What would help them:",
            *(f"- C, understanding: {c}" for c in card.cues.understanding),
            *(f"- A, validation: {c}" for c in card.cues.validation),
            *(f"- P, empowerment: {c}" for c in card.cues.empowerment),
        ]
    return "\n".join(lines)


def context_profile(context: JudgeContext) -> str:
    """The judge's profile of a person known only by a `JudgeContext` (a labelled exemplar): the
    situation, what is true of them but not said yet, and the cues, in `card_profile`'s layout."""
    from mapo.envs.empathy.offline.features import CUE_FIELDS

    lines = [f"Situation: {context.situation}"]
    lines += [f"Not said yet: {fact}" for fact in context.background]
    lines.append("What would help them:")
    lines += [f"- {axis}, {CUE_FIELDS[axis]}: {cue}" for axis in AXES for cue in context.cues.get(axis, [])]
    return "\n".join(lines)


def standing(state: NeedState) -> str:
    parts = [f"{AXIS_NAMES[axis]}: {value:.0f} (start {start:.0f})" for axis, value, start in zip(AXES, state.p, state.p0)]
    return "; ".join(parts) + f". Deepest need now: {state.deepest_axis()}."


def effect(state: NeedState) -> str:
    if not state.delta_e:
        return "none yet (the conversation has just begun)"
    last = state.delta_e[-1]
    if last > 0:
        return "it helped"
    if last < 0:
        return "it made things worse"
    return "it changed nothing"


def transcript(history: list[dict[str, str]], name: str) -> str:
    if not history:
        return "(nothing yet)"
    label = {"user": name, "assistant": "Assistant"}
    return "\n".join(f"{label.get(m['role'], m['role'])}: {m['content']}" for m in history)


def history_without(history: list[dict[str, str]], response: str) -> list[dict[str, str]]:
    """The dialogue before `response` (the environment may or may not have appended it)."""
    if history and history[-1].get("role") == "assistant" and history[-1].get("content") == response:
        return history[:-1]
    return history


def normalise(text: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"[^\w\s']", " ", text.lower())).strip()


class LLMRole:
    """What the three LLM roles share: the chat client, sampling settings, the episode's seed, and
    per-role counters the environment and the run logs read."""

    COUNTERS: tuple[str, ...] = ("calls", "repaired", "fallbacks")

    def __init__(self, backend: ChatClient, temperature: float, max_tokens: int) -> None:
        self.counters = dict.fromkeys(self.COUNTERS, 0)
        self.backend = backend
        self.temperature = temperature
        self.max_tokens = max_tokens
        self._seed: int | None = None

    def reset(self, card: ScenarioCard, seed: int | None = None) -> None:
        self._seed = seed


class StoryRole(LLMRole):
    """An LLM role that tracks which story stages and memories have been revealed this episode."""

    def __init__(self, backend: ChatClient, temperature: float, max_tokens: int) -> None:
        super().__init__(backend, temperature, max_tokens)
        self.revealed_stages: list[int] = []
        self.revealed_memories: list[int] = []

    def reset(self, card: ScenarioCard, seed: int | None = None) -> None:
        super().reset(card, seed)
        self.revealed_stages = []
        self.revealed_memories = []


def sampling(temperature: float, max_tokens: int, seed: int | None, turn: int) -> dict[str, Any]:
    """Per-request sampling settings; a per-turn seed keeps an episode reproducible on servers that honour it."""
    out: dict[str, Any] = {"temperature": temperature, "max_tokens": max_tokens}
    if seed is not None:
        out["seed"] = int(seed) * 1000 + turn
    return out
