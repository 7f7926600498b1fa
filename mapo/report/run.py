"""`mapo report RUN`: one self-contained HTML page for a training run.

Reads `<run>/metrics.jsonl` (one object per step, as `mapo.core.trainer` logs it) and
plots whatever of the known keys exist: reward and return, success rate and how
dialogues ended, the pre-clip gradient norm, advantage components (turn, batch,
mixed, ...), the reward-hacking monitor, response length, KL, entropy, clip fraction,
loss, dialogue length, throughput. Missing keys are listed, never an error; a cut-off
last line (a killed run) is skipped. Plots are PNGs (matplotlib, Agg) embedded as
base64; the page links the run's transcripts (raw JSONL and an HTML viewer of the first
and last logged steps), config, checkpoints and any eval results inside the run folder.
"""

from __future__ import annotations

import base64
import fnmatch
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mapo.report.html import esc, page, render_transcripts
from mapo.report.plots import Curve, draw, png_bytes, pyplot, step_axis
from mapo.run_folder import read_metrics
from mapo.validation import compressed_or_plain, intact_records

REPORT_FILE = "report.html"
TRANSCRIPT_VIEW_FILE = "transcripts.html"


@dataclass
class Panel:
    title: str
    keys: Sequence[str]  # names or fnmatch patterns, in legend order
    secondary: Sequence[str] = ()  # drawn on a right-hand axis
    ylabel: str = ""
    secondary_label: str = ""
    subplots: Sequence[tuple[str, Sequence[str]]] = field(default_factory=tuple)  # (title, keys) per subplot
    exclude: Sequence[str] = ()  # keys the patterns match but the panel leaves out


ADVANTAGE_PARTS = ("turn", "batch", "mixed", "outcome", "baseline")
PANELS = (
    Panel("Reward and return per step", ("reward_mean", "return_mean"), ylabel="mean"),
    Panel("Success rate and endings", ("success_rate", "done_*"), ylabel="fraction of dialogues",
          exclude=("done_success",)),  # the same numbers as success_rate
    Panel("Gradient norm (pre-clip)", ("grad_norm", "grad_norm_max"), ylabel="L2 norm"),
    Panel("Loss", ("loss", "pg_loss", "eval_loss"), ylabel="loss"),  # eval_loss: the held-out loss of `mapo sft`
    Panel(
        "Advantage components",
        ("adv_*",),
        subplots=tuple(
            (title, tuple(f"adv_{part}{stat}" for part in ("", *(p + "_" for p in ADVANTAGE_PARTS))))
            for title, stat in (("mean", "mean"), ("std", "std"), ("mean |A|", "abs_mean"))
        ),
    ),
    # The judge's own degeneracy detectors (mapo.degeneracy): rising echo or fragments under a
    # rising reward means the policy is learning the judge, not the user.
    Panel("Reward-hacking monitor", ("hack_echo", "hack_repetition", "hack_role_swap", "hack_fragment", "hack_reask"),
          ("hack_distinct2",), "rate (lower is better)", "distinct-2 (higher is better)"),
    # an environment's own figures (`dialogue_summary`, logged as env_*): the questioning game's
    Panel("Game figures", ("env_success_rate", "env_invalid_rate", "env_repeat_rate"), ("env_bits_per_question",),
          "rate", "bits per question"),
    Panel("Response length", ("response_length_mean",), ("truncated_fraction",), "tokens", "truncated fraction"),
    Panel("KL divergence", ("kl", "kl_old"), ylabel="per token"),
    Panel("Entropy", ("entropy",), ylabel="nats per token"),
    Panel("Clip fraction and ratio", ("clip_fraction",), ("ratio_mean",), "clipped fraction", "mean ratio"),
    Panel("Dialogue length and final distance", ("turns_mean",), ("final_distance_mean",), "turns", "final D_T"),
    Panel("Reliability: retries, repairs and fallbacks", ("backend_retries_*", "*_repairs", "*_fallbacks"),
          ("fallback_fraction",), "count per step", "fallback fraction"),
    Panel("Throughput", ("tokens_per_s_rollout", "tokens_per_s_train"), ("step_time",), "tokens / s", "step time (s)"),
    # resident memory against what the heap holds for the program: a gap that widens is fragmentation
    Panel("Memory", ("memory_rss_gb", "memory_heap_used_gb", "memory_heap_free_gb"), ylabel="GB"),
)
_NOT_PLOTTED = ("step", "wall_time")


def numeric_series(rows: Sequence[dict[str, Any]]) -> tuple[list[float], dict[str, list[float]]]:
    """(x = step or row number, {key: values with NaN where a row lacks it}) for every numeric key."""
    steps = [float(r["step"]) if _is_number(r.get("step")) else float(i + 1) for i, r in enumerate(rows)]
    keys: list[str] = []
    for row in rows:
        keys.extend(k for k, v in row.items() if _is_number(v) and k not in keys)
    series = {k: [float(r[k]) if _is_number(r.get(k)) else math.nan for r in rows] for k in keys}
    return steps, series


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _matching(patterns: Sequence[str], keys: Sequence[str]) -> list[str]:
    out: list[str] = []
    for pattern in patterns:
        out.extend(k for k in keys if fnmatch.fnmatchcase(k, pattern) and k not in out and k not in _NOT_PLOTTED)
    return out


def _curves(axes: Any, steps: list[float], series: dict[str, list[float]], keys: Sequence[str], first: int = 0,
            dashed: bool = False) -> list[Any]:
    """One line per key, coloured on from C`first` (a right-hand axis continues its left one's colours)."""
    return [draw(axes, Curve(key, [series[key]], steps, color=f"C{(first + i) % 10}", dashed=dashed))
            for i, key in enumerate(keys)]


def panel_png(panel: Panel, steps: list[float], series: dict[str, list[float]]) -> str | None:
    """The panel's plot as base64 PNG, or None when none of its keys was logged."""
    plt = pyplot()
    keys = list(series)
    if panel.subplots:
        chosen = [(title, _matching(patterns, keys)) for title, patterns in panel.subplots]
        if not any(found for _, found in chosen):
            return None
        figure, axes_row = plt.subplots(1, len(chosen), figsize=(11, 3.4), squeeze=False, layout="constrained")
        for axes, (title, found) in zip(axes_row[0], chosen):
            _curves(axes, steps, series, found)
            axes.set_title(title, fontsize=10)
            step_axis(axes)
            if found:
                axes.legend(fontsize=7)
        figure.suptitle(panel.title, fontsize=11)
        return base64.b64encode(png_bytes(figure)).decode("ascii")
    keys = [k for k in keys if k not in panel.exclude]
    primary, secondary = _matching(panel.keys, keys), _matching(panel.secondary, keys)
    if not primary and not secondary:
        return None
    figure, axes = plt.subplots(figsize=(5.6, 3.3), layout="constrained")
    lines = _curves(axes, steps, series, primary)
    axes.set_ylabel(panel.ylabel)
    step_axis(axes)
    if secondary:
        right = axes.twinx()
        lines += _curves(right, steps, series, secondary, first=len(primary), dashed=True)
        right.set_ylabel(panel.secondary_label)
    axes.legend(lines, [line.get_label() for line in lines], fontsize=7, loc="best")
    axes.set_title(panel.title, fontsize=11)
    return base64.b64encode(png_bytes(figure)).decode("ascii")


def _last_finite(values: list[float]) -> float:
    finite = [v for v in values if math.isfinite(v)]
    return finite[-1] if finite else math.nan


def _stats_table(series: dict[str, list[float]]) -> str:
    rows = []
    for key, values in series.items():
        if key in _NOT_PLOTTED:
            continue
        finite = [v for v in values if math.isfinite(v)]
        if not finite:
            continue
        rows.append(
            f"<tr><td>{esc(key)}</td><td class='num'>{finite[0]:.4g}</td><td class='num'>{_last_finite(values):.4g}</td>"
            f"<td class='num'>{min(finite):.4g}</td><td class='num'>{max(finite):.4g}</td>"
            f"<td class='num'>{sum(finite) / len(finite):.4g}</td></tr>"
        )
    return (
        "<table><tr><th>metric</th><th class='num'>first</th><th class='num'>last</th><th class='num'>min</th>"
        f"<th class='num'>max</th><th class='num'>mean</th></tr>{''.join(rows)}</table>"
    )


def _transcript_view(run_dir: Path) -> Path | None:
    """An HTML viewer of the first and last logged steps' transcripts (None without transcripts)."""
    path = compressed_or_plain(run_dir, "transcripts.jsonl")
    if not path.is_file():
        return None
    records = intact_records(path, "transcripts")
    if not records:
        return None
    steps = sorted({r.get("step", 0) for r in records})
    chosen = [r for r in records if r.get("step", 0) in (steps[0], steps[-1])]
    title = f"{run_dir.name}: transcripts of step {steps[0]}" + (f" and step {steps[-1]}" if len(steps) > 1 else "")
    out = run_dir / TRANSCRIPT_VIEW_FILE
    out.write_text(render_transcripts(chosen, title), encoding="utf-8")
    return out


def _links(run_dir: Path, transcript_view: Path | None) -> str:
    links = []
    if transcript_view is not None:
        links.append((transcript_view.name, "transcripts viewer (first and last logged step)"))
    for name, what in (
        ("transcripts.jsonl", "all transcripts (JSONL)"),
        ("transcripts.jsonl.gz", "all transcripts (JSONL, compressed)"),
        ("metrics.jsonl", "metrics (JSONL)"),
        ("metrics.jsonl.gz", "metrics (JSONL, compressed)"),
        ("config.yaml", "resolved config"),
        ("final", "trained policy"),
    ):
        if (run_dir / name).exists():
            links.append((name, what))
    checkpoints = sorted((run_dir / "checkpoints").glob("step-*")) if (run_dir / "checkpoints").is_dir() else []
    links.extend((f"checkpoints/{c.name}", "checkpoint") for c in checkpoints)
    for found in sorted(run_dir.glob("*/eval.json")) + sorted(run_dir.glob("*/*/eval.json")):
        rel = found.parent.relative_to(run_dir).as_posix()
        viewer = found.parent / "transcripts.html"
        links.append((f"{rel}/{viewer.name}" if viewer.is_file() else f"{rel}/eval.json", f"eval: {rel}"))
    items = "".join(f"<li><a href='{esc(href)}'>{esc(href)}</a> — {esc(what)}</li>" for href, what in links)
    return f"<ul>{items}</ul>" if items else "<p class='meta'>no transcripts or checkpoints in this folder</p>"


def _config_block(run_dir: Path) -> str:
    path = run_dir / "config.yaml"
    if not path.is_file():
        return ""
    text = path.read_text(encoding="utf-8")
    try:
        import yaml

        config = yaml.safe_load(text) or {}
    except Exception:  # a report must not fail on a hand-edited config
        config = {}
    picks = []
    for dotted in ("policy.model", "advantage.estimator", "advantage.alpha", "reward.kind", "env.name",
                   "env.scenarios", "rollout.scenarios_per_step", "rollout.samples_per_scenario",
                   "rollout.max_turns", "optim.lr", "seed", "steps"):
        value: Any = config
        for part in dotted.split("."):
            value = value.get(part) if isinstance(value, dict) else None
        if value is not None:
            picks.append(f"<tr><td>{esc(dotted)}</td><td>{esc(value)}</td></tr>")
    return f"<table class='kv'>{''.join(picks)}</table><details><summary>config.yaml</summary><pre>{esc(text)}</pre></details>"


def write_report(run_dir: str | Path) -> Path:
    """Write `<run_dir>/report.html` (and `transcripts.html` when there are transcripts); returns the report path."""
    run_dir = Path(run_dir)
    rows = read_metrics(run_dir, required=True)
    steps, series = numeric_series(rows)
    body = [f"<h1>Training run {esc(run_dir.name)}</h1>",
            f"<p class='meta'>{len(rows)} logged steps · {esc(run_dir.resolve())}</p>",
            _config_block(run_dir), "<h2>Outputs</h2>", _links(run_dir, _transcript_view(run_dir)), "<h2>Curves</h2>"]
    if not rows:
        body.append("<p>metrics.jsonl has no rows yet.</p>")
    missing = []
    figures = []
    for panel in PANELS:
        png = panel_png(panel, steps, series) if rows else None
        if png is None:
            missing.append(panel.title)
            continue
        wide = " wide" if panel.subplots else ""
        figures.append(f"<figure class='plot{wide}'><img alt='{esc(panel.title)}' src='data:image/png;base64,{png}'></figure>")
    body.append(f"<div class='grid'>{''.join(figures)}</div>")
    if missing:
        body.append(f"<p class='meta'>not logged in this run: {esc(', '.join(missing))}</p>")
    body.append("<h2>All metrics</h2>" + _stats_table(series))
    extra_style = (
        "<style>.grid{display:flex;flex-wrap:wrap;gap:8px}.plot{margin:0;flex:1 1 540px;max-width:590px}"
        ".plot.wide{flex-basis:100%;max-width:100%}.plot img{width:100%}</style>"
    )
    out = run_dir / REPORT_FILE
    out.write_text(page(f"mapo report: {run_dir.name}", extra_style + "".join(body)), encoding="utf-8")
    return out
