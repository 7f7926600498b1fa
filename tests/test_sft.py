"""mapo.sft and `mapo sft`: data validation, the trained mask, the RL path's ids, learning, output, resume, chaining."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from tiny_policy import tiny_policy
from typer.testing import CliRunner

from mapo.chat_template import render
from mapo.cli import app
from mapo.config import load_config
from mapo.core.losses import packed_sequence
from mapo.core.rollout import RolloutSpec, rollout
from mapo.core.trainer import train
from mapo.core.types import Scenario
from mapo.engines.base import Sample
from mapo.envs.base import StepResult
from mapo.evaluate.checkpoints import resolve_model
from mapo.model_source import LoraSpec, PolicySpec
from mapo.policy import load_policy
from mapo.run_folder import RunFolder
from mapo.sft.data import Example, SftDataError, read_dialogues
from mapo.sft.tokens import dialogue_trajectory, reply_ids, training_sequence
from mapo.sft.trainer import SftTrainer, lr_factor, run_sft

DATA = Path(__file__).parent / "fixtures" / "sft" / "dialogues.jsonl"
TINY = [
    "policy.model=tiny",
    "policy.lora.r=4",
    "threads=1",
    f"sft.train_file={DATA}",
    "sft.batch_size=4",
    "sft.epochs=2",
    "sft.lr=0.01",
    "sft.checkpoint_every=2",
    "seed=3",
]
GOOD = {"messages": [{"role": "user", "content": "Hi."}, {"role": "assistant", "content": "Hello."}]}


def _msgs(*pairs):
    return {"messages": [{"role": r, "content": c} for r, c in pairs]}


@pytest.mark.parametrize(
    "bad, expected",
    [
        ('{"messages": [', r":2: invalid JSON at column"),
        ("[1, 2]", r":2: expected a JSON object with 'messages', got list"),
        ({"msgs": GOOD["messages"]}, r":2: field messages: Field required; field msgs: Extra inputs"),
        (_msgs(("user", "Hi."), ("bot", "Hello.")), r":2: field messages\.1\.role: Input should be 'system', 'user' or 'assistant'"),
        (_msgs(("user", "Hi."), ("assistant", "  ")), r":2: field messages\.1\.content: empty content"),
        ({"messages": [{"role": "user", "content": 5}]}, r":2: field messages\.0\.content: Input should be a valid string"),
        (_msgs(("user", "Hi."),), r":2: field messages: no assistant message"),
        ({"messages": []}, r":2: field messages: an empty list"),
        (_msgs(("user", "Hi."), ("user", "Again?"), ("assistant", "Yes.")), r":2: field messages\.1\.role: expected 'assistant' after a user message, got 'user'"),
        (_msgs(("assistant", "Hello."), ("user", "Hi.")), r":2: field messages\.0\.role: expected 'user' first"),
        (_msgs(("user", "Hi."), ("assistant", "Yo."), ("assistant", "Yo?")), r":2: field messages\.2\.role: expected 'user' after an assistant message"),
        (_msgs(("user", "Hi."), ("system", "Be kind."), ("assistant", "Hello.")), r":2: field messages\.1\.role: a system message must be the first"),
        ({**GOOD, "id": "a"}, r":2: field id: 'a' is also the id of line 1"),
    ],
)
def test_a_bad_line_is_refused_naming_the_file_line_and_field(tmp_path, bad, expected):
    path = tmp_path / "demos.jsonl"
    second = bad if isinstance(bad, str) else json.dumps(bad)
    path.write_text(json.dumps({**GOOD, "id": "a"}) + "\n" + second + "\n")
    with pytest.raises(SftDataError, match=str(path).replace(".", r"\.") + expected):
        read_dialogues(path)


def test_the_cli_reports_a_bad_file_and_writes_no_run_folder(tmp_path):
    path = tmp_path / "demos.jsonl"
    path.write_text(json.dumps(_msgs(("user", "Hi."), ("bot", "Hello."))) + "\n")
    result = CliRunner().invoke(app, ["sft", "--data", str(path), "--output", str(tmp_path / "run"), "--set", "policy.model=tiny"])
    assert result.exit_code == 2 and f"{path}:1: field messages.1.role" in result.output
    assert not (tmp_path / "run").exists()


def _spans(mask):
    spans, start = [], None
    for k, trained in enumerate([*mask, False]):
        if trained and start is None:
            start = k
        elif not trained and start is not None:
            spans.append((start, k))
            start = None
    return spans


@pytest.fixture(scope="module")
def policy():
    return tiny_policy()


def test_only_the_replies_and_their_end_of_turn_tokens_are_trained(policy):
    for example in read_dialogues(DATA)[:3]:  # with and without a system message
        seq = training_sequence(policy, example, 2048).sequence
        replies = [m["content"] for m in example.messages if m["role"] == "assistant"]
        spans = _spans(seq.trained)
        assert len(spans) == len(replies)
        for (start, stop), reply in zip(spans, replies):
            assert seq.input_ids[stop - 1] == policy.end_of_turn_id
            assert policy.tokenizer.decode(seq.input_ids[start : stop - 1]) == reply
        untrained = policy.tokenizer.decode([t for t, m in zip(seq.input_ids, seq.trained) if not m])
        for message in example.messages:
            assert (message["content"] in untrained) == (message["role"] != "assistant")
        assert len(seq.input_ids) == spans[-1][1]  # nothing after the last reply


class ScriptedUser:
    """An environment whose user says a demonstration's lines, in order."""

    def __init__(self, lines):
        self.lines = lines

    def reset(self, scenario, seed=None):
        self.turn = 0
        return self.lines[0]

    def step(self, response):
        self.turn += 1
        more = self.turn < len(self.lines)
        return StepResult(self.lines[self.turn] if more else "", (0.0,), not more, {"distance": 0.0})


class ReplayEngine:
    """A rollout engine that 'samples' the given reply ids, one reply per call (a model that says the demonstration)."""

    name, version = "replay", 0

    def __init__(self, replies):
        self.replies = iter(replies)

    def sample(self, contexts, max_new_tokens, temperature=1.0, top_p=1.0, caches=None, keep_cache=False, max_sentences=None):
        return [Sample(ids, [0.0] * len(ids), truncated=False) for ids in (next(self.replies) for _ in contexts)]


@pytest.mark.parametrize("index", [0, 1])  # without and with a system message
def test_a_dialogue_gets_the_ids_the_rl_rollout_builds_and_the_template_renders(policy, index):
    example = read_dialogues(DATA)[index]
    messages = example.messages
    system = messages[0]["content"] if messages[0]["role"] == "system" else ""
    users = [m["content"] for m in messages if m["role"] == "user"]
    replies = [m["content"] for m in messages if m["role"] == "assistant"]
    spec = RolloutSpec(samples_per_scenario=1, max_turns=len(replies), max_sentences=None, system_prompt=system, reuse_cache=False)
    engine = ReplayEngine([reply_ids(policy, r) for r in replies])
    (group,) = rollout(policy, [Scenario("demo", initial_state=(0.0,))], lambda: ScriptedUser(users), spec, engine=engine)
    rl = group.trajectories[0]
    sft = dialogue_trajectory(policy, example)
    assert [t.response for t in rl.turns] == replies  # the rollout decoded the replayed ids back to the demonstration
    assert sft.token_ids == rl.token_ids
    rl_seq = packed_sequence(rl, [1.0] * len(rl.turns))
    sft_seq = training_sequence(policy, example, 2048).sequence
    assert (sft_seq.input_ids, sft_seq.trained) == (rl_seq.input_ids, rl_seq.trained)
    # and the template's own rendering of the whole dialogue starts with exactly these ids
    whole = policy.encode(render(policy.tokenizer, messages, False))
    assert whole[: len(sft.token_ids)] == sft.token_ids
    assert not policy.tokenizer.decode(whole[len(sft.token_ids) :]).strip()


def test_a_trailing_user_message_is_not_trained_and_long_dialogues_keep_the_turns_that_fit(policy):
    example = Example("x:1", "x", [*read_dialogues(DATA)[0].messages, {"role": "user", "content": "Thanks."}])
    full = training_sequence(policy, example, 2048)
    assert full.dropped_turns == 0 and "Thanks" not in policy.tokenizer.decode(full.sequence.input_ids)
    first_end = len(_spans(full.sequence.trained)) and _spans(full.sequence.trained)[0][1]
    cut = training_sequence(policy, example, first_end)
    assert cut.dropped_turns == 1 and cut.sequence.input_ids == full.sequence.input_ids[:first_end]
    with pytest.raises(SftDataError, match=r"x:1: the first reply ends at token \d+, beyond sft.max_tokens=5"):
        training_sequence(policy, example, 5)


def test_loss_goes_down_and_the_held_out_loss_is_logged(tmp_path):
    config = load_config(None, [*TINY, "policy.lora.enabled=false", "sft.lr=0.003", "sft.epochs=4", "sft.eval_fraction=0.25"])
    run = RunFolder(run_sft(config, output=tmp_path / "run", show_progress=False))
    rows = run.read_metrics()
    held = [(m["step"], m["eval_loss"]) for m in rows if "eval_loss" in m]
    assert [s for s, _ in held] == [0, 3, 6, 9, 12]  # the base, then every epoch (9 dialogues, 4 per step)
    assert held[-1][1] < held[0][1] - 1.0
    losses = [m["loss"] for m in rows if "loss" in m]
    assert losses[-1] < losses[0] - 1.0 and all(m["skipped_updates"] == 0 for m in rows if "loss" in m)
    summary = json.loads((run.path / "sft.json").read_text())
    assert (summary["train_dialogues"], summary["held_out_dialogues"]) == (9, 3)
    assert (run.path / "report.html").is_file() and (run.path / "final" / "model.safetensors").is_file()


def _logits(policy, ids):
    with torch.no_grad():
        return policy.model(input_ids=torch.tensor([ids])).logits


def test_the_lora_output_is_a_plain_model_holding_the_trained_weights_for_mapo_train_and_mapo_eval(tmp_path):
    runner = CliRunner()
    sft, final = tmp_path / "sft", tmp_path / "sft" / "final"
    args = ["sft", "--data", str(DATA), "--output", str(sft)]
    result = runner.invoke(app, [*args, *sum((["--set", s] for s in TINY if "train_file" not in s), [])])
    assert result.exit_code == 0, result.output
    assert f"mapo train --set policy.model={final}" in result.output
    assert "quantization_config" not in json.loads((final / "config.json").read_text())
    assert not (final / "adapter_config.json").exists()
    # the merged model computes what the base plus the last step's adapters computes
    config = load_config(sft / "config.yaml")
    merged = load_policy(PolicySpec(model=str(final), lora=LoraSpec(enabled=False)))
    trained = load_policy(config.policy, seed=config.seed)
    trained.load_trained(RunFolder(sft).latest_checkpoint() / "policy")
    ids = training_sequence(trained, read_dialogues(DATA)[0], 2048).sequence.input_ids
    assert merged.end_of_turn_id == trained.end_of_turn_id
    assert training_sequence(merged, read_dialogues(DATA)[0], 2048).sequence.input_ids == ids
    assert torch.allclose(_logits(merged, ids), _logits(trained, ids), atol=1e-4)
    assert not torch.allclose(_logits(load_policy(config.policy, seed=config.seed), ids), _logits(trained, ids), atol=1e-3)
    # adapter/ is the same model as a LoRA adapter naming its base by policy.model, itself a policy.model
    adapter = sft / "adapter"
    assert json.loads((adapter / "adapter_config.json").read_text())["base_model_name_or_path"] == "tiny"
    rebuilt = load_policy(PolicySpec(model=str(adapter), lora=LoraSpec(enabled=False)), seed=config.seed)
    assert torch.allclose(_logits(rebuilt, ids), _logits(merged, ids), atol=1e-5)

    rl = ["--set", f"policy.model={final}", "--set", "env.name=toy-test", "--set", "steps=1", "--set", "threads=1",
          "--set", "rollout.engine=hf", "--set", "rollout.max_turns=2", "--set", "rollout.max_new_tokens=6",
          "--set", "rollout.scenarios_per_step=1", "--set", "rollout.samples_per_scenario=2", "--set", "policy.lora.r=4"]
    result = runner.invoke(app, ["train", "--output", str(tmp_path / "rl"), *rl])
    assert result.exit_code == 0, result.output
    (step,) = RunFolder(tmp_path / "rl").read_metrics()
    assert step["step"] == 1
    # the summary the trainer returned, printed: the reward it logged, the run, the evaluations to run next
    assert f"reward_mean: step 1 {step['reward_mean']:+.3f}, step 1 {step['reward_mean']:+.3f}" in result.output
    assert f"Run folder: {tmp_path / 'rl'}" in result.output and f"--model {final} --output" in result.output
    for model in (final, sft, adapter):  # the model folder, the SFT run folder that holds it, or its adapter
        out = tmp_path / f"eval-{model.name}"
        result = runner.invoke(app, ["eval", "--model", str(model), "--env", "toy-test", "--limit", "1", "--max-turns", "1",
                                     "--max-new-tokens", "4", "--engine", "hf", "--output", str(out)])
        assert result.exit_code == 0, result.output
        assert json.loads((out / "eval.json").read_text())["summary"]["dialogues"] == 1


_KILLER = textwrap.dedent(
    """
    import os, signal, sys
    from mapo.sft import trainer
    save = trainer.SftTrainer.save_checkpoint
    def save_then_die(self, run):  # fault injection: the process dies right after checkpoint 2
        path = save(self, run)
        if self.step == 2:
            os.kill(os.getpid(), signal.SIGKILL)
        return path
    trainer.SftTrainer.save_checkpoint = save_then_die
    from mapo.cli import main
    sys.argv = ["mapo", "sft", *sys.argv[1:]]
    main()
    """
)
_RUNTIME = ("step_time", "tokens_per_s_train", "wall_time", "threads")


def test_ctrl_c_in_the_last_step_finishes_the_run_and_still_stops_the_caller(tmp_path, monkeypatch):
    """Ctrl-C while the last step trains: that step finishes and final/ is written, and run_sft raises
    (finished=True) rather than returning, so a chained `mapo train` does not start RL after it."""
    from mapo.reliability import TrainingInterrupted

    real_step = SftTrainer.train_step

    def step_with_ctrl_c(self, step):  # fault injection: the signal lands inside the real step
        if step == self.total_steps:
            signal.raise_signal(signal.SIGINT)
        return real_step(self, step)

    monkeypatch.setattr(SftTrainer, "train_step", step_with_ctrl_c)
    # the caller's own handler comes back: Python's default, or SIG_IGN where the shell started us in the background
    callers_handler = signal.getsignal(signal.SIGINT)
    with pytest.raises(TrainingInterrupted) as stopped:
        run_sft(load_config(None, [*TINY, "sft.epochs=1"]), output=tmp_path / "run", show_progress=False)
    run = RunFolder(tmp_path / "run")
    assert stopped.value.finished and stopped.value.step == max(m["step"] for m in run.read_metrics())
    assert (run.path / "final").is_dir() and signal.getsignal(signal.SIGINT) is callers_handler


@pytest.mark.slow  # 25 s: three SFT runs (CI runs the slow tests)
def test_a_killed_run_resumes_to_the_uninterrupted_result(tmp_path):
    killed = tmp_path / "killed"
    args = [sys.executable, "-c", _KILLER, "--output", str(killed), *sum((["--set", s] for s in TINY), [])]
    proc = subprocess.run(args, env={**os.environ, "HF_HUB_OFFLINE": "1"}, capture_output=True, text=True, timeout=300)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    assert [p.name for p in RunFolder(killed).list_checkpoints()] == ["step-000002"]
    assert not (killed / "final").exists()
    resumed = run_sft(resume=killed, show_progress=False)
    full = run_sft(load_config(None, TINY), output=tmp_path / "full", show_progress=False)

    def rows(run):
        return [{k: v for k, v in m.items() if k not in _RUNTIME} for m in RunFolder(run).read_metrics()]

    got, want = rows(resumed), rows(full)
    assert [m["step"] for m in got] == [0, 1, 2, 3, 4, 5, 6]
    assert [m.keys() for m in got] == [m.keys() for m in want]
    for g, w in zip(got, want):
        assert g == pytest.approx(w, rel=1e-5, abs=1e-7), g["step"]
    a = load_policy(PolicySpec(model=str(resumed / "final"), lora=LoraSpec(enabled=False)))
    b = load_policy(PolicySpec(model=str(full / "final"), lora=LoraSpec(enabled=False)))
    for (name, x), (_, y) in zip(a.model.state_dict().items(), b.model.state_dict().items()):
        assert torch.allclose(x, y, atol=1e-6), name


def test_a_training_config_chains_sft_then_rl_and_a_resume_skips_the_done_sft(tmp_path):
    overrides = [*TINY, "sft.max_steps=2", "env.name=toy-test", "steps=1", "rollout.engine=hf", "rollout.max_turns=2",
                 "rollout.max_new_tokens=6", "rollout.scenarios_per_step=1", "rollout.samples_per_scenario=2"]
    run = train(load_config(None, overrides), output=tmp_path / "run", show_progress=False).run_dir
    sft_metrics = (run / "sft" / "metrics.jsonl").read_text()
    assert [m["step"] for m in RunFolder(run / "sft").read_metrics()] == [0, 1, 2]
    assert load_config(run / "config.yaml").policy.model == "tiny"  # the config as written: SFT's starting point
    spec, weights, _, _ = resolve_model(str(run))  # eval of the run puts its adapters on the SFT model
    assert (spec.model, weights) == (str(run / "sft" / "final"), run / "final")
    assert resolve_model(str(run / "sft" / "final"))[:2] == (PolicySpec(model=str(run / "sft" / "final"), lora=LoraSpec(enabled=False)), None)
    train(resume=run, overrides=["steps=2"], show_progress=False)
    assert [m["step"] for m in RunFolder(run).read_metrics()] == [1, 2]
    assert (run / "sft" / "metrics.jsonl").read_text() == sft_metrics  # not trained again
    # each start and resume says what it ran on
    assert [json.loads(x)["step"] for x in (run / "provenance.jsonl").read_text().splitlines()] == [0, 1]
    (sft_start,) = [json.loads(x) for x in (run / "sft" / "provenance.jsonl").read_text().splitlines()]
    assert sft_start["step"] == 0 and sft_start["software"]["torch"] == torch.__version__


def test_a_chained_config_with_bad_data_fails_before_writing_anything(tmp_path):
    bad = tmp_path / "demos.jsonl"
    bad.write_text(json.dumps(_msgs(("user", "Hi."),)) + "\n")
    with pytest.raises(SftDataError, match=r"demos\.jsonl:1: field messages: no assistant message"):
        train(load_config(None, ["policy.model=tiny", f"sft.train_file={bad}"]), output=tmp_path / "run", show_progress=False)
    assert not (tmp_path / "run").exists()


def test_learning_rate_schedules():
    assert [lr_factor(s, 6, 2, "constant") for s in range(1, 7)] == [0.5, 1.0, 1.0, 1.0, 1.0, 1.0]
    assert [lr_factor(s, 6, 2, "linear") for s in range(3, 7)] == [1.0, 0.75, 0.5, 0.25]
    assert [round(lr_factor(s, 4, 0, "cosine"), 4) for s in range(1, 5)] == [1.0, 0.8536, 0.5, 0.1464]


def test_a_step_whose_loss_is_not_finite_is_skipped_and_leaves_the_weights_alone():
    trainer = SftTrainer(load_config(None, [*TINY, "policy.lora.enabled=false"]))
    before = [p.detach().clone() for p in trainer.policy.trainable_parameters()]
    head = trainer.policy.model.get_output_embeddings()
    hook = head.register_forward_hook(lambda module, inputs, output: output * float("inf"))
    metrics = trainer.train_step(1)
    hook.remove()
    assert metrics["skipped_updates"] == 1.0 and not math.isfinite(metrics["loss"])
    assert all(torch.equal(a, b) for a, b in zip(before, trainer.policy.trainable_parameters()))
    assert trainer.train_step(2)["skipped_updates"] == 0.0


def test_an_adapter_folder_names_a_base_that_loads_or_the_error_says_which(tmp_path):
    from mapo.model_source import ModelSourceError, resolve_source

    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA"}))
    with pytest.raises(ModelSourceError, match="names no base model"):
        resolve_source(PolicySpec(model=str(adapter)))
    (adapter / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": str(tmp_path / "gone")}))
    with pytest.raises(ModelSourceError, match=r"names the base .*gone.*does not exist"):
        resolve_source(PolicySpec(model=str(adapter)))
    (adapter / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": str(adapter)}))
    with pytest.raises(ModelSourceError, match="another adapter"):
        resolve_source(PolicySpec(model=str(adapter)))
    (adapter / "adapter_config.json").write_text("{not json")
    with pytest.raises(ModelSourceError, match="not a readable adapter config"):
        resolve_source(PolicySpec(model=str(adapter)))


def test_two_builds_with_one_seed_give_the_same_weights_and_losses(tmp_path):
    """Issue 59: `mapo sft` twice from the same data, command and seed gives the same bits (losses and
    merged weights); another seed gives other ones. `policy.dtype: auto` on a CPU is float32 for SFT,
    so no start-up timing decides the arithmetic, and sft.json says what was chosen."""
    def build(name, seed):
        run = run_sft(load_config(None, [*TINY, f"seed={seed}"]), output=tmp_path / name, show_progress=False)
        rows = [{k: v for k, v in m.items() if k not in _RUNTIME} for m in RunFolder(run).read_metrics()]
        weights = load_policy(PolicySpec(model=str(run / "final"), lora=LoraSpec(enabled=False))).model.state_dict()
        return rows, weights, json.loads((run / "sft.json").read_text())

    first, second, other = build("a", 3), build("b", 3), build("c", 4)
    assert first[0] == second[0] and len(first[0]) == 7
    assert all(torch.equal(first[1][k], second[1][k]) for k in first[1])
    assert first[0] != other[0] and not all(torch.equal(first[1][k], other[1][k]) for k in first[1])
    summary = first[2]
    assert (summary["seed"], summary["threads"], summary["policy_dtype"]) == (3, 1, "float32")
    assert "auto on a CPU" in summary["why"]
