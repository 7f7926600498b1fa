"""The learned judge (issue 30, item 2): a few training steps of the real MiniLM cross-encoder
(one trained layer, the rest frozen) on a handful of bundled exemplars, its folder, the
`learned` kind through the role registry and `mapo env calibrate`, and clear errors for a
missing or broken folder."""

from __future__ import annotations

import json

import pytest
import torch
from typer.testing import CliRunner

from mapo.cli import app
from mapo.envs.dynamics import LEVEL_KEYS, validate_levels
from mapo.envs.empathy.calibrate import first_contexts
from mapo.envs.empathy.learned.model import CONFIG_FILE, WEIGHTS_FILE
from mapo.envs.empathy.learned.train import TrainOptions, train_to_folder, training_exemplars, writer_unit
from mapo.envs.empathy.roles import ROLES, make_role

TINY = TrainOptions(trained_layers=1, epochs=1, max_length=96, seed=3, contexts_per_batch=2)


@pytest.fixture(scope="module")
def replies():
    return first_contexts(training_exemplars(splits=("calibration",)), 4)


@pytest.fixture(scope="module")
def judge_folder(tmp_path_factory, replies):
    out = tmp_path_factory.mktemp("learned")
    summary = train_to_folder(out, replies, TINY, show=False)
    assert summary["steps"] == 2 and summary["contexts"] == 4
    return out


def test_training_writes_a_small_folder_and_is_deterministic_by_seed(judge_folder, replies, tmp_path):
    config = json.loads((judge_folder / CONFIG_FILE).read_text())
    assert config["trained_layers"] == 1 and config["trained_on"] == {"calibration": len(replies)}
    assert (judge_folder / WEIGHTS_FILE).stat().st_size < 5_000_000  # one layer and the heads, half precision
    again = tmp_path / "again"
    train_to_folder(again, replies, TINY, show=False)
    first, second = torch.load(judge_folder / WEIGHTS_FILE), torch.load(again / WEIGHTS_FILE)
    assert first.keys() == second.keys() and all(torch.equal(first[k], second[k]) for k in first)
    assert any(k.startswith("heads.") for k in first) and not any(".layer.0." in k for k in first)


@pytest.mark.parametrize("decode", ["argmax", "rounded", "nearest"])
def test_the_learned_kind_returns_the_judge_contract(judge_folder, replies, decode):
    assert "learned" in ROLES["judge"].names()
    judge = make_role("judge", {"kind": "learned", "path": str(judge_folder), "degenerate_gate": False, "decode": decode})
    judge.prime([(e.context, e.response) for e in replies[:6]])
    for e in replies[:6]:
        judgement = judge.score(e.context, e.response)
        assert validate_levels(judgement.levels) == judgement.levels and set(judgement.levels) == set(LEVEL_KEYS)
        assert all(isinstance(v, int) for v in judgement.levels.values())
        assert set(judgement.evidence) == {k for k, v in judgement.levels.items() if v}
        assert all(abs(sum(p) - 1) < 0.01 for p in judgement.info["probabilities"].values())
        assert len(judgement.info["expected_v"]) == 3
    assert judge.score(replies[0].context, "  ").levels["A_neg"] == -1


def test_the_gate_keeps_the_rules_levels_for_degenerate_text(judge_folder, replies):
    judge = make_role("judge", {"kind": "learned", "path": str(judge_folder)})
    loop = "I hear you. I hear you. I hear you. I hear you. I hear you. I hear you."
    judgement = judge.score(replies[0].context, loop)
    assert judgement.info["gated"] and not any(judgement.levels[k] for k in ("C_prog", "A_prog", "P_prog"))


def test_calibrate_cli_scores_the_learned_kind(judge_folder, tmp_path):
    result = CliRunner().invoke(app, [
        "env", "calibrate", "--split", "calibration", "--limit", "2", "--judge", "learned",
        "--judge-option", f"path={judge_folder}", "--output", str(tmp_path),
    ])
    assert result.exit_code == 0, result.output
    data = json.loads((tmp_path / "calibration.json").read_text())
    assert data["judge"] == {"kind": "learned", "path": str(judge_folder)} and data["ranking"]["pairs"] > 0


def test_a_missing_or_broken_folder_is_named(judge_folder, tmp_path):
    with pytest.raises(ValueError, match="needs the option path=DIR"):
        make_role("judge", "learned")
    with pytest.raises(ValueError, match="decode must be one of argmax, rounded, nearest, got 'mean'"):
        make_role("judge", {"kind": "learned", "path": str(judge_folder), "decode": "mean"})
    with pytest.raises(ValueError, match=f"{tmp_path / 'nowhere'} is not a folder"):
        make_role("judge", {"kind": "learned", "path": str(tmp_path / "nowhere")})
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / CONFIG_FILE).write_text((judge_folder / CONFIG_FILE).read_text())
    with pytest.raises(ValueError, match=f"{broken} has no {WEIGHTS_FILE}"):
        make_role("judge", {"kind": "learned", "path": str(broken)})
    (broken / WEIGHTS_FILE).write_bytes(b"not a torch file")
    with pytest.raises(ValueError, match=f"{broken / WEIGHTS_FILE} cannot be read"):
        make_role("judge", {"kind": "learned", "path": str(broken)})
    result = CliRunner().invoke(app, ["env", "calibrate", "--judge", "learned", "--judge-option", f"path={broken}"])
    assert result.exit_code != 0 and "cannot be read" in result.output


def test_writer_units_are_blind_sets_and_exclusion_leaves_them_out():
    pool = training_exemplars()
    units = {writer_unit(e) for e in pool}
    assert {"blind3", "blind4", "blind5", "blind6", "blind7", "blind8", "calibration", "heldout", "adversarial"} == units
    assert not any(writer_unit(e) == "blind7" for e in training_exemplars(exclude=["blind7"]))
