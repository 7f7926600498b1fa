"""What differs between the architectures the llama.cpp engine serves, for the GGUF export.

One `Architecture` per Hugging Face `model_type`: llama.cpp's architecture name, whether the
q/k rows are reordered for llama.cpp's rotary layout, what is added to the norm weights, the
config checks that say llama.cpp's graph computes what torch computes, and the metadata its
loader reads. Tensor names come from gguf-py's own map (`gguf.TensorNameMap`), the one
llama.cpp's converter uses.

Facts each entry encodes (from llama.cpp's converter and model graphs):

- Llama / Mistral (`llama`): llama.cpp rotates adjacent pairs within a head while HF rotates
  the two halves, so the rows of q_proj and k_proj (and of their LoRA B) are interleaved.
- Qwen2 (`qwen2`): rotates halves as HF does (no reordering); q/k/v carry biases.
- Qwen3 (`qwen3`): halves, no biases, an RMSNorm over each head of q and of k (`attn_q_norm`,
  `attn_k_norm`), and a head size of its own (`key_length`), not hidden / heads.
- Gemma 3 (`gemma3_text` -> `gemma3`): halves; every RMSNorm scales by (1 + w) in HF and by w in
  llama.cpp, so 1 is added to each norm weight; norms after attention and around the MLP; the
  embeddings scaled by sqrt(hidden) inside llama.cpp's graph; five sliding-window layers per
  global one (the pattern llama.cpp assumes), with their own rotary base; queries scaled by
  1/sqrt(head_dim) (llama.cpp's rule below 27B); a tied output head.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

GEMMA_SWA_PATTERN = 6  # llama.cpp: layer i is global when i % 6 == 5, else sliding-window
GEMMA_LOCAL_ROPE_BASE = 10000.0  # what llama.cpp uses for sliding layers unless the file says otherwise
_BLOCK = re.compile(r"^(model\.layers\.)(\d+)(\..+)$")


class ExportError(ValueError):
    """The model cannot be written as a llama.cpp GGUF (unsupported architecture or layout)."""


@dataclass(frozen=True)
class Architecture:
    model_type: str  # the HF config's model_type
    gguf_arch: str  # llama.cpp's general.architecture
    pairs_rotary: bool  # llama.cpp rotates adjacent pairs where HF rotates halves: reorder q/k rows
    norm_shift: float  # added to every norm weight on export
    check: Callable[[Any], None]  # raises ExportError for a config llama.cpp would compute differently
    extra_metadata: Callable[[Any, Any], None]  # (writer, config): keys beyond the common ones


def _rope_type(params: dict[str, Any]) -> str | None:
    return params.get("rope_type", params.get("type"))


def _rope_params(config: Any, layer_type: str | None = None) -> dict[str, Any]:
    """The rotary parameters of `config` (of one layer type where the config keeps one per type)."""
    params = dict(getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None) or {})
    if layer_type and isinstance(params.get(layer_type), dict):
        return dict(params[layer_type])
    if layer_type and "rope_local_base_freq" in vars(config) and layer_type == "sliding_attention":
        return {"rope_type": "default", "rope_theta": config.rope_local_base_freq}
    return params


def rope_theta(config: Any, layer_type: str | None = None) -> float:
    params = _rope_params(config, layer_type)
    return float(params.get("rope_theta", getattr(config, "rope_theta", 10000.0)))


def _refuse_rope_scaling(config: Any, layer_types: tuple[str | None, ...] = (None,)) -> None:
    for layer_type in layer_types:
        kind = _rope_type(_rope_params(config, layer_type))
        if kind not in (None, "default"):
            raise ExportError(f"the policy uses rope scaling {kind!r}, which the llamacpp engine's export does not write")


def head_dim(config: Any) -> int:
    return int(getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads)


def _check_llama(config: Any) -> None:
    for flag in ("attention_bias", "mlp_bias"):
        if getattr(config, flag, False):
            raise ExportError(f"the policy's config sets {flag}: the llamacpp engine's export has no bias tensors")
    _refuse_rope_scaling(config)


def _check_qwen(config: Any) -> None:
    if getattr(config, "use_sliding_window", False):
        raise ExportError("the policy's config sets use_sliding_window: llama.cpp's Qwen graph attends over the whole context")
    if config.model_type == "qwen3" and getattr(config, "attention_bias", False):
        raise ExportError("the policy's config sets attention_bias: llama.cpp's Qwen3 graph has no q/k/v biases")
    _refuse_rope_scaling(config)


def gemma_layer_types(layers: int) -> list[str]:
    """The layer types llama.cpp's Gemma 3 graph computes: sliding, except every sixth layer."""
    return ["full_attention" if (i + 1) % GEMMA_SWA_PATTERN == 0 else "sliding_attention" for i in range(layers)]


def _check_gemma3(config: Any) -> None:
    layer_types = list(getattr(config, "layer_types", None) or gemma_layer_types(config.num_hidden_layers))
    if layer_types != gemma_layer_types(config.num_hidden_layers):
        raise ExportError(
            "the policy's layer_types are not Gemma 3's five sliding-window layers per global one, "
            "the pattern llama.cpp's Gemma 3 graph computes"
        )
    if getattr(config, "attn_logit_softcapping", None) is not None:
        raise ExportError("the policy's config sets attn_logit_softcapping, which llama.cpp's Gemma 3 graph does not apply")
    if float(getattr(config, "query_pre_attn_scalar", head_dim(config))) != head_dim(config):
        raise ExportError(
            f"the policy scales queries by query_pre_attn_scalar {config.query_pre_attn_scalar}, not its head_dim "
            f"{head_dim(config)}: llama.cpp's Gemma 3 graph (below 27B) scales by the head size"
        )
    if getattr(config, "hidden_activation", "gelu_pytorch_tanh") != "gelu_pytorch_tanh":
        raise ExportError(f"the policy's MLP uses {config.hidden_activation!r}; llama.cpp's Gemma 3 graph uses tanh GELU")
    if getattr(config, "use_bidirectional_attention", False):
        raise ExportError("the policy attends bidirectionally (an embedding model); the engine samples causal models")
    _refuse_rope_scaling(config, ("full_attention", "sliding_attention"))


def _no_extra(writer: Any, config: Any) -> None:
    """Nothing beyond the common keys."""


def _gemma3_metadata(writer: Any, config: Any) -> None:
    import gguf

    writer.add_sliding_window(int(config.sliding_window))
    writer.add_uint32(gguf.Keys.Attention.SLIDING_WINDOW_PATTERN.format(arch=writer.arch), GEMMA_SWA_PATTERN)
    writer.add_float32(f"{writer.arch}.rope.freq_base_swa", rope_theta(config, "sliding_attention"))
    if getattr(config, "final_logit_softcapping", None):
        writer.add_final_logit_softcapping(float(config.final_logit_softcapping))


ARCHITECTURES = {
    arch.model_type: arch
    for arch in (
        Architecture("llama", "llama", True, 0.0, _check_llama, _no_extra),
        Architecture("mistral", "llama", True, 0.0, _check_llama, _no_extra),
        Architecture("qwen2", "qwen2", False, 0.0, _check_qwen, _no_extra),
        Architecture("qwen3", "qwen3", False, 0.0, _check_qwen, _no_extra),
        Architecture("gemma3_text", "gemma3", False, 1.0, _check_gemma3, _gemma3_metadata),
    )
}
SUPPORTED_TYPES = tuple(ARCHITECTURES)


def architecture(config: Any) -> Architecture:
    """The export facts of the config's architecture, checked; ExportError naming it when unsupported."""
    kind = getattr(config, "model_type", "?")
    arch = ARCHITECTURES.get(kind)
    if arch is None:
        raise ExportError(
            f"the llamacpp engine serves the architectures {', '.join(SUPPORTED_TYPES)}; "
            f"this policy is {kind!r}: use rollout.engine=hf"
        )
    arch.check(config)
    return arch


@functools.lru_cache(maxsize=None)
def _name_map(gguf_arch: str) -> Any:
    """gguf-py's HF -> llama.cpp tensor-name map for one block (block ids are put back per name)."""
    import gguf

    arch = next(a for a, name in gguf.MODEL_ARCH_NAMES.items() if name == gguf_arch)
    return gguf.get_tensor_name_map(arch, 1)


def gguf_name(hf_name: str, gguf_arch: str = "llama") -> str:
    """llama.cpp's name for an HF parameter or module path (".weight"/".bias" kept), or ExportError."""
    match = _BLOCK.match(hf_name)
    probe = f"{match.group(1)}0{match.group(3)}" if match else hf_name
    name = _name_map(gguf_arch).get_name(probe, try_suffixes=(".weight", ".bias"))
    if name is None or (match is None and name.startswith("blk.")):
        raise ExportError(f"no llama.cpp {gguf_arch} tensor for the parameter {hf_name!r}")
    return name.replace("blk.0.", f"blk.{match.group(2)}.", 1) if match else name


def interleave_rotary_rows(weight: np.ndarray, heads: int) -> np.ndarray:
    """Reorder the rows of a q/k projection from HF's half-split rotary layout to llama.cpp's pairs.

    Within each head, row j of the first half and row j of the second half become rows
    2j and 2j + 1. Works on any [heads * head_dim, ...] array (a weight, a bias or a LoRA B).
    """
    rows = weight.shape[0]
    if rows % (2 * heads):
        raise ExportError(f"a q/k projection of {rows} rows does not split into {heads} heads of even size")
    return weight.reshape(heads, 2, rows // heads // 2, *weight.shape[1:]).swapaxes(1, 2).reshape(weight.shape)


def to_gguf_array(arch: Architecture, hf_name: str, array: np.ndarray, config: Any) -> np.ndarray:
    """An HF tensor (or LoRA B) as llama.cpp's graph for `arch` expects it."""
    if arch.pairs_rotary and ".self_attn.q_proj." in hf_name + ".":
        return interleave_rotary_rows(array, config.num_attention_heads)
    if arch.pairs_rotary and ".self_attn.k_proj." in hf_name + ".":
        return interleave_rotary_rows(array, config.num_key_value_heads)
    if arch.norm_shift and hf_name.endswith("norm.weight"):
        return array + np.float32(arch.norm_shift)
    return array


def add_hyperparameters(writer: Any, config: Any, arch: Architecture) -> None:
    """The model-shape keys llama.cpp's loader reads for `arch`."""
    writer.add_context_length(int(config.max_position_embeddings))
    writer.add_embedding_length(int(config.hidden_size))
    writer.add_block_count(int(config.num_hidden_layers))
    writer.add_feed_forward_length(int(config.intermediate_size))
    writer.add_head_count(int(config.num_attention_heads))
    writer.add_head_count_kv(int(config.num_key_value_heads))
    writer.add_rope_freq_base(rope_theta(config, "full_attention" if arch.gguf_arch == "gemma3" else None))
    writer.add_layer_norm_rms_eps(float(config.rms_norm_eps))
    writer.add_rope_dimension_count(head_dim(config))
    writer.add_key_length(head_dim(config))
    writer.add_value_length(head_dim(config))
    writer.add_vocab_size(int(config.vocab_size))
    arch.extra_metadata(writer, config)
