"""EmoBench and EQ-Bench v2: loading, answer parsing, the authors' scoring, the CLI.

Fixtures in tests/fixtures/{emobench,eqbench} are ours, in the published formats.
The integration tests run the tiny model over the real files in ../shared/data and
skip when that folder is absent (a fresh clone).
"""

from __future__ import annotations

import json
import math

import pytest
from typer.testing import CliRunner

from cli_output import flat
from fixture_paths import FIXTURES, REPO

from mapo.cli import app
from mapo.evaluate import emobench, eqbench
from mapo.evaluate.bench import BenchmarkDataError, ask_in_batches

SHARED_DATA = REPO.parent / "shared" / "data"


class ScriptedResponder:
    """Stands in for the model: replies from a list, in order (the scoring is under test)."""

    name = "scripted"

    def __init__(self, replies: list[str]) -> None:
        self.replies = list(replies)
        self.batches: list[int] = []

    def respond(self, conversations, max_tokens, temperature):
        self.batches.append(len(conversations))
        return [self.replies.pop(0) for _ in conversations]


# ---------------------------------------------------------------- EmoBench


def test_emobench_loads_both_tasks_with_filters():
    items = emobench.load_emobench(FIXTURES / "emobench")
    assert [i.key for i in items] == ["EA/en/1", "EA/en/2", "EA/en/3", "EA/zh/1", "EU/en/1", "EU/en/2", "EU/zh/1"]
    assert items[0].label == 2 and items[4].label == 2 and items[4].cause_label == 0
    assert [i.key for i in emobench.load_emobench(FIXTURES, languages=["zh"])] == ["EA/zh/1", "EU/zh/1"]
    by_category = emobench.load_emobench(FIXTURES / "emobench", categories=["personal-self", "false_belief"])
    assert [i.key for i in by_category] == ["EA/en/1", "EA/en/3", "EU/en/2"]
    assert [i.key for i in emobench.load_emobench(FIXTURES / "emobench", tasks=["eu"], limit=1)] == ["EU/en/1"]


def test_emobench_bad_files_are_named(tmp_path):
    with pytest.raises(BenchmarkDataError, match="no EmoBench files"):
        emobench.load_emobench(tmp_path)
    (tmp_path / "EA.jsonl").write_text('{"qid": "1", "language": "en"}\n')
    with pytest.raises(BenchmarkDataError, match=r"EA.jsonl:1: missing field\(s\) \['category'"):
        emobench.load_emobench(tmp_path, tasks=["EA"])
    good = json.loads((FIXTURES / "emobench" / "EA.jsonl").read_text().splitlines()[0])
    (tmp_path / "EA.jsonl").write_text(json.dumps({**good, "label": "something else"}) + "\n")
    with pytest.raises(BenchmarkDataError, match="EA.jsonl:1: label 'something else' is not one of the choices"):
        emobench.load_emobench(tmp_path, tasks=["EA"])
    (tmp_path / "EA.jsonl").write_text("{not json\n")
    with pytest.raises(BenchmarkDataError, match="EA.jsonl:1: invalid JSON at column 2"):
        emobench.load_emobench(tmp_path, tasks=["EA"])
    with pytest.raises(ValueError, match="task"):
        emobench.load_emobench(FIXTURES / "emobench", tasks=["XX"])


OPTIONS = ["Quit piano", "Replay the mistake", "Talk it through with her teacher", "Pretend"]


@pytest.mark.parametrize(
    "reply, expected",
    [
        ("Answer: C", 2),
        ("answer is (B)", 1),
        ("B. Replay the mistake", 1),
        ("D", 3),
        ("I would pick C.", 2),
        ("She should talk it through with her teacher.", 2),
        ("The answer is a hard one to give.", None),  # "a" is an article, not option A
        ("A. Quit piano\nB. Replay the mistake\nC. Talk", None),  # the options echoed: ambiguous
        ("Answer: F", None),  # no option F
        ("", None),
    ],
)
def test_emobench_choice_parsing(reply, expected):
    assert emobench.parse_choice(reply, OPTIONS) == expected


@pytest.mark.parametrize(
    "reply, expected",
    [
        ("Emotion: C\nCause: A", (2, 0)),
        ("C, A", (2, 0)),
        ("Emotion: Bittersweetness\nCause: (A)", (2, 0)),
        ("A. Jealousy", (None, None)),
        ("Emotion: B", (1, None)),
    ],
)
def test_emobench_emotion_and_cause_parsing(reply, expected):
    emotions = ["Joy", "Anger", "Bittersweetness", "Fear", "Guilt", "Indifference"]
    causes = ["He is happy for her but will miss her", "He wanted the job", "Flying", "Nothing"]
    assert emobench.parse_emotion_and_cause(reply, emotions, causes) == expected


def test_emobench_scoring_needs_both_emotion_and_cause():
    items = emobench.load_emobench(FIXTURES / "emobench")
    replies = [
        "Answer: C",  # EA en 1: right
        "Answer: A",  # EA en 2: wrong
        "no idea",  # EA en 3: parse failure, wrong
        "B",  # EA zh 1: right
        "Emotion: C\nCause: A",  # EU en 1: both right
        "Emotion: A\nCause: B",  # EU en 2: emotion right, cause wrong -> wrong
        "Emotion: B",  # EU zh 1: cause missing -> parse failure
    ]
    responder = ScriptedResponder(replies)
    records, summary = emobench.run_emobench(responder, items, batch_size=3)
    assert responder.batches == [3, 3, 1]
    assert [r["correct"] for r in records] == [True, False, False, True, True, False, False]
    ea_en = summary["EA"]["en"]
    assert ea_en["accuracy"] == {"Personal-Self": 50.0, "Social-Others": 0.0, "Overall": pytest.approx(100 / 3)}
    assert ea_en["n"] == 3 and ea_en["parse_failures"] == 1
    assert summary["EA"]["zh"]["accuracy"]["Overall"] == 100.0
    eu_en = summary["EU"]["en"]
    assert eu_en["accuracy"]["Overall"] == 50.0
    assert eu_en["emotion_accuracy"] == 100.0 and eu_en["cause_accuracy"] == 50.0
    assert summary["EU"]["zh"]["parse_failures"] == 1 and summary["EU"]["zh"]["emotion_accuracy"] == 100.0
    assert summary["n"] == 7 and summary["parse_failures"] == 2


def test_ask_in_batches_rejects_bad_settings_and_short_replies():
    with pytest.raises(ValueError, match="batch_size"):
        ask_in_batches(ScriptedResponder([]), [[]], batch_size=0, max_tokens=8, temperature=0)
    with pytest.raises(ValueError, match="temperature"):
        ask_in_batches(ScriptedResponder([]), [[]], batch_size=1, max_tokens=8, temperature=-1)

    class Short(ScriptedResponder):
        def respond(self, conversations, max_tokens, temperature):
            return []

    with pytest.raises(RuntimeError, match="0 replies for 1 questions"):
        ask_in_batches(Short([]), [[{"role": "user", "content": "x"}]], batch_size=1, max_tokens=8, temperature=0)


# ---------------------------------------------------------------- EQ-Bench


def _answer(scores: dict[str, float], header: str = "Revised scores:") -> str:
    return header + "\n" + "\n".join(f"{k}: {v:g}" for k, v in scores.items())


def test_eqbench_loads_fullscale_references_as_numbers():
    items = eqbench.load_eqbench(FIXTURES / "eqbench")
    assert [i.id for i in items] == ["1", "2", "3"]
    assert items[0].reference == {"Betrayed": 8.0, "Calm": 0.0, "Grateful": 0.0, "Hurt": 9.0}
    assert [i.id for i in eqbench.load_eqbench(FIXTURES, ids=["3", "1"])] == ["1", "3"]
    assert len(eqbench.load_eqbench(FIXTURES / "eqbench", limit=2)) == 2


def test_eqbench_bad_files_are_named(tmp_path):
    bad = tmp_path / "q.json"
    bad.write_text(json.dumps({"7": {"prompt": "x", "reference_answer_fullscale": {"emotion1": "A"}}}))
    with pytest.raises(BenchmarkDataError, match="item 7: reference_answer_fullscale.emotion1_score is missing"):
        eqbench.load_eqbench(bad)
    ref = {f"emotion{i}": n for i, n in enumerate("ABCD", 1)} | {f"emotion{i}_score": "x" for i in range(1, 5)}
    bad.write_text(json.dumps({"7": {"prompt": "x", "reference_answer_fullscale": ref}}))
    with pytest.raises(BenchmarkDataError, match="item 7: emotion1_score 'x' is not a number"):
        eqbench.load_eqbench(bad)
    with pytest.raises(BenchmarkDataError, match=r"no item\(s\) with id \['99'\]"):
        eqbench.load_eqbench(FIXTURES / "eqbench", ids=["99"])


def test_eqbench_penalty_follows_the_authors_curve():
    assert eqbench.emotion_penalty(3, 3) == 0.0
    assert eqbench.emotion_penalty(5, 4) == pytest.approx(6.5 / (1 + math.exp(-1.2 * (1 - 4))))
    assert eqbench.emotion_penalty(0, 5) == pytest.approx(6.5 / (1 + math.exp(-1.2)))
    assert eqbench.emotion_penalty(0, 8) == 8.0  # beyond 5 the penalty is the distance itself
    reference = {"A": 8, "B": 0, "C": 0, "D": 9}
    answer = {"A": 8, "B": 2, "C": 0, "D": 3}
    expected = 10 - 0.7477 * (6.5 / (1 + math.exp(-1.2 * (2 - 4))) + 6)
    assert eqbench.item_score(answer, reference) == pytest.approx(expected)


def test_eqbench_parsing_prefers_revised_scores_and_counts_failures():
    items = eqbench.load_eqbench(FIXTURES / "eqbench")
    perfect = items[0].reference
    replies = [
        # first pass off, revised exact: the headline uses the revised section
        _answer({k: 0 for k in perfect}, "First pass scores:") + "\n\nCritique: too low.\n\n" + _answer(perfect),
        # no sections at all, markdown emphasis and a decimal: the whole reply is read
        "**Proud**: 9\nEnvious: 1\nBored: 0.0\n- Touched: 7",
        # one emotion missing: unparseable
        _answer({"Relieved": 10, "Annoyed": 0, "Ashamed": 0}),
    ]
    records, summary = eqbench.run_eqbench(ScriptedResponder(replies), items, batch_size=2)
    assert records[0]["score"] == pytest.approx(10.0)
    assert records[0]["first_pass_score"] < records[0]["score"]
    assert records[1]["score"] == pytest.approx(10.0) and records[1]["first_pass"] is None
    assert records[2]["parsed"] is False and records[2]["score"] is None
    assert summary["score"] == pytest.approx(100.0)  # mean over the parseable items only
    assert summary["parseable"] == 2 and summary["parse_failures"] == 1
    assert summary["parse_rate"] == pytest.approx(200 / 3)


# ---------------------------------------------------------------- CLI and real data


def test_cli_runs_both_benchmarks_on_fixtures_with_the_tiny_model(tmp_path):
    runner = CliRunner()
    out = tmp_path / "emo"
    result = runner.invoke(
        app,
        ["bench", "emobench", "--data", str(FIXTURES / "emobench"), "--model", "tiny", "--language", "en",
         "--max-tokens", "4", "--batch-size", "4", "--output", str(out)],
    )
    assert result.exit_code == 0, result.output
    assert f"Results: {out / 'results.json'}" in result.output
    data = json.loads((out / "results.json").read_text())
    assert data["benchmark"] == "emobench" and data["summary"]["n"] == 5
    assert set(data["summary"]["EA"]) == {"en"}
    assert len((out / "predictions.jsonl").read_text().splitlines()) == 5

    out = tmp_path / "eq"
    result = runner.invoke(
        app,
        ["bench", "eqbench", "--data", str(FIXTURES / "eqbench"), "--model", "tiny", "--limit", "2",
         "--max-tokens", "4", "--output", str(out)],
    )
    assert result.exit_code == 0, result.output
    summary = json.loads((out / "results.json").read_text())["summary"]
    assert summary["n"] == 2 and summary["parse_failures"] + summary["parseable"] == 2


def test_cli_reports_bad_input_without_a_traceback(tmp_path):
    runner = CliRunner()
    result = runner.invoke(app, ["bench", "emobench", "--data", str(tmp_path), "--model", "tiny"])
    assert result.exit_code == 2 and "no EmoBench files" in flat(result.output)
    result = runner.invoke(app, ["bench", "eqbench", "--data", str(FIXTURES / "eqbench")])
    assert result.exit_code == 2 and "exactly one of a model" in flat(result.output)


@pytest.mark.skipif(not SHARED_DATA.is_dir(), reason="../shared/data (the real benchmark files) is not present")
def test_tiny_model_over_the_real_benchmark_files(tmp_path):
    from tiny_policy import tiny_policy

    from mapo.engines.hf import HfEngine
    from mapo.evaluate.responders import PolicyResponder

    policy = tiny_policy()
    responder = PolicyResponder(policy, "tiny", HfEngine(policy))
    items = emobench.load_emobench(SHARED_DATA, languages=["en", "zh"], limit=2)
    assert len(items) == 4 and {i.language for i in items} == {"en"}  # the first two of each task are English
    zh = emobench.load_emobench(SHARED_DATA, languages=["zh"], categories=["Social-Self"], tasks=["EA"], limit=1)
    records, summary = emobench.run_emobench(responder, items + zh, max_tokens=4, batch_size=5)
    assert summary["n"] == 5 and summary["EA"]["zh"]["n"] == 1
    assert summary["parse_failures"] == sum(not r["parsed"] for r in records)
    eq_items = eqbench.load_eqbench(SHARED_DATA, limit=2)
    assert len(eq_items) == 2 and all(len(i.reference) == 4 for i in eq_items)
    _, eq_summary = eqbench.run_eqbench(responder, eq_items, max_tokens=4)
    assert eq_summary["n"] == 2
