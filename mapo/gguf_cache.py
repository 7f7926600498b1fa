"""The GGUF cache: a GGUF file's tokenizer and dequantised model, converted once to plain folders.

transformers' GGUF support dequantises to float on every load (~20 s for SmolLM2-135M on
2 cores); the converted folders under ``~/.cache/mapo/gguf/<name>-<sha256>`` (override
with ``MAPO_CACHE_DIR``) load in under a second. Each folder is built in a temporary
sibling and renamed into place, so processes sharing the cache never see half a folder.
The cached model has no GGUF quantisation flag (DESIGN.md s.6).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch


def cache_dir() -> Path:
    return Path(os.environ.get("MAPO_CACHE_DIR") or Path.home() / ".cache" / "mapo")


def file_digest(path: Path) -> str:
    """First 16 hex digits of the file's SHA-256 (the cache key)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()[:16]


def _atomic_folder(target: Path, write: Any) -> Path:
    """Build `target` in a temporary sibling, then rename it into place (safe across processes)."""
    if target.is_dir():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=target.name + ".tmp-", dir=target.parent))
    try:
        write(tmp)
        os.replace(tmp, target)
    except OSError:
        if not target.is_dir():  # a real failure, not a lost race with another process
            raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return target


def _gguf_cache(gguf_path: Path) -> Path:
    return cache_dir() / "gguf" / f"{gguf_path.stem}-{file_digest(gguf_path)}"


def gguf_tokenizer_folder(gguf_path: Path) -> Path:
    """A tokenizer folder converted once from the GGUF file's vocabulary."""
    from transformers import AutoTokenizer

    def write(tmp: Path) -> None:
        AutoTokenizer.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name).save_pretrained(tmp)

    return _atomic_folder(_gguf_cache(gguf_path) / "tokenizer", write)


def gguf_model_folder(gguf_path: Path) -> Path:
    """A plain safetensors model folder (dequantised, no quantisation flag), converted once."""
    from transformers import AutoModelForCausalLM

    def write(tmp: Path) -> None:
        model = AutoModelForCausalLM.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name)
        drop_quantisation_flag(model)
        model.save_pretrained(tmp)

    return _atomic_folder(_gguf_cache(gguf_path) / "model", write)


def drop_quantisation_flag(model: torch.nn.Module) -> None:
    """Forget the GGUF quantiser of a dequantised model so it saves, casts and trains as a plain one."""
    for name in ("hf_quantizer", "is_quantized", "quantization_method"):
        if name in vars(model):
            delattr(model, name)
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
