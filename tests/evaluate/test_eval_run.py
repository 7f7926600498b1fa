"""`mapo eval` end to end: the tiny model on the offline empathy environment, a trained
run's folder as the policy, and an OpenAI-compatible endpoint as the policy."""

from __future__ import annotations

import json

import pytest
import torch
from tiny_policy import ToyEnvironment  # noqa: F401  (registers the "toy-test" environment)
from typer.testing import CliRunner

from fixture_paths import FIXTURES

from mapo.cli import app
from mapo.degeneracy import HACKING_LABELS
from mapo.envs.empathy.cards import bundled_scenarios
from mapo.evaluate.checkpoints import load_eval_policy
from mapo.evaluate.empa import EPMQ_KEYS, aggregate


def test_tiny_model_on_two_empathy_scenarios(tmp_path):
    out = tmp_path / "eval"
    result = CliRunner().invoke(
        app,
        ["eval", "--model", "tiny", "--limit", "2", "--samples", "2", "--max-turns", "3", "--max-new-tokens", "8",
         "--batch-scenarios", "1", "--output", str(out)],
    )
    assert result.exit_code == 0, result.output
    assert f"Eval: {out / 'eval.json'}" in result.output and f"Viewer: {out / 'transcripts.html'}" in result.output
    data = json.loads((out / "eval.json").read_text())
    assert data["config"]["max_turns"] == 3 and data["config"]["samples"] == 2 and data["config"]["scenarios"] == "test"
    expected_ids = [s.id for s in bundled_scenarios("test")[:2]]
    assert [s["scenario_id"] for s in data["scenarios"]] == expected_ids
    summary = data["summary"]
    assert summary["dialogues"] == 4 and summary["scenarios"] == 2
    assert data["provenance"]["software"]["transformers"] and data["provenance"]["machine"]["cores"] >= 1
    assert sum(summary["outcomes"].values()) == 4 and 0 <= summary["pass_rate"] <= 1
    assert set(summary["epmq"]) == set(EPMQ_KEYS)
    assert set(summary["alignment"]["target_by_axis"]) == {"C", "A", "P"}
    # the console line names each alignment by what it measures (DESIGN 3 reports cos(v_t, -P_{t-1}))
    assert f"alignment to deficit -P_t-1 {summary['alignment']['deficit']:+.3f}" in result.output
    assert f"alignment to v*_0 {summary['alignment']['target']:+.3f}" in result.output
    assert set(summary["hacking"]) == set(HACKING_LABELS) and all(0 <= v <= 1 for v in summary["hacking"].values())
    assert "reward hacking: distinct-2 " in result.output
    for scenario in data["scenarios"]:
        assert len(scenario["samples"]) == 2
        for dialogue in scenario["samples"]:
            assert 1 <= dialogue["turns"] <= 3
            assert len(dialogue["distances"]) == dialogue["turns"] + 1
            assert set(dialogue["epmq"]) == set(EPMQ_KEYS)
            assert dialogue["reason"] in ("success", "failure", "timeout", "max_turns")
    lines = (out / "transcripts.jsonl").read_text().splitlines()
    assert len(lines) == 4
    first = json.loads(lines[0])
    assert first["turns"][0]["user"] and len(first["turns"][0]["state"]) == 3
    viewer = (out / "transcripts.html").read_text()
    assert viewer.count("<details") == 4 and "need P_t (C/A/P)" in viewer


def test_eval_summary_monitors_hacking_against_what_the_user_had_said_so_far():
    dialogue = {"scenario_id": "s", "dominant_axis": "A", "outcome": "timeout", "reason": "max_turns", "turns": 2,
                "epmq": None, "distances": [1.0, 1.0], "fallbacks": {},
                "alignment": {"target": 0.0, "deficit": 0.0, "target_by_axis": {}, "deficit_by_axis": {}}}
    story, echo = "I lost the job at the bakery.", "Losing the job at the bakery must hurt."  # 2 of 5 4-grams echo
    transcript = {"turns": [{"user": story, "response": "I am sorry."}, {"user": "Yes.", "response": echo}]}
    hacking = aggregate([dialogue], [transcript])["hacking"]
    assert hacking["hack_echo"] == pytest.approx(0.4 / 2) and hacking["hack_fragment"] == 0.0
    assert aggregate([dialogue])["hacking"] == {}  # no transcripts, no replies to monitor


def _train_tiny_run(tmp_path):
    from mapo.config import load_config
    from mapo.core.trainer import train

    config = load_config(None, [
        "policy.model=tiny", "policy.lora.r=4", "policy.lora.alpha=8", "env.name=toy-test", "steps=1",
        "checkpoint_every=1", "rollout.scenarios_per_step=1", "rollout.samples_per_scenario=2",
        "rollout.max_turns=2", "rollout.max_new_tokens=6", "optim.lr=0.05",
    ])
    return train(config, output=tmp_path / "run", show_progress=False).run_dir


def test_a_training_run_is_evaluated_from_its_folder(tmp_path):
    run = _train_tiny_run(tmp_path)
    assert (run / "report.html").is_file()  # the trainer writes its report at the end
    trained, label = load_eval_policy(str(run))
    assert label == "run/final"
    base, _ = load_eval_policy("tiny")
    checkpoint, ckpt_label = load_eval_policy(str(run / "checkpoints" / "step-000001"))
    assert ckpt_label == "run/checkpoints/step-000001/policy"
    ids = torch.tensor([[1, 2, 3, 4]])
    with torch.no_grad():
        final_logits = trained.model(ids).logits
        assert not torch.allclose(final_logits, base.model(ids).logits)  # the trained adapters are applied
        assert torch.allclose(final_logits, checkpoint.model(ids).logits)  # one step: the checkpoint is the final policy

    out = tmp_path / "eval"
    result = CliRunner().invoke(app, ["eval", "--model", str(run), "--limit", "1", "--max-turns", "2",
                                      "--max-new-tokens", "6", "--output", str(out)])
    assert result.exit_code == 0, result.output
    data = json.loads((out / "eval.json").read_text())
    assert data["config"]["policy"] == "run/final"
    assert data["config"]["env"] == "toy-test"  # the run's environment unless --env is given
    assert data["summary"]["dialogues"] == 1


def test_missing_policy_is_a_clear_error(tmp_path):
    result = CliRunner().invoke(app, ["eval", "--limit", "1"])
    assert result.exit_code == 2 and "exactly one of a model" in result.output
    result = CliRunner().invoke(app, ["eval", "--model", str(tmp_path / "nope"), "--output", str(tmp_path / "o")])
    assert result.exit_code == 2 and "does not exist" in result.output


@pytest.mark.slow  # starts vllm serve (about a minute): CI runs it with the slow tests
def test_an_openai_compatible_endpoint_as_the_policy(local_server, tmp_path):  # noqa: F811 (imported fixture)
    out = tmp_path / "eval"
    result = CliRunner().invoke(
        app,
        ["eval", "--endpoint", local_server, "--endpoint-model", "smollm2", "--limit", "1", "--samples", "2",
         "--max-turns", "2", "--max-new-tokens", "12", "--output", str(out)],
    )
    assert result.exit_code == 0, result.output
    data = json.loads((out / "eval.json").read_text())
    assert data["config"]["policy"] == f"smollm2 @ {local_server}"
    assert data["summary"]["dialogues"] == 2
    transcripts = [json.loads(line) for line in (out / "transcripts.jsonl").read_text().splitlines()]
    replies = [turn["response"] for t in transcripts for turn in t["turns"]]
    assert replies and all(r.strip() for r in replies)  # real text from the served model
    assert all(turn["response_tokens"] == 0 for t in transcripts for turn in t["turns"])  # no ids from an endpoint


@pytest.mark.slow  # starts vllm serve (about a minute): CI runs it with the slow tests
def test_benchmarks_through_an_endpoint(local_server, tmp_path):  # noqa: F811 (imported fixture)
    fixtures = FIXTURES
    out = tmp_path / "emo"
    result = CliRunner().invoke(
        app,
        ["bench", "emobench", "--data", str(fixtures / "emobench"), "--endpoint", local_server, "--endpoint-model",
         "smollm2", "--language", "en", "--task", "EA", "--limit", "2", "--max-tokens", "8", "--output", str(out)],
    )
    assert result.exit_code == 0, result.output
    records = [json.loads(line) for line in (out / "predictions.jsonl").read_text().splitlines()]
    assert len(records) == 2 and all(r["reply"].strip() for r in records)
    summary = json.loads((out / "results.json").read_text())["summary"]
    assert summary["EA"]["en"]["n"] == 2


def test_eval_applies_empa_ending_rules_not_the_training_ones():
    from mapo.envs.base import evaluation_options
    from mapo.evaluate.runner import EvalSpec, env_options_for

    trained = {"judge": "offline", "max_turns": 6, "success_from_turn": 3, "min_turns": 2, "dynamics": {"regression_run": 2}}
    options = evaluation_options("empathy", trained)
    assert options == {"judge": "offline"}
    assert env_options_for(EvalSpec(env="empathy", env_options=options)) == {"judge": "offline", "max_turns": 45}
    assert env_options_for(EvalSpec(env="empathy", max_turns=10, env_options={"max_turns": 20})) == {"max_turns": 20}
    assert env_options_for(EvalSpec(env="toy-test", env_options={"delay": 0.0})) == {"delay": 0.0}
    assert evaluation_options("emotion", {"max_turns": 5, "success_at": 90}) == {"success_at": 90}
