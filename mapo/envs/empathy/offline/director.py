"""The rule director: what the simulated user does next, from the card and the need state.

After each policy turn t (``state.turn == t``) it picks one action for the user's next
message, in this order:

1. ``end`` once the dynamics report success, failure or timeout, and only when at least
   ``min_turns`` turns were taken (default: the state's ``success_from_turn``).
1b. ``confused`` when the policy's last reply is degenerate (`mapo.degeneracy`: a loop,
   a fragment cut mid-sentence, word salad, role swap, invented people, keyword
   stuffing): a person who cannot follow says so and reveals nothing more.
2. ``turning_point`` once per dialogue, after ``turning_run`` consecutive turns with
   Delta E > 0 and E_total >= ``turning_energy`` x D_0: the user's view starts to shift.
3. ``steer`` after a regression (last Delta E < 0), or after ``stall_run`` turns without
   progress: the user brings the talk back to the deepest deficit axis.
4. ``reveal_stage``: the next story stage, the first at the user's message number
   ``first_stage`` (turn ``first_stage - 1``), then every ``stage_every`` turns, or every
   ``stage_every_on_progress`` turns while the last turn made progress. Never right
   after a regression (people hold back from someone who just missed them).
5. ``reveal_memory``: a memory, once two stages are out, at most every ``memory_every``
   turns, only after progress (memories come out when the user feels heard).
6. ``continue``.

Every direction carries ``focus_axis = state.deepest_axis()``. No randomness: the
schedule depends only on the state, so an episode is reproducible.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mapo import degeneracy
from mapo.envs.empathy.roles import Direction

if TYPE_CHECKING:
    from mapo.envs.dynamics import NeedState
    from mapo.envs.empathy.cards import ScenarioCard


class RuleDirector:
    def __init__(
        self,
        *,
        min_turns: int | None = None,
        first_stage: int = 2,
        stage_every: int = 4,
        stage_every_on_progress: int = 3,
        memory_every: int = 5,
        stall_run: int = 2,
        turning_run: int = 3,
        turning_energy: float = 0.5,
    ) -> None:
        for name, value in (
            ("first_stage", first_stage),
            ("stage_every", stage_every),
            ("stage_every_on_progress", stage_every_on_progress),
            ("memory_every", memory_every),
            ("stall_run", stall_run),
            ("turning_run", turning_run),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"RuleDirector: {name} must be an integer >= 1, got {value!r}")
        if min_turns is not None and (isinstance(min_turns, bool) or not isinstance(min_turns, int) or min_turns < 1):
            raise ValueError(f"RuleDirector: min_turns must be an integer >= 1 or None, got {min_turns!r}")
        if not 0 <= turning_energy:
            raise ValueError(f"RuleDirector: turning_energy must be >= 0, got {turning_energy!r}")
        self.min_turns = min_turns
        self.first_stage = first_stage
        self.stage_every = stage_every
        self.stage_every_on_progress = stage_every_on_progress
        self.memory_every = memory_every
        self.stall_run = stall_run
        self.turning_run = turning_run
        self.turning_energy = turning_energy
        self.revealed_stages: list[int] = []
        self.revealed_memories: list[int] = []
        self._last_stage_turn = 0
        self._last_memory_turn = 0
        self._turning_point_done = False

    def reset(self, card: ScenarioCard, seed: int | None = None) -> None:
        self.revealed_stages, self.revealed_memories = [], []
        self._last_stage_turn = self._last_memory_turn = 0
        self._turning_point_done = False

    def minimum_turns(self, state: NeedState) -> int:
        return self.min_turns if self.min_turns is not None else state.config.success_from_turn

    def direct(self, card: ScenarioCard, history: list[dict[str, str]], state: NeedState) -> Direction:
        turn, focus = state.turn, state.deepest_axis()
        recent = state.delta_e[-max(self.stall_run, self.turning_run) :]
        progress = bool(state.delta_e) and state.delta_e[-1] > 0
        regression = bool(state.delta_e) and state.delta_e[-1] < 0

        if state.status() is not None and turn >= self.minimum_turns(state):
            return Direction("end", focus_axis=focus, note=f"the dialogue ended: {state.status()}")
        if history and history[-1].get("role") == "assistant":
            users = [m["content"] for m in history if m.get("role") == "user"]
            found = degeneracy.find(history[-1]["content"], users, [card.situation], card.background())
            if found:
                return Direction("confused", focus_axis=focus, note=f"{found[0].family}: {found[0].evidence}")
        run = recent[-self.turning_run :]
        if (
            not self._turning_point_done
            and len(run) == self.turning_run
            and all(x > 0 for x in run)
            and state.energy >= self.turning_energy * state.d0
        ):
            self._turning_point_done = True
            return Direction("turning_point", focus_axis=focus, note="sustained progress: the view starts to shift")
        stalled = len(recent) >= self.stall_run and all(x <= 0 for x in recent[-self.stall_run :])
        if regression or stalled:
            return Direction("steer", focus_axis=focus, note="back to the deepest need" + (" after a miss" if regression else ""))
        next_stage = len(self.revealed_stages)
        if next_stage < len(card.stages):
            if next_stage == 0:
                due = turn >= self.first_stage - 1
            else:
                gap = self.stage_every_on_progress if progress else self.stage_every
                due = turn - self._last_stage_turn >= gap
            if due:
                self.revealed_stages.append(next_stage)
                self._last_stage_turn = turn
                return Direction("reveal_stage", stage=next_stage, focus_axis=focus, note=card.stages[next_stage].title)
        next_memory = len(self.revealed_memories)
        if (
            next_memory < len(card.memories)
            and len(self.revealed_stages) >= 2
            and progress
            and turn - self._last_memory_turn >= self.memory_every
        ):
            self.revealed_memories.append(next_memory)
            self._last_memory_turn = turn
            return Direction("reveal_memory", memory=next_memory, focus_axis=focus)
        return Direction("continue", focus_axis=focus)
