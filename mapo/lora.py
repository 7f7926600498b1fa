"""Which weights train: LoRA adapters (peft) on the chosen modules and layers, or every weight.

`policy.lora.top_layers` adapts only the last N decoder layers, so the backward pass stops
at the lowest adapted layer (on SmolLM2, 12 of 30 layers cut an update by ~40%).
"""

from __future__ import annotations

import warnings

import torch

from mapo.model_source import PolicySpec


def _top_layers(model: torch.nn.Module, top: int | None) -> list[int] | None:
    if top is None:
        return None
    if top < 1:
        raise ValueError(f"policy.lora.top_layers must be at least 1 (or null for all layers), got {top}")
    total = int(model.config.num_hidden_layers)
    return list(range(max(0, total - top), total))


def trainable(model: torch.nn.Module, spec: PolicySpec, seed: int = 0) -> torch.nn.Module:
    """`model` wrapped with LoRA adapters (initialised from `seed`) when `spec.lora.enabled`, else with
    every weight trainable; with gradient checkpointing when `spec.gradient_checkpointing`."""
    if spec.lora.enabled:
        from peft import LoraConfig, get_peft_model

        with torch.random.fork_rng(), warnings.catch_warnings():
            warnings.filterwarnings("ignore", category=FutureWarning)  # peft's use of a renamed transformers API
            torch.manual_seed(seed)
            model = get_peft_model(
                model,
                LoraConfig(
                    r=spec.lora.r,
                    lora_alpha=spec.lora.alpha,
                    lora_dropout=spec.lora.dropout,
                    target_modules=list(spec.lora.target_modules),
                    layers_to_transform=_top_layers(model, spec.lora.top_layers),
                    task_type="CAUSAL_LM",
                ),
            )
    else:
        model.requires_grad_(True)
    if spec.gradient_checkpointing:
        model.gradient_checkpointing_enable()
        if spec.lora.enabled:
            model.enable_input_require_grads()
    return model
