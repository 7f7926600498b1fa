"""The Python API: `mapo.train` (the docstring's example) and one `mapo.core.step.train_step` on its
own, both on the tiny test model and the toy environment, a few seconds each."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from tiny_policy import ToyEnvironment, tiny_policy, toy_scenarios  # importing registers "toy-test"

import mapo
from mapo.config import load_config
from mapo.core.rollout import rollout
from mapo.core.step import advantages_of, score, train_step, training_batch
from mapo.core.update import make_optimizer
from mapo.run_folder import RunFolder

TINY = [
    "env.name=toy-test", "env.options.end_early=false", "policy.model=tiny", "policy.lora.r=4", "threads=1",
    "rollout.scenarios_per_step=1", "rollout.samples_per_scenario=2", "rollout.max_turns=2",
    "rollout.max_new_tokens=6", "rollout.engine=hf", "optim.lr=0.01",
]


def test_the_docstring_example_trains_then_resumes(tmp_path):
    """`mapo.train`'s example with the tiny settings: a named config with overrides, then a resume."""
    out = tmp_path / "first"
    result = mapo.train("default", overrides=[*TINY, "steps=1"], output=out, show_progress=False)
    assert result.run_dir == out and (out / "config.yaml").is_file() and (out / "final").is_dir()
    assert result.final_metrics["step"] == 1 and math.isfinite(result.final_metrics["reward_mean"])
    assert f"Run folder: {out}" in result.summary
    resumed = mapo.train(resume=result.run_dir, overrides=["steps=2"], show_progress=False)
    assert [m["step"] for m in resumed.metrics] == [1, 2]  # the earlier step included
    assert resumed.metrics == RunFolder(out).read_metrics()
    with pytest.raises(ValueError, match="own config.yaml"):
        mapo.train("default", resume=out)


def test_one_step_on_its_own_moves_the_weights_and_reports_a_finite_loss():
    """The step without the trainer: one rollout, then rewards -> advantages -> sequences -> update."""
    config = load_config(None, TINY)
    policy = tiny_policy(lora=True)
    optimizer = make_optimizer(policy, config.optim)
    torch.manual_seed(0)
    groups = rollout(policy, toy_scenarios(1), lambda: ToyEnvironment(end_early=False), config.rollout, seed=0)
    before = [p.detach().clone() for p in policy.trainable_parameters()]

    result = train_step(policy, optimizer, groups, config)

    assert any(not torch.equal(a, p) for a, p in zip(before, policy.trainable_parameters()))
    assert math.isfinite(result.metrics["loss"]) and result.metrics["optimizer_steps"] == 1
    assert result.metrics["trained_tokens"] == sum(s.n_trained for s in result.sequences) > 0
    # the stages by hand give what the step trained on
    score(groups, config.reward.kind)
    advantages = advantages_of(groups, config.advantage)
    assert advantages.values == result.advantages
    assert training_batch(groups, advantages.values) == result.sequences
    assert np.isclose(sum(t.reward for t in groups[0].trajectories[0].turns), -np.diff(groups[0].trajectories[0].distances).sum())
