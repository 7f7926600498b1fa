"""mapo.envs.base: the environment registry and factory, scenario sources, evaluation hooks, and an
environment from outside the package trained and evaluated by path with no edit inside mapo/."""

from __future__ import annotations

import json
import sys
import textwrap

import pytest
from typer.testing import CliRunner

from mapo.cli import app
from mapo.envs.base import (
    ENVIRONMENTS,
    environment_factory,
    evaluation_options,
    load_scenarios,
    make_environment,
    with_turn_cap,
)
# A K = 2 environment written as a user would: the state is (distance left on two axes); a reply
# moves the first axis by its length parity and the second by whether it asks a question.
PLUGIN = textwrap.dedent(
    '''
    from mapo.envs.base import Environment, StepResult
    from mapo.core.types import Scenario


    class TwoAxes(Environment):
        def __init__(self, max_turns=3):
            self.max_turns = max_turns

        @classmethod
        def load_scenarios(cls, source):
            if source not in ("train", "test"):
                raise ValueError(f"two-axes scenarios: unknown source {source!r}")
            return [Scenario(id=f"{source}-{k}", initial_state=(-3.0 - k, -2.0),
                             card={"opening": f"Case {k}: it still fails."}) for k in range(2)]

        @staticmethod
        def with_turn_cap(options, max_turns):
            return {**options, "max_turns": max_turns}

        def reset(self, scenario, seed=None):
            self.state, self.turn = list(scenario.initial_state), 0
            return scenario.card["opening"]

        def step(self, response):
            self.turn += 1
            v = (1.0 if len(response) % 2 else -1.0, 1.0 if "?" in response else 0.0)
            self.state = [p + x for p, x in zip(self.state, v)]
            done = self.turn >= self.max_turns
            return StepResult("And now?", v, done, {"state": tuple(self.state), "done_reason": "timeout" if done else None})


    class NoSource:
        def reset(self, scenario, seed=None):
            return "hi"

        def step(self, response):
            return StepResult("", (0.0,), True, {"state": (0.0,)})

        @staticmethod
        def not_scenarios(source):
            return ["not a scenario"]


    NoSource.Listed = type("Listed", (NoSource, Environment), {"load_scenarios": staticmethod(NoSource.not_scenarios)})
    '''
)


@pytest.fixture
def plugin_dir(tmp_path, monkeypatch):
    """The plug-in as a module in the working directory only (not installed, not on sys.path)."""
    (tmp_path / "two_axes_plugin.py").write_text(PLUGIN)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    yield tmp_path
    sys.modules.pop("two_axes_plugin", None)


def test_builtin_environments_load_their_own_scenarios():
    cards = load_scenarios("empathy", "test")
    assert len(cards) == 12 and all(s.card and len(s.initial_state) == 3 for s in cards)
    assert [s.id for s in load_scenarios("emotion", "test")] == [s.id for s in cards]
    with pytest.raises(ValueError, match="no such scenario card folder"):
        load_scenarios("empathy", "no/such/folder")


def test_unknown_environment_and_missing_scenario_source_are_named(plugin_dir):
    with pytest.raises(ValueError, match=r"unknown environment 'nowhere'; registered: .*emotion, empathy"):
        make_environment("nowhere")
    with pytest.raises(ValueError, match="'two_axes_plugin:NoSource' does not say how its scenarios load"):
        load_scenarios("two_axes_plugin:NoSource", "train")
    with pytest.raises(ValueError, match="loaded str at position 0"):
        load_scenarios("two_axes_plugin:NoSource.Listed", "train")
    with pytest.raises(ValueError, match="unknown source 'elsewhere'"):
        load_scenarios("two_axes_plugin:TwoAxes", "elsewhere")


def test_factory_checks_options_at_once_and_makes_fresh_instances(plugin_dir):
    with pytest.raises(TypeError, match="unexpected keyword"):
        environment_factory("two_axes_plugin:TwoAxes", {"colour": "red"})
    make = environment_factory("two_axes_plugin:TwoAxes", {"max_turns": 2})
    first, second = make(), make()
    assert first is not second and first.max_turns == 2
    assert "two_axes_plugin:TwoAxes" not in ENVIRONMENTS  # a path is resolved, not registered


def test_evaluation_hooks_default_and_per_environment(plugin_dir):
    training = {"max_turns": 4, "success_from_turn": 2, "judge": "offline"}
    assert evaluation_options("empathy", training) == {"judge": "offline"}  # EMPA's ending rules at eval
    assert evaluation_options("two_axes_plugin:TwoAxes", training) == {"success_from_turn": 2, "judge": "offline"}
    assert with_turn_cap("two_axes_plugin:TwoAxes", {}, 9) == {"max_turns": 9}
    assert with_turn_cap("empathy", {"dynamics": {"max_turns": 5}}, 9) == {"dynamics": {"max_turns": 5}}
    assert with_turn_cap("empathy", {}, 9) == {"max_turns": 9}


def test_an_environment_named_by_path_trains_and_evaluates_from_the_cli(plugin_dir):
    config = plugin_dir / "config.yaml"
    config.write_text(textwrap.dedent(
        """\
        steps: 1
        policy: {model: tiny, lora: {r: 4, alpha: 8, top_layers: null}}
        env: {name: "two_axes_plugin:TwoAxes", scenarios: train, options: {max_turns: 2}}
        rollout: {scenarios_per_step: 1, samples_per_scenario: 2, max_turns: 2, max_new_tokens: 6}
        """
    ))
    result = CliRunner().invoke(app, ["train", "--config", str(config), "--output", str(plugin_dir / "run")])
    assert result.exit_code == 0, result.output
    (metrics,) = [json.loads(line) for line in (plugin_dir / "run" / "metrics.jsonl").read_text().splitlines()]
    transcript = json.loads((plugin_dir / "run" / "transcripts.jsonl").read_text().splitlines()[0])
    assert transcript["scenario_id"].startswith("train-") and len(transcript["turns"][0]["state"]) == 2
    assert metrics["turns_mean"] == 2.0 and metrics["done_timeout"] == 1.0

    out = plugin_dir / "eval"
    result = CliRunner().invoke(app, ["eval", "--model", str(plugin_dir / "run"), "--max-turns", "3",
                                      "--max-new-tokens", "6", "--output", str(out)])
    assert result.exit_code == 0, result.output
    data = json.loads((out / "eval.json").read_text())
    assert data["config"]["env"] == "two_axes_plugin:TwoAxes" and data["config"]["env_options"] == {"max_turns": 3}
    assert data["summary"]["dialogues"] == 2 and data["summary"]["turns_mean"] == 3.0
    assert [s["scenario_id"] for s in data["scenarios"]] == ["test-0", "test-1"]

