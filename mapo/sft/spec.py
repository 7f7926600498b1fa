"""The `sft` config section: the demonstrations and how long and how fast to learn them.

It sits in the training config beside `policy` (the model SFT starts from and whether it
trains LoRA adapters or every weight). `mapo sft` runs this section alone; `mapo train`
runs it first when `train_file` is set, then RL from its output (mapo.sft.chain).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

SCHEDULES = ("constant", "linear", "cosine")
SFT_MARKER = "sft.json"  # marks an SFT run folder: its final/ is a plain model, not adapters for a base
FINAL = "final"  # the SFT run's model folder
ADAPTER_DIR = "adapter"  # its LoRA adapter alone (a few MB, loadable as policy.model): a warm start to commit


@dataclass
class SftSpec:
    train_file: str | None = None  # JSONL, one dialogue per line; null: no SFT stage before `mapo train`
    eval_file: str | None = None  # held-out dialogues; without one, eval_fraction of train_file is held out
    eval_fraction: float = 0.1  # 0: no held-out loss
    system_prompt: str | None = None  # for dialogues without a system message (RL's: the environment's)
    max_tokens: int = 2048  # a longer dialogue keeps its first turns that fit
    epochs: int = 3
    max_steps: int | None = None  # stop after this many optimizer steps (null: all epochs)
    batch_size: int = 8  # dialogues per optimizer step
    lr: float = 2e-4  # LoRA; full fine-tuning wants ~1e-5
    schedule: str = "constant"  # constant | linear | cosine (to 0 at the last step), after the warmup
    warmup_steps: int = 0
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0
    micro_batch_tokens: int = 2048  # padded tokens per forward/backward (gradient accumulation)
    eval_every: int = 0  # optimizer steps between held-out losses; 0: at the end of every epoch
    checkpoint_every: int = 50  # optimizer steps; the last step is always checkpointed

    def __post_init__(self) -> None:
        if not 0.0 <= self.eval_fraction < 1.0:
            raise ValueError(f"sft.eval_fraction must be in [0, 1), got {self.eval_fraction}")
        if not (math.isfinite(self.lr) and self.lr > 0):
            raise ValueError(f"sft.lr must be a finite number > 0, got {self.lr}")
        if not (math.isfinite(self.max_grad_norm) and self.max_grad_norm > 0):
            raise ValueError(f"sft.max_grad_norm must be a finite number > 0, got {self.max_grad_norm}")
        if self.schedule not in SCHEDULES:
            raise ValueError(f"sft.schedule must be one of {', '.join(SCHEDULES)}, got {self.schedule!r}")
        for name in ("max_tokens", "epochs", "batch_size", "micro_batch_tokens", "checkpoint_every"):
            if getattr(self, name) < 1:
                raise ValueError(f"sft.{name} must be at least 1, got {getattr(self, name)}")
        for name in ("warmup_steps", "eval_every"):
            if getattr(self, name) < 0:
                raise ValueError(f"sft.{name} must be >= 0, got {getattr(self, name)}")
        if self.max_steps is not None and self.max_steps < 1:
            raise ValueError(f"sft.max_steps must be at least 1 (or null), got {self.max_steps}")
