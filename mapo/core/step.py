"""One training step as plain functions: rewards -> advantages -> training sequences -> update.

What `mapo.core.trainer.Trainer` does with a step's rolled-out groups, callable without it (the
trainer adds scenario sampling, the rollout engine, logging and checkpoints; the benchmarks
call these too). Dataclasses in, a metrics dict out:

    from mapo.config import load_config
    from mapo.envs.base import environment_factory, load_scenarios
    from mapo.policy import load_policy
    from mapo.core.rollout import rollout
    from mapo.core.step import train_step
    from mapo.core.update import make_optimizer

    config = load_config("default", ["rollout.scenarios_per_step=1"])
    policy = load_policy(config.policy, seed=config.seed)  # (with loss.kl_beta > 0: policy.keep_reference())
    optimizer = make_optimizer(policy, config.optim)
    scenarios = load_scenarios(config.env.name, config.env.scenarios)[:1]
    make_env = environment_factory(config.env.name, config.env.options)
    groups = rollout(policy, scenarios, make_env, config.rollout)  # N dialogues of the scenario
    result = train_step(policy, optimizer, groups, config)  # the weights move
    print(result.metrics["loss"], result.metrics["grad_norm"], len(result.sequences))

or stage by stage: `score` (every turn's reward), `advantages_of` (the configured estimator),
`training_batch` (the sequences the loss reads: `mapo.core.losses.training_sequences`), then
`mapo.core.update.update`. Optional methods (RAPO, COMPEER; mapo.methods.base) passed as `methods`
run their hooks at the same points, in the same order, as in the trainer.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from mapo.config import TrainConfig
from mapo.core.advantages import AdvantageSpec, compute_advantages
from mapo.core.losses import TrainSequence, training_sequences
from mapo.core.rewards import fill_rewards
from mapo.core.rollout import RolloutSpec
from mapo.core.types import Group, Nested
from mapo.core.update import update
from mapo.methods.base import TrainingMethod
from mapo.policy import Policy


@dataclass
class Advantages:
    """A step's advantages [group][trajectory][turn] (None: the turn trains nothing), the
    estimator's components (for logging) and the methods' selection metrics."""

    values: Nested
    components: dict[str, Nested]
    metrics: dict[str, float]


@dataclass
class StepResult:
    """What one step leaves: its advantages and components, the sequences it trained on, and
    the update's metrics (loss, grad_norm, kl, ...) with the methods' own."""

    advantages: Nested
    components: dict[str, Nested]
    sequences: list[TrainSequence]
    metrics: dict[str, float]


def score(groups: Sequence[Group], kind: str, methods: Sequence[TrainingMethod] = ()) -> dict[str, float]:
    """Set every turn's reward from its trajectory's distances (reward kind `kind`, mapo.core.rewards),
    then let each method reshape them; returns the methods' reward metrics."""
    fill_rewards(groups, kind)
    metrics: dict[str, float] = {}
    for method in methods:
        metrics.update(method.shape_rewards(groups))
    return metrics


def advantages_of(groups: Sequence[Group], spec: AdvantageSpec, methods: Sequence[TrainingMethod] = ()) -> Advantages:
    """The estimator's advantages over the whole batch (mapo.core.advantages), then each method's
    selection of the turns that train (RAPO's pivotal turns)."""
    values, components = compute_advantages(groups, spec)
    metrics: dict[str, float] = {}
    for method in methods:
        values, selected = method.select(groups, values)
        metrics.update(selected)
    return Advantages(values, components, metrics)


def training_batch(groups: Sequence[Group], advantages: Nested) -> list[TrainSequence]:
    """Every trajectory's training sequences, in group order: one packed sequence per dialogue,
    or one per reply when the replies had contexts of their own (a history window)."""
    return [
        seq
        for group, group_adv in zip(groups, advantages)
        for trajectory, traj_adv in zip(group.trajectories, group_adv)
        for seq in training_sequences(trajectory, traj_adv)
    ]


def train_step(
    policy: Policy,
    optimizer: torch.optim.Optimizer,
    groups: Sequence[Group],
    config: TrainConfig,
    *,
    sampled: RolloutSpec | None = None,
    methods: Sequence[TrainingMethod] = (),
    rng: np.random.Generator | None = None,
    score_rewards: bool = True,
) -> StepResult:
    """Rewards -> advantages -> sequences -> one update of `policy` on rolled-out `groups`.

    `config` gives the reward kind, advantage estimator, optimizer and loss settings.
    `sampled` is the rollout spec the groups were sampled with (default `config.rollout`):
    the update's pi_old is a probability of that temperature and top_p. The update is
    importance-corrected against the sampler's log-probs, as in every training run
    (mapo.core.update). `rng` shuffles minibatches (None: in order). `score_rewards=False`
    keeps rewards already set on the turns (a reward of your own); the methods'
    reward shaping is then skipped too.
    """
    sampled = sampled or config.rollout
    reward_metrics = score(groups, config.reward.kind, methods) if score_rewards else {}
    advantages = advantages_of(groups, config.advantage, methods)
    sequences = training_batch(groups, advantages.values)
    terms = [t for m in methods if (t := m.auxiliary_loss(policy, groups, sampled.temperature))]
    stats = update(
        policy, optimizer, sequences, config.optim, config.loss, sampled.temperature, rng,
        auxiliary=_summed(terms) if terms else None, off_policy=True, top_p=sampled.top_p,
    )
    method_metrics = dict(advantages.metrics)
    for method in methods:
        method_metrics.update(method.after_update(policy))  # e.g. RAPO's EMA teacher follows the new weights
    metrics = {**stats, **reward_metrics, **method_metrics}
    return StepResult(advantages.values, advantages.components, sequences, metrics)


def _summed(terms: list[Callable[[], torch.Tensor]]) -> Callable[[], torch.Tensor]:
    """One auxiliary loss from the methods' terms (the first alone when there is one)."""
    return lambda: sum((term() for term in terms[1:]), terms[0]())
