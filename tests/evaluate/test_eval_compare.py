"""`mapo compare`: side-by-side tables with deltas against the first result."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from mapo.cli import app
from mapo.evaluate.compare import load_result, table_rows, to_html, to_markdown, write_comparison


def eval_json(folder, pass_rate, epmq_value, fallbacks=0, turns=20.0, hacking=None):
    folder.mkdir(parents=True)
    epmq = {k: 50.0 for k in ("RDI", "Etot", "Snet", "Rho", "Sproj", "Tau", "Rpos", "Align", "Pen",
                              "outcome", "efficiency", "stability")} | {"epmq": epmq_value}
    summary = {
        "dialogues": 10, "scenarios": 10, "pass_count": round(10 * pass_rate), "pass_rate": pass_rate,
        "outcomes": {"success": round(10 * pass_rate), "failure": 0, "timeout": 10 - round(10 * pass_rate), "other": 0},
        "reasons": {}, "turns_mean": turns, "final_distance_mean": 5.0, "epmq_scored": 10, "epmq": epmq,
        "success_by_axis": {"A": {"dialogues": 5, "passes": 1, "rate": 0.2}, "C": {"dialogues": 5, "passes": 2, "rate": 0.4}},
        "alignment": {"target": 0.3, "deficit": 0.25, "target_by_axis": {"C": 0.1, "A": 0.1, "P": 0.1},
                      "deficit_by_axis": {"C": 0.1, "A": 0.1, "P": 0.05}},
        "fallbacks": {}, "fallback_total": fallbacks,
    }
    if hacking is not None:  # eval.json files written before the monitor lack it
        summary["hacking"] = hacking
    (folder / "eval.json").write_text(json.dumps({"config": {}, "summary": summary, "scenarios": []}))
    return folder


def test_deltas_against_the_first_result(tmp_path):
    base = eval_json(tmp_path / "base", 0.2, 40.0, fallbacks=2, turns=30.0)
    mapo = eval_json(tmp_path / "mapo", 0.5, 55.5, turns=20.0)
    grpo = eval_json(tmp_path / "grpo", 0.3, 38.0, fallbacks=3)
    results = [load_result(p) for p in (base, mapo, grpo / "eval.json")]
    assert [r.label for r in results] == ["base", "mapo", "grpo"]
    rows = {metric.name: values for metric, values in table_rows(results)}
    assert rows["pass rate (%)"] == [20.0, 50.0, 30.0]
    assert rows["EPM-Q"] == [40.0, 55.5, 38.0]
    markdown = to_markdown(results)
    assert markdown.splitlines()[0] == "| metric | base | mapo | Δ vs base | grpo | Δ vs base |"
    assert "| pass rate (%) | 20.00 | 50.00 | +30.00 | 30.00 | +10.00 |" in markdown
    assert "| EPM-Q | 40.00 | 55.50 | +15.50 | 38.00 | -2.00 |" in markdown
    html = to_html(results)
    # fewer fallbacks and fewer turns are better: green for mapo's -2 fallbacks, red for grpo's +1
    assert "style='color:#2f8f4e'>-2</td>" in html and "style='color:#c2452d'>+1</td>" in html
    assert "style='color:#c2452d'>-2.00</td>" in html  # grpo's lower EPM-Q


def hacking(distinct2, echo):
    return {"hack_distinct2": distinct2, "hack_repetition": 0.05, "hack_echo": echo, "hack_role_swap": 0.0,
            "hack_fragment": 0.1}


def test_hacking_monitor_beside_epmq_with_the_better_direction(tmp_path):
    old = eval_json(tmp_path / "old", 0.2, 40.0)  # before the monitor
    base = eval_json(tmp_path / "base", 0.2, 40.0, hacking=hacking(0.8, 0.1))
    hacked = eval_json(tmp_path / "hacked", 0.5, 60.0, hacking=hacking(0.4, 0.5))
    results = [load_result(p) for p in (base, hacked, old)]
    names = [metric.name for metric, _ in table_rows(results)]
    first = names.index("reward hacking: distinct-2 (higher is better)")
    assert names[first:first + 5] == [
        "reward hacking: distinct-2 (higher is better)", "reward hacking: repetition (lower is better)",
        "reward hacking: echo (lower is better)", "reward hacking: role swap (lower is better)",
        "reward hacking: fragment (lower is better)",
    ]
    assert names.index("EPM-Q") < first < names.index("success rate, dominant axis A (%)")
    markdown = to_markdown(results)
    assert "| reward hacking: distinct-2 (higher is better) | 0.8 | 0.4 | -0.4 | – | – |" in markdown
    assert "| reward hacking: echo (lower is better) | 0.1 | 0.5 | +0.4 | – | – |" in markdown
    html = to_html(results)
    # both got worse: less distinct wording (red -0.4) and more echo (red +0.4)
    assert "style='color:#c2452d'>-0.4</td>" in html and "style='color:#c2452d'>+0.4</td>" in html


def test_a_monitor_figure_an_older_eval_lacks_comes_from_the_transcripts_beside_it(tmp_path):
    older = eval_json(tmp_path / "older", 0.2, 40.0, hacking=hacking(0.8, 0.1))  # before re-asks were counted
    turns = [{"user": "Hi.", "response": "What would you say to her?"},
             {"user": "Not much.", "response": "What would you say to him?"}]
    (older / "transcripts.jsonl").write_text(json.dumps({"scenario_id": "s", "sample_index": 0, "turns": turns}) + "\n")
    bare = eval_json(tmp_path / "bare", 0.2, 40.0, hacking=hacking(0.8, 0.1))  # no transcripts: stays missing
    rows = {metric.name: values for metric, values in table_rows([load_result(older), load_result(bare)])}
    assert rows["reward hacking: re-asked question (lower is better)"] == [0.5, None]
    assert rows["reward hacking: echo (lower is better)"] == [0.1, 0.1]  # what the file has is kept as written
    (older / "transcripts.jsonl").write_text("{not json\n")
    with pytest.raises(ValueError, match="transcripts.jsonl:1: invalid JSON"):
        load_result(older)


def test_write_comparison_and_cli(tmp_path):
    a = eval_json(tmp_path / "runs" / "a", 0.1, 30.0)
    b = eval_json(tmp_path / "other" / "a", 0.2, 35.0)
    md, html, text = write_comparison([a, b], tmp_path / "cmp")
    assert md.read_text() == text and html.read_text().startswith("<!doctype html>")
    assert "| metric | a | a (2) | Δ vs a |" in text  # same folder names stay distinguishable
    result = CliRunner().invoke(app, ["compare", str(a), str(b), "--label", "base", "--label", "mapo",
                                      "--output", str(tmp_path / "cli")])
    assert result.exit_code == 0, result.output
    assert "| metric | base | mapo | Δ vs base |" in (tmp_path / "cli" / "compare.md").read_text()
    assert str(tmp_path / "cli" / "compare.html") in result.output


def test_benchmark_results_compare_and_kinds_must_match(tmp_path):
    def bench(folder, score):
        folder.mkdir()
        summary = {"score": score, "parseable": 9, "n": 10, "parse_rate": 90.0, "parse_failures": 1,
                   "first_pass_score": None, "first_pass_parseable": 0}
        (folder / "results.json").write_text(json.dumps({"benchmark": "eqbench", "config": {}, "summary": summary}))
        return folder

    text = to_markdown([load_result(bench(tmp_path / "x", 40.0)), load_result(bench(tmp_path / "y", 45.0))])
    assert "| EQ-Bench score | 40.00 | 45.00 | +5.00 |" in text
    assert "| first-pass score | – | – | – |" in text
    mixed = [load_result(tmp_path / "x"), load_result(eval_json(tmp_path / "e", 0.1, 1.0))]
    with pytest.raises(ValueError, match="different kinds"):
        to_markdown(mixed)
    with pytest.raises(ValueError, match="at least two"):
        to_markdown(mixed[:1])
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "eval.json").write_text(json.dumps({"summary": {"pass_rate": 1}}))
    with pytest.raises(ValueError, match="eval result is missing"):
        load_result(tmp_path / "bad")
    with pytest.raises(FileNotFoundError, match="no eval.json or results.json"):
        load_result(tmp_path / "x" / "..")


def test_an_archived_eval_json_gz_compares_like_the_plain_file(tmp_path):
    import gzip

    plain = eval_json(tmp_path / "plain", 0.4, 50.0)
    packed = eval_json(tmp_path / "packed", 0.4, 50.0)
    (packed / "eval.json.gz").write_bytes(gzip.compress((packed / "eval.json").read_bytes()))
    (packed / "eval.json").unlink()
    assert load_result(packed).metrics == load_result(plain).metrics  # the folder finds eval.json.gz
    assert load_result(packed / "eval.json").metrics == load_result(packed / "eval.json.gz").metrics == load_result(plain).metrics
