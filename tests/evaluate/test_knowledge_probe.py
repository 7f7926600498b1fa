"""The world-knowledge probe (`mapo bench knowledge`): the AUC and its interval on scores made by
hand, the draw of facts and examples, the batched scoring against one plain forward pass per
sequence, bad input, and one short run of the command on the embedded SmolLM2."""

from __future__ import annotations

import json
from math import erf

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from cli_output import flat

from mapo.cli import app
from mapo.envs.questioning.cases import bundled_case_file, load_case_set
from mapo.evaluate.knowledge import ANSWERS, build_probes, rank_auc, score_probes, summarise
from mapo.intervals import two_sample_bootstrap


@pytest.fixture(scope="module")
def things():
    return load_case_set(bundled_case_file("twenty-questions"))


# ---------------------------------------------------------------- the AUC


def _pairwise_auc(pos, neg):
    """The definition, one pair at a time."""
    wins = sum(1.0 if p > n else 0.5 if p == n else 0.0 for p in pos for n in neg)
    return wins / (len(pos) * len(neg))


def test_the_auc_of_hand_made_scores():
    assert rank_auc([3, 4, 5], [0, 1, 2]) == 1.0  # perfect
    assert rank_auc([0, 1, 2], [3, 4, 5]) == 0.0  # inverted
    assert rank_auc([1, 1, 1], [1, 1]) == 0.5  # all tied: half each
    # pairs (2,1) (2,0) (1,1) (1,0): three wins and one tie
    assert rank_auc([2, 1], [1, 0]) == 0.875
    rng = np.random.default_rng(0)
    pos, neg = rng.integers(0, 4, 37), rng.integers(0, 4, 23)  # many ties
    assert rank_auc(pos, neg) == pytest.approx(_pairwise_auc(pos, neg), abs=1e-15)
    with pytest.raises(ValueError, match="positives and negatives"):
        rank_auc([1.0], [])
    with pytest.raises(ValueError, match="finite"):
        rank_auc([1.0, float("nan")], [0.0])


def test_the_bootstrap_interval_covers_a_planted_auc_and_is_seeded():
    rng = np.random.default_rng(1)
    pos, neg = rng.normal(1.0, 1.0, 300), rng.normal(0.0, 1.0, 300)
    planted = 0.5 * (1 + erf(0.5))  # P(X > Y) for X - Y ~ N(1, 2): Phi(1 / sqrt 2) = 0.760
    low, high = two_sample_bootstrap(pos, neg, rank_auc)
    assert low < rank_auc(pos, neg) < high and low < planted < high and high - low < 0.15
    assert two_sample_bootstrap(pos, neg, rank_auc) == (low, high)
    narrow = two_sample_bootstrap(pos[:30], neg[:30], rank_auc)
    assert narrow[1] - narrow[0] > high - low  # ten times fewer items, a wider interval
    assert two_sample_bootstrap([], neg, rank_auc) == (None, None)


def test_the_summary_counts_a_zero_score_as_no():
    summary = summarise([True, True, False, False], [2.0, 0.0, -1.0, 0.5])
    assert summary["accuracy"] == 0.5 and summary["yes_rate"] == 0.5  # 0.0 says no: wrong; 0.5 says yes: wrong
    assert summary["auc"] == 0.75 and summary["probes"] == 4 and summary["true"] == 2
    assert summary["accuracy_low"] < 0.5 < summary["accuracy_high"]


# ---------------------------------------------------------------- the draw


def test_probes_are_balanced_seeded_and_their_examples_never_share_the_fact(things):
    probes = build_probes(things, 40, 4, seed=3)
    assert [p.fact.truth for p in probes].count(True) == 20
    assert len({(p.fact.candidate, p.fact.attribute.key) for p in probes}) == 40
    same = build_probes(things, 40, 4, seed=3)
    assert [p.prompt() for p in same] == [p.prompt() for p in probes]
    assert [p.prompt() for p in build_probes(things, 40, 4, seed=4)] != [p.prompt() for p in probes]
    for probe in probes:
        assert [s.truth for s in probe.shots].count(True) == 2
        assert all(s.candidate != probe.fact.candidate and s.attribute.key != probe.fact.attribute.key
                   for s in probe.shots)
        lines = probe.prompt().split("\n")
        assert lines[-1] == f"Thing: {probe.fact.candidate}. {probe.fact.attribute.question}"
        for line, shot in zip(lines, probe.shots):
            assert line == f"Thing: {shot.candidate}. {shot.attribute.question}{ANSWERS[0] if shot.truth else ANSWERS[1]}"
    zero_shot = build_probes(things, 4, 0)
    assert all(p.shots == () and "\n" not in p.prompt() for p in zero_shot)


def test_impossible_draws_are_clear_errors(things):
    with pytest.raises(ValueError, match="even number"):
        build_probes(things, 7, 4)
    with pytest.raises(ValueError, match="even number"):
        build_probes(things, 8, 3)
    true_facts = sum(len(t.facts[c]) for t in things.tables for c in t.candidates)
    with pytest.raises(ValueError, match=f"need {true_facts + 1} true .* there are {true_facts} true"):
        build_probes(things, 2 * true_facts + 2, 4)


# ---------------------------------------------------------------- the scoring


def test_batched_scores_equal_one_plain_forward_per_sequence(things):
    from mapo.model_source import LoraSpec, PolicySpec
    from mapo.policy import load_policy

    policy = load_policy(PolicySpec(model="tiny", dtype="float32", lora=LoraSpec(enabled=False)))
    probes = build_probes(things, 4, 2, seed=1)
    batched = score_probes(policy, probes, batch_size=3)  # the yes and no of a probe in different batches
    plain = []
    for probe in probes:
        answer_logp = []
        for answer in ANSWERS:
            prefix = policy.tokenizer(probe.prompt())["input_ids"]
            ids = policy.tokenizer(probe.prompt() + answer)["input_ids"]
            with torch.no_grad():
                logp = torch.log_softmax(policy.model(input_ids=torch.tensor([ids])).logits[0].float(), -1)
            answer_logp.append(sum(float(logp[j - 1, ids[j]]) for j in range(len(prefix), len(ids))))
        plain.append(answer_logp[0] - answer_logp[1])
    assert np.allclose(batched, plain, atol=1e-4)
    assert len(set(np.round(batched, 4))) > 1  # the prompts differ, so do the scores


# ---------------------------------------------------------------- the command


def test_bad_input_ends_the_command_with_a_clear_error(tmp_path):
    runner = CliRunner()
    bad = tmp_path / "cases.yaml"
    bad.write_text("name: mine\ntables:\n- name: t\n  subject: thing\n  attributes:\n"
                   "    alive: {question: 'Is it alive?', phrases: [alive]}\n"
                   "    red: {question: 'Is it red?', phrases: [red]}\n"
                   "  candidates:\n    cat: {has: [alive, furry]}\n    brick: {has: [red]}\n")
    result = runner.invoke(app, ["bench", "knowledge", "--cases", str(bad), "--probes", "2"])
    assert result.exit_code == 2
    assert "cases.yaml" in flat(result.output) and "candidates.cat.has: unknown attribute(s) furry" in flat(result.output)
    result = runner.invoke(app, ["bench", "knowledge", "--cases", str(tmp_path / "none.yaml")])
    assert result.exit_code == 2 and "none.yaml" in flat(result.output)
    result = runner.invoke(app, ["bench", "knowledge", "--probes", "5"])
    assert result.exit_code == 2 and "--probes must be an even number" in flat(result.output)
    result = runner.invoke(app, ["bench", "knowledge", "--model", "player:optimal"])
    assert result.exit_code == 2 and "log-probabilities" in flat(result.output)


def test_the_command_probes_the_embedded_model(tmp_path):
    out = tmp_path / "probe"
    result = CliRunner().invoke(app, ["bench", "knowledge", "--probes", "6", "--shots", "2", "--threads", "1",
                                      "--output", str(out)])
    assert result.exit_code == 0, result.output
    assert "World-knowledge probe" in result.output and f"Results: {out / 'results.json'}" in result.output
    data = json.loads((out / "results.json").read_text())
    assert data["config"]["model"] == "embedded" and data["config"]["shots"] == 2
    assert data["provenance"]["software"]["transformers"]
    records = [json.loads(line) for line in (out / "predictions.jsonl").read_text().splitlines()]
    assert len(records) == 6 and sum(r["truth"] for r in records) == 3
    pos = [r["score"] for r in records if r["truth"]]
    neg = [r["score"] for r in records if not r["truth"]]
    assert np.isfinite(pos + neg).all() and data["summary"]["auc"] == rank_auc(pos, neg)
    assert data["summary"]["auc_low"] <= data["summary"]["auc"] <= data["summary"]["auc_high"]
