"""The ablation's training curves (curves.png): mean per-turn reward and pre-clip gradient norm per
step for every variant, mean ± std over its seeds, the training success rate where the
environment reports one (the questioning game's `env_success_rate`), and the held-out success at
each check where the plan has a held-out curve (AblationPlan.curve)."""

from __future__ import annotations

import io
import warnings
from pathlib import Path

import numpy as np

from mapo.ablate.plan import AblationPlan
from mapo.ablate.state import run_metrics
from mapo.ablate.variants import VARIANTS


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
    checks = set(plan.curve.steps(plan.steps))
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
# a rate's (and a norm's) mean ± std band stops at the metric's range
PANEL_BOUNDS = {"grad_norm": (0.0, np.inf), SUCCESS: (0.0, 1.0), HELDOUT: (0.0, 100.0)}


def spread_band(stack: np.ndarray, mean: np.ndarray, key: str) -> tuple[np.ndarray, np.ndarray]:
    """The mean ± sample std band over seeds (rows of `stack`), clipped to the metric's range."""
    with warnings.catch_warnings():  # a step only one run reached has no spread: NaN, not drawn
        warnings.simplefilter("ignore", RuntimeWarning)
        std = np.nanstd(stack, axis=0, ddof=1)
    low, high = PANEL_BOUNDS.get(key, (-np.inf, np.inf))
    return np.clip(mean - std, low, high), np.clip(mean + std, low, high)


def plot_curves(series: dict[str, dict[str, list[list[float]]]], path: Path) -> Path | None:
    """One figure, a panel per metric (mean reward, pre-clip gradient norm, training success where
    logged) per step, mean ± std over seeds (`spread_band`)."""
    if not series:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    keys = [k for k in PANELS if any(k in metrics for metrics in series.values())]
    figure, panels = plt.subplots(1, len(keys), figsize=(5.5 * len(keys), 4), constrained_layout=True)
    # ADR rewards (distances) are an order of magnitude larger than IDR's: their own axis, dashed
    absolute = {v for v in series if "reward.kind=adr" in VARIANTS.resolve(v).overrides}
    right = panels[0].twinx() if absolute else None
    handles = []
    for axes_left, key in zip(panels, keys):
        for index, (variant, metrics) in enumerate(series.items()):
            runs = [r for r in metrics.get(key, []) if r]
            if not runs:
                continue
            axes = right if key == "reward_mean" and variant in absolute else axes_left
            width = max(len(r) for r in runs)  # a run still going (or cut) ends early: NaN past its end
            stack = np.asarray([r + [float("nan")] * (width - len(r)) for r in runs])
            steps = np.arange(0 if key == HELDOUT else 1, width + (0 if key == HELDOUT else 1))
            with warnings.catch_warnings():  # a step no run has a value at (between held-out checks): NaN
                warnings.simplefilter("ignore", RuntimeWarning)
                mean = np.nanmean(stack, axis=0)
            checked = np.isfinite(mean)  # the held-out curve's points, joined across the steps between
            steps, stack, mean = steps[checked], stack[:, checked], mean[checked]
            style = "--" if variant in absolute else "-"
            (line,) = axes.plot(steps, mean, style, color=f"C{index}", marker="o", markersize=3,
                                label=f"{variant} (n={len(runs)})")
            if key == "reward_mean":
                handles.append(line)
            if len(runs) > 1:
                axes.fill_between(steps, *spread_band(stack, mean, key), color=line.get_color(), alpha=0.15)
        axes_left.set_title(PANELS[key])
        axes_left.set_xlabel("training step")
        axes_left.xaxis.set_major_locator(MaxNLocator(integer=True))
        axes_left.grid(alpha=0.3)
    if right is not None:
        panels[0].set_ylabel("IDR (solid)")
        right.set_ylabel("ADR (dashed)")
    panels[0].legend(handles=handles, fontsize=8)
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=110)
    plt.close(figure)
    path.write_bytes(palette_png(buffer.getvalue()))
    return path


def palette_png(png: bytes) -> bytes:
    """`png` in 256 colours, without dithering: these line plots on white keep their look at about a
    third of matplotlib's RGBA size (a study commits one curves.png each, docs/study)."""
    from PIL import Image

    image = Image.open(io.BytesIO(png)).convert("RGB")
    packed = io.BytesIO()
    image.quantize(colors=256, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE).save(packed, format="PNG", optimize=True)
    return packed.getvalue()
