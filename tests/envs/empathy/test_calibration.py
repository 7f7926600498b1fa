"""Judge calibration: the exemplar set, the metrics, and the offline judge's held-out accuracy.

`test_offline_judge_heldout_ranking` is a real test of the judge: it must order replies
to the same context like the labels do (v . v*_0) for at least 93% of the held-out pairs
(the bundled-card contexts and the former blind set; a regression guard, since both have
been read while the rules were made more general).
"""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
import yaml
from typer.testing import CliRunner

from mapo.cli import app
from mapo.envs.dynamics import levels_to_vector
from mapo.envs.empathy.calibrate import FAILURE_FAMILIES, SPLITS, ExemplarError, evaluate, load_exemplars
from mapo.envs.empathy.offline.judge import OfflineJudge
from mapo.envs.empathy.roles import LEVEL_KEYS, NEUTRAL_LEVELS, Judgement


@pytest.fixture(scope="session")
def heldout():
    return load_exemplars("heldout")


@pytest.fixture(scope="session")
def heldout_result(heldout):
    return evaluate(OfflineJudge(), heldout)


def test_exemplar_set_shape():
    splits = {name: load_exemplars(name) for name in SPLITS}
    assert len(load_exemplars("all")) == sum(len(items) for items in splits.values())
    ids = {name: {e.context_id for e in items} for name, items in splits.items()}
    for a, b in itertools.combinations(SPLITS, 2):
        assert ids[a].isdisjoint(ids[b]), (a, b)
    calibration, heldout = splits["calibration"], splits["heldout"]
    items = calibration + heldout
    assert len(items) >= 150
    contexts = ids["calibration"] | ids["heldout"]
    assert len(contexts) >= 40
    share = len(ids["heldout"]) / len(contexts)
    assert 0.3 <= share <= 0.6, share  # held-out grew by the former blind set (former_blind/)
    for cid in contexts:
        group = [e for e in items if e.context_id == cid]
        grades = {float(np.dot(levels_to_vector(e.expected), e.target)) for e in group}
        assert len(group) >= 3 and len(grades) >= 3, cid  # replies of graded quality to rank
    assert any(e.scenario_id for e in heldout)  # held-out contexts use the bundled cards
    kinds = {e.kind for e in items}
    assert {"dismissive", "generic", "premature_advice", "validating", "grounded", "empowering", "repetition"} <= kinds


class ExpectedJudge:
    """Returns the labels themselves: a perfect judge, to check the metrics."""

    def __init__(self, items):
        self.answers = {e.response: e.expected for e in items}

    def score(self, context, response):
        return Judgement(levels=dict(self.answers[response]))


class NeutralJudge:
    def score(self, context, response):
        return Judgement(levels=dict(NEUTRAL_LEVELS))


def test_metrics_on_perfect_and_constant_judges(heldout):
    perfect = evaluate(ExpectedJudge(heldout), heldout)
    assert perfect["ranking"]["accuracy"] == 1.0 and perfect["exact_all_six"] == 1.0
    assert all(perfect["per_level"][k]["exact"] == 1.0 for k in LEVEL_KEYS)
    constant = evaluate(NeutralJudge(), heldout)
    assert constant["ranking"]["accuracy"] == 0.0  # ties never count as ordered
    assert constant["ranking"]["pairs"] == perfect["ranking"]["pairs"] > 100
    assert constant["per_level"]["C_neg"]["within1"] >= constant["per_level"]["C_neg"]["exact"]


def test_offline_judge_heldout_ranking(heldout_result):
    ranking = heldout_result["ranking"]
    assert ranking["pairs"] >= 800  # bundled-card contexts plus the former blind set
    assert ranking["accuracy"] >= 0.93, ranking  # measured 0.939 (764/814)
    for key in LEVEL_KEYS:
        assert heldout_result["per_level"][key]["within1"] >= 0.95, (key, heldout_result["per_level"][key])
        assert heldout_result["per_level"][key]["exact"] >= 0.8, (key, heldout_result["per_level"][key])


def test_bad_exemplar_files_name_the_problem(tmp_path):
    good = {
        "context_id": "x-1",
        "split": "heldout",
        "situation": "Someone lost their job.",
        "cues": {"understanding": ["a"], "validation": ["b"], "empowerment": ["c"]},
        "p0": [-10, -20, -5],
        "history": [{"role": "user", "content": "I lost my job."}],
        "responses": [{"kind": "a", "text": "That hurts.", "levels": {"A_prog": 1}}, {"kind": "b", "text": "Oh well.", "levels": {}}],
    }

    def write(**changes):
        (tmp_path / "x.yaml").write_text(yaml.safe_dump([{**good, **changes}]), encoding="utf-8")

    write()
    assert len(load_exemplars("all", tmp_path)) == 2
    write(split="train")
    with pytest.raises(ExemplarError, match="x-1: split must be one of"):
        load_exemplars("all", tmp_path)
    write(responses=[{"kind": "a", "text": "Hi.", "levels": {"A_prog": 3}}, good["responses"][1]])
    with pytest.raises(ExemplarError, match=r"x-1 response 1: .*A_prog=3"):
        load_exemplars("all", tmp_path)
    write(p0=[0, 0, 0])
    with pytest.raises(ExemplarError, match="p0 must not be all zero"):
        load_exemplars("all", tmp_path)
    write(scenario_id="no-such-card")
    with pytest.raises(ExemplarError, match="'no-such-card' is not a bundled scenario card"):
        load_exemplars("all", tmp_path)
    write(history=[{"role": "assistant", "content": "Hello."}])
    with pytest.raises(ExemplarError, match="last history message must be the user's"):
        load_exemplars("all", tmp_path)
    with pytest.raises(ValueError, match="unknown split"):
        load_exemplars("test", tmp_path)  # type: ignore[arg-type]


def test_cli_calibrate_writes_results(heldout_result, tmp_path):
    result = CliRunner().invoke(app, ["env", "calibrate", "--split", "heldout", "--output", str(tmp_path / "cal")])
    assert result.exit_code == 0, result.output
    saved = json.loads((tmp_path / "cal" / "calibration.json").read_text())
    assert saved["split"] == "heldout" and saved["ranking"] == heldout_result["ranking"]
    assert "ranking" in result.output and str(tmp_path / "cal" / "calibration.json") in result.output
    bad = CliRunner().invoke(app, ["env", "calibrate", "--split", "nope"])
    assert bad.exit_code == 2 and "unknown split" in bad.output


def test_cli_env_list_and_try(tmp_path):
    listed = CliRunner().invoke(app, ["env", "list"], env={"COLUMNS": "200"})
    assert listed.exit_code == 0 and "career-priya-credit-taken" in listed.output and "Cards:" in listed.output
    played = CliRunner().invoke(
        app,
        ["env", "try", "career-priya-credit-taken", "--seed", "1", "--output", str(tmp_path / "try")],
        input="Clapping while your own design was praised under his name sounds painful.\n\n",
        env={"COLUMNS": "200"},
    )
    assert played.exit_code == 0, played.output
    assert "reward (IDR)" in played.output and "P_t (need)" in played.output
    record = json.loads((tmp_path / "try" / "dialogue.json").read_text())
    assert record["turns"] == 1 and record["scenario_id"] == "career-priya-credit-taken"
    missing = CliRunner().invoke(app, ["env", "try", "priya"])
    assert missing.exit_code == 2 and "career-priya-credit-taken" in missing.output


@pytest.fixture(scope="session")
def adversarial():
    return load_exemplars("adversarial")


def test_adversarial_set_covers_every_failure_family_beside_good_replies(adversarial):
    counts = {family: sum(e.family == family for e in adversarial) for family in FAILURE_FAMILIES}
    assert min(counts.values()) >= 10, counts
    for cid in {e.context_id for e in adversarial}:
        group = [e for e in adversarial if e.context_id == cid]
        assert any(e.family for e in group) and any(not e.family for e in group), cid
        good = [e for e in group if not e.family]
        assert all(float(np.dot(levels_to_vector(e.expected), e.target)) > 0 for e in good), cid


def test_offline_judge_pays_nothing_for_degenerate_replies(adversarial):
    """Issue 13: every failure family at v . v*_0 <= 0, with a negative level where the rubric
    gives one, and the good replies to the same context ranked above every degenerate one."""
    result = evaluate(OfflineJudge(), adversarial)
    for family, m in result["families"].items():
        assert m["no_progress"] == 1.0, (family, m)
        assert m["good_ranked_above"] == 1.0, (family, m)
        if family != "fragment":  # a cut reply earns nothing; what it said before the cut may be fine
            assert m["negative_level"] >= 0.8, (family, m)
    assert result["ranking"]["accuracy"] >= 0.9, result["ranking"]


def test_offline_judge_on_what_trained_policies_say():
    """The policy split: replies trained policies actually produced. A reward that pays them
    trains toward them, so most of those a careful rater calls non-help must earn nothing
    (the round-3 judge paid 55 of 75 and ordered 0.567 of the pairs)."""
    items = load_exemplars("policy")
    result = evaluate(OfflineJudge(), items)
    progress = ("C_prog", "A_prog", "P_prog")
    nonhelp = [p for p in result["predictions"] if not any(p["expected"][k] for k in progress)]
    paid = [p for p in nonhelp if any(p["judged"][k] > 0 for k in progress)]
    assert len(nonhelp) >= 60
    assert len(paid) <= 0.6 * len(nonhelp), (len(paid), len(nonhelp))
    assert result["ranking"]["accuracy"] >= 0.68, result["ranking"]



def test_a_sealed_blind_set_is_left_out_unless_asked_for_by_folder(tmp_path):
    from mapo.envs.empathy.calibrate import SEALED, exemplar_dir, load_exemplars

    spent = exemplar_dir() / "blind8"  # read once for issue #30, then unsealed: it loads with the others
    assert not (spent / SEALED).exists()
    assert sum(e.context_id.startswith("blind8-") for e in load_exemplars("blind")) == 192
    # the rule itself, on a folder of our own
    import shutil

    shutil.copytree(exemplar_dir() / "blind7", tmp_path / "kept")
    shutil.copytree(exemplar_dir() / "blind7", tmp_path / "later")
    for f in (tmp_path / "later").glob("*.yaml"):
        f.write_text(f.read_text(encoding="utf-8").replace("blind7-", "later-"), encoding="utf-8")
    both = len(load_exemplars("blind", tmp_path))
    (tmp_path / "later" / SEALED).write_text("sealed\n", encoding="utf-8")
    assert len(load_exemplars("blind", tmp_path)) == both // 2
