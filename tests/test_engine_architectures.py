"""The llama.cpp engine on Qwen2, Qwen3 and Gemma 3: tiny random models of each, built from a
config here (no download), with SmolLM2's tokenizer.

On F32 weights llama.cpp must compute what torch computes, so the log-probs the engine records
for its samples equal the trainer's to float error: before a sync and after one (adapter and
merged), over a second turn that reuses the cached prefix, and in a short training run that
`rollout.engine: auto` sends to llama.cpp. The weights are drawn large enough that attention is
far from uniform, so a wrong rotary layout, norm offset or sliding window shows as a gap.
"""

from __future__ import annotations

import json

import pytest
import torch

pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (pip install 'llama-cpp-python>=0.3', or scripts/install.sh)")

from mapo.engines.gguf_export import ExportError, check_architecture  # noqa: E402
from mapo.engines.llamacpp import LlamaCppEngine  # noqa: E402
from mapo.engines.llamacpp_spec import LlamaCppSpec  # noqa: E402
from mapo.model_source import LoraSpec, PolicySpec  # noqa: E402
from mapo.policy import load_policy  # noqa: E402
from tests.test_engine_llamacpp import TEMPERATURE, _gap, _randomise_lora  # noqa: E402

_SHAPE = {"hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2,
          "max_position_embeddings": 4096, "rms_norm_eps": 1e-6, "vocab_size": 49152}
CONFIGS = {
    # Qwen2: biases on q/k/v, rotary halves as in HF, an untied output head
    "qwen2": {**_SHAPE, "model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"], "num_hidden_layers": 2,
              "tie_word_embeddings": False, "rope_theta": 1000000.0},
    # Qwen3: per-head q/k norms, a head size that is not hidden / heads, tied head
    "qwen3": {**_SHAPE, "model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"], "num_hidden_layers": 2,
              "head_dim": 32, "tie_word_embeddings": True, "rope_theta": 1000000.0},
    # Gemma 3: six layers = five sliding-window layers (window 16) and one global, norms around
    # attention and MLP, scaled embeddings, q/k norms, its own local rotary base
    "gemma3": {**_SHAPE, "model_type": "gemma3_text", "architectures": ["Gemma3ForCausalLM"], "num_hidden_layers": 6,
               "head_dim": 16, "query_pre_attn_scalar": 16, "sliding_window": 16, "tie_word_embeddings": True,
               "rope_theta": 1000000.0, "rope_local_base_freq": 10000.0},
}


def _sharpen(model: torch.nn.Module, seed: int) -> None:
    """Weights large enough that attention and the MLP are far from their near-uniform init, small
    enough that the next-token distribution stays broad (embeddings, a tied head's too, at 0.25:
    logits of standard deviation ~2) and that llama.cpp's F16 KV cache keeps its error below 1e-3."""
    generator = torch.Generator().manual_seed(seed)
    gemma = float(model.get_base_model().config.model_type.startswith("gemma"))
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_" in name:
                continue
            noise = torch.randn(param.shape, generator=generator)
            if param.ndim == 2:
                param.copy_(noise * ((0.25 / (1 + 7 * gemma)) if "embed" in name else 0.4 / param.shape[1] ** 0.5))
            elif name.endswith(("q_norm.weight", "k_norm.weight")):
                # q/k norms set the attention logits' scale: 0.6 keeps them ~sqrt(head_dim) * 0.6
                param.copy_(0.6 - gemma + noise * 0.1)  # Gemma stores the w of a (1 + w) scale
            elif name.endswith("norm.weight"):
                param.add_(noise * 0.3)  # Gemma's zero-initialised norms too: the +1 offset must be exported
            else:
                param.copy_(noise * 0.3)  # biases


def _policy(kind: str, tmp_path, lora: bool = True, config: dict | None = None, tokenizer: str | None = None):
    """A random model of `kind` (or of `config`) with SmolLM2's tokenizer (or `tokenizer`), sharpened."""
    import os

    path = tmp_path / f"{kind}.json"
    path.write_text(json.dumps(config or CONFIGS[kind]))
    spec = PolicySpec(model=f"random:{path}", dtype="float32", tokenizer=tokenizer or os.environ.get("MAPO_TEST_TOKENIZER"),
                      lora=LoraSpec(enabled=lora, r=4, alpha=8))
    policy = load_policy(spec, seed=0)
    _sharpen(policy.model, seed=3)
    if lora:
        _randomise_lora(policy, seed=1)
    return policy, path


def _contexts(policy, n: int = 3) -> list[list[int]]:
    """Prompts longer than Gemma's 16-id window, so the sliding layers must drop their oldest ids."""
    return [policy.first_prompt_ids("Be kind and brief, and answer as a friend would.",
                                    f"I keep losing my keys and my phone, day {k}, and I feel silly.") for k in range(n)]


@pytest.mark.parametrize("kind", sorted(CONFIGS))
def test_engine_logprobs_equal_the_trainers_before_and_after_a_sync(kind, tmp_path):
    policy, _ = _policy(kind, tmp_path)
    assert check_architecture(policy.model).model_type == CONFIGS[kind]["model_type"]
    spec = LlamaCppSpec(threads=1, base_type="F32")
    with LlamaCppEngine(policy, slots=3, context_per_slot=512, spec=spec, workdir=tmp_path / "engine") as engine:
        engine.sync(0)
        torch.manual_seed(0)
        contexts = _contexts(policy)
        first = engine.sample(contexts, max_new_tokens=12, temperature=TEMPERATURE)
        assert _gap(policy, contexts, first) < 2e-3
        # a second turn: the cached prefix is reused (past the sliding window for Gemma)
        follow = policy.next_prompt_ids("Thanks. What should I try first tomorrow morning?")
        second = [c + s.ids + ([] if s.ids[-1] == policy.end_of_turn_id else [policy.end_of_turn_id]) + follow
                  for c, s in zip(contexts, first)]
        reused = engine.stats["reused_tokens"]
        again = engine.sample(second, max_new_tokens=12, temperature=TEMPERATURE)
        assert engine.stats["reused_tokens"] > reused
        assert _gap(policy, second, again) < 2e-3
        # the trainer steps: new LoRA weights, synced as an adapter
        _randomise_lora(policy, seed=2)
        engine.sync(1)
        torch.manual_seed(1)
        after = engine.sample(contexts, max_new_tokens=12, temperature=TEMPERATURE)
        assert _gap(policy, contexts, after) < 2e-3


@pytest.mark.parametrize("kind", sorted(CONFIGS))
def test_merged_sync_serves_the_merged_model(kind, tmp_path):
    policy, _ = _policy(kind, tmp_path)
    spec = LlamaCppSpec(threads=1, base_type="F32", sync="merged")
    with LlamaCppEngine(policy, slots=2, context_per_slot=256, spec=spec, workdir=tmp_path / "engine") as engine:
        engine.sync(1)
        torch.manual_seed(2)
        contexts = _contexts(policy, 2)
        assert _gap(policy, contexts, engine.sample(contexts, max_new_tokens=10, temperature=TEMPERATURE)) < 2e-3


@pytest.mark.parametrize("kind", sorted(CONFIGS))
def test_training_picks_llamacpp_and_its_weights_stay_at_one(kind, tmp_path):
    """`mapo train --set policy.model=<tiny model>` with rollout.engine=auto samples on llama.cpp
    (every step syncs; hf would sync nothing) and the importance weights stay at 1."""
    from mapo.config import load_config
    from mapo.run_folder import RunFolder
    from mapo.trainer import train

    config = tmp_path / f"{kind}.json"
    config.write_text(json.dumps(CONFIGS[kind]))
    overrides = ["env.name=empathy", f"policy.model=random:{config}", "policy.dtype=float32", "policy.lora.r=4",
                 "threads=1", "steps=2", "rollout.scenarios_per_step=1", "rollout.samples_per_scenario=2",
                 "rollout.max_turns=2", "rollout.max_new_tokens=6", "rollout.engine=auto",
                 "rollout.llamacpp.base_type=F32", "rollout.llamacpp.threads=1"]
    run = train(load_config(None, overrides), output=tmp_path / "run", show_progress=False).run_dir
    metrics = RunFolder(run).read_metrics()
    assert [m["step"] for m in metrics] == [1, 2]
    for m in metrics:
        assert m["sync_mb"] > 0 and m["tis_tokens"] > 0
        assert m["tis_weight_mean"] == pytest.approx(1.0, abs=1e-3) and m["tis_kl_behaviour_old"] < 1e-4
    assert (run / "llamacpp.log").is_file()


def test_an_architecture_outside_the_list_is_refused_with_its_name(tmp_path, monkeypatch):
    import mapo.engines.factory as factory

    phi3 = {**_SHAPE, "model_type": "phi3", "architectures": ["Phi3ForCausalLM"], "num_hidden_layers": 1,
            "pad_token_id": 0}
    path = tmp_path / "phi3.json"
    path.write_text(json.dumps(phi3))
    policy = load_policy(PolicySpec(model=f"random:{path}", dtype="float32", lora=LoraSpec(enabled=False)))
    with pytest.raises(ExportError, match="this policy is 'phi3': use rollout.engine=hf"):
        check_architecture(policy.model)
    monkeypatch.setattr(factory, "missing_requirement", lambda: None)
    assert factory.resolve_engine("auto", policy) == "hf"


def test_gemma3_configs_llamacpp_would_compute_differently_are_refused(tmp_path):
    from transformers import AutoConfig

    base = {k: v for k, v in CONFIGS["gemma3"].items() if k != "architectures"}
    from mapo.engines.gguf_arch import architecture

    for change, reason in (({"query_pre_attn_scalar": 64}, "query_pre_attn_scalar"),
                           ({"attn_logit_softcapping": 50.0}, "attn_logit_softcapping"),
                           ({"layer_types": ["full_attention"] * 6}, "five sliding-window layers")):
        path = tmp_path / "config.json"
        path.write_text(json.dumps({**base, **change}))
        with pytest.raises(ExportError, match=reason):
            architecture(AutoConfig.from_pretrained(str(path)))
