"""The ablation folder on disk: where each unit's run and evaluation live, how far they got,
and the plan.json that makes a rerun resume the same plan.

    <out>/plan.json                   the plan (variants, seeds, budget, eval settings)
    <out>/runs/<variant>-s<seed>/     a training run (mapo.core.trainer), resumable
    <out>/evals/<variant>-s<seed>/    mapo eval of that run's final policy on held-out scenarios
    <out>/evals/base/                 the untrained base policy, same eval
    <out>/evals/base-s<seed>/         an export's: the start of that seed's runs, where it is not evals/base
                                      (a share of the study run from another warm start)
    <out>/evals/<unit>/bench/<name>/  the outside benchmark <name> on that policy (mapo bench's results folder)
    <out>/evals/<unit>/curve/step-N/  the held-out check of the run's checkpoint at step N (AblationPlan.curve,
                                      or the evaluations of the plateau rule, AblationPlan.stop)
    <out>/logs/<unit>.log             a unit's output when run in a worker process
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mapo.lab.ablate.plan import AblationPlan, Unit
from mapo.lab.ablate.plateau import metric_value, stopping_point
from mapo.run_folder import read_metrics
from mapo.validation import compressed_or_plain, intact_records, text_of

EVAL = "eval.json"
ARCHIVED_EVAL = f"{EVAL}.gz"  # an exported evaluation, finished when compressed
TRANSCRIPTS = "transcripts.jsonl"


def run_dir(out: Path, unit: Unit) -> Path:
    return out / "runs" / unit.name


def eval_dir(out: Path, name: str) -> Path:
    return out / "evals" / name


def seed_base_name(seed: int) -> str:
    """The evaluation of the policy `seed`'s runs started from, where an export holds it apart from
    the base (`mapo.lab.ablate.export`)."""
    return f"base-s{seed}"


def curve_dir(out: Path, name: str, step: int) -> Path:
    """Where the held-out check of a unit's checkpoint at `step` goes (AblationPlan.curve)."""
    return eval_dir(out, name) / "curve" / f"step-{step:06d}"


def last_logged_step(path: Path) -> int:
    """The last training step in the run's metrics.jsonl (0 before the first)."""
    return max((m.get("step", 0) for m in read_metrics(path)), default=0)


def training_state(path: Path, steps: int) -> str:
    """"done" (final weights after `steps`), "partial" (a run folder to resume) or "new"."""
    if not (path / "config.yaml").is_file():
        return "new"
    if (path / "final").is_dir() and last_logged_step(path) >= steps:
        return "done"
    return "partial"


def plateau_values(out: Path, plan: AblationPlan, unit: Unit) -> list[float]:
    """The plateau rule's figure (AblationPlan.stop) of each of the unit's held-out evaluations so far,
    in step order up to the first one missing."""
    values = []
    for step in plan.stop.steps(plan.steps):
        if (result := read_eval(curve_dir(out, unit.name, step))) is None:
            break
        values.append(metric_value(result, plan.stop.metric))
    return values


def stop_point(out: Path, plan: AblationPlan, unit: Unit) -> tuple[int, str] | None:
    """With a plateau rule, (the step the unit stopped at, "plateau" or "cap"); None while it trains
    on, or without a rule."""
    return stopping_point(plateau_values(out, plan, unit), plan.stop, plan.steps) if plan.stop.every else None


def final_step(out: Path, plan: AblationPlan, unit: Unit) -> int:
    """The step the unit's run ends at: the plan's steps, or with a plateau rule the step it stopped
    at (the plan's steps while it trains on)."""
    stopped = stop_point(out, plan, unit)
    return stopped[0] if stopped else plan.steps


def unit_trained(out: Path, plan: AblationPlan, unit: Unit) -> bool:
    """Whether the unit's run has its final weights: after all its steps, or where it stopped."""
    return training_state(run_dir(out, unit), final_step(out, plan, unit)) == "done"


def unchecked_steps(out: Path, plan: AblationPlan, unit: Unit) -> list[int]:
    """The held-out curve's steps whose checkpoint the unit's run kept but no check has evaluated
    yet: the runner checks them after the final evaluation, so a unit can be evaluated, not done."""
    from mapo.run_folder import RunFolder

    run = RunFolder(run_dir(out, unit))
    return [s for s in plan.curve.steps(plan.steps)
            if run.checkpoint_dir(s).is_dir() and read_eval(curve_dir(out, unit.name, s)) is None]


def bench_dir(out: Path, name: str, benchmark: str) -> Path:
    return eval_dir(out, name) / "bench" / benchmark


def _read_json(path: Path) -> dict[str, Any] | None:
    """A JSON file (or, named so, its .gz); None when missing, cut short or not JSON."""
    try:
        return json.loads(text_of(path))
    except (OSError, EOFError, UnicodeDecodeError, json.JSONDecodeError):
        return None


def _json_lines(path: Path) -> list[dict[str, Any]] | None:
    """The records of a .jsonl (or .jsonl.gz) file we wrote (None when missing or unreadable); a
    line cut short is left out."""
    try:
        return intact_records(path, "records")
    except ValueError:
        return None


def _complete(summary_file: Path, lines_file: Path, expected: Callable[[dict[str, Any]], Any]) -> dict[str, Any] | None:
    """`summary_file`'s data when `lines_file` (written after it) holds the `expected(data)` records."""
    data = _read_json(summary_file)
    records = _json_lines(lines_file)
    if not isinstance(data, dict) or records is None:
        return None
    try:
        return data if len(records) == expected(data) else None
    except (KeyError, TypeError):
        return None


def read_eval(folder: Path) -> dict[str, Any] | None:
    """The eval.json in `folder`, or None: missing, cut short, or its transcripts.jsonl (written
    after it) does not hold every dialogue. An archived evaluation (eval.json.gz: `mapo ablate
    --export` compresses only finished ones) is complete by itself; the transcripts of a held-out
    curve's checks are not kept there."""
    packed = folder / ARCHIVED_EVAL
    if packed.is_file():
        return _read_json(packed)
    return _complete(folder / EVAL, compressed_or_plain(folder, TRANSCRIPTS), lambda d: d["summary"]["dialogues"])


def read_transcripts(folder: Path) -> list[dict[str, Any]]:
    """An eval's dialogues (transcripts.jsonl), [] when it has none."""
    return _json_lines(compressed_or_plain(folder, TRANSCRIPTS)) or []


def read_bench(folder: Path) -> dict[str, Any] | None:
    """A finished benchmark's results.json, or None: missing, cut short, or its predictions.jsonl
    (written after it) does not hold every item."""
    return _complete(folder / "results.json", folder / "predictions.jsonl", lambda d: d["config"]["items"])


def check_plan(out: Path, plan: AblationPlan) -> None:
    """Write plan.json, or make sure the folder's existing plan is this one (a rerun resumes it) or
    grows it: the same settings with more variants, seeds or steps, so a study run first on a subset
    (`--variant`, `--seeds`) is completed in the same folder and reported as one, and runs whose
    held-out curve has not levelled off train on from their last checkpoint (`--steps`)."""
    path = out / "plan.json"
    if path.is_file():
        # compared as plans, not text (a plan.json from before a field existed holds its default),
        # and without the name, a label: the same settings are the same plan
        saved = {**read_plan(out).to_dict(), "name": plan.name}
        if saved == plan.to_dict():
            return
        wanted = plan.to_dict()
        grown = ("variants", "seeds", "steps")
        grows = (set(saved["variants"]) <= set(wanted["variants"]) and set(saved["seeds"]) <= set(wanted["seeds"])
                 and saved["steps"] <= wanted["steps"]
                 and {**saved, **dict.fromkeys(grown)} == {**wanted, **dict.fromkeys(grown)})
        if not grows:
            raise ValueError(
                f"{out} holds an ablation with a different plan ({path}); rerun with the same options "
                "to resume it (more variants, seeds or steps with the same settings grow it), or choose a new --output"
            )
    out.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(plan.to_dict(), indent=2) + "\n", encoding="utf-8")


def read_plan(out: Path) -> AblationPlan:
    """The plan of an existing ablation folder (`mapo ablate --resume`); a broken plan.json is named."""
    path = out / "plan.json"
    try:
        return AblationPlan.from_dict(json.loads(path.read_text(encoding="utf-8")))
    except json.JSONDecodeError as err:
        raise ValueError(f"{path}: not valid JSON ({err})") from None
    except (ValueError, TypeError) as err:
        raise ValueError(f"{path}: not an ablation plan ({err})") from None


def run_metrics(out: Path, plan: AblationPlan) -> dict[Unit, list[dict[str, Any]]]:
    """Each finished unit's metrics.jsonl rows, in step order (a unit the plateau rule stopped: up to
    its stopping step). A run still training is left out: the first steps of a seed being grown would
    skew every mean over seeds (tables and curves)."""
    return {
        unit: sorted(read_metrics(run_dir(out, unit)), key=lambda m: m["step"])
        for unit in plan.units()
        if unit_trained(out, plan, unit)
    }
