"""An ablation's results without its weights: a folder small enough to commit beside a write-up,
and the way to put together the shares of one study run in several folders or on several machines
(`mapo ablate --resume SRC --export DEST`, once per share). `mapo ablate --resume DEST --report`
reads it like the original, so the tables, intervals and curves can be rebuilt by anyone after the
checkpoints are gone.

Kept: plan.json, each finished run's config.yaml, metrics.jsonl, training transcripts and
provenance, each evaluation folder (the held-out evaluation with its transcripts, the curve's
checks, benchmarks), with every eval.json, metrics.jsonl and transcripts.jsonl gzip-compressed
(under a tenth of the size; the report, `mapo compare` and `mapo report` read either). Left out:
checkpoints, final weights, logs, the transcripts' HTML viewers, and the transcripts of the
held-out curve's checks (the curve reads only their eval.json; an eval.json.gz counts as finished
without its transcripts, `state.read_eval`).
A share that started from another policy than the export's base (its base evaluation differs) brings
that evaluation as `evals/base-s<seed>` for each of its seeds: the report pairs every seed with its
own start.
A run's final/ holds only `WEIGHTS_LEFT_OUT`, so the report counts the run as finished; training
refuses an export (there is nothing to resume from).
"""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

from mapo.lab.ablate.plan import AblationPlan, Unit
from mapo.lab.ablate.state import (EVAL, TRANSCRIPTS, curve_dir, eval_dir, read_eval, read_plan, run_dir, seed_base_name,
                               unchecked_steps, unit_trained)
from mapo.run_folder import METRICS

EXPORT_MARK = "exported.json"  # at the export's root: where each share came from
WEIGHTS_LEFT_OUT = "WEIGHTS_LEFT_OUT"
RUN_FILES = ("config.yaml", METRICS, f"{METRICS}.gz", TRANSCRIPTS, f"{TRANSCRIPTS}.gz", "provenance.jsonl", "sft.json")
EVAL_VIEWS = ("transcripts.html",)  # a viewer of transcripts.jsonl, which is kept
SHARED = ("variants", "seeds")  # what the shares of one study may differ in


def is_export(folder: Path) -> bool:
    return (folder / EXPORT_MARK).is_file()


def merged_plan(saved: AblationPlan, share: AblationPlan) -> AblationPlan:
    """One plan for two shares of a study: their variants and seeds together; every other setting
    (steps included: a run of other length is another study) must be the same."""
    a, b = saved.to_dict(), share.to_dict()
    differ = sorted(k for k in a if k not in (*SHARED, "name") and a[k] != b[k])
    if differ:
        raise ValueError(f"the export holds a study with other settings ({', '.join(differ)} differ); "
                         "choose another export folder")
    return AblationPlan.from_dict({
        **a,
        "variants": a["variants"] + [v for v in b["variants"] if v not in a["variants"]],
        "seeds": sorted({*a["seeds"], *b["seeds"]}),
    })


def export_ablation(source: Path, target: Path) -> tuple[AblationPlan, list[str], list[str]]:
    """Copy `source`'s finished units and its base evaluation (`_place_bases`) into `target`,
    merging the plans. Returns the merged plan, the units copied and the units left out
    (not finished: still training, not evaluated, or with held-out checks to come)."""
    if source.resolve() == target.resolve():
        raise ValueError(f"--export {target}: give a folder other than the ablation itself")
    share = plan = read_plan(source)
    if (target / "plan.json").is_file():
        if not is_export(target):
            raise ValueError(f"{target} is an ablation, not an export: choose a new or an exported folder")
        plan = merged_plan(read_plan(target), plan)
    ready, left = [], []
    for unit in share.units():
        if (not unit_trained(source, share, unit) or read_eval(eval_dir(source, unit.name)) is None
                or unchecked_steps(source, share, unit)):
            left.append(unit.name)
        else:
            ready.append(unit)
    target.mkdir(parents=True, exist_ok=True)
    _place_bases(source, target, plan, ready)
    for unit in ready:
        run = run_dir(source, unit)
        dest = run_dir(target, unit)
        shutil.rmtree(dest, ignore_errors=True)
        (dest / "final").mkdir(parents=True)
        for name in RUN_FILES:
            if (run / name).is_file():
                shutil.copy2(run / name, dest / name)
        _compress(dest / METRICS)
        _compress(dest / TRANSCRIPTS)
        (dest / "final" / WEIGHTS_LEFT_OUT).write_text(f"exported from {run.resolve()}\n", encoding="utf-8")
        _copy_eval(source, target, unit.name)
    copied = [u.name for u in ready]
    marks = json.loads((target / EXPORT_MARK).read_text(encoding="utf-8")) if is_export(target) else {"shares": []}
    origin = str(source.resolve())
    # a share is recorded once for what it brought first: a study re-exports its folder whenever a unit ends
    known = {name for share_mark in marks["shares"] if share_mark["source"] == origin for name in share_mark["units"]}
    if brought := [name for name in copied if name not in known]:
        marks["shares"].append({"source": origin, "units": brought})
    (target / EXPORT_MARK).write_text(json.dumps(marks, indent=2) + "\n", encoding="utf-8")
    (target / "plan.json").write_text(json.dumps(plan.to_dict(), indent=2) + "\n", encoding="utf-8")
    return plan, copied, left


def _place_bases(source: Path, target: Path, plan: AblationPlan, ready: list[Unit]) -> None:
    """Keep the start of every seed `ready` brings: the share's base evaluation becomes the
    export's base when it has none; a share whose base evaluated otherwise (another warm start, as
    when a study outlives a machine) keeps it as `base-s<seed>` for each of its seeds, so the report
    pairs each seed with the policy its runs started from. A seed whose runs in the export started
    from another policy than this share's is refused: a pair by seed needs one start."""
    theirs = read_eval(eval_dir(source, "base"))
    ours = read_eval(eval_dir(target, "base"))
    if theirs is None or ours is None:
        if ours is None and theirs is not None:
            _copy_eval(source, target, "base")
        return
    names = {u.name for u in ready}
    for seed in sorted({u.seed for u in ready}):
        apart = eval_dir(target, seed_base_name(seed))
        held = read_eval(apart) or ours
        staying = [u.name for u in plan.units() if u.seed == seed and u.name not in names and run_dir(target, u).is_dir()]
        if staying and held["summary"] != theirs["summary"]:
            raise ValueError(f"seed {seed}: {', '.join(staying)} in {target} started from another policy than "
                             f"{source}'s runs (their base evaluations differ); a pair by seed needs one start: "
                             "export this share to another folder")
        if theirs["summary"] != ours["summary"]:
            if held is ours or held["summary"] != theirs["summary"]:  # the same evaluation is not rewritten
                _copy_eval(source, target, "base", seed_base_name(seed))
        elif apart.is_dir():
            shutil.rmtree(apart)


def _copy_eval(source: Path, target: Path, name: str, as_name: str | None = None) -> None:
    dest = eval_dir(target, as_name or name)
    shutil.rmtree(dest, ignore_errors=True)
    shutil.copytree(eval_dir(source, name), dest, ignore=shutil.ignore_patterns(*EVAL_VIEWS))
    checks = curve_dir(target, as_name or name, 0).parent  # the held-out curve's: it reads their eval.json alone
    for transcripts in checks.glob(f"step-*/{TRANSCRIPTS}*"):
        transcripts.unlink()
    for written in [*dest.rglob(EVAL), *dest.rglob(TRANSCRIPTS)]:  # the held-out evaluation's and the checks'
        _compress(written)


def _compress(path: Path) -> None:
    """Replace `path` by `path`.gz; the same bytes for the same text (no time stamp), so a re-export
    of an unchanged study changes nothing in git."""
    if path.is_file():
        path.with_name(path.name + ".gz").write_bytes(gzip.compress(path.read_bytes(), compresslevel=9, mtime=0))
        path.unlink()
