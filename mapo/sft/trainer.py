"""The SFT loop: shuffled batches of dialogues -> cross-entropy on the replies -> AdamW step -> log -> checkpoint.

The run folder is `mapo train`'s (mapo.run_folder): config.yaml, metrics.jsonl (step 0
holds the base model's held-out loss), checkpoints that a killed run resumes from,
report.html and the trackers of `report_to`; plus `sft.json` (what was trained on) and
`final/`, a plain Hugging Face model folder (LoRA merged into the base, no GGUF
quantisation flag) that `mapo train` and `mapo eval` take as `policy.model` / `--model`, and
with LoRA `adapter/`, the same model as a few MB of adapter on the base (also a `policy.model`:
the warm start to commit, since SFT on a CPU is not bit-for-bit the same on another machine).

Batches are drawn from a permutation seeded by (seed, epoch) and every step reseeds
torch from (seed, step), so a resumed run continues exactly as the uninterrupted one, and
`policy.dtype: auto` on a CPU is float32 (mapo.sft.machine), so two builds with one seed and
thread count on one machine give the same weights.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import signal
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from mapo.config import OptimSpec, TrainConfig, config_dict
from mapo.core.losses import collate
from mapo.core.update import feed_order, make_optimizer, micro_batches, step_if_finite
from mapo.gguf_cache import drop_quantisation_flag
from mapo.model_source import resolve_source
from mapo.policy import Policy, load_policy
from mapo.progress import progress_bar
from mapo.reliability import TrainingInterrupted
from mapo.report.run import write_report
from mapo.run_folder import RunFolder, write_folder
from mapo.run_start import open_run
from mapo.runtime import configure_threads, read_trainer_state, seed_everything, step_seed, write_trainer_state
from mapo.sft.data import train_and_held_out
from mapo.sft.loss import held_out_loss, summed_nll
from mapo.sft.machine import machine_choices
from mapo.sft.outputs import ADAPTER_DIR, FINAL, SFT_MARKER
from mapo.sft.tokens import training_sequence
from mapo.tracking import Tracking, check_installed

log = logging.getLogger(__name__)

SHUFFLE_STREAM = 11  # step_seed stream of the per-epoch data order
PROGRESS_STATUS = "loss {task.fields[loss]}  held-out {task.fields[held]}"


def lr_factor(step: int, total: int, warmup: int, schedule: str) -> float:
    """The multiplier of sft.lr at optimizer step `step` (1-based): a linear warmup, then the schedule."""
    if warmup and step <= warmup:
        return step / warmup
    if schedule == "constant":
        return 1.0
    done = (step - warmup - 1) / max(1, total - warmup)  # 0 at the first step after the warmup
    if schedule == "linear":
        return 1.0 - done
    return 0.5 * (1.0 + math.cos(math.pi * done))


def export_model(policy: Policy, folder: Path) -> Path:
    """Write the trained policy as a plain HF model folder (LoRA merged in), atomically; the policy
    is not trainable afterwards (its adapters are merged)."""
    model = policy.model.merge_and_unload() if policy.lora else policy.model
    drop_quantisation_flag(model)

    def write(tmp: Path) -> None:
        model.save_pretrained(str(tmp))
        policy.tokenizer.save_pretrained(str(tmp))  # with the chat template the ids were rendered by

    return write_folder(folder, write)


class SftTrainer:
    """The policy, optimizer and rendered dialogues of one SFT run (the config's `policy` and `sft` sections)."""

    def __init__(self, config: TrainConfig) -> None:
        config, machine = machine_choices(config)  # no start-up timing decides the arithmetic
        self.config, self.spec = config, config.sft
        spec = self.spec
        self.threads = configure_threads(config.threads)
        seed_everything(config.seed)
        check_installed(config.report_to)
        train, held = train_and_held_out(spec, config.seed)  # bad data stops the run before the model loads
        resolve_source(config.policy)
        self.policy = load_policy(config.policy, seed=config.seed)
        rendered = [training_sequence(self.policy, e, spec.max_tokens, spec.system_prompt) for e in train]
        held_rendered = [training_sequence(self.policy, e, spec.max_tokens, spec.system_prompt) for e in held]
        self.train_sequences = [r.sequence for r in rendered]
        self.held_out = [r.sequence for r in held_rendered]
        dropped = sum(r.dropped_turns for r in (*rendered, *held_rendered))
        if dropped:
            log.warning("%d turns beyond sft.max_tokens=%d were left out", dropped, spec.max_tokens)
        self.summary: dict[str, Any] = {
            "stage": "sft",
            "base_model": config.policy.model,
            "lora_merged": config.policy.lora.enabled,
            "train_file": spec.train_file,
            "eval_file": spec.eval_file,
            "train_dialogues": len(train),
            "held_out_dialogues": len(held),
            "train_tokens": sum(len(s.input_ids) for s in self.train_sequences),
            "train_trained_tokens": sum(s.n_trained for s in self.train_sequences),
            "dropped_turns": dropped,
            "held_out_ids": [e.id for e in held],
            "seed": config.seed,
            "threads": self.threads,
            **machine,
        }
        self.optim = OptimSpec(
            lr=spec.lr, weight_decay=spec.weight_decay, max_grad_norm=spec.max_grad_norm,
            micro_batch_tokens=spec.micro_batch_tokens,
        )
        self.optimizer = make_optimizer(self.policy, self.optim)
        self.steps_per_epoch = math.ceil(len(train) / spec.batch_size)
        self.total_steps = spec.epochs * self.steps_per_epoch
        if spec.max_steps is not None:
            self.total_steps = min(self.total_steps, spec.max_steps)
        self.step = 0
        self._stop_requested = False

    # ---- checkpoints

    def save_checkpoint(self, run: RunFolder) -> Path:
        def write(folder: Path) -> None:
            self.policy.save_pretrained(folder / "policy")
            write_trainer_state(folder, self.step, self.optimizer)

        return run.save_checkpoint(self.step, write, keep=self.config.keep_checkpoints)

    def load_checkpoint(self, run: RunFolder, folder: Path) -> None:
        self.policy.load_trained(folder / "policy")
        state = read_trainer_state(folder, self.optimizer)
        self.step = int(state["step"])
        run.drop_logs_after(self.step)

    # ---- one step

    def batch_indices(self, step: int) -> list[int]:
        """The dialogues of optimizer step `step` (1-based): a slice of its epoch's seeded permutation."""
        epoch, k = divmod(step - 1, self.steps_per_epoch)
        order = np.random.default_rng(step_seed(self.config.seed, epoch, SHUFFLE_STREAM)).permutation(len(self.train_sequences))
        size = self.spec.batch_size
        return [int(i) for i in order[k * size : (k + 1) * size]]

    def train_step(self, step: int) -> dict[str, Any]:
        started = time.perf_counter()
        seed_everything(step_seed(self.config.seed, step))  # LoRA dropout draws, reproducible on resume
        picked = [self.train_sequences[i] for i in self.batch_indices(step)]
        chosen = [picked[i] for i in feed_order(picked, self.policy.share_prompts)]
        n_tokens = sum(s.n_trained for s in chosen)
        lr = self.spec.lr * lr_factor(step, self.total_steps, self.spec.warmup_steps, self.spec.schedule)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        self.policy.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        loss = 0.0
        for chunk in micro_batches(chosen, self.optim.micro_batch_tokens, self.policy.share_prompts):
            nll = summed_nll(self.policy, collate(chunk, self.policy.pad_id)) / n_tokens
            nll.backward()
            loss += float(nll.detach())
        grad_norm = step_if_finite(self.optimizer, self.policy.trainable_parameters(), self.optim.max_grad_norm, loss)
        self.policy.model.eval()
        self.optimizer.zero_grad(set_to_none=True)
        elapsed = time.perf_counter() - started
        return {
            "step": step,
            "epoch": step / self.steps_per_epoch,
            "loss": loss,
            "grad_norm": grad_norm if grad_norm is not None else float("nan"),
            "skipped_updates": float(grad_norm is None),
            "lr": lr,
            "dialogues": float(len(chosen)),
            "trained_tokens": float(n_tokens),
            "threads": self.threads,
            "step_time": elapsed,
            "tokens_per_s_train": sum(len(s.input_ids) for s in chosen) / max(elapsed, 1e-9),
            "wall_time": time.time(),
        }

    def evaluate_now(self, step: int) -> bool:
        if not self.held_out:
            return False
        every = self.spec.eval_every or self.steps_per_epoch
        return step % every == 0 or step == self.total_steps

    # ---- the loop

    @contextlib.contextmanager
    def _deferred_sigint(self) -> Iterator[None]:
        """Ctrl-C lets the current step finish, then a checkpoint is saved (steps are short)."""

        def on_sigint(signum: int, frame: Any) -> None:
            self._stop_requested = True
            log.warning("Ctrl-C: finishing step %d, then saving a checkpoint and stopping", self.step + 1)

        if threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = signal.signal(signal.SIGINT, on_sigint)
        try:
            yield
        finally:
            signal.signal(signal.SIGINT, previous)

    def train(self, run: RunFolder, show_progress: bool = True) -> Path:
        """Train from `self.step` to the last step; write `final/` and the report; return the run folder."""
        (run.path / SFT_MARKER).write_text(json.dumps(self.summary, indent=2) + "\n", encoding="utf-8")
        run.log_provenance(self.step)
        tracking = Tracking(self.config.report_to, run.path, config_dict(self.config))
        bar = progress_bar(
            self.total_steps, "sft", completed=self.step, status=PROGRESS_STATUS, show=show_progress, loss="-", held="-"
        )
        with tracking, bar as advance, self._deferred_sigint():
            if self.step == 0 and self.held_out:  # the base model's held-out loss, to compare against
                start = {"step": 0, "eval_loss": held_out_loss(self.policy, self.held_out, self.optim.micro_batch_tokens)}
                run.log_metrics(start)
                tracking.log(start, 0)
            while self.step < self.total_steps:
                if self._stop_requested:
                    latest = run.latest_checkpoint()
                    if latest is None or latest.name != run.checkpoint_dir(self.step).name:
                        self.save_checkpoint(run)
                    raise TrainingInterrupted(run.path, self.step)
                metrics = self.train_step(self.step + 1)
                self.step += 1
                if self.evaluate_now(self.step):
                    metrics["eval_loss"] = held_out_loss(self.policy, self.held_out, self.optim.micro_batch_tokens)
                run.log_metrics(metrics)
                tracking.log(metrics, self.step)
                if self.step % self.spec.checkpoint_every == 0 or self.step == self.total_steps:
                    self.save_checkpoint(run)
                held = f"{metrics['eval_loss']:.3f}" if "eval_loss" in metrics else None
                advance(1, loss=f"{metrics['loss']:.3f}", **({"held": held} if held else {}))
            if self.policy.lora:  # before the merge below: the adapter alone, to commit or share
                write_folder(run.path / ADAPTER_DIR, self.policy.save_pretrained)
            final = export_model(self.policy, run.path / FINAL)
            tracking.finish(write_report(run.path), final)
        if self._stop_requested:  # Ctrl-C in the last step, which finished: the caller must still stop
            raise TrainingInterrupted(run.path, self.step, finished=True)
        return run.path


def run_sft(
    config: TrainConfig | None = None,
    output: str | Path | None = None,
    resume: str | Path | None = None,
    overrides: Sequence[str] = (),
    show_progress: bool = True,
) -> Path:
    """Run (or resume) SFT; returns the run folder, whose `final/` is the model.

    `resume` continues RUN_DIR from its latest checkpoint with its own config.yaml (plus
    `overrides`); otherwise `config` runs in `output` or `<output_dir>/<name>-sft-<timestamp>`.
    """
    # resumed without a checkpoint, nothing is kept: the base model's held-out loss is measured again
    run, trainer = open_run(
        config, output, resume, overrides, lambda config, _: SftTrainer(config), "-sft", logs_kept_without_checkpoint=-1
    )
    return trainer.train(run, show_progress=show_progress)
