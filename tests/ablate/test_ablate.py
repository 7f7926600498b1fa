"""mapo.lab.ablate and `mapo ablate`: the variant grid, mean/std over seeds, skip and resume."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mapo.cli import app
from mapo.config import load_config
from mapo.lab.ablate import (
    DEFAULT_VARIANTS,
    VARIANTS,
    AblationPlan,
    CurveBudget,
    EvalBudget,
    Unit,
    aggregate_rows,
    check_plan,
    eval_metrics,
    dialogue_metrics,
    mean_std,
    paired_dialogue_rows,
    paired_rows,
    quick_plan,
    register_variant,
    run_ablation,
    run_dir,
    to_markdown,
    training_metrics,
    training_state,
    unit_overrides,
)
from mapo.lab.ablate.curves import curves
from mapo.lab.ablate.report import measure, write_outputs
from mapo.lab.ablate.runner import AblationStopped
from mapo.lab.ablate.state import curve_dir, eval_dir, last_logged_step, read_eval, read_plan
from mapo.lab.ablate.stats import GAME_METRICS, HACKING_METRICS, steps_to_half, steps_to_reach
from mapo.lab.ablate.tables import dialogue_table, paired_table

TINY = ["policy.model=tiny", "policy.lora.r=4", "optim.lr=0.01"]


# ---------------------------------------------------------------- the grid


def test_the_default_grid_covers_every_estimator_with_idr_and_mapo_with_both_rewards():
    plan = AblationPlan()
    pairs = set()
    for name in plan.variants:
        config = load_config(None, unit_overrides(plan, Unit(name, 0), threads=1))
        pairs.add((config.advantage.estimator, config.reward.kind))
    for estimator in ("mapo", "turn", "batch", "grpo", "reinforce_pp"):
        assert (estimator, "idr") in pairs
    assert ("mapo", "adr") in pairs
    assert len(plan.seeds) >= 3 and set(plan.variants) == set(DEFAULT_VARIANTS)


def test_every_run_of_a_plan_gets_the_same_rollout_budget_and_its_own_seed():
    plan = AblationPlan()
    configs = [load_config(None, unit_overrides(plan, u, threads=1)) for u in plan.units()]
    budgets = {(c.steps, c.rollout.scenarios_per_step, c.rollout.samples_per_scenario, c.rollout.max_turns) for c in configs}
    assert len(budgets) == 1
    assert sorted({c.seed for c in configs}) == plan.seeds
    assert len(configs) == len(plan.variants) * len(plan.seeds)


def test_variants_register_once_and_plans_reject_unknown_names():
    with pytest.raises(ValueError, match="already registered"):
        register_variant("mapo-idr", "advantage.estimator=mapo")
    with pytest.raises(ValueError, match="not 'base'"):
        register_variant("base")
    with pytest.raises(ValueError, match="unknown ablation variant.*rapo-idr"):
        AblationPlan(variants=["rapo-idr"])
    with pytest.raises(ValueError, match="duplicate"):
        AblationPlan(seeds=[0, 0])
    assert quick_plan().units() and all(u.variant in VARIANTS for u in quick_plan().units())


def test_a_plan_round_trips_through_json():
    plan = quick_plan()
    assert AblationPlan.from_dict(json.loads(json.dumps(plan.to_dict()))) == plan


# ---------------------------------------------------------------- aggregation maths


def test_mean_and_sample_std_over_seeds():
    stats = mean_std([1.0, 2.0, 3.0, None])
    assert stats["mean"] == pytest.approx(2.0) and stats["std"] == pytest.approx(1.0) and stats["n"] == 3
    assert mean_std([4.0])["std"] is None and mean_std([4.0])["mean"] == 4.0
    empty = mean_std([None, float("nan")])
    assert empty["mean"] is None and empty["std"] is None and empty["n"] == 0


def test_rows_aggregate_each_variant_over_its_seeds_and_the_base_alone():
    plan = AblationPlan(variants=["mapo-idr", "grpo-idr"], seeds=[0, 1])
    units = {
        "base": {"pass_rate": 0.0, "epmq": 10.0, "return": 0.5, "alignment": 0.0},
        "mapo-idr-s0": {"pass_rate": 50.0, "epmq": 30.0, "return": 2.0, "alignment": 0.2},
        "mapo-idr-s1": {"pass_rate": 25.0, "epmq": 40.0, "return": 4.0, "alignment": None},
        "grpo-idr-s0": {"pass_rate": 0.0, "epmq": None, "return": 1.0, "alignment": -0.1},
    }
    rows = {r["variant"]: r for r in aggregate_rows(units, plan)}
    mapo = rows["mapo-idr"]["metrics"]
    assert mapo["pass_rate"]["mean"] == pytest.approx(37.5)
    assert mapo["pass_rate"]["std"] == pytest.approx(17.677669, rel=1e-6)  # |50-25| / sqrt(2)
    assert mapo["return"]["mean"] == pytest.approx(3.0) and mapo["return"]["std"] == pytest.approx(2 ** 0.5)
    assert rows["grpo-idr"]["seeds"] == [0] and rows["grpo-idr"]["metrics"]["epmq"]["mean"] is None
    assert rows["base"]["metrics"]["epmq"]["mean"] == 10.0
    table = to_markdown(list(rows.values()))
    # a figure one seed's evaluation lacks is the other seed's alone, and says so
    assert "| mapo-idr | 2 | 37.5 ± 17.7 | 35.0 ± 7.1 | 3.000 ± 1.414 | 0.200 (1 of 2 seeds) |" in table
    assert "| grpo-idr | 1 | 0.000 | – | 1.000 | -0.100 |" in table


def test_paired_rows_subtract_the_reference_at_the_same_seed():
    plan = AblationPlan(variants=["mapo-idr", "grpo-idr"], seeds=[0, 1, 2])
    metric = lambda epmq: {"pass_rate": 0.0, "epmq": epmq, "return": None, "alignment": 0.0}
    units = {"mapo-idr-s0": metric(30.0), "mapo-idr-s1": metric(40.0), "mapo-idr-s2": metric(35.0),
             "grpo-idr-s0": metric(28.0), "grpo-idr-s1": metric(37.0)}  # seed 2 of grpo is missing
    (row,) = paired_rows(units, plan)
    assert row["variant"] == "grpo-idr" and row["seeds"] == [0, 1]
    epmq = row["metrics"]["epmq"]
    assert epmq["mean"] == pytest.approx(-2.5) and epmq["std"] == pytest.approx(0.5 ** 0.5)
    half = 12.706204736174694 * 0.5 ** 0.5 / 2 ** 0.5  # t(0.975, df 1) * s / sqrt(n)
    assert epmq["low"] == pytest.approx(-2.5 - half) and epmq["high"] == pytest.approx(-2.5 + half)
    assert epmq["worse"] == 1.0
    assert row["metrics"]["return"]["mean"] is None and row["metrics"]["return"]["low"] is None
    # the table says at how many paired seeds the variant was worse (what "ahead at k of n" reads)
    cells = paired_table("t", [row], [("epmq", "EPM-Q"), ("return", "return")]).rows[0]
    assert cells[2].endswith(" (2 of 2 worse)") and cells[3] == "–"
    units["grpo-idr-s2"] = {"reward_last": 0.5}  # a run still going: training figures, no evaluation
    (row,) = paired_rows(units, plan)
    assert row["seeds"] == [0, 1] and row["metrics"]["epmq"]["n"] == 2


def test_dialogues_pair_on_scenario_and_seed_and_the_base_pairs_with_every_seed():
    plan = AblationPlan(variants=["mapo-idr", "grpo-idr"], seeds=[0, 1])

    def result(returns, epmqs):
        return {"scenarios": [{"scenario_id": sid, "samples": [{"sample_index": 0, "distances": [10.0, 10.0 - r],
                                                                  "epmq": {"epmq": e}, "outcome": "timeout",
                                                                  "alignment": {"target": 0.1}}]}
                              for sid, r, e in zip(("a", "b"), returns, epmqs)]}

    per_dialogue = {
        "base": dialogue_metrics(result([0.0, 0.0], [20.0, 20.0])),
        "mapo-idr-s0": dialogue_metrics(result([2.0, 4.0], [30.0, 30.0])),
        "mapo-idr-s1": dialogue_metrics(result([1.0, 1.0], [25.0, 35.0])),
        "grpo-idr-s0": dialogue_metrics(result([1.0, 5.0], [28.0, 31.0])),  # grpo seed 1 missing
    }
    assert per_dialogue["mapo-idr-s0"]["b#0"]["return"] == 4.0 and per_dialogue["mapo-idr-s0"]["b#0"]["epmq"] == 30.0
    assert per_dialogue["mapo-idr-s0"]["b#0"]["pass_rate"] == 0.0 and per_dialogue["base"]["a#0"]["hack_echo"] is None
    rows = {r["variant"]: r for r in paired_dialogue_rows(per_dialogue, plan)}
    grpo = rows["grpo-idr"]["return"]
    assert grpo["n"] == 2 and grpo["seeds"] == 1 and grpo["mean"] == pytest.approx(0.0) and grpo["worse"] == 0.5
    assert grpo["low"] is None  # one seed: no cluster-aware interval
    base = rows["base"]["return"]  # the one base eval against each seed's mapo-idr: 4 pairs
    assert base["n"] == 4 and base["seeds"] == 2 and base["mean"] == pytest.approx(-2.0) and base["worse"] == 1.0
    assert -4.0 <= base["low"] < base["mean"] < base["high"] <= -1.0  # differences -2, -4, -1, -1
    table = dialogue_table("t", list(rows.values()), [("return", "return")]).markdown()
    assert "| grpo-idr | 1 / 2 | +0.000 (50% worse) |" in table


def test_training_metrics_take_reward_ends_and_the_gradient_norm_spread():
    rows = [{"step": k + 1, "reward_mean": r, "grad_norm": 9.0, "grad_norm_max": g}
            for k, (r, g) in enumerate(zip([-1.0, -0.5, 0.0, 0.5, 1.0], [1.0, 2.0, 8.0, 2.0, 3.0]))]
    got = training_metrics(rows)
    assert got["reward_first"] == pytest.approx(-0.5) and got["reward_last"] == pytest.approx(0.5)
    assert got["grad_norm_median"] == 2.0 and got["grad_norm_max"] == 8.0 and got["grad_norm_peak_ratio"] == 4.0
    assert training_metrics([])["grad_norm_max"] is None


def test_eval_metrics_reads_pass_rate_epmq_alignment_and_the_held_out_return():
    result = {
        "summary": {"pass_rate": 0.25, "epmq": {"epmq": 42.0}, "alignment": {"target": 0.1}},
        "scenarios": [
            {"samples": [{"distances": [5.0, 4.0, 2.0]}, {"distances": [3.0, 3.5]}]},
            {"samples": [{"distances": [1.0]}]},  # no turn: no return
        ],
    }
    metrics = eval_metrics(result)
    assert metrics == {"pass_rate": 25.0, "epmq": 42.0, "return": pytest.approx((3.0 - 0.5) / 2), "alignment": 0.1,
                       **{key: None for key, _ in HACKING_METRICS},  # an eval.json older than the monitor
                       **{key: None for key, _ in GAME_METRICS}}  # an environment without figures of its own
    result["summary"]["figures"] = {"bits_per_question": 0.5, "repeat_rate": 0.1, "invalid_rate": 0.0, "wrong_guesses": 0.25}
    # an eval.json from before a figure existed: that one is missing, the others are read
    assert {k: eval_metrics(result)[k] for k, _ in GAME_METRICS} == {**result["summary"]["figures"],
                                                                     "early_guesses": None, "stalled_turns": None}
    # a monitor figure the eval.json lacks comes from its transcripts; one it has is kept as written
    result["summary"]["hacking"] = {"hack_echo": 0.5}
    transcripts = [{"turns": [{"user": "Hi.", "response": "What would you say to her?"},
                              {"user": "Not much.", "response": "What would you say to him?"}]}]
    metrics = eval_metrics(result, transcripts)
    assert metrics["hack_echo"] == 0.5 and metrics["hack_reask"] == 0.5 and metrics["hack_fragment"] == 0.0


def test_steps_to_half_reads_a_trailing_mean_against_the_best_variants_final_success():
    assert steps_to_reach([0.0, 1.0, 0.0, 0.0, 0.9, 0.9], 0.4) == 6  # step 2 alone is a lucky step: 1/3 < 0.4
    assert steps_to_reach([0.0, 0.1], 0.5) is None
    success = {"mapo-idr-s0": [0.0, 0.2, 0.4, 0.4], "grpo-idr-s0": [0.0, 0.0, 0.0, 0.1], "mapo-idr-s1": [0.3, 0.3, 0.3, 0.3]}
    finals = {"mapo-idr-s0": 60.0, "mapo-idr-s1": 40.0, "grpo-idr-s0": 10.0}  # mapo's mean 50 % is the best: target 0.25
    variant_of = {"mapo-idr-s0": "mapo-idr", "mapo-idr-s1": "mapo-idr", "grpo-idr-s0": "grpo-idr"}
    assert steps_to_half(success, finals, 4, variant_of) == {"mapo-idr-s0": 4.0, "grpo-idr-s0": 5.0, "mapo-idr-s1": 3.0}
    assert steps_to_half(success, {}, 4, variant_of) == {}
    # half the gain from a 10 % start to the best 50 %: target 0.30
    assert steps_to_half(success, finals, 4, variant_of, start=10.0) == {"mapo-idr-s0": 4.0, "grpo-idr-s0": 5.0, "mapo-idr-s1": 3.0}
    assert steps_to_half(success, finals, 4, variant_of, start=60.0) == {}  # nothing beat the start: no target


GAME_FINALS = {"base": 20.0, "mapo-idr-s0": 50.0, "mapo-idr-s1": 30.0, "grpo-idr-s0": 20.0, "grpo-idr-s1": 10.0}


def write_game_ablation(tmp_path: Path, finals: dict[str, float]) -> AblationPlan:
    """A game ablation's folder with the given units finished (held-out success in %)."""
    plan = AblationPlan(variants=["mapo-idr", "grpo-idr"], seeds=[0, 1], steps=3, name="g")
    for name, success in finals.items():
        folder = tmp_path / "evals" / name
        folder.mkdir(parents=True)
        summary = {"dialogues": 0, "pass_rate": success / 100, "epmq": None, "alignment": {"target": None},
                   "figures": {"bits_per_question": success / 100, "repeat_rate": 0.0, "invalid_rate": 0.0, "wrong_guesses": 0.1}}
        if name == "base":
            summary["references"] = {"player:optimal": {"pass_rate": 1.0, "figures": {"bits_per_question": 0.984}}}
        (folder / "eval.json").write_text(json.dumps({"summary": summary, "scenarios": [], "config": {"seconds": 1.0}}))
        (folder / "transcripts.jsonl").write_text("")
        if name != "base":
            run = tmp_path / "runs" / name
            run.mkdir(parents=True)
            (run / "config.yaml").write_text("steps: 3\n")
            (run / "final").mkdir()
            rate = success / 100
            (run / "metrics.jsonl").write_text("".join(
                json.dumps({"step": k + 1, "reward_mean": 0.1, "grad_norm": 1.0, "env_success_rate": rate * k / 2}) + "\n"
                for k in range(3)))
    return plan


def test_a_game_ablation_reports_game_figures_speed_and_a_success_curve(tmp_path):
    plan = write_game_ablation(tmp_path, GAME_FINALS)
    markdown = write_outputs(tmp_path, plan).read_text()
    assert "Game figures on the held-out games" in markdown and "player:optimal success 100.0 %, 0.984 bits" in markdown
    speed = json.loads((tmp_path / "ablation.json").read_text())["tables"]["Speed of learning: mean ± sample std over seeds"]
    # target: half of mapo's 40 % = 0.2; mapo-s0 reaches it at step 3 (mean of 0, .25, .5), the others never (4)
    assert [r["metrics"]["steps_to_half"]["values"] for r in speed] == [[3.0, 4.0], [4.0, 4.0]]
    # half the gain from base's 20 % to 40 %: target 0.30, which no run's trailing mean meets (all censored)
    assert [r["metrics"]["steps_to_half_gain"]["values"] for r in speed] == [[4.0, 4.0], [4.0, 4.0]]
    assert "(a lower bound; run(s) censored here: 3, 4)" in markdown
    assert "Paired by seed with mapo-idr: speed of learning" in markdown and (tmp_path / "curves.png").stat().st_size > 0
    from PIL import Image

    assert Image.open(tmp_path / "curves.png").mode == "P"  # 256 colours: a third of the size a study commits


def test_a_run_still_training_is_left_out_of_the_training_figures_and_curves(tmp_path):
    plan = write_game_ablation(tmp_path, GAME_FINALS)
    plan.seeds = [0, 1, 2]
    partial = tmp_path / "runs" / "mapo-idr-s2"  # one step of three, no final weights: a run being grown
    partial.mkdir()
    (partial / "config.yaml").write_text("steps: 3\n")
    (partial / "metrics.jsonl").write_text(json.dumps({"step": 1, "reward_mean": 9.0, "grad_norm": 1.0,
                                                       "env_success_rate": 1.0, "step_time": 500.0}) + '\n{"step": 2, "rew')
    markdown = write_outputs(tmp_path, plan).read_text()
    assert last_logged_step(partial) == 1  # its last line cut short by a kill; what `--resume` reads
    tables = json.loads((tmp_path / "ablation.json").read_text())["tables"]
    training = {r["variant"]: r for r in tables["Training (metrics.jsonl): mean ± sample std over seeds"]}
    assert training["mapo-idr"]["seeds"] == [0, 1] and 9.0 not in training["mapo-idr"]["metrics"]["reward_last"]["values"]
    speed = {r["variant"]: r for r in tables["Speed of learning: mean ± sample std over seeds"]}
    assert len(speed["mapo-idr"]["metrics"]["steps_to_half"]["values"]) == 2
    assert "Not finished: mapo-idr-s2" in markdown
    assert [len(series) for series in curves(tmp_path, plan)["mapo-idr"]["reward_mean"]] == [3, 3]  # nor in curves.png


def test_the_held_out_curve_is_tabled_plotted_and_timed_from_its_checks(tmp_path):
    plan = write_game_ablation(tmp_path, GAME_FINALS)
    plan.curve = CurveBudget(every=1, samples=2)  # checks at steps 1 and 2 of 3
    checks = {("mapo-idr-s0", 1): 20.0, ("mapo-idr-s0", 2): 40.0, ("mapo-idr-s1", 1): 40.0,
              ("grpo-idr-s0", 1): 10.0, ("grpo-idr-s0", 2): 10.0}  # mapo-idr-s1 step 2 never checked (a cut run)
    for (name, step), success in checks.items():
        folder = curve_dir(tmp_path, name, step)
        folder.mkdir(parents=True)
        summary = {"dialogues": 0, "pass_rate": success / 100, "epmq": None, "alignment": {"target": None}}
        (folder / "eval.json").write_text(json.dumps({"summary": summary, "scenarios": [], "config": {"seconds": 1.0}}))
        (folder / "transcripts.jsonl").write_text("")
    markdown = write_outputs(tmp_path, plan).read_text()
    data = json.loads((tmp_path / "ablation.json").read_text())
    assert data["heldout_curve"]["mapo-idr-s0"] == {"0": 20.0, "1": 20.0, "2": 40.0, "3": 50.0}
    rows = {r["variant"]: r for r in data["tables"]["Held-out success (%) at each check: mean ± sample std over seeds"]}
    assert rows["base"]["metrics"]["step_0"]["mean"] == 20.0 and rows["base"]["metrics"]["step_1"]["n"] == 0
    assert rows["mapo-idr"]["metrics"]["step_1"]["values"] == [20.0, 40.0]
    assert rows["mapo-idr"]["metrics"]["step_2"]["values"] == [40.0, None]
    assert rows["grpo-idr"]["metrics"]["step_3"]["values"] == [20.0, 10.0]
    # half the gain from 20 % to mapo's 40 %: 30 %; mapo-s0 first at step 2, mapo-s1 at 1 (its missing
    # check comes after), grpo-s0 never (4); grpo-s1 had no check (a run from before the curve): no
    # figure, not its final's
    speed = {r["variant"]: r for r in data["tables"]["Speed of learning: mean ± sample std over seeds"]}
    assert speed["mapo-idr"]["metrics"]["heldout_steps_to_half_gain"]["values"] == [2.0, 1.0]
    assert speed["grpo-idr"]["metrics"]["heldout_steps_to_half_gain"]["values"] == [4.0, None]
    assert "held-out curve: every 1 steps, 2 dialogue(s) per scenario" in markdown
    assert "held-out checks: first step at half the best gain" in markdown


def test_a_held_out_crossing_after_a_missing_check_is_not_known():
    from mapo.lab.ablate.stats import heldout_steps_to

    assert heldout_steps_to({0: 20.0, 5: 25.0, 10: 35.0, 15: 50.0}, 30.0, 15, [5, 10]) == 10.0
    assert heldout_steps_to({0: 20.0, 5: 35.0, 15: 50.0}, 30.0, 15, [5, 10]) == 5.0  # the gap is after it
    # a run with only its last checkpoint checked (trained before the curve) reaches 30 % at step 10
    # or earlier: when is not known, so no figure rather than a late one
    assert heldout_steps_to({0: 20.0, 10: 35.0, 15: 50.0}, 30.0, 15, [5, 10]) is None
    assert heldout_steps_to({0: 20.0, 15: 50.0}, 30.0, 15, [5, 10]) is None
    assert heldout_steps_to({0: 20.0, 5: 25.0, 10: 20.0, 15: 25.0}, 30.0, 15, [5, 10]) == 16.0  # never: censored


def test_checkpoints_at_multiples_of_keep_every_outlive_the_newest_kept(tmp_path):
    from mapo.run_folder import RunFolder

    run = RunFolder(tmp_path)
    for step in range(1, 8):
        run.save_checkpoint(step, lambda folder: (folder / "w").write_text("x"), keep=2, keep_every=3)
    assert [p.name for p in run.list_checkpoints()] == ["step-000003", "step-000006", "step-000007"]
    run.save_checkpoint(8, lambda folder: None, keep=1)  # without keep_every only the newest stays
    assert [p.name for p in run.list_checkpoints()] == ["step-000008"]


# ---------------------------------------------------------------- state on disk, skip and resume


def test_training_state_tells_new_partial_and_done_runs_apart(tmp_path):
    run = tmp_path / "r"
    assert training_state(run, 2) == "new"
    run.mkdir()
    (run / "config.yaml").write_text("steps: 2\n")
    assert training_state(run, 2) == "partial"
    (run / "metrics.jsonl").write_text('{"step": 1}\n{"step": 2}\n')
    assert training_state(run, 2) == "partial"  # no final weights yet
    (run / "final").mkdir()
    assert training_state(run, 2) == "done"
    assert training_state(run, 3) == "partial"  # more steps asked than were run


def test_a_folder_refuses_a_different_plan(tmp_path):
    check_plan(tmp_path, quick_plan())
    check_plan(tmp_path, quick_plan())  # the same plan: fine (a rerun)
    with pytest.raises(ValueError, match="different plan"):
        check_plan(tmp_path, AblationPlan(variants=["mapo-idr"], seeds=[0], steps=1))
    # the same settings with more variants and seeds grow the folder's plan; fewer do not
    grown = quick_plan()
    grown.variants, grown.seeds = [*grown.variants, "turn-idr"], [0, 1, 2]
    check_plan(tmp_path, grown)
    assert json.loads((tmp_path / "plan.json").read_text())["seeds"] == [0, 1, 2]
    assert [u.name for u in grown.units()][:3] == ["mapo-idr-s0", "grpo-idr-s0", "turn-idr-s0"]  # seed-major
    with pytest.raises(ValueError, match="different plan"):
        check_plan(tmp_path, quick_plan())


@pytest.mark.slow  # about 45 s on the shared 2-core machine: three tiny ablation passes with evals
def test_a_tiny_ablation_runs_skips_finished_units_and_resumes_a_cut_run(tmp_path):
    plan = AblationPlan(
        variants=["mapo-idr"],
        seeds=[0],
        steps=2,
        train=["rollout.scenarios_per_step=1", "rollout.samples_per_scenario=2", "rollout.max_turns=2",
               "rollout.max_new_tokens=4", "checkpoint_every=1", "transcripts_every=0"],
        eval=EvalBudget(limit=1, max_turns=2, max_new_tokens=4),
    )
    done: list[tuple[str, str]] = []
    md = run_ablation(plan, tmp_path, extra=TINY, on_done=lambda *a: done.append(a))
    assert done == [("base", "evaluated"), ("mapo-idr-s0", "trained+evaluated")]
    data = json.loads((tmp_path / "ablation.json").read_text())
    assert [r["variant"] for r in data["rows"]] == ["base", "mapo-idr"] and data["missing"] == []
    assert (tmp_path / "curves.png").stat().st_size > 0 and "mapo-idr" in md.read_text()

    done.clear()
    run_ablation(plan, tmp_path, extra=TINY, on_done=lambda *a: done.append(a))
    assert done == [("base", "skipped"), ("mapo-idr-s0", "skipped")]

    # cut the run after step 1: drop the final weights, the step-2 checkpoint and the eval
    run = run_dir(tmp_path, Unit("mapo-idr", 0))
    shutil.rmtree(run / "final")
    shutil.rmtree(run / "checkpoints" / "step-000002")
    shutil.rmtree(tmp_path / "evals" / "mapo-idr-s0")
    done.clear()
    run_ablation(plan, tmp_path, extra=TINY, on_done=lambda *a: done.append(a))
    assert done == [("base", "skipped"), ("mapo-idr-s0", "resumed+evaluated")]
    steps = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2]


@pytest.mark.slow  # 24 s with one job, a minute with two worker processes (CI runs the slow tests)
@pytest.mark.parametrize("jobs", [1, 2])
def test_a_failing_unit_is_reported_at_once_and_the_others_still_run(tmp_path, jobs):
    """One unit's run folder is corrupt (a real failure, no mock): the ablation says so when it happens,
    runs the other units, writes their tables, and ends with an error naming the unit and how to
    resume (it used to stop a serial ablation at once, and a parallel one only after every unit)."""
    plan = AblationPlan(
        variants=["mapo-idr"],
        seeds=[0, 1],
        steps=1,
        train=["rollout.scenarios_per_step=1", "rollout.samples_per_scenario=2", "rollout.max_turns=2",
               "rollout.max_new_tokens=4", "transcripts_every=0"],
        eval=EvalBudget(limit=1, max_turns=2, max_new_tokens=4),
    )
    broken = run_dir(tmp_path, Unit("mapo-idr", 0))
    broken.mkdir(parents=True)
    (broken / "config.yaml").write_text("steps: [1\n")  # a run cut while its config was written, say
    done: list[tuple[str, str]] = []
    with pytest.raises(AblationStopped) as raised:
        run_ablation(plan, tmp_path, jobs=jobs, extra=TINY, on_done=lambda *a: done.append(a))
    outcome = dict(done)
    assert outcome["mapo-idr-s0"].startswith("failed (") and "config.yaml" in outcome["mapo-idr-s0"]
    assert outcome["base"] == "evaluated" and outcome["mapo-idr-s1"] == "trained+evaluated"
    message = str(raised.value)
    assert message.startswith("1 of 3 units failed (mapo-idr-s0: ") and message.endswith(f"mapo ablate --resume {tmp_path}")
    data = json.loads((tmp_path / "ablation.json").read_text())
    assert [r["variant"] for r in data["rows"]] == ["base", "mapo-idr"] and "mapo-idr-s0" in data["missing"]
    if jobs > 1:
        assert "Traceback" in (tmp_path / "logs" / "mapo-idr-s0.log").read_text()


@pytest.mark.slow  # half a minute: a tiny ablation with its curve (CI runs the slow tests)
def test_a_tiny_ablation_keeps_and_evaluates_the_checkpoints_of_its_held_out_curve(tmp_path):
    plan = AblationPlan(
        variants=["mapo-idr"], seeds=[0], steps=2,
        train=["rollout.scenarios_per_step=1", "rollout.samples_per_scenario=2", "rollout.max_turns=2",
               "rollout.max_new_tokens=4", "checkpoint_every=2", "keep_checkpoints=1", "transcripts_every=0"],
        eval=EvalBudget(limit=1, max_turns=2, max_new_tokens=4), curve=CurveBudget(every=1, samples=1),
    )
    done: list[tuple[str, str]] = []
    run_ablation(plan, tmp_path, extra=TINY, on_done=lambda *a: done.append(a))
    assert done == [("base", "evaluated"), ("mapo-idr-s0", "trained+evaluated+curve")]
    run = run_dir(tmp_path, Unit("mapo-idr", 0))
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step-000001", "step-000002"]
    check = json.loads((curve_dir(tmp_path, "mapo-idr-s0", 1) / "eval.json").read_text())
    assert check["summary"]["dialogues"] == 1  # the curve's budget: 1 scenario x 1 dialogue
    assert set(json.loads((tmp_path / "ablation.json").read_text())["heldout_curve"]["mapo-idr-s0"]) == {"0", "1", "2"}
    done.clear()
    shutil.rmtree(curve_dir(tmp_path, "mapo-idr-s0", 1))  # a check cut short is the only thing redone
    run_ablation(plan, tmp_path, extra=TINY, on_done=lambda *a: done.append(a))
    assert done == [("base", "skipped"), ("mapo-idr-s0", "curve")]


@pytest.mark.slow  # about a minute on the shared 2-core machine: a tiny ablation, then grown by two steps
def test_an_ablation_grown_to_more_steps_trains_its_runs_on_and_keeps_their_checks(tmp_path):
    plan = AblationPlan(
        variants=["mapo-idr"], seeds=[0], steps=2,
        train=["rollout.scenarios_per_step=1", "rollout.samples_per_scenario=2", "rollout.max_turns=2",
               "rollout.max_new_tokens=4", "checkpoint_every=1", "keep_checkpoints=1", "transcripts_every=0"],
        eval=EvalBudget(limit=1, samples=2, max_turns=2, max_new_tokens=4), curve=CurveBudget(every=1, samples=1),
    )
    run_ablation(plan, tmp_path, extra=TINY)
    first_check = curve_dir(tmp_path, "mapo-idr-s0", 1) / "eval.json"
    before = first_check.read_text()
    grown = dataclasses.replace(plan, steps=4)
    check_plan(tmp_path, grown)  # more steps, the same settings: the folder's plan grows
    done: list[tuple[str, str]] = []
    run_ablation(grown, tmp_path, extra=TINY, on_done=lambda *a: done.append(a))
    assert done == [("base", "skipped"), ("mapo-idr-s0", "resumed+evaluated+curve")]
    run = run_dir(tmp_path, Unit("mapo-idr", 0))
    assert [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()] == [1, 2, 3, 4]
    # step 2's final evaluation (2 dialogues) became its check, step 3 got one; step 1's was not redone
    assert json.loads((curve_dir(tmp_path, "mapo-idr-s0", 2) / "eval.json").read_text())["summary"]["dialogues"] == 2
    assert first_check.read_text() == before
    assert set(json.loads((tmp_path / "ablation.json").read_text())["heldout_curve"]["mapo-idr-s0"]) == {"0", "1", "2", "3", "4"}
    with pytest.raises(ValueError, match="different plan"):
        check_plan(tmp_path, plan)  # fewer steps than the folder's runs have: not the same study


def test_cli_report_writes_the_tables_of_the_finished_units_and_runs_nothing(tmp_path):
    plan = write_game_ablation(tmp_path, {k: v for k, v in GAME_FINALS.items() if k != "grpo-idr-s1"})
    check_plan(tmp_path, plan)
    result = CliRunner().invoke(app, ["ablate", "--resume", str(tmp_path), "--report"])
    assert result.exit_code == 0, result.output
    assert "Game figures on the held-out games" in result.output and (tmp_path / "curves.png").is_file()
    assert json.loads((tmp_path / "ablation.json").read_text())["missing"] == ["grpo-idr-s1"]
    assert not (tmp_path / "runs" / "grpo-idr-s1").exists()  # nothing was trained
    result = CliRunner().invoke(app, ["ablate", "--report"])
    assert result.exit_code == 2 and "--resume" in result.output
    # pairing with another variant adds its tables; mapo-idr's stay
    result = CliRunner().invoke(app, ["ablate", "--resume", str(tmp_path), "--report", "--paired-with", "grpo-idr"])
    assert result.exit_code == 0, result.output
    tables = json.loads((tmp_path / "ablation.json").read_text())["tables"]
    (row,) = [r for r in tables["Paired by seed with grpo-idr: held-out evaluation"] if r["variant"] == "mapo-idr"]
    assert row["seeds"] == [0] and row["metrics"]["pass_rate"]["mean"] == pytest.approx(50.0 - 20.0)  # grpo-idr-s1 never finished
    assert "Paired by seed with mapo-idr: held-out evaluation" in tables
    assert "Paired by held-out dialogue with grpo-idr: held-out evaluation" in tables
    for args, message in ((["--paired-with", "rloo-idr"], "not a variant of this plan"), ([], "goes with --report")):
        extra = ["--report"] if args else ["--paired-with", "grpo-idr"]
        result = CliRunner().invoke(app, ["ablate", "--resume", str(tmp_path), *extra, *args])
        assert result.exit_code == 2 and message in result.output, result.output


def test_cli_resume_takes_no_plan_options(tmp_path):
    result = CliRunner().invoke(app, ["ablate", "--resume", str(tmp_path), "--quick"])
    assert result.exit_code == 2 and "drop the other plan options" in result.output
    result = CliRunner().invoke(app, ["ablate", "--resume", str(tmp_path)])
    assert result.exit_code == 2 and "plan.json" in result.output


def test_shares_of_a_study_export_without_weights_into_one_folder_that_reports_like_the_whole(tmp_path):
    whole = write_game_ablation(tmp_path / "whole", GAME_FINALS)
    check_plan(tmp_path / "whole", whole)
    for seed in (0, 1):  # the study run as two shares, one seed each, with a checkpoint that is not exported
        share = tmp_path / f"share{seed}"
        plan = write_game_ablation(share, {k: v for k, v in GAME_FINALS.items() if k == "base" or k.endswith(f"-s{seed}")})
        check_plan(share, dataclasses.replace(plan, seeds=[seed]))
        (share / "runs" / f"mapo-idr-s{seed}" / "checkpoints").mkdir()
        (share / "runs" / f"mapo-idr-s{seed}" / "checkpoints" / "weights.bin").write_bytes(b"0" * 1000)
        (share / "evals" / f"mapo-idr-s{seed}" / "transcripts.html").write_text("<html></html>")
        result = CliRunner().invoke(app, ["ablate", "--resume", str(share), "--export", str(tmp_path / "export")])
        assert result.exit_code == 0 and "Exported 2 runs" in result.output, result.output
    export = tmp_path / "export"
    again = CliRunner().invoke(app, ["ablate", "--resume", str(tmp_path / "share1"), "--export", str(export)])
    assert again.exit_code == 0, again.output  # exported again (a study does whenever a unit ends): no new share
    assert json.loads((export / "plan.json").read_text())["seeds"] == [0, 1]
    assert not list(export.rglob("checkpoints")) and not list(export.rglob("transcripts.html")) and (export / "runs" / "mapo-idr-s1" / "final" / "WEIGHTS_LEFT_OUT").is_file()
    assert [s["units"] for s in json.loads((export / "exported.json").read_text())["shares"]] == [
        ["mapo-idr-s0", "grpo-idr-s0"], ["mapo-idr-s1", "grpo-idr-s1"]]
    tables = lambda folder: {k: v for k, v in json.loads((folder / "ablation.json").read_text())["tables"].items()}  # noqa: E731
    write_outputs(tmp_path / "whole", whole)
    assert tables(export) == tables(tmp_path / "whole")
    # transcripts travel gzip-compressed, byte-stable, and the report reads them (the by-dialogue pairing)
    packed = sorted(export.rglob("transcripts.jsonl.gz"))
    assert packed and not list(export.rglob("transcripts.jsonl"))
    # so do eval.json and metrics.jsonl: an archived study is read as it was written
    assert len(list(export.rglob("eval.json.gz"))) == 5 and len(list(export.rglob("metrics.jsonl.gz"))) == 4
    assert not list(export.rglob("eval.json")) and not list(export.rglob("metrics.jsonl"))
    assert "Paired by held-out dialogue with mapo-idr: held-out evaluation" in tables(export)
    again = tmp_path / "again"  # an export exports again, unchanged
    result = CliRunner().invoke(app, ["ablate", "--resume", str(export), "--export", str(again)])
    assert result.exit_code == 0 and "Exported 4 runs" in result.output, result.output
    assert [p.read_bytes() for p in sorted(again.rglob("transcripts.jsonl.gz"))] == [p.read_bytes() for p in packed]
    write_outputs(again, whole)
    assert tables(again) == tables(export)
    with pytest.raises(ValueError, match="is an export"):
        run_ablation(whole, export)
    longer = tmp_path / "longer"  # a share of another length is another study
    check_plan(longer, dataclasses.replace(whole, steps=6))
    result = CliRunner().invoke(app, ["ablate", "--resume", str(longer), "--export", str(export)])
    assert result.exit_code == 2 and "steps differ" in result.output
    result = CliRunner().invoke(app, ["ablate", "--export", str(export)])
    assert result.exit_code == 2 and "--resume" in result.output


def test_shares_from_different_starts_pair_each_seed_with_its_own_start(tmp_path):
    export = tmp_path / "export"

    def share(name: str, seed: int, finals: dict[str, float]):
        plan = write_game_ablation(tmp_path / name, finals)
        check_plan(tmp_path / name, dataclasses.replace(plan, seeds=[seed]))
        return CliRunner().invoke(app, ["ablate", "--resume", str(tmp_path / name), "--export", str(export)])

    assert share("a", 0, {"base": 20.0, "mapo-idr-s0": 50.0, "grpo-idr-s0": 20.0}).exit_code == 0
    # seed 1 ran later from a rebuilt warm start that evaluates at 40 %, not 20 %
    result = share("b", 1, {"base": 40.0, "mapo-idr-s1": 30.0, "grpo-idr-s1": 10.0})
    assert result.exit_code == 0, result.output
    assert (export / "evals" / "base-s1" / "eval.json.gz").is_file() and not (export / "evals" / "base-s0").exists()
    plan = read_plan(export)
    tables = json.loads(write_outputs(export, plan).with_suffix(".json").read_text())["tables"]
    (base,) = [r for r in tables["Paired by seed with mapo-idr: held-out evaluation"] if r["variant"] == "base"]
    assert base["metrics"]["pass_rate"]["values"] == pytest.approx([20.0 - 50.0, 40.0 - 30.0])  # not 20 - 30 at seed 1
    row = tables["Held-out evaluation: mean ± sample std over seeds"][0]
    assert row["variant"] == "base" and row["seeds"] == [0, 1] and row["metrics"]["pass_rate"]["mean"] == pytest.approx(30.0)
    grown = dataclasses.replace(plan, seeds=[0, 1, 2])  # a seed with no run yet has no start to count
    assert aggregate_rows(measure(export, grown).evals, grown)[0]["seeds"] == [0, 1]
    (base,) = [r for r in tables["Paired by held-out dialogue with mapo-idr: held-out evaluation"] if r["variant"] == "base"]
    assert base["pass_rate"]["seeds"] == 0  # these fakes have no dialogues: the by-dialogue pairing, on its own
    per_dialogue = {name: {"d": {"pass_rate": rate}} for name, rate in
                    {"base": 20.0, "base-s1": 40.0, "mapo-idr-s0": 50.0, "mapo-idr-s1": 30.0}.items()}
    (base,) = [r for r in paired_dialogue_rows(per_dialogue, plan, "mapo-idr", (("pass_rate", "pass rate"),))
               if r["variant"] == "base"]
    assert base["pass_rate"]["seeds"] == 2 and base["pass_rate"]["mean"] == pytest.approx((-30.0 + 10.0) / 2)
    kept = (export / "evals" / "base-s1" / "transcripts.jsonl.gz").stat().st_mtime_ns
    assert share("b", 1, {}).exit_code == 0  # the same share again: nothing changes
    assert (export / "evals" / "base-s1" / "transcripts.jsonl.gz").stat().st_mtime_ns == kept  # not rewritten
    assert read_eval(export / "evals" / "base-s1")["summary"]["pass_rate"] == pytest.approx(0.4)
    # a run of seed 1 from the first start cannot join the seed-1 runs from the rebuilt one
    result = share("c", 1, {"base": 20.0, "grpo-idr-s1": 15.0})
    assert result.exit_code == 2 and "seed 1: mapo-idr-s1" in result.output and "another policy" in result.output
    assert read_eval(export / "evals" / "grpo-idr-s1")["summary"]["pass_rate"] == pytest.approx(0.1)  # nothing copied


def test_a_unit_evaluated_but_with_held_out_checks_to_come_is_not_exported_yet(tmp_path):
    plan = write_game_ablation(tmp_path / "study", GAME_FINALS)
    check_plan(tmp_path / "study", dataclasses.replace(plan, curve=CurveBudget(every=2, samples=1)))
    (tmp_path / "study" / "runs" / "mapo-idr-s0" / "checkpoints" / "step-000002").mkdir(parents=True)  # kept for the check
    export = tmp_path / "export"
    result = CliRunner().invoke(app, ["ablate", "--resume", str(tmp_path / "study"), "--export", str(export)])
    assert result.exit_code == 0 and "Exported 3 runs" in result.output and "left out: mapo-idr-s0" in result.output
    check = curve_dir(tmp_path / "study", "mapo-idr-s0", 2)
    shutil.copytree(tmp_path / "study" / "evals" / "mapo-idr-s0", check)  # the runner's check, done
    result = CliRunner().invoke(app, ["ablate", "--resume", str(tmp_path / "study"), "--export", str(export)])
    assert result.exit_code == 0 and "Exported 4 runs" in result.output, result.output
    # the check's eval.json travels compressed and finished without its transcripts (the curve reads eval.json alone)
    assert [p.name for p in curve_dir(export, "mapo-idr-s0", 2).iterdir()] == ["eval.json.gz"]
    grown = read_plan(export)
    assert measure(export, grown).heldout == measure(tmp_path / "study", grown).heldout
    assert measure(export, grown).heldout["mapo-idr-s0"][2] == 50.0


def _live_processes() -> dict[int, list[str]]:
    """The stat fields after the command name of every live process (Linux /proc), by pid."""
    found = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z":
            found[int(stat.parent.name)] = fields
    return found


def _children(pid: int) -> list[int]:
    return [child for child, fields in _live_processes().items() if fields[1] == str(pid)]


def _group_members(pgid: int) -> list[int]:
    return [member for member, fields in _live_processes().items() if fields[2] == str(pgid)]


def _start_training_ablation(out: Path, seeds: int = 2, **popen: object) -> tuple[object, Path]:
    """A real `mapo ablate --jobs 2` of long tiny runs, once its first run has logged two steps."""
    import subprocess
    import sys
    import time

    sets = [*TINY, "rollout.scenarios_per_step=1", "rollout.samples_per_scenario=2", "rollout.max_turns=2",
            "rollout.max_new_tokens=4", "checkpoint_every=1000", "transcripts_every=0"]
    boot = "import sys; from mapo.cli import main; sys.argv = ['mapo', *sys.argv[1:]]; main()"
    proc = subprocess.Popen(
        [sys.executable, "-c", boot, "ablate", "--variant", "mapo-idr", "--seeds", str(seeds), "--steps", "1000",
         "--jobs", "2", "--output", str(out), *sum((["--set", s] for s in sets), [])],
        env={**os.environ, "HF_HUB_OFFLINE": "1"}, **popen,
    )
    metrics = run_dir(out, Unit("mapo-idr", 0)) / "metrics.jsonl"
    deadline = time.monotonic() + 240
    try:
        while not (metrics.exists() and metrics.read_text().count("\n") >= 2):
            assert proc.poll() is None and time.monotonic() < deadline, "the ablation ended or never trained"
            time.sleep(0.2)
    except BaseException:
        proc.kill()
        raise
    return proc, metrics


def _assert_stopped_at_a_checkpoint(metrics: Path) -> None:
    from mapo.run_folder import RunFolder

    steps = [json.loads(line)["step"] for line in metrics.read_text().splitlines() if line.strip()]
    latest = RunFolder(metrics.parent).latest_checkpoint()
    assert steps and latest is not None and latest.name == f"step-{steps[-1]:06d}" and steps[-1] < 1000


@pytest.mark.slow  # about a minute: a real `mapo ablate --jobs 2` killed (CI runs the slow tests)
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads the process table from /proc")
def test_a_killed_ablation_stops_its_worker_processes_at_a_checkpoint(tmp_path):
    """SIGKILL to `mapo ablate --jobs 2` (a kill, not a terminal's Ctrl-C, reaches only it): its workers
    notice, stop their runs as a Ctrl-C would (checkpoint of the last finished step) and exit, rather
    than training on unseen and meeting a second writer when the ablation is rerun."""
    import signal
    import subprocess
    import time

    proc, metrics = _start_training_ablation(tmp_path / "ablation", stdout=subprocess.DEVNULL,
                                             stderr=subprocess.DEVNULL)
    try:
        workers = _children(proc.pid)
        assert len(workers) >= 2
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        deadline = time.monotonic() + 120
        while set(workers) & _live_processes().keys():
            assert time.monotonic() < deadline, "the workers outlived their ablation"
            time.sleep(0.5)
    finally:
        if proc.poll() is None:
            proc.kill()
    _assert_stopped_at_a_checkpoint(metrics)


@pytest.mark.slow  # about a minute, as above
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads the process table from /proc")
@pytest.mark.parametrize("sent", ["terminal-ctrl-c", "kill-int-of-the-parent", "kill-term-of-the-parent"])
def test_ctrl_c_of_a_parallel_ablation_stops_every_run_at_a_checkpoint_and_says_how_to_resume(tmp_path, sent):
    """Ctrl-C reaches `mapo ablate --jobs 2` and its workers (`kill -INT` or `kill` only the parent):
    the runs checkpoint, the units not started never start, and the command ends with one line saying
    how to go on, not a traceback (a worker's TrainingInterrupted once failed to unpickle: BrokenProcessPool)."""
    import signal
    import subprocess
    import time

    out = tmp_path / "ablation"
    proc, metrics = _start_training_ablation(out, seeds=4, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                             text=True, start_new_session=True)
    try:
        if sent == "terminal-ctrl-c":
            os.killpg(proc.pid, signal.SIGINT)
        else:
            proc.send_signal(signal.SIGINT if sent == "kill-int-of-the-parent" else signal.SIGTERM)
        output, _ = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, output
    assert f"Continue with: mapo ablate --resume {out}" in output and "Traceback" not in output, output
    _assert_stopped_at_a_checkpoint(metrics)
    deadline = time.monotonic() + 30  # multiprocessing's resource tracker ends once its parent has gone
    while _group_members(proc.pid):
        assert time.monotonic() < deadline, "a worker outlived its ablation"
        time.sleep(0.5)
    # two workers ran the base and seed 0 (or seed 1, once the base was done); the pool had already
    # handed seeds 2 and 3 to its call queue, where cancelling no longer reaches: the stop event does
    for seed in (2, 3):
        assert not (metrics.parent.parent / f"mapo-idr-s{seed}").exists() and not (out / "logs" / f"mapo-idr-s{seed}.log").exists()


def test_ctrl_c_of_a_serial_ablation_says_how_to_resume(tmp_path, monkeypatch):
    import mapo.lab.ablate.runner as runner
    from mapo.reliability import TrainingInterrupted

    def interrupted(out, plan, unit, *args, **kwargs):  # what a run's Ctrl-C raises (fault injection)
        raise TrainingInterrupted(Path(out) / "runs" / "x", 3)

    monkeypatch.setattr(runner, "run_unit", interrupted)
    out = tmp_path / "ablation"
    try:
        result = CliRunner().invoke(app, ["ablate", "--variant", "mapo-idr", "--seeds", "1", "--steps", "2",
                                          "--output", str(out), *sum((["--set", s] for s in TINY), [])])
    except KeyboardInterrupt:  # CliRunner passes it on: it would end the whole test session
        pytest.fail("mapo ablate let a run's Ctrl-C through")
    assert result.exit_code == 130, result.output
    assert f"Continue with: mapo ablate --resume {out}" in result.output


@pytest.mark.slow  # 21 s: a tiny ablation stopped mid-unit (CI runs the slow tests)
def test_a_stop_during_a_unit_s_last_step_stops_the_ablation_before_its_evaluation(tmp_path):
    """SIGTERM in the last step's update: the run finishes (final/ written), and the ablation stops
    there instead of going on to evaluate; the rerun evaluates it without training again."""
    from tiny_policy import SIGTERM_IN_UPDATE

    if "sigterm-in-update" not in VARIANTS:
        register_variant("sigterm-in-update", f"advantage.estimator={SIGTERM_IN_UPDATE}")
    plan = dataclasses.replace(quick_plan(), variants=["sigterm-in-update"], seeds=[0], steps=1,
                               eval=EvalBudget(limit=2, max_turns=2, max_new_tokens=8))
    out, unit = tmp_path / "ablation", Unit("sigterm-in-update", 0)
    with pytest.raises(KeyboardInterrupt):
        run_ablation(plan, out, jobs=1, extra=TINY)
    assert (run_dir(out, unit) / "final").is_dir() and read_eval(eval_dir(out, "base")) is not None
    assert read_eval(eval_dir(out, unit.name)) is None
    done = []
    run_ablation(plan, out, jobs=1, extra=TINY, on_done=lambda name, did: done.append((name, did)))
    assert dict(done)[unit.name] == "evaluated"
    assert last_logged_step(run_dir(out, unit)) == 1


def test_a_unit_queued_before_the_ablation_was_interrupted_does_not_start(tmp_path):
    import signal
    import threading

    import mapo.lab.ablate.runner as runner

    stopped, handler, on_term = threading.Event(), signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    cores = sorted(os.sched_getaffinity(0))
    try:
        runner._start_worker(stopped)
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN  # an idle worker leaves Ctrl-C to its ablation
        stopped.set()
        with pytest.raises(KeyboardInterrupt):
            runner._unit_job(str(tmp_path), quick_plan().to_dict(), ("mapo-idr", 0), list(TINY), cores)
    finally:
        runner._ABLATION_STOPPED = None
        signal.signal(signal.SIGINT, handler)
        signal.signal(signal.SIGTERM, on_term)
    assert not (tmp_path / "logs").exists() and not (tmp_path / "runs").exists()


def test_parallel_units_run_on_disjoint_core_sets():
    from mapo.lab.ablate.runner import core_sets

    assert core_sets([1, 0], 2) == [[0], [1]]  # two units on 2 cores: one each, not both on core 0
    assert core_sets(range(8), 3) == [[0, 1], [2, 3], [4, 5]]
    assert core_sets([0, 1], 1) == [[0, 1]]
    assert core_sets([0, 1], 3) == [[0], [1], [0]]  # more units than cores: the sets in turn
    with pytest.raises(ValueError, match="no CPU core"):
        core_sets([], 2)


def test_a_worker_runs_its_unit_on_the_core_set_it_took(tmp_path, monkeypatch):
    import logging
    import signal
    import threading

    import mapo.lab.ablate.runner as runner

    seen: dict = {}

    def run_unit(out, plan, unit, threads, extra, show_progress=True, chunks=None):
        seen.update(cores=os.sched_getaffinity(0), threads=threads)
        return "evaluated"

    monkeypatch.setattr(runner, "run_unit", run_unit)
    handler, on_term, mine = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM), os.sched_getaffinity(0)
    handlers, level = logging.root.handlers[:], logging.root.level  # the job points logging at the unit's log
    one = [min(mine)]
    try:
        runner._start_worker(threading.Event())
        assert runner._unit_job(str(tmp_path), quick_plan().to_dict(), ("mapo-idr", 0), list(TINY), one) == "evaluated"
    finally:
        logging.root.handlers[:], logging.root.level = handlers, level
        os.sched_setaffinity(0, mine)
        runner._ABLATION_STOPPED = None
        signal.signal(signal.SIGINT, handler)
        signal.signal(signal.SIGTERM, on_term)
    assert seen == {"cores": set(one), "threads": 1}


def test_a_worker_s_training_interrupted_crosses_the_process_boundary():
    import pickle

    from mapo.reliability import TrainingInterrupted

    again = pickle.loads(pickle.dumps(TrainingInterrupted(Path("runs/r"), 7)))
    assert isinstance(again, TrainingInterrupted) and (again.run_dir, again.step) == (Path("runs/r"), 7)
    assert "after step 7" in str(again) and not again.finished
    assert pickle.loads(pickle.dumps(TrainingInterrupted(Path("runs/r"), 7, finished=True))).finished


def test_a_rate_s_or_norm_s_spread_band_stays_within_its_range_and_a_reward_s_does_not():
    import numpy as np

    from mapo.lab.ablate.curves import HELDOUT, PANEL_BOUNDS, SUCCESS
    from mapo.report.plots import spread_band as band

    def spread_band(stack, mean, key):
        return band(stack, mean, PANEL_BOUNDS.get(key, (-np.inf, np.inf)))

    stack = np.array([[0.0, 1.0], [0.9, 1.0], [0.1, 0.4]])
    mean = stack.mean(axis=0)
    low, high = spread_band(stack, mean, SUCCESS)
    assert low[0] == 0.0 and high[1] == 1.0 and 0.0 < low[1] < high[0] < 1.0
    low, high = spread_band(100 * stack, 100 * mean, HELDOUT)
    assert low[0] == 0.0 and high[1] == 100.0
    assert spread_band(stack, mean, "grad_norm")[0][0] == 0.0
    low, high = spread_band(stack, mean, "reward_mean")
    assert low[0] < 0.0 and high[1] > 1.0 and np.allclose(high - mean, mean - low)


def test_a_success_rate_a_rounding_below_the_target_reaches_it():
    from mapo.lab.ablate.stats import heldout_steps_to

    check = 100.0 * (23 / 40)  # 57.49999999999999: 23 of 40 held-out games
    assert heldout_steps_to({0: 50.0, 5: check, 10: 60.0}, 57.5, 10, [5]) == 5.0
    assert heldout_steps_to({0: 50.0, 5: 57.4, 10: 60.0}, 57.5, 10, [5]) == 10.0
    assert steps_to_reach([0.7, 0.7, 0.7], 0.7) == 3  # their mean is 0.6999999999999998


def test_the_curves_figure_draws_a_single_panel_and_skips_an_empty_one(tmp_path):
    from mapo.lab.ablate.curves import HELDOUT, plot_curves

    drawn = plot_curves({"mapo-idr": {HELDOUT: [[37.5, 40.0, 43.1]]}}, tmp_path / "curves.png")
    assert drawn is not None and drawn.stat().st_size > 0
    assert plot_curves({"mapo-idr": {"not_a_panel": [[1.0]]}}, tmp_path / "none.png") is None
