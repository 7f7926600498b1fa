"""The ablation's training curves (curves.png): mean per-turn reward and pre-clip gradient norm per
step for every variant, mean ± std over its seeds, the training success rate where the
environment reports one (the questioning game's `env_success_rate`), and the held-out success at
each check where the plan has a held-out curve (AblationPlan.curve) or a plateau rule (AblationPlan.stop:
its evaluations, mean over seeds with their range)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from mapo.lab.ablate.plan import AblationPlan
from mapo.lab.ablate.state import run_metrics
from mapo.lab.ablate.variants import VARIANTS
from mapo.report.plots import Curve, draw, pyplot, save_png, step_axis


def curves(out: Path, plan: AblationPlan, heldout: dict[str, dict[int, float]] | None = None,
           ) -> dict[str, dict[str, list[list[float]]]]:
    """{variant: {metric: [per-seed series]}} of reward_mean, grad_norm (pre-clip) and, where logged,
    env_success_rate per step (series index 0 = step 1); `heldout` ({unit: {step: success %}}) adds
    the held-out success per step from 0, NaN between checks."""
    found: dict[str, dict[str, list[list[float]]]] = {}
    for unit, rows in run_metrics(out, plan).items():
        keys = [k for k in PANELS if k not in (SUCCESS, HELDOUT) or (k == SUCCESS and rows and SUCCESS in rows[0])]
        entry = found.setdefault(unit.variant, {})
        for key in keys:
            entry.setdefault(key, []).append([float(m.get(key, float("nan"))) for m in rows])
    checks = set(plan.checked_steps())  # the curve's checks or the plateau rule's evaluations
    for unit in plan.units():
        points = (heldout or {}).get(unit.name) or {}
        if checks & set(points):  # a run from before the plan had a curve: a straight line, not drawn
            series = [points.get(step, float("nan")) for step in range(plan.steps + 1)]
            found.setdefault(unit.variant, {}).setdefault(HELDOUT, []).append(series)
    return found


SUCCESS = "env_success_rate"
HELDOUT = "heldout_success"
PANELS = {"reward_mean": "mean per-turn reward", "grad_norm": "gradient norm before clipping",
          SUCCESS: "training success rate (own rollouts)", HELDOUT: "held-out success (%) at each check"}
# a rate's (and a norm's) mean ± std band stops at the metric's range (mapo.report.plots.spread_band)
PANEL_BOUNDS = {"grad_norm": (0.0, np.inf), SUCCESS: (0.0, 1.0), HELDOUT: (0.0, 100.0)}


def stop_marks(plan: AblationPlan, heldout: dict[str, dict[int, float]], stopped: dict[str, tuple[int, str]],
               ) -> dict[str, list[tuple[int, float]]]:
    """{variant: [(step, held-out success %)]} where the plateau rule stopped each of its runs."""
    marks: dict[str, list[tuple[int, float]]] = {}
    for unit in plan.units():
        step = stopped.get(unit.name, (None,))[0]
        if step is not None and step in heldout.get(unit.name, {}):
            marks.setdefault(unit.variant, []).append((step, heldout[unit.name][step]))
    return marks


def plot_curves(series: dict[str, dict[str, list[list[float]]]], path: Path, heldout_spread: str = "band",
                stops: dict[str, list[tuple[int, float]]] | None = None) -> Path | None:
    """One figure, a panel per metric (mean reward, pre-clip gradient norm, training success where
    logged) per step, mean ± std over seeds (mapo.report.plots.spread_band); the held-out panel's
    spread is `heldout_spread` ("range": the seeds' lowest to highest). `stops` (`stop_marks`) marks
    where each run stopped: past a run's stop the mean and spread are those of the seeds still training."""
    if not series:
        return None
    keys = [k for k in PANELS if any(k in metrics for metrics in series.values())]
    if not keys:
        return None
    figure, grid = pyplot().subplots(1, len(keys), figsize=(5.5 * len(keys), 4), constrained_layout=True, squeeze=False)
    panels = grid[0]  # one panel too (only held-out checks so far: a study's first share still training)
    # ADR rewards (distances) are an order of magnitude larger than IDR's: their own axis, dashed
    absolute = {v for v in series if "reward.kind=adr" in VARIANTS.resolve(v).overrides}
    right = panels[0].twinx() if absolute else None
    handles = []
    for axes_left, key in zip(panels, keys):
        for index, (variant, metrics) in enumerate(series.items()):
            runs = [r for r in metrics.get(key, []) if r]
            if not runs:
                continue
            on_right = key == "reward_mean" and variant in absolute
            first = 0 if key == HELDOUT else 1  # the held-out curve starts at the base policy, step 0
            curve = Curve(f"{variant} (n={len(runs)})", runs, range(first, first + max(map(len, runs))),
                          color=f"C{index}", dashed=variant in absolute, spread=heldout_spread if key == HELDOUT else "band",
                          bounds=PANEL_BOUNDS.get(key, (-np.inf, np.inf)))
            line = draw(right if on_right else axes_left, curve)
            if key == "reward_mean":
                handles.append(line)
            if key == HELDOUT and (marks := (stops or {}).get(variant)):
                axes_left.plot(*zip(*marks), linestyle="", marker="x", markersize=7, color=line.get_color())
        axes_left.set_title(PANELS[key] + (" (x: a run's stop)" if key == HELDOUT and stops else ""))
        step_axis(axes_left, "training step")
    if right is not None:
        panels[0].set_ylabel("IDR (solid)")
        right.set_ylabel("ADR (dashed)")
    panels[0].legend(handles=handles, fontsize=8)
    return save_png(figure, path)
