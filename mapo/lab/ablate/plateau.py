"""Stopping a unit where its held-out success levels off (AblationPlan.stop).

A plan with `stop.every > 0` trains each unit in chunks of `every` steps. After each chunk the
checkpoint of its last step is evaluated on the plan's held-out scenarios with the plan's own
evaluation budget (`plan.eval`: the 2-point rule needs the final evaluation's precision; the held-out
curve's 2 dialogues a scenario swing by 5-15 points between checks). With v_1, v_2, ... the metric
of the evaluations at steps every, 2 every, ... (`PlateauStop.steps`), the unit stops at the first
evaluation k with

    k > patience  and  v_j - v_{j-1} < min_gain  for every j in k - patience + 1 .. k

(each of the last `patience` evaluations gained less than `min_gain` over the one before it; a drop
counts as no gain), or at the plan's `steps`, the cap, whichever comes first. Step 0 is not one of
them: the base is evaluated beside the units, not before them, and a rule that read it would stop a
run differently depending on which process finished first.

The stopping step's policy is the unit's final one (its run's final/) and that evaluation is its
final evaluation (copied to evals/<unit>/eval.json), so the report compares the units at their own
stopping steps. The evaluations live where the held-out curve's checks do (evals/<unit>/curve/
step-N/), and are its points. Each chunk is a `mapo.core.trainer.train` run to the chunk's last step, the
next one a resume of it with `steps` raised: every draw of step k is seeded from (seed, k) and the
RL learning rate is constant (OptimSpec has no schedule), so the chunks train what one run to the
stopping step would. A killed ablation's rerun continues from the evaluations already made.
"""

from __future__ import annotations

import math
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # plan.py imports PlateauStop from here
    from mapo.lab.ablate.plan import AblationPlan, Unit

# an exact 2-point gain of k/n rates (0.06 - 0.04 = 0.01999... in floating point) is a gain, not a plateau
_TOLERANCE = 1e-9


@dataclass
class PlateauStop:
    """Stop a unit's training once `patience` held-out evaluations in a row, one every `every`
    steps, each gained less than `min_gain` of `metric` (a key of eval.json's summary, dotted for a
    nested one: "pass_rate", the held-out success as a fraction, so 0.02 is 2 points); at most the
    plan's `steps`. `every=0`: off (each unit trains all its steps)."""

    __pydantic_config__ = {"extra": "forbid"}

    every: int = 0
    patience: int = 3
    min_gain: float = 0.02
    metric: str = "pass_rate"

    def __post_init__(self) -> None:
        if self.every < 0 or self.patience < 1:
            raise ValueError(f"stop.every must be >= 0 and stop.patience >= 1, got {self.every} and {self.patience}")
        if not math.isfinite(self.min_gain):
            raise ValueError(f"stop.min_gain must be a finite number, got {self.min_gain}")
        if not self.metric:
            raise ValueError("stop.metric must name a figure of eval.json's summary (pass_rate: held-out success)")

    def steps(self, cap: int) -> list[int]:
        """The evaluated steps: every `every`, and the cap."""
        return [*range(self.every, cap, self.every), cap] if self.every else []

    def describe(self) -> str:
        return (f"every {self.every} steps on the held-out evaluation, stopped once {self.patience} in a row gained "
                f"less than {self.min_gain:g} {self.metric} each")


def plateaued(values: Sequence[float], patience: int, min_gain: float) -> bool:
    """Whether the last `patience` of `values` (the evaluations in step order) each gained less than
    `min_gain` over the value before it; fewer than `patience` + 1 values: no."""
    if len(values) <= patience:
        return False
    recent = values[-patience - 1:]
    return all(later - earlier < min_gain - _TOLERANCE for earlier, later in zip(recent, recent[1:]))


def stopping_point(values: Sequence[float], stop: PlateauStop, cap: int) -> tuple[int, str] | None:
    """Where a unit stops, given the metric of its evaluations so far at `stop.steps(cap)` in order:
    (step, "plateau") at the first evaluation that plateaued, else (cap, "cap") once the cap is
    evaluated; None while it trains on."""
    steps = stop.steps(cap)
    for k in range(1, min(len(values), len(steps)) + 1):
        if plateaued(values[:k], stop.patience, stop.min_gain):
            return steps[k - 1], "plateau"
        if k == len(steps):
            return cap, "cap"
    return None


def metric_value(result: dict[str, Any], metric: str) -> float:
    """`metric` ("pass_rate", "figures.bits_per_question") of an eval.json's summary."""
    found: Any = result["summary"]
    for key in metric.split("."):
        if not isinstance(found, dict) or key not in found:
            raise ValueError(f"stop.metric {metric!r}: eval.json's summary has no such figure "
                             f"(its keys: {', '.join(result['summary'])})")
        found = found[key]
    if not isinstance(found, (int, float)) or isinstance(found, bool) or not math.isfinite(found):
        raise ValueError(f"stop.metric {metric!r} is {found!r} in eval.json's summary, not a number")
    return float(found)


PAUSED = "paused"  # train_until_plateau's last word when it stopped after its `chunks` with more to train


def train_until_plateau(out: Path, plan: AblationPlan, unit: Unit, overrides: Sequence[str],
                        evaluate: Callable[[int], None], show_progress: bool = True,
                        chunks: int | None = None) -> list[str]:
    """Train `unit` chunk by chunk, `evaluate(step)` writing each chunk end's held-out evaluation,
    until `stopping_point` says it stops; then its evaluation there becomes the unit's final one.
    `chunks`: train at most that many in this call, then return with "paused at step N" last while
    the unit trains on (a parallel ablation runs each chunk in a fresh process: mapo.lab.ablate.runner).

    `overrides` are a new run's config overrides (`unit_overrides`; `steps=` is set here). Returns
    what was done ("trained" / "resumed", "evaluated", "stopped at step N (plateau|cap)"), [] when
    it had stopped already. An evaluation missing at a step the run has a checkpoint of (a kill mid-evaluation, or
    between the checkpoint and final/) resumes to that very step first, which trains nothing and
    rewrites final/: the stopping step's final/ is then known to be its policy."""
    from mapo.config import load_config
    from mapo.core.trainer import train
    from mapo.lab.ablate.state import eval_dir, plateau_values, read_eval, run_dir
    from mapo.run_folder import RunFolder, checkpoint_step

    run = RunFolder(run_dir(out, unit))
    did: list[str] = []
    trained = 0
    while (stopped := stopping_point(values := plateau_values(out, plan, unit), plan.stop, plan.steps)) is None:
        if chunks is not None and trained >= chunks:
            return [*dict.fromkeys(did[:2]), f"{PAUSED} at step {step}"]
        step = plan.stop.steps(plan.steps)[len(values)]
        latest = run.latest_checkpoint()
        if latest is not None and checkpoint_step(latest) > step:  # only a plan changed under the folder does this
            raise ValueError(f"{unit.name}: its run has a checkpoint at step {checkpoint_step(latest)} but no held-out "
                             f"evaluation at step {step}; the plateau rule cannot go on (remove {run.path} to start it over)")
        _forget_final_eval(eval_dir(out, unit.name))
        if not (run.path / "config.yaml").is_file():
            train(load_config(None, [*overrides, f"steps={step}"]), output=run.path, show_progress=show_progress)
            did.append("trained")
        else:
            # a chunk runs on the threads given now, not its run's first ones (--jobs or the machine changed)
            given = [item for item in overrides if item.startswith("threads=")]
            train(resume=run.path, overrides=[f"steps={step}", *given], show_progress=show_progress)
            did.append("resumed")
        evaluate(step)
        did.append("evaluated")
        trained += 1
    step, reason = stopped
    if did or read_eval(eval_dir(out, unit.name)) is None:  # a kill may have cut the copy short
        _keep_as_final(out, unit.name, step)
    if not did:
        return []
    return [*dict.fromkeys(did[:2]), f"stopped at step {step} ({reason})"]  # the first chunk's: trained+evaluated


def _forget_final_eval(folder: Path) -> None:
    """A unit trained on (its plan grown past a cap it stopped at) is no longer its final policy:
    drop the final evaluation, a copy of the step's held-out evaluation, which stays."""
    for path in ([*folder.iterdir()] if folder.is_dir() else []):
        if path.is_file():
            path.unlink()


def _keep_as_final(out: Path, name: str, step: int) -> None:
    """The held-out evaluation at the stopping step as the unit's final one (its files, in eval_dir)."""
    from mapo.lab.ablate.state import EVAL, curve_dir, eval_dir

    source, folder = curve_dir(out, name, step), eval_dir(out, name)
    _forget_final_eval(folder)
    for path in sorted(source.iterdir(), key=lambda p: p.name == EVAL):  # eval.json last: read_eval's "done"
        if path.is_file():
            shutil.copy2(path, folder / path.name)
