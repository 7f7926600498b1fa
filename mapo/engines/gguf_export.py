"""Write the trainer's weights as GGUF files that llama.cpp loads.

Two forms, for the architectures of mapo.engines.gguf_arch (Llama, Mistral, Qwen2/2.5,
Qwen3, Gemma 3):

- `write_lora_adapter`: the LoRA matrices alone as a GGUF adapter (general.type
  "adapter"); llama.cpp adds scale * B (A x) to the base layer's output at run time,
  so the quantised base stays as it is and a sync moves a few MB. It refuses a policy
  that trains any other weight (peft `modules_to_save`, an unfrozen norm): the engine
  would keep serving the stale copy of it.
- `write_model`: a whole model (LoRA merged in when there is one, peft's trained
  `modules_to_save` copies in place of the originals), each tensor in the
  type asked for (F32, F16, Q8_0, Q4_1, ... quantised with gguf-py), with the
  vocabulary of the GGUF file the policy came from, or else its tokenizer's
  (mapo.engines.gguf_vocab); used as the engine's base (F16/BF16/... from torch) and
  for merged syncs (F16, Q8_0 or F32: never back to a 4-bit type).

Layout facts of the format: a GGUF tensor lists its dimensions fastest first, so a
torch [out, in] weight is stored as is; what each architecture changes (q/k row order,
norm offsets, metadata) is in mapo.engines.gguf_arch.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from mapo.engines.gguf_arch import (  # noqa: F401  (ExportError, gguf_name, interleave_rotary_rows: re-exported)
    ExportError,
    add_hyperparameters,
    architecture,
    gguf_name,
    interleave_rotary_rows,
    to_gguf_array,
)
from mapo.engines.gguf_vocab import add_tokenizer, copy_vocabulary

_MODULES_TO_SAVE = re.compile(r"\.modules_to_save\.[^.]+\.")  # peft's trained copy of a whole module


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
    """The model's config, or ExportError when llama.cpp's graph would not compute the same function."""
    config = _base(model).config
    architecture(config)
    return config


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


# ---------------------------------------------------------------- the adapter


def write_lora_adapter(model: torch.nn.Module, path: Path) -> Path:
    """The active LoRA adapter of a peft model as a llama.cpp GGUF adapter (F32), written atomically."""
    import gguf

    config = check_architecture(model)
    arch = architecture(config)
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
    writer = gguf.GGUFWriter(None, arch.gguf_arch)  # llama.cpp loads an adapter over a model of its architecture only
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
        name = gguf_name(module + ".weight", arch.gguf_arch)
        b = to_gguf_array(arch, module + ".weight", pair.b.float().cpu().numpy(), config)
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
    vocabulary: Path | None = None,
) -> Path:
    """The model (LoRA merged unless `merge_lora` is False) as a llama.cpp GGUF file.

    Matrices are written in `default_type`; 1-D tensors (norms, biases) are always F32. The
    vocabulary is copied from the GGUF file `vocabulary` (the one the policy was loaded from)
    when given, else written from `tokenizer`.
    """
    import gguf

    config = check_architecture(model)
    arch = architecture(config)
    writer = gguf.GGUFWriter(None, arch.gguf_arch)
    writer.add_type(gguf.GGUFType.MODEL)
    writer.add_name(str(getattr(config, "_name_or_path", "") or "mapo policy"))
    add_hyperparameters(writer, config, arch)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    if vocabulary is not None:
        copy_vocabulary(writer, Path(vocabulary), int(config.vocab_size))
    else:
        add_tokenizer(writer, tokenizer, int(config.vocab_size))
    fallback = gguf.GGMLQuantizationType[default_type]
    for name, weight in dense_weights(model, merge_lora):
        target = gguf_name(name, arch.gguf_arch)
        array = to_gguf_array(arch, name, weight.numpy(), config)
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
