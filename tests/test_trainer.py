"""mapo.core.trainer, mapo.config and `mapo train`: updates, run folders, resume, config errors."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
import torch
import yaml
from tiny_policy import ToyEnvironment, tiny_policy, toy_scenarios
from typer.testing import CliRunner

from mapo.cli import app
from mapo.config import ConfigError, TrainConfig, config_dict, default_config_path, load_config
from mapo.core.losses import LossSpec, collate, packed_sequence
from mapo.core.rollout import RolloutSpec, rollout
from mapo.core.trainer import train
from mapo.core.types import Group, Trajectory, Turn
from mapo.core.update import micro_batches, update
from mapo.records import RUNTIME_KEYS, rollout_metrics
from mapo.run_folder import RunFolder

ENV = "empathy"
TINY = [
    f"env.name={ENV}",
    "policy.model=tiny",
    "policy.lora.r=4",
    "threads=1",
    "steps=3",
    "checkpoint_every=2",
    "rollout.scenarios_per_step=2",
    "rollout.samples_per_scenario=2",
    "rollout.max_turns=2",
    "rollout.max_new_tokens=6",
    "optim.lr=0.01",
]


def _one_trajectory(policy):
    torch.manual_seed(0)
    spec = RolloutSpec(samples_per_scenario=1, max_turns=2, max_new_tokens=6, system_prompt="Be kind.")
    (group,) = rollout(policy, toy_scenarios(1), lambda: ToyEnvironment(end_early=False), spec)
    return group.trajectories[0]


def _reply_logprob(policy, seq):
    batch = collate([seq], policy.pad_id)
    with torch.no_grad():
        logp, _ = policy.token_logprobs(batch.input_ids, batch.attention_mask, batch.trained)
    return float(logp.sum())


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_an_update_moves_the_reply_logprob_with_the_advantage(sign):
    policy = tiny_policy(lora=True)
    seq = packed_sequence(_one_trajectory(policy), [sign, sign])
    before = _reply_logprob(policy, seq)
    optimizer = torch.optim.AdamW(policy.trainable_parameters(), lr=1e-3)
    stats = update(policy, optimizer, [seq], TrainConfig().optim, LossSpec())
    after = _reply_logprob(policy, seq)
    assert stats["optimizer_steps"] == 1 and stats["grad_norm"] > 0
    assert (after - before) * sign > 0


def test_a_non_finite_update_is_skipped_and_never_written():
    policy = tiny_policy(lora=True)
    seq = packed_sequence(_one_trajectory(policy), [1.0, 1.0])
    first = seq.trained.index(True)
    seq.advantages[first] = float("nan")  # fault injection: a poisoned advantage on a trained token
    weights = [p.detach().clone() for p in policy.trainable_parameters()]
    optimizer = torch.optim.AdamW(policy.trainable_parameters(), lr=1e-3)
    stats = update(policy, optimizer, [seq], TrainConfig().optim, LossSpec())
    assert stats["skipped_updates"] == 1 and stats["optimizer_steps"] == 0
    assert all(torch.equal(a, b) for a, b in zip(weights, policy.trainable_parameters()))
    assert all(p.grad is None for p in policy.trainable_parameters())


def test_micro_batches_respect_the_token_budget():
    from mapo.core.losses import TrainSequence

    seqs = [TrainSequence([0] * n, [True] * n, [0.0] * n, [0.0] * n) for n in (10, 12, 30, 5)]
    assert [len(c) for c in micro_batches(seqs, 24)] == [2, 1, 1]
    assert [len(c) for c in micro_batches(seqs, 10_000)] == [4]
    assert [len(c) for c in micro_batches(seqs, 1)] == [1, 1, 1, 1]


def test_minibatches_and_epochs_take_that_many_optimizer_steps():
    policy = tiny_policy(lora=True)
    traj = _one_trajectory(policy)
    seqs = [packed_sequence(traj, [0.5, -0.5]), packed_sequence(traj, [-0.3, 0.8]), packed_sequence(traj, [1.0, None])]
    optim = load_config(None, ["optim.minibatches=2", "optim.ppo_epochs=2"]).optim
    optimizer = torch.optim.AdamW(policy.trainable_parameters(), lr=1e-3)
    stats = update(policy, optimizer, seqs, optim, LossSpec(), rng=np.random.default_rng(0))
    assert stats["optimizer_steps"] == 4
    assert stats["ratio_mean"] != 1.0  # later passes see a moved policy


def test_the_first_optimizer_step_under_bf16_has_a_ratio_of_exactly_one():
    from mapo.core.update import batch_loss, feed_order, with_trainer_logprobs

    policy = tiny_policy(lora=True, dtype="bf16-mixed")
    traj = _one_trajectory(policy)
    seqs = [packed_sequence(traj, [0.5, -0.5]), packed_sequence(traj, [-0.3, 0.8])]
    optimizer = torch.optim.AdamW(policy.trainable_parameters(), lr=1e-3)
    # one optimizer step (the default): pi_old is the update's own forward, detached
    stats = update(policy, optimizer, seqs, load_config(None).optim, LossSpec(), off_policy=True)
    assert stats["ratio_mean"] == 1.0 and stats["kl_old"] == 0.0 and stats["clip_fraction"] == 0.0
    assert 0.5 < stats["tis_ratio_mean"] < 1.5  # the sampler's incremental bf16 decoding is the behaviour policy
    # several steps: pi_old comes from a no-grad pass with the first step's batch shapes and precision
    given = with_trainer_logprobs(policy, seqs, 2048, 1.0)
    chosen = [given[i] for i in feed_order(given, policy.share_prompts)]
    n = sum(s.n_trained for s in chosen)
    terms = batch_loss(policy, collate(chosen, policy.pad_id), LossSpec(), n, 1.0, importance="given")
    assert terms.sums["ratio"] == n and terms.sums["kl_old"] == 0.0


def test_a_bf16_run_takes_pi_old_from_its_own_forward_and_says_how_it_computes(tmp_path, caplog):
    import logging

    overrides = [*TINY, "steps=1", "policy.dtype=bf16-mixed", "rollout.engine=hf"]
    with caplog.at_level(logging.INFO, logger="mapo.core.trainer"):
        train(load_config(None, overrides), output=tmp_path / "run", show_progress=False)
    (metrics,) = RunFolder(tmp_path / "run").read_metrics()
    assert metrics["ratio_mean"] == 1.0 and metrics["kl_old"] == 0.0 and "tis_kl_behaviour_old" in metrics
    lines = [r.getMessage() for r in caplog.records if r.name == "mapo.core.trainer"][:3]
    assert lines[0].startswith("torch threads: 1, threads: 1 as configured")
    assert lines[1].startswith("policy precision: bfloat16 autocast over float32 weights")
    assert lines[2].startswith("rollout engine: hf")


@pytest.mark.parametrize("setting", [None, "idle", 1, 3])
def test_threads_default_to_every_usable_core_and_idle_follows_the_load(monkeypatch, setting):
    from mapo import runtime

    monkeypatch.setattr(runtime.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    monkeypatch.setattr(runtime.os, "getloadavg", lambda: (2.6, 1.0, 1.0))
    threads, why = runtime.choose_threads(setting)
    expected = {None: 4, "idle": 1, 1: 1, 3: 3}[setting]  # idle: 4 cores - load 2.6, rounded
    assert threads == expected and why
    assert ("idle" in why) if setting == "idle" else True


@pytest.mark.parametrize("bad", [0, -1, "all", 1.5])
def test_a_bad_threads_setting_names_the_key(bad):
    with pytest.raises(ConfigError, match="threads"):
        load_config(None, [f"threads={str(bad).lower()}"])


def test_default_config_is_the_embedded_empathy_run_and_matches_the_shipped_yaml():
    config = TrainConfig()
    assert (config.policy.model, config.policy.lora.enabled, config.env.name, config.advantage.estimator) == (
        "embedded",
        True,
        "empathy",
        "mapo",
    )
    assert config.rollout.max_turns < 45
    shipped = yaml.safe_load(default_config_path().read_text())
    assert shipped == config_dict(config)
    assert load_config(default_config_path()) == config


def test_config_errors_name_the_key(tmp_path):
    with pytest.raises(
        ConfigError, match=r"unknown config key 'rollout.max_turn'; valid keys in 'rollout': .*max_turns"
    ):
        load_config(None, ["rollout.max_turn=3"])
    bad = tmp_path / "bad.yaml"
    bad.write_text("optim:\n  learning_rate: 0.1\n")
    with pytest.raises(ConfigError, match=r"bad.yaml: unknown config key 'optim.learning_rate'.*lr"):
        load_config(bad)
    with pytest.raises(ConfigError, match="unknown advantage estimator 'ppo'; registered: .*mapo"):
        load_config(None, ["advantage.estimator=ppo"])
    with pytest.raises(ConfigError, match="rollout.max_new_tokens: Input should be a valid integer"):
        load_config(None, ["rollout.max_new_tokens=many"])
    with pytest.raises(ConfigError, match="expected key=value"):
        load_config(None, ["steps"])
    assert load_config(None, ["env.options.judge=offline", "optim.betas=[0.8, 0.9]"]).optim.betas == (0.8, 0.9)
    nested = load_config(None, ["env.options.roles.judge.kind=learned", "env.options.roles.judge.path=j",
                                "env.options={pool_size: 4}", "env.options.roles.judge.decode=nearest"]).env.options
    assert nested == {"pool_size": 4, "roles": {"judge": {"kind": "learned", "path": "j", "decode": "nearest"}}}
    assert load_config(None, ["env.options.roles.judge.kind=learned", "env.options.roles.judge=offline"]).env.options == {
        "roles": {"judge": "offline"}}


def test_a_nested_role_override_works_as_the_whole_mapping_does():
    from mapo.envs.base import environment_factory

    # options alone tune the default (offline) role, as {kind: offline, first_stage: 3} does
    nested = load_config(None, ["env.options.roles.director.first_stage=3"])
    whole = load_config(None, ["env.options.roles.director={kind: offline, first_stage: 3}"])
    for config in (nested, whole):
        env = environment_factory(config.env.name, config.env.options)()
        assert type(env.director).__name__ == "RuleDirector" and env.director.first_stage == 3
    # after a kind given by name, a nested key keeps that kind
    named = load_config(None, ["env.options.roles.judge=learned", "env.options.roles.judge.path=j"]).env.options
    assert named == {"roles": {"judge": {"kind": "learned", "path": "j"}}}
    with pytest.raises(ValueError, match="roles.judge: OfflineJudge"):  # an option the kind does not take still fails
        environment_factory("empathy", {"roles": {"judge": {"first_stage": 3}}})()


def test_cli_reports_bad_config_and_missing_model(tmp_path):
    runner = CliRunner()
    result = runner.invoke(app, ["train", "--set", "rollout.bogus=1"])
    assert result.exit_code == 2 and "unknown config key 'rollout.bogus'" in result.output
    result = runner.invoke(app, ["train", "--set", "advantage.estimator=nope"])
    assert result.exit_code == 2 and "unknown advantage estimator 'nope'" in result.output
    missing = tmp_path / "model.gguf"
    result = runner.invoke(app, ["train", "--set", f"policy.model={missing}", "--set", f"output_dir={tmp_path}/runs"])
    assert result.exit_code == 2 and f"{missing}" in result.output and "does not exist" in result.output
    assert not (tmp_path / "runs").exists()  # nothing written for a run that cannot start


def test_mapo_train_end_to_end_writes_the_run_folder(tmp_path):
    out = tmp_path / "run"
    result = CliRunner().invoke(app, ["train", "--output", str(out), *sum((["--set", s] for s in TINY), [])])
    assert result.exit_code == 0, result.output
    summary = result.output.strip().splitlines()[-6:]
    assert summary[0].startswith("reward_mean: step 1 ") and ", step 3 " in summary[0]
    assert summary[2].startswith("monitor: ")
    assert summary[3:5] == [f"Run folder: {out}", f"Report: {out}/report.html"]
    assert summary[5].startswith(f"Next: mapo eval --model {out} ") and "mapo compare" in summary[5]
    saved = load_config(out / "config.yaml")
    assert saved.env.name == ENV
    assert saved.policy.dtype in ("float32", "bf16-mixed", "bfloat16")  # `auto` pinned to what it chose
    metrics = RunFolder(out).read_metrics()
    assert [m["step"] for m in metrics] == [1, 2, 3]
    for key in (
        "reward_mean",
        "return_mean",
        "success_rate",
        "adv_turn_std",
        "adv_batch_std",
        "grad_norm",
        "clip_fraction",
        "kl",
        "entropy",
        "response_length_mean",
        "tokens_per_s_rollout",
        "step_time",
    ):
        assert all(np.isfinite(m[key]) for m in metrics), key
    for key in ("hack_distinct2", "hack_repetition", "hack_echo", "hack_role_swap", "hack_fragment", "hack_reask"):
        assert all(0.0 <= m[key] <= 1.0 for m in metrics), key
    # the process's memory: torch and a model are resident, and glibc's heap holds some of it
    assert all(m["memory_rss_gb"] > 0.1 and 0 < m["memory_heap_used_gb"] < m["memory_rss_gb"] for m in metrics)
    transcripts = [json.loads(x) for x in (out / "transcripts.jsonl").read_text().splitlines()]
    assert (
        len(transcripts) == 3 * 4 and transcripts[0]["turns"][0]["user"] and "advantage" in transcripts[0]["turns"][0]
    )
    assert [p.name for p in RunFolder(out).list_checkpoints()] == ["step-000002", "step-000003"]
    assert (out / "final" / "adapter_model.safetensors").is_file()
    result = CliRunner().invoke(app, ["train", "--output", str(out), "--set", "policy.model=tiny"])
    assert result.exit_code == 2 and "--resume" in result.output


def test_rollout_metrics_monitor_echo_against_what_the_user_had_said_so_far():
    story = "I lost the job at the bakery."
    echo = "Losing the job at the bakery must hurt."  # 2 of its 5 word 4-grams are the story's
    plain = "Thank you for telling me."

    def metrics(users, replies):
        turns = [Turn(i + 1, user, reply) for i, (user, reply) in enumerate(zip(users, replies))]
        groups = [Group("s", [Trajectory("s", initial_state=(1.0,), turns=turns, done_reason="max_turns")])]
        return rollout_metrics(groups, [[[0.5, -0.5]]], {})

    assert metrics([story, "Yes."], [plain, echo])["hack_echo"] == pytest.approx(0.4 / 2)  # told a turn earlier
    assert metrics(["Hello.", story], [echo, plain])["hack_echo"] == 0.0  # not yet told: no echo


_KILLER = textwrap.dedent(
    """
    import os, signal, sys
    from mapo.core import trainer
    save = trainer.Trainer.save_checkpoint
    def save_then_die(self, run):  # fault injection: the process dies right after checkpoint 2
        path = save(self, run)
        if self.step == 2:
            os.kill(os.getpid(), signal.SIGKILL)
        return path
    trainer.Trainer.save_checkpoint = save_then_die
    from mapo.cli import main
    sys.argv = ["mapo", "train", *sys.argv[1:]]
    main()
    """
)


def _comparable(metrics):
    return [{k: v for k, v in m.items() if k not in RUNTIME_KEYS} for m in metrics]


@pytest.mark.slow  # half a minute; the SIGKILL-during-a-checkpoint test keeps a resume check in the default run (CI runs the slow tests)
def test_kill_and_resume_reproduces_the_uninterrupted_run(tmp_path):
    overrides = [*TINY, "steps=3", "checkpoint_every=2", "seed=7"]
    killed = tmp_path / "killed"
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    args = [sys.executable, "-c", _KILLER, "--output", str(killed), *sum((["--set", s] for s in overrides), [])]
    proc = subprocess.run(args, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    run = RunFolder(killed)
    assert [p.name for p in run.list_checkpoints()] == ["step-000002"]
    # a torn tmp folder from a crash mid-write must not count as a checkpoint
    (run.checkpoints / ".tmp-step-000003-1").mkdir()
    resumed = train(resume=killed, show_progress=False).run_dir
    full = train(load_config(None, overrides), output=tmp_path / "full", show_progress=False).run_dir
    got, want = _comparable(RunFolder(resumed).read_metrics()), _comparable(RunFolder(full).read_metrics())
    assert [m["step"] for m in got] == [1, 2, 3]
    _assert_close(got, want)
    a = torch.load(killed / "checkpoints" / "step-000003" / "trainer_state.pt", weights_only=False)
    b = torch.load(full / "checkpoints" / "step-000003" / "trainer_state.pt", weights_only=False)
    assert a["step"] == b["step"] == 3
    for key, value in a["optimizer"]["state"].items():  # the optimizers ended in the same place
        assert torch.allclose(value["exp_avg"], b["optimizer"]["state"][key]["exp_avg"], atol=1e-8)


def _assert_close(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.keys() == w.keys()
        for key in g:
            assert g[key] == pytest.approx(w[key], rel=1e-5, abs=1e-7), (g["step"], key)


@pytest.mark.slow
def test_embedded_default_trains_two_steps(tmp_path):
    started = time.time()
    result = CliRunner().invoke(app, ["train", "--output", str(tmp_path / "run"), "--set", "steps=2"])
    assert result.exit_code == 0, result.output
    metrics = RunFolder(tmp_path / "run").read_metrics()
    assert [m["step"] for m in metrics] == [1, 2] and all(m["optimizer_steps"] >= 1 for m in metrics)
    assert all(m["skipped_updates"] == 0 for m in metrics)
    assert time.time() - started < 900


def test_bench_train_command_compares_packed_and_per_turn(tmp_path):
    args = ["bench", "train", "--trajectories", "2", "--turns", "3", "--max-new-tokens", "4", "--output", str(tmp_path)]
    args += ["--set", "policy.model=tiny", "--set", f"env.name={ENV}", "--set", "rollout.samples_per_scenario=2"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    data = json.loads((tmp_path / "bench_train.json").read_text())
    packed, per_turn = data["modes"]["packed"], data["modes"]["per_turn"]
    assert packed["trained_tokens"] == per_turn["trained_tokens"] > 0
    assert per_turn["sequences"] > packed["sequences"] and per_turn["input_tokens"] > packed["input_tokens"]
    assert "ratio speedup" in result.output


def test_memory_figures_follow_what_the_program_holds():
    from mapo.runtime import memory_figures

    before = memory_figures()
    held = [bytearray(1 << 20) for _ in range(256)]  # 256 MB in 1 MB blocks: below glibc's mmap threshold or not
    during = memory_figures()
    assert during["memory_rss_gb"] - before["memory_rss_gb"] > 0.2
    assert during["memory_heap_used_gb"] - before["memory_heap_used_gb"] > 0.2
    del held
