"""The shared vocabulary: plain dataclasses that every stage passes along.

Data flows one way: Scenario -> (environment + policy) -> Trajectory -> Group
-> rewards -> advantages -> loss. Nothing here imports torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

Nested = list[list[list[float | None]]]
"""Per-turn values of a batch, [group][trajectory][turn]: advantages (None = that turn gets no loss)."""

AXES: tuple[str, str, str] = ("C", "A", "P")
"""EMPA's need axes: cognitive, affective, proactive."""


@dataclass
class Scenario:
    """What an environment needs to start a dialogue.

    `initial_state` is P_0 (K floats) when the environment knows it up front; `card`
    keeps the environment's own description of the scenario (for the empathy
    environment the validated scenario card: persona, stages, cues, ...) for the
    roles that read it. An environment with fields of its own subclasses this
    (the empathy environment's `mapo.envs.empathy.cards.EmpathyScenario`).
    """

    id: str
    title: str = ""
    category: str = ""
    initial_state: tuple[float, ...] | None = None
    card: dict[str, Any] = field(default_factory=dict)


@dataclass
class Turn:
    """One exchange: the user's message, then the policy's reply and its score.

    Token fields are filled by the rollout: `response_ids` are the ids that were
    sampled (never a re-tokenisation), `old_logprobs` their log-probs under the
    sampling policy, `prompt_length` the tokens of context before the reply.
    """

    index: int  # 1-based turn number t
    user_message: str
    response: str = ""
    reward: float = 0.0
    action: tuple[float, ...] = ()  # v_t from the judge
    state: tuple[float, ...] = ()  # P_t after this turn
    distance: float = 0.0  # D_t = ||P_t||
    levels: dict[str, int] = field(default_factory=dict)
    prompt_length: int = 0
    response_ids: list[int] = field(default_factory=list)
    old_logprobs: list[float] = field(default_factory=list)
    truncated: bool = False
    info: dict[str, Any] = field(default_factory=dict)
    # Under a history window (rollout.history_window, when the environment supplies the context):
    # the ids the reply was sampled from, and the environment's message that ended them (the state).
    # None: the context was the dialogue so far, Trajectory.token_ids[:prompt_length].
    context_ids: list[int] | None = None
    context_message: str | None = None


@dataclass
class Trajectory:
    """One dialogue of one scenario; `done_reason` says why it ended."""

    scenario_id: str
    sample_index: int = 0
    initial_state: tuple[float, ...] = ()
    turns: list[Turn] = field(default_factory=list)
    done_reason: str | None = None  # "success" | "failure" | "timeout" | "max_turns" | ...
    system_prompt: str = ""
    # The whole dialogue's token ids as the policy saw and sampled them (rendered prompts
    # + sampled replies); turn t's reply is token_ids[prompt_length : prompt_length + len(response_ids)].
    # Empty when every reply had a context of its own (Turn.context_ids).
    token_ids: list[int] = field(default_factory=list)
    # D_0 of an environment that reports distances but no state (used when initial_state is empty)
    initial_distance: float | None = None

    @property
    def rewards(self) -> list[float]:
        return [t.reward for t in self.turns]

    @property
    def distances(self) -> list[float]:
        """D_0..D_T (D_0 from the initial state, else `initial_distance`; ValueError when neither is known)."""
        if self.initial_state:
            d0 = float(sum(x * x for x in self.initial_state) ** 0.5)
        elif self.initial_distance is not None:
            d0 = float(self.initial_distance)
        else:
            raise ValueError(f"trajectory of {self.scenario_id!r}: neither P_0 (initial_state) nor D_0 is known")
        return [d0] + [t.distance for t in self.turns]

    def __len__(self) -> int:
        return len(self.turns)


OUTCOMES = ("success", "failure", "timeout", "other")
"""How a dialogue ended, as its evaluation counts it (`outcome_of` its done_reason)."""


def outcome_of(done_reason: str | None) -> str:
    """The outcome class of a dialogue's ending reason: success, failure, timeout (a time or turn
    limit) or other."""
    if done_reason in ("success", "failure"):
        return done_reason
    if done_reason in ("timeout", "max_turns"):
        return "timeout"
    return "other"


@dataclass
class Group:
    """N trajectories sampled from the same scenario: the unit of normalisation."""

    scenario_id: str
    trajectories: list[Trajectory] = field(default_factory=list)

    @property
    def rewards(self) -> list[list[float]]:
        return [traj.rewards for traj in self.trajectories]

    def __len__(self) -> int:
        return len(self.trajectories)
