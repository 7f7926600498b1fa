"""The RL loop: rollout -> rewards -> advantages -> loss -> optimizer -> log -> checkpoint.

Each step samples B scenarios (deterministically from seed and step), rolls out N
dialogues per scenario, then hands the groups to `mapo.core.step.train_step`: distances become
per-turn rewards (mapo.core.rewards), any registered estimator gives advantages over the whole
batch (mapo.core.advantages), each trajectory becomes its training sequences and the policy is
updated with the clipped surrogate on their log-probs (mapo.core.losses, mapo.core.update). Optional
methods (RAPO, COMPEER) attach through the hooks of mapo.methods.base. Every random draw of
step k is seeded from (seed, k), so a run resumed from a checkpoint continues exactly as the
uninterrupted run would have.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import reduce
from pathlib import Path
from typing import Any

import numpy as np
import torch

from mapo.backends.endpoint import BackendError
from mapo.backends.openai_compat import shared_stats
from mapo.config import TrainConfig, config_dict, load_config
from mapo.core.rollout import rollout
from mapo.core.step import train_step as update_from_rollout
from mapo.core.types import Scenario
from mapo.core.update import make_optimizer
from mapo.device import resolve_precision
from mapo.engines.base import EngineError, RolloutEngine
from mapo.engines.factory import make_engine
from mapo.engines.hf import HfEngine
from mapo.envs.base import dialogue_summary, environment_factory, load_scenarios, transcript_keys_for
from mapo.methods import attached_methods
from mapo.model_source import resolve_source
from mapo.policy import load_policy
from mapo.progress import progress_bar
from mapo.records import rollout_metrics, training_summary, transcript_records
from mapo.reliability import (
    TrainingInterrupted,
    TrainingStopped,
    backend_delta,
    check_fallback_budget,
    pause_for_test,
    role_metrics,
)
from mapo.report.run import write_report
from mapo.run_folder import RunFolder
from mapo.run_start import open_run
from mapo.runtime import (choose_threads, memory_figures, read_trainer_state, seed_everything, step_seed,
                          write_trainer_state)
from mapo.sft.chain import check_chain, sft_enabled, warm_start
from mapo.tracking import Tracking, check_installed

log = logging.getLogger(__name__)

@dataclasses.dataclass
class TrainingResult:
    """What a training run leaves: its folder, the lines `mapo train` prints at the end, and every
    logged step's metrics (a resumed run's earlier steps included)."""

    run_dir: Path
    summary: list[str]
    metrics: list[dict[str, Any]] = dataclasses.field(default_factory=list)

    @property
    def final_metrics(self) -> dict[str, Any]:
        """The last step's metrics (reward_mean, loss, ...); empty when no step ran."""
        return self.metrics[-1] if self.metrics else {}


PROGRESS_STATUS = "reward {task.fields[reward]}  return {task.fields[ret]}  success {task.fields[success]}"


class Trainer:
    """Owns the policy, optimizer, scenarios and environment factory of one training run."""

    def __init__(self, config: TrainConfig) -> None:
        self.config = config
        self.threads, threads_reason = choose_threads(config.threads)
        torch.set_num_threads(self.threads)
        seed_everything(config.seed)
        check_installed(config.report_to)  # a missing tracker stops the run now, not after the first hour
        resolve_source(config.policy)  # a missing model file fails before anything slow
        self.scenarios = load_scenarios(config.env.name, config.env.scenarios)
        self.methods = attached_methods(config)  # RAPO / COMPEER options that are on, in hook order
        self.rollout_spec = reduce(lambda spec, m: m.rollout_spec(spec), self.methods, config.rollout)
        self.make_env = reduce(
            lambda make, m: m.wrap_environment(make), self.methods, environment_factory(config.env.name, config.env.options)
        )
        self.rollout = reduce(lambda fn, m: m.rollout_function(fn), self.methods, rollout)
        self.transcript_keys = (*transcript_keys_for(config.env.name), *(key for m in self.methods for key in m.transcript_keys))
        self.policy = load_policy(config.policy, seed=config.seed)
        self.setup_lines = [
            f"torch threads: {self.threads}, {threads_reason}",
            f"policy precision: {resolve_precision(config.policy.dtype, self.policy.device).describe()}",
        ]
        if config.loss.kl_beta > 0:
            self.policy.keep_reference()  # the initial weights, before any update or resumed checkpoint
        self.optimizer = make_optimizer(self.policy, config.optim)
        self.engine: RolloutEngine = HfEngine(self.policy)  # train() starts the configured one
        self.step = 0
        self._interruptible = False  # whether Ctrl-C may abort the current step (no state changed yet)
        self._stop_requested = False

    # ---- checkpoints

    def save_checkpoint(self, run: RunFolder) -> Path:
        def write(folder: Path) -> None:
            self.policy.save_pretrained(folder / "policy")
            pause_for_test(self.step, folder)  # MAPO_TEST_PAUSE_IN_CHECKPOINT: a kill mid-write, on purpose
            # e.g. RAPO's EMA teacher
            write_trainer_state(folder, self.step, self.optimizer, **{m.name: m.state_dict() for m in self.methods})

        return run.save_checkpoint(self.step, write, keep=self.config.keep_checkpoints, keep_every=self.config.keep_every)

    def load_checkpoint(self, run: RunFolder, folder: Path) -> None:
        """Restore weights, optimizer, RNG and step; drop the run's log lines written after it."""
        self.policy.load_trained(folder / "policy")
        state = read_trainer_state(folder, self.optimizer)
        for method in self.methods:
            method.load_state_dict(state.get(method.name, {}), self.policy)
        self.step = int(state["step"])
        run.drop_logs_after(self.step)

    # ---- the rollout engine

    def start_engine(self) -> RolloutEngine:
        """The engine `rollout.engine` asks for, sized to one step's dialogues (mapo.engines.factory).

        A method that replaces the rollout function (RAPO branching) samples in process.
        """
        spec = self.rollout_spec
        name = spec.engine
        if self.rollout is not rollout:
            if name not in ("auto", "hf"):
                log.warning("rollout.engine=%s: a method's own rollout (RAPO branching) samples with hf", name)
            name = "hf"
        return make_engine(
            name,
            self.policy,
            slots=spec.scenarios_per_step * spec.samples_per_scenario,
            context_per_slot=spec.max_context_tokens,
            vllm=spec.vllm,
        )

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
        self.engine.check_version(step - 1)  # never sample from weights older than the last update
        groups = self.rollout(
            self.policy,
            self.choose_scenarios(step),
            self.make_env,
            self.rollout_spec,
            seed=step_seed(cfg.seed, step, stream=2) % 2**31,
            pool=pool,
            timings=timings,
            on_turn=self._stop_between_turns,
            **({"engine": self.engine} if self.rollout is rollout else {}),
        )
        rolled = time.perf_counter()
        reliability = {**role_metrics(groups), **backend_delta(backend_before, shared_stats())}
        check_fallback_budget(reliability, cfg.env.max_fallback_fraction, step, run.path)
        self._interruptible = False  # from here the step changes the weights: Ctrl-C waits for its checkpoint
        # one source for the sampling distribution: the spec the rollout sampled with (a method may
        # change it), never config.rollout; every engine's log-probs are the behaviour policy's,
        # hf's included (generate's numerics), so pi_old is this model's own and the TIS weight corrects
        result = update_from_rollout(
            self.policy, self.optimizer, groups, cfg, sampled=self.rollout_spec, methods=self.methods,
            rng=np.random.default_rng(step_seed(cfg.seed, step, stream=3)),
        )
        advantages, sequences = result.advantages, result.sequences
        updated = time.perf_counter()
        sync = self.engine.sync(step)  # the new weights reach the engine before the next rollout
        done = time.perf_counter()

        generated = sum(len(turn.response_ids) for g in groups for t in g.trajectories for turn in t.turns)
        metrics: dict[str, Any] = {"step": step}
        metrics.update(rollout_metrics(groups, advantages, result.components))
        metrics.update(self._environment_figures(groups))
        metrics.update(result.metrics)  # the update's, then the methods' reward and selection figures
        metrics.update(reliability)
        metrics.update(sync.as_metrics())
        metrics.update(
            {
                "engine_restarts": float(getattr(self.engine, "restarts", 0)),
                "lr": self.optimizer.param_groups[0]["lr"],
                "threads": self.threads,
                "time_rollout": rolled - started,
                "time_generate": timings["generate"],
                "time_env": timings["env"],
                "time_update": updated - rolled,
                "time_sync": done - updated,
                "step_time": done - started,
                "tokens_per_s_rollout": generated / max(rolled - started, 1e-9),
                "tokens_per_s_train": sum(len(s.input_ids) for s in sequences)
                * cfg.optim.ppo_epochs
                / max(updated - rolled, 1e-9),
                "wall_time": time.time(),
                **memory_figures(),
            }
        )
        if cfg.transcripts_every and step % cfg.transcripts_every == 0:
            run.log_transcripts(transcript_records(step, groups, advantages, self.transcript_keys))
        return metrics

    def _environment_figures(self, groups: list[Any]) -> dict[str, float]:
        """The environment's own figures of the step's dialogues (its `dialogue_summary`), as `env_<name>`."""
        dialogues = [
            {"done_reason": t.done_reason, "turns": [turn.info for turn in t.turns]} for g in groups for t in g.trajectories
        ]
        figures = dialogue_summary(self.config.env.name, dialogues) or {}
        return {f"env_{key}": float(value) for key, value in figures.items() if value is not None}

    # ---- the loop

    @contextlib.contextmanager
    def _stop_signal_handler(self) -> Iterator[None]:
        """While training: Ctrl-C, or SIGTERM (`kill`, a scheduler's pre-emption), ends a step still
        rolling out at its current turn's end, or lets a step that is updating finish. The handler only
        sets a flag: an exception raised from it lands wherever the main thread is, and inside a thread
        pool's wait that breaks the pool's lock instead of stopping."""

        def on_stop(signum: int, frame: Any) -> None:
            self._stop_requested = True
            sender = "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name
            if self._interruptible:
                log.warning("%s: ending step %d's rollout after this turn, then stopping", sender, self.step + 1)
            else:
                log.warning("%s: finishing step %d, then saving a checkpoint and stopping", sender, self.step + 1)

        if threading.current_thread() is not threading.main_thread():
            yield  # signals reach the main thread only
            return
        previous = {sig: signal.signal(sig, on_stop) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def _stop_between_turns(self, *_: int) -> None:
        """The rollout's `on_turn`: after Ctrl-C, abandon the step's rollout here, where no lock is held."""
        if self._stop_requested and self._interruptible:
            raise KeyboardInterrupt

    def _interrupted(self, run: RunFolder) -> None:
        """Save a checkpoint of the last finished step (unless there is one) and raise TrainingInterrupted."""
        self._interruptible = False
        latest = run.latest_checkpoint()
        if latest is None or latest.name != run.checkpoint_dir(self.step).name:
            self.save_checkpoint(run)
        log.warning("interrupted: checkpoint of step %d saved; continue with: mapo train --resume %s", self.step, run.path)
        raise TrainingInterrupted(run.path, self.step)

    def train(self, run: RunFolder, show_progress: bool = True) -> TrainingResult:
        """Train from `self.step` to `config.steps`, logging and checkpointing into `run`; returns the
        run folder and the summary of every logged step (a resumed run's earlier ones included)."""
        cfg = self.config
        history = run.read_metrics()  # the steps before a resume (the run folder kept those up to its checkpoint)
        tracking = Tracking(cfg.report_to, run.path, config_dict(cfg))
        bar = progress_bar(
            cfg.steps, "train", completed=self.step, status=PROGRESS_STATUS, show=show_progress, reward="-", ret="-", success="-"
        )
        self.engine = self.start_engine()
        run.log_provenance(self.step, rollout_engine=self.engine.describe())  # the engine actually used
        described = self.engine.describe()
        engine_line = f"rollout engine: {described['name']} (" + ", ".join(
            str(v) if k == "where" else f"{k} {v}" for k, v in described.items() if k != "name") + ")"
        for line in [*self.setup_lines, engine_line]:  # the run's first lines: how it computes, and why
            log.info(line)
            if show_progress:
                print(line, file=sys.stderr, flush=True)
        with (
            tracking,
            bar as advance,
            ThreadPoolExecutor(max_workers=cfg.rollout.env_workers) as pool,
            self._stop_signal_handler(),
            contextlib.closing(self.engine),
        ):
            self.engine.sync(self.step)  # the weights the run starts (or resumes) from
            while self.step < cfg.steps:
                if self._stop_requested:
                    self._interrupted(run)
                self._interruptible = True
                try:
                    metrics = self.train_step(self.step + 1, run, pool)
                except KeyboardInterrupt:
                    self._interrupted(run)
                except (BackendError, EngineError) as err:
                    last = run.latest_checkpoint()
                    fix = "once the server is back" if isinstance(err, BackendError) else "once the engine's fault is fixed"
                    raise TrainingStopped(
                        f"training stopped at step {self.step + 1}: {err} The last checkpoint is "
                        f"{last.name if last else 'none (the run starts over)'}; {fix}, "
                        f"continue with: mapo train --resume {run.path}"
                    ) from None
                self.step += 1
                run.log_metrics(metrics)
                history.append(metrics)
                tracking.log(metrics, self.step)
                kept = cfg.keep_every and self.step % cfg.keep_every == 0
                if self.step % cfg.checkpoint_every == 0 or kept or self.step == cfg.steps:
                    self.save_checkpoint(run)
                advance(
                    1,
                    reward=f"{metrics['reward_mean']:+.3f}",
                    ret=f"{metrics['return_mean']:+.2f}",
                    success=f"{metrics['success_rate']:.0%}",
                )
        self.policy.save_pretrained(run.path / "final")
        tracking.finish(write_report(run.path), run.path / "final")  # report.html: the run's curves, with links
        if self._stop_requested:  # it landed in the last step, which finished: the caller must still stop
            raise TrainingInterrupted(run.path, self.step, finished=True)
        return TrainingResult(run.path, training_summary(history, str(run.path), cfg.policy.model), history)


def train(
    config: TrainConfig | str | Path | None = None,
    output: str | Path | None = None,
    resume: str | Path | None = None,
    overrides: Sequence[str] = (),
    show_progress: bool = True,
) -> TrainingResult:
    """Run (or resume) training; returns the run folder, its summary and every step's metrics.

    `config` is a TrainConfig, a YAML path or a bundled config's name ("default",
    "twenty-questions"; None: the defaults); `overrides` (`key=value`, as `--set`) apply to a
    path, a name or None. `resume` continues RUN_DIR from its latest checkpoint with its own
    config.yaml (plus `overrides`, e.g. more steps); otherwise the run goes to `output` or a new
    `<output_dir>/<name>-<timestamp>` folder. With an `sft` section, SFT runs first inside
    the run folder and RL starts from its model (mapo.sft.chain). `mapo.train` is this function.
    """
    if resume is not None and config is not None:
        raise ValueError("resume continues a run with its own config.yaml; pass overrides, not a config")
    if isinstance(config, (str, Path)):
        config = load_config(config, overrides)

    def make_trainer(config: TrainConfig, folder: Callable[[], Path]) -> Trainer:
        if not sft_enabled(config):
            return Trainer(config)  # loads model, scenarios, env first: a bad one leaves no folder behind
        if resume is None:
            check_chain(config)  # data, model and scenarios before any folder is written
        return Trainer(warm_start(config, folder(), show_progress))  # SFT skipped once it is complete

    run, trainer = open_run(config, output, resume, overrides, make_trainer)
    return trainer.train(run, show_progress=show_progress)
