"""`LLMActor`: the persona played by an LLM, in short turns in their own voice, following the
director, never repeating a line of its own."""

from __future__ import annotations

import logging
import re
from typing import TYPE_CHECKING

from mapo.backends.json_output import ChatClient
from mapo.envs.empathy.llm.common import StoryRole, effect, normalise, sampling
from mapo.envs.empathy.llm.prompts import (
    ACTOR_INSTRUCTIONS,
    ACTOR_NARRATION_RETRY,
    ACTOR_RETRY,
    ACTOR_SYSTEM,
    FALLBACK_LINES,
    STEER_HINTS,
)
from mapo.envs.empathy.narration import stage_direction
from mapo.envs.empathy.roles import Direction
from mapo.text import sentences

if TYPE_CHECKING:
    from mapo.envs.dynamics import NeedState
    from mapo.envs.empathy.cards import ScenarioCard

log = logging.getLogger(__name__)


_LABEL = re.compile(r"^\s*(?:\*\*)?[A-Z][\w .'-]{0,40}(?:\*\*)?:\s+")
_OTHER_SPEAKER = re.compile(r"\n\s*(?:assistant|support|therapist|counsell?or|ai)\s*:", re.IGNORECASE)


def _clean_reply(text: str, name: str, max_words: int) -> str:
    """The persona's message alone (no label, quotes, or continuation into the other speaker's
    turn), kept short: whole sentences up to `max_words`, without a sentence cut off at the end."""
    text = _OTHER_SPEAKER.split(text, maxsplit=1)[0].strip()
    first = name.split()[0]
    label = _LABEL.match(text)
    if label and label.group(0).strip(" *:").lower() in {"user", "me", name.lower(), first.lower()}:
        text = text[label.end() :]
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'":
        text = text[1:-1].strip()
    kept: list[str] = []
    for sentence in sentences(text):
        if kept and sum(len(s.split()) for s in kept) + len(sentence.split()) > max_words:
            break
        kept.append(sentence)
    if len(kept) > 1 and not kept[-1].endswith((".", "!", "?", "…", '"', "'", ")")):
        kept.pop()  # cut off mid-sentence (max_tokens)
    return " ".join(kept)


def _problem(text: str, seen: set[str]) -> str | None:
    """Why a persona's message cannot be used: empty, a repeat of one of its lines, or narration
    (its stage directions or the card's notes said aloud, `stage_direction`); None when it can."""
    if not normalise(text):
        return "empty"
    if normalise(text) in seen:
        return "repeat"
    return "narration" if stage_direction(text) else None


class LLMActor(StoryRole):
    """Plays the persona with an LLM: short turns in their voice, following the director, never repeating itself.

    `own_lines`: how many of its latest lines it is shown as lines not to repeat;
    `history_messages`: how many recent messages it sees (it keeps its own story in
    the prompt, so a long dialogue does not overflow a small model's context);
    `max_words`: replies are cut to whole sentences within this many words.
    """

    COUNTERS = StoryRole.COUNTERS + ("repeat_retries", "empty_retries", "narration_retries")

    def __init__(
        self,
        backend: ChatClient,
        *,
        temperature: float = 0.8,
        max_tokens: int = 120,
        own_lines: int = 6,
        history_messages: int = 16,
        max_words: int = 60,
    ) -> None:
        super().__init__(backend, temperature, max_tokens)
        self.own_lines = own_lines
        self.history_messages = history_messages
        self.max_words = max_words

    def opening(self, card: ScenarioCard) -> str:
        return card.opening_line

    def reply(
        self, card: ScenarioCard, history: list[dict[str, str]], state: NeedState, direction: Direction
    ) -> str:
        self.counters["calls"] += 1
        said = [m["content"] for m in history if m["role"] == "user"] or [card.opening_line]
        messages = self._messages(card, history, state, direction, said)
        # what this turn reveals counts as told from the next turn on
        if direction.stage is not None and direction.stage not in self.revealed_stages:
            self.revealed_stages.append(direction.stage)
        if direction.memory is not None and direction.memory not in self.revealed_memories:
            self.revealed_memories.append(direction.memory)
        overrides = sampling(self.temperature, self.max_tokens, self._seed, state.turn)
        seen = {normalise(line) for line in said}
        for attempt in range(2):
            text = _clean_reply(self.backend.chat(messages, **overrides), card.persona.name, self.max_words)
            problem = _problem(text, seen)
            if problem is None:
                return text
            if attempt == 0:
                self.counters[f"{problem}_retries"] += 1
                retry = {"repeat": ACTOR_RETRY, "narration": ACTOR_NARRATION_RETRY}.get(
                    problem, "That message was empty. Write your next message."
                )
                messages = messages + [{"role": "assistant", "content": text}, {"role": "user", "content": retry}]
                if overrides.get("seed") is not None:
                    overrides["seed"] += 7919  # a different sample, still reproducible
        fallback = next(line for line in FALLBACK_LINES + (f"I'm still here, just thinking ({len(said)}).",)
                        if normalise(line) not in seen)
        self.counters["fallbacks"] += 1
        log.warning(
            "LLM actor: %s reply for %s turn %d even after asking again; using a fixed line instead: %r",
            problem,
            card.id,
            state.turn,
            fallback,
        )
        return fallback

    def _messages(
        self,
        card: ScenarioCard,
        history: list[dict[str, str]],
        state: NeedState,
        direction: Direction,
        said: list[str],
    ) -> list[dict[str, str]]:
        persona = card.persona
        story = [f"Part of your story you have already told: {card.stages[i].content}" for i in self.revealed_stages]
        story += [f"A memory you have shared: {card.memories[i]}" for i in self.revealed_memories]
        instruction = self._instruction(card, direction)
        system = ACTOR_SYSTEM.format(
            name=persona.name,
            age=persona.age,
            occupation=persona.occupation,
            traits="; ".join(persona.traits),
            style=persona.speaking_style,
            situation=card.situation,
            story="\n".join(story),
            landing=effect(state),
            instruction=instruction,
            own_lines="\n".join(f"- {line}" for line in said[-self.own_lines :]),
        )
        # From the actor's side the policy is the one it answers: swap the roles.
        swapped = {"user": "assistant", "assistant": "user"}
        recent = history[-self.history_messages :]
        turns = [{"role": swapped[m["role"]], "content": m["content"]} for m in recent if m["role"] in swapped]
        if not turns or turns[-1]["role"] != "user":
            turns.append({"role": "user", "content": "(The assistant is waiting for you to go on.)"})
        return [{"role": "system", "content": system}, *turns]

    def _instruction(self, card: ScenarioCard, direction: Direction) -> str:
        action = direction.action
        if action == "reveal_stage" and direction.stage is not None:
            text = ACTOR_INSTRUCTIONS[action].format(stage=card.stages[direction.stage].content)
        elif action == "reveal_memory" and direction.memory is not None:
            text = ACTOR_INSTRUCTIONS[action].format(memory=card.memories[direction.memory])
        elif action == "steer":
            text = ACTOR_INSTRUCTIONS[action].format(axis=STEER_HINTS.get(direction.focus_axis or "", "what matters most"))
        elif action == "turning_point":
            text = ACTOR_INSTRUCTIONS[action].format(turn=direction.note or card.growth_arc)
        else:
            text = ACTOR_INSTRUCTIONS.get(action, ACTOR_INSTRUCTIONS["continue"])
        if direction.note and action != "turning_point":
            text += f" Guidance: {direction.note}"
        return text
