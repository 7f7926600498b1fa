"""The llama.cpp rollout engine: same numbers as torch on F32 weights, LoRA sync with versions,
prefix reuse, stop rules, a rollout through it, and a worker that dies.

Skipped (with the reason) where llama-cpp-python is not installed; scripts/install.sh and
CI install it. The tiny model's base is written as an F32 GGUF, so llama.cpp and torch
compute the same function and their log-probs agree to float error.
"""

from __future__ import annotations

import random
import time

import numpy as np
import pytest
import torch

pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (pip install 'llama-cpp-python>=0.3', or scripts/install.sh)")

from mapo.engines.base import EngineError, StaleWeightsError  # noqa: E402
from mapo.engines.hf import reply_text  # noqa: E402
from mapo.engines.importance import mismatch_stats  # noqa: E402
from mapo.engines.llamacpp import LlamaCppEngine  # noqa: E402
from mapo.engines.llamacpp_spec import LlamaCppSpec  # noqa: E402
from mapo.engines.llamacpp_worker import CRASH_ENV  # noqa: E402
from mapo.engines.stops import sentence_stop  # noqa: E402
from mapo.rollout import RolloutSpec, rollout  # noqa: E402
from mapo.text import count_sentences  # noqa: E402
from tests.tiny_policy import ToyEnvironment, tiny_policy, toy_scenarios  # noqa: E402

TEMPERATURE = 0.7


def _randomise_lora(policy, seed: int) -> None:
    """Give the adapter non-zero B matrices, as training would."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in policy.model.named_parameters():
            if "lora_B" in name:
                param.copy_(torch.randn(param.shape, generator=generator) * 0.05)


def _torch_logprobs(policy, context: list[int], reply: list[int], top_p: float = 1.0) -> list[float]:
    ids = torch.tensor([context + reply])
    targets = torch.zeros_like(ids, dtype=torch.bool)
    targets[0, len(context) :] = True
    with torch.no_grad():
        logp, _ = policy.token_logprobs(ids, torch.ones_like(ids), targets, temperature=TEMPERATURE, top_p=top_p)
    return logp[0].tolist()


def _gap(policy, contexts, samples, top_p: float = 1.0) -> float:
    """The largest |torch log-prob - engine log-prob| over every sampled token."""
    gaps = [
        abs(a - b)
        for context, sample in zip(contexts, samples)
        for a, b in zip(_torch_logprobs(policy, list(context), sample.ids, top_p), sample.logprobs)
    ]
    assert gaps, "nothing was sampled"
    return max(gaps)


def _contexts(policy, n: int = 4) -> list[list[int]]:
    return [policy.first_prompt_ids("Be kind and brief.", f"I keep losing my keys, day {k}.") for k in range(n)]


@pytest.fixture(scope="module")
def tiny_lora():
    policy = tiny_policy(lora=True)
    _randomise_lora(policy, seed=1)
    return policy


@pytest.fixture(scope="module")
def engine(tiny_lora, tmp_path_factory):
    spec = LlamaCppSpec(threads=1, base_type="F32")
    with LlamaCppEngine(tiny_lora, slots=4, context_per_slot=512, spec=spec, workdir=tmp_path_factory.mktemp("e")) as engine:
        engine.sync(0)
        yield engine


def test_samples_and_logprobs_match_torch(tiny_lora, engine):
    torch.manual_seed(0)
    contexts = _contexts(tiny_lora)
    samples = engine.sample(contexts, max_new_tokens=12, temperature=TEMPERATURE)
    assert len(samples) == 4 and all(len(s.ids) == len(s.logprobs) > 0 for s in samples)
    assert all(0 <= i < len(tiny_lora.tokenizer) for s in samples for i in s.ids)
    assert _gap(tiny_lora, contexts, samples) < 2e-3  # F32 weights, LoRA applied at run time: same function


def test_same_seed_same_samples(tiny_lora, engine):
    contexts = _contexts(tiny_lora, 2)
    torch.manual_seed(5)
    first = engine.sample(contexts, max_new_tokens=8, temperature=TEMPERATURE)
    torch.manual_seed(5)
    again = engine.sample(contexts, max_new_tokens=8, temperature=TEMPERATURE)
    assert [s.ids for s in first] == [s.ids for s in again]


def test_sync_brings_new_weights_and_checks_versions(tiny_lora, engine):
    contexts = _contexts(tiny_lora, 2)
    _randomise_lora(tiny_lora, seed=2)
    with pytest.raises(StaleWeightsError):
        engine.check_version(1)  # the trainer stepped, the engine has not synced yet
    stats = engine.sync(1)
    engine.check_version(1)
    assert stats.bytes > 0 and stats.export_s >= 0 and stats.load_s > 0
    torch.manual_seed(1)
    samples = engine.sample(contexts, max_new_tokens=10, temperature=TEMPERATURE)
    assert _gap(tiny_lora, contexts, samples) < 2e-3  # the engine now computes the new policy
    with pytest.raises(StaleWeightsError, match="serves weights of step 1, but the trainer is at step 0"):
        engine.check_version(0)


def test_failed_sync_leaves_no_version_that_can_sample(tiny_lora, engine, monkeypatch):
    import mapo.engines.llamacpp as module

    def broken(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(module, "write_lora_adapter", broken)
    with pytest.raises(OSError, match="disk full"):
        engine.sync(7)
    with pytest.raises(StaleWeightsError):
        engine.check_version(7)
    with pytest.raises(StaleWeightsError, match="weights are version"):
        engine.sample(_contexts(tiny_lora, 1), max_new_tokens=4, temperature=TEMPERATURE)
    monkeypatch.undo()
    engine.sync(7)  # a later sync that works restores service
    engine.check_version(7)


def test_next_turn_reuses_the_cached_prefix(tiny_lora, engine):
    torch.manual_seed(2)
    contexts = _contexts(tiny_lora)
    first = engine.sample(contexts, max_new_tokens=10, temperature=TEMPERATURE)
    follow = tiny_lora.next_prompt_ids("Thanks, that helps. What next?")
    second_contexts = [c + s.ids + ([] if s.ids[-1] == tiny_lora.end_of_turn_id else [tiny_lora.end_of_turn_id]) + follow
                       for c, s in zip(contexts, first)]
    before = dict(engine.stats)
    second = engine.sample(second_contexts[::-1], max_new_tokens=10, temperature=TEMPERATURE)  # order does not matter
    reused = engine.stats["reused_tokens"] - before["reused_tokens"]
    prefilled = engine.stats["prefill_tokens"] - before["prefill_tokens"]
    assert reused == sum(len(c) + len(s.ids) - 1 for c, s in zip(contexts, first))
    assert prefilled == sum(len(c) for c in second_contexts) - reused
    assert _gap(tiny_lora, second_contexts[::-1], second) < 2e-3  # the reused cache is the right one


def test_rollout_through_the_engine_keeps_the_sampled_ids(tiny_lora, engine):
    spec = RolloutSpec(scenarios_per_step=2, samples_per_scenario=2, max_turns=3, max_new_tokens=8, max_sentences=None)
    torch.manual_seed(3)
    groups = rollout(tiny_lora, toy_scenarios(2), lambda: ToyEnvironment(end_early=False), spec, engine=engine)
    from mapo.losses import check_reply_ids

    for group in groups:
        for trajectory in group.trajectories:
            check_reply_ids(trajectory)  # the ids trained on are the ids sampled
            assert len(trajectory.turns) == 3
            context = []
            for turn in trajectory.turns:
                context = trajectory.token_ids[: turn.prompt_length]
                assert np.allclose(_torch_logprobs(tiny_lora, context, turn.response_ids), turn.old_logprobs, atol=2e-3)


@pytest.fixture(scope="module")
def smollm2():
    from mapo.model_source import PolicySpec
    from mapo.policy import load_policy

    return load_policy(PolicySpec(), seed=0)


@pytest.fixture(scope="module")
def smollm2_engine(smollm2, tmp_path_factory):
    from mapo.model_source import embedded_gguf_path

    with LlamaCppEngine(
        smollm2, slots=4, context_per_slot=1024, spec=LlamaCppSpec(base_type="source"), source_gguf=embedded_gguf_path(),
        workdir=tmp_path_factory.mktemp("smollm2"),
    ) as engine:
        engine.sync(0)
        yield engine


def test_embedded_model_stops_where_the_policy_would(smollm2, smollm2_engine):
    torch.manual_seed(4)
    contexts = [smollm2.first_prompt_ids("Reply in two sentences.", f"My cat {name} is sick and I am scared.")
                for name in ("Tom", "Mia", "Leo", "Ada")]
    samples = smollm2_engine.sample(contexts, max_new_tokens=48, temperature=TEMPERATURE, max_sentences=1)
    for sample in samples:
        if sample.truncated:
            assert len(sample.ids) == 48 and count_sentences(reply_text(smollm2)(sample.ids)) < 1
        elif sample.ids[-1] != smollm2.end_of_turn_id:
            assert sentence_stop(reply_text(smollm2), sample.ids, 1) == len(sample.ids)  # the policy's own rule, same token
    assert any(not s.truncated for s in samples)


def test_embedded_model_mismatch_is_small(smollm2, smollm2_engine):
    """Q4_1 kernels vs the dequantised torch model: close, not equal; the TIS statistics say how close."""
    torch.manual_seed(6)
    contexts = [smollm2.first_prompt_ids("Be kind.", f"I failed my exam number {k} and feel awful.") for k in range(4)]
    samples = smollm2_engine.sample(contexts, max_new_tokens=24, temperature=TEMPERATURE)
    old = np.concatenate([_torch_logprobs(smollm2, c, s.ids) for c, s in zip(contexts, samples)])
    behaviour = np.concatenate([s.logprobs for s in samples])
    stats = mismatch_stats(old, behaviour)
    assert stats.tokens == len(behaviour) > 0
    assert stats.logprob_abs_diff_mean < 0.2 and stats.kl_behaviour_old < 0.1


@pytest.fixture
def crash_once(tmp_path, monkeypatch):
    """The count of worker deaths a test asks for (MAPO_TEST_ENGINE_CRASH): one, mid-decode; then "0"."""
    crash = tmp_path / "crashes"
    crash.write_text("1")
    monkeypatch.setenv(CRASH_ENV, str(crash))
    return crash


def test_worker_death_restarts_once(tiny_lora, tmp_path, crash_once):
    crash = crash_once
    spec = LlamaCppSpec(threads=1, base_type="F32")
    with LlamaCppEngine(tiny_lora, slots=2, context_per_slot=256, spec=spec, workdir=tmp_path / "e") as engine:
        engine.sync(4)
        torch.manual_seed(0)
        contexts = _contexts(tiny_lora, 2)
        samples = engine.sample(contexts, max_new_tokens=8, temperature=TEMPERATURE)
        assert engine.restarts == 1 and crash.read_text() == "0"
        engine.check_version(4)  # the restarted worker got the synced weights back
        assert _gap(tiny_lora, contexts, samples) < 2e-3


def test_worker_that_dies_twice_stops_with_its_log(tiny_lora, tmp_path, monkeypatch):
    crash = tmp_path / "crashes"
    crash.write_text("2")
    monkeypatch.setenv(CRASH_ENV, str(crash))
    spec = LlamaCppSpec(threads=1, base_type="F32")
    with LlamaCppEngine(tiny_lora, slots=2, context_per_slot=256, spec=spec, workdir=tmp_path / "e") as engine:
        engine.sync(0)
        with pytest.raises(EngineError, match=r"died again after a restart \(exit code 70\); its log is .*llamacpp.log"):
            engine.sample(_contexts(tiny_lora, 2), max_new_tokens=8, temperature=TEMPERATURE)
        assert engine.log_path.is_file()


def test_a_group_prefills_its_shared_prompt_once(tiny_lora, engine):
    """N dialogues of one scenario open with the same prompt: one prefill, N - 1 slot copies."""
    torch.manual_seed(7)
    prompt = tiny_lora.first_prompt_ids("Be kind and brief.", "My dog ran away this morning and I cannot stop crying.")
    contexts = [prompt, prompt, prompt, prompt[:-3] + tiny_lora.encode("Hi")]  # the last shares all but its end
    engine.sync(engine.version + 1)  # new weights: every slot starts empty
    before = dict(engine.stats)
    samples = engine.sample(contexts, max_new_tokens=10, temperature=TEMPERATURE)
    prefilled = engine.stats["prefill_tokens"] - before["prefill_tokens"]
    copied = engine.stats["copied_tokens"] - before["copied_tokens"]
    assert copied == 2 * (len(prompt) - 1) + (len(prompt) - 3)
    assert prefilled == len(prompt) + 2 * 1 + (len(contexts[3]) - (len(prompt) - 3))
    assert len({tuple(s.ids) for s in samples}) > 1  # the copies sample independently ...
    assert _gap(tiny_lora, contexts, samples) < 2e-3  # ... from the right cache


def test_merged_sync_serves_the_merged_model(tiny_lora, tmp_path):
    spec = LlamaCppSpec(threads=1, base_type="F32", sync="merged")
    with LlamaCppEngine(tiny_lora, slots=2, context_per_slot=256, spec=spec, workdir=tmp_path) as engine:
        stats = engine.sync(3)
        engine.check_version(3)
        assert stats.bytes > (tmp_path / "base.gguf").stat().st_size * 0.9  # a whole model moved, not an adapter
        torch.manual_seed(8)
        contexts = _contexts(tiny_lora, 2)
        assert _gap(tiny_lora, contexts, engine.sample(contexts, max_new_tokens=10, temperature=TEMPERATURE)) < 2e-3


def test_a_bf16_base_is_written_in_bf16_and_samples_close_to_torch(tiny_lora, tmp_path):
    from gguf import GGUFReader

    spec = LlamaCppSpec(threads=1, base_type="BF16")
    with LlamaCppEngine(tiny_lora, slots=2, context_per_slot=256, spec=spec, workdir=tmp_path) as engine:
        engine.sync(0)
        types = {t.tensor_type.name for t in GGUFReader(tmp_path / "base.gguf").tensors if t.name.endswith("attn_q.weight")}
        assert types == {"BF16"}
        torch.manual_seed(8)
        contexts = _contexts(tiny_lora, 2)
        gap = _gap(tiny_lora, contexts, engine.sample(contexts, max_new_tokens=10, temperature=TEMPERATURE))
        assert 0 < gap < 0.1  # weights rounded to 8 bits of mantissa: close to torch, not equal


def test_a_model_with_another_vocabulary_is_refused(tiny_lora, tmp_path, monkeypatch):
    real = tiny_lora.tokenizer.convert_ids_to_tokens
    monkeypatch.setattr(tiny_lora.tokenizer, "convert_ids_to_tokens", lambda ids: ["?" + t for t in real(ids)])
    spec = LlamaCppSpec(threads=1, base_type="source")
    from mapo.model_source import embedded_gguf_path

    with pytest.raises(EngineError, match="does not share the policy's vocabulary"):
        LlamaCppEngine(tiny_lora, slots=1, context_per_slot=128, spec=spec, source_gguf=embedded_gguf_path(), workdir=tmp_path)


def test_training_on_the_llamacpp_engine_syncs_and_corrects(tmp_path):
    """Two steps of the trainer on llama.cpp: every step syncs a new version, logs the TIS
    statistics, and on F32 weights the importance weights stay at 1 (the engine is the model)."""
    from mapo.config import load_config
    from mapo.run_folder import RunFolder
    from mapo.trainer import train

    overrides = ["env.name=empathy", "policy.model=tiny", "policy.lora.r=4", "threads=1", "steps=2",
                 "rollout.scenarios_per_step=1", "rollout.samples_per_scenario=2", "rollout.max_turns=2",
                 "rollout.max_new_tokens=6", "rollout.engine=llamacpp", "rollout.llamacpp.base_type=F32",
                 "rollout.llamacpp.threads=1"]
    run = train(load_config(None, overrides), output=tmp_path / "run", show_progress=False).run_dir
    metrics = RunFolder(run).read_metrics()
    assert [m["step"] for m in metrics] == [1, 2]
    for m in metrics:
        assert m["sync_s"] > 0 and m["sync_mb"] > 0 and m["engine_restarts"] == 0
        assert m["tis_tokens"] > 0 and m["tis_truncated_fraction"] == 0
        assert m["tis_weight_mean"] == pytest.approx(1.0, abs=1e-3) and m["tis_kl_behaviour_old"] < 1e-4
        assert m["ratio_mean"] == pytest.approx(1.0)  # pi_old is the model's own log-prob in a one-step update
    assert (run / "llamacpp.log").is_file() and not (run / "engine").exists()  # weights removed, log kept


def test_greedy_answers_match_the_torch_model(tiny_lora, engine):
    """Single-turn benchmarks decode by argmax: llama.cpp on F32 weights picks torch's ids."""
    from mapo.engines.hf import HfEngine

    contexts = _contexts(tiny_lora, 3)
    assert engine.greedy(contexts, 8) == HfEngine(tiny_lora).greedy(contexts, 8)


def test_eval_samples_through_the_llamacpp_engine(tmp_path):
    import json

    from mapo.evaluate.runner import EvalSpec, run_eval

    policy = tiny_policy()
    spec = EvalSpec(env="empathy", limit=1, max_turns=2, max_new_tokens=6, engine="llamacpp")
    path = run_eval(policy, spec, tmp_path, "tiny")
    result = json.loads(path.read_text())
    assert result["config"]["engine_used"] == "llamacpp" and result["summary"]["dialogues"] == 1


# ---------------------------------------------------------------- off-policy correctness (issue 31)


def test_top_p_engine_logprobs_are_the_trainers_nucleus_logprobs(tiny_lora, engine):
    """With top_p < 1 the engine reports the log-prob of the renormalised nucleus it drew from,
    and the trainer's pi_old (token_logprobs with the same top_p) is that same number."""
    torch.manual_seed(11)
    contexts = _contexts(tiny_lora)
    samples = engine.sample(contexts, max_new_tokens=12, temperature=TEMPERATURE, top_p=0.9)
    assert _gap(tiny_lora, contexts, samples, top_p=0.9) < 2e-3
    full = [lp for c, s in zip(contexts, samples) for lp in _torch_logprobs(tiny_lora, c, s.ids)]
    engine_logprobs = [lp for s in samples for lp in s.logprobs]
    assert max(e - f for e, f in zip(engine_logprobs, full)) > 0.05  # the nucleus mass is not left out


def test_merged_sync_ships_weights_peft_trains_whole(tmp_path):
    """peft `modules_to_save` (the final norm, the untied output head): the merged export writes
    the trained copies, so the engine computes the trained model, not the frozen originals."""
    from peft import LoraConfig, get_peft_model

    from mapo.model_source import LoraSpec, PolicySpec, load_model, load_tokenizer
    from mapo.policy import Policy

    spec = PolicySpec(model="tiny", lora=LoraSpec(r=4, alpha=8))
    tokenizer = load_tokenizer(spec)
    model = get_peft_model(
        load_model(spec, tokenizer, seed=0),
        LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], modules_to_save=["model.norm", "lm_head"]),
    )
    policy = Policy(model, tokenizer, lora=True)
    generator = torch.Generator().manual_seed(4)
    with torch.no_grad():
        for name, param in model.named_parameters():
            # LoRA B and the two trained copies move away from the originals: far enough that the frozen
            # originals would miss by about 1 nat, near enough that float error stays inside the gap bound
            # (at 0.5 this machine's AVX-512 llama.cpp build drifts to 5e-3 on the original weights too)
            if param.requires_grad:
                param.add_(torch.randn(param.shape, generator=generator) * 0.05)
    with LlamaCppEngine(policy, slots=2, context_per_slot=256, spec=LlamaCppSpec(threads=1, base_type="F32", sync="merged"),
                        workdir=tmp_path) as engine:
        engine.sync(1)
        torch.manual_seed(9)
        contexts = _contexts(policy, 2)
        assert _gap(policy, contexts, engine.sample(contexts, max_new_tokens=10, temperature=TEMPERATURE)) < 2e-3
    with LlamaCppEngine(policy, slots=2, context_per_slot=256, spec=LlamaCppSpec(threads=1, base_type="F32"),
                        workdir=tmp_path / "adapter") as engine:
        with pytest.raises(Exception, match=r"model\.norm\.weight.*sync=merged"):
            engine.sync(1)  # an adapter cannot carry them: refused, named


def test_worker_runs_in_its_own_process_group(engine):
    """A Ctrl-C at the terminal goes to the trainer's process group; the worker is not in it."""
    import os

    pid = engine.process.pid
    assert os.getpgid(pid) == pid != os.getpgrp()


def test_a_reply_to_an_abandoned_request_never_answers_the_next(tiny_lora, engine, monkeypatch):
    """A Ctrl-C while waiting for a reply abandons the request; its reply, arriving later, is
    dropped instead of being read as the answer to the next request."""
    import mapo.engines.wire as module  # the wait for a reply selects there

    real = module.select.select
    calls = {"n": 0}

    class Interrupting:
        @staticmethod
        def select(rlist, wlist, xlist, timeout=None):
            if not wlist and calls["n"] == 0:  # the first wait for a reply: interrupted
                calls["n"] += 1
                raise KeyboardInterrupt
            return real(rlist, wlist, xlist, timeout)

    monkeypatch.setattr(module, "select", Interrupting)
    one = _contexts(tiny_lora, 1)
    with pytest.raises(KeyboardInterrupt):
        engine.sample(one, max_new_tokens=6, temperature=TEMPERATURE)
    monkeypatch.undo()
    torch.manual_seed(12)
    contexts = [c + [tiny_lora.end_of_turn_id] + tiny_lora.next_prompt_ids("And then?") for c in _contexts(tiny_lora, 3)]
    samples = engine.sample(contexts, max_new_tokens=6, temperature=TEMPERATURE)
    assert len(samples) == 3  # this request's reply, not the abandoned one's (one context)
    assert _gap(tiny_lora, contexts, samples) < 2e-3


def test_a_worker_that_takes_no_request_times_out_and_is_restarted(tiny_lora, tmp_path):
    """A write to a worker that does not read (stopped) waits at most timeout_s, then the worker
    is replaced; before, the trainer blocked in the write for ever."""
    import os
    import signal
    import threading

    spec = LlamaCppSpec(threads=1, base_type="F32", timeout_s=2.0)
    with LlamaCppEngine(tiny_lora, slots=8, context_per_slot=4200, spec=spec, workdir=tmp_path) as engine:
        engine.sync(0)
        stopped = engine.process.pid
        os.kill(stopped, signal.SIGSTOP)
        # 8 x 4000 ids of 3 pickled bytes: more than a pipe holds, so the write itself must wait
        contexts = [[1000 + (k * 37 + j) % 20000 for j in range(4000)] for k in range(8)]
        outcome = {}

        def ask():
            try:
                outcome["samples"] = engine.sample(contexts, max_new_tokens=1, temperature=TEMPERATURE)
            except EngineError as err:  # the restarted worker too slow for 2 s on a busy machine: also an answer
                outcome["error"] = err

        thread = threading.Thread(target=ask, daemon=True)
        thread.start()
        thread.join(120)
        hung = thread.is_alive()
        if hung:
            os.kill(stopped, signal.SIGKILL)  # release the blocked write
            thread.join(30)
        assert not hung, "the write to a stopped worker never timed out"
        assert engine.restarts == 1 and outcome
        with pytest.raises(ProcessLookupError):
            os.kill(stopped, 0)  # the stopped worker was killed, not left behind


def test_a_failed_decode_leaves_no_record_of_ids_the_cache_lacks(tiny_lora, tmp_path, monkeypatch):
    """The worker records a slot's cached ids only once llama.cpp decoded them: after a failed
    decode the next request recomputes what is missing (same log-probs as torch)."""
    import llama_cpp

    from mapo.engines.gguf_export import write_model
    from mapo.engines.llamacpp_decoder import Decoder
    from mapo.engines.llamacpp_worker import sample
    from mapo.engines.wire import WorkerError

    write_model(tiny_lora.model, tiny_lora.tokenizer, tmp_path / "m.gguf", default_type="F32")
    tiny_lora.tokenizer.save_pretrained(str(tmp_path / "tok"))
    decoder = Decoder(str(tmp_path / "m.gguf"), slots=1, context_per_slot=512, threads=1, batch=512,
                      tokenizer=str(tmp_path / "tok" / "tokenizer.json"))
    try:
        decoder.set_adapter(None, 0)

        def request(contexts, seed):
            return {"contexts": contexts, "version": 0, "max_new_tokens": 8, "threads": 1, "seed": seed,
                    "end_of_turn_id": tiny_lora.end_of_turn_id, "max_sentences": None, "temperature": TEMPERATURE,
                    "top_p": 1.0}

        first = _contexts(tiny_lora, 1)[0]
        sample(decoder, request([first], 1))
        longer = first + [tiny_lora.end_of_turn_id] + tiny_lora.next_prompt_ids("Tell me more, please.")
        monkeypatch.setattr(llama_cpp, "llama_decode", lambda ctx, batch: 1)  # the KV cache is "full"
        with pytest.raises(WorkerError, match="llama_decode returned 1"):
            sample(decoder, request([longer], 2))
        monkeypatch.undo()
        reply = sample(decoder, request([longer], 3))
    finally:
        decoder.close()
    # the file holds the LoRA merged in: torch's policy computes the same function
    assert np.allclose(reply["logprobs"][0], _torch_logprobs(tiny_lora, longer, reply["ids"][0]), atol=2e-3)


def test_an_engine_folder_left_by_a_killed_run_is_cleaned_at_start_and_removed_at_close(tiny_lora, tmp_path):
    workdir = tmp_path / "engine"
    workdir.mkdir()
    for name in ("adapter-7.gguf", "model-3.gguf", "adapter-8.gguf.tmp", "base.gguf"):
        (workdir / name).write_bytes(b"left by a killed run")
    spec = LlamaCppSpec(threads=1, base_type="F32")
    with LlamaCppEngine(tiny_lora, slots=1, context_per_slot=128, spec=spec, workdir=workdir, log_dir=tmp_path,
                        remove_workdir=True) as engine:
        engine.sync(8)
        left = sorted(p.name for p in workdir.glob("*.gguf*"))
        assert left == ["adapter-8.gguf", "base.gguf"]  # the stale files are gone, base.gguf rewritten
        assert (workdir / "base.gguf").read_bytes() != b"left by a killed run"
    assert not workdir.exists() and (tmp_path / "llamacpp.log").is_file()


class _JitteryEnvironment(ToyEnvironment):
    """The toy environment answering after a random delay: dialogues come back in a different order each run."""

    def step(self, response):
        time.sleep(random.uniform(0.0, 0.05))
        return super().step(response)


def _continuous_rollout(policy, engine, seed: int):
    from concurrent.futures import ThreadPoolExecutor

    spec = RolloutSpec(scenarios_per_step=2, samples_per_scenario=2, max_turns=3, max_new_tokens=8, max_sentences=None,
                       continuous=True)
    torch.manual_seed(seed)
    with ThreadPoolExecutor(4) as pool:
        return rollout(policy, toy_scenarios(2), lambda: _JitteryEnvironment(end_early=False), spec, engine=engine, pool=pool)


def test_a_continuous_rollout_keeps_turns_in_order_and_does_not_depend_on_timing(tiny_lora, engine):
    """Dialogues meet their environments at their own pace: each one's turns stay in order, its ids are
    what was sampled, its log-probs torch's; and as each draw is seeded by (dialogue, turn), the same seed
    gives the same dialogues whatever order the environments answered in."""
    from mapo.losses import check_reply_ids

    first = _continuous_rollout(tiny_lora, engine, seed=21)
    again = _continuous_rollout(tiny_lora, engine, seed=21)
    other = _continuous_rollout(tiny_lora, engine, seed=22)
    ids = [[t.token_ids for t in g.trajectories] for g in first]
    assert ids == [[t.token_ids for t in g.trajectories] for g in again]
    assert ids != [[t.token_ids for t in g.trajectories] for g in other]
    for group in first:
        assert [t.sample_index for t in group.trajectories] == [0, 1]  # the group structure is unchanged
        for trajectory in group.trajectories:
            check_reply_ids(trajectory)
            assert [turn.index for turn in trajectory.turns] == [1, 2, 3]
            for turn in trajectory.turns:
                context = trajectory.token_ids[: turn.prompt_length]
                assert np.allclose(_torch_logprobs(tiny_lora, context, turn.response_ids), turn.old_logprobs, atol=2e-3)


def test_a_stream_survives_one_worker_death(tiny_lora, tmp_path, crash_once):
    """The worker dies while a continuous rollout is in flight: it is restarted once with the synced
    weights and every reply not yet back is sampled again; the rollout completes."""
    crash = crash_once
    spec = LlamaCppSpec(threads=1, base_type="F32")
    with LlamaCppEngine(tiny_lora, slots=4, context_per_slot=512, spec=spec, workdir=tmp_path / "e") as engine:
        engine.sync(3)
        groups = _continuous_rollout(tiny_lora, engine, seed=5)
        assert engine.restarts == 1 and crash.read_text() == "0"
        engine.check_version(3)
    assert all(len(t.turns) == 3 for g in groups for t in g.trajectories)
