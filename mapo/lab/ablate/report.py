"""The ablation's outputs, from whatever units have finished: ablation.md and ablation.html (the
tables: mean ± std per variant, the differences to mapo-idr (and to any variant named with
--paired-with) with 95 % intervals paired by seed and by dialogue, the reward-hacking monitor,
the outside benchmarks, training; transcript excerpts; the curves), ablation.json (every figure
behind them) and curves.png."""

from __future__ import annotations

import base64
import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from mapo.lab.ablate.benchmarks import BENCH_METRICS, read_bench_metrics
from mapo.lab.ablate.curves import curves, plot_curves, stop_marks
from mapo.lab.ablate.excerpts import EXCERPT_TURNS, excerpt_tables, pick_dialogues, shown_policies
from mapo.lab.ablate.plan import AblationPlan
from mapo.lab.ablate.state import (curve_dir, eval_dir, read_eval, read_transcripts, run_metrics, seed_base_name,
                               stop_point)
from mapo.lab.ablate.stats import (
    GAME_METRICS,
    HACKING_METRICS,
    HELDOUT_SPEED,
    METRICS,
    PAIRED_REFERENCE,
    SPEED_METRICS,
    TRAINING_METRICS,
    aggregate_rows,
    base_name,
    dialogue_metrics,
    eval_metrics,
    half_target,
    heldout_steps_to,
    paired_dialogue_rows,
    paired_rows,
    seed_starts,
    steps_to_half,
    training_metrics,
)
from mapo.lab.ablate.tables import Table, dialogue_table, paired_table, summary_table

STOP_METRICS = (("stop_step", "stopping step"),)
PAIRED_TRAINING = tuple((k, t) for k, t in TRAINING_METRICS if k in ("reward_last", "reward_flatness", "truncated_pct"))
SECONDS = (("train_seconds", "training (sum of step times)"), ("eval_seconds", "held-out eval"),
           ("bench_seconds", "benchmarks"))  # what sizing the plan to a time budget needs


@dataclasses.dataclass
class Measured:
    """What the ablation folder holds so far, keyed by "base" or a unit's name."""

    evals: dict[str, dict[str, float | None]]
    dialogues: dict[str, dict[str, dict[str, float | None]]]
    transcripts: dict[str, list[dict[str, Any]]]
    benchmarks: dict[str, dict[str, float | None]]
    training: dict[str, dict[str, float | None]]
    seconds: dict[str, dict[str, float | None]]  # wall time per unit: training, eval, benchmarks
    references: dict[str, Any] = dataclasses.field(default_factory=dict)  # reference players (the base eval's)
    # the held-out curve (AblationPlan.curve): per unit, {step: held-out success %}, step 0 the base's
    heldout: dict[str, dict[int, float]] = dataclasses.field(default_factory=dict)
    # with a plateau rule (AblationPlan.stop): per stopped unit, (its stopping step, "plateau" or "cap")
    stopped: dict[str, tuple[int, str]] = dataclasses.field(default_factory=dict)

    def per_unit(self) -> dict[str, dict[str, float | None]]:
        """Every figure of each unit in one mapping (what the by-seed pairing reads)."""
        names = {*self.evals, *self.benchmarks, *self.training}
        return {n: {**self.evals.get(n, {}), **self.benchmarks.get(n, {}), **self.training.get(n, {})} for n in names}


def measure(out: Path, plan: AblationPlan) -> Measured:
    found = Measured({}, {}, {}, {}, {}, {})
    for name in ["base", *(seed_base_name(s) for s in plan.seeds), *(u.name for u in plan.units())]:
        result = read_eval(eval_dir(out, name))
        if result is not None:
            found.transcripts[name] = read_transcripts(eval_dir(out, name))
            found.evals[name] = eval_metrics(result, found.transcripts[name])
            found.dialogues[name] = dialogue_metrics(result, found.transcripts[name])
            found.seconds.setdefault(name, {})["eval_seconds"] = result["config"].get("seconds")
            found.references = found.references or dict(result["summary"].get("references") or {})
        bench = read_bench_metrics(out, name, plan.benchmarks) if plan.benchmarks.targets else None
        if bench is not None:
            found.seconds.setdefault(name, {})["bench_seconds"] = bench.pop("bench_seconds")
            found.benchmarks[name] = bench
    success: dict[str, list[float]] = {}  # an environment with a success figure per step (the game's)
    for unit, rows in run_metrics(out, plan).items():
        if rows:
            found.training[unit.name] = training_metrics(rows)
            found.seconds.setdefault(unit.name, {})["train_seconds"] = sum(float(m.get("step_time", 0.0)) for m in rows)
            if "env_success_rate" in rows[0]:
                success[unit.name] = [float(m.get("env_success_rate", 0.0)) for m in rows]
    finals = {name: found.evals.get(name, {}).get("pass_rate") for name in success}
    variant_of = {u.name: u.variant for u in plan.units()}
    for name, steps in steps_to_half(success, finals, plan.steps, variant_of).items():
        found.training[name]["steps_to_half"] = steps
    start = _mean_start(found, plan)
    for name, steps in (steps_to_half(success, finals, plan.steps, variant_of, start) if start is not None else {}).items():
        found.training[name]["steps_to_half_gain"] = steps
    if plan.checked_steps():
        _measure_curve(out, plan, found, start)
    return found


def _mean_start(found: Measured, plan: AblationPlan) -> float | None:
    """The untrained policy's held-out success (%): the base's, or the mean over seeds of each seed's start."""
    starts = seed_starts(found.evals, plan)
    return float(np.mean(list(starts.values()))) if starts else None


def _measure_curve(out: Path, plan: AblationPlan, found: Measured, start: float | None) -> None:
    """The held-out curve of every evaluated unit, and for those whose checks up to it are all there
    (not a run trained before the plan had a curve) the first checked step at half the best gain
    over `start` (`_mean_start`), into `found.heldout` and `found.training`; with a plateau rule,
    where each unit stopped (`found.stopped`, and its step as the training figure `stop_step`)."""
    starts = seed_starts(found.evals, plan)
    checks = plan.checked_steps()
    for unit in plan.units():
        if (stopped := stop_point(out, plan, unit)) is not None and unit.name in found.training:
            found.stopped[unit.name] = stopped
            found.training[unit.name][STOP_METRICS[0][0]] = stopped[0]
        end = found.stopped.get(unit.name, (plan.steps,))[0]  # the final evaluation's step
        points = {step: 100.0 * result["summary"]["pass_rate"] for step in checks
                  if step <= end and (result := read_eval(curve_dir(out, unit.name, step))) is not None}
        final = found.evals.get(unit.name, {}).get("pass_rate")
        if not points and final is None:
            continue
        found.heldout[unit.name] = {**({0: starts[unit.seed]} if unit.seed in starts else {}), **points,
                                    **({end: final} if final is not None else {})}
    variant_of = {u.name: u.variant for u in plan.units()}
    target = half_target({n: found.evals.get(n, {}).get("pass_rate") for n in variant_of}, variant_of, start or 0.0)
    if target is None or not checks:  # no check inside the run: nothing to time
        return
    for name, points in found.heldout.items():
        end = found.stopped.get(name, (plan.steps,))[0]  # a stopped run has no checks after its stop
        if (first := heldout_steps_to(points, target, plan.steps, [s for s in checks if s <= end])) is not None:
            found.training.setdefault(name, {})[HELDOUT_SPEED[0]] = first


def _reference_note(references: dict[str, Any]) -> str:
    """The reference players' figures on the same held-out games, as one sentence."""
    parts = []
    for name, found in sorted(references.items()):
        figures = found.get("figures") or {}
        bits = figures.get("bits_per_question")
        parts.append(f"{name} success {100 * found['pass_rate']:.1f} %" + (f", {bits:.3f} bits per question" if bits is not None else ""))
    return ("Reference players on the same held-out games: " + "; ".join(parts) + ".") if parts else ""


def build_tables(plan: AblationPlan, measured: Measured, paired_with: Sequence[str] = ()) -> list[Table]:
    """The report's tables in reading order (the excerpts apart): the paired ones against mapo-idr,
    then against each variant of `paired_with`."""
    benched = [v for v in plan.variants if v in plan.benchmarks.targets]
    tables = [
        summary_table("Held-out evaluation: mean ± sample std over seeds", aggregate_rows(measured.evals, plan), METRICS),
        summary_table("Reward-hacking monitor on the held-out replies: mean ± sample std over seeds",
                      aggregate_rows(measured.evals, plan, HACKING_METRICS), HACKING_METRICS),
    ]
    if measured.benchmarks:
        rows = aggregate_rows(measured.benchmarks, plan, BENCH_METRICS, benched)
        tables.append(summary_table(f"Outside benchmarks (greedy; first {plan.benchmarks.limit or 'all'} items of each): "
                                    "mean ± sample std over seeds", rows, BENCH_METRICS))
    tables.append(summary_table(
        "Training (metrics.jsonl): mean ± sample std over seeds",
        aggregate_rows(measured.training, plan, TRAINING_METRICS), TRAINING_METRICS,
        "last 3 − previous 3: the mean per-turn training reward of the last 3 steps minus that of the 3 before "
        "(near 0 once training has flattened; – under 6 steps). Replies cut: the share of training replies that hit "
        "the token cap (a long-horizon budget keeps it under 20 %)."))
    if measured.heldout:
        tables.append(_curve_table(plan, measured))
    if plan.stop.every:
        tables.append(_stop_table(plan, measured))
    game = any(m.get("bits_per_question") is not None for m in measured.evals.values())
    speed = _speed_metrics(plan)
    if game:
        tables.append(summary_table("Game figures on the held-out games: mean ± sample std over seeds",
                                    aggregate_rows(measured.evals, plan, GAME_METRICS), GAME_METRICS,
                                    _reference_note(measured.references)))
        censored = [sum(m.get(key, 0) > plan.steps for m in measured.training.values()) for key, _ in speed]
        tables.append(summary_table(
            "Speed of learning: mean ± sample std over seeds", aggregate_rows(measured.training, plan, speed), speed,
            "The first step at which a run's training success (on its own rollouts, trailing mean over 3 steps) "
            "reaches half the best variant's final held-out success (mean over its seeds), or half the way to it from "
            "the untrained policy's held-out success (the gain; from a warm start the first figure can be met at once)"
            + (", and the first held-out check that reaches that gain" if len(speed) > 2 else "")
            + f". A run that never does counts as {plan.steps + 1} (a lower bound; run(s) censored here: "
            f"{', '.join(str(c) for c in censored)})."))
    tables.append(summary_table("Wall time per run on this machine (s): mean ± sample std over seeds",
                                aggregate_rows(measured.seconds, plan, SECONDS), SECONDS))
    for ref in dict.fromkeys([PAIRED_REFERENCE, *paired_with]):
        if ref in plan.variants:
            tables += _paired_tables(plan, measured, ref, game, benched)
    return tables


def _paired_tables(plan: AblationPlan, measured: Measured, ref: str, game: bool, benched: list[str]) -> list[Table]:
    """Every variant (and the base) minus `ref`: by seed (t intervals), then by held-out dialogue."""
    tables = []
    per_unit = measured.per_unit()
    everyone = {"base", *plan.variants}
    by_seed = [  # (title, metrics, the variants that have them)
        (f"Paired by seed with {ref}: held-out evaluation", METRICS, everyone),
        (f"Paired by seed with {ref}: reward-hacking monitor", HACKING_METRICS, everyone),
        *([(f"Paired by seed with {ref}: outside benchmarks", BENCH_METRICS, {"base", *benched})]
          if measured.benchmarks and ref in benched else []),
        *([(f"Paired by seed with {ref}: game figures", GAME_METRICS, everyone),
           (f"Paired by seed with {ref}: speed of learning", _speed_metrics(plan), set(plan.variants))] if game else []),
        (f"Paired by seed with {ref}: training", PAIRED_TRAINING, set(plan.variants)),
    ]
    for title, metrics, having in by_seed:
        rows = [r for r in paired_rows(per_unit, plan, ref, metrics) if r["variant"] in having]
        tables.append(paired_table(title, rows, metrics, ref))
    for title, metrics in ((f"Paired by held-out dialogue with {ref}: held-out evaluation", METRICS),
                           (f"Paired by held-out dialogue with {ref}: reward-hacking monitor (per dialogue)",
                            HACKING_METRICS)):
        tables.append(dialogue_table(title, paired_dialogue_rows(measured.dialogues, plan, ref, metrics), metrics, ref))
    return tables


def _speed_metrics(plan: AblationPlan) -> tuple[tuple[str, str], ...]:
    return (*SPEED_METRICS, HELDOUT_SPEED) if plan.checked_steps() else SPEED_METRICS


def _curve_table(plan: AblationPlan, measured: Measured) -> Table:
    """Held-out success at every check (the base at step 0, the final evaluation at the last step)."""
    checks = [0, *plan.checked_steps(), *([] if plan.stop.every else [plan.steps])]
    metrics = [(f"step_{s}", f"step {s}") for s in checks]
    # step 0 is the start's evaluation: the base row alone carries it
    per_unit = {name: {f"step_{s}": v for s, v in points.items() if s > 0} for name, points in measured.heldout.items()}
    if "base" in measured.evals:
        for name in {"base", *(base_name(s, measured.evals) for s in plan.seeds)}:
            per_unit[name] = {"step_0": measured.evals[name].get("pass_rate")}
    note = (f"Every {plan.curve.every} steps a run's checkpoint plays the held-out scenarios with {plan.curve.samples} "
            f"dialogue(s) each; step 0 is the untrained policy and step {plan.steps} the final evaluation "
            f"({plan.eval.samples} each; a run grown to more steps keeps its earlier final evaluation as that step's check).")
    if plan.stop.every:
        note = (f"Every {plan.stop.every} steps (and at step {plan.steps}) a run's checkpoint plays the held-out evaluation "
                f"({plan.eval.samples} dialogue(s) a scenario) until the plateau rule stops it; step 0 is the untrained "
                "policy; a stopped run has no figures after its stopping step.")
    return summary_table("Held-out success (%) at each check: mean ± sample std over seeds",
                         aggregate_rows(per_unit, plan, metrics), metrics, note)


def _stop_table(plan: AblationPlan, measured: Measured) -> Table:
    """Where the plateau rule stopped each run (AblationPlan.stop), and why."""
    each = ", ".join(f"{name} at {step} ({why})" for name, (step, why) in measured.stopped.items()) or "none yet"
    return summary_table(
        "Stopping step (the plateau rule): mean ± sample std over seeds",
        aggregate_rows(measured.training, plan, STOP_METRICS), STOP_METRICS,
        f"Each run trained in chunks of {plan.stop.every} steps, its checkpoint evaluated held out after each, and "
        f"stopped at the first evaluation where each of the last {plan.stop.patience} gained less than "
        f"{plan.stop.min_gain:g} {plan.stop.metric} over the one before (a drop counts as no gain), or at {plan.steps} "
        f"steps (the cap). Its final policy and evaluation, which the tables above compare, are those of its stopping "
        f"step. Stopped: {each}.")


def _plan_line(plan: AblationPlan) -> str:
    at_most = "at most " if plan.stop.every else ""
    line = (f"{plan.name} plan: {len(plan.variants)} variants x seeds {plan.seeds}, {at_most}{plan.steps} steps per run; "
            f"training settings: {', '.join(plan.train)}; held-out eval: {json.dumps(dataclasses.asdict(plan.eval))}")
    if plan.benchmarks.targets:
        line += f"; benchmarks: {json.dumps(dataclasses.asdict(plan.benchmarks))}"
    if plan.curve.every:
        line += f"; held-out curve: every {plan.curve.every} steps, {plan.curve.samples} dialogue(s) per scenario"
    if plan.stop.every:
        line += f"; plateau rule: evaluated {plan.stop.describe()}"
    return line


def write_outputs(out: Path, plan: AblationPlan, paired_with: Sequence[str] = ()) -> Path:
    """ablation.{json,md,html} and curves.png from whatever units have finished; returns ablation.md.
    `paired_with`: variants to pair every other with, beside mapo-idr."""
    from mapo.report.html import esc, page

    strays = [v for v in paired_with if v not in plan.variants]
    if strays:
        raise ValueError(f"--paired-with {', '.join(strays)}: not a variant of this plan ({', '.join(plan.variants)})")
    measured = measure(out, plan)
    tables = build_tables(plan, measured, paired_with)
    picked = pick_dialogues(measured.dialogues, plan)
    excerpts = excerpt_tables(picked, measured.transcripts, plan)
    missing = [u.name for u in plan.units() if u.name not in measured.evals]
    png = plot_curves(curves(out, plan, measured.heldout), out / "curves.png",  # with a plateau rule: the seeds' range
                      heldout_spread="range" if plan.stop.every else "band", stops=stop_marks(plan, measured.heldout, measured.stopped))
    (out / "ablation.json").write_text(json.dumps({
        "plan": plan.to_dict(),
        "rows": tables[0].data,
        "units": measured.evals,
        "benchmarks": measured.benchmarks,
        "training": measured.training,
        "heldout_curve": measured.heldout,
        "seconds": measured.seconds,
        "tables": {t.title: t.data for t in tables},
        "excerpts": [t.data[0] for t in excerpts],
        "missing": missing,
    }, indent=2) + "\n", encoding="utf-8")

    excerpt_intro = (f"The first {EXCERPT_TURNS} turns of held-out dialogues as {', '.join(shown_policies(plan))} played "
                     f"them (the simulated user answers each policy, so the user turns differ after the first). Picked by "
                     f"rule: among dialogues all of them have, the largest and the smallest EPM-Q gain of "
                     f"{PAIRED_REFERENCE} (first seed) over the base.")
    note = f"Not finished: {', '.join(missing)}" if missing else ""
    markdown = [f"## Ablation\n\n{_plan_line(plan)}\n", *([f"{note}\n"] if note else []), *(t.markdown() for t in tables)]
    if excerpts:
        markdown += [f"### Excerpts\n\n{excerpt_intro}\n", *(t.markdown().replace("### ", "#### ", 1) for t in excerpts)]
    if png is not None:
        markdown.append("### Training curves\n\n![reward and gradient norm per step](curves.png)\n")
    (out / "ablation.md").write_text("\n".join(markdown), encoding="utf-8")

    image = ""
    if png is not None:
        encoded = base64.b64encode(png.read_bytes()).decode("ascii")
        image = f"<h2>Training curves</h2><img alt='reward and gradient norm per step' src='data:image/png;base64,{encoded}'>"
    sections = "".join(t.html() for t in tables)
    if excerpts:
        sections += f"<h2>Excerpts</h2><p class='meta'>{esc(excerpt_intro)}</p>" + "".join(
            t.html().replace("<h2>", "<h3>", 1).replace("</h2>", "</h3>", 1) for t in excerpts)
    meta = f"<p class='meta'>{esc(_plan_line(plan))}</p>" + (f"<p class='meta'>{esc(note)}</p>" if note else "")
    (out / "ablation.html").write_text(page("mapo ablate", f"<h1>Ablation</h1>{meta}{sections}{image}"), encoding="utf-8")
    return out / "ablation.md"
