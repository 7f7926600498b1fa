"""The support-desk environment: one customer, two needs, the IDR contract of mapo.

The need vector has K = 2 axes, P_t = (-frustration, -unsolved):

- frustration in [0, 10], from the card's start; the judge's verdict moves it;
- unsolved: the weights of what is still missing (the hidden detail until the agent
  asks for it, and every step not yet taken); the card's total at the start.

So D_t = ||P_t|| shrinks as the customer calms down and the problem gets solved, and
the action is v_t = P_t - P_{t-1}. The dialogue ends with
- "success" when nothing is unsolved (the customer thanks the agent and leaves),
- "failure" when frustration reaches `give_up_at` (the customer gives up),
- "timeout" after `max_turns` replies.

Plug it in by path, from the repository root (see README.md here):
`env.name: examples.support_desk.env:SupportDeskEnvironment`, `env.scenarios: train`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict
from typing import Any

from pydantic import ValidationError

from mapo.core.types import Scenario
from mapo.envs.base import Environment, StepResult
from mapo.validation import describe_validation_error

from .cards import MAX_FRUSTRATION, SupportCard, load_cards
from .customer import Customer
from .judge import Memory, Rules, SupportJudge

AGENT_PROMPT = (
    "You are a customer support agent answering a customer who is writing in with a problem. "
    "Reply in two or three sentences: name what went wrong for them, ask for the one detail you need "
    "if you do not have it yet, and say the concrete next step you are taking."
)


class SupportDeskEnvironment(Environment):
    """One support dialogue (see the module docstring)."""

    def __init__(
        self,
        max_turns: int = 10,
        give_up_at: float = MAX_FRUSTRATION,
        rules: Rules | Mapping[str, Any] | None = None,
        judge: SupportJudge | None = None,
        customer: Customer | None = None,
    ) -> None:
        if isinstance(max_turns, bool) or not isinstance(max_turns, int) or max_turns < 1:
            raise ValueError(f"support-desk environment: max_turns must be an integer >= 1, got {max_turns!r}")
        if isinstance(give_up_at, bool) or not isinstance(give_up_at, (int, float)) or not 0 < give_up_at <= MAX_FRUSTRATION:
            raise ValueError(f"support-desk environment: give_up_at must be in (0, {MAX_FRUSTRATION:g}], got {give_up_at!r}")
        if judge is not None and rules is not None:
            raise ValueError("support-desk environment: give rules or a judge, not both (a judge has its own rules)")
        if isinstance(rules, Mapping):
            known = set(Rules.__dataclass_fields__)
            unknown = sorted(set(rules) - known)
            if unknown:
                raise ValueError(f"support-desk environment: rules: unknown key(s) {', '.join(unknown)}; expected {', '.join(sorted(known))}")
            rules = Rules(**{k: tuple(v) if isinstance(v, list) else v for k, v in rules.items()})
        self.max_turns = max_turns
        self.give_up_at = float(give_up_at)
        self.judge = judge or SupportJudge(rules)
        self.customer = customer or Customer()
        self.card: SupportCard | None = None

    # -- the policy's prompt, how scenarios load, how evaluation adapts (mapo.envs.base) -------

    system_prompt = AGENT_PROMPT  # used when the config leaves rollout.system_prompt null
    load_scenarios = staticmethod(load_cards)
    # what the transcripts keep of each turn's info, beside the state and the reply
    transcript_keys = ("frustration", "unsolved", "steps", "asked_detail", "acknowledged", "events")

    @staticmethod
    def with_turn_cap(options: dict[str, Any], max_turns: int) -> dict[str, Any]:
        """Evaluation's turn cap becomes the customer's own timeout (unless the options set one)."""
        return {"max_turns": max_turns, **options}

    # -- the protocol --------------------------------------------------------------------------

    def reset(self, scenario: Scenario, seed: int | None = None) -> str:
        if not scenario.card:
            raise ValueError(
                f"support-desk environment: scenario {scenario.id!r} has no card; load scenarios with "
                "SupportDeskEnvironment.load_scenarios (a split name or a folder of cards)"
            )
        try:
            self.card = SupportCard.model_validate(scenario.card)
        except ValidationError as exc:
            raise ValueError(
                f"support-desk environment: scenario {scenario.id!r}: invalid card: {describe_validation_error(exc)}"
            ) from None
        self.judge.reset(self.card)
        self.customer.reset(self.card, seed)
        self.memory = Memory()
        self.frustration = float(self.card.frustration)
        self.turn = 0
        self.done_reason: str | None = None
        opening = self.customer.opening()
        self.memory.customer_messages.append(opening)
        return opening

    def step(self, response: str) -> StepResult:
        if self.card is None:
            raise RuntimeError("support-desk environment: call reset(scenario) before step()")
        if self.done_reason is not None:
            raise RuntimeError(f"support-desk environment: the dialogue has ended ({self.done_reason}); call reset()")
        if not isinstance(response, str):
            raise TypeError(f"support-desk environment: the response must be a string, got {type(response).__name__}")
        before = self.state
        verdict = self.judge.score(self.memory, response)
        self.memory.update(verdict, response)
        self.frustration = min(MAX_FRUSTRATION, max(0.0, self.frustration + verdict.frustration_change))
        self.turn += 1
        self.done_reason = self._status()
        if self.done_reason in ("success", "failure"):
            user_message = self.customer.closing(solved=self.done_reason == "success")
        else:
            user_message = self.customer.reply(verdict, self.frustration, self.open_steps)
        self.memory.customer_messages.append(user_message)
        action = tuple(after - b for after, b in zip(self.state, before))
        info = {
            "turn": self.turn,
            "state": self.state,
            "distance": self.distance,
            "frustration": self.frustration,
            "unsolved": self.unsolved,
            "frustration_change": verdict.frustration_change,
            "steps": list(verdict.steps),
            "asked_detail": verdict.asked_detail,
            "acknowledged": verdict.acknowledged,
            "events": [asdict(e) for e in verdict.events],
            "done_reason": self.done_reason,
        }
        return StepResult(user_message, action, self.done_reason is not None, info)

    # -- state ----------------------------------------------------------------------------------

    @property
    def open_steps(self) -> list[str]:
        assert self.card is not None
        return [s.id for s in self.card.steps if s.id not in self.memory.steps_done]

    @property
    def unsolved(self) -> float:
        assert self.card is not None
        detail = 0.0 if self.memory.detail_known else self.card.detail.weight
        return detail + sum(s.weight for s in self.card.steps if s.id not in self.memory.steps_done)

    @property
    def state(self) -> tuple[float, float]:
        """P_t = (-frustration, -unsolved)."""
        return (-self.frustration, -self.unsolved)

    @property
    def distance(self) -> float:
        return (self.frustration**2 + self.unsolved**2) ** 0.5

    def _status(self) -> str | None:
        if self.unsolved == 0:
            return "success"
        if self.frustration >= self.give_up_at:
            return "failure"
        if self.turn >= self.max_turns:
            return "timeout"
        return None
