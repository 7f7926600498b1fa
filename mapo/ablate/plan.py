"""The ablation's plan: the variant registry, the common training settings, the held-out
evaluation budget, and the units (variant x seed) the plan runs."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
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
_estimator_variant("mapo_ragged", "idr", "MAPO without the T_min cut: turn t normalised over the dialogues that reach it")
_estimator_variant("turn", "idr", "turn-level normalised returns only (alpha = 1)")
_estimator_variant("batch", "idr", "batch-level normalised rewards only (alpha = 0)")
_estimator_variant("grpo", "idr", "GRPO: one trajectory-level advantage for every turn")
_estimator_variant("reinforce_pp", "idr", "REINFORCE++: batch-normalised returns")
_estimator_variant("rloo", "idr", "RLOO: return minus the mean of the group's other returns, every turn")
_estimator_variant("mapo", "outcome", "MAPO on the outcome-only reward (D_0 - D_T on the last turn)")
for _alpha in ("0.25", "0.75"):  # the alpha sweep's inner points (0 is batch-idr, 1 is turn-idr, 0.5 mapo-idr)
    register_variant(f"mapo-a{_alpha}-idr", "advantage.estimator=mapo", f"advantage.alpha={_alpha}", "reward.kind=idr",
                     description=f"MAPO with alpha = {_alpha} (turn-level share of the mix)")
# the grid at a lower learning rate than the trainer's 5e-4, the steadier rate on the game (the
# game-lr plan; then the game-turns plans)
for _name in ("mapo-idr", "mapo_ragged-idr", "grpo-idr", "turn-idr", "batch-idr", "rloo-idr", "mapo-outcome",
              "mapo-a0.25-idr", "mapo-a0.75-idr"):
    register_variant(f"{_name}-lr2e-4", *VARIANTS.resolve(_name).overrides, "optim.lr=2e-4",
                     description=f"{_name} at learning rate 2e-4")

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

    __pydantic_config__ = {"extra": "forbid"}  # from_dict: a misspelt field is an error

    env: str = "empathy"  # the environment evaluated (the plan's runs train on the one their settings name)
    env_options: dict[str, Any] = field(default_factory=dict)
    scenarios: str = "test"
    limit: int | None = None
    samples: int = 1
    max_turns: int = 13  # success is only checked from turn 12 (DESIGN s.3): keep this above it
    max_new_tokens: int = 32
    max_sentences: int | None = 3  # a reply ends after this many sentences (None: only the token cap)
    temperature: float = 0.7
    seed: int = 0
    engine: str = "auto"  # what samples the replies: auto | hf | llamacpp (mapo.engines)


BENCHMARK_NAMES = ("eqbench", "emobench")


@dataclass
class BenchmarkBudget:
    """Outside benchmarks (EQ-Bench v2, EmoBench EA and EU) on the saved policies of `targets`:
    "base" and variant names, every seed of each. Greedy answers through the rollout engine, as
    `mapo bench eqbench | emobench` gives them; empty `targets`: no benchmarks."""

    __pydantic_config__ = {"extra": "forbid"}  # from_dict: a misspelt field is an error

    targets: list[str] = field(default_factory=list)
    names: list[str] = field(default_factory=lambda: list(BENCHMARK_NAMES))
    data: str = ""  # the authors' files: a folder holding eqbench/ and emobench/
    limit: int | None = None  # the first N items of EQ-Bench and of each EmoBench task
    languages: list[str] = field(default_factory=lambda: ["en"])  # EmoBench languages kept
    emobench_tasks: list[str] = field(default_factory=lambda: ["EA", "EU"])
    batch_size: int = 8
    eqbench_max_tokens: int = 600
    emobench_max_tokens: int = 48
    engine: str = "auto"

    def __post_init__(self) -> None:
        unknown = [n for n in self.names if n not in BENCHMARK_NAMES]
        if unknown:
            raise ValueError(f"benchmarks.names {unknown}: choose from {', '.join(BENCHMARK_NAMES)}")
        if self.limit is not None and self.limit < 1:
            raise ValueError(f"benchmarks.limit must be at least 1 (or None for every item), got {self.limit}")
        if not set(self.emobench_tasks) <= {"EA", "EU"} or not self.emobench_tasks:
            raise ValueError(f"benchmarks.emobench_tasks {self.emobench_tasks}: choose from EA, EU")
        if min(self.batch_size, self.eqbench_max_tokens, self.emobench_max_tokens) < 1:
            raise ValueError("benchmarks.batch_size, eqbench_max_tokens and emobench_max_tokens must be at least 1")
        if self.targets and not self.data:
            raise ValueError("benchmarks need the EQ-Bench / EmoBench files: set benchmarks.data (--bench-data FOLDER)")


@dataclass
class CurveBudget:
    """The held-out curve: every `every` training steps (0: none), a run's checkpoint is kept and
    evaluated on the plan's held-out scenarios with `samples` dialogues each (fewer than the final
    evaluation's: a point of the curve, not the result). Step 0 is the base's evaluation and the
    last step the run's final one."""

    __pydantic_config__ = {"extra": "forbid"}

    every: int = 0
    samples: int = 2

    def __post_init__(self) -> None:
        if self.every < 0 or self.samples < 1:
            raise ValueError(f"curve.every must be >= 0 and curve.samples >= 1, got {self.every} and {self.samples}")

    def steps(self, total: int) -> list[int]:
        """The training steps checked between the start and the last step."""
        return list(range(self.every, total, self.every)) if self.every else []


@dataclass
class AblationPlan:
    """What an ablation runs: variants x seeds, each `steps` of the common training settings, then the
    held-out evaluation and, for the benchmark targets, the outside benchmarks. plan.json holds it."""

    __pydantic_config__ = {"extra": "forbid"}  # from_dict: a misspelt field is an error
    variants: list[str] = field(default_factory=lambda: list(DEFAULT_VARIANTS))
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    steps: int = 10
    train: list[str] = field(default_factory=lambda: list(DEFAULT_TRAIN))  # `--set` for every run
    eval: EvalBudget = field(default_factory=EvalBudget)
    benchmarks: BenchmarkBudget = field(default_factory=BenchmarkBudget)
    curve: CurveBudget = field(default_factory=CurveBudget)  # held-out checks during training (off by default)
    name: str = "default"  # the registered plan it started from (PLANS)

    def __post_init__(self) -> None:
        for name in self.variants:
            if not isinstance(VARIANTS.resolve(name), Variant):
                raise ValueError(f"ablation variant {name!r} names a {type(VARIANTS.resolve(name)).__name__}, not a Variant")
        if not self.variants or not self.seeds:
            raise ValueError("an ablation needs at least one variant and one seed")
        strays = [t for t in self.benchmarks.targets if t != "base" and t not in self.variants]
        if strays:
            raise ValueError(f"benchmarks.targets {strays} are not variants of this plan ({', '.join(self.variants)}) or 'base'")
        if len(set(self.seeds)) != len(self.seeds) or len(set(self.variants)) != len(self.variants):
            raise ValueError(f"duplicate seeds or variants in the plan: seeds {self.seeds}, variants {self.variants}")
        if self.steps < 1:
            raise ValueError(f"steps must be at least 1, got {self.steps}")

    def units(self) -> list[Unit]:
        # seed-major: a study cut short has every variant at its first seeds, which is what pairs by seed
        return [Unit(v, s) for s in self.seeds for v in self.variants]

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def benchmarked(self, unit: Unit | None) -> bool:
        """Whether `unit` (None: the untrained base) runs the outside benchmarks."""
        return (unit.variant if unit is not None else "base") in self.benchmarks.targets

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> AblationPlan:
        """The plan `to_dict` wrote, its types checked (a plan.json older than benchmarks gets none);
        a bad field is a ValueError naming it."""
        from pydantic import TypeAdapter, ValidationError

        from mapo.validation import describe_validation_error

        try:
            return TypeAdapter(cls).validate_python(data)
        except ValidationError as err:
            raise ValueError(f"ablation plan: {describe_validation_error(err)}") from None


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
        *([f"keep_every={plan.curve.every}"] if plan.curve.every else []),  # the held-out curve's checkpoints
        *([f"threads={threads}"] if threads is not None else []),
    ]


def quick_plan() -> AblationPlan:
    """Minutes, not hours: two estimators, two seeds, two steps of tiny rollouts, a short eval."""
    return AblationPlan(
        variants=["mapo-idr", "grpo-idr"],
        seeds=[0, 1],
        steps=2,
        train=list(QUICK_TRAIN),
        eval=EvalBudget(limit=4, max_turns=13, max_new_tokens=24),
        name="quick",
    )


# The learning study (issue #18): long dialogues, whole replies (the default run's 96 tokens and
# 3 sentences, at most 20 % cut), 5 seeds, the same rollout budget for every variant. The batch
# size and steps are provisional until sized by measurement (docs/results.md).
# Sized for 2 shared cores (docs/results.md has the arithmetic): one scenario x 4 dialogues x 6
# turns is 24 replies a step, the default run's count at twice its horizon; 10 steps a run.
STUDY_TRAIN = (
    "rollout.scenarios_per_step=1",
    "rollout.samples_per_scenario=4",
    "rollout.max_turns=6",
    "rollout.max_new_tokens=96",
    "rollout.max_sentences=3",
    "optim.micro_batch_tokens=1024",
    "checkpoint_every=2",
    "transcripts_every=4",
)
STUDY_BENCH_DATA = "../shared/data"  # where this project's checkouts keep the authors' files (--bench-data)


def study_plan() -> AblationPlan:
    """MAPO against GRPO, turn-only and batch-only on IDR, 5 seeds, 6-turn training dialogues;
    held-out eval on the 12 test cards x 2 dialogues at 13 turns; EQ-Bench v2 and EmoBench on
    the base, GRPO and MAPO."""
    return AblationPlan(
        variants=["mapo-idr", "grpo-idr", "turn-idr", "batch-idr"],
        seeds=[0, 1, 2, 3, 4],
        steps=10,
        train=list(STUDY_TRAIN),
        eval=EvalBudget(scenarios="test", samples=2, max_turns=13, max_new_tokens=96, max_sentences=3),
        benchmarks=BenchmarkBudget(targets=["base", "grpo-idr", "mapo-idr"], data=STUDY_BENCH_DATA, limit=20),
        name="study",
    )


# The learning study on the exact game (issue #28): the bundled twenty-questions settings (pool
# 8, 2 secrets x 8 dialogues a step, the game's 7-turn limit, one short question a reply) with
# the still-possible candidates listed after each answer (`show_candidates`: SmolLM2-135M cannot
# keep the answers in mind, docs/games.md), started from a warm start given on the command line
# (`--set policy.model=<mapo sft output>`: SmolLM2 does not play the game zero-shot); held-out
# on the 20 test secrets x 8 dialogues, the optimal and random players beside every evaluation,
# and every 5 steps on 2 dialogues a secret (the held-out curve: where success levels off).
GAME_TRAIN = (
    "env.name=twenty-questions",
    "env.options={pool_size: 8, show_candidates: true}",
    "rollout.scenarios_per_step=2",
    "rollout.samples_per_scenario=8",
    "rollout.max_turns=7",
    "rollout.max_new_tokens=24",
    "rollout.max_sentences=1",
    "checkpoint_every=5",
    "transcripts_every=5",
)


def game_plan() -> AblationPlan:
    """MAPO against GRPO, turn-only, batch-only and RLOO on IDR, and MAPO on the outcome-only
    reward, 5 seeds, on the questioning game from a warm start."""
    return AblationPlan(
        variants=["mapo-idr", "grpo-idr", "turn-idr", "batch-idr", "rloo-idr", "mapo-outcome"],
        seeds=[0, 1, 2, 3, 4],
        steps=30,
        train=list(GAME_TRAIN),
        eval=EvalBudget(env="twenty-questions", env_options={"pool_size": 8, "show_candidates": True}, scenarios="test", samples=8,
                        max_turns=7, max_new_tokens=24, max_sentences=1),
        curve=CurveBudget(every=5, samples=2),
        name="game",
    )


# The game with a lost game scored as no progress (`forfeit_on_failure`): IDR read turn by turn
# pays a wrong guess the candidate it removes, so a blind guess among few candidates out-earns
# a good question (docs/games.md); forfeiting returns the need to its start when the game is
# lost, so a losing dialogue's rewards sum to 0. The same settings as "game" otherwise.
GAME_FORFEIT_OPTIONS = {"pool_size": 8, "show_candidates": True, "forfeit_on_failure": True}


def _with_env_options(train: list[str], options: dict[str, Any]) -> list[str]:
    """The training settings with their `env.options=` setting replaced by `options` (YAML flow)."""
    flow = ", ".join(f"{k}: {str(v).lower() if isinstance(v, bool) else v}" for k, v in options.items())
    return [f"env.options={{{flow}}}" if setting.startswith("env.options=") else setting for setting in train]


def game_forfeit_plan() -> AblationPlan:
    """The game plan's grid (MAPO, GRPO, turn-only, batch-only and RLOO on IDR, MAPO on the outcome)
    and MAPO without the T_min cut (MAPO's cut leaves half the guesses untrained), 5 seeds, on the
    questioning game with lost games forfeited."""
    plan = game_plan()
    plan.variants = ["mapo-idr", "grpo-idr", "mapo_ragged-idr", "turn-idr", "batch-idr", "rloo-idr", "mapo-outcome"]
    plan.train = _with_env_options(plan.train, GAME_FORFEIT_OPTIONS)
    plan.eval.env_options = dict(GAME_FORFEIT_OPTIONS)
    plan.name = "game-forfeit"
    return plan


# The game with a timed-out game forfeited too (`forfeit_on_timeout`): with lost games alone
# forfeited, a policy that narrows the pool to one candidate and never names it keeps 3 of 4 bits,
# and one seed of each estimator learned to (docs/results.md, 2026-11-26); now only a solve pays.
GAME_TIMEOUT_OPTIONS = {**GAME_FORFEIT_OPTIONS, "forfeit_on_timeout": True}


def game_timeout_plan() -> AblationPlan:
    """The game-forfeit plan with a game that runs out of turns unsolved forfeited as a lost one:
    its five IDR variants, 3 seeds."""
    plan = game_forfeit_plan()
    plan.variants, plan.seeds = ["mapo-idr", "grpo-idr", "mapo_ragged-idr", "turn-idr", "batch-idr"], [0, 1, 2]
    plan.train = _with_env_options(plan.train, GAME_TIMEOUT_OPTIONS)
    plan.eval.env_options = dict(GAME_TIMEOUT_OPTIONS)
    plan.name = "game-timeout"
    return plan


# The game with the turn budget shown (`show_turns_left`): with timeouts forfeited, RL learned to
# guess by candidates left alone, at 4 candidates with 6 replies left as with 1 left, since the
# policy could not see the budget (docs/results.md, 2026-11-27); shown, guessing on the last reply
# is learnable (the reference players do it, so a warm start built from their games recorded with
# the budget shown does: docs/games.md) and an early gamble no longer stands in for it.
GAME_TURNS_OPTIONS = {**GAME_TIMEOUT_OPTIONS, "show_turns_left": True}


def game_turns_plan() -> AblationPlan:
    """The game plan's grid and MAPO without the T_min cut, all at learning rate 2e-4 (the steadier
    rate on this game), 5 seeds, on the game-timeout settings with the replies left shown."""
    plan = game_forfeit_plan()
    plan.variants = ["mapo-idr-lr2e-4", "grpo-idr-lr2e-4", "mapo_ragged-idr-lr2e-4", "turn-idr-lr2e-4",
                     "batch-idr-lr2e-4", "rloo-idr-lr2e-4", "mapo-outcome-lr2e-4"]
    plan.train = _with_env_options(plan.train, GAME_TURNS_OPTIONS)
    plan.eval.env_options = dict(GAME_TURNS_OPTIONS)
    plan.name = "game-turns"
    return plan


def game_alpha_plan() -> AblationPlan:
    """The alpha sweep on the game-forfeit settings: MAPO's turn-level share of the mix at 0 (batch
    only), 0.25, 0.5 (MAPO), 0.75 and 1 (turn only), 3 seeds."""
    plan = game_forfeit_plan()
    plan.variants = ["batch-idr", "mapo-a0.25-idr", "mapo-idr", "mapo-a0.75-idr", "turn-idr"]
    plan.seeds = [0, 1, 2]
    plan.name = "game-alpha"
    return plan


def game_turns_alpha_plan() -> AblationPlan:
    """The alpha sweep on the game-turns settings: MAPO's turn-level share of the mix at 0 (batch
    only), 0.25, 0.5 (MAPO), 0.75 and 1 (turn only), at learning rate 2e-4, 3 seeds."""
    plan = game_turns_plan()
    plan.variants = ["batch-idr-lr2e-4", "mapo-a0.25-idr-lr2e-4", "mapo-idr-lr2e-4", "mapo-a0.75-idr-lr2e-4",
                     "turn-idr-lr2e-4"]
    plan.seeds = [0, 1, 2]
    plan.name = "game-turns-alpha"
    return plan


def game_lr_plan() -> AblationPlan:
    """MAPO and GRPO each at learning rates 5e-4 and 2e-4 on the game-forfeit settings, seeds 3-7:
    the rate that suits one estimator's gradients need not suit the other's, so a comparison of
    estimators needs each at more than one (docs/results.md, 2026-11-27)."""
    plan = game_forfeit_plan()
    plan.variants = ["mapo-idr", "grpo-idr", "mapo-idr-lr2e-4", "grpo-idr-lr2e-4"]
    plan.seeds = [3, 4, 5, 6, 7]  # those of the first lr 2e-4 runs, copied in (docs/study/game-lr)
    plan.name = "game-lr"
    return plan


# Empathy from the warm start (issue #28, part 2): MAPO against GRPO from a `mapo sft` checkpoint
# given on the command line (`--set policy.model=<sft output>/final`), 5 seeds, one scenario x 8
# dialogues x 8 turns a step, the default run's whole replies, 30 steps; held-out as the study's
# (12 test cards x 2 dialogues x 13 turns), with a check at steps 10 and 20 on one dialogue a card.
# About 2 CPU-hours a run here: a plan for a GPU.
EMPATHY_WARM_TRAIN = (
    "rollout.scenarios_per_step=1",
    "rollout.samples_per_scenario=8",
    "rollout.max_turns=8",
    "rollout.max_new_tokens=96",
    "rollout.max_sentences=3",
    "optim.micro_batch_tokens=1024",
    "checkpoint_every=2",
    "transcripts_every=5",
)


def empathy_warm_plan() -> AblationPlan:
    """MAPO against GRPO on IDR, 5 seeds, from a supervised warm start on the empathy task."""
    return AblationPlan(
        variants=["mapo-idr", "grpo-idr"],
        seeds=[0, 1, 2, 3, 4],
        steps=30,
        train=list(EMPATHY_WARM_TRAIN),
        eval=EvalBudget(scenarios="test", samples=2, max_turns=13, max_new_tokens=96, max_sentences=3),
        curve=CurveBudget(every=10, samples=1),
        name="empathy-warm",
    )


# Named plans for `mapo ablate --plan NAME`: a factory returning a fresh AblationPlan. Plug-ins:
# `PLANS.add`, an entry point of group "mapo.ablation_plans", or a "package.module:factory" path.
PLANS: Registry[Callable[[], AblationPlan]] = Registry("ablation plan", group="mapo.ablation_plans")
PLANS.add("default", AblationPlan)
PLANS.add("quick", quick_plan)
PLANS.add("study", study_plan)
PLANS.add("game", game_plan)
PLANS.add("game-forfeit", game_forfeit_plan)
PLANS.add("game-timeout", game_timeout_plan)
PLANS.add("game-turns", game_turns_plan)
PLANS.add("game-alpha", game_alpha_plan)
PLANS.add("game-turns-alpha", game_turns_alpha_plan)
PLANS.add("game-lr", game_lr_plan)
PLANS.add("empathy-warm", empathy_warm_plan)


# `--set eval.samples=1`, `--set benchmarks.limit=10`, `--set curve.every=5` change the plan
PLAN_SECTIONS = ("eval", "benchmarks", "curve")


def _set_plan_field(data: dict[str, Any], assignment: str) -> None:
    """Apply `section.field=value` (value as YAML) to a plan's dict; an unknown field is named."""
    import yaml

    key, _, text = assignment.partition("=")
    section, _, name = key.strip().partition(".")
    if name not in data[section]:
        raise ValueError(f"--set {key}: the plan's {section} has no field {name!r}; "
                         f"its fields: {', '.join(data[section])}")
    try:
        data[section][name] = yaml.safe_load(text) if text.strip() else None
    except yaml.YAMLError as err:
        raise ValueError(f"--set {key}: the value {text!r} is not valid YAML ({err})") from None


def plan_for(
    name: str = "default",
    variants: Sequence[str] | None = None,
    seeds: int | Sequence[int] | None = None,
    steps: int | None = None,
    overrides: Sequence[str] = (),
    bench_data: str | None = None,
) -> AblationPlan:
    """`mapo ablate`'s plan from its options: the named plan (PLANS) with the variants, the seeds
    (a number N: 0..N-1; a list: those seeds, e.g. the ones another machine runs), the steps and the benchmark data folder changed; `overrides` starting with
    "eval.", "benchmarks." or "curve." set the plan's fields, the others are training settings for every run.

    The benchmark folder is made absolute here, so plan.json names it wherever a resume runs."""
    made = PLANS.resolve(name)()
    if not isinstance(made, AblationPlan):
        raise ValueError(f"ablation plan {name!r} made a {type(made).__name__}, not an AblationPlan")
    data = made.to_dict()
    data["name"] = name
    if variants:
        data["variants"] = list(variants)
        # a variant left out is not benchmarked either
        data["benchmarks"]["targets"] = [t for t in data["benchmarks"]["targets"] if t == "base" or t in variants]
    if seeds is not None:
        data["seeds"] = list(range(seeds)) if isinstance(seeds, int) else list(seeds)
    if steps is not None:
        data["steps"] = steps
    for assignment in overrides:
        if assignment.partition(".")[0].strip() in PLAN_SECTIONS and "." in assignment.partition("=")[0]:
            _set_plan_field(data, assignment)
        else:
            data["train"].append(assignment)
    if bench_data is not None:
        data["benchmarks"]["data"] = bench_data
    if data["benchmarks"]["data"]:
        data["benchmarks"]["data"] = str(Path(data["benchmarks"]["data"]).expanduser().resolve())
    return AblationPlan.from_dict(data)
