"""The policy's weights as an inference engine loads them: plain transformers names, LoRA merged in.

A peft-wrapped policy names its tensors `...q_proj.base_layer.weight` and keeps the LoRA
matrices beside them; an engine wants the model a plain transformers checkpoint would hold.
`dense_weights` yields exactly that, merging W + scale * B A for every adapted layer and
taking the trained copy of a module peft trains whole (`modules_to_save`).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

import torch

_MODULES_TO_SAVE = re.compile(r"\.modules_to_save\.[^.]+\.")  # peft's trained copy of a whole module


class WeightsError(ValueError):
    """The policy's weights cannot be handed to the engine as they are."""


@dataclass(frozen=True)
class LoraPair:
    """One adapted linear layer: A [r, in], B [out, r] and the scale its output is multiplied by."""

    a: torch.Tensor
    b: torch.Tensor
    scale: float


def base_model(model: torch.nn.Module) -> torch.nn.Module:
    """The transformers model under a peft wrapper (or the model itself)."""
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def lora_pairs(model: torch.nn.Module) -> dict[str, LoraPair]:
    """The LoRA layers of a peft model by HF module path ("model.layers.3.self_attn.q_proj")."""
    from peft.tuners.lora import LoraLayer

    pairs = {}
    for name, module in base_model(model).named_modules():
        if not isinstance(module, LoraLayer) or not module.active_adapters:
            continue
        adapter = module.active_adapters[0]
        if len(module.active_adapters) > 1 or module.use_dora.get(adapter, False):
            raise WeightsError(f"{name}: only one plain LoRA adapter per layer can be merged (no DoRA, no stacking)")
        pairs[name] = LoraPair(
            a=module.lora_A[adapter].weight.detach(),
            b=module.lora_B[adapter].weight.detach(),
            scale=float(module.scaling[adapter]),
        )
    return pairs


def plain_name(name: str) -> str:
    """The transformers parameter name under peft's wrappers (base_layer, modules_to_save copy)."""
    return _MODULES_TO_SAVE.sub(".", name).replace(".base_layer.", ".")


def dense_weights(model: torch.nn.Module, dtype: torch.dtype = torch.float32) -> Iterator[tuple[str, torch.Tensor]]:
    """(HF parameter name, CPU tensor in `dtype`) of the model, every LoRA delta merged in.

    The merge is computed in float32 and cast once. A module peft trains whole
    (`modules_to_save`) comes from the active adapter's copy, not the frozen original;
    `lm_head` is left out when it is the embedding matrix itself (tied), as a checkpoint
    with tied embeddings stores it.
    """
    pairs = lora_pairs(model) if hasattr(model, "peft_config") else {}
    active = f".modules_to_save.{getattr(model, 'active_adapter', 'default')}."
    tensors: dict[str, torch.Tensor] = {}
    for name, tensor in base_model(model).state_dict().items():
        if ".lora_" in name or "rotary_emb" in name or ".original_module." in name:
            continue
        if ".modules_to_save." in name and active not in name:
            continue  # another adapter's copy
        tensors[plain_name(name)] = tensor
    head, embedding = tensors.get("lm_head.weight"), tensors.get("model.embed_tokens.weight")
    if head is not None and embedding is not None and head.data_ptr() == embedding.data_ptr():
        del tensors["lm_head.weight"]
    for name, tensor in tensors.items():
        pair = pairs.get(name.removesuffix(".weight"))
        if pair is None:
            yield name, tensor.detach().to("cpu", dtype)
            continue
        weight = tensor.detach().to("cpu", torch.float32)
        weight = weight + pair.scale * (pair.b.float().cpu() @ pair.a.float().cpu())
        yield name, weight.to(dtype)
