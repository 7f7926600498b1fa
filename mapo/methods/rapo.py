"""RAPO options: hindsight selection of pivotal turns and verbal self-distillation.

Hindsight selection trains only the turns that mattered. Mode "llm" is RAPO's own: an LLM
reads each finished dialogue and names the replies worth learning from
(`mapo.methods.hindsight_llm`). Two proxies need no extra call: "quantile" keeps the turns
whose |r_t| reaches the batch's q-quantile, "judge" those where the environment's judge saw
any progress or setback (a non-zero level). The other turns get advantage None, i.e. no loss.

Self-distillation: in every group, the lowest-rewarded reply (among turns the user
answered) is re-scored by a *teacher* -- the same policy, or an EMA copy of its trainable
weights, shown the dialogue plus hindsight feedback (the user's reaction to that reply
and a critique of it). The student (the policy without the feedback) is pulled toward
the teacher's next-token distribution on that reply's tokens with the top-K reverse KL
of `mapo.methods.distillation.topk_reverse_kl`, bounded and scaled, added to the
policy-gradient loss of every optimizer step. The teacher is computed once per step under no_grad.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import torch

from mapo.core.advantages import normalise
from mapo.core.types import Group, Nested, Scenario, Trajectory
from mapo.methods.base import TrainingMethod
from mapo.methods.distillation import reply_logprobs, topk_reverse_kl
from mapo.methods.hindsight_llm import make_llm_hindsight
from mapo.methods.ranking import critique_from_levels, make_ranker
from mapo.policy import Policy

HINDSIGHT_MODES = ("off", "quantile", "judge", "llm")
TEACHERS = ("current", "ema")
RANKERS = ("offline", "llm")


@dataclass
class RapoSpec:
    """The trainer's `rapo` config section (mapo.config.METHOD_SECTIONS)."""

    free_form: ClassVar[tuple[str, ...]] = ("hindsight_backend", "ranker_backend")  # passed on unchecked
    # off | llm (RAPO: an LLM picks the turns worth learning from) | proxies: quantile (|r_t| >= the
    # batch's q-quantile), judge (any non-zero judge level)
    hindsight: str = "off"
    hindsight_quantile: float = 0.5
    hindsight_backend: dict[str, Any] = field(default_factory=dict)  # hindsight=llm: base_url, model, ...
    distill: bool = False  # verbal self-distillation of each group's worst reply
    distill_coef: float = 1e-3
    distill_top_k: int = 256
    distill_cap: float = 2.0  # per-reply mean KL is bounded at this value
    distill_teacher: str = "current"  # current (the policy before the step) | ema (EMA of the trainable weights)
    distill_ema_mix: float = 0.5  # ema <- mix * ema + (1 - mix) * current, after every step
    # one-turn lookahead: G = rollout.samples_per_scenario candidates at one drawn turn, ranked together
    branching: bool = False
    ranker: str = "offline"  # offline (the offline judge's rewards) | llm (ranker_backend)
    ranker_backend: dict[str, Any] = field(default_factory=dict)  # base_url, model, ... (+ json_format)

    def __post_init__(self) -> None:
        if self.hindsight not in HINDSIGHT_MODES:
            raise ValueError(f"rapo.hindsight must be one of {', '.join(HINDSIGHT_MODES)}, got {self.hindsight!r}")
        if not 0.0 <= self.hindsight_quantile < 1.0:
            raise ValueError(f"rapo.hindsight_quantile must be in [0, 1), got {self.hindsight_quantile}")
        if self.distill_teacher not in TEACHERS:
            raise ValueError(f"rapo.distill_teacher must be one of {', '.join(TEACHERS)}, got {self.distill_teacher!r}")
        for name in ("distill_coef", "distill_cap"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"rapo.{name} must be a finite number > 0, got {value}")
        if self.distill_top_k < 1:
            raise ValueError(f"rapo.distill_top_k must be at least 1, got {self.distill_top_k}")
        if not 0.0 <= self.distill_ema_mix < 1.0:
            raise ValueError(f"rapo.distill_ema_mix must be in [0, 1), got {self.distill_ema_mix}")
        if self.ranker not in RANKERS:
            raise ValueError(f"rapo.ranker must be one of {', '.join(RANKERS)}, got {self.ranker!r}")
        if self.ranker == "llm" and not {"base_url", "model"} <= set(self.ranker_backend):
            raise ValueError("rapo.ranker=llm needs rapo.ranker_backend with at least base_url and model")
        if self.hindsight == "llm" and not {"base_url", "model"} <= set(self.hindsight_backend):
            raise ValueError("rapo.hindsight=llm needs rapo.hindsight_backend with at least base_url and model")

    def check_config(self, config: Any) -> None:
        """Branching: the ranker's scores replace every reward, so options that shape them would be ignored silently."""
        if not self.branching:
            return
        ignored = []
        if config.reward.kind != "idr":
            ignored.append(f"reward.kind={config.reward.kind} (the offline ranker ranks by IDR)")
        if config.reward.redundancy:
            ignored.append("reward.redundancy")
        if config.reasoning.enabled and config.reasoning.format_weight > 0:
            ignored.append("the reasoning format reward (reasoning.format_weight > 0)")
        if ignored:
            raise ValueError(
                f"rapo.branching trains on the ranker's scores, so {', '.join(ignored)} would have no effect; "
                "drop it, or turn rapo.branching off"
            )


# ---------------------------------------------------------------- hindsight selection


def pivotal_by_quantile(rewards: Sequence[Sequence[Sequence[float]]], quantile: float) -> list[list[list[bool]]]:
    """[group][trajectory][turn]: |r_t| >= the q-quantile of |r| over the whole batch (ties kept)."""
    flat = np.abs([r for g in rewards for t in g for r in t])
    if flat.size == 0:
        return [[[] for _ in g] for g in rewards]
    if not np.all(np.isfinite(flat)):
        raise ValueError("pivotal_by_quantile: non-finite reward in the batch")
    threshold = float(np.quantile(flat, quantile))
    return [[[abs(r) >= threshold for r in t] for t in g] for g in rewards]


def pivotal_by_judge(groups: Sequence[Group]) -> list[list[list[bool]]]:
    """[group][trajectory][turn]: the judge rated some progress or some setback (any non-zero level)."""
    return [[[any(v != 0 for v in turn.levels.values()) for turn in t.turns] for t in g.trajectories] for g in groups]


def select_pivotal(advantages: Nested, pivotal: Sequence[Sequence[Sequence[bool]]]) -> tuple[Nested, dict[str, float]]:
    """Advantages with None on the turns that are not pivotal, and the fraction of trained turns kept."""
    kept = total = 0
    out: Nested = []
    for g_adv, g_piv in zip(advantages, pivotal, strict=True):
        out.append([])
        for t_adv, t_piv in zip(g_adv, g_piv, strict=True):
            row = [a if (p and a is not None) else None for a, p in zip(t_adv, t_piv, strict=True)]
            total += sum(a is not None for a in t_adv)
            kept += sum(a is not None for a in row)
            out[-1].append(row)
    return out, {"hindsight_kept_fraction": kept / total if total else 0.0}


# ---------------------------------------------------------------- branching: ranking scores as rewards


def ranking_advantages(groups: Sequence[Group], eps: float = 1e-6) -> Nested:
    """Each candidate turn's reward becomes its ranker score; advantage = the score normalised over its group.

    Shared prefix turns get None (no loss). Population std, 0 for a group of equal scores.
    """
    out: Nested = []
    for group in groups:
        scores = []
        for trajectory in group.trajectories:
            turn = trajectory.turns[-1]
            if "rank_score" not in turn.info:
                raise ValueError(f"group {group.scenario_id!r}: a branching candidate has no ranker score")
            turn.reward = float(turn.info["rank_score"])
            scores.append(turn.reward)
        pool = np.asarray(scores)
        adv = normalise(pool, pool, eps)
        out.append([[None] * (len(t.turns) - 1) + [float(a)] for t, a in zip(group.trajectories, adv)])
    return out


# ---------------------------------------------------------------- feedback

FEEDBACK_NOTE = (
    "\n\nPrivate hindsight note (the user never sees it): an earlier draft of your next reply "
    'got this reaction from the user: "{reaction}"\nA reviewer\'s critique of that draft: {critique}\n'
    "Write the reply that would have served the user better."
)


# ---------------------------------------------------------------- self-distillation


@dataclass
class DistillTarget:
    """One reply to distil: the student's ids (dialogue + reply), the teacher's (with feedback + reply)."""

    student_ids: list[int]
    teacher_ids: list[int]
    length: int  # the reply's tokens: the last `length` ids of both
    teacher_logp: torch.Tensor | None = None  # [length, V], filled once per step


def reaction_to(trajectory: Trajectory, k: int) -> str | None:
    """What the user said after turn k's reply: recorded by the branching env, else the next turn's message."""
    turn = trajectory.turns[k]
    if "reaction" in turn.info:
        return str(turn.info["reaction"])
    return trajectory.turns[k + 1].user_message if k + 1 < len(trajectory.turns) else None


def worst_turn(group: Group) -> tuple[Trajectory, int] | None:
    """The lowest-rewarded reply of the group that the user reacted to (ties: the earliest)."""
    best: tuple[float, Trajectory, int] | None = None
    for trajectory in group.trajectories:
        for k, turn in enumerate(trajectory.turns):
            if turn.info.get("branch_prefix") or not turn.response_ids or reaction_to(trajectory, k) is None:
                continue
            if best is None or turn.reward < best[0]:
                best = (turn.reward, trajectory, k)
    return None if best is None else (best[1], best[2])


def distill_target(policy: Policy, trajectory: Trajectory, k: int) -> DistillTarget:
    """Student and teacher ids for turn k of `trajectory`; the teacher's prompt carries the feedback."""
    turn = trajectory.turns[k]
    critique = turn.info.get("critique") or critique_from_levels(turn.levels)
    note = FEEDBACK_NOTE.format(reaction=reaction_to(trajectory, k), critique=critique)
    messages = [{"role": "system", "content": trajectory.system_prompt + note}]
    for earlier in trajectory.turns[:k]:
        messages += [
            {"role": "user", "content": earlier.user_message},
            {"role": "assistant", "content": earlier.response},
        ]
    messages.append({"role": "user", "content": turn.user_message})
    context = policy.encode(policy._render(messages, True))
    # the student reads what the reply was sampled after: its own context, or the dialogue so far
    sampled_after = turn.context_ids if turn.context_ids is not None else trajectory.token_ids[: turn.prompt_length]
    return DistillTarget(
        list(sampled_after) + list(turn.response_ids),
        context + list(turn.response_ids),
        len(turn.response_ids),
    )


class EmaTeacher:
    """An exponential moving average of the policy's trainable weights, swapped in to act as teacher."""

    def __init__(self, policy: Policy, mix: float) -> None:
        self.mix = mix
        self.shadow = [p.detach().clone() for p in policy.trainable_parameters()]

    @torch.no_grad()
    def update(self, policy: Policy) -> None:
        for shadow, p in zip(self.shadow, policy.trainable_parameters(), strict=True):
            shadow.mul_(self.mix).add_(p.detach(), alpha=1.0 - self.mix)

    @contextlib.contextmanager
    def swapped_in(self, policy: Policy) -> Iterator[None]:
        params = policy.trainable_parameters()
        saved = [p.detach().clone() for p in params]
        with torch.no_grad():
            for p, shadow in zip(params, self.shadow, strict=True):
                p.copy_(shadow)
        try:
            yield
        finally:
            with torch.no_grad():
                for p, value in zip(params, saved, strict=True):
                    p.copy_(value)


class SelfDistillation:
    """The distillation term of one step; calling it gives coef x the bounded mean loss (a tensor to backward)."""

    def __init__(
        self,
        policy: Policy,
        targets: list[DistillTarget],
        spec: RapoSpec,
        temperature: float,
    ) -> None:
        self.policy = policy
        self.targets = targets
        self.spec = spec
        self.temperature = temperature
        self.losses: list[float] = []  # unbounded mean KL per call, for the metrics
        self.seconds = 0.0  # teacher passes + student forwards (the backward runs in the trainer)

    def __call__(self) -> torch.Tensor:
        clock = time.perf_counter()
        per_reply = []
        for target in self.targets:
            student = reply_logprobs(self.policy.model, target.student_ids, target.length, self.temperature)
            loss = topk_reverse_kl(student, target.teacher_logp, self.spec.distill_top_k).mean()
            # bounded: the value is min(loss, cap) while the gradient keeps its direction
            per_reply.append(loss * min(1.0, self.spec.distill_cap / max(float(loss.detach()), 1e-12)))
            self.losses.append(float(loss.detach()))
        self.seconds += time.perf_counter() - clock
        return self.spec.distill_coef * torch.stack(per_reply).mean()

    def metrics(self) -> dict[str, float]:
        return {
            "distill_loss": float(np.mean(self.losses)) if self.losses else 0.0,
            "distill_replies": float(len(self.targets)),
            "distill_tokens": float(sum(t.length for t in self.targets)),
            "time_distill": self.seconds,
        }


class Rapo(TrainingMethod):
    """The RAPO options of one training run (holds the EMA teacher between steps)."""

    name = "rapo"
    transcript_keys = ("reaction", "rank", "rank_score", "critique")

    def __init__(self, spec: RapoSpec) -> None:
        self.spec = spec
        self.ema: EmaTeacher | None = None
        self.ranker = make_ranker(spec.ranker, spec.ranker_backend) if spec.branching else None
        self.hindsight_llm = make_llm_hindsight(spec.hindsight_backend) if spec.hindsight == "llm" else None
        self.branch_metrics: dict[str, float] = {}
        self._distill: SelfDistillation | None = None  # this step's term, for its metrics after the update

    @classmethod
    def from_config(cls, config: Any) -> Rapo | None:
        spec = config.rapo
        return cls(spec) if spec.branching or spec.distill or spec.hindsight != "off" else None

    def rollout_function(self, rollout: Callable[..., list[Group]]) -> Callable[..., list[Group]]:
        return self.rollout if self.spec.branching else rollout

    def auxiliary_loss(self, policy: Policy, groups: Sequence[Group], temperature: float) -> SelfDistillation | None:
        self._distill = self.distillation(policy, groups, temperature)
        return self._distill

    def rollout(
        self,
        policy: Policy,
        scenarios: Sequence[Scenario],
        make_env: Any,
        spec: Any,
        **kwargs: Any,
    ) -> list[Group]:
        """Branching rollouts (same call as mapo.core.rollout.rollout); the step's branch metrics are kept for `select`."""
        from mapo.methods.branching import branching_rollout

        groups, self.branch_metrics = branching_rollout(policy, scenarios, make_env, spec, self.ranker, **kwargs)
        return groups

    def select(self, groups: Sequence[Group], advantages: Nested) -> tuple[Nested, dict[str, float]]:
        metrics: dict[str, float] = {}
        if self.spec.branching:
            advantages = ranking_advantages(groups)
            metrics.update(self.branch_metrics)
        if self.spec.hindsight == "off":
            return advantages, metrics
        if self.hindsight_llm is not None:
            pivotal, llm_metrics = self.hindsight_llm.pivotal(groups)
            metrics.update(llm_metrics)
        elif self.spec.hindsight == "quantile":
            pivotal = pivotal_by_quantile([g.rewards for g in groups], self.spec.hindsight_quantile)
        else:
            pivotal = pivotal_by_judge(groups)
        selected, kept = select_pivotal(advantages, pivotal)
        if not any(a is not None for g in selected for t in g for a in t):
            return advantages, {
                **metrics,
                "hindsight_kept_fraction": 1.0,
                "hindsight_none_pivotal": 1.0,
            }  # all, not none
        return selected, {**metrics, **kept}

    @torch.no_grad()
    def distillation(self, policy: Policy, groups: Sequence[Group], temperature: float) -> SelfDistillation | None:
        """The step's distillation term (teacher distributions computed now), or None when off / nothing to distil."""
        if not self.spec.distill:
            return None
        targets = [distill_target(policy, t, k) for g in groups if (worst := worst_turn(g)) for t, k in [worst]]
        if not targets:
            return None
        if self.spec.distill_teacher == "ema" and self.ema is None:
            self.ema = EmaTeacher(policy, self.spec.distill_ema_mix)
        clock = time.perf_counter()
        policy.model.eval()
        swap = self.ema.swapped_in(policy) if self.spec.distill_teacher == "ema" else contextlib.nullcontext()
        with swap:
            for target in targets:
                target.teacher_logp = reply_logprobs(policy.model, target.teacher_ids, target.length, temperature)
        distill = SelfDistillation(policy, targets, self.spec, temperature)
        distill.seconds = time.perf_counter() - clock
        return distill

    def after_update(self, policy: Policy) -> dict[str, float]:
        if self.ema is not None:
            self.ema.update(policy)
        return self._distill.metrics() if self._distill is not None else {}

    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint must keep: the EMA teacher's weights (None until its first use)."""
        return {"ema_shadow": None if self.ema is None else [t.clone() for t in self.ema.shadow]}

    def load_state_dict(self, state: dict[str, Any], policy: Policy) -> None:
        shadow = state.get("ema_shadow")
        if shadow is None:
            self.ema = None
            return
        self.ema = EmaTeacher(policy, self.spec.distill_ema_mix)
        if [t.shape for t in shadow] != [t.shape for t in self.ema.shadow]:
            raise ValueError("checkpoint: the saved EMA teacher does not match the policy's trainable weights")
        self.ema.shadow = [t.clone() for t in shadow]
