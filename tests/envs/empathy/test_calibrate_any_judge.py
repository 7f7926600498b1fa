"""`mapo env calibrate` for any judge (issue 30, item 1).

Real local servers: `JudgeServer`, an OpenAI-compatible server whose model is the offline
judge, so the LLM judge's levels over it must equal the offline judge's own (the prompt of
`LLMJudge.score` carries the whole context); `FaultProxy` in front of it answers prose
instead of JSON, as a small model without constrained decoding does. The exemplars are a
small folder cut from the bundled files."""

from __future__ import annotations

import json

import pytest
import yaml
from typer.testing import CliRunner

from mapo.cli import app
from mapo.envs.dynamics import LEVEL_KEYS
from mapo.envs.empathy.calibrate import evaluate, exemplar_dir, load_exemplars
from mapo.envs.empathy.offline.judge import OfflineJudge
from mapo.envs.empathy.roles import ROLES, register_role
from mapo.testing.fault_proxy import FaultProxy
from mapo.testing.judge_server import JudgeServer

# two contexts from each: a card-based held-out file, a self-contained calibration file, the adversarial part
SOURCES = ("bundled_cards.yaml", "career.yaml", "adversarial/adversarial_career_living.yaml")


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    out = tmp_path_factory.mktemp("exemplars")
    for name in SOURCES:
        contexts = yaml.safe_load((exemplar_dir() / name).read_text(encoding="utf-8"))[:2]
        (out / name.replace("/", "_")).write_text(yaml.safe_dump(contexts, allow_unicode=True), encoding="utf-8")
    return out


@pytest.fixture(scope="module")
def offline(folder):
    return evaluate(OfflineJudge(), load_exemplars("all", folder))


@pytest.fixture(scope="module")
def judge_server():
    with JudgeServer() as server:
        yield server


def _calibrate(folder, out, url: str, *extra: str):
    options = [f"base_url={url}", "model=offline-judge", "api_key_env=null", "timeout=10", "max_retries=0"]
    args = ["env", "calibrate", "--split", "all", "--exemplars", str(folder), "--judge", "llm", "--output", str(out)]
    for option in options:
        args += ["--judge-option", option]
    result = CliRunner().invoke(app, [*args, *extra])
    assert result.exit_code == 0, result.output
    return " ".join(result.output.split()), json.loads((out / "calibration.json").read_text())


def test_an_llm_judge_over_an_endpoint_reports_like_the_offline_judge(folder, offline, judge_server, tmp_path):
    before = judge_server.requests
    output, data = _calibrate(folder, tmp_path, judge_server.base_url)
    replies = offline["items"]
    assert replies == 33 and offline["contexts"] == 6
    assert data["replies"] == {"judged": replies, "skipped": 0, "repaired": 0, "fallbacks": 0}
    assert judge_server.requests - before == replies  # one request per reply, no repair
    assert [p["judged"] for p in data["predictions"]] == [p["judged"] for p in offline["predictions"]]
    assert data["ranking"] == {**offline["ranking"], "with_fallback": 0}
    assert data["per_level"] == offline["per_level"] and data["families"] == offline["families"]
    assert data["judge"]["kind"] == "llm" and data["judge"]["concurrency"] == 8
    assert "LLM judge on all exemplars (33 replies, 6 contexts)" in output
    assert "Judged 33 replies: 0 after a repair, 0 fallbacks." in output
    assert "Degenerate replies by failure family" in output


def test_a_judge_answering_prose_is_scored_as_its_fallbacks_and_counted(folder, offline, judge_server, tmp_path):
    with FaultProxy(judge_server.base_url, rate=1.0, kinds=["prose"]) as garbage:
        output, data = _calibrate(folder, tmp_path, garbage.base_url, "--concurrency", "4")
    items = load_exemplars("all", folder)
    assert garbage.counts["prose"] == 2 * len(items)  # each reply: the request and its repair
    assert data["replies"] == {"judged": 33, "skipped": 0, "repaired": 0, "fallbacks": 33}
    assert all(p["fallback"] and "reason" in p for p in data["predictions"])
    pairs = offline["ranking"]["pairs"]
    assert data["ranking"] == {"pairs": pairs, "correct": 0, "accuracy": 0.0, "with_fallback": pairs}  # all ties
    for key in LEVEL_KEYS:  # neutral levels agree exactly where the label is 0
        assert data["per_level"][key]["exact"] == sum(e.expected[key] == 0 for e in items) / len(items)
    assert all(f["no_progress"] == 1.0 for f in data["families"].values())
    assert f"33 fallbacks (no valid judgement: scored as the neutral levels, in {pairs} of {pairs} ranked pairs)" in output


def test_repairs_and_fallbacks_add_up_to_the_faults_served(folder, judge_server, tmp_path):
    with FaultProxy(judge_server.base_url, rate=0.5, kinds=["prose"], seed=3) as flaky:
        _, data = _calibrate(folder, tmp_path, flaky.base_url, "--concurrency", "1")
    replies = data["replies"]
    assert replies["repaired"] > 0 and replies["fallbacks"] > 0  # seed 3, one request at a time: both happen
    assert flaky.counts["prose"] == replies["repaired"] + 2 * replies["fallbacks"]
    assert flaky.counts["forwarded"] == 33 - replies["fallbacks"]  # one valid answer per judged reply
    assert sum(p["repaired"] for p in data["predictions"]) == replies["repaired"]


class RoleOnlyJudge:
    """A judge kind with only the role protocol (no `score`): the offline judge's `judge`."""

    def __init__(self) -> None:
        self.inner = OfflineJudge()

    def reset(self, card, seed=None) -> None:
        self.inner.reset(card, seed)

    def judge(self, card, history, response, state):
        return self.inner.judge(card, history, response, state)


def test_a_role_protocol_judge_is_scored_on_the_card_contexts(folder, offline, tmp_path):
    register_role("judge", "role-only-test")(RoleOnlyJudge)
    try:
        result = CliRunner().invoke(
            app, ["env", "calibrate", "--split", "all", "--exemplars", str(folder), "--judge", "role-only-test",
                  "--output", str(tmp_path)],
        )
    finally:
        ROLES["judge"].remove("role-only-test")
    assert result.exit_code == 0, result.output
    data = json.loads((tmp_path / "calibration.json").read_text())
    on_cards = [p for p, e in zip(offline["predictions"], load_exemplars("all", folder)) if e.scenario_id]
    assert data["replies"]["judged"] == len(on_cards) == 23 and data["replies"]["skipped"] == 10
    assert [p["judged"] for p in data["predictions"]] == [p["judged"] for p in on_cards]  # card and P_{t-1} as given
    assert "10 replies of self-contained contexts skipped" in result.output


def test_bad_judge_arguments_are_named(folder, tmp_path):
    runner = CliRunner()
    base = ["env", "calibrate", "--exemplars", str(folder), "--split", "all", "--output", str(tmp_path)]
    unknown = runner.invoke(app, [*base, "--judge", "no-such-judge"])
    assert unknown.exit_code == 2 and "no-such-judge" in unknown.output
    bad_key = runner.invoke(app, [*base, "--judge", "llm", "--judge-option", "base_url=http://127.0.0.1:9/v1",
                                  "--judge-option", "model=x", "--judge-option", "colour=blue"])
    assert bad_key.exit_code == 2 and "colour" in bad_key.output
    no_pair = runner.invoke(app, [*base, "--judge-option", "colour"])
    assert no_pair.exit_code == 2 and "key=value" in no_pair.output
    bad_limit = runner.invoke(app, [*base, "--limit", "0"])
    assert bad_limit.exit_code == 2 and "limit" in bad_limit.output


@pytest.mark.slow
def test_calibrating_a_real_model_behind_vllm_serve_reports(local_server, tmp_path):
    """SmolLM2-135M as the judge on one calibration context: the command runs and reports; its number is what it is."""
    folder = tmp_path / "exemplars"
    folder.mkdir()
    (folder / "career.yaml").write_text((exemplar_dir() / "career.yaml").read_text(encoding="utf-8"), encoding="utf-8")
    options = [f"base_url={local_server}", "model=smollm2", "api_key_env=null", "timeout=300", "max_tokens=200",
               "json_format=json_schema"]
    args = ["env", "calibrate", "--exemplars", str(folder), "--split", "calibration", "--limit", "1", "--judge", "llm",
            "--concurrency", "2", "--output", str(tmp_path / "out")]
    for option in options:
        args += ["--judge-option", option]
    result = CliRunner().invoke(app, args)
    print(result.output)
    assert result.exit_code == 0, result.output
    data = json.loads((tmp_path / "out" / "calibration.json").read_text())
    replies = data["replies"]
    assert data["items"] == replies["judged"] == len(data["predictions"]) == 5 and data["contexts"] == 1
    assert replies["fallbacks"] == sum(p["fallback"] for p in data["predictions"])
    assert replies["repaired"] == sum(p["repaired"] for p in data["predictions"])
    assert data["ranking"]["pairs"] > 0 and 0.0 <= data["ranking"]["accuracy"] <= 1.0
    assert all(set(p["judged"]) == set(LEVEL_KEYS) for p in data["predictions"])
    assert f"Judged 5 replies: {replies['repaired']} after a repair, {replies['fallbacks']} fallbacks" in " ".join(
        result.output.split()
    )
