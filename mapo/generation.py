"""Sampling as recorded: a model's shipped generation_config must not reshape rollouts.

`generate` fills every field mapo leaves at its default from the model's own
`generation_config` (Qwen2.5-Instruct ships repetition_penalty 1.05, top_k 20,
top_p 0.8). The log-probs mapo records are log softmax(logits / T) of plain
temperature (and top-p) sampling, so any such processor would make training silently
off-policy. At load time the model's config is replaced by a neutral one that keeps
only its special-token ids; what was dropped is logged.
"""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger("mapo.generation")

# the model's token ids: kept
_KEPT = ("bos_token_id", "eos_token_id", "pad_token_id", "decoder_start_token_id")
# reset with the rest but not worth a warning: they never change which token is drawn or its probability
_QUIET = ("_", "output_", "return_", "use_cache", "cache_implementation", "max_length", "transformers_version")


def neutralise_generation_config(model: Any) -> dict[str, Any]:
    """Replace `model.generation_config` with defaults plus its token ids; return the reset
    fields that would have changed sampling."""
    from transformers import GenerationConfig

    current = getattr(model, "generation_config", None)
    if current is None:
        return {}
    kept = {name: getattr(current, name, None) for name in _KEPT}
    reset = {k: v for k, v in current.to_diff_dict().items() if k not in _KEPT and not k.startswith(_QUIET)}
    model.generation_config = GenerationConfig(**{k: v for k, v in kept.items() if v is not None})
    if reset:
        log.warning(
            "the model's generation_config set %s; reset to neutral so sampled log-probs match the trained ones",
            ", ".join(f"{k}={v!r}" for k, v in sorted(reset.items())),
        )
    return reset
