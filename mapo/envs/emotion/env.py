"""The K = 1 emotion-score environment (SAGE / RLVER style).

The simulated user has one number, their emotion e in [0, 100]. It starts from the
scenario's 1-D `initial_state` (e_0 - 100,), which `load_personas` always sets (the
persona's emotion, or an integer in 30-40 drawn from its id). A scenario without one
(an empathy card, say) starts at an integer drawn from `start_range` with its id and
`start_seed` (`seeded_emotion`), the same for every sample of the scenario; the
per-dialogue `seed` only varies the simulated user's wording. `env.initial_state`
gives the start after `reset`. After every policy reply the judge gives a change; e
moves by it (clipped to [0, 100]).

The need "vector" has one component: state = (e - 100,), so D_t = 100 - e_t and the
action is v_t = (applied change,), with P_t = P_{t-1} + v_t exactly as in the EMPA
environment: IDR, ADR and outcome rewards work unchanged.

The dialogue ends with
- "success" when e reaches `success_at` (100),
- "failure" when e falls below `failure_below` (10),
- "timeout" after `max_turns` replies.

Roles: `judge="offline"` (sentence-embedding scorer) or `"llm"` (with `judge_options`
for the backend: base_url, model, ...), or any object with `score(persona, history,
response) -> EmotionJudgement`; the user is `PersonaActor` (deterministic for a seed)
unless another actor object is given. See `judges.py` and `user.py`.

Scenarios come from `persona.load_personas` (SAGE/RLVER persona
lines) or from empathy scenario cards (persona, situation and growth arc are used).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mapo.core.types import Scenario
from mapo.envs.base import Environment, StepResult, register_environment
from mapo.envs.emotion.judges import EmotionJudge, LLMEmotionJudge, OfflineEmotionJudge
from mapo.envs.emotion.persona import START_RANGE, Persona, load_personas, seeded_emotion
from mapo.envs.emotion.user import PersonaActor
from mapo.envs.empathy.env import LISTENER_PROMPT


@dataclass(frozen=True)
class EmotionConfig:
    max_turns: int = 20
    success_at: float = 100.0
    failure_below: float = 10.0
    start_range: tuple[int, int] = START_RANGE
    start_seed: int = 0

    def __post_init__(self) -> None:
        if self.max_turns < 1:
            raise ValueError(f"max_turns must be at least 1, got {self.max_turns}")
        if not 0 <= self.failure_below < self.success_at <= 100:
            raise ValueError(
                f"need 0 <= failure_below < success_at <= 100, got failure_below={self.failure_below}, "
                f"success_at={self.success_at}"
            )
        lo, hi = self.start_range
        if not self.failure_below <= lo <= hi < self.success_at:
            raise ValueError(f"start_range {self.start_range} must lie within [failure_below, success_at)")


def _make_judge(judge: str | EmotionJudge, options: Mapping[str, Any] | None) -> EmotionJudge:
    if not isinstance(judge, str):
        if not callable(getattr(judge, "score", None)):
            raise ValueError(f"judge must be 'offline', 'llm' or an object with score(), got {judge!r}")
        return judge
    options = dict(options or {})
    if judge == "offline":
        if options:
            raise ValueError(f"the offline emotion judge takes no options, got {sorted(options)}")
        return OfflineEmotionJudge()
    if judge == "llm":
        from mapo.backends.transports import chat_client

        role = {k: options.pop(k) for k in ("temperature", "max_tokens") if k in options}
        return LLMEmotionJudge(chat_client(options), **role)
    raise ValueError(f"unknown emotion judge {judge!r}; use 'offline', 'llm' or pass a judge object")


@register_environment("emotion")
class EmotionEnvironment(Environment):
    """One dialogue with one simulated user whose emotion is scored every turn."""

    def __init__(
        self,
        judge: str | EmotionJudge = "offline",
        actor: PersonaActor | None = None,
        judge_options: Mapping[str, Any] | None = None,
        **config: Any,
    ) -> None:
        if "start_range" in config:
            config["start_range"] = tuple(config["start_range"])
        self.config = EmotionConfig(**config)
        self.judge = _make_judge(judge, judge_options)
        self.actor = actor or PersonaActor()
        self.persona: Persona | None = None

    # -- the policy's prompt, how scenarios load, how evaluation adapts the options (mapo.envs.base)

    system_prompt = LISTENER_PROMPT

    @staticmethod
    def load_scenarios(source: str) -> list[Scenario]:
        """SAGE/RLVER persona lines (a .jsonl file), or empathy scenario cards (a split or a folder)."""
        if source.endswith(".jsonl"):
            return load_personas(source)
        from mapo.envs.empathy.cards import card_scenarios

        return card_scenarios(source)

    @staticmethod
    def with_turn_cap(options: dict[str, Any], max_turns: int) -> dict[str, Any]:
        """The evaluation's turn cap as the dialogue's timeout, unless the options set one."""
        return options if "max_turns" in options else {**options, "max_turns": max_turns}

    # -- the protocol -----------------------------------------------------------------

    def reset(self, scenario: Scenario, seed: int | None = None) -> str:
        self.persona = Persona.from_scenario(scenario)
        self.emotion = self._start(scenario)
        self.initial_emotion = self.emotion
        self.turn = 0
        self.done_reason: str | None = None
        self.emotions = [self.emotion]
        self.actor.reset(self.persona, seed)
        opening = self.actor.opening(self.persona)
        self.history = [{"role": "user", "content": opening}]
        return opening

    def step(self, response: str) -> StepResult:
        if self.persona is None:
            raise RuntimeError("call reset(scenario) before step()")
        if self.done_reason is not None:
            raise RuntimeError(f"the dialogue has ended ({self.done_reason}); call reset() to start another")
        if not isinstance(response, str):
            raise TypeError(f"response must be a string, got {type(response).__name__}")
        judgement = self.judge.score(self.persona, self.history, response)
        before = self.emotion
        self.emotion = min(100.0, max(0.0, before + float(judgement.change)))
        applied = self.emotion - before
        self.turn += 1
        self.emotions.append(self.emotion)
        self.history.append({"role": "assistant", "content": response})
        self.done_reason = self._status()
        user_message = self.actor.reply(self.persona, self.emotion, applied, self.done_reason)
        self.history.append({"role": "user", "content": user_message})
        info = {
            "turn": self.turn,
            "emotion": self.emotion,
            "change": applied,
            "judged_change": float(judgement.change),
            "state": self.state,
            "distance": self.distance,
            "done_reason": self.done_reason,
            "judge": dict(judgement.components),
            "judge_reason": judgement.reason,
            "judge_fallback": judgement.fallback,
        }
        return StepResult(user_message, (applied,), self.done_reason is not None, info)

    # -- state ------------------------------------------------------------------------

    @property
    def initial_state(self) -> tuple[float]:
        """P_0 = (e_0 - 100,) of the current dialogue (set by reset)."""
        return (self.initial_emotion - 100.0,)

    @property
    def state(self) -> tuple[float]:
        """P_t = (e - 100,): the K = 1 need vector."""
        return (self.emotion - 100.0,)

    @property
    def distance(self) -> float:
        """D_t = ||P_t|| = 100 - e."""
        return 100.0 - self.emotion

    def _start(self, scenario: Scenario) -> float:
        if scenario.initial_state is not None and len(scenario.initial_state) == 1:
            start = scenario.initial_state[0] + 100.0
        elif self.persona is not None and self.persona.initial_emotion is not None:
            start = float(self.persona.initial_emotion)
        else:
            start = seeded_emotion(scenario.id, self.config.start_seed, self.config.start_range)
        if not 0.0 <= start <= 100.0:
            raise ValueError(f"scenario {scenario.id!r}: initial emotion {start} is outside 0-100")
        return start

    def _status(self) -> str | None:
        if self.emotion >= self.config.success_at:
            return "success"
        if self.emotion < self.config.failure_below:
            return "failure"
        if self.turn >= self.config.max_turns:
            return "timeout"
        return None
