"""The plateau stopping rule of an ablation plan (AblationPlan.stop, mapo.lab.ablate.plateau): the rule
itself, its report, and a tiny ablation stopped by it, grown, rerun and resumed."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mapo.cli import app
from mapo.lab.ablate import AblationPlan, CurveBudget, PlateauStop, Unit, check_plan, plan_for, run_ablation, run_dir
from mapo.lab.ablate.export import export_ablation
from mapo.lab.ablate.plateau import metric_value, plateaued, stopping_point
from mapo.lab.ablate.report import write_outputs
from mapo.lab.ablate.state import curve_dir, eval_dir, final_step, read_eval, run_metrics, unit_trained
from mapo.run_folder import read_metrics
from toy_plan import toy_plateau_plan

TINY = ["policy.model=tiny", "policy.lora.r=4", "optim.lr=0.01"]


# ---------------------------------------------------------------- the rule


def test_a_plateau_is_patience_evaluations_in_a_row_each_gaining_less_than_min_gain():
    assert not plateaued([0.5, 0.5, 0.5], patience=3, min_gain=0.02)  # 3 evaluations make 2 gains, not 3
    assert plateaued([0.5, 0.5, 0.5, 0.5], patience=3, min_gain=0.02)
    assert plateaued([0.1, 0.5, 0.51, 0.52, 0.53], patience=3, min_gain=0.02)  # only the last 3 gains count
    assert not plateaued([0.5, 0.51, 0.52, 0.60], patience=3, min_gain=0.02)  # the latest gained 8 points
    assert plateaued([0.5, 0.40, 0.30, 0.20], patience=3, min_gain=0.02)  # a drop is no gain
    # a gain of exactly 2 points is not "less than 2", though 0.06 - 0.04 < 0.02 in floating point
    assert 0.06 - 0.04 < 0.02 and not plateaued([0.04, 0.06, 0.08, 0.10], patience=3, min_gain=0.02)
    assert plateaued([0.3, 0.3], patience=1, min_gain=0.02) and not plateaued([0.3], patience=1, min_gain=0.02)


def test_a_unit_stops_at_its_first_plateau_or_at_the_cap():
    stop = PlateauStop(every=10, patience=3, min_gain=0.02)
    assert stop.steps(200)[:3] == [10, 20, 30] and stop.steps(200)[-1] == 200 and len(stop.steps(200)) == 20
    assert stop.steps(25) == [10, 20, 25]  # the cap is always evaluated, a multiple of `every` or not
    assert stopping_point([], stop, 200) is None
    assert stopping_point([0.40, 0.50, 0.60, 0.61], stop, 200) is None  # one gain under 2 points so far
    assert stopping_point([0.40, 0.50, 0.60, 0.61, 0.60, 0.615], stop, 200) == (60, "plateau")
    # the first plateau decides, whatever was evaluated after it (a cap grown afterwards)
    assert stopping_point([0.5, 0.5, 0.5, 0.5, 0.9, 0.95], stop, 200) == (40, "plateau")
    assert stopping_point([0.1, 0.2, 0.3], stop, 25) == (25, "cap")
    assert stopping_point([0.1, 0.2], stop, 25) is None
    assert stopping_point([0.1, 0.1, 0.1, 0.1], stop, 30) == (30, "cap")  # the cap, reached before a plateau could be


def test_the_plateau_rule_is_a_plan_option_set_like_the_others():
    plan = plan_for("game", steps=200, overrides=["curve.every=0", "stop.every=10"])
    assert plan.stop == PlateauStop(every=10, patience=3, min_gain=0.02, metric="pass_rate")
    assert plan.checked_steps() == list(range(10, 201, 10))
    assert AblationPlan.from_dict(json.loads(json.dumps(plan.to_dict()))) == plan
    old = plan.to_dict()
    del old["stop"]  # a plan.json from before the rule: none
    assert AblationPlan.from_dict(old).stop.every == 0
    with pytest.raises(ValueError, match="set curve.every=0"):
        plan_for("game", overrides=["stop.every=10"])  # the game plan's curve and the rule would share folders
    with pytest.raises(ValueError, match="stop.patience"):
        plan_for("quick", overrides=["stop.every=2", "stop.patience=0"])
    with pytest.raises(ValueError, match="has no field 'mingain'"):
        plan_for("quick", overrides=["stop.mingain=0.1"])
    assert metric_value({"summary": {"pass_rate": 0.25, "figures": {"bits": 0.5}}}, "figures.bits") == 0.5
    with pytest.raises(ValueError, match="no such figure"):
        metric_value({"summary": {"pass_rate": 0.25}}, "success_rate")


# ---------------------------------------------------------------- the report of a stopped ablation


def _write_eval(folder: Path, success: float) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    summary = {"dialogues": 0, "pass_rate": success, "epmq": None, "alignment": {"target": None}}
    (folder / "eval.json").write_text(json.dumps({"summary": summary, "scenarios": [], "config": {"seconds": 1.0}}))
    (folder / "transcripts.jsonl").write_text("")


def _write_stopped_ablation(out: Path, successes: dict[str, list[float]], stop: PlateauStop, cap: int) -> AblationPlan:
    """An ablation folder whose units were evaluated at `successes` (in order, every stop.every steps)
    and trained to the step the rule stops them at (the last evaluation's while they train on)."""
    plan = AblationPlan(variants=["mapo-idr", "grpo-idr"], seeds=[0, 1], steps=cap, stop=stop, name="p")
    check_plan(out, plan)
    _write_eval(eval_dir(out, "base"), 0.3)
    for name, values in successes.items():
        for step, success in zip(stop.steps(cap), values):
            _write_eval(curve_dir(out, name, step), success)
        stopped = stopping_point(values, stop, cap)
        trained = stopped[0] if stopped else stop.steps(cap)[len(values) - 1]
        run = out / "runs" / name
        (run / "final").mkdir(parents=True)
        (run / "config.yaml").write_text(f"steps: {trained}\n")
        (run / "metrics.jsonl").write_text("".join(
            json.dumps({"step": k, "reward_mean": 0.1, "grad_norm": 1.0}) + "\n" for k in range(1, trained + 1)))
        if stopped:
            shutil.copy2(curve_dir(out, name, trained) / "eval.json", eval_dir(out, name) / "eval.json")
            shutil.copy2(curve_dir(out, name, trained) / "transcripts.jsonl", eval_dir(out, name) / "transcripts.jsonl")
    return plan


def test_each_unit_is_reported_at_its_own_stopping_step_with_its_held_out_curve(tmp_path):
    stop = PlateauStop(every=2, patience=2, min_gain=0.02)
    plan = _write_stopped_ablation(tmp_path, {
        "mapo-idr-s0": [0.4, 0.6, 0.6, 0.6],  # stops at step 8 (evaluations 3 and 4 gained nothing)
        "mapo-idr-s1": [0.4, 0.5, 0.6, 0.7, 0.8],  # the cap, 10
        "grpo-idr-s0": [0.3, 0.3, 0.3],  # stops at step 6
        "grpo-idr-s1": [0.3, 0.4],  # still training (at step 4 of at most 10)
    }, stop, cap=10)
    units = {u.name: u for u in plan.units()}
    assert [final_step(tmp_path, plan, units[n]) for n in ("mapo-idr-s0", "mapo-idr-s1", "grpo-idr-s0", "grpo-idr-s1")] \
        == [8, 10, 6, 10]
    assert not unit_trained(tmp_path, plan, units["grpo-idr-s1"])
    assert {u.name: len(rows) for u, rows in run_metrics(tmp_path, plan).items()} == \
        {"mapo-idr-s0": 8, "mapo-idr-s1": 10, "grpo-idr-s0": 6}  # the run still training is left out
    markdown = write_outputs(tmp_path, plan).read_text()
    data = json.loads((tmp_path / "ablation.json").read_text())
    assert data["heldout_curve"]["mapo-idr-s0"] == {"0": 30.0, "2": 40.0, "4": 60.0, "6": 60.0, "8": 60.0}
    assert data["heldout_curve"]["grpo-idr-s1"] == {"0": 30.0, "2": 30.0, "4": 40.0}  # no final evaluation yet
    assert data["units"]["mapo-idr-s0"]["pass_rate"] == 60.0 and data["units"]["mapo-idr-s1"]["pass_rate"] == 80.0
    stops = {r["variant"]: r["metrics"]["stop_step"]["values"]
             for r in data["tables"]["Stopping step (the plateau rule): mean ± sample std over seeds"]}
    assert stops == {"mapo-idr": [8, 10], "grpo-idr": [6]}  # grpo-idr-s1 still trains
    assert "Stopped: mapo-idr-s0 at 8 (plateau), grpo-idr-s0 at 6 (plateau), mapo-idr-s1 at 10 (cap)." in markdown
    assert "Not finished: grpo-idr-s1" in markdown and "at most 10 steps per run" in markdown
    assert "plateau rule: evaluated every 2 steps on the held-out evaluation, stopped once 2 in a row" in markdown
    assert (tmp_path / "curves.png").stat().st_size > 0
    # an export takes the stopped units as finished, the one still training not
    _, copied, left = export_ablation(tmp_path, tmp_path / "export")
    assert sorted(copied) == ["grpo-idr-s0", "mapo-idr-s0", "mapo-idr-s1"] and left == ["grpo-idr-s1"]
    rebuilt = write_outputs(tmp_path / "export", plan).read_text()
    assert "Stopped: mapo-idr-s0 at 8 (plateau), grpo-idr-s0 at 6 (plateau), mapo-idr-s1 at 10 (cap)." in rebuilt


# ---------------------------------------------------------------- a tiny ablation stopped by it


@pytest.mark.slow  # 16-32 s: a tiny ablation trained, cut, grown and rerun (CI runs the slow tests)
def test_a_tiny_ablation_stops_at_the_plateau_skips_on_rerun_and_resumes_where_it_was_cut(tmp_path):
    """The toy's held-out success is 0 throughout (2 turns: the empathy task checks success from turn
    12), so with every=1, patience=2 the unit stops at step 3 of at most 6. First run with a cap of 2
    (a run cut there), then grown to 6: it goes on from step 2 and its evaluations are not redone."""
    plan = toy_plateau_plan()
    unit = Unit("mapo-idr", 0)
    run = run_dir(tmp_path, unit)
    done: list[tuple[str, str]] = []
    capped = AblationPlan.from_dict({**plan.to_dict(), "steps": 2})
    run_ablation(capped, tmp_path, extra=TINY, on_done=lambda *a: done.append(a))
    assert done == [("base", "evaluated"), ("mapo-idr-s0", "trained+evaluated+stopped at step 2 (cap)")]
    first = [(curve_dir(tmp_path, "mapo-idr-s0", s) / "eval.json").read_bytes() for s in (1, 2)]

    done.clear()
    run_ablation(plan, tmp_path, extra=TINY, on_done=lambda *a: done.append(a))  # the cap grown to 6
    assert done == [("base", "skipped"), ("mapo-idr-s0", "resumed+evaluated+stopped at step 3 (plateau)")]
    assert [m["step"] for m in read_metrics(run)] == [1, 2, 3]
    assert [(curve_dir(tmp_path, "mapo-idr-s0", s) / "eval.json").read_bytes() for s in (1, 2)] == first
    assert read_eval(eval_dir(tmp_path, "mapo-idr-s0")) == read_eval(curve_dir(tmp_path, "mapo-idr-s0", 3))
    assert [p.name for p in (run / "checkpoints").iterdir()] == ["step-000003"] and (run / "final").is_dir()
    data = json.loads((tmp_path / "ablation.json").read_text())
    assert set(data["heldout_curve"]["mapo-idr-s0"]) == {"0", "1", "2", "3"} and data["missing"] == []
    assert data["training"]["mapo-idr-s0"]["stop_step"] == 3

    done.clear()
    run_ablation(plan, tmp_path, extra=TINY, on_done=lambda *a: done.append(a))
    assert done == [("base", "skipped"), ("mapo-idr-s0", "skipped")]

    # killed during the stopping step's evaluation: only that evaluation is made again, no step trained
    shutil.rmtree(curve_dir(tmp_path, "mapo-idr-s0", 3))
    (eval_dir(tmp_path, "mapo-idr-s0") / "eval.json").unlink()
    done.clear()
    run_ablation(plan, tmp_path, extra=TINY, on_done=lambda *a: done.append(a))
    assert done == [("base", "skipped"), ("mapo-idr-s0", "resumed+evaluated+stopped at step 3 (plateau)")]
    assert [m["step"] for m in read_metrics(run)] == [1, 2, 3]

    (tmp_path / "curves.png").unlink()
    result = CliRunner().invoke(app, ["ablate", "--resume", str(tmp_path), "--report"])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "curves.png").stat().st_size > 0 and "mapo-idr-s0 at 3 (plateau)" in result.output


def test_a_plan_with_the_rule_refuses_a_curve_beside_it():
    with pytest.raises(ValueError, match="curve.every=0"):
        AblationPlan(stop=PlateauStop(every=2), curve=CurveBudget(every=2))


@pytest.mark.slow  # 30 s here: the chunked unit, then the same run uninterrupted (CI runs the slow tests)
def test_a_unit_trained_in_chunks_is_the_run_trained_at_once(tmp_path):
    """Chunk k is a resume with `steps` raised: the same steps, metrics and weights as one run to the
    stopping step (every draw is seeded by step; the RL learning rate has no schedule)."""
    from safetensors.torch import load_file
    import torch

    from mapo.config import load_config
    from mapo.core.trainer import train
    from mapo.lab.ablate import run_unit, unit_overrides
    from mapo.records import RUNTIME_KEYS

    plan = toy_plateau_plan()
    unit = Unit("mapo-idr", 0)
    assert run_unit(tmp_path, plan, unit, None, TINY, show_progress=False) == "trained+evaluated+stopped at step 3 (plateau)"
    whole = train(load_config(None, [*unit_overrides(plan, unit, None, TINY), "steps=3"]), output=tmp_path / "whole",
                  show_progress=False).run_dir
    comparable = lambda run: [{k: v for k, v in m.items() if k not in RUNTIME_KEYS} for m in read_metrics(run)]
    assert comparable(run_dir(tmp_path, unit)) == comparable(whole)
    chunked, at_once = (load_file(run / "final" / "adapter_model.safetensors") for run in (run_dir(tmp_path, unit), whole))
    assert chunked.keys() == at_once.keys() and all(torch.equal(chunked[k], at_once[k]) for k in chunked)


def test_a_unit_given_one_chunk_trains_it_and_says_it_paused(tmp_path):
    from mapo.lab.ablate import run_unit

    plan, unit = toy_plateau_plan(), Unit("mapo-idr", 0)
    assert run_unit(tmp_path, plan, unit, None, TINY, show_progress=False, chunks=1) == "trained+evaluated+paused at step 1"
    assert [m["step"] for m in read_metrics(run_dir(tmp_path, unit))] == [1]
    assert read_eval(eval_dir(tmp_path, "mapo-idr-s0")) is None  # no final evaluation while it trains on
    assert run_unit(tmp_path, plan, unit, None, TINY, show_progress=False, chunks=1) == "resumed+evaluated+paused at step 2"
    assert run_unit(tmp_path, plan, unit, None, TINY, show_progress=False, chunks=1) == "resumed+evaluated+stopped at step 3 (plateau)"
    assert read_eval(eval_dir(tmp_path, "mapo-idr-s0")) == read_eval(curve_dir(tmp_path, "mapo-idr-s0", 3))


def test_a_resumed_chunk_runs_on_the_threads_it_is_given_not_its_first_chunks(tmp_path):
    import torch

    from mapo.lab.ablate import run_unit

    plan, unit, before = toy_plateau_plan(), Unit("mapo-idr", 0), torch.get_num_threads()
    try:
        run_unit(tmp_path, plan, unit, 1, TINY, show_progress=False, chunks=1)
        run_unit(tmp_path, plan, unit, 2, TINY, show_progress=False, chunks=1)  # resumed with --jobs 1 on 2 cores
    finally:
        torch.set_num_threads(before)
    lines = (run_dir(tmp_path, unit) / "provenance.jsonl").read_text().splitlines()
    assert [json.loads(line)["machine"]["torch_threads"] for line in lines][-2:] == [1, 2]


@pytest.mark.slow  # about a minute: a worker process a chunk (CI runs the slow tests)
@pytest.mark.parametrize("jobs", [2, 1])  # one job: what `mapo ablate --jobs 1` does for a plateau plan
def test_an_ablation_in_processes_trains_each_chunk_in_a_fresh_one_to_the_same_plateau(tmp_path, jobs):
    done: list[tuple[str, str]] = []
    run_ablation(toy_plateau_plan(), tmp_path, jobs=jobs, extra=TINY, on_done=lambda *a: done.append(a), processes=True)
    assert sorted(done) == [("base", "evaluated"), ("mapo-idr-s0", "resumed+evaluated+stopped at step 3 (plateau)")]
    run = run_dir(tmp_path, Unit("mapo-idr", 0))
    assert [m["step"] for m in read_metrics(run)] == [1, 2, 3]
    log = (tmp_path / "logs" / "mapo-idr-s0.log").read_text()
    assert log.count("torch threads:") == 3  # three chunks, three trainer starts
