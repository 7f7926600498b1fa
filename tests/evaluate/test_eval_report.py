"""`mapo report`: a self-contained HTML page from a run's metrics.jsonl, and the transcript viewer."""

from __future__ import annotations

import base64
import json
import re

import pytest

from typer.testing import CliRunner

from mapo.cli import app
from mapo.report.html import render_transcripts
from mapo.report.run import PANELS, write_report

ALL_KEYS = (
    "reward_mean return_mean success_rate done_success done_max_turns grad_norm grad_norm_max loss pg_loss "
    "adv_mean adv_std adv_abs_mean adv_turn_mean adv_turn_std adv_turn_abs_mean adv_batch_mean adv_batch_std "
    "adv_batch_abs_mean adv_mixed_mean adv_mixed_std adv_mixed_abs_mean response_length_mean truncated_fraction "
    "kl kl_old entropy clip_fraction ratio_mean turns_mean final_distance_mean tokens_per_s_rollout "
    "tokens_per_s_train step_time backend_retries_http_500 judge_repairs judge_fallbacks "
    "hack_distinct2 hack_repetition hack_echo hack_role_swap hack_fragment hack_reask "
    "env_success_rate env_invalid_rate env_repeat_rate env_bits_per_question "
    "memory_rss_gb memory_heap_used_gb memory_heap_free_gb"
).split()


def write_run(folder, keys=ALL_KEYS, steps=6, cut_last_line=False):
    folder.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps({"step": s, **{k: 0.1 * s + i for i, k in enumerate(keys)}, "wall_time": 1e9 + s})
             for s in range(1, steps + 1)]
    if cut_last_line:
        lines.append('{"step": 7, "reward_me')
    (folder / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    return folder


def transcript(step, sid, reason="max_turns"):
    return {
        "step": step, "scenario_id": sid, "sample_index": 0, "done_reason": reason, "return": 1.5,
        "initial_state": [-6.0, -8.0, 0.0],
        "turns": [
            {"turn": 1, "user": "I <b>can't</b> sleep.", "response": "That sounds hard.", "action": [1.0, 3.0, 0.0],
             "state": [-5.0, -5.0, 0.0], "distance": 50 ** 0.5, "levels": {"A_prog": 2, "C_prog": 1}},
            {"turn": 2, "user": "Yes.", "response": "Tell me more.", "action": [0.0, -2.0, 0.0],
             "state": [-5.0, -7.0, 0.0], "distance": 74 ** 0.5, "levels": {"A_neg": -1}},
        ],
    }


def images(page: str) -> list[bytes]:
    return [base64.b64decode(m) for m in re.findall(r"src='data:image/png;base64,([A-Za-z0-9+/=]+)'", page)]


def test_report_has_every_plot_and_links(tmp_path):
    run = write_run(tmp_path / "run", cut_last_line=True)
    (run / "config.yaml").write_text("advantage:\n  estimator: mapo\npolicy:\n  model: embedded\n")
    (run / "checkpoints" / "step-000004").mkdir(parents=True)
    with open(run / "transcripts.jsonl", "w") as handle:
        for step in (1, 2, 3):
            handle.write(json.dumps(transcript(step, f"s{step}")) + "\n")
    path = write_report(run)
    assert path == run / "report.html"
    page = path.read_text()
    pngs = images(page)
    assert len(pngs) == len(PANELS) and all(p.startswith(b"\x89PNG") for p in pngs)
    for panel in PANELS:
        assert f"alt='{panel.title}'" in page
    assert "not logged" not in page
    assert "alt='Reward-hacking monitor'" in page  # hack_* of metrics.jsonl
    assert "6 logged steps" in page  # the cut-off 7th line is skipped
    for link in ("transcripts.html", "transcripts.jsonl", "metrics.jsonl", "config.yaml", "checkpoints/step-000004"):
        assert f"href='{link}'" in page
    assert "advantage.estimator" in page and "<td>mapo</td>" in page
    assert not re.search(r"(src|href)=['\"]?(https?:)?//", page)  # self-contained: nothing fetched
    viewer = (run / "transcripts.html").read_text()
    assert "s1" in viewer and "s3" in viewer and "id=\"d2\"" not in viewer  # first and last step only
    assert "I &lt;b&gt;can&#x27;t&lt;/b&gt; sleep." in viewer


def test_report_tolerates_missing_keys(tmp_path):
    run = write_run(tmp_path / "run", keys=["reward_mean", "entropy"])
    page = write_report(run).read_text()
    assert len(images(page)) == 2
    assert "not logged in this run: Success rate and endings" in page
    assert not (run / "transcripts.html").exists()
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "metrics.jsonl").write_text("")
    assert "no rows yet" in write_report(empty).read_text()


def test_report_cli_and_missing_run(tmp_path):
    run = write_run(tmp_path / "run", steps=3)
    result = CliRunner().invoke(app, ["report", str(run)])
    assert result.exit_code == 0, result.output
    assert f"Report: {run / 'report.html'}" in result.output
    result = CliRunner().invoke(app, ["report", str(tmp_path / "nope")])
    assert result.exit_code == 2 and "no metrics.jsonl" in result.output


def test_viewer_shows_the_need_vector_per_turn():
    page = render_transcripts([transcript(1, "s1", "success")], "viewer", summary={"pass_rate": 1.0})
    assert page.count("class=\"nrow\"") == 9  # three axes at t = 0, 1, 2
    assert "<i>-5</i>" in page and "<i>-7</i>" in page  # the A component after turn 1 and turn 2
    assert "A+3" in page and "A-2" in page  # v_t per turn
    assert "<polyline" in page and ">success</span>" in page
    assert "<td>pass_rate</td><td>1.000</td>" in page


def test_report_png_draws_several_runs_against_the_reference_players(tmp_path):
    runs = [tmp_path / "s0", tmp_path / "s1"]
    for k, run in enumerate(runs):
        write_run(run, keys=["reward_mean", "env_success_rate", "env_bits_per_question"], steps=4 + k)
    evaluation = tmp_path / "eval"
    evaluation.mkdir()
    references = {"player:optimal": {"pass_rate": 1.0, "figures": {"success_rate": 1.0, "bits_per_question": 0.98}},
                  "player:random": {"pass_rate": 0.3, "figures": {"success_rate": 0.3, "bits_per_question": 0.35}}}
    (evaluation / "eval.json").write_text(json.dumps({"summary": {"references": references}}), encoding="utf-8")
    png = tmp_path / "docs" / "curve.png"
    result = CliRunner().invoke(app, ["report", *map(str, runs), "--png", str(png), "--references", str(evaluation)])
    assert result.exit_code == 0, result.output
    assert png.read_bytes().startswith(b"\x89PNG") and f"Learning curve: {png}" in result.output
    assert all((run / "report.html").is_file() for run in runs)
    from mapo.report.curves import reference_figures

    assert reference_figures(evaluation / "eval.json") == {
        "optimal": {"success_rate": 1.0, "bits_per_question": 0.98}, "random": {"success_rate": 0.3, "bits_per_question": 0.35}}
    result = CliRunner().invoke(app, ["report", str(runs[0]), "--references", str(evaluation)])
    assert result.exit_code == 2 and "--references goes with --png" in result.output


def gzip_in_place(path):
    """`path` replaced by `path`.gz, as an archived study under docs/study keeps it."""
    import gzip

    path.with_name(path.name + ".gz").write_bytes(gzip.compress(path.read_bytes()))
    path.unlink()


def test_an_archived_run_s_gzipped_metrics_and_eval_read_like_plain_ones(tmp_path):
    from mapo.evaluate.compare import load_result
    from mapo.report.curves import reference_figures
    from mapo.run_folder import RunFolder, read_metrics

    plain = write_run(tmp_path / "plain", keys=["reward_mean", "env_success_rate"], steps=4, cut_last_line=True)
    packed = write_run(tmp_path / "packed", keys=["reward_mean", "env_success_rate"], steps=4, cut_last_line=True)
    gzip_in_place(packed / "metrics.jsonl")
    assert read_metrics(packed) == read_metrics(plain) == RunFolder(packed).read_metrics() and len(read_metrics(packed)) == 4
    page = write_report(packed).read_text()
    assert "4 logged steps" in page and "href='metrics.jsonl.gz'" in page
    assert read_metrics(tmp_path / "nope") == [] and not (tmp_path / "nope").exists()  # reading creates nothing
    evaluation = tmp_path / "eval"
    evaluation.mkdir()
    summary = {"references": {"player:random": {"pass_rate": 0.3, "figures": {"bits_per_question": 0.35}}}}
    (evaluation / "eval.json").write_text(json.dumps({"summary": summary}), encoding="utf-8")
    gzip_in_place(evaluation / "eval.json")
    # the plain name finds the archive, as a command copied from an older write-up names it
    assert reference_figures(evaluation / "eval.json") == {"random": {"bits_per_question": 0.35, "success_rate": 0.3}}
    png = tmp_path / "curve.png"
    result = CliRunner().invoke(app, ["report", str(packed), "--png", str(png), "--references", str(evaluation)])
    assert result.exit_code == 0 and png.read_bytes().startswith(b"\x89PNG"), result.output
    (evaluation / "eval.json.gz").write_bytes(b"\x1f\x8b not gzip")
    with pytest.raises(ValueError, match="eval.json.gz"):  # a broken archive is named
        load_result(evaluation)
