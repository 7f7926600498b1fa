"""What of an SFT run the machine would decide, decided the same way for every build on it.

Two builds of one SFT (same data, command and seed) on one machine give the same weights only
if they compute in the same precision with the same number of threads; the data order, the
held-out split, LoRA's initialisation and every step's random draws are already seeded.

- `policy.dtype: auto` on a CPU: RL takes bf16-mixed when a bfloat16 matmul beats float32 by
  a margin timed at start-up (`mapo.device.cpu_bf16_support`). On a shared CPU the timing moves
  with the load (1.35x one moment, 1.98x the next, against a 1.3x bar, on this project's AMD
  EPYC with avx512_bf16), so two builds could train in different arithmetic. SFT takes float32
  there, always; `policy.dtype: bf16-mixed` asks for bfloat16 (faster where it is native, and as
  reproducible). On a GPU `auto` is bfloat16 as before.
- `threads: idle` counts the cores the load leaves idle, so it changes from build to build: SFT
  resolves it as RL does but says so, since a float32 matmul may sum in another order with
  another thread count (`null`, every usable core, is fixed for one machine and one affinity).
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any

from mapo.config import TrainConfig
from mapo.device import AUTO, resolve_device
from mapo.runtime import IDLE

log = logging.getLogger(__name__)


def machine_choices(config: TrainConfig) -> tuple[TrainConfig, dict[str, Any]]:
    """`config` with `policy.dtype: auto` on a CPU made `float32`, and what was chosen and why (for sft.json)."""
    dtype = config.policy.dtype
    reason = "as configured"
    if dtype == AUTO and resolve_device(config.policy.device).type == "cpu":
        dtype, reason = "float32", "auto on a CPU: float32 for SFT (RL's auto is timed at start-up, so it may differ)"
        config = replace(config, policy=replace(config.policy, dtype=dtype))
    if config.threads == IDLE:
        log.warning(
            "threads: idle takes the cores the load leaves idle now; a build with another thread count "
            "may differ in float rounding: set threads to a number to rebuild this SFT bit for bit"
        )
    return config, {"policy_dtype": dtype, "why": reason, "threads_setting": config.threads}
