"""Write the trainer's weights as GGUF files that llama.cpp loads.

Two forms, both for Llama-architecture models (SmolLM2, Llama, Mistral-style dense):

- `write_lora_adapter`: the LoRA matrices alone as a GGUF adapter (general.type
  "adapter"); llama.cpp adds scale * B (A x) to the base layer's output at run time,
  so the quantised base stays as it is and a sync moves a few MB. It refuses a policy
  that trains any other weight (peft `modules_to_save`, an unfrozen norm): the engine
  would keep serving the stale copy of it.
- `write_model`: a whole model (LoRA merged in when there is one, peft's trained
  `modules_to_save` copies in place of the originals), each tensor in the
  type asked for (F32, F16, Q8_0, Q4_1, ... quantised with gguf-py), with the
  tokenizer's vocabulary; used for a base that has no GGUF file (a tiny test model,
  an HF folder) and for merged syncs (F16, Q8_0 or F32: never back to a 4-bit type).

Layout facts of the format: a GGUF tensor lists its dimensions fastest first, so a
torch [out, in] weight is stored as is; llama.cpp applies rotary embeddings to
adjacent pairs within a head while HF Llama rotates the two halves of a head, so the
rows of q_proj and k_proj (and of their LoRA B) are reordered per head on export.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

# HF module path inside a decoder layer -> llama.cpp tensor name inside blk.N
LAYER_TENSORS = {
    "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output",
    "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
    "input_layernorm": "attn_norm",
    "post_attention_layernorm": "ffn_norm",
}
TOP_TENSORS = {"model.embed_tokens": "token_embd", "model.norm": "output_norm", "lm_head": "output"}
SUPPORTED_TYPES = ("llama", "mistral")
_LAYER = re.compile(r"^model\.layers\.(\d+)\.(.+)$")
_MODULES_TO_SAVE = re.compile(r"\.modules_to_save\.[^.]+\.")  # peft's trained copy of a whole module


class ExportError(ValueError):
    """The model cannot be written as a llama.cpp GGUF (unsupported architecture or layout)."""


@dataclass(frozen=True)
class LoraPair:
    """One adapted linear layer: A [r, in], B [out, r] and the scale its output is multiplied by."""

    a: torch.Tensor
    b: torch.Tensor
    scale: float


def _base(model: torch.nn.Module) -> torch.nn.Module:
    """The transformers model under a peft wrapper (or the model itself)."""
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def check_architecture(model: torch.nn.Module) -> Any:
    """The model's config, or ExportError when llama.cpp's Llama graph would not compute the same function."""
    config = _base(model).config
    kind = getattr(config, "model_type", "?")
    if kind not in SUPPORTED_TYPES:
        raise ExportError(
            f"the llamacpp engine converts Llama-architecture models ({', '.join(SUPPORTED_TYPES)}); "
            f"this policy is {kind!r}: use rollout.engine=hf"
        )
    for flag in ("attention_bias", "mlp_bias"):
        if getattr(config, flag, False):
            raise ExportError(f"the policy's config sets {flag}: the llamacpp engine's export has no bias tensors")
    rope = dict(getattr(config, "rope_scaling", None) or {})
    rope_type = rope.get("rope_type", rope.get("type", "default"))
    if rope_type not in (None, "default"):
        raise ExportError(f"the policy uses rope scaling {rope_type!r}, which the llamacpp engine's export does not write")
    return config


def _rope_theta(config: Any) -> float:
    params = getattr(config, "rope_parameters", None) or {}
    return float(params.get("rope_theta", getattr(config, "rope_theta", 10000.0)))


def _head_dim(config: Any) -> int:
    return int(getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads)


def interleave_rotary_rows(weight: np.ndarray, heads: int) -> np.ndarray:
    """Reorder the rows of a q/k projection from HF's half-split rotary layout to llama.cpp's pairs.

    Within each head, row j of the first half and row j of the second half become rows
    2j and 2j + 1. Works on any [heads * head_dim, ...] array (a weight or a LoRA B).
    """
    rows = weight.shape[0]
    if rows % (2 * heads):
        raise ExportError(f"a q/k projection of {rows} rows does not split into {heads} heads of even size")
    return weight.reshape(heads, 2, rows // heads // 2, *weight.shape[1:]).swapaxes(1, 2).reshape(weight.shape)


def gguf_name(hf_name: str) -> str:
    """llama.cpp's name for an HF parameter or module path (".weight" kept), or ExportError."""
    stem, _, suffix = hf_name.rpartition(".")
    if stem in TOP_TENSORS:
        return f"{TOP_TENSORS[stem]}.{suffix}"
    match = _LAYER.match(stem)
    if match and match.group(2) in LAYER_TENSORS:
        return f"blk.{match.group(1)}.{LAYER_TENSORS[match.group(2)]}.{suffix}"
    raise ExportError(f"no llama.cpp tensor for the parameter {hf_name!r}")


def lora_pairs(model: torch.nn.Module) -> dict[str, LoraPair]:
    """The LoRA layers of a peft model by HF module path ("model.layers.3.self_attn.q_proj")."""
    from peft.tuners.lora import LoraLayer

    pairs = {}
    for name, module in _base(model).named_modules():
        if not isinstance(module, LoraLayer) or not module.active_adapters:
            continue
        adapter = module.active_adapters[0]
        if len(module.active_adapters) > 1 or module.use_dora.get(adapter, False):
            raise ExportError(f"{name}: only one plain LoRA adapter per layer can be exported (no DoRA, no stacking)")
        pairs[name] = LoraPair(
            a=module.lora_A[adapter].weight.detach(),
            b=module.lora_B[adapter].weight.detach(),
            scale=float(module.scaling[adapter]),
        )
    return pairs


def _plain_name(name: str) -> str:
    """The transformers parameter name under peft's wrappers (base_layer, modules_to_save copy)."""
    return _MODULES_TO_SAVE.sub(".", name).replace(".base_layer.", ".")


def _is_lora_matrix(name: str) -> bool:
    return ".lora_A." in name or ".lora_B." in name


def trained_outside_lora(model: torch.nn.Module) -> list[str]:
    """The trainable parameters of a peft model that are not LoRA A/B matrices, by HF name
    ("model.norm.weight"); a LoRA adapter file cannot carry them."""
    names = []
    for name, param in _base(model).named_parameters():
        if param.requires_grad and not _is_lora_matrix(name):
            names.append(_plain_name(name))
    return names


def dense_weights(model: torch.nn.Module, merge_lora: bool) -> Iterator[tuple[str, torch.Tensor]]:
    """(HF parameter name, float32 CPU tensor) of the model; LoRA deltas added when `merge_lora`.

    A module peft trains whole (`modules_to_save`) is written from the active adapter's copy,
    not the frozen original; `lm_head` is left out only when it is the embedding matrix itself
    (tied): llama.cpp then uses token_embd as the output matrix.
    """
    pairs = lora_pairs(model) if merge_lora else {}
    active = f".modules_to_save.{getattr(model, 'active_adapter', 'default')}."
    tensors: dict[str, torch.Tensor] = {}
    for name, tensor in _base(model).state_dict().items():
        if ".lora_" in name or "rotary_emb" in name or ".original_module." in name:
            continue
        if ".modules_to_save." in name and active not in name:
            continue  # another adapter's copy
        tensors[_plain_name(name)] = tensor
    head, embedding = tensors.get("lm_head.weight"), tensors.get("model.embed_tokens.weight")
    if head is not None and embedding is not None and head.data_ptr() == embedding.data_ptr():
        del tensors["lm_head.weight"]
    for name, tensor in tensors.items():
        weight = tensor.detach().to("cpu", torch.float32)
        pair = pairs.get(name.removesuffix(".weight"))
        if pair is not None:
            weight = weight + pair.scale * (pair.b.float().cpu() @ pair.a.float().cpu())
        yield name, weight


def _to_gguf_array(name: str, weight: np.ndarray, config: Any) -> np.ndarray:
    if name.endswith("self_attn.q_proj.weight"):
        return interleave_rotary_rows(weight, config.num_attention_heads)
    if name.endswith("self_attn.k_proj.weight"):
        return interleave_rotary_rows(weight, config.num_key_value_heads)
    return weight


# ---------------------------------------------------------------- the adapter


def write_lora_adapter(model: torch.nn.Module, path: Path) -> Path:
    """The active LoRA adapter of a peft model as a llama.cpp GGUF adapter (F32), written atomically."""
    import gguf

    config = check_architecture(model)
    pairs = lora_pairs(model)
    if not pairs:
        raise ExportError("the policy has no LoRA layers to export (policy.lora.enabled is false?)")
    stale = trained_outside_lora(model)
    if stale:
        shown = ", ".join(stale[:5]) + (f" and {len(stale) - 5} more" if len(stale) > 5 else "")
        raise ExportError(
            f"the policy trains weights a LoRA adapter cannot carry ({shown}); the engine would keep serving "
            "their old values: use rollout.llamacpp.sync=merged (ships the whole model), or freeze them"
        )
    writer = gguf.GGUFWriter(None, "llama")
    writer.add_type(gguf.GGUFType.ADAPTER)
    writer.add_string(gguf.Keys.Adapter.TYPE, "lora")
    ranks = {pair.a.shape[0] for pair in pairs.values()}
    scales = {round(pair.scale, 12) for pair in pairs.values()}
    if len(ranks) != 1 or len(scales) != 1:
        raise ExportError(f"the adapter's layers differ in rank {sorted(ranks)} or scale {sorted(scales)}")
    rank, scale = ranks.pop(), scales.pop()
    # llama.cpp multiplies B(Ax) by alpha / rank: alpha = scale * rank reproduces peft's scaling
    writer.add_float32(gguf.Keys.Adapter.LORA_ALPHA, float(scale * rank))
    for module, pair in sorted(pairs.items()):
        name = gguf_name(module + ".weight")
        b = _to_gguf_array(module + ".weight", pair.b.float().cpu().numpy(), config)
        writer.add_tensor(name + ".lora_a", np.ascontiguousarray(pair.a.float().cpu().numpy()))
        writer.add_tensor(name + ".lora_b", np.ascontiguousarray(b))
    return _write(writer, path)


def _write(writer: Any, path: Path) -> Path:
    """Write header, metadata and tensors to a temporary sibling, then rename it into place."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    try:
        writer.write_header_to_file(path=tmp)
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
        tmp.replace(path)
    except BaseException:
        tmp.unlink(missing_ok=True)  # a failed or interrupted export leaves no partial file behind
        raise
    return path


# ---------------------------------------------------------------- the whole model


def write_model(
    model: torch.nn.Module,
    tokenizer: Any,
    path: Path,
    default_type: str = "F32",
    merge_lora: bool = True,
) -> Path:
    """The model (LoRA merged unless `merge_lora` is False) as a llama.cpp GGUF file.

    Matrices are written in `default_type`; 1-D tensors (norms) are always F32.
    """
    import gguf

    config = check_architecture(model)
    writer = gguf.GGUFWriter(None, "llama")
    writer.add_type(gguf.GGUFType.MODEL)
    writer.add_name(str(getattr(config, "_name_or_path", "") or "mapo policy"))
    writer.add_context_length(int(config.max_position_embeddings))
    writer.add_embedding_length(int(config.hidden_size))
    writer.add_block_count(int(config.num_hidden_layers))
    writer.add_feed_forward_length(int(config.intermediate_size))
    writer.add_head_count(int(config.num_attention_heads))
    writer.add_head_count_kv(int(config.num_key_value_heads))
    writer.add_rope_freq_base(_rope_theta(config))
    writer.add_layer_norm_rms_eps(float(config.rms_norm_eps))
    writer.add_rope_dimension_count(_head_dim(config))
    writer.add_key_length(_head_dim(config))
    writer.add_value_length(_head_dim(config))
    writer.add_vocab_size(int(config.vocab_size))
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    add_tokenizer(writer, tokenizer, int(config.vocab_size))
    fallback = gguf.GGMLQuantizationType[default_type]
    for name, weight in dense_weights(model, merge_lora):
        target = gguf_name(name)
        array = _to_gguf_array(name, weight.numpy(), config)
        kind = fallback if array.ndim > 1 else gguf.GGMLQuantizationType.F32
        data, raw_dtype = _encode(array, kind)
        writer.add_tensor(target, data, raw_dtype=raw_dtype)
    return _write(writer, path)


def _encode(array: np.ndarray, kind: Any) -> tuple[np.ndarray, Any]:
    """(data, raw_dtype) for GGUFWriter.add_tensor: float arrays as they are, quantised bytes otherwise."""
    import gguf

    if kind == gguf.GGMLQuantizationType.F32:
        return np.ascontiguousarray(array, dtype=np.float32), None
    if kind == gguf.GGMLQuantizationType.F16:
        return np.ascontiguousarray(array, dtype=np.float16), None
    block = gguf.GGML_QUANT_SIZES[kind][0]
    if array.shape[-1] % block:
        return np.ascontiguousarray(array, dtype=np.float32), None  # rows not a whole number of blocks
    return gguf.quants.quantize(np.ascontiguousarray(array, dtype=np.float32), kind), kind


def add_tokenizer(writer: Any, tokenizer: Any, vocab_size: int) -> None:
    """The vocabulary llama.cpp needs to load a model: tokens, their kinds, BPE merges, special ids.

    The engine is token in, token out (llama.cpp never tokenises text), so this only
    has to give every id its token and mark the special ones; it is written from the
    HF tokenizer, padded with unused entries up to the model's vocab_size.
    """
    import gguf

    backend = json.loads(tokenizer.backend_tokenizer.to_str()) if hasattr(tokenizer, "backend_tokenizer") else {}
    model = backend.get("model", {})
    if model.get("type") != "BPE":
        raise ExportError(f"the llamacpp engine writes byte-level BPE vocabularies; this tokenizer is {model.get('type')!r}")
    count = len(tokenizer)
    if count > vocab_size:
        raise ExportError(f"the tokenizer has {count} tokens, more than the model's vocab_size {vocab_size}")
    tokens = tokenizer.convert_ids_to_tokens(list(range(count)))
    special = set(tokenizer.all_special_ids)
    added = {int(k) for k in tokenizer.added_tokens_decoder}
    kinds = [
        gguf.TokenType.CONTROL if i in special else gguf.TokenType.USER_DEFINED if i in added else gguf.TokenType.NORMAL
        for i in range(count)
    ]
    tokens += [f"[PAD{i}]" for i in range(count, vocab_size)]
    kinds += [gguf.TokenType.UNUSED] * (vocab_size - count)
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
    ):
        if token_id is not None:
            setter(int(token_id))
    writer.add_add_bos_token(False)
