"""Reliability (issue 9): faulty judge servers, crashes and Ctrl-C, numerics at the trainer level, secrets,
overlong dialogues. See docs/reliability.md."""

from __future__ import annotations

import copy
import json
import shutil
import math
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import numpy as np
import pytest
import torch
from tiny_policy import SIGTERM_IN_UPDATE, ToyEnvironment, tiny_policy, toy_scenarios
from typer.testing import CliRunner

from mapo.backends.endpoint import BackendUnavailable, ChatBackendConfig
from mapo.backends.openai_compat import ChatBackend
from mapo.cli import app
from mapo.config import TrainConfig, load_config
from mapo.core.advantages import AdvantageSpec, compute_advantages
from mapo.core.losses import LossSpec, packed_sequence
from mapo.core.rewards import fill_rewards
from mapo.core.rollout import RolloutSpec, rollout
from mapo.core.trainer import train
from mapo.core.update import update
from mapo.records import RUNTIME_KEYS
from mapo.run_folder import RunFolder
from mapo.testing.fault_proxy import (
    CONTENT_FAULTS,
    FAULT_KINDS,
    TRANSPORT_FAULTS,
    FaultProxy,
)
from mapo.testing.judge_server import JudgeServer
from mapo.validation import intact_records

TINY = [
    "policy.model=tiny",
    "policy.lora.r=4",
    "threads=1",
    "steps=2",
    "checkpoint_every=2",
    "rollout.scenarios_per_step=2",
    "rollout.samples_per_scenario=2",
    "rollout.max_turns=2",
    "rollout.max_new_tokens=6",
    "optim.lr=0.01",
]
CAUSE_OF_FAULT = {  # the backend's retry cause each transport fault must be counted as
    "server_error": "server_error",
    "rate_limit": "rate_limit",
    "hang": "timeout",
    "close": "connection",
    "truncated": "bad_response",
    "not_json": "bad_response",
}


@pytest.fixture(scope="module")
def judge_server():
    with JudgeServer() as server:
        yield server


def _llm_judge(url: str, **backend) -> str:
    # 2.5 s: an injected hang (3 s) still times out, and a real reply from a loaded 2-core machine
    # does not (at 1 s, nine genuine timeouts broke the exact retry count under four busy processes)
    judge = {"kind": "llm", "base_url": url, "model": "offline-judge", "api_key_env": None, "timeout": 2.5,
             "backoff_base": 0.01, "max_retries": 5, **backend}
    return "env.options=" + json.dumps({"roles": {"judge": judge}})


def _cli_train(out: Path, overrides: list[str]):
    return CliRunner().invoke(app, ["train", "--output", str(out), *sum((["--set", s] for s in overrides), [])])


# -- 1. misbehaving judge server ---------------------------------------------------------------


def test_every_fault_kind_reaches_the_backend_as_its_retry_cause(judge_server):
    """Each injected transport fault is retried once and counted under its cause; the reply still arrives."""
    from mapo.envs.empathy.llm.prompts import JUDGE_USER

    name = next(iter(judge_server.cards))
    prompt = JUDGE_USER.format(profile=f"Name: {name}, 40, baker", standing="Deepest need now: A.",
                               transcript="(nothing yet)", response="That sounds hard.")
    for kind in TRANSPORT_FAULTS:
        with FaultProxy(judge_server.base_url, rate=1.0, kinds=[kind], hang_seconds=3) as proxy:
            backend = ChatBackend(ChatBackendConfig(base_url=proxy.base_url, model="m", api_key_env=None, timeout=0.5,
                                                    max_retries=1, backoff_base=0.01))
            with pytest.raises(BackendUnavailable, match=CAUSE_OF_FAULT[kind]):
                backend.chat([{"role": "user", "content": prompt}])
            assert backend.stats()["retries"][CAUSE_OF_FAULT[kind]] == 1 and proxy.counts[kind] == 2
            backend.close()


def test_training_completes_at_a_20_percent_fault_rate_and_counts_every_fault(tmp_path, judge_server):
    out = tmp_path / "run"
    with FaultProxy(judge_server.base_url, rate=0.2, seed=3, hang_seconds=3) as proxy:
        result = _cli_train(out, [*TINY, "steps=3", _llm_judge(proxy.base_url)])
    assert result.exit_code == 0, result.output
    metrics = RunFolder(out).read_metrics()
    assert [m["step"] for m in metrics] == [1, 2, 3]
    injected = sum(proxy.counts[k] for k in FAULT_KINDS)
    assert injected >= 3, proxy.counts  # the seed gives a run that really meets faults
    # every transport fault was retried exactly once, under its own cause
    for cause in set(CAUSE_OF_FAULT.values()):
        want = sum(proxy.counts[k] for k, c in CAUSE_OF_FAULT.items() if c == cause)
        assert sum(m[f"backend_retries_{cause}"] for m in metrics) == want, (cause, proxy.counts)
    assert sum(m["backend_failures"] for m in metrics) == 0
    # every content fault cost a repair (or, two in a row, a fallback)
    content = sum(proxy.counts[k] for k in CONTENT_FAULTS)
    assert sum(m["judge_repairs"] + 2 * m["judge_fallbacks"] for m in metrics) == content
    for m in metrics:  # nothing non-finite reached the loss or the logs
        assert all(math.isfinite(v) for v in m.values() if isinstance(v, (int, float))), m
        assert m["skipped_updates"] == 0 and m["optimizer_steps"] >= 1
    assert "Reliability" in (out / "report.html").read_text()


def test_content_faults_at_100_percent_stop_the_run_on_the_fallback_budget(tmp_path, judge_server):
    out = tmp_path / "run"
    with FaultProxy(judge_server.base_url, rate=1.0, kinds=CONTENT_FAULTS) as proxy:
        result = _cli_train(out, [*TINY, _llm_judge(proxy.base_url)])
    assert result.exit_code == 1
    assert "training stopped at step 1: 100% of the turns were scored with fallback values" in result.output
    assert "env.max_fallback_fraction=0.5" in result.output and f"mapo train --resume {out}" in result.output
    assert RunFolder(out).read_metrics() == [] and not RunFolder(out).list_checkpoints()  # never trained on it


def test_a_dead_judge_server_stops_the_run_with_a_clear_message(tmp_path, judge_server):
    with FaultProxy(judge_server.base_url, rate=1.0, kinds=["server_error"]) as proxy:
        result = _cli_train(tmp_path / "run", [*TINY, _llm_judge(proxy.base_url, max_retries=2)])
    assert result.exit_code == 1
    assert "training stopped at step 1: chat request to the OpenAI-compatible server" in result.output
    assert "failed after 3 attempt(s); last error: server_error: HTTP 500" in result.output
    assert "Traceback" not in result.output


def test_fallback_budget_is_validated():
    with pytest.raises(ValueError, match=r"env.max_fallback_fraction must be in \[0, 1\], got 1.5"):
        load_config(None, ["env.max_fallback_fraction=1.5"])


# -- 5. secrets ---------------------------------------------------------------------------------


def test_the_api_key_never_reaches_the_run_folder_or_the_logs(tmp_path, judge_server, monkeypatch, caplog):
    key = f"sk-mapo-secret-{uuid.uuid4().hex}"
    monkeypatch.setenv("MAPO_TEST_API_KEY", key)
    out = tmp_path / "run"
    with caplog.at_level("DEBUG"), FaultProxy(judge_server.base_url, rate=0.3, seed=1, hang_seconds=3) as proxy:
        result = _cli_train(out, [*TINY, _llm_judge(proxy.base_url, api_key_env="MAPO_TEST_API_KEY")])
    assert result.exit_code == 0, result.output
    assert sum(proxy.counts[k] for k in FAULT_KINDS) > 0  # errors were logged on the way
    assert f"Bearer {key}" in judge_server.authorizations  # the key was really used
    files = [p for p in out.rglob("*") if p.is_file()]
    assert len(files) > 5
    for path in files:
        assert key.encode() not in path.read_bytes(), path
    assert key not in result.output and key not in caplog.text


def test_the_api_key_can_come_from_a_file_and_never_from_the_config(tmp_path, judge_server):
    key = f"sk-mapo-file-{uuid.uuid4().hex}"
    key_file = tmp_path / "key.txt"
    key_file.write_text(key + "\n")
    backend = ChatBackend(ChatBackendConfig(base_url="http://127.0.0.1:9/v1", model="m", api_key_file=str(key_file),
                                            max_retries=0, timeout=0.5))
    with pytest.raises(BackendUnavailable) as err:
        backend.chat([{"role": "user", "content": "hi"}])
    assert key not in str(err.value) and key not in repr(backend)
    result = _cli_train(tmp_path / "run", [*TINY, "env.options=" + json.dumps(
        {"roles": {"judge": {"kind": "llm", "base_url": judge_server.base_url, "model": "m", "api_key": key}}})])
    assert result.exit_code == 2 and "do not put the API key in the config" in result.output
    assert key not in result.output and not (tmp_path / "run").exists()


# -- 2. crashes and Ctrl-C ------------------------------------------------------------------------

CRASH = [*TINY, "steps=4", "seed=7", "env.name=toy-test", "env.options.end_early=false"]


def _comparable(metrics):
    return [{k: v for k, v in m.items() if k not in RUNTIME_KEYS} for m in metrics]


def _assert_same_run(got, want):
    got, want = _comparable(got), _comparable(want)
    assert [m["step"] for m in got] == [m["step"] for m in want]
    for g, w in zip(got, want):
        assert g.keys() == w.keys()
        for key in g:
            assert g[key] == pytest.approx(w[key], rel=1e-5, abs=1e-7), (g["step"], key)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    out = train(load_config(None, CRASH), output=tmp_path_factory.mktemp("full") / "run", show_progress=False).run_dir
    return RunFolder(out).read_metrics()


def _spawn(
    out: Path, extra_env: dict[str, str] | None = None, resume: bool = False, settings=CRASH, own_group: bool = False
) -> subprocess.Popen:
    tests = str(Path(__file__).parent)
    boot = f"import sys; sys.path.insert(0, {tests!r}); import tiny_policy; from mapo.cli import main; sys.argv = ['mapo', *sys.argv[1:]]; main()"
    args = ["train", "--resume", str(out)] if resume else ["train", "--output", str(out), *sum((["--set", s] for s in settings), [])]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", **(extra_env or {})}
    return subprocess.Popen([sys.executable, "-c", boot, *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=own_group)


def _wait_for(condition, proc: subprocess.Popen, timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if proc.poll() is not None:
            raise AssertionError(f"the run ended ({proc.returncode}) first:\n{proc.stdout.read()[-3000:]}")
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def _assert_folder_sound(out: Path) -> None:
    """Every checkpoint is complete; metrics.jsonl parses (a torn last line is allowed) and has no duplicate steps."""
    run = RunFolder(out)
    for checkpoint in run.list_checkpoints():
        assert (checkpoint / "trainer_state.pt").is_file() and (checkpoint / "trainer_state.json").is_file()
        assert any((checkpoint / "policy").iterdir())
        assert json.loads((checkpoint / "trainer_state.json").read_text())["step"] == int(checkpoint.name[5:])
    lines = run.metrics_path.read_text().splitlines() if run.metrics_path.exists() else []
    steps = [json.loads(line)["step"] for line in lines[:-1]]
    assert steps == list(range(1, len(steps) + 1))


def test_logs_cut_by_a_kill_read_without_their_last_line_and_resume_drops_it(tmp_path):
    import gzip

    from mapo.validation import intact_records

    run = RunFolder(tmp_path / "run")
    rows = [{"step": 1, "reward_mean": 0.5, "note": "é"}, {"step": 2, "reward_mean": float("nan")}, {"step": 3}]
    run.log_metrics(rows[0]), run.log_metrics(rows[1]), run.log_metrics(rows[2])
    written = run.metrics_path.read_text(encoding="utf-8")
    with open(run.metrics_path, "a", encoding="utf-8") as handle:
        handle.write('[1, 2]\n{"step": 4, "rew')  # a line that is not a record, then one cut by the kill
    assert [m["step"] for m in run.read_metrics()] == [1, 2, 3]
    packed = tmp_path / "metrics.jsonl.gz"
    packed.write_bytes(gzip.compress(run.metrics_path.read_bytes()))
    assert [m["step"] for m in intact_records(packed, "metrics")] == [1, 2, 3]
    packed.write_bytes(gzip.compress(written.encode())[:-12])  # an export copied short: named, not guessed at
    with pytest.raises(ValueError, match="metrics.jsonl.gz: cannot read metrics: the compressed file is cut short"):
        intact_records(packed, "metrics")
    run.drop_logs_after(2)  # what a resume from step 2's checkpoint does: the kept lines byte for byte
    assert run.metrics_path.read_text(encoding="utf-8") == "".join(written.splitlines(keepends=True)[:2])


def test_a_kill_while_an_old_checkpoint_is_deleted_never_leaves_it_listed_half_gone(tmp_path, monkeypatch):
    """Pruning (and overwriting) a checkpoint renames it out of the listing before deleting it, so a kill
    in the middle of the delete leaves a temporary folder that resume discards, not a checkpoint missing
    its trainer state (what CI's random SIGKILL once caught)."""
    run = RunFolder(tmp_path / "run")

    def write(folder: Path) -> None:
        (folder / "trainer_state.pt").write_bytes(b"state")
        (folder / "policy").mkdir()
        (folder / "policy" / "model.safetensors").write_bytes(b"weights")

    for step in (1, 2):
        run.save_checkpoint(step, write, keep=2)
    real_rmtree = shutil.rmtree

    def killed_midway(path, *args, **kwargs):  # deletes the first file, then "the process dies"
        (Path(path) / "trainer_state.pt").unlink()
        raise KeyboardInterrupt

    monkeypatch.setattr(shutil, "rmtree", killed_midway)
    with pytest.raises(KeyboardInterrupt):
        run.save_checkpoint(3, write, keep=2)  # prunes step 1
    monkeypatch.setattr(shutil, "rmtree", real_rmtree)
    assert [p.name for p in run.list_checkpoints()] == ["step-000002", "step-000003"]
    assert all((p / "trainer_state.pt").is_file() for p in run.list_checkpoints())
    run.discard_partial_checkpoints()
    assert sorted(p.name for p in run.checkpoints.iterdir()) == ["step-000002", "step-000003"]


@pytest.mark.slow  # 33 s: a run killed in a subprocess, then resumed (CI runs the slow tests)
def test_sigkill_during_a_checkpoint_write_then_resume_reproduces_the_run(tmp_path, uninterrupted):
    out = tmp_path / "run"
    proc = _spawn(out, {"MAPO_TEST_PAUSE_IN_CHECKPOINT": "2"}, resume=False)
    paused = lambda: list((out / "checkpoints").glob(".tmp-step-000002-*/PAUSED"))
    try:
        _wait_for(lambda: bool(paused()), proc)
        proc.kill()
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    torn = paused()[0].parent
    assert (torn / "policy").is_dir() and not (torn / "trainer_state.pt").exists()  # killed half-way through
    run = RunFolder(out)
    assert [p.name for p in run.list_checkpoints()] == []  # checkpoint_every=2: step 2 was the first
    _assert_folder_sound(out)
    resumed = train(resume=out, show_progress=False).run_dir
    assert not list((out / "checkpoints").glob(".tmp-*"))  # the torn write was cleared away
    _assert_same_run(RunFolder(resumed).read_metrics(), uninterrupted)
    _assert_folder_sound(out)


@pytest.mark.slow  # 20 s: two short runs (CI runs the slow tests)
def test_resume_keeps_the_ema_teacher_of_self_distillation(tmp_path):
    """RAPO's EMA teacher lives between steps: a resumed run must restore it, not restart it."""
    settings = [*CRASH, "rapo.distill=true", "rapo.distill_teacher=ema", "checkpoint_every=2", "keep_checkpoints=2"]
    full = RunFolder(train(load_config(None, settings), output=tmp_path / "full", show_progress=False).run_dir)
    assert all(m["distill_replies"] > 0 for m in full.read_metrics())
    cut = tmp_path / "cut"
    shutil.copytree(full.path, cut)
    shutil.rmtree(cut / "checkpoints" / "step-000004")  # as if killed after step 2's checkpoint
    resumed = RunFolder(train(resume=cut, show_progress=False).run_dir)
    _assert_same_run(resumed.read_metrics(), full.read_metrics())


@pytest.mark.slow  # 40-50 s each: a run stopped in a subprocess, then resumed (CI runs the slow tests)
@pytest.mark.parametrize("sent", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_ctrl_c_or_sigterm_saves_a_checkpoint_and_exits_cleanly(tmp_path, uninterrupted, sent):
    """SIGTERM is what `kill` and a scheduler's pre-emption send: it stops at a checkpoint as Ctrl-C does."""
    out = tmp_path / "run"
    proc = _spawn(out)
    try:
        _wait_for(lambda: (out / "metrics.jsonl").exists() and (out / "metrics.jsonl").read_text().count("\n") >= 1, proc)
        proc.send_signal(sent)
        output, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, output[-3000:]
    assert "Traceback" not in output
    steps = [m["step"] for m in RunFolder(out).read_metrics()]
    last = RunFolder(out).latest_checkpoint()
    assert f"Interrupted after step {steps[-1]}; checkpoint saved" in output and f"--resume {out}" in output
    assert last is not None and last.name == f"step-{steps[-1]:06d}" and steps == list(range(1, steps[-1] + 1))
    _assert_folder_sound(out)
    result = train(resume=out, show_progress=False)
    metrics = RunFolder(result.run_dir).read_metrics()
    _assert_same_run(metrics, uninterrupted)
    # the summary covers the steps before the resume too, which this process never ran
    first, last = metrics[0], metrics[-1]
    assert result.summary[0] == f"reward_mean: step 1 {first['reward_mean']:+.3f}, step 4 {last['reward_mean']:+.3f}"


class _CtrlCInTurn(ToyEnvironment):
    """Sends SIGINT to this process from inside an environment step (a worker thread), at the given call."""

    calls = 0
    at_call = 0

    def step(self, response: str):
        with ToyEnvironment.lock:
            _CtrlCInTurn.calls += 1
            now = _CtrlCInTurn.calls
        if now == _CtrlCInTurn.at_call:
            signal.raise_signal(signal.SIGINT)
            time.sleep(0.2)  # the main thread, waiting on the pool, takes the signal meanwhile
        return super().step(response)


def test_ctrl_c_during_a_rollout_ends_it_at_the_turn_and_saves_the_last_step(tmp_path):
    """Ctrl-C arriving while the main thread waits on the environment pool: the turn's judgements all
    finish and the rollout stops there (no next turn), at step 1's checkpoint. An exception raised by
    the signal handler would instead land inside the pool's wait."""
    from mapo.envs.base import ENVIRONMENTS, register_environment
    from mapo.reliability import TrainingInterrupted

    if "ctrl-c-test" not in ENVIRONMENTS:
        register_environment("ctrl-c-test")(_CtrlCInTurn)
    dialogues, turns = 4, 2  # TINY: 2 scenarios x 2 samples, 2 turns each
    _CtrlCInTurn.calls, _CtrlCInTurn.at_call = 0, dialogues * turns + 2  # step 2, turn 1, second dialogue
    config = load_config(None, [*CRASH, "env.name=ctrl-c-test", "rollout.env_workers=1", "checkpoint_every=1"])
    with pytest.raises(TrainingInterrupted) as stopped:
        train(config, output=tmp_path / "run", show_progress=False)
    assert stopped.value.step == 1
    assert _CtrlCInTurn.calls == dialogues * turns + dialogues  # step 2's first turn complete, nothing after it
    run = RunFolder(tmp_path / "run")
    assert [m["step"] for m in run.read_metrics()] == [1]
    assert run.latest_checkpoint().name == "step-000001"
    _assert_folder_sound(tmp_path / "run")


def test_sigterm_during_the_last_step_finishes_the_run_and_still_stops_the_caller(tmp_path):
    """A stop that lands in the last step's update: that step finishes, final/ is written, and train()
    raises (finished=True) instead of returning, so whatever its caller does next does not start."""
    from mapo.reliability import TrainingInterrupted

    config = load_config(None, [*CRASH, "steps=1", f"advantage.estimator={SIGTERM_IN_UPDATE}"])
    previous = signal.getsignal(signal.SIGTERM)
    with pytest.raises(TrainingInterrupted) as stopped:
        train(config, output=tmp_path / "run", show_progress=False)
    assert signal.getsignal(signal.SIGTERM) is previous  # the trainer's handler is gone again
    assert (stopped.value.step, stopped.value.finished) == (1, True)
    assert "the run is complete" in stopped.value.resume_hint("mapo train")
    run = RunFolder(tmp_path / "run")
    assert [m["step"] for m in run.read_metrics()] == [1] and (run.path / "final").is_dir()


@pytest.mark.slow  # 30 s: a real terminal's Ctrl-C while vLLM samples (CI runs the slow tests)
def test_ctrl_c_at_the_terminal_stops_the_trainer_cleanly_while_vllm_samples(tmp_path):
    """A terminal's Ctrl-C signals the whole foreground process group. vLLM runs in the trainer's
    process: the trainer's handler ends the rollout at its turn, checkpoints and exits with 130."""
    pytest.importorskip("vllm")
    out = tmp_path / "run"
    proc = _spawn(out, settings=[*CRASH, "rollout.engine=vllm", "rollout.vllm.kv_cache_gb=0.25"], own_group=True)
    try:
        _wait_for(lambda: (out / "metrics.jsonl").exists() and (out / "metrics.jsonl").read_text().count("\n") >= 1, proc)
        os.killpg(proc.pid, signal.SIGINT)  # what the terminal does
        output, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, output[-3000:]
    assert "Traceback" not in output
    assert json.loads((out / "provenance.jsonl").read_text().splitlines()[0])["rollout_engine"]["name"] == "vllm"
    _assert_folder_sound(out)


LONG = [*CRASH, "steps=16", "checkpoint_every=1"]


def _logged_steps(path: Path) -> set[int]:
    """The steps a run's log holds (a line cut by a kill left out)."""
    return {r["step"] for r in intact_records(path, "log")} if path.is_file() else set()


@pytest.mark.slow
def test_sigkill_at_random_points_never_corrupts_the_run(tmp_path):
    """Five SIGKILLs at seeded random points of the run, each followed by --resume: right after a
    step's transcripts, its metrics or its checkpoint appear (a step or two ahead), and once in the
    middle of a checkpoint write. Each point is an event seen in the run folder, not a time, so the
    kills land alike on a fast or a busy machine. The run folder stays sound after every kill and
    the finished run equals an uninterrupted one."""
    reference = RunFolder(train(load_config(None, LONG), output=tmp_path / "reference", show_progress=False).run_dir)
    out = tmp_path / "run"
    rng = np.random.default_rng(11)
    events = {
        "transcripts": lambda step: step in _logged_steps(out / "transcripts.jsonl"),
        "metrics": lambda step: step in _logged_steps(out / "metrics.jsonl"),
        "checkpoint": lambda step: (out / "checkpoints" / f"step-{step:06d}").is_dir(),
    }
    progress, kinds = [], []
    for attempt in range(5):
        mid_checkpoint = attempt == 2
        # what a kill left past the last checkpoint counts as done: the resume rewrites it, so no event is stale
        done = max(_logged_steps(out / "metrics.jsonl") | _logged_steps(out / "transcripts.jsonl"), default=0)
        extra = {"MAPO_TEST_PAUSE_IN_CHECKPOINT": str(done + 1)} if mid_checkpoint else {}
        proc = _spawn(out, extra, resume=(out / "config.yaml").exists(), settings=LONG)
        try:
            if mid_checkpoint:
                kinds.append("mid-checkpoint")
                _wait_for(lambda: any((out / "checkpoints").glob(".tmp-step-*/PAUSED")), proc)
            else:
                kind, step = str(rng.choice(list(events))), done + int(rng.integers(1, 3))
                kinds.append(kind)
                _wait_for(lambda: events[kind](step), proc)
            assert proc.poll() is None, f"attempt {attempt}: the run finished before it could be killed"
            proc.kill()
            proc.wait(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
        _assert_folder_sound(out)
        progress.append(len(RunFolder(out).read_metrics()))
    assert progress[-1] < 16 and len(set(progress)) > 1, progress  # the kills landed at different points of the run
    assert len(set(kinds)) > 2, kinds
    train(resume=out, show_progress=False)
    _assert_folder_sound(out)
    assert not list((out / "checkpoints").glob(".tmp-*"))
    _assert_same_run(RunFolder(out).read_metrics(), reference.read_metrics())


# -- 4. numerics at the trainer level -------------------------------------------------------------


@pytest.fixture(scope="module")
def policy():
    return tiny_policy(lora=True)


def _rollout(policy, n: int = 2, initial=None, max_new_tokens: int = 6):
    torch.manual_seed(0)
    scenarios = toy_scenarios(1)
    if initial is not None:
        scenarios[0].initial_state = initial
    spec = RolloutSpec(samples_per_scenario=n, max_turns=3, max_new_tokens=max_new_tokens, system_prompt="Be kind.")
    return rollout(policy, scenarios, lambda: ToyEnvironment(end_early=False), spec)


ESTIMATORS = ("mapo", "turn", "batch", "grpo", "rloo", "reinforce_pp")


def _check_advantages(groups, reward: str, estimator: str):
    fill_rewards(groups, reward)
    advantages, components = compute_advantages(groups, AdvantageSpec(estimator=estimator))
    flat = [a for g in advantages for t in g for a in t if a is not None]
    assert all(math.isfinite(a) for a in flat), (reward, estimator)
    for values in components.values():
        assert all(math.isfinite(a) for g in values for t in g for a in t if a is not None)
    return advantages, flat


@pytest.mark.parametrize("case", ["all_equal", "single", "length_cap", "zero_start", "empty_replies"])
def test_degenerate_batches_train_without_nan(policy, case):
    if case == "all_equal":
        (group,) = _rollout(policy, n=1)
        group.trajectories = [copy.deepcopy(group.trajectories[0]) for _ in range(4)]
        groups = [group]
    elif case == "single":
        groups = _rollout(policy, n=1)
    elif case == "length_cap":
        groups = _rollout(policy, n=3, max_new_tokens=1)
        assert all(turn.truncated for t in groups[0].trajectories for turn in t.turns)
    elif case == "zero_start":
        groups = _rollout(policy, n=3, initial=(0.0, 0.0, 0.0))
        assert groups[0].trajectories[0].distances[0] == 0.0
    else:  # every reply of one trajectory empty, one reply of another
        groups = _rollout(policy, n=3)
        for turn in groups[0].trajectories[0].turns:
            turn.response, turn.response_ids, turn.old_logprobs = "", [], []
        first = groups[0].trajectories[1].turns[0]
        first.response, first.response_ids, first.old_logprobs = "", [], []
    for reward in ("idr", "adr", "outcome"):
        for estimator in ESTIMATORS:
            _, flat = _check_advantages(groups, reward, estimator)
            if case in ("all_equal", "single") and estimator in ("turn", "grpo", "rloo"):  # within-group baselines
                assert all(a == 0.0 for a in flat), (reward, estimator)
    advantages, _ = _check_advantages(groups, "idr", "mapo")
    sequences = [s for g, ga in zip(groups, advantages) for t, ta in zip(g.trajectories, ga)
                 if (s := packed_sequence(t, ta)) is not None]
    optimizer = torch.optim.AdamW(policy.trainable_parameters(), lr=0.0)  # lr 0: the shared policy stays put
    stats = update(policy, optimizer, sequences, TrainConfig().optim, LossSpec())
    assert all(math.isfinite(v) for v in stats.values()), stats
    assert stats["skipped_updates"] == 0 and stats["optimizer_steps"] == (1 if sequences else 0)


def test_an_update_with_nothing_to_train_is_a_no_op(policy):
    optimizer = torch.optim.AdamW(policy.trainable_parameters(), lr=1e-3)
    stats = update(policy, optimizer, [], TrainConfig().optim, LossSpec())
    assert stats["optimizer_steps"] == 0 and stats["trained_tokens"] == 0 and all(math.isfinite(v) for v in stats.values())


# -- 3. overlong dialogues ------------------------------------------------------------------------


def test_a_45_turn_dialogue_ends_with_a_reason_at_the_context_limit(policy):
    spec = RolloutSpec(samples_per_scenario=2, max_turns=45, max_new_tokens=4, max_context_tokens=300, system_prompt="Hi.")
    (group,) = rollout(policy, toy_scenarios(1), lambda: ToyEnvironment(end_early=False), spec)
    for trajectory in group.trajectories:
        assert trajectory.done_reason == "context_limit" and 1 < len(trajectory) < 45
        assert all(turn.prompt_length + len(turn.response_ids) <= 300 for turn in trajectory.turns)
    spec = RolloutSpec(samples_per_scenario=1, max_turns=45, max_new_tokens=4, max_context_tokens=4096, system_prompt="Hi.")
    (group,) = rollout(policy, toy_scenarios(1), lambda: ToyEnvironment(end_early=False), spec)
    assert group.trajectories[0].done_reason == "max_turns" and len(group.trajectories[0]) == 45


def test_the_empathy_environment_runs_45_turns_offline():
    from mapo.envs.base import make_environment
    from mapo.envs.empathy.cards import bundled_scenarios

    env = make_environment("empathy", success_from_turn=50)  # no early success: the dialogue must reach 45 turns
    env.reset(bundled_scenarios("train")[0], seed=0)
    replies = ["That sounds hard.", "Tell me more about what happened.", ""]
    result = None
    for t in range(45):
        result = env.step(replies[t % 3])
        if result.done:
            break
    record = env.record()
    assert result.done and record["done_reason"] in ("timeout", "failure")
    assert all(math.isfinite(d) for d in record["distances"])
