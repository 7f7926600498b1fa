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

from mapo.evaluate.report import numeric_series, read_metrics

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
    """{player: {figure: value}} from an eval.json's `summary.references` (empty when it has none)."""
    import json

    data = json.loads(Path(eval_file).read_text(encoding="utf-8"))
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
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not runs:
        raise ValueError("no training runs given")
    loaded = []
    for run in runs:
        rows = read_metrics(Path(run) / "metrics.jsonl")
        if not rows:
            raise ValueError(f"{run}: metrics.jsonl has no rows yet")
        loaded.append(numeric_series(rows))
    metrics = CURVE_METRICS if any("env_success_rate" in series for _, series in loaded) else FALLBACK_METRICS
    figure, axes_row = plt.subplots(1, len(metrics), figsize=(4.2 * len(metrics), 3.4), squeeze=False, layout="constrained")
    for axes, (key, (label, reference_key)) in zip(axes_row[0], metrics.items()):
        curves = [(steps, _smoothed(series.get(key, [math.nan] * len(steps)), window)) for steps, series in loaded]
        for steps, values in curves:
            axes.plot(steps, values, color="C0", alpha=0.35, linewidth=1)
        longest = max(len(steps) for steps, _ in curves)
        mean = []
        for i in range(longest):
            column = [values[i] for _, values in curves if i < len(values) and math.isfinite(values[i])]
            mean.append(sum(column) / len(column) if column else math.nan)
        steps = next(steps for steps, _ in curves if len(steps) == longest)
        axes.plot(steps, mean, color="C0", linewidth=2.2, label=f"mean of {len(curves)} run{'s' * (len(curves) > 1)}")
        for k, (player, figures) in enumerate(sorted((references or {}).items())):
            if reference_key and reference_key in figures:
                axes.axhline(figures[reference_key], color=f"C{k + 1}", linestyle="--", linewidth=1.2,
                             label=f"{player} player (held-out)")
        axes.set_title(label, fontsize=10)
        axes.set_xlabel("step")
        axes.grid(alpha=0.3)
        axes.legend(fontsize=7, loc="best")
    if title:
        figure.suptitle(title, fontsize=11)
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path

