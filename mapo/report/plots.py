"""The one curve plotter behind every figure of training steps: the run report's panels
(mapo.report.run), the learning curve of several runs (mapo.report.curves) and the ablation's
curves.png (mapo.lab.ablate.curves).

A `Curve` is one line: the mean over its runs (seeds) of a per-step series, joined across the
steps where no run has a value (a held-out check every few steps, a run that ended early),
with the runs' spread drawn as thin lines, as a mean ± std band or as their range. Matplotlib (Agg) is
imported on first use, so reading metrics never needs it.
"""

from __future__ import annotations

import io
import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

SPREADS = ("", "lines", "band", "range")
MARKERS_BELOW = 30  # points: fewer are drawn as dots on the line, so a short run's steps show


@dataclass
class Curve:
    """One line of a panel: the mean of `runs` at each step, and optionally their spread."""

    label: str
    runs: Sequence[Sequence[float]]  # one per-step series per run (seed); NaN where a run has no value
    steps: Sequence[float] | None = None  # x of series index 0, 1, ...; default 1, 2, ...
    color: str | None = None  # a matplotlib colour ("C3"); None: the axes' next
    dashed: bool = False
    spread: str = ""  # "": the mean alone; "lines": each run thin behind it; "band": mean ± sample std; "range": min to max
    bounds: tuple[float, float] = (-math.inf, math.inf)  # the band stops at the metric's range (a rate, a norm)
    width: float = 1.6

    def __post_init__(self) -> None:
        if self.spread not in SPREADS:
            raise ValueError(f"curve {self.label!r}: spread must be one of {SPREADS}, got {self.spread!r}")


def pyplot() -> Any:
    """matplotlib.pyplot on the file-only Agg backend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def spread_band(stack: np.ndarray, mean: np.ndarray, bounds: tuple[float, float]) -> tuple[np.ndarray, np.ndarray]:
    """The mean ± sample std band over runs (rows of `stack`), clipped to `bounds`."""
    with warnings.catch_warnings():  # a step only one run reached has no spread: NaN, not drawn
        warnings.simplefilter("ignore", RuntimeWarning)
        std = np.nanstd(stack, axis=0, ddof=1)
    return np.clip(mean - std, *bounds), np.clip(mean + std, *bounds)


def draw(axes: Any, curve: Curve) -> Any:
    """Draw `curve` on `axes`; returns the mean's line (for a legend)."""
    width = max((len(run) for run in curve.runs), default=0)
    stack = np.full((len(curve.runs), width), np.nan)
    for row, run in enumerate(curve.runs):
        stack[row, : len(run)] = np.asarray(run, dtype=float)
    steps = np.asarray(curve.steps if curve.steps is not None else range(1, width + 1), dtype=float)[:width]
    with warnings.catch_warnings():  # a step no run has a value at: NaN, left out below
        warnings.simplefilter("ignore", RuntimeWarning)
        mean = np.nanmean(stack, axis=0) if width else np.zeros(0)
    shown = np.isfinite(mean)
    style = {"color": curve.color, "linestyle": "--" if curve.dashed else "-"}
    several = len(curve.runs) > 1
    if curve.spread == "lines" and several:
        for row in stack:
            finite = np.isfinite(row)
            axes.plot(steps[finite], row[finite], alpha=0.35, linewidth=1, **style)
    marker = "o" if shown.sum() < MARKERS_BELOW else None
    (line,) = axes.plot(steps[shown], mean[shown], marker=marker, markersize=3, linewidth=curve.width,
                        label=curve.label, **style)
    if curve.spread in ("band", "range") and several:
        if curve.spread == "band":
            low, high = spread_band(stack[:, shown], mean[shown], curve.bounds)
        else:
            low, high = np.nanmin(stack[:, shown], axis=0), np.nanmax(stack[:, shown], axis=0)
        axes.fill_between(steps[shown], low, high, color=line.get_color(), alpha=0.15)
    axes.ticklabel_format(axis="y", useOffset=False)  # "+1.0789e1" offsets hide the actual values
    return line


def step_axis(axes: Any, label: str = "step") -> None:
    """Integer steps on the x axis, and a light grid."""
    from matplotlib.ticker import MaxNLocator

    axes.set_xlabel(label)
    axes.xaxis.set_major_locator(MaxNLocator(integer=True))
    axes.grid(alpha=0.3)


def png_bytes(figure: Any, dpi: int = 100) -> bytes:
    """`figure` as PNG bytes (to embed in a page); the figure is closed."""
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=dpi)
    pyplot().close(figure)
    return buffer.getvalue()


def save_png(figure: Any, out: str | Path, dpi: int = 110) -> Path:
    """Write `figure` to the PNG file `out` (its folder created); the figure is closed."""
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(palette_png(png_bytes(figure, dpi)))
    return path


def palette_png(png: bytes) -> bytes:
    """`png` in 256 colours, without dithering: line plots on white keep their look at about a
    third of matplotlib's RGBA size (the studies commit their figures, docs/study)."""
    from PIL import Image

    image = Image.open(io.BytesIO(png)).convert("RGB")
    packed = io.BytesIO()
    image.quantize(colors=256, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE).save(packed, format="PNG", optimize=True)
    return packed.getvalue()
