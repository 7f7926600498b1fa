"""The vocabulary of an exported GGUF model: what llama.cpp needs to load it.

The engine is token in, token out (llama.cpp never tokenises text), so the vocabulary only
has to give every id its token and mark the special ones. Two sources:

- the GGUF file the policy came from (`copy_vocabulary`): its `tokenizer.ggml.*` keys as they
  are, so a SentencePiece vocabulary (Gemma) goes over with its scores and token types;
- the HF tokenizer (`add_tokenizer`): a byte-level BPE (SmolLM2, Llama 3, Qwen) as llama.cpp's
  `gpt2` model with its merges, or a SentencePiece-style BPE (byte fallback, "▁" for spaces:
  Gemma, Llama 2, Mistral) as its `llama` model with scores and byte tokens; padded with unused
  entries up to the model's vocab_size.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from mapo.engines.gguf_arch import ExportError

TOKENIZER_KEYS = "tokenizer."
_BYTE_TOKEN = re.compile(r"^<0x[0-9A-Fa-f]{2}>$")


def copy_vocabulary(writer: Any, source: Path, vocab_size: int) -> None:
    """Copy the `tokenizer.*` keys of the GGUF file `source` (a base the policy was loaded from)."""
    import gguf

    reader = gguf.GGUFReader(str(source))
    fields = {name: field for name, field in reader.fields.items() if name.startswith(TOKENIZER_KEYS)}
    tokens = fields.get(gguf.Keys.Tokenizer.LIST)
    if tokens is None:
        raise ExportError(f"{source}: the GGUF file has no vocabulary ({gguf.Keys.Tokenizer.LIST})")
    if len(tokens.data) != vocab_size:
        raise ExportError(f"{source}: its vocabulary has {len(tokens.data)} tokens, the policy's vocab_size is {vocab_size}")
    for name, field in fields.items():
        kind = field.types[0]
        if kind == gguf.GGUFValueType.ARRAY:
            writer.add_key_value(name, field.contents(), kind, sub_type=field.types[-1])
        else:
            writer.add_key_value(name, field.contents(), kind)


def _backend(tokenizer: Any) -> dict[str, Any]:
    return json.loads(tokenizer.backend_tokenizer.to_str()) if hasattr(tokenizer, "backend_tokenizer") else {}


def add_tokenizer(writer: Any, tokenizer: Any, vocab_size: int) -> None:
    """The HF tokenizer's vocabulary as llama.cpp's `gpt2` (byte-level BPE) or `llama` (SentencePiece) model."""
    import gguf

    model = _backend(tokenizer).get("model", {})
    if model.get("type") != "BPE":
        raise ExportError(f"the llamacpp engine writes BPE vocabularies; this tokenizer is {model.get('type')!r}")
    sentencepiece = bool(model.get("byte_fallback"))
    count = len(tokenizer)
    if count > vocab_size:
        raise ExportError(f"the tokenizer has {count} tokens, more than the model's vocab_size {vocab_size}")
    tokens = tokenizer.convert_ids_to_tokens(list(range(count)))
    special = set(tokenizer.all_special_ids)
    added = {int(k) for k in tokenizer.added_tokens_decoder}

    def kind(i: int, token: str) -> int:
        if i in special:
            return gguf.TokenType.CONTROL
        if i in added:
            return gguf.TokenType.USER_DEFINED
        if sentencepiece and _BYTE_TOKEN.match(token):
            return gguf.TokenType.BYTE
        return gguf.TokenType.NORMAL

    kinds = [kind(i, token) for i, token in enumerate(tokens)]
    tokens += [f"[PAD{i}]" for i in range(count, vocab_size)]
    kinds += [gguf.TokenType.UNUSED] * (vocab_size - count)
    if sentencepiece:
        writer.add_tokenizer_model("llama")
        writer.add_tokenizer_pre("default")
        writer.add_token_list(tokens)
        writer.add_token_scores([-float(i) for i in range(vocab_size)])  # earlier ids merge first, as in BPE
        writer.add_token_types(kinds)
        writer.add_add_space_prefix(False)
    else:
        merges = [m if isinstance(m, str) else " ".join(m) for m in model.get("merges", [])]
        writer.add_tokenizer_model("gpt2")
        writer.add_tokenizer_pre("default")
        writer.add_token_list(tokens)
        writer.add_token_types(kinds)
        writer.add_token_merges(merges)
    for setter, token_id in (
        (writer.add_bos_token_id, tokenizer.bos_token_id),
        (writer.add_eos_token_id, tokenizer.eos_token_id),
        (writer.add_pad_token_id, tokenizer.pad_token_id),
        (writer.add_unk_token_id, getattr(tokenizer, "unk_token_id", None) if sentencepiece else None),
    ):
        if token_id is not None:
            setter(int(token_id))
    writer.add_add_bos_token(False)
