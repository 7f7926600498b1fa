"""The EMPA-style empathy environment: a scenario card, a need vector, three roles.

``EmpathyEnvironment`` composes any judge, actor and director that implement the
protocols of ``roles.py``, chosen per role:

    EmpathyEnvironment()                                   # all three offline
    EmpathyEnvironment(judge="llm", judge_options={"base_url": ..., "model": ...})
    EmpathyEnvironment(roles={"judge": {"kind": "llm", "model": ...}, "director": {"kind": "offline", "min_turns": 8}})
    EmpathyEnvironment(judge=MyJudge(), max_turns=20, success_from_turn=8)

A role is an instance, a kind name ("offline", "llm", anything registered with
``roles.register_role`` or under an entry point, or "package.module:Factory") or a mapping
{"kind": name, **options}; see ``roles.py``. Dynamics constants come as a
``DynamicsConfig``, a mapping (``dynamics=``), or as its fields directly
(``max_turns=20``).

One step: the judge scores the reply (six levels) -> ``levels_to_vector`` gives v_t ->
``NeedState.step`` moves P_t and checks success / failure / timeout -> if the dialogue
goes on, the director picks the user's next move -> the actor says it. The dialogue
ends on the dynamics' status, or when the director ends it (allowed only from
``min_turns``, by default the dynamics' ``success_from_turn``); the actor then says a
closing line. ``StepResult.info`` carries the levels, evidence, P_t, D_t, Delta E,
alignments, the direction, the done reason and the fallback flags of the turn.
Deterministic for a given seed when the roles are (the offline ones are).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, fields
from typing import Any

from mapo.core.types import AXES, Scenario
from mapo.envs.base import Environment, StepResult, register_environment
from mapo.envs.dynamics import (
    DynamicsConfig,
    NeedState,
    StepInfo,
    epmq,
    initial_vector,
    levels_to_vector,
)
from mapo.envs.empathy.cards import ScenarioCard, card_scenarios
from mapo.envs.empathy.roles import ROLE_NAMES, Direction, Judgement, make_role

# The policy's system prompt unless the config gives one (rollout.system_prompt).
LISTENER_PROMPT = (
    "You are a caring, perceptive listener talking with someone who is going through a hard time. "
    "Reply in two or three sentences: show you understand their situation, acknowledge their feelings, "
    "and help them find their own next step."
)
DYNAMICS_FIELDS = tuple(f.name for f in fields(DynamicsConfig))
# What a training run may have shortened or loosened; evaluation uses EMPA's constants instead.
TRAINING_ONLY_OPTIONS = ("dynamics", "min_turns", *DYNAMICS_FIELDS)


def _dynamics(config: DynamicsConfig | Mapping[str, Any] | None, overrides: Mapping[str, Any]) -> DynamicsConfig:
    unknown = sorted(set(overrides) - set(DYNAMICS_FIELDS))
    if unknown:
        raise ValueError(
            f"empathy environment: unknown option(s) {', '.join(unknown)}; expected judge, actor, director, "
            f"<role>_options, roles, dynamics, min_turns or a dynamics field ({', '.join(DYNAMICS_FIELDS)})"
        )
    if config is None:
        base: dict[str, Any] = {}
    elif isinstance(config, DynamicsConfig):
        base = asdict(config)
    elif isinstance(config, Mapping):
        bad = sorted(set(config) - set(DYNAMICS_FIELDS))
        if bad:
            raise ValueError(f"empathy environment: dynamics: unknown key(s) {', '.join(bad)}; expected {', '.join(DYNAMICS_FIELDS)}")
        base = dict(config)
    else:
        raise ValueError(f"empathy environment: dynamics must be a DynamicsConfig or a mapping, got {type(config).__name__}")
    return DynamicsConfig(**{**base, **overrides})


@register_environment("empathy")
class EmpathyEnvironment(Environment):
    """One dialogue of the empathy environment (see the module docstring)."""

    def __init__(
        self,
        judge: Any = "offline",
        actor: Any = "offline",
        director: Any = "offline",
        *,
        judge_options: Mapping[str, Any] | None = None,
        actor_options: Mapping[str, Any] | None = None,
        director_options: Mapping[str, Any] | None = None,
        roles: Mapping[str, Any] | None = None,
        dynamics: DynamicsConfig | Mapping[str, Any] | None = None,
        min_turns: int | None = None,
        **dynamics_fields: Any,
    ) -> None:
        specs = {"judge": judge, "actor": actor, "director": director}
        options = {"judge": judge_options, "actor": actor_options, "director": director_options}
        for role, spec in (roles or {}).items():
            if role not in ROLE_NAMES:
                raise ValueError(f"empathy environment: roles: unknown role {role!r}; expected {', '.join(ROLE_NAMES)}")
            if specs[role] != "offline" or options[role]:
                raise ValueError(f"empathy environment: the {role} is given both in roles and as {role}=/{role}_options")
            specs[role] = spec
        self.judge = make_role("judge", specs["judge"], options["judge"])
        self.actor = make_role("actor", specs["actor"], options["actor"])
        self.director = make_role("director", specs["director"], options["director"])
        self.config = _dynamics(dynamics, dynamics_fields)
        if min_turns is not None and (isinstance(min_turns, bool) or not isinstance(min_turns, int) or min_turns < 1):
            raise ValueError(f"empathy environment: min_turns must be an integer >= 1, got {min_turns!r}")
        self.min_turns = min_turns if min_turns is not None else self.config.success_from_turn
        self.card: ScenarioCard | None = None
        self.state: NeedState | None = None
        self.history: list[dict[str, str]] = []
        self.done_reason: str | None = None
        self.fallbacks = {"judge": 0, "director": 0}

    # -- the policy's prompt, how scenarios load, how evaluation adapts the options (mapo.envs.base)

    system_prompt = LISTENER_PROMPT
    load_scenarios = staticmethod(card_scenarios)

    @staticmethod
    def evaluation_options(training_options: dict[str, Any]) -> dict[str, Any]:
        """A training run's options without its ending rules (evaluation applies EMPA's)."""
        return {k: v for k, v in training_options.items() if k not in TRAINING_ONLY_OPTIONS}

    @staticmethod
    def with_turn_cap(options: dict[str, Any], max_turns: int) -> dict[str, Any]:
        """The evaluation's turn cap as the dynamics' timeout, unless the options set one."""
        dynamics = options.get("dynamics")
        if "max_turns" in options or (isinstance(dynamics, dict) and "max_turns" in dynamics):
            return options
        return {**options, "max_turns": max_turns}

    # -- the Environment protocol ----------------------------------------------------------

    def reset(self, scenario: Scenario, seed: int | None = None) -> str:
        """Start a dialogue on `scenario` (its card is validated); returns the user's opening line."""
        if not scenario.card:
            raise ValueError(
                f"empathy environment: scenario {scenario.id!r} has no scenario card; load one with "
                "mapo.envs.empathy.cards.load_scenarios or bundled_scenarios"
            )
        try:
            self.card = ScenarioCard.model_validate(scenario.card)
        except ValueError as exc:
            raise ValueError(f"empathy environment: scenario {scenario.id!r}: invalid card: {exc}") from None
        p0 = scenario.initial_state if scenario.initial_state else initial_vector(self.card.indicators.model_dump())
        if len(p0) != len(AXES):
            raise ValueError(f"empathy environment: scenario {scenario.id!r}: initial state {p0} is not (C, A, P)")
        self.state = NeedState(p0, self.config)
        for role in (self.judge, self.actor, self.director):
            role.reset(self.card, seed)
        opening = self.actor.opening(self.card)
        self.history = [{"role": "user", "content": opening}]
        self.done_reason = None
        self.fallbacks = {"judge": 0, "director": 0}
        return opening

    def score_reply(self, history: list[dict[str, str]], response: str) -> tuple[Judgement, tuple[float, ...], StepInfo]:
        """(judgement, action, dynamics step) of `response` after `history`: the judge's levels move the
        need state. `step` runs it on the live dialogue; a replay of a kept transcript on its own history."""
        assert self.card is not None and self.state is not None
        judgement = self.judge.judge(self.card, history, response, self.state)
        if not isinstance(judgement, Judgement):
            raise TypeError(f"empathy environment: the judge returned {type(judgement).__name__}, not a Judgement")
        try:
            action = levels_to_vector(judgement.levels)
        except ValueError as exc:
            raise ValueError(f"empathy environment: the judge's levels are invalid: {exc}") from None
        return judgement, action, self.state.step(action, judgement.levels)

    def step(self, response: str) -> StepResult:
        """Score the policy's reply, move the need vector, and return the user's next message."""
        if self.card is None or self.state is None:
            raise RuntimeError("empathy environment: call reset(scenario) before step()")
        if self.done_reason is not None:
            raise RuntimeError(f"empathy environment: the dialogue already ended ({self.done_reason}); call reset()")
        if not isinstance(response, str):
            raise TypeError(f"empathy environment: the response must be a string, got {type(response).__name__}")
        card, state = self.card, self.state

        judgement, action, step = self.score_reply(list(self.history), response)
        self.history.append({"role": "assistant", "content": response})
        self.fallbacks["judge"] += int(judgement.fallback)

        direction: Direction
        early_end_blocked = False
        if step.status is not None:
            self.done_reason = step.status
            direction = Direction("end", focus_axis=state.deepest_axis(), note=f"dynamics: {step.status}")
        else:
            direction = self.director.direct(card, list(self.history), state)
            self.fallbacks["director"] += int(direction.fallback)
            if direction.action == "end":
                if state.turn >= self.min_turns:
                    self.done_reason = "director_end"
                else:
                    early_end_blocked = True
                    direction = Direction("continue", focus_axis=direction.focus_axis, note=direction.note)
        user_message = self.actor.reply(card, list(self.history), state, direction)
        self.history.append({"role": "user", "content": user_message})

        info: dict[str, Any] = {
            "turn": step.turn,
            "levels": dict(judgement.levels),
            "evidence": dict(judgement.evidence),
            "state": step.state,
            "distance": step.distance,
            "delta_e": step.delta_e,
            "energy": state.energy,
            "projection": step.projection,
            "alignment": step.alignment_target,
            "alignment_deficit": step.alignment_deficit,
            "alignment_by_axis": dict(zip(AXES, step.alignment_target_by_axis)),
            "alignment_deficit_by_axis": dict(zip(AXES, step.alignment_deficit_by_axis)),
            "status": step.status,
            "done_reason": self.done_reason,
            "judge_fallback": judgement.fallback,
            "director_fallback": direction.fallback,
            "judge_repaired": bool(judgement.info.get("repaired", False)),
            "director_repaired": direction.repaired,
            "early_end_blocked": early_end_blocked,
            "directive": asdict(direction),
        }
        return StepResult(user_message, tuple(float(x) for x in action), self.done_reason is not None, info)

    def record(self) -> dict[str, Any]:
        """The dialogue's dynamics record (what `mapo.envs.dynamics.epmq` takes) and its transcript."""
        if self.state is None or self.card is None:
            raise RuntimeError("empathy environment: no dialogue yet; call reset(scenario) first")
        return {
            **self.state.record(),
            "scenario_id": self.card.id,
            "done_reason": self.done_reason,
            "fallbacks": dict(self.fallbacks),
            "history": list(self.history),
        }

    def episode_metrics(self) -> dict[str, float]:
        """The dialogue's EPM-Q (reported per dialogue by the verl integration)."""
        return {"epmq": float(epmq(self.record())["epmq"])}
