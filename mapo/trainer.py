"""The RL loop: rollout -> rewards -> advantages -> update -> log -> checkpoint.

Each step samples B scenarios (deterministically from seed and step), rolls out N
dialogues per scenario, turns distances into per-turn rewards (mapo.rewards), gets
advantages from any registered estimator over the whole batch (mapo.advantages), and
updates the policy on one packed sequence per trajectory with the clipped surrogate
(mapo.losses). Every random draw of step k is seeded from (seed, k), so a run resumed
from a checkpoint continues exactly as the uninterrupted run would have.
"""

from __future__ import annotations

import json
import logging
import random
import signal
import threading
import time
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import torch

from mapo.backends.openai_compat import BackendError, shared_stats
from mapo.config import TrainConfig, config_dict, dump_config, load_config
from mapo.envs.base import environment_factory, load_scenarios
from mapo.degeneracy import dialogue_hacking_metrics
from mapo.losses import packed_sequence
from mapo.methods.compeer import apply_format_reward, reasoning_env_factory, reasoning_rollout_spec
from mapo.methods.rapo import Rapo
from mapo.policy import load_policy, resolve_source
from mapo.reliability import (
    TrainingInterrupted,
    TrainingStopped,
    backend_delta,
    check_fallback_budget,
    pause_for_test,
    role_metrics,
)
from mapo.rollout import rollout
from mapo.run_folder import RunFolder, new_run_dir
from mapo.runtime import configure_threads, seed_everything, step_seed
from mapo.tracking import Tracking, check_installed
from mapo.update import compute_advantages, fill_rewards, make_optimizer, update
from mapo.types import Group, Scenario

log = logging.getLogger("mapo.trainer")

RUNTIME_KEYS = (
    "threads",
    "time_rollout",
    "time_generate",
    "time_env",
    "time_update",
    "step_time",
    "tokens_per_s_rollout",
    "tokens_per_s_train",
    "wall_time",
    "time_redundancy",  # mapo.methods: seconds spent in an optional method's own work
    "time_distill",
)

Nested = list[list[list[float | None]]]
# per-turn info that optional methods add, copied into the transcripts (mapo.methods)
TRANSCRIPT_EXTRAS = (
    *("raw_reward", "s_in", "s_hist", "reply", "analysis", "format_complete", "format_reward"),
    *("reaction", "rank", "rank_score", "critique"),
)


# ---------------------------------------------------------------- setup helpers


# ---------------------------------------------------------------- metrics and transcripts


def _stats(values: Sequence[float], prefix: str) -> dict[str, float]:
    if not values:
        return {}
    a = np.asarray(values, dtype=float)
    return {
        f"{prefix}_mean": float(a.mean()),
        f"{prefix}_std": float(a.std()),
        f"{prefix}_abs_mean": float(np.abs(a).mean()),
    }


def rollout_metrics(groups: Sequence[Group], advantages: Nested, components: dict[str, Nested]) -> dict[str, float]:
    trajectories = [t for g in groups for t in g.trajectories]
    turns = [turn for t in trajectories for turn in t.turns]
    reasons = Counter(t.done_reason or "unknown" for t in trajectories)
    metrics: dict[str, float] = {
        "reward_mean": float(np.mean([turn.reward for turn in turns])),
        "return_mean": float(np.mean([sum(t.rewards) for t in trajectories])),
        "success_rate": reasons["success"] / len(trajectories),
        "turns_mean": float(np.mean([len(t) for t in trajectories])),
        "final_distance_mean": float(np.mean([t.distances[-1] for t in trajectories])),
        "response_length_mean": float(np.mean([len(turn.response_ids) for turn in turns])),
        "truncated_fraction": float(np.mean([turn.truncated for turn in turns])),
    }
    metrics.update({f"done_{reason}": count / len(trajectories) for reason, count in sorted(reasons.items())})
    flat = [a for g in advantages for t in g for a in t if a is not None]
    metrics["trained_turn_fraction"] = len(flat) / len(turns)
    metrics.update(_stats(flat, "adv"))
    for name, values in components.items():
        metrics.update(_stats([a for g in values for t in g for a in t if a is not None], f"adv_{name}"))
    # The judge's own degeneracy detectors over the step's replies: the reward-hacking monitor.
    metrics.update(dialogue_hacking_metrics([(u.user_message, u.response) for u in t.turns] for t in trajectories))
    return metrics


def transcript_records(step: int, groups: Sequence[Group], advantages: Nested) -> list[dict[str, Any]]:
    records = []
    for group, group_adv in zip(groups, advantages):
        for trajectory, traj_adv in zip(group.trajectories, group_adv):
            records.append(
                {
                    "step": step,
                    "scenario_id": trajectory.scenario_id,
                    "sample_index": trajectory.sample_index,
                    "done_reason": trajectory.done_reason,
                    "return": sum(trajectory.rewards),
                    "initial_state": list(trajectory.initial_state),
                    "turns": [
                        {
                            "turn": turn.index,
                            "user": turn.user_message,
                            "response": turn.response,
                            "reward": turn.reward,
                            "advantage": adv,
                            "action": list(turn.action),
                            "state": list(turn.state),
                            "distance": turn.distance,
                            "levels": turn.levels,
                            "response_tokens": len(turn.response_ids),
                            "truncated": turn.truncated,
                            **{key: turn.info[key] for key in TRANSCRIPT_EXTRAS if key in turn.info},
                        }
                        for turn, adv in zip(trajectory.turns, traj_adv)
                    ],
                }
            )
    return records


# ---------------------------------------------------------------- the trainer


class Trainer:
    """Owns the policy, optimizer, scenarios and environment factory of one training run."""

    def __init__(self, config: TrainConfig) -> None:
        self.config = config
        self.threads = configure_threads(config.threads)
        seed_everything(config.seed)
        check_installed(config.report_to)  # a missing tracker stops the run now, not after the first hour
        resolve_source(config.policy)  # a missing model file fails before anything slow
        self.scenarios = load_scenarios(config.env.name, config.env.scenarios)
        self.make_env = environment_factory(config.env.name, config.env.options)
        self.rollout_spec = reasoning_rollout_spec(config.rollout, config.reasoning)  # + format instructions if on
        if config.reasoning.enabled:  # only the <reply> part reaches the user and the judge
            self.make_env = reasoning_env_factory(self.make_env)
        self.policy = load_policy(config.policy, seed=config.seed)
        if config.loss.kl_beta > 0:
            self.policy.keep_reference()  # the initial weights, before any update or resumed checkpoint
        self.optimizer = make_optimizer(self.policy, config.optim)
        self.step = 0
        self._interruptible = False  # whether Ctrl-C may abort the current step (no state changed yet)
        self._stop_requested = False
        self.rapo = Rapo(config.rapo)  # RAPO options (hindsight selection, self-distillation); inert when off

    # ---- checkpoints

    def save_checkpoint(self, run: RunFolder) -> Path:
        def write(folder: Path) -> None:
            self.policy.save_pretrained(folder / "policy")
            pause_for_test(self.step, folder)  # MAPO_TEST_PAUSE_IN_CHECKPOINT: a kill mid-write, on purpose
            torch.save(
                {
                    "step": self.step,
                    "optimizer": self.optimizer.state_dict(),
                    "rapo": self.rapo.state_dict(),  # the EMA teacher, when RAPO distils from one
                    "rng": {
                        "torch": torch.get_rng_state(),
                        "numpy": np.random.get_state(),
                        "python": random.getstate(),
                    },
                },
                folder / "trainer_state.pt",
            )
            (folder / "trainer_state.json").write_text(json.dumps({"step": self.step}) + "\n", encoding="utf-8")

        return run.save_checkpoint(self.step, write, keep=self.config.keep_checkpoints)

    def load_checkpoint(self, run: RunFolder, folder: Path) -> None:
        """Restore weights, optimizer, RNG and step; drop the run's log lines written after it."""
        self.policy.load_trained(folder / "policy")
        state = torch.load(folder / "trainer_state.pt", weights_only=False)
        self.optimizer.load_state_dict(state["optimizer"])
        self.rapo.load_state_dict(state.get("rapo", {}), self.policy)
        torch.set_rng_state(state["rng"]["torch"])
        np.random.set_state(state["rng"]["numpy"])
        random.setstate(state["rng"]["python"])
        self.step = int(state["step"])
        run.drop_logs_after(self.step)

    # ---- one step

    def choose_scenarios(self, step: int) -> list[Scenario]:
        rng = np.random.default_rng(step_seed(self.config.seed, step, stream=1))
        b = self.config.rollout.scenarios_per_step
        picks = rng.choice(len(self.scenarios), size=b, replace=b > len(self.scenarios))
        return [self.scenarios[int(i)] for i in picks]

    def train_step(self, step: int, run: RunFolder, pool: ThreadPoolExecutor | None) -> dict[str, Any]:
        cfg = self.config
        started = time.perf_counter()
        backend_before = shared_stats()
        seed_everything(step_seed(cfg.seed, step))
        timings: dict[str, float] = {}
        groups = (self.rapo.rollout if cfg.rapo.branching else rollout)(  # branching: one-turn lookahead groups
            self.policy,
            self.choose_scenarios(step),
            self.make_env,
            self.rollout_spec,
            seed=step_seed(cfg.seed, step, stream=2) % 2**31,
            pool=pool,
            timings=timings,
        )
        rolled = time.perf_counter()
        reliability = {**role_metrics(groups), **backend_delta(backend_before, shared_stats())}
        check_fallback_budget(reliability, cfg.env.max_fallback_fraction, step, run.path)
        self._interruptible = False  # from here the step changes the weights: Ctrl-C waits for its checkpoint
        reward_metrics = fill_rewards(groups, cfg.reward)
        if cfg.reasoning.enabled:
            reward_metrics.update(apply_format_reward(groups, cfg.reasoning.format_weight))
        advantages, components = compute_advantages(groups, cfg.advantage)
        advantages, method_metrics = self.rapo.select(groups, advantages)
        sequences = [
            seq
            for group, group_adv in zip(groups, advantages)
            for trajectory, traj_adv in zip(group.trajectories, group_adv)
            if (seq := packed_sequence(trajectory, traj_adv)) is not None
        ]
        rng = np.random.default_rng(step_seed(cfg.seed, step, stream=3))
        distill = self.rapo.distillation(self.policy, groups, cfg.rollout.temperature)
        stats = update(
            self.policy, self.optimizer, sequences, cfg.optim, cfg.loss, cfg.rollout.temperature, rng, auxiliary=distill
        )
        self.rapo.after_update(self.policy)
        if distill is not None:
            method_metrics.update(distill.metrics())
        done = time.perf_counter()

        generated = sum(len(turn.response_ids) for g in groups for t in g.trajectories for turn in t.turns)
        metrics: dict[str, Any] = {"step": step}
        metrics.update(rollout_metrics(groups, advantages, components))
        metrics.update(stats)
        metrics.update(reward_metrics)
        metrics.update(method_metrics)
        metrics.update(reliability)
        metrics.update(
            {
                "lr": self.optimizer.param_groups[0]["lr"],
                "threads": self.threads,
                "time_rollout": rolled - started,
                "time_generate": timings["generate"],
                "time_env": timings["env"],
                "time_update": done - rolled,
                "step_time": done - started,
                "tokens_per_s_rollout": generated / max(rolled - started, 1e-9),
                "tokens_per_s_train": sum(len(s.input_ids) for s in sequences)
                * cfg.optim.ppo_epochs
                / max(done - rolled, 1e-9),
                "wall_time": time.time(),
            }
        )
        if cfg.transcripts_every and step % cfg.transcripts_every == 0:
            run.log_transcripts(transcript_records(step, groups, advantages))
        return metrics

    # ---- the loop

    def _sigint_handler(self) -> Any:
        """While training: Ctrl-C aborts a step still rolling out, or lets a step that is updating finish."""
        import contextlib

        def on_sigint(signum: int, frame: Any) -> None:
            if self._interruptible:
                raise KeyboardInterrupt
            self._stop_requested = True
            log.warning("Ctrl-C: finishing step %d, then saving a checkpoint and stopping", self.step + 1)

        @contextlib.contextmanager
        def installed() -> Any:
            if threading.current_thread() is not threading.main_thread():
                yield  # signals reach the main thread only
                return
            previous = signal.signal(signal.SIGINT, on_sigint)
            try:
                yield
            finally:
                signal.signal(signal.SIGINT, previous)

        return installed()

    def _interrupted(self, run: RunFolder) -> None:
        """Save a checkpoint of the last finished step (unless there is one) and raise TrainingInterrupted."""
        self._interruptible = False
        latest = run.latest_checkpoint()
        if latest is None or latest.name != run.checkpoint_dir(self.step).name:
            self.save_checkpoint(run)
        log.warning("interrupted: checkpoint of step %d saved; continue with: mapo train --resume %s", self.step, run.path)
        raise TrainingInterrupted(run.path, self.step)

    def train(self, run: RunFolder, show_progress: bool = True) -> Path:
        """Train from `self.step` to `config.steps`, logging and checkpointing into `run`."""
        cfg = self.config
        tracking = Tracking(cfg.report_to, run.path, config_dict(cfg))
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        progress = Progress(
            TextColumn("[bold]train"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("reward {task.fields[reward]}  return {task.fields[ret]}  success {task.fields[success]}"),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            console=Console(stderr=True),
            disable=not show_progress,
        )
        with tracking, progress, ThreadPoolExecutor(max_workers=cfg.rollout.env_workers) as pool, self._sigint_handler():
            task = progress.add_task("train", total=cfg.steps, completed=self.step, reward="-", ret="-", success="-")
            while self.step < cfg.steps:
                if self._stop_requested:
                    self._interrupted(run)
                self._interruptible = True
                try:
                    metrics = self.train_step(self.step + 1, run, pool)
                except KeyboardInterrupt:
                    self._interrupted(run)
                except BackendError as err:
                    last = run.latest_checkpoint()
                    raise TrainingStopped(
                        f"training stopped at step {self.step + 1}: {err} The last checkpoint is "
                        f"{last.name if last else 'none (the run starts over)'}; once the server is back, "
                        f"continue with: mapo train --resume {run.path}"
                    ) from None
                self.step += 1
                run.log_metrics(metrics)
                tracking.log(metrics, self.step)
                if self.step % cfg.checkpoint_every == 0 or self.step == cfg.steps:
                    self.save_checkpoint(run)
                progress.update(
                    task,
                    advance=1,
                    reward=f"{metrics['reward_mean']:+.3f}",
                    ret=f"{metrics['return_mean']:+.2f}",
                    success=f"{metrics['success_rate']:.0%}",
                )
        self.policy.save_pretrained(run.path / "final")
        from mapo.evaluate.report import write_report

        tracking.finish(write_report(run.path), run.path / "final")  # report.html: the run's curves, with links
        return run.path


def reward_trend(metrics: Sequence[dict[str, Any]]) -> str:
    """One line on how the per-turn reward moved: first third vs last third of the steps, and the slope."""
    steps = [m["step"] for m in metrics]
    rewards = [m["reward_mean"] for m in metrics]
    if len(rewards) < 2:
        return f"reward_mean {rewards[0]:+.3f} (one step)" if rewards else "no steps logged"
    k = max(1, len(rewards) // 3)
    slope = float(np.polyfit(steps, rewards, 1)[0])
    return (
        f"reward_mean: steps {steps[0]}-{steps[k - 1]} {np.mean(rewards[:k]):+.3f} -> "
        f"steps {steps[-k]}-{steps[-1]} {np.mean(rewards[-k:]):+.3f} (slope {slope:+.3f} per step)"
    )


def train(
    config: TrainConfig | None = None,
    output: str | Path | None = None,
    resume: str | Path | None = None,
    overrides: Sequence[str] = (),
    show_progress: bool = True,
) -> Path:
    """Run (or resume) training; returns the run folder.

    `resume` continues RUN_DIR from its latest checkpoint with its own config.yaml
    (plus `overrides`, e.g. more steps); otherwise `config` runs in `output` or a new
    `<output_dir>/<name>-<timestamp>` folder.
    """
    if resume is not None:
        run = RunFolder(Path(resume))
        if not (run.path / "config.yaml").is_file():
            raise FileNotFoundError(f"--resume {resume}: not a run folder (no config.yaml)")
        config = load_config(run.path / "config.yaml", overrides)
        trainer = Trainer(config)
        dump_config(config, run.path / "config.yaml")
        run.discard_partial_checkpoints()
        checkpoint = run.latest_checkpoint()
        if checkpoint is not None:
            trainer.load_checkpoint(run, checkpoint)
        else:
            run.drop_logs_after(0)
    else:
        config = config or load_config(None, overrides)
        trainer = Trainer(config)  # loads model, scenarios, env first: a bad one leaves no folder behind
        run = RunFolder(Path(output) if output is not None else new_run_dir(config.output_dir, config.name))
        dump_config(config, run.path / "config.yaml")
    return trainer.train(run, show_progress=show_progress)
