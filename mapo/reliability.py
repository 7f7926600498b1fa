"""What a training run does about unreliable environments: counts, a fallback budget, clean stops.

Per step the trainer logs (metrics.jsonl, report.html):

- ``<role>_fallbacks`` / ``<role>_repairs``: turns whose judge or director reply was
  unusable even after one repair (neutral value used) / needed the repair, read from
  the environment's step info (``judge_fallback``, ``director_repaired``, ...);
- ``fallback_fraction``: the fraction of turns with any fallback;
- ``backend_<counter>``: the change of every shared chat backend's counters over the
  step: requests, successes, failures, backoff_seconds and retries_<cause> for each
  retry cause (connection, timeout, rate_limit, server_error, bad_response).

A step whose ``fallback_fraction`` exceeds ``env.max_fallback_fraction`` stops the run
(`FallbackBudgetExceeded`) before its update: training on neutral judgements teaches
nothing. A backend that stays down after its retries stops it too (`TrainingStopped`).
Both name the step and say how to resume. Ctrl-C or SIGTERM saves a checkpoint of the
last finished step and raises `TrainingInterrupted`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from pathlib import Path

from mapo.core.types import Group

ROLES = ("judge", "director")
PAUSE_IN_CHECKPOINT = "MAPO_TEST_PAUSE_IN_CHECKPOINT"


class TrainingStopped(RuntimeError):
    """The run cannot go on (its environment keeps failing); the message says why and how to resume."""


class FallbackBudgetExceeded(TrainingStopped):
    """Too many turns of a step were scored with fallback values."""


class TrainingInterrupted(KeyboardInterrupt):
    """Ctrl-C or SIGTERM: a checkpoint of the last finished step was saved. `finished`: the stop came
    during the last step, so the run is complete (final/ written); raised all the same, so that what
    the caller would do next (an ablation's evaluation) does not start."""

    def __init__(self, run_dir: Path, step: int, finished: bool = False) -> None:
        what = "the run is complete" if finished else "checkpoint saved"
        super().__init__(f"interrupted after step {step}; {what} in {run_dir}")
        self.run_dir, self.step, self.finished = run_dir, step, finished

    def __reduce__(self) -> tuple[type, tuple[Path, int, bool]]:
        # a `mapo ablate --jobs N` worker returns it to the parent through pickle
        return type(self), (self.run_dir, self.step, self.finished)

    def resume_hint(self, command: str) -> str:
        """What `mapo train` / `mapo sft` print: how to go on, or that there is nothing left to do."""
        if self.finished:
            return f"Interrupted during the last step ({self.step}); it finished: the run is complete in {self.run_dir}"
        return f"Interrupted after step {self.step}; checkpoint saved. Continue with: {command} --resume {self.run_dir}"


def role_metrics(groups: Sequence[Group]) -> dict[str, float]:
    """Fallbacks and repairs per role over a step's turns, and the fraction of turns with any fallback."""
    turns = [turn for group in groups for trajectory in group.trajectories for turn in trajectory.turns]
    out: dict[str, float] = {}
    for role in ROLES:
        out[f"{role}_fallbacks"] = float(sum(bool(t.info.get(f"{role}_fallback")) for t in turns))
        out[f"{role}_repairs"] = float(sum(bool(t.info.get(f"{role}_repaired")) for t in turns))
    fell_back = sum(any(t.info.get(f"{role}_fallback") for role in ROLES) for t in turns)
    out["fallback_fraction"] = fell_back / len(turns) if turns else 0.0
    return out


def backend_delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """`backend_<counter>`: how much each shared-backend counter grew (zeros when no backend is in use)."""
    return {f"backend_{key}": float(value - before.get(key, 0)) for key, value in after.items()}


def check_fallback_budget(metrics: dict[str, float], max_fraction: float, step: int, run_dir: Path) -> None:
    """Raise `FallbackBudgetExceeded` when the step's fallback fraction is over budget."""
    fraction = metrics["fallback_fraction"]
    if fraction <= max_fraction:
        return
    counts = ", ".join(f"{metrics[f'{r}_fallbacks']:.0f} {r}" for r in ROLES)
    retries = {k.removeprefix("backend_retries_"): int(v) for k, v in metrics.items() if k.startswith("backend_retries_") and v}
    raise FallbackBudgetExceeded(
        f"training stopped at step {step}: {fraction:.0%} of the turns were scored with fallback values "
        f"({counts} fallbacks; retries by cause: {retries or 'none'}), over the budget "
        f"env.max_fallback_fraction={max_fraction:g}. The judge or director server is not giving usable "
        f"replies: check it (the log above says what it returned). This step was not trained on; "
        f"continue with: mapo train --resume {run_dir}"
    )


def pause_for_test(step: int, folder: Path) -> None:
    """Test hook: with MAPO_TEST_PAUSE_IN_CHECKPOINT=<step>, writing that step's checkpoint stops half-way
    (a `PAUSED` file marks the spot) for 600 s, so a test can kill the process mid-write."""
    if os.environ.get(PAUSE_IN_CHECKPOINT) == str(step):
        (folder / "PAUSED").write_text(str(os.getpid()), encoding="utf-8")
        time.sleep(600)
