"""`mapo ablate`: train every variant with several seeds under one rollout budget, evaluate all.

A *variant* is a name plus config overrides (`--set` style) on top of the plan's
common training settings; the registry below holds the paper's grid (estimator x
reward) and later options (redundancy reweighting, RAPO) register more. Every run
gets the same budget: steps x scenarios_per_step x samples_per_scenario dialogues.

Layout of an ablation folder:

    <out>/plan.json                   the plan (variants, seeds, budget, eval settings)
    <out>/runs/<variant>-s<seed>/     a training run (mapo.trainer), resumable
    <out>/evals/<variant>-s<seed>/    mapo eval of that run's final policy on held-out scenarios
    <out>/evals/base/                 the untrained base policy, same eval
    <out>/ablation.{md,json,html}     the table: mean and std over seeds per variant
    <out>/curves.png                  reward and pre-clip gradient norm per step, per variant

A finished unit (final/ written and eval.json readable) is skipped on a rerun; a
run killed mid-way continues from its latest checkpoint through the trainer's resume.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

# ---------------------------------------------------------------- the variant registry


@dataclass(frozen=True)
class Variant:
    name: str
    overrides: tuple[str, ...]  # `--set` assignments applied on top of the plan's training settings
    description: str = ""


VARIANTS: dict[str, Variant] = {}


def register_variant(name: str, *overrides: str, description: str = "") -> Variant:
    """Add a variant (a name and its config overrides) to the ablation grid."""
    if name in VARIANTS:
        raise ValueError(f"ablation variant {name!r} is already registered")
    if not name or "/" in name or name == "base":
        raise ValueError(f"ablation variant name {name!r}: must be non-empty, without '/', and not 'base'")
    VARIANTS[name] = Variant(name, tuple(overrides), description)
    return VARIANTS[name]


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


# ---------------------------------------------------------------- the plan

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
        unknown = [v for v in self.variants if v not in VARIANTS]
        if unknown:
            raise ValueError(f"unknown ablation variant(s) {', '.join(unknown)}; registered: {', '.join(VARIANTS)}")
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
        *VARIANTS[unit.variant].overrides,
        f"seed={unit.seed}",
        f"steps={plan.steps}",
        f"name={unit.name}",
        *([f"threads={threads}"] if threads is not None else []),
    ]


# ---------------------------------------------------------------- state on disk


def run_dir(out: Path, unit: Unit) -> Path:
    return out / "runs" / unit.name


def eval_dir(out: Path, name: str) -> Path:
    return out / "evals" / name


def training_state(path: Path, steps: int) -> str:
    """"done" (final weights after `steps`), "partial" (a run folder to resume) or "new"."""
    if not (path / "config.yaml").is_file():
        return "new"
    if (path / "final").is_dir():
        from mapo.run_folder import RunFolder

        logged = [m.get("step", 0) for m in RunFolder(path).read_metrics()]
        if logged and max(logged) >= steps:
            return "done"
    return "partial"


def read_eval(folder: Path) -> dict[str, Any] | None:
    """The eval.json in `folder`, or None when missing or cut short."""
    try:
        return json.loads((folder / "eval.json").read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None


def check_plan(out: Path, plan: AblationPlan) -> None:
    """Write plan.json, or make sure the folder's existing plan is this one (a rerun resumes it)."""
    path = out / "plan.json"
    if path.is_file():
        saved = json.loads(path.read_text(encoding="utf-8"))
        if saved != json.loads(json.dumps(plan.to_dict())):
            raise ValueError(
                f"{out} holds an ablation with a different plan ({path}); rerun with the same options "
                "to resume it, or choose a new --output"
            )
        return
    out.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(plan.to_dict(), indent=2) + "\n", encoding="utf-8")


# ---------------------------------------------------------------- running one unit


def eval_spec(budget: EvalBudget, system_prompt: str | None = None) -> Any:
    from mapo.evaluate.runner import EvalSpec

    spec = EvalSpec(**dataclasses.asdict(budget))  # EvalBudget's fields are a subset of EvalSpec's
    return dataclasses.replace(spec, system_prompt=system_prompt) if system_prompt is not None else spec


def run_unit(out: Path, plan: AblationPlan, unit: Unit | None, threads: int | None,
             extra: Sequence[str] = (), show_progress: bool = True) -> str:
    """Train (or resume) and evaluate one unit; `unit=None` evaluates the untrained base.

    Returns what was done: "skipped", or "trained+evaluated" / "resumed+evaluated" / "evaluated".
    """
    from mapo.evaluate.checkpoints import load_eval_policy
    from mapo.evaluate.runner import run_eval
    from mapo.runtime import configure_threads
    from mapo.trainer import train

    configure_threads(threads)
    if unit is None:
        target = eval_dir(out, "base")
        if read_eval(target) is not None:
            return "skipped"
        from mapo.config import load_config

        config = load_config(None, [*plan.train, *extra])
        if config.policy.lora.enabled:  # the base is the model the adapters start from
            config.policy.lora.enabled = False
        policy = _base_policy(config)
        run_eval(policy, eval_spec(plan.eval, config.rollout.system_prompt), target, "base")
        return "evaluated"
    path = run_dir(out, unit)
    state = training_state(path, plan.steps)
    target = eval_dir(out, unit.name)
    if state == "done" and read_eval(target) is not None:
        return "skipped"
    did = "evaluated"
    if state == "new":
        from mapo.config import load_config

        train(load_config(None, unit_overrides(plan, unit, threads, extra)), output=path, show_progress=show_progress)
        did = "trained+evaluated"
    elif state == "partial":
        train(resume=path, overrides=[f"steps={plan.steps}"], show_progress=show_progress)
        did = "resumed+evaluated"
    from mapo.config import load_config

    trained = load_config(path / "config.yaml")
    policy, _ = load_eval_policy(str(path))
    run_eval(policy, eval_spec(plan.eval, trained.rollout.system_prompt), target, unit.name)
    return did


def _base_policy(config: Any) -> Any:
    from mapo.policy import load_policy

    policy = load_policy(config.policy, seed=config.seed)
    policy.model.eval()
    return policy


def _unit_job(out: str, plan: dict[str, Any], unit: tuple[str, int] | None, threads: int,
              extra: list[str]) -> tuple[str, str]:
    """Process-pool entry point (picklable arguments only); output goes to the unit's log file."""
    import contextlib
    import logging

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    chosen = Unit(*unit) if unit is not None else None
    name = chosen.name if chosen else "base"
    logs = Path(out) / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    with open(logs / f"{name}.log", "a", encoding="utf-8", buffering=1) as handle, \
            contextlib.redirect_stderr(handle), contextlib.redirect_stdout(handle):
        logging.basicConfig(stream=handle, level=logging.INFO, force=True)
        did = run_unit(Path(out), AblationPlan.from_dict(plan), chosen, threads, extra, show_progress=False)
    return name, did


def run_ablation(
    plan: AblationPlan,
    out: str | Path,
    jobs: int = 1,
    extra: Sequence[str] = (),
    on_done: Callable[[str, str], None] | None = None,
) -> Path:
    """Run every unit not finished yet (`jobs` processes at a time), then write the table and curves.

    `extra` are overrides for every run and the base (e.g. policy.model=tiny in tests).
    Each process gets max(1, cores // jobs) torch threads.
    """
    out = Path(out)
    if jobs < 1:
        raise ValueError(f"--jobs must be at least 1, got {jobs}")
    check_plan(out, plan)
    from mapo.config import load_config

    load_config(None, [*plan.train, *extra])  # a bad setting fails before any process starts
    todo: list[Unit | None] = [None, *plan.units()]
    report = on_done or (lambda name, did: None)
    if jobs == 1:
        for unit in todo:
            report(unit.name if unit else "base", run_unit(out, plan, unit, None, extra))
    else:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor, as_completed

        threads = max(1, (os.cpu_count() or 1) // jobs)
        context = multiprocessing.get_context("spawn")  # fresh interpreters: no forked torch thread pools
        with ProcessPoolExecutor(max_workers=jobs, mp_context=context, max_tasks_per_child=1) as pool:
            futures = [
                pool.submit(_unit_job, str(out), plan.to_dict(), (u.variant, u.seed) if u else None, threads, list(extra))
                for u in todo
            ]
            for future in as_completed(futures):
                report(*future.result())
    return write_outputs(out, plan)


# ---------------------------------------------------------------- aggregation

METRICS = (  # (key, column header): held-out evaluation metrics in the table
    ("pass_rate", "pass rate (%)"),
    ("epmq", "EPM-Q"),
    ("return", "mean return (IDR)"),
    ("alignment", "alignment to v*_0"),
)
TRAINING_METRICS = (  # (key, column header): from each run's metrics.jsonl
    ("reward_first", "train reward, first 3 steps"),
    ("reward_last", "train reward, last 3 steps"),
    ("grad_norm_median", "grad norm, median step"),
    ("grad_norm_max", "grad norm, largest step"),
    ("grad_norm_peak_ratio", "largest / median"),
)
PAIRED_REFERENCE = "mapo-idr"


def training_metrics(rows: Sequence[dict[str, Any]]) -> dict[str, float | None]:
    """Reward at the start and end of a run and the spread of its pre-clip gradient norms.

    A step's norm is its largest over optimizer steps (`grad_norm_max`), so a peak inside a
    step is not averaged away; largest / median measures how spiky the run's gradients were.
    """
    rewards = [float(m["reward_mean"]) for m in rows]
    norms = [float(m.get("grad_norm_max", m.get("grad_norm", float("nan")))) for m in rows]
    norms = [n for n in norms if math.isfinite(n)]
    median = float(np.median(norms)) if norms else None
    return {
        "reward_first": float(np.mean(rewards[:3])) if rewards else None,
        "reward_last": float(np.mean(rewards[-3:])) if rewards else None,
        "grad_norm_median": median,
        "grad_norm_max": max(norms) if norms else None,
        "grad_norm_peak_ratio": max(norms) / median if norms and median else None,
    }


def eval_metrics(result: dict[str, Any]) -> dict[str, float | None]:
    """The table's metrics from one eval.json; the return is the held-out IDR return D_0 - D_T."""
    from mapo.rewards import rewards_from_distances

    summary = result["summary"]
    returns = [
        sum(rewards_from_distances(sample["distances"], "idr"))
        for scenario in result["scenarios"]
        for sample in scenario["samples"]
        if len(sample["distances"]) > 1
    ]
    return {
        "pass_rate": 100.0 * summary["pass_rate"],
        "epmq": summary["epmq"]["epmq"] if summary.get("epmq") else None,
        "return": float(np.mean(returns)) if returns else None,
        "alignment": summary["alignment"]["target"],
    }


def dialogue_metrics(result: dict[str, Any]) -> dict[str, dict[str, float | None]]:
    """Per held-out dialogue ("<scenario>#<sample>"): its IDR return D_0 - D_T and its EPM-Q."""
    found = {}
    for scenario in result["scenarios"]:
        for sample in scenario["samples"]:
            distances, epmq = sample["distances"], sample.get("epmq")
            found[f"{scenario['scenario_id']}#{sample['sample_index']}"] = {
                "return": distances[0] - distances[-1] if len(distances) > 1 else None,
                "epmq": epmq["epmq"] if epmq else None,
            }
    return found


def paired_dialogue_rows(
    per_dialogue: dict[str, dict[str, dict[str, float | None]]], plan: AblationPlan, reference: str = PAIRED_REFERENCE
) -> list[dict[str, Any]]:
    """Per variant: the difference to the reference on the same held-out dialogue at the same seed,
    pooled over seeds and dialogues; mean, standard error, t = mean / s.e., and the share worse.

    Dialogues of one run share a policy, so they are not independent draws: t overstates the
    evidence somewhat. It still shows which gaps are far outside the dialogue-to-dialogue noise.
    """
    rows = []
    for variant in ["base", *plan.variants]:
        if variant == reference:
            continue
        stats: dict[str, Any] = {}
        for key in ("return", "epmq"):
            diffs = []
            for seed in plan.seeds:
                mine = per_dialogue.get("base" if variant == "base" else Unit(variant, seed).name)
                theirs = per_dialogue.get(Unit(reference, seed).name)
                if mine is None or theirs is None:
                    continue
                diffs += [mine[d][key] - theirs[d][key] for d in theirs
                          if d in mine and mine[d][key] is not None and theirs[d][key] is not None]
            a = np.asarray(diffs, dtype=float)
            sem = float(a.std(ddof=1) / math.sqrt(a.size)) if a.size > 1 else None
            stats[key] = {"n": int(a.size), "mean": float(a.mean()) if a.size else None, "sem": sem,
                          "t": float(a.mean()) / sem if sem else None,
                          "worse": float(np.mean(a < 0)) if a.size else None}
        rows.append({"variant": variant, **stats})
    return rows


def paired_dialogue_markdown(rows: Sequence[dict[str, Any]], reference: str = PAIRED_REFERENCE) -> str:
    def cell(stat: dict[str, Any], digits: int) -> list[str]:
        if stat["mean"] is None:
            return ["–", "–", "–"]
        sem = "" if stat["sem"] is None else f" ± {stat['sem']:.{digits}f}"
        t = "–" if stat["t"] is None else f"{stat['t']:+.1f}"
        return [f"{stat['mean']:+.{digits}f}{sem}", t, f"{stat['worse']:.0%}"]

    lines = [f"| variant | dialogues | return − {reference} (± s.e.) | t | worse | EPM-Q − {reference} (± s.e.) | t | worse |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for row in rows:
        cells = [row["variant"], str(row["return"]["n"]), *cell(row["return"], 2), *cell(row["epmq"], 1)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def mean_std(values: Sequence[float | None]) -> dict[str, Any]:
    """Mean and sample standard deviation (ddof = 1) over seeds; missing values are left out.

    One value has no spread: std is None. No values: both None.
    """
    kept = [float(v) for v in values if v is not None and math.isfinite(v)]
    if not kept:
        return {"mean": None, "std": None, "n": 0, "values": list(values)}
    a = np.asarray(kept)
    return {
        "mean": float(a.mean()),
        "std": float(a.std(ddof=1)) if a.size > 1 else None,
        "n": int(a.size),
        "values": list(values),
    }


def aggregate_rows(
    per_unit: dict[str, dict[str, float | None]], plan: AblationPlan, metrics: Sequence[tuple[str, str]] = METRICS
) -> list[dict[str, Any]]:
    """One row for the base (if present) and one per variant: each metric's mean/std over the variant's seeds."""
    rows = []
    if "base" in per_unit:
        rows.append({"variant": "base", "seeds": [], "metrics": {k: mean_std([per_unit["base"][k]]) for k, _ in metrics}})
    for variant in plan.variants:
        found = [(s, per_unit[Unit(variant, s).name]) for s in plan.seeds if Unit(variant, s).name in per_unit]
        rows.append(
            {
                "variant": variant,
                "seeds": [s for s, _ in found],
                "metrics": {k: mean_std([m[k] for _, m in found]) for k, _ in metrics},
            }
        )
    return rows


def paired_rows(
    per_unit: dict[str, dict[str, float | None]], plan: AblationPlan, reference: str = PAIRED_REFERENCE
) -> list[dict[str, Any]]:
    """Per variant, each metric minus the reference variant's at the same seed, mean/std over seeds.

    Runs with the same seed share their random streams (scenarios, sampling noise), so the
    paired difference removes the between-seed spread that dominates a 3-seed table.
    """
    rows = []
    for variant in plan.variants:
        if variant == reference:
            continue
        seeds = [s for s in plan.seeds if Unit(variant, s).name in per_unit and Unit(reference, s).name in per_unit]
        diffs = {}
        for key, _ in METRICS:
            pairs = [(per_unit[Unit(variant, s).name][key], per_unit[Unit(reference, s).name][key]) for s in seeds]
            diffs[key] = mean_std([a - b if a is not None and b is not None else None for a, b in pairs])
        rows.append({"variant": variant, "seeds": seeds, "metrics": diffs})
    return rows


def format_cell(stats: dict[str, Any]) -> str:
    if stats["mean"] is None:
        return "–"
    digits = 1 if abs(stats["mean"]) >= 10 else 3
    text = f"{stats['mean']:.{digits}f}"
    return text if stats["std"] is None else f"{text} ± {stats['std']:.{digits}f}"


def to_markdown(rows: Sequence[dict[str, Any]], metrics: Sequence[tuple[str, str]] = METRICS) -> str:
    header = ["variant", "seeds", *(title for _, title in metrics)]
    lines = ["| " + " | ".join(header) + " |", "|---|---:|" + "---:|" * len(metrics)]
    for row in rows:
        seeds = "–" if row["variant"] == "base" else str(len(row["seeds"]))
        cells = [row["variant"], seeds, *(format_cell(row["metrics"][k]) for k, _ in metrics)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def run_metrics(out: Path, plan: AblationPlan) -> dict[Unit, list[dict[str, Any]]]:
    """Each started unit's metrics.jsonl rows, in step order."""
    from mapo.run_folder import RunFolder

    return {
        unit: sorted(RunFolder(run_dir(out, unit)).read_metrics(), key=lambda m: m["step"])
        for unit in plan.units()
        if run_dir(out, unit).is_dir()
    }


def curves(out: Path, plan: AblationPlan) -> dict[str, dict[str, list[list[float]]]]:
    """{variant: {metric: [per-seed series]}} of reward_mean and grad_norm (pre-clip) per step."""
    found: dict[str, dict[str, list[list[float]]]] = {}
    for unit, rows in run_metrics(out, plan).items():
        entry = found.setdefault(unit.variant, {"reward_mean": [], "grad_norm": []})
        for key in entry:
            entry[key].append([float(m.get(key, float("nan"))) for m in rows])
    return found


def plot_curves(series: dict[str, dict[str, list[list[float]]]], path: Path) -> Path | None:
    """One figure, two panels: mean reward and pre-clip gradient norm per step, mean ± std over seeds."""
    if not series:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    figure, panels = plt.subplots(1, 2, figsize=(11, 4), constrained_layout=True)
    titles = {"reward_mean": "mean per-turn reward", "grad_norm": "gradient norm before clipping"}
    # ADR rewards (distances) are an order of magnitude larger than IDR's: their own axis, dashed
    absolute = {v for v in series if v in VARIANTS and "reward.kind=adr" in VARIANTS[v].overrides}
    right = panels[0].twinx() if absolute else None
    handles = []
    for axes_left, key in zip(panels, ("reward_mean", "grad_norm")):
        for index, (variant, metrics) in enumerate(series.items()):
            runs = [r for r in metrics[key] if r]
            if not runs:
                continue
            axes = right if key == "reward_mean" and variant in absolute else axes_left
            width = min(len(r) for r in runs)
            stack = np.asarray([r[:width] for r in runs])
            steps = np.arange(1, width + 1)
            mean = np.nanmean(stack, axis=0)
            style = "--" if variant in absolute else "-"
            (line,) = axes.plot(steps, mean, style, color=f"C{index}", marker="o", markersize=3,
                                label=f"{variant} (n={len(runs)})")
            if key == "reward_mean":
                handles.append(line)
            if len(runs) > 1:
                std = np.nanstd(stack, axis=0, ddof=1)
                axes.fill_between(steps, mean - std, mean + std, color=line.get_color(), alpha=0.15)
        axes_left.set_title(titles[key])
        axes_left.set_xlabel("training step")
        axes_left.xaxis.set_major_locator(MaxNLocator(integer=True))
        axes_left.grid(alpha=0.3)
    if right is not None:
        panels[0].set_ylabel("IDR (solid)")
        right.set_ylabel("ADR (dashed)")
    panels[0].legend(handles=handles, fontsize=8)
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def _html_table(rows: Sequence[dict[str, Any]], metrics: Sequence[tuple[str, str]]) -> str:
    from mapo.evaluate.html import esc

    head = "".join(f"<th>{esc(h)}</th>" for h in ["variant", "seeds", *(t for _, t in metrics)])
    body = "".join(
        "<tr>" + f"<td>{esc(r['variant'])}</td><td class='num'>{len(r['seeds']) or '–'}</td>"
        + "".join(f"<td class='num'>{esc(format_cell(r['metrics'][k]))}</td>" for k, _ in metrics) + "</tr>"
        for r in rows
    )
    return f"<table><tr>{head}</tr>{body}</table>"


def write_outputs(out: Path, plan: AblationPlan) -> Path:
    """ablation.{json,md,html} and curves.png from whatever units have finished."""
    import base64

    from mapo.evaluate.html import esc, page

    per_unit: dict[str, dict[str, float | None]] = {}
    per_dialogue: dict[str, dict[str, dict[str, float | None]]] = {}
    for name in ["base", *(u.name for u in plan.units())]:
        result = read_eval(eval_dir(out, name))
        if result is not None:
            per_unit[name] = eval_metrics(result)
            per_dialogue[name] = dialogue_metrics(result)
    training = {unit.name: training_metrics(rows) for unit, rows in run_metrics(out, plan).items() if rows}
    paired = PAIRED_REFERENCE in plan.variants
    by_dialogue = paired_dialogue_rows(per_dialogue, plan) if paired else []
    tables = [  # (title, rows, metrics)
        ("Held-out evaluation: mean ± sample std over seeds", aggregate_rows(per_unit, plan), METRICS),
        *([(f"Paired with {PAIRED_REFERENCE}: variant minus {PAIRED_REFERENCE} at the same seed, mean ± std",
            paired_rows(per_unit, plan), METRICS)] if paired else []),
        ("Training: per-step reward and pre-clip gradient norm from metrics.jsonl, mean ± std over seeds",
         aggregate_rows(training, plan, TRAINING_METRICS), TRAINING_METRICS),
    ]
    missing = [u.name for u in plan.units() if u.name not in per_unit]
    (out / "ablation.json").write_text(
        json.dumps({"plan": plan.to_dict(), "rows": tables[0][1], "units": per_unit, "training": training,
                    "tables": {title: rows for title, rows, _ in tables}, "paired_by_dialogue": by_dialogue,
                    "missing": missing}, indent=2) + "\n",
        encoding="utf-8",
    )
    markdown = "\n".join(f"### {title}\n\n{to_markdown(rows, metrics)}" for title, rows, metrics in tables)
    dialogue_title = f"Paired by held-out dialogue: variant minus {PAIRED_REFERENCE} on the same scenario at the same seed"
    if by_dialogue:
        markdown += f"\n### {dialogue_title}\n\n{paired_dialogue_markdown(by_dialogue)}"
    (out / "ablation.md").write_text(markdown, encoding="utf-8")
    png = plot_curves(curves(out, plan), out / "curves.png")
    image = ""
    if png is not None:
        encoded = base64.b64encode(png.read_bytes()).decode("ascii")
        image = f"<h2>Training curves</h2><img alt='reward and gradient norm per step' src='data:image/png;base64,{encoded}'>"
    note = f"<p class='meta'>Not finished: {esc(', '.join(missing))}</p>" if missing else ""
    budget = (f"{plan.steps} steps per run; seeds {plan.seeds}; training settings: {', '.join(plan.train)}; "
              f"held-out eval: {json.dumps(dataclasses.asdict(plan.eval))}")
    sections = "".join(f"<h2>{esc(title)}</h2>{_html_table(rows, metrics)}" for title, rows, metrics in tables)
    if by_dialogue:
        sections += f"<h2>{esc(dialogue_title)}</h2><pre>{esc(paired_dialogue_markdown(by_dialogue))}</pre>"
    html = page("mapo ablate", f"<h1>Ablation</h1><p class='meta'>{esc(budget)}</p>{note}{sections}{image}")
    (out / "ablation.html").write_text(html, encoding="utf-8")
    return out / "ablation.md"
