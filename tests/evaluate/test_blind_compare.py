"""Blind pairwise rating (issue 27, item 3): `mapo compare --blind A B`, then `--score-blind PAIRS KEY RATINGS`.

The eval folders are written here in `mapo eval`'s format (eval.json with a summary, per-scenario
samples with EPM-Q, transcripts.jsonl); no model is needed to pair and score them."""

from __future__ import annotations

import csv
import gzip
import io
import json

import pytest
from typer.testing import CliRunner

from mapo.cli import app
from mapo.evaluate.validity import fallback_verdict
from mapo.lab.blind.pairs import load_eval_run, write_blind
from mapo.lab.blind.score import RatingsError, score_blind

CARDS = ("career-a", "family-b", "health-c")


def eval_folder(root, label, *, epmq, seed=0, turns=3, judge_fallbacks=0, extra=(), short=()):
    """A `mapo eval` folder: 3 cards x 2 samples (+ `extra` keys); `epmq(card, sample)` per dialogue;
    dialogues in `short` have one turn only; each run words its replies its own way (a word from its label's length)."""
    folder = root / label
    folder.mkdir(parents=True)
    keys = [(card, sample) for card in CARDS for sample in range(2)] + list(extra)
    transcripts, scenarios = [], {}
    for card, sample in keys:
        n = 1 if (card, sample) in short else turns
        transcripts.append({
            "scenario_id": card, "title": f"Title of {card}", "sample_index": sample, "done_reason": "timeout",
            "outcome": "timeout", "epmq": epmq(card, sample),
            "turns": [{"turn": t + 1, "user": f"{card} person line {t + 1} (sample {sample})",
                       "response": f"{('plain', 'warm', 'kind', 'calm')[len(label) % 4]} reply {t + 1} to {card}#{sample}"}
                      for t in range(n)],
        })
        scenarios.setdefault(card, []).append({"sample_index": sample, "epmq": {"epmq": epmq(card, sample)}})
    total = sum(len(t["turns"]) for t in transcripts)
    summary = {"dialogues": len(keys), "turns_mean": total / len(keys), "turns_total": total,
               "fallback_turns": judge_fallbacks, "fallbacks": {"judge": judge_fallbacks} if judge_fallbacks else {}}
    summary["validity"] = fallback_verdict(summary)
    data = {"config": {"policy": f"policy-{label}", "seed": seed}, "summary": summary,
            "scenarios": [{"scenario_id": c, "samples": s} for c, s in scenarios.items()]}
    (folder / "eval.json").write_text(json.dumps(data))
    (folder / "transcripts.jsonl").write_text("".join(json.dumps(t) + "\n" for t in transcripts))
    return folder


def _runs(tmp_path, **base_options):
    # base's EPM-Q is 10 everywhere; trained's is 20 on career-a and family-b, 5 on health-c
    base = eval_folder(tmp_path, "base", epmq=lambda card, sample: 10.0, extra=[("only-base", 0)],
                       short=[("family-b", 1)], **base_options)
    trained = eval_folder(tmp_path, "trained", epmq=lambda card, sample: 5.0 if card == "health-c" else 20.0)
    return base, trained


def _pairs(rater):
    return [json.loads(line) for line in (rater / "pairs.jsonl").read_text().splitlines()]


def _fill(ratings_path, choose):
    """Fill the template: `choose(pair_id) -> (preferred, score_A, score_B)`."""
    lines = ratings_path.read_text().splitlines()
    out = [line if line.startswith("#") or line.startswith("pair,") else ",".join([line.split(",")[0], *map(str, choose(line.split(",")[0])), ""])
           for line in lines]
    ratings_path.write_text("\n".join(out) + "\n")


def test_pairs_are_blind_complete_and_unblind_correctly(tmp_path):
    base, trained = _runs(tmp_path)
    rater, key_path, count = write_blind((base, trained), tmp_path / "blind", turns=2, seed=7)
    assert count == 6  # "only-base" is in one run only
    assert sorted(p.name for p in rater.iterdir()) == ["pairs.jsonl", "pairs.md", "ratings.csv"]
    assert key_path.parent == tmp_path / "blind" and not (rater / "key.json").exists()
    key = json.loads(key_path.read_text())
    pairs = _pairs(rater)
    # nothing the rater gets names a run, a policy or a score
    for name in ("pairs.md", "pairs.jsonl", "ratings.csv"):
        text = (rater / name).read_text()
        for secret in ("base", "trained", "policy-", "epmq", "seed"):
            assert secret not in text, (name, secret)
    # the key unblinds every pair: the side's text is that run's dialogue, cut to the same turns
    sides = []
    for pair in pairs:
        entry = key["pairs"][pair["pair"]]
        expected_turns = 1 if (pair["scenario_id"], pair["sample_index"]) == ("family-b", 1) else 2
        assert pair["turns_shown"] == expected_turns and len(pair["A"]) == len(pair["B"]) == 2 * expected_turns
        for side in ("A", "B"):
            run = tmp_path / entry[side] / "transcripts.jsonl"
            record = next(json.loads(line) for line in run.read_text().splitlines()
                          if json.loads(line)["scenario_id"] == pair["scenario_id"]
                          and json.loads(line)["sample_index"] == pair["sample_index"])
            assert pair[side][1]["text"] == record["turns"][0]["response"]
            assert pair[side][0] == {"speaker": "person", "text": record["turns"][0]["user"]}
        assert {entry["A"], entry["B"]} == {"base", "trained"}
        sides.append(entry["A"])
    assert set(sides) == {"base", "trained"}  # the order really is drawn per pair
    assert key["seed"] == 7 and key["turns"] == 2
    # the same seed gives the same files; a fresh seed is drawn and kept when none is given
    again, again_key, _ = write_blind((base, trained), tmp_path / "again", turns=2, seed=7)
    assert (again / "pairs.jsonl").read_bytes() == (rater / "pairs.jsonl").read_bytes()
    # an exported eval keeps its transcripts gzip-compressed: read the same
    plain = trained / "transcripts.jsonl"
    text = plain.read_bytes()
    (trained / "transcripts.jsonl.gz").write_bytes(gzip.compress(text))
    plain.unlink()
    packed, _, _ = write_blind((base, trained), tmp_path / "packed", turns=2, seed=7)
    assert (packed / "pairs.jsonl").read_bytes() == (rater / "pairs.jsonl").read_bytes()
    (trained / "transcripts.jsonl.gz").write_bytes((trained / "transcripts.jsonl.gz").read_bytes()[:40])
    with pytest.raises(ValueError, match=r"transcripts.jsonl.gz: cannot read transcripts: .*cut short"):
        write_blind((base, trained), tmp_path / "cut", turns=2, seed=7)
    (trained / "transcripts.jsonl.gz").unlink()
    plain.write_bytes(text)
    _, fresh_key, _ = write_blind((base, trained), tmp_path / "fresh", turns=2)
    assert isinstance(json.loads(fresh_key.read_text())["seed"], int)
    md = (rater / "pairs.md").read_text()
    assert md.count("## Pair ") == 6 and "### A" in md and "**Listener B:**" in md


def test_score_win_rates_interval_cards_and_epmq_agreement(tmp_path):
    base, trained = _runs(tmp_path)
    rater, key_path, _ = write_blind((base, trained), tmp_path / "blind", seed=3)
    key = json.loads(key_path.read_text())
    side_of = {pid: {entry["A"]: "A", entry["B"]: "B"} for pid, entry in key["pairs"].items()}
    pairs = _pairs(rater)
    # the rater prefers trained on career-a and family-b (4 pairs), base on health-c (2 pairs):
    # exactly EPM-Q's order, so the agreement is 6 of 6; trained gets 4, base 3 scores
    card = {p["pair"]: p["scenario_id"] for p in pairs}

    def choose(pid):
        winner = "base" if card[pid] == "health-c" else "trained"
        s = side_of[pid]
        return s[winner], 4 if s["trained"] == "A" else 3, 4 if s["trained"] == "B" else 3

    _fill(rater / "ratings.csv", choose)
    result = CliRunner().invoke(app, ["compare", "--score-blind", str(rater / "pairs.jsonl"), str(key_path),
                                      str(rater / "ratings.csv"), "--output", str(tmp_path / "score")])
    assert result.exit_code == 0, result.output
    out = result.output
    assert "- trained preferred in 4 of 6 (66.7 %, 95 % interval 22.3-95.7 %)" in out
    assert "- base preferred in 2 of 6 (33.3 %, 95 % interval 4.3-77.7 %)" in out
    assert "- ties: 0 of 6" in out
    assert "- trained: mean score 4.00 of 5 over 6 dialogue(s)" in out
    assert "ordered 6 of 6 (100.0 %, 95 % interval 54.1-100.0 %) decisive pairs as the rater did" in out
    assert "| Title of health-c | 2 | 2 | 0 | 0 |" in out and "| Title of career-a | 2 | 0 | 2 | 0 |" in out
    saved = json.loads((tmp_path / "score" / "score.json").read_text())
    assert saved["win"]["trained"]["wins"] == 4 and saved["epmq_agreement"]["wins"] == 6

    # ties are reported apart and leave the interval to the decisive pairs; case does not matter
    _fill(rater / "ratings.csv", lambda pid: ("TIE" if card[pid] == "career-a" else choose(pid)[0], "", ""))
    _, text = score_blind(rater / "pairs.jsonl", key_path, rater / "ratings.csv", tmp_path / "score2")
    assert "- trained preferred in 2 of 4 (50.0 %, 95 % interval 6.8-93.2 %)" in text and "- ties: 2 of 6" in text

    # EPM-Q that cannot tell the two sides apart gives no agreement figure, and says why
    same = [eval_folder(tmp_path / "same", label, epmq=lambda c, s: 12.0) for label in ("one", "two")]
    rater, key_path, _ = write_blind((same[0], same[1]), tmp_path / "same-blind", seed=0)
    _fill(rater / "ratings.csv", lambda pid: ("A", "", ""))
    _, text = score_blind(rater / "pairs.jsonl", key_path, rater / "ratings.csv", tmp_path / "score3")
    assert "- EPM-Q agreement: no decisive pair whose two dialogues EPM-Q tells apart (6 with equal EPM-Q" in text


@pytest.mark.parametrize("case, message", [
    ("missing", r"1 of 6 pairs not rated: p6"),
    ("extra", r"ratings.csv:\d+: pair 'p9' is not in the pairs file"),
    ("twice", r"ratings.csv:\d+: pair p1 is rated twice"),
    ("bad value", r"ratings.csv:\d+: preferred must be A, B or tie, got 'left'"),
    ("bad score", r"ratings.csv:\d+: score_B must be 1-5, got 7"),
    ("text score", r"ratings.csv:\d+: score_A must be an integer 1-5 or empty, got 'good'"),
    ("no hash", r"no '# pairs_sha256:' line"),
    ("other pairs", r"made for other pairs"),
    ("pairs changed", r"pairs.jsonl has changed since .*key.json was written"),
    ("header", r"header must be pair,preferred,score_A,score_B,note"),
])
def test_ratings_that_do_not_match_are_refused_with_the_reason(tmp_path, monkeypatch, case, message):
    base, trained = _runs(tmp_path)
    rater, key_path, _ = write_blind((base, trained), tmp_path / "blind", seed=1)
    ratings = rater / "ratings.csv"
    _fill(ratings, lambda pid: ("A", 3, 4))
    text = ratings.read_text()
    lines = text.splitlines()
    edits = {
        "missing": lambda: "\n".join(line for line in lines if not line.startswith("p6,")),
        "extra": lambda: text + "p9,A,,,\n",
        "twice": lambda: text + "p1,B,,,\n",
        "bad value": lambda: text.replace("p2,A,", "p2,left,"),
        "bad score": lambda: text.replace("p3,A,3,4", "p3,A,3,7"),
        "text score": lambda: text.replace("p3,A,3,4", "p3,A,good,4"),
        "no hash": lambda: "\n".join(line for line in lines if "pairs_sha256" not in line),
        "other pairs": lambda: text.replace("pairs_sha256: ", "pairs_sha256: 0"),
        "pairs changed": lambda: text,
        "header": lambda: text.replace("pair,preferred,score_A,score_B,note", "pair,winner"),
    }
    ratings.write_text(edits[case]())
    if case == "pairs changed":  # one word of one dialogue edited after the key was written
        pairs = rater / "pairs.jsonl"
        pairs.write_text(pairs.read_text().replace("reply 1", "reply one", 1))
    with pytest.raises(RatingsError, match=message):
        score_blind(rater / "pairs.jsonl", key_path, ratings, tmp_path / "score")
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["compare", "--score-blind", str(rater / "pairs.jsonl"), str(key_path), str(ratings)])
    assert result.exit_code == 2 and "error:" in result.output
    assert list((tmp_path / "runs").iterdir()) == []  # no empty run folder left behind


def test_pairing_needs_the_same_seed_and_shared_dialogues(tmp_path, monkeypatch):
    base = eval_folder(tmp_path, "base", epmq=lambda c, s: 1.0)
    other_seed = eval_folder(tmp_path, "seed1", epmq=lambda c, s: 1.0, seed=1)
    with pytest.raises(ValueError, match=r"different seeds \(base: 0, seed1: 1\)"):
        write_blind((base, other_seed), tmp_path / "x")
    (tmp_path / "bare").mkdir()
    (tmp_path / "bare" / "eval.json").write_text((base / "eval.json").read_text())
    with pytest.raises(FileNotFoundError, match="no transcripts beside eval.json"):
        load_eval_run(tmp_path / "bare")
    summary_less = tmp_path / "summary-less"
    summary_less.mkdir()
    (summary_less / "eval.json").write_text(json.dumps({"config": {"seed": 0}, "summary": {}, "scenarios": []}))
    (summary_less / "transcripts.jsonl").write_text("")
    with pytest.raises(ValueError, match=r"eval.json: eval result is missing or has a bad 'turns_mean'"):
        load_eval_run(summary_less)
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["compare", "--blind", str(base)])
    assert result.exit_code == 2 and "--blind compares two eval folders, got 1" in result.output
    assert list((tmp_path / "runs").iterdir()) == []  # the refused command left no empty run folder


def test_an_invalid_eval_gives_no_epmq_agreement(tmp_path):
    base, trained = _runs(tmp_path, judge_fallbacks=14)  # 14 of base's 19 turns on fallbacks
    result = CliRunner().invoke(app, ["compare", "--blind", str(base), str(trained), "--seed", "2",
                                      "--output", str(tmp_path / "blind")])
    assert result.exit_code == 0, result.output
    assert "note: base's evaluation is invalid (74% of the turns" in result.output
    rater, key_path = tmp_path / "blind" / "rater", tmp_path / "blind" / "key.json"
    assert f"Then: mapo compare --score-blind {rater}/pairs.jsonl {key_path} {rater}/ratings.csv" in result.output
    _fill(rater / "ratings.csv", lambda pid: ("B", "", ""))
    _, text = score_blind(rater / "pairs.jsonl", key_path, rater / "ratings.csv", tmp_path / "score")
    assert "EPM-Q agreement not computed: base's evaluation is invalid: 74% of the turns" in text
    rows = list(csv.reader(io.StringIO((rater / "ratings.csv").read_text())))
    assert ["p1", "B", "", "", ""] in rows


# ---------------------------------------------------------------- several rating sets, pooled


def _scored_set(tmp_path, name, trained_wins_on, labels=None):
    """One scored rating set of base vs trained: the rater prefers trained on the cards in
    `trained_wins_on` and base elsewhere, and scores trained 4, base 2."""
    root = tmp_path / name
    base, trained = _runs(root)
    rater, key_path, _ = write_blind((base, trained), root / "blind", labels, seed=1)
    key = json.loads(key_path.read_text())
    trained_label = labels[1] if labels else "trained"
    card = {p["pair"]: p["scenario_id"] for p in _pairs(rater)}

    def choose(pid):
        trained_side = "A" if key["pairs"][pid]["A"] == trained_label else "B"
        base_side = "B" if trained_side == "A" else "A"
        winner = trained_side if card[pid] in trained_wins_on else base_side
        return winner, 4 if trained_side == "A" else 2, 4 if trained_side == "B" else 2

    _fill(rater / "ratings.csv", choose)
    score_blind(rater / "pairs.jsonl", key_path, rater / "ratings.csv", root / "score")
    return root / "score"


def test_rating_sets_pool_with_a_set_bootstrap_beside_the_binomial(tmp_path):
    from mapo.lab.blind.pool import pool_scores

    sets = [_scored_set(tmp_path, "s0", CARDS),                    # trained 6 of 6
            _scored_set(tmp_path, "s1", ("career-a", "family-b")),  # trained 4 of 6
            _scored_set(tmp_path, "s2", ("health-c",))]             # trained 2 of 6
    result = pool_scores(sets)
    trained, base = result["win"]["trained"], result["win"]["base"]
    assert (trained["wins"], base["wins"], trained["decisive"], result["pairs"], result["ties"]) == (12, 6, 18, 18, 0)
    assert (trained["sets_won"], base["sets_won"]) == (2, 1)
    assert (round(trained["low"], 3), round(trained["high"], 3)) == (0.410, 0.867)  # exact binomial, 12 of 18
    # the sets disagree (100, 67 and 33 %): the set bootstrap is wider than the pairs-as-independent interval
    assert trained["set_bootstrap_low"] < trained["low"] and trained["set_bootstrap_high"] > trained["high"]
    assert result["scores"] == {"base": {"n": 18, "mean": 2.0}, "trained": {"n": 18, "mean": 4.0}}
    # EPM-Q (trained above base on career-a and family-b, below on health-c) agrees 4 + 6 + 0 times
    assert (result["epmq_agreement"]["wins"], result["epmq_agreement"]["decisive"]) == (10, 18)
    assert [s["trained"] for s in result["sets"]] == [6, 4, 2]
    out = tmp_path / "pooled"
    cli = CliRunner().invoke(app, ["compare", "--pool-blind", *map(str, sets), "--output", str(out)])
    assert cli.exit_code == 0, cli.output
    assert "- trained preferred in 12 of 18 (66.7 %); 95 % interval" in cli.output
    assert "41.0-86.7 % exact binomial (pairs as independent); won 2 of 3 sets outright" in cli.output
    assert json.loads((out / "pooled.json").read_text())["win"]["trained"]["wins"] == 12
    assert (out / "pooled.md").read_text() in cli.output


def test_pooling_refuses_sets_of_other_labels_one_set_and_a_folder_without_a_score(tmp_path, monkeypatch):
    from mapo.lab.blind.pool import pool_scores

    ours = _scored_set(tmp_path, "s0", CARDS)
    other = _scored_set(tmp_path, "s1", CARDS, labels=["sft", "rl"])
    with pytest.raises(ValueError, match=r"compares sft and rl, the first set base and trained"):
        pool_scores([ours, other])
    with pytest.raises(ValueError, match=r"pools two or more --score-blind results, got 1"):
        pool_scores([ours])
    with pytest.raises(FileNotFoundError, match=r"no score.json"):
        pool_scores([ours, tmp_path / "s0" / "blind"])
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(ValueError, match=r"bad.json: not a `--score-blind` result"):
        pool_scores([ours, tmp_path / "bad.json"])
    monkeypatch.chdir(tmp_path)
    cli = CliRunner().invoke(app, ["compare", "--pool-blind", "--score-blind", str(ours), str(ours)])
    assert cli.exit_code == 2 and "give one of --blind, --score-blind and --pool-blind" in cli.output
    assert list((tmp_path / "runs").iterdir()) == []
