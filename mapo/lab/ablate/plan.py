"""The ablation's plan: the common training settings, the held-out evaluation budget, the units
(variant x seed) the plan runs, and the named plans a user starts from (default, quick, and the
game and empathy templates). The dated research plans of this project's studies live with their
experiments (`experiments/<study>/plan.py` in a mapo checkout); their names still resolve there
(`MOVED_PLANS`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mapo.lab.ablate.plateau import PlateauStop
from mapo.lab.ablate.variants import DEFAULT_VARIANTS, VARIANTS, Variant
from mapo.registry import Registry, RegistryError




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
    engine: str = "auto"  # what samples the replies: auto | hf | vllm (mapo.engines)


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
    """What an ablation runs: variants x seeds, each `steps` of the common training settings (with
    `stop`, at most `steps`: mapo.lab.ablate.plateau), then the held-out evaluation and, for the benchmark
    targets, the outside benchmarks. plan.json holds it."""

    __pydantic_config__ = {"extra": "forbid"}  # from_dict: a misspelt field is an error
    variants: list[str] = field(default_factory=lambda: list(DEFAULT_VARIANTS))
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    steps: int = 10
    train: list[str] = field(default_factory=lambda: list(DEFAULT_TRAIN))  # `--set` for every run
    eval: EvalBudget = field(default_factory=EvalBudget)
    benchmarks: BenchmarkBudget = field(default_factory=BenchmarkBudget)
    curve: CurveBudget = field(default_factory=CurveBudget)  # held-out checks during training (off by default)
    stop: PlateauStop = field(default_factory=PlateauStop)  # stop where held-out success levels off (off by default)
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
        if self.stop.every and self.curve.every:  # both would write evals/<unit>/curve/step-N
            raise ValueError("the plateau rule's evaluations are the held-out curve: set curve.every=0 with stop.every")

    def checked_steps(self) -> list[int]:
        """The steps inside a run evaluated held out: the curve's checks or the plateau rule's evaluations."""
        return self.stop.steps(self.steps) if self.stop.every else self.curve.steps(self.steps)

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


# The questioning game template: the bundled twenty-questions settings (pool 8, 2 secrets x 8
# dialogues a step, the game's 7-turn limit, one short question a reply) with the still-possible
# candidates listed after each answer (`show_candidates`: a 135M policy cannot keep the answers in
# mind, docs/games.md), started from a warm start given on the command line (`--set
# policy.model=<mapo sft output>`: SmolLM2 does not play the game zero-shot); held-out on the 20
# test secrets x 8 dialogues, the optimal and random players beside every evaluation, and every 5
# steps on 2 dialogues a secret (the held-out curve: where success levels off).
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


def options_override(options: dict[str, Any]) -> str:
    """`env.options=` as a `--set` override: the options in YAML flow ({pool_size: 8, view: state})."""
    flow = ", ".join(f"{k}: {str(v).lower() if isinstance(v, bool) else v}" for k, v in options.items())
    return f"env.options={{{flow}}}"


def questioning_plan(name: str, options: dict[str, Any], replies: int, warm_start: str, variants: Sequence[str],
                      seeds: Sequence[int], steps: int, transcripts_every: int = 5,
                      curve: CurveBudget | None = None, stop: PlateauStop | None = None) -> AblationPlan:
    """A study of the questioning game at one setting (`options`, `replies` a game) from `warm_start`:
    2 scenarios x 8 games a step with one short question or guess a reply, held out on the test secrets
    x 8 games at the same setting. The experiments' plans (experiments/game_*/plan.py) are built here."""
    train = [
        "env.name=twenty-questions",
        options_override(options),
        "rollout.scenarios_per_step=2",
        "rollout.samples_per_scenario=8",
        f"rollout.max_turns={replies}",
        "rollout.max_new_tokens=24",
        "rollout.max_sentences=1",
        "checkpoint_every=5",
        f"transcripts_every={transcripts_every}",
        f"policy.model={warm_start}",
    ]
    evaluation = EvalBudget(env="twenty-questions", env_options=dict(options), scenarios="test", samples=8,
                            max_turns=replies, max_new_tokens=24, max_sentences=1)
    return AblationPlan(variants=list(variants), seeds=list(seeds), steps=steps, train=train, eval=evaluation,
                        curve=curve or CurveBudget(), stop=stop or PlateauStop(), name=name)


def with_env_options(plan: AblationPlan, options: dict[str, Any], name: str) -> AblationPlan:
    """`plan` renamed `name`, training and evaluated on the environment `options` (its training
    settings' `env.options=` replaced by them, in YAML flow): the game template under other rules."""
    train = [options_override(options) if setting.startswith("env.options=") else setting for setting in plan.train]
    return dataclasses.replace(plan, train=train, eval=dataclasses.replace(plan.eval, env_options=dict(options)), name=name)


# The empathy template from a supervised warm start (`--set policy.model=<mapo sft output>/final`):
# MAPO against GRPO, 5 seeds, one scenario x 8 dialogues x 8 turns a step, the default run's whole
# replies, 30 steps; held-out on the 12 test cards x 2 dialogues x 13 turns, with a check at steps 10
# and 20 on one dialogue a card. About 2 CPU-hours a run on 2 cores: a plan for a GPU.
EMPATHY_TRAIN = (
    "rollout.scenarios_per_step=1",
    "rollout.samples_per_scenario=8",
    "rollout.max_turns=8",
    "rollout.max_new_tokens=96",
    "rollout.max_sentences=3",
    "optim.micro_batch_tokens=1024",
    "checkpoint_every=2",
    "transcripts_every=5",
)


def empathy_plan() -> AblationPlan:
    """MAPO against GRPO on IDR, 5 seeds, from a supervised warm start on the empathy task."""
    return AblationPlan(
        variants=["mapo-idr", "grpo-idr"],
        seeds=[0, 1, 2, 3, 4],
        steps=30,
        train=list(EMPATHY_TRAIN),
        eval=EvalBudget(scenarios="test", samples=2, max_turns=13, max_new_tokens=96, max_sentences=3),
        curve=CurveBudget(every=10, samples=1),
        name="empathy",
    )


# This project's studies' plans, moved beside their experiments: `--plan NAME` imports them from a
# mapo checkout's root (the current folder is searched as `python -m` would, mapo.registry).
MOVED_PLANS = {
    "study": "experiments.empathy_study.plan:study_plan",
    "empathy-warm": "experiments.empathy_warm.plan:empathy_warm_plan",
    "game-forfeit": "experiments.game_forfeit.plan:game_forfeit_plan",
    "game-alpha": "experiments.game_forfeit.plan:game_alpha_plan",
    "game-lr": "experiments.game_forfeit.plan:game_lr_plan",
    "game-timeout": "experiments.game_timeout.plan:game_timeout_plan",
    "game-turns": "experiments.game_turns.plan:game_turns_plan",
    "game-turns-alpha": "experiments.game_turns.plan:game_turns_alpha_plan",
}

# Named plans for `mapo ablate --plan NAME`: a factory returning a fresh AblationPlan. Plug-ins:
# `PLANS.add`, an entry point of group "mapo.ablation_plans", or a "package.module:factory" path.
PLANS: Registry[Callable[[], AblationPlan]] = Registry("ablation plan", group="mapo.ablation_plans", builtins=MOVED_PLANS)
PLANS.add("default", AblationPlan)
PLANS.add("quick", quick_plan)
PLANS.add("game", game_plan)
PLANS.add("empathy", empathy_plan)


def named_plan(name: str) -> AblationPlan:
    """A fresh plan from the factory `name` resolves to; a moved study plan that cannot be imported
    (mapo run outside a checkout) says where it lives now."""
    try:
        factory = PLANS.resolve(name)
    except RegistryError as err:
        if name not in MOVED_PLANS:
            raise
        module = MOVED_PLANS[name].partition(":")[0]
        raise RegistryError(f"ablation plan {name!r} moved to {module.replace('.', '/')}.py in a mapo checkout: "
                            f"run mapo from the checkout's root ({err})") from None
    made = factory()
    if not isinstance(made, AblationPlan):
        raise ValueError(f"ablation plan {name!r} made a {type(made).__name__}, not an AblationPlan")
    return made


# `--set eval.samples=1`, `--set benchmarks.limit=10`, `--set curve.every=5`, `--set stop.every=10` change the plan
PLAN_SECTIONS = ("eval", "benchmarks", "curve", "stop")


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
    "eval.", "benchmarks.", "curve." or "stop." set the plan's fields, the others are training settings for every run.

    The benchmark folder is made absolute here, so plan.json names it wherever a resume runs."""
    data = named_plan(name).to_dict()
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
