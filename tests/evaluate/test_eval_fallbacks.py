"""Issue 32: `mapo eval` does not present a score built on fallbacks.

Real local servers: `JudgeServer` (an OpenAI-compatible judge) behind `FaultProxy`, which at
rate 1.0 with the `prose` fault answers every request with a sentence instead of JSON, as a
small model asked for JSON without constrained decoding does. The policy is the tiny model."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from mapo.cli import app
from mapo.evaluate.validity import fallback_verdict, json_format_hint, verdict_of
from mapo.testing.fault_proxy import FaultProxy
from mapo.testing.judge_server import JudgeServer

EVAL = ["eval", "--model", "tiny", "--limit", "2", "--max-turns", "3", "--max-new-tokens", "6", "--batch-scenarios", "2"]


@pytest.fixture(scope="module")
def judge_server():
    with JudgeServer() as server:
        yield server


def _role(url: str) -> dict:
    return {"kind": "llm", "base_url": url, "model": "offline-judge", "api_key_env": None, "timeout": 5.0,
            "max_retries": 0}


def _eval(out, roles: dict, *extra: str):
    return CliRunner().invoke(app, [*EVAL, "--env-option", "roles=" + json.dumps(roles), "--output", str(out), *extra])


def test_a_judge_that_answers_garbage_makes_the_eval_invalid_and_exit_1(tmp_path, judge_server):
    with FaultProxy(judge_server.base_url, rate=1.0, kinds=["prose"]) as garbage:
        refused = _eval(tmp_path / "refused", {"judge": _role(garbage.base_url)})
        kept = _eval(tmp_path / "kept", {"judge": _role(garbage.base_url)}, "--allow-fallbacks")
    assert garbage.counts["prose"] == 2 * 2 * 3 * 2  # 2 dialogues x 3 turns, each a request and a repair
    assert refused.exit_code == 1, refused.output
    assert "INVALID: 100% of the turns were scored with fallback values (judge 6 of 6 turns (100%), " \
           "director 0 of 6 turns (0%)), over env.max_fallback_fraction=0.5" in refused.output
    assert "fallback share of turns: judge 100%  director 0%  any 100%" in refused.output
    assert "EPM-Q " not in refused.output.replace("EPM-Q not shown", "")  # no score printed
    assert "hint: the judge asked for JSON without constrained decoding: if the server supports it, " \
           "set roles.judge.json_format (" in refused.output
    assert "json_format: llama_cpp for llama-cpp-python's server" in refused.output
    assert "--allow-fallbacks keeps it" in refused.output
    summary = json.loads((tmp_path / "refused" / "eval.json").read_text())["summary"]
    verdict = summary["validity"]
    assert verdict["valid"] is False and verdict["allowed"] is False and verdict["turns"] == 6
    assert verdict["shares"] == {"judge": 1.0, "director": 0.0, "any": 1.0}
    assert verdict["fallbacks"] == {"judge": 6, "director": 0}
    assert "INVALID" in (tmp_path / "refused" / "transcripts.html").read_text()
    # --allow-fallbacks: exit 0, still marked invalid everywhere
    assert kept.exit_code == 0, kept.output
    assert "INVALID" in kept.output and "kept as asked (--allow-fallbacks)" in kept.output
    kept_verdict = json.loads((tmp_path / "kept" / "eval.json").read_text())["summary"]["validity"]
    assert kept_verdict["valid"] is False and kept_verdict["allowed"] is True


def test_a_garbage_director_is_named_with_its_own_share(tmp_path, judge_server):
    """The judge is sound (the judge server itself), the director answers prose: the director's share
    is 2 of 3 turns (it is not asked on the turn the dialogue times out), over 0.5 but under 0.7."""
    with FaultProxy(judge_server.base_url, rate=1.0, kinds=["prose"]) as garbage:
        roles = {"judge": _role(judge_server.base_url), "director": {**_role(garbage.base_url), "json_format": "json_object"}}
        invalid = _eval(tmp_path / "strict", roles)
        valid = _eval(tmp_path / "loose", roles, "--max-fallback-fraction", "0.7")
    assert invalid.exit_code == 1, invalid.output
    assert "judge 0 of 6 turns (0%), director 4 of 6 turns (67%)" in invalid.output
    assert "hint: the director already uses json_format=json_object and still fell back" in invalid.output
    assert valid.exit_code == 0, valid.output
    assert "INVALID" not in valid.output and "EPM-Q " in valid.output
    assert "(share of turns: judge 0%  director 67%  any 67%)" in valid.output
    loose = json.loads((tmp_path / "loose" / "eval.json").read_text())["summary"]["validity"]
    assert loose["valid"] is True and loose["max_fallback_fraction"] == 0.7
    assert loose["shares"]["director"] == pytest.approx(4 / 6)

    # compare shows the invalid run's column as INVALID and ranks none of its judged metrics
    result = CliRunner().invoke(app, ["compare", str(tmp_path / "loose"), str(tmp_path / "strict"),
                                      "--output", str(tmp_path / "cmp")])
    assert result.exit_code == 0, result.output
    assert "| metric | loose | strict (INVALID) | Δ vs loose |" in result.output
    epmq_row = next(line for line in result.output.splitlines() if line.startswith("| EPM-Q |"))
    assert epmq_row.endswith("| invalid | – |")
    assert "| fallback share of turns, director (%) | 66.67 | 66.67 | 0 |" in result.output
    assert "INVALID strict: 67% of the turns were scored with fallback values" in result.output
    assert "strict (INVALID)" in (tmp_path / "cmp" / "compare.html").read_text()


def test_verdict_rule_and_old_eval_files():
    summary = {"dialogues": 2, "turns_mean": 5.0, "turns_total": 10, "fallback_turns": 5,
               "fallbacks": {"judge": 3, "director": 3}}
    at_half = fallback_verdict(summary, 0.5)  # the rule is "more than": 50 % passes, as in training
    assert at_half["valid"] and at_half["shares"] == {"judge": 0.3, "director": 0.3, "any": 0.5}
    assert not fallback_verdict(summary, 0.4)["valid"]
    assert fallback_verdict({**summary, "fallback_turns": 10}, 1.0)["valid"]  # 1.0 never marks invalid
    with pytest.raises(ValueError, match="max_fallback_fraction must be in"):
        fallback_verdict(summary, 1.5)
    # an eval.json from before the verdict: judged at the default, the largest role share as a lower bound
    old = verdict_of({"dialogues": 2, "turns_mean": 5.0, "fallbacks": {"judge": 6}})
    assert old["approximate"] and not old["valid"] and old["shares"]["any"] == 0.6
    assert verdict_of({**summary, "validity": {"valid": True, "x": 1}}) == {"valid": True, "x": 1}


def test_json_format_hint_reads_both_option_styles():
    verdict = {"fallbacks": {"judge": 2, "director": 0}}
    assert "roles.judge.json_format" in json_format_hint({"judge": "llm", "judge_options": {"model": "m"}}, verdict)
    both = json_format_hint({"judge": "llm", "director": "llm"}, {"fallbacks": {"judge": 2, "director": 1}})
    assert both.startswith("the judge and director asked for JSON") and both.count("json_format: llama_cpp") == 1
    assert "set roles.judge.json_format and roles.director.json_format (" in both
    assert json_format_hint({"roles": {"judge": {"kind": "offline"}}}, verdict) is None
    assert json_format_hint({}, verdict) is None
