"""`LLMDirector`: the user's next move (reveal a story stage or a memory, steer, a turning point,
keep going, end) from an LLM as JSON; the story order and the minimum length are enforced here."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, ValidationInfo, model_validator

from mapo.backends.json_output import ChatClient, request_json, response_format
from mapo.envs.empathy.llm.common import StoryRole, card_profile, effect, sampling, standing, transcript
from mapo.envs.empathy.llm.prompts import DIRECTOR_SYSTEM, DIRECTOR_USER
from mapo.envs.empathy.roles import Direction, DirectorAction

if TYPE_CHECKING:
    from mapo.envs.dynamics import NeedState
    from mapo.envs.empathy.cards import ScenarioCard

log = logging.getLogger(__name__)


class DirectorOutput(BaseModel):
    model_config = ConfigDict(extra="ignore")
    action: DirectorAction
    stage: int | None = None  # 1-based as listed; informational, stages are revealed in order
    memory: int | None = None  # 1-based as listed
    focus_axis: Literal["C", "A", "P"] | None = None
    note: str = ""

    @model_validator(mode="after")
    def _memory_exists(self, info: ValidationInfo) -> DirectorOutput:
        count = (info.context or {}).get("memories")
        if self.memory is not None and count is not None and not 1 <= self.memory <= count:
            raise ValueError(f"memory must be a number from 1 to {count} as listed, or null; got {self.memory}")
        return self


class LLMDirector(StoryRole):
    """Chooses the user's next move with an LLM; the story order and the minimum length are enforced here.

    `min_turns`: the earliest turn after which "end" is allowed; by default the
    state's `success_from_turn` (the turn from which the dialogue can succeed).
    """

    COUNTERS = StoryRole.COUNTERS + ("early_end_blocked",)

    def __init__(
        self,
        backend: ChatClient,
        *,
        temperature: float = 0.3,
        max_tokens: int = 200,
        min_turns: int | None = None,
        json_format: str | None = None,
    ) -> None:
        super().__init__(backend, temperature, max_tokens)
        if min_turns is not None and min_turns < 1:
            raise ValueError(f"LLMDirector: min_turns must be >= 1, got {min_turns}")
        response_format(DirectorOutput, json_format)
        self.json_format = json_format
        self.min_turns = min_turns

    def _min_turns(self, state: NeedState) -> int:
        return self.min_turns if self.min_turns is not None else state.config.success_from_turn

    def direct(self, card: ScenarioCard, history: list[dict[str, str]], state: NeedState) -> Direction:
        self.counters["calls"] += 1
        min_turns = self._min_turns(state)
        told = " (already revealed)"
        stages = "\n".join(
            f"{i + 1}. {s.title}: {s.content}{told if i in self.revealed_stages else ''}" for i, s in enumerate(card.stages)
        )
        memories = "\n".join(
            f"{i + 1}. {m}{told if i in self.revealed_memories else ''}" for i, m in enumerate(card.memories)
        )
        if state.turn < min_turns:
            ending_rule = f'Do not choose "end": the conversation must run at least {min_turns} turns.'
        else:
            ending_rule = '"end" is allowed now, if the conversation has run its course.'
        messages = [
            {"role": "system", "content": DIRECTOR_SYSTEM},
            {
                "role": "user",
                "content": DIRECTOR_USER.format(
                    profile=card_profile(card, hidden=False) + f"\nHow they could grow: {card.growth_arc}",
                    stages=stages,
                    memories=memories,
                    turn=state.turn,
                    standing=standing(state),
                    effect=effect(state),
                    ending_rule=ending_rule,
                    transcript=transcript(history, card.persona.name),
                ),
            },
        ]
        context = {"memories": len(card.memories)}
        overrides = sampling(self.temperature, self.max_tokens, self._seed, state.turn)
        reply = request_json(
            self.backend, messages, DirectorOutput, context=context, json_format=self.json_format, **overrides
        )
        if reply.fallback:
            self.counters["fallbacks"] += 1
            log.warning(
                "LLM director: no valid direction for %s after turn %d after one repair; continuing. Reason: %s",
                card.id,
                state.turn,
                reply.errors[-1],
            )
            return Direction(action="continue", focus_axis=state.deepest_axis(), fallback=True)
        self.counters["repaired"] += reply.repaired
        direction = self._enforce(reply.value, card, state, min_turns)
        direction.repaired = reply.repaired
        return direction

    def _enforce(self, out: DirectorOutput, card: ScenarioCard, state: NeedState, min_turns: int) -> Direction:
        """Turn the model's choice into a legal Direction: story in order, no early end."""
        action, stage, memory = out.action, None, None
        if action == "end" and state.turn < min_turns:
            self.counters["early_end_blocked"] += 1
            log.info("LLM director: 'end' at turn %d is before the minimum %d turns; continuing", state.turn, min_turns)
            action = "continue"
        if action == "reveal_stage":
            remaining = [i for i in range(len(card.stages)) if i not in self.revealed_stages]
            if remaining:
                stage = remaining[0]  # the next one in order, whatever number the model gave
                self.revealed_stages.append(stage)
            else:
                action = "continue"
        elif action == "reveal_memory":
            remaining = [i for i in range(len(card.memories)) if i not in self.revealed_memories]
            chosen = out.memory - 1 if out.memory is not None else None
            if remaining:
                memory = chosen if chosen in remaining else remaining[0]
                self.revealed_memories.append(memory)
            else:
                action = "continue"
        focus = out.focus_axis or state.deepest_axis()
        return Direction(action=action, stage=stage, memory=memory, focus_axis=focus, note=out.note.strip())
