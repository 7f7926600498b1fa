"""COMPEER options: redundancy reweighting and structured reasoning with a format reward.

Redundancy: the maths lives in `mapo.methods.redundancy.redundancy_reweight_group`; this module
applies it to rolled-out groups with the environment's sentence embeddings and reports,
per step, how similar the responses were to each other (in-group) and to their
dialogue (history). With structured reasoning it measures the <reply> part only.

Structured reasoning: the policy writes short tagged analysis steps (the user's
situation, their emotional state, the chosen strategy) and then its reply. An
environment wrapper passes only the reply to the user and the judge; the analysis is
kept in the turn's info (and so in the transcripts); a format reward of +1 (complete)
or -1 (parts missing) times `reasoning.format_weight` is added to the turn's reward.
"""

from __future__ import annotations

import dataclasses
import math
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from mapo.core.rollout import RolloutSpec
from mapo.core.types import Group, Scenario, Turn
from mapo.envs.base import Environment, StepResult, reply_context, system_prompt_for
from mapo.methods.base import TrainingMethod
from mapo.methods.redundancy import Similarity, redundancy_reweight_group


def seen_reply(turn: Turn) -> str:
    """The text the user saw: with structured reasoning only the <reply> part (as the ranker judges it)."""
    return str(turn.info.get("reply", turn.response))


def reply_tokens(turn: Turn) -> float:
    """Tokens of the reply the user saw: with structured reasoning the <reply> part's share of the response's
    tokens, by characters (the shared tag scaffolding would otherwise make every reply look long)."""
    if "reply" not in turn.info or not turn.response:
        return float(len(turn.response_ids))
    return len(turn.response_ids) * min(1.0, len(seen_reply(turn)) / len(turn.response))


def apply_redundancy(
    groups: Sequence[Group],
    a: float = 0.1,
    b: float = 20.0,
    similarity: Similarity | None = None,
) -> dict[str, float]:
    """Reweight every turn's reward in place; returns the step's similarity metrics.

    Each turn keeps its reward before reweighting in `info["raw_reward"]` and its
    in-group / history similarities in `info["s_in"]` / `info["s_hist"]`.
    `similarity` defaults to the empathy environment's sentence-embedding cosine.
    """
    if similarity is None:
        from mapo.envs.embeddings import similarity

    clock = time.perf_counter()
    s_in: list[float] = []
    s_hist: list[float] = []
    taus: list[float] = []
    shrink: list[float] = []
    for group in groups:
        trajs = group.trajectories
        result = redundancy_reweight_group(
            [[seen_reply(t) for t in tr.turns] for tr in trajs],
            [[t.user_message for t in tr.turns] for tr in trajs],
            [[reply_tokens(t) for t in tr.turns] for tr in trajs],
            [tr.rewards for tr in trajs],
            similarity,
            a,
            b,
        )
        for k, trajectory in enumerate(trajs):
            for j, turn in enumerate(trajectory.turns):
                turn.info["raw_reward"] = turn.reward
                turn.info["s_in"] = result.s_in[k][j]
                turn.info["s_hist"] = result.s_hist[k][j]
                if turn.reward != 0.0:
                    shrink.append(abs(result.rewards[k][j]) / abs(turn.reward))
                turn.reward = result.rewards[k][j]
                s_in.append(result.s_in[k][j])
                s_hist.append(result.s_hist[k][j])
        taus.extend(result.tau)
    if not s_in:
        return {}
    return {
        "redundancy_s_in_mean": float(np.mean(s_in)),
        "redundancy_s_hist_mean": float(np.mean(s_hist)),
        "redundancy_tau_mean": float(np.mean(taus)),
        # |r~| / |r|: below 1 for positive rewards shrunk, above 1 for negative ones amplified
        "redundancy_scale_mean": float(np.mean(shrink)) if shrink else 1.0,
        "time_redundancy": time.perf_counter() - clock,
    }


# ---------------------------------------------------------------- structured reasoning (controllable reasoning)

REASONING_PARTS = ("situation", "emotion", "strategy", "reply")
REASONING_INSTRUCTIONS = (
    "\n\nBefore answering, think in four short tagged parts, exactly in this order:\n"
    "<situation>what is happening to the person, in one sentence</situation>\n"
    "<emotion>what they are feeling right now, in a few words</emotion>\n"
    "<strategy>how you will help them in this reply, in one sentence</strategy>\n"
    "<reply>your reply to them</reply>\n"
    "Only the text inside <reply> is shown to them."
)
_PART = {name: re.compile(rf"<{name}>(.*?)</{name}>", re.DOTALL | re.IGNORECASE) for name in REASONING_PARTS}
_ANY_TAG = re.compile(r"</?(?:" + "|".join(REASONING_PARTS) + r")>", re.IGNORECASE)


@dataclass
class ReasoningSpec:
    """The trainer's `reasoning` config section (COMPEER-style structured reasoning before each reply)."""

    enabled: bool = False
    format_weight: float = 0.5  # reward += weight * (+1 all four parts present and non-empty, else -1)
    instructions: str = REASONING_INSTRUCTIONS  # appended to the policy's system prompt

    def __post_init__(self) -> None:
        if not (math.isfinite(self.format_weight) and self.format_weight >= 0):
            raise ValueError(f"reasoning.format_weight must be a finite number >= 0, got {self.format_weight}")


@dataclass
class ReasonedReply:
    """A response split into its analysis (situation, emotion, strategy) and the reply the user sees."""

    reply: str
    analysis: dict[str, str]
    complete: bool  # every part present, non-empty, in order


def parse_reasoning(text: str) -> ReasonedReply:
    """Split a tagged response. Without a usable <reply>, the user gets the text with every tagged analysis removed."""
    found = {name: m for name in REASONING_PARTS if (m := _PART[name].search(text))}
    analysis = {name: found[name].group(1).strip() for name in REASONING_PARTS[:-1] if name in found}
    starts = [found[name].start() for name in REASONING_PARTS if name in found]
    complete = (
        len(found) == len(REASONING_PARTS)
        and all(m.group(1).strip() for m in found.values())
        and starts == sorted(starts)
    )
    if "reply" in found and found["reply"].group(1).strip():
        reply = found["reply"].group(1).strip()
    else:
        reply = text
        for name in REASONING_PARTS[:-1]:
            reply = _PART[name].sub(" ", reply)
        reply = " ".join(_ANY_TAG.sub(" ", reply).split())
    return ReasonedReply(reply, analysis, complete)


def format_reward(complete: bool) -> float:
    """+1 for a complete tagged response, -1 for one missing parts."""
    return 1.0 if complete else -1.0


class ReasoningEnvironment(Environment):
    """Wraps an environment: only the <reply> part of each response reaches the user and the judge.

    The analysis and whether the format was complete go into the step's info
    (`analysis`, `format_complete`), from where they reach the turn and the transcripts.
    """

    def __init__(self, inner: Environment) -> None:
        self.inner = inner

    def reset(self, scenario: Scenario, seed: int | None = None) -> str:
        return self.inner.reset(scenario, seed=seed)

    def reply_context(self) -> str | None:
        return reply_context(self.inner)

    def step(self, response: str) -> StepResult:
        parsed = parse_reasoning(response)
        result = self.inner.step(parsed.reply)
        info = {
            **result.info,
            "reply": parsed.reply,
            "analysis": parsed.analysis,
            "format_complete": parsed.complete,
        }
        return result._replace(info=info)


def apply_format_reward(groups: Sequence[Group], weight: float) -> dict[str, float]:
    """Add weight x format_reward to every turn's reward; returns the fraction of complete responses."""
    flags = []
    for group in groups:
        for trajectory in group.trajectories:
            for turn in trajectory.turns:
                complete = bool(turn.info.get("format_complete", False))
                turn.info["format_reward"] = format_reward(complete)
                turn.reward += weight * turn.info["format_reward"]
                flags.append(complete)
    return {"format_complete_fraction": float(np.mean(flags))} if flags else {}


# ---------------------------------------------------------------- the trainer's hooks (mapo.methods.base)


class Redundancy(TrainingMethod):
    """`reward.redundancy`: every turn's reward reweighted by its redundancy (`apply_redundancy`)."""

    name = "redundancy"
    transcript_keys = ("raw_reward", "s_in", "s_hist")

    def __init__(self, a: float, b: float) -> None:
        self.a, self.b = a, b

    @classmethod
    def from_config(cls, config: Any) -> Redundancy | None:
        return cls(config.reward.redundancy_a, config.reward.redundancy_b) if config.reward.redundancy else None

    def shape_rewards(self, groups: Sequence[Group]) -> dict[str, float]:
        return apply_redundancy(groups, self.a, self.b)


class StructuredReasoning(TrainingMethod):
    """`reasoning.enabled`: tagged analysis before each reply, only the reply reaches the user,
    and a format reward of `reasoning.format_weight` x (+1 complete, -1 not)."""

    name = "reasoning"
    transcript_keys = ("reply", "analysis", "format_complete", "format_reward")

    def __init__(self, spec: ReasoningSpec, system_prompt: str) -> None:
        self.spec = spec
        self.system_prompt = system_prompt + spec.instructions

    @classmethod
    def from_config(cls, config: Any) -> StructuredReasoning | None:
        if not config.reasoning.enabled:
            return None
        return cls(config.reasoning, system_prompt_for(config.env.name, config.rollout.system_prompt))

    def rollout_spec(self, spec: RolloutSpec) -> RolloutSpec:
        return dataclasses.replace(spec, system_prompt=self.system_prompt)

    def wrap_environment(self, make_env: Callable[[], Environment]) -> Callable[[], Environment]:
        return lambda: ReasoningEnvironment(make_env())

    def shape_rewards(self, groups: Sequence[Group]) -> dict[str, float]:
        return apply_format_reward(groups, self.spec.format_weight)
