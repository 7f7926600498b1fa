"""The learning study's machinery: named plans, the study plan's settings, benchmarks inside the
ablation (resumable), and `mapo ablate --plan study` end to end on the tiny model."""

from __future__ import annotations

import json
import shutil

import pytest
from typer.testing import CliRunner

from cli_output import flat
from fixture_paths import FIXTURES

from mapo.lab.ablate import PLANS, AblationPlan, CurveBudget, Unit, check_plan, plan_for, run_ablation, unit_overrides
from mapo.lab.ablate.plan import MOVED_PLANS
from mapo.registry import RegistryError

study_plan = PLANS.resolve("study")  # experiments/empathy_study/plan.py, found from the checkout's root as `mapo` finds it
from mapo.cli import app
from mapo.config import load_config
from mapo.lab.ablate.benchmarks import BENCH_METRICS, bench_metrics, pending, run_benchmarks
from mapo.lab.ablate.runner import eval_spec
from mapo.lab.ablate.state import bench_dir, read_bench

TINY = ["policy.model=tiny", "policy.lora.r=4", "optim.lr=0.01"]
# the study plan cut to seconds: 1 card, 2-turn training dialogues, a 3-turn eval, 2 benchmark items
SMALL = [
    "rollout.scenarios_per_step=1", "rollout.samples_per_scenario=2", "rollout.max_turns=2",
    "rollout.max_new_tokens=6", "transcripts_every=0", "eval.limit=1", "eval.max_turns=3", "eval.max_new_tokens=6",
    "benchmarks.limit=2", "benchmarks.eqbench_max_tokens=6", "benchmarks.emobench_max_tokens=4",
]
HF = ["rollout.engine=hf", "eval.engine=hf", "benchmarks.engine=hf"]  # no llama.cpp start-ups: the fast suite


# ---------------------------------------------------------------- the plans


def test_the_study_plan_trains_long_whole_replies_on_one_budget_and_evaluates_the_twelve_cards():
    from mapo.envs.base import load_scenarios

    plan = study_plan()
    assert plan.name == "study" and plan.variants == ["mapo-idr", "grpo-idr", "turn-idr", "batch-idr"]
    assert plan.seeds == [0, 1, 2, 3, 4]
    configs = [load_config(None, unit_overrides(plan, u, threads=1)) for u in plan.units()]
    budgets = {(c.steps, c.rollout.scenarios_per_step, c.rollout.samples_per_scenario, c.rollout.max_turns,
                c.rollout.max_new_tokens, c.rollout.max_sentences) for c in configs}
    assert len(budgets) == 1  # the same rollout budget for every variant and seed
    (steps, scenarios, samples, turns, tokens, sentences), = budgets
    assert turns >= 6 and tokens == 96 and sentences == 3 and steps == plan.steps
    assert {(c.advantage.estimator, c.reward.kind) for c in configs} == {
        ("mapo", "idr"), ("grpo", "idr"), ("turn", "idr"), ("batch", "idr")}
    assert {c.advantage.alpha for c in configs if c.advantage.estimator == "mapo"} == {0.5}
    spec = eval_spec(plan.eval)
    assert (spec.scenarios, spec.limit, spec.samples, spec.max_turns) == ("test", None, 2, 13)
    assert (spec.max_new_tokens, spec.max_sentences, spec.engine) == (96, 3, "auto")
    assert len(load_scenarios("empathy", "test")) == 12
    bench = plan.benchmarks
    assert bench.targets == ["base", "grpo-idr", "mapo-idr"] and bench.names == ["eqbench", "emobench"]
    assert bench.emobench_tasks == ["EA", "EU"] and bench.limit is not None and bench.data
    assert [plan.benchmarked(u) for u in (None, Unit("mapo-idr", 3), Unit("turn-idr", 0))] == [True, True, False]


def test_plans_are_named_in_a_registry_a_user_can_extend():
    assert {"default", "quick", "study", "game", "game-forfeit", "game-timeout", "empathy-warm"} <= set(PLANS.names())
    game, forfeit, warm = plan_for("game"), plan_for("game-forfeit"), plan_for("empathy-warm")
    assert "env.options={pool_size: 8, show_candidates: true}" in game.train and game.eval.env_options["show_candidates"]
    assert "forfeit_on_failure" not in game.eval.env_options and forfeit.eval.env_options["forfeit_on_failure"]
    assert [s for s in forfeit.train if "forfeit_on_failure: true" in s] and forfeit.steps == game.steps
    timeout = plan_for("game-timeout")
    assert timeout.eval.env_options == {**forfeit.eval.env_options, "forfeit_on_timeout": True}
    assert [s for s in timeout.train if "forfeit_on_timeout: true" in s] and timeout.variants == forfeit.variants[:5]
    # the forfeit plan holds the whole grid (the game's six variants, 5 seeds) and MAPO without the cut
    assert set(forfeit.variants) == {*game.variants, "mapo_ragged-idr"} and forfeit.seeds == game.seeds
    assert len(timeout.seeds) == 3 and "rloo-idr" not in timeout.variants
    from mapo.config import load_config
    assert load_config(None, timeout.train).env.options["forfeit_on_timeout"] is True
    assert warm.variants == ["mapo-idr", "grpo-idr"] and len(warm.seeds) == 5 and warm.steps >= 30
    # the held-out curve: where success levels off (issue #28); its checkpoints are kept for it
    assert game.curve.steps(game.steps) == [5, 10, 15, 20, 25] and warm.curve.steps(warm.steps) == [10, 20]
    assert "keep_every=5" in unit_overrides(forfeit, Unit("turn-idr", 0), None)
    turns = plan_for("game-turns")  # the timeout settings with the budget shown, lr 2e-4
    assert turns.eval.env_options == {**timeout.eval.env_options, "show_turns_left": True} and len(turns.seeds) == 5
    assert load_config(None, turns.train).env.options["show_turns_left"] is True
    turns_configs = {v: load_config(None, unit_overrides(turns, Unit(v, 0), None)) for v in turns.variants}
    assert {c.optim.lr for c in turns_configs.values()} == {2e-4}
    assert sorted((c.advantage.estimator, c.reward.kind) for c in turns_configs.values()) == sorted(  # the game's grid
        [*((e, "idr") for e in ("mapo", "grpo", "mapo_ragged", "turn", "batch", "rloo")), ("mapo", "outcome")])
    turns_alpha = plan_for("game-turns-alpha")  # the sweep on those settings
    assert turns_alpha.train == turns.train and turns_alpha.eval == turns.eval and turns_alpha.seeds == [0, 1, 2]
    assert [(c.advantage.estimator, c.advantage.alpha, c.optim.lr) for c in
            (load_config(None, unit_overrides(turns_alpha, Unit(v, 0), None)) for v in turns_alpha.variants)] == [
        ("batch", 0.5, 2e-4), ("mapo", 0.25, 2e-4), ("mapo", 0.5, 2e-4), ("mapo", 0.75, 2e-4), ("turn", 0.5, 2e-4)]
    alpha = plan_for("game-alpha")  # the sweep: the forfeit settings, alpha 0 .. 1 in MAPO's mix
    assert {**alpha.to_dict(), "variants": None, "seeds": None, "name": None} == {**forfeit.to_dict(), "variants": None, "seeds": None, "name": None}
    assert alpha.seeds == [0, 1, 2]
    assert [load_config(None, unit_overrides(alpha, Unit(v, 0), None)).advantage.alpha for v in alpha.variants
            if v.startswith("mapo")] == [0.25, 0.5, 0.75]
    lr = plan_for("game-lr")  # each estimator at 5e-4 and 2e-4, the forfeit settings otherwise
    assert {**lr.to_dict(), "variants": None, "seeds": None, "name": None} == {**forfeit.to_dict(), "variants": None, "seeds": None, "name": None}
    rates = {v: load_config(None, unit_overrides(lr, Unit(v, 3), None)) for v in lr.variants}
    assert {v: (c.advantage.estimator, c.optim.lr) for v, c in rates.items()} == {
        "mapo-idr": ("mapo", 5e-4), "grpo-idr": ("grpo", 5e-4), "mapo-idr-lr2e-4": ("mapo", 2e-4), "grpo-idr-lr2e-4": ("grpo", 2e-4)}
    ragged = load_config(None, unit_overrides(lr, Unit("mapo_ragged-idr-lr2e-4", 3), None))
    assert (ragged.advantage.estimator, ragged.optim.lr) == ("mapo_ragged", 2e-4)
    probes = {v: load_config(None, unit_overrides(lr, Unit(v, 0), None))  # a variant's settings win over the plan's
              for v in ("mapo_state-idr-lr2e-4-t1", "mapo_state-idr-lr2e-4-4x4")}
    assert {v: (c.advantage.estimator, c.optim.lr, c.rollout.temperature, c.rollout.scenarios_per_step,
                c.rollout.samples_per_scenario) for v, c in probes.items()} == {
        "mapo_state-idr-lr2e-4-t1": ("mapo_state", 2e-4, 1.0, rates["mapo-idr"].rollout.scenarios_per_step,
                                     rates["mapo-idr"].rollout.samples_per_scenario),
        "mapo_state-idr-lr2e-4-4x4": ("mapo_state", 2e-4, rates["mapo-idr"].rollout.temperature, 4, 4)}
    assert "rollout.samples_per_scenario=8" in warm.train and "rollout.max_turns=8" in warm.train
    assert plan_for("default") == AblationPlan() and not plan_for("default").benchmarks.targets
    assert plan_for("quick").steps == 2 and not plan_for("quick").benchmarks.targets
    PLANS.add("tiny-test-plan", lambda: AblationPlan(variants=["mapo-idr"], seeds=[7], steps=1))
    try:
        plan = plan_for("tiny-test-plan")
        assert plan.name == "tiny-test-plan" and plan.units() == [Unit("mapo-idr", 7)]
    finally:
        PLANS.remove("tiny-test-plan")
    with pytest.raises(ValueError, match="unknown ablation plan 'nope'.*study"):
        plan_for("nope")


def test_the_library_keeps_templates_and_the_studies_plans_resolve_from_their_experiments(monkeypatch):
    import mapo.lab.ablate.plan as library

    assert not [name for name in dir(library) if name.endswith("_plan") and name.startswith(("study", "game_", "empathy_warm"))
                and name != "game_plan"]  # no dated plan left in the library
    for name, path in MOVED_PLANS.items():  # each old name, from the checkout, to its experiment's factory
        assert plan_for(name).name == name and path.startswith("experiments.")
    assert plan_for("empathy-warm").to_dict() == {**plan_for("empathy").to_dict(), "name": "empathy-warm"}
    game, turns = plan_for("game"), plan_for("game-turns")
    assert {**turns.to_dict(), "variants": None, "train": None, "eval": None, "name": None} == {
        **game.to_dict(), "variants": None, "train": None, "eval": None, "name": None}
    # a moved plan that cannot be imported (mapo run outside a checkout) says where it went
    monkeypatch.setitem(MOVED_PLANS, "gone", "experiments.no_such_study.plan:gone_plan")
    monkeypatch.setitem(PLANS.builtins, "gone", MOVED_PLANS["gone"])
    with pytest.raises(RegistryError, match=r"'gone' moved to experiments/no_such_study/plan.py in a mapo checkout"):
        plan_for("gone")


def test_the_game_plans_show_the_table_or_hide_it_in_training_and_evaluation_alike():
    shown = plan_for("experiments.game_table.plan:table_tight_plan")
    hidden = plan_for("experiments.game_table.plan:hidden_tight_plan")
    for plan, show in ((shown, True), (hidden, False)):
        assert plan.eval.env_options["show_table"] is show
        assert f"show_table: {str(show).lower()}" in next(o for o in plan.train if o.startswith("env.options="))
        assert load_config(overrides=plan.train).env.options["show_table"] is show  # what a unit trains on
    assert {**hidden.to_dict(), "eval": None, "train": None, "name": None} == {
        **shown.to_dict(), "eval": None, "train": None, "name": None}  # the same grid otherwise


def test_options_override_the_named_plan_and_plan_fields_go_through_set(tmp_path):
    plan = plan_for("study", variants=["mapo-idr", "turn-idr"], seeds=3, steps=4,
                    overrides=["eval.samples=1", "benchmarks.limit=5", "rollout.max_turns=8", "curve.every=2"],
                    bench_data=str(tmp_path))
    assert plan.seeds == [0, 1, 2] and plan.steps == 4 and plan.eval.samples == 1 and plan.benchmarks.limit == 5
    assert plan.curve == CurveBudget(every=2, samples=2)
    assert plan.train[-1] == "rollout.max_turns=8"  # a training setting, after the plan's own
    assert load_config(None, unit_overrides(plan, Unit("turn-idr", 0), None)).rollout.max_turns == 8
    assert plan.benchmarks.targets == ["base", "mapo-idr"]  # grpo-idr was left out
    assert plan.benchmarks.data == str(tmp_path.resolve())
    assert plan_for("game-forfeit", seeds=[3, 4]).seeds == [3, 4]  # `--seed 3 --seed 4`: only those
    with pytest.raises(ValueError, match="the plan's eval has no field 'sample'.*samples"):
        plan_for("study", overrides=["eval.sample=1"])
    with pytest.raises(ValueError, match="benchmarks.limit: Input should be a valid integer"):
        plan_for("study", overrides=["benchmarks.limit=many"])
    with pytest.raises(ValueError, match="benchmarks.limit must be at least 1"):
        plan_for("study", overrides=["benchmarks.limit=0"])
    with pytest.raises(ValueError, match=r"benchmarks.targets \['turn-idr'\] are not variants"):
        plan_for("study", variants=["mapo-idr"], overrides=["benchmarks.targets=[base, turn-idr]"])


def test_plan_json_records_everything_and_older_folders_still_resume(tmp_path):
    plan = plan_for("study", bench_data=str(FIXTURES))
    assert AblationPlan.from_dict(json.loads(json.dumps(plan.to_dict()))) == plan
    with pytest.raises(ValueError, match="field eval.sampels: Unexpected keyword"):
        AblationPlan.from_dict({**plan.to_dict(), "eval": {**plan.to_dict()["eval"], "sampels": 2}})
    # a folder written before plans had names, eval engines and benchmarks: the same settings resume
    old = AblationPlan().to_dict()
    del old["benchmarks"], old["name"], old["eval"]["engine"], old["eval"]["max_sentences"]
    (tmp_path / "plan.json").write_text(json.dumps(old))
    check_plan(tmp_path, plan_for("default"))
    with pytest.raises(ValueError, match="different plan"):
        check_plan(tmp_path, plan_for("study", bench_data=str(FIXTURES)))


def test_cli_plan_options_are_checked_before_anything_runs(tmp_path):
    runner = CliRunner()
    result = runner.invoke(app, ["ablate", "--quick", "--plan", "study", "--output", str(tmp_path / "a")])
    assert result.exit_code == 2 and "--quick is --plan quick" in flat(result.output)
    result = runner.invoke(app, ["ablate", "--resume", str(tmp_path), "--plan", "study"])
    assert result.exit_code == 2 and "drop the other plan options" in flat(result.output)
    result = runner.invoke(app, ["ablate", "--plan", "nope", "--output", str(tmp_path / "b")])
    assert result.exit_code == 2 and "unknown ablation plan 'nope'" in flat(result.output)
    result = runner.invoke(app, ["ablate", "--plan", "game", "--seeds", "2", "--seed", "3", "--output", str(tmp_path / "d")])
    assert result.exit_code == 2 and "give one of them" in flat(result.output)
    result = runner.invoke(app, ["ablate", "--plan", "study", "--bench-data", str(tmp_path / "none"),
                                 "--output", str(tmp_path / "c")])
    assert result.exit_code == 2 and "no EQ-Bench questions file" in flat(result.output) and "--bench-data" in flat(result.output)
    assert not (tmp_path / "c").exists()  # nothing written for a plan that cannot run


# ---------------------------------------------------------------- benchmarks inside the ablation


def test_benchmark_figures_read_score_accuracy_and_parse_rate_per_task():
    eq = {"summary": {"score": 41.5, "parse_rate": 75.0}}
    emo = {"summary": {"EA": {"en": {"accuracy": {"Overall": 50.0}, "n": 4, "parse_failures": 1},
                              "zh": {"accuracy": {"Overall": 100.0}, "n": 4, "parse_failures": 0}},
                       "EU": {"en": {"accuracy": {"Overall": 25.0}, "n": 4, "parse_failures": 4}}}}
    got = bench_metrics({"eqbench": eq, "emobench": emo})
    assert got == {"eqbench": 41.5, "eqbench_parse_rate": 75.0, "emobench_ea": 75.0, "emobench_ea_parse_rate": 87.5,
                   "emobench_eu": 25.0, "emobench_eu_parse_rate": 0.0}
    assert bench_metrics({"eqbench": eq, "emobench": None})["emobench_ea"] is None
    assert [k for k, _ in BENCH_METRICS] == list(got)


def test_a_finished_benchmark_is_not_run_again_and_a_cut_one_is(tmp_path):
    from tiny_policy import tiny_policy

    plan = plan_for("study", overrides=[*SMALL, *HF], bench_data=str(FIXTURES))
    policy = tiny_policy()
    assert pending(tmp_path, "base", plan.benchmarks) == ["eqbench", "emobench"]
    run_benchmarks(policy, "base", tmp_path, "base", plan.benchmarks, ["eqbench"])
    assert pending(tmp_path, "base", plan.benchmarks) == ["emobench"]
    results = read_bench(bench_dir(tmp_path, "base", "eqbench"))
    assert results["config"]["items"] == 2 and results["config"]["temperature"] == 0.0
    run_benchmarks(policy, "base", tmp_path, "base", plan.benchmarks, ["emobench"])
    assert pending(tmp_path, "base", plan.benchmarks) == []
    emo = read_bench(bench_dir(tmp_path, "base", "emobench"))
    assert emo["config"]["items"] == 4 and emo["config"]["languages"] == ["en"]  # 2 per task, English only
    predictions = bench_dir(tmp_path, "base", "emobench") / "predictions.jsonl"
    predictions.write_text(predictions.read_text().splitlines()[0] + "\n")  # killed while writing
    assert pending(tmp_path, "base", plan.benchmarks) == ["emobench"]


# ---------------------------------------------------------------- end to end


def _report(folder):
    return json.loads((folder / "ablation.json").read_text())


@pytest.mark.slow  # about a minute on a busy 2-core machine (CI runs the slow tests)
def test_a_tiny_study_trains_evaluates_benchmarks_and_reruns_only_what_is_missing(tmp_path):
    # one variant (each training run's own report costs seconds): the base pairs with each seed's mapo-idr
    plan = plan_for("study", variants=["mapo-idr"], seeds=2, steps=1, overrides=[*SMALL, *HF], bench_data=str(FIXTURES))
    done: list[tuple[str, str]] = []
    md = run_ablation(plan, tmp_path, extra=TINY, on_done=lambda *a: done.append(a))
    assert dict(done) == {"base": "evaluated+benchmarked", "mapo-idr-s0": "trained+evaluated+benchmarked",
                          "mapo-idr-s1": "trained+evaluated+benchmarked"}
    data = _report(tmp_path)
    assert data["missing"] == [] and set(data["benchmarks"]) == {"base", "mapo-idr-s0", "mapo-idr-s1"}
    assert data["benchmarks"]["base"]["emobench_ea_parse_rate"] is not None
    assert 0.0 <= data["training"]["mapo-idr-s1"]["truncated_pct"] <= 100.0
    assert set(data["seconds"]["mapo-idr-s0"]) == {"train_seconds", "eval_seconds", "bench_seconds"}
    assert all(v >= 0 for v in data["seconds"]["mapo-idr-s0"].values()) and "train_seconds" not in data["seconds"]["base"]
    tables = data["tables"]
    (base,) = tables["Paired by seed with mapo-idr: held-out evaluation"]
    assert base["variant"] == "base" and base["seeds"] == [0, 1]
    epmq = base["metrics"]["epmq"]
    assert epmq["n"] == 2 and epmq["low"] <= epmq["mean"] <= epmq["high"]
    (by_dialogue,) = tables["Paired by held-out dialogue with mapo-idr: held-out evaluation"]
    assert by_dialogue["epmq"]["n"] == 4 and by_dialogue["epmq"]["seeds"] == 2  # 1 card x 2 samples x 2 seeds
    assert [r["variant"] for r in tables["Paired by seed with mapo-idr: outside benchmarks"]] == ["base"]
    assert data["excerpts"] and data["excerpts"][0]["rule"].startswith("largest EPM-Q gain")
    text = md.read_text()
    for heading in ("Reward-hacking monitor", "Outside benchmarks", "Paired by seed", "Paired by held-out dialogue",
                    "two-stage bootstrap", "### Excerpts", "| turn | base | mapo-idr-s0 |"):
        assert heading in text
    assert "Excerpts" in (tmp_path / "ablation.html").read_text()

    # a rerun skips everything; a unit missing only a benchmark runs just that benchmark
    eq_results = bench_dir(tmp_path, "mapo-idr-s0", "eqbench") / "results.json"
    before = eq_results.stat().st_mtime_ns
    shutil.rmtree(bench_dir(tmp_path, "mapo-idr-s0", "emobench"))
    done.clear()
    run_ablation(plan, tmp_path, extra=TINY, on_done=lambda *a: done.append(a))
    assert dict(done) == {"base": "skipped", "mapo-idr-s0": "benchmarked", "mapo-idr-s1": "skipped"}
    assert eq_results.stat().st_mtime_ns == before and read_bench(bench_dir(tmp_path, "mapo-idr-s0", "emobench"))


@pytest.mark.slow  # 4 tiny runs with the default engines (llama.cpp where installed): about a minute on 2 cores
def test_mapo_ablate_plan_study_from_the_command_line(tmp_path):
    out = tmp_path / "study"
    args = ["ablate", "--plan", "study", "--variant", "mapo-idr", "--variant", "grpo-idr", "--seeds", "2",
            "--steps", "1", "--bench-data", str(FIXTURES), "--output", str(out),
            *(x for s in [*TINY, *SMALL] for x in ("--set", s))]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "Ablation (study plan): 4 runs" in result.output
    assert result.output.count("trained+evaluated+benchmarked") == 4 and "base: evaluated+benchmarked" in result.output
    saved = json.loads((out / "plan.json").read_text())
    assert saved["name"] == "study" and saved["benchmarks"]["limit"] == 2 and saved["eval"]["samples"] == 2
    data = _report(out)
    by_seed = data["tables"]["Paired by seed with mapo-idr: held-out evaluation"]
    assert [r["variant"] for r in by_seed] == ["base", "grpo-idr"] and by_seed[1]["seeds"] == [0, 1]
    assert [r["variant"] for r in data["tables"]["Paired by seed with mapo-idr: outside benchmarks"]] == ["base", "grpo-idr"]
    assert "| turn | base | grpo-idr-s0 | mapo-idr-s0 |" in (out / "ablation.md").read_text()
    assert (out / "curves.png").stat().st_size > 0
    result = CliRunner().invoke(app, ["ablate", "--resume", str(out)])
    assert result.exit_code == 0 and result.output.count(": skipped") == 5
