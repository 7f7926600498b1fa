"""The ablation's plan: the variant registry, the common training settings, the held-out
evaluation budget, and the units (variant x seed) the plan runs."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from mapo.registry import Registry


@dataclass(frozen=True)
class Variant:
    name: str
    overrides: tuple[str, ...]  # `--set` assignments applied on top of the plan's training settings
    description: str = ""


# Plug-ins: `register_variant`, an entry point of group "mapo.ablation_variants" (a Variant), or a
# "package.module:VARIANT" path.
VARIANTS: Registry[Variant] = Registry("ablation variant", group="mapo.ablation_variants")


def register_variant(name: str, *overrides: str, description: str = "") -> Variant:
    """Add a variant (a name and its config overrides) to the ablation grid."""
    if name in VARIANTS:
        raise ValueError(f"ablation variant {name!r} is already registered")
    if not name or "/" in name or name == "base":
        raise ValueError(f"ablation variant name {name!r}: must be non-empty, without '/', and not 'base'")
    return VARIANTS.add(name, Variant(name, tuple(overrides), description))


def _estimator_variant(estimator: str, reward: str, description: str) -> Variant:
    return register_variant(
        f"{estimator}-{reward}",
        f"advantage.estimator={estimator}",
        f"reward.kind={reward}",
        description=description,
    )


_estimator_variant("mapo", "idr", "MAPO mixed advantage, incremental distance reward")
_estimator_variant("mapo", "adr", "MAPO mixed advantage, absolute distance reward")
_estimator_variant("turn", "idr", "turn-level normalised returns only (alpha = 1)")
_estimator_variant("batch", "idr", "batch-level normalised rewards only (alpha = 0)")
_estimator_variant("grpo", "idr", "GRPO: one trajectory-level advantage for every turn")
_estimator_variant("reinforce_pp", "idr", "REINFORCE++: batch-normalised returns")

# COMPEER and RAPO options on top of mapo-idr (docs/methods.md)
register_variant("mapo-idr-redundancy", "reward.redundancy=true", description="+ COMPEER redundancy reweighting")
register_variant(
    "mapo-idr-reasoning",
    "reasoning.enabled=true",
    "rollout.max_new_tokens=160",
    description="+ COMPEER structured reasoning and format reward (longer replies: the tags need room)",
)
register_variant("mapo-idr-hindsight", "rapo.hindsight=quantile", description="+ RAPO hindsight selection, its quantile proxy (|r| >= median)")
register_variant("mapo-idr-distill", "rapo.distill=true", description="+ RAPO verbal self-distillation")
register_variant(
    "rapo-branching",
    "rapo.branching=true",
    "rapo.distill=true",
    description="RAPO: one-turn lookahead groups ranked by the offline ranker, plus self-distillation",
)

DEFAULT_VARIANTS = ("mapo-idr", "mapo-adr", "turn-idr", "batch-idr", "grpo-idr", "reinforce_pp-idr")


# Common training settings of the default ablation, sized so 6 variants x 3 seeds + the base
# fit in about 2 hours on 2 cores with --jobs 2 (arithmetic in docs/results.md: about 40
# CPU-seconds per step and 170 per evaluation, measured here). micro_batch_tokens=1024 keeps a
# run's peak memory near 4 GB, so two runs fit side by side.
DEFAULT_TRAIN = (
    "rollout.scenarios_per_step=2",
    "rollout.samples_per_scenario=4",
    "rollout.max_turns=3",
    "rollout.max_new_tokens=32",
    "optim.micro_batch_tokens=1024",
    "checkpoint_every=2",
    "transcripts_every=5",
)
QUICK_TRAIN = (
    "rollout.scenarios_per_step=2",
    "rollout.samples_per_scenario=2",
    "rollout.max_turns=2",
    "rollout.max_new_tokens=24",
    "checkpoint_every=1",
    "transcripts_every=1",
)


@dataclass
class EvalBudget:
    """Held-out evaluation settings for every run and the base (shortened from EMPA's 45 turns)."""

    scenarios: str = "test"
    limit: int | None = None
    samples: int = 1
    max_turns: int = 13  # success is only checked from turn 12 (DESIGN s.3): keep this above it
    max_new_tokens: int = 32
    temperature: float = 0.7
    seed: int = 0


@dataclass
class AblationPlan:
    variants: list[str] = field(default_factory=lambda: list(DEFAULT_VARIANTS))
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    steps: int = 10
    train: list[str] = field(default_factory=lambda: list(DEFAULT_TRAIN))  # `--set` for every run
    eval: EvalBudget = field(default_factory=EvalBudget)

    def __post_init__(self) -> None:
        for name in self.variants:
            if not isinstance(VARIANTS.resolve(name), Variant):
                raise ValueError(f"ablation variant {name!r} names a {type(VARIANTS.resolve(name)).__name__}, not a Variant")
        if not self.variants or not self.seeds:
            raise ValueError("an ablation needs at least one variant and one seed")
        if len(set(self.seeds)) != len(self.seeds) or len(set(self.variants)) != len(self.variants):
            raise ValueError(f"duplicate seeds or variants in the plan: seeds {self.seeds}, variants {self.variants}")
        if self.steps < 1:
            raise ValueError(f"steps must be at least 1, got {self.steps}")

    def units(self) -> list[Unit]:
        return [Unit(v, s) for v in self.variants for s in self.seeds]

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> AblationPlan:
        return cls(**{**data, "eval": EvalBudget(**data["eval"])})


def quick_plan() -> AblationPlan:
    """Minutes, not hours: two estimators, two seeds, two steps of tiny rollouts, a short eval."""
    return AblationPlan(
        variants=["mapo-idr", "grpo-idr"],
        seeds=[0, 1],
        steps=2,
        train=list(QUICK_TRAIN),
        eval=EvalBudget(limit=4, max_turns=13, max_new_tokens=24),
    )


@dataclass(frozen=True)
class Unit:
    """One training run (a variant with a seed) and its evaluation."""

    variant: str
    seed: int

    @property
    def name(self) -> str:
        return f"{self.variant}-s{self.seed}"


def unit_overrides(plan: AblationPlan, unit: Unit, threads: int | None, extra: Sequence[str] = ()) -> list[str]:
    """The run's config overrides: plan settings, then the variant's, then the seed, steps and name."""
    return [
        *plan.train,
        *extra,
        *VARIANTS.resolve(unit.variant).overrides,
        f"seed={unit.seed}",
        f"steps={plan.steps}",
        f"name={unit.name}",
        *([f"threads={threads}"] if threads is not None else []),
    ]


def plan_for(
    quick: bool = False,
    variants: Sequence[str] | None = None,
    seeds: int | None = None,
    steps: int | None = None,
    overrides: Sequence[str] = (),
) -> AblationPlan:
    """`mapo ablate`'s plan from its options: the default (or quick) plan with the variants,
    the number of seeds (0..N-1), the steps and extra training overrides changed."""
    plan = quick_plan() if quick else AblationPlan()
    if variants:
        plan = dataclasses.replace(plan, variants=list(variants))
    if seeds is not None:
        plan = dataclasses.replace(plan, seeds=list(range(seeds)))
    if steps is not None:
        plan = dataclasses.replace(plan, steps=steps)
    plan.train = [*plan.train, *overrides]
    return plan
