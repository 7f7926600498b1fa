"""One learning-curve figure (PNG) from the metrics of one or more training runs: `mapo report
RUN [RUN ...] --png FILE`.

A panel per metric, one thin line per run (a seed) and their mean in bold; an evaluation's
reference players (`mapo eval` of a game writes them into eval.json's `summary.references`)
are drawn as horizontal lines on the panels they have a figure for, so a curve is read
against the limit (the optimal player), any useful question (the informative one) and chance play
(the random one).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path

from mapo.report.plots import Curve, draw, pyplot, save_png, step_axis
from mapo.report.run import numeric_series
from mapo.run_folder import read_metrics
from mapo.validation import compressed_or_plain, text_of

# metric -> (panel title, the reference figure drawn on it, or None)
CURVE_METRICS: dict[str, tuple[str, str | None]] = {
    "reward_mean": ("training reward per turn (IDR)", None),
    "env_success_rate": ("success rate (training dialogues)", "success_rate"),
    "env_bits_per_question": ("bits per question", "bits_per_question"),
}
FALLBACK_METRICS: dict[str, tuple[str, str | None]] = {  # a run without environment figures
    "reward_mean": ("training reward per turn", None),
    "success_rate": ("success rate (training dialogues)", None),
}


def _smoothed(values: Sequence[float], window: int) -> list[float]:
    """Trailing mean over `window` steps, ignoring missing (NaN) values."""
    out = []
    for i in range(len(values)):
        part = [v for v in values[max(0, i - window + 1): i + 1] if math.isfinite(v)]
        out.append(sum(part) / len(part) if part else math.nan)
    return out


def reference_figures(eval_file: str | Path) -> dict[str, dict[str, float]]:
    """{player: {figure: value}} from an eval.json's `summary.references` (empty when it has none);
    an archived study's eval.json.gz is read for its eval.json."""
    import json

    path = Path(eval_file)
    data = json.loads(text_of(compressed_or_plain(path.parent, path.name)))
    references = data.get("summary", {}).get("references", {}) if isinstance(data, dict) else {}
    out = {}
    for name, reference in references.items():
        figures = {k: v for k, v in (reference.get("figures") or {}).items() if isinstance(v, (int, float))}
        figures.setdefault("success_rate", reference.get("pass_rate"))
        out[name.removeprefix("player:")] = {k: float(v) for k, v in figures.items() if v is not None}
    return out


def write_learning_curve(
    runs: Sequence[str | Path],
    out: str | Path,
    references: Mapping[str, Mapping[str, float]] | None = None,
    window: int = 3,
    title: str = "",
) -> Path:
    """Draw the runs' curves (smoothed over `window` steps) into the PNG file `out`; returns it."""
    if not runs:
        raise ValueError("no training runs given")
    loaded = []
    for run in runs:
        rows = read_metrics(run, required=True)
        if not rows:
            raise ValueError(f"{run}: metrics.jsonl has no rows yet")
        loaded.append(numeric_series(rows))
    metrics = CURVE_METRICS if any("env_success_rate" in series for _, series in loaded) else FALLBACK_METRICS
    steps = max((steps for steps, _ in loaded), key=len)
    figure, axes_row = pyplot().subplots(1, len(metrics), figsize=(4.2 * len(metrics), 3.4), squeeze=False,
                                         layout="constrained")
    for axes, (key, (label, reference_key)) in zip(axes_row[0], metrics.items()):
        smoothed = [_smoothed(series.get(key, [math.nan] * len(run_steps)), window) for run_steps, series in loaded]
        draw(axes, Curve(f"mean of {len(runs)} run{'s' * (len(runs) > 1)}", smoothed, steps, color="C0", spread="lines",
                         width=2.2))
        for k, (player, figures) in enumerate(sorted((references or {}).items())):
            if reference_key and reference_key in figures:
                axes.axhline(figures[reference_key], color=f"C{k + 1}", linestyle="--", linewidth=1.2,
                             label=f"{player} player (held-out)")
        axes.set_title(label, fontsize=10)
        step_axis(axes)
        axes.legend(fontsize=7, loc="best")
    if title:
        figure.suptitle(title, fontsize=11)
    return save_png(figure, out)
