"""The ablation's outputs: ablation.{json,md,html} tables and curves.png, from whatever units have finished."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from mapo.ablate.plan import VARIANTS, AblationPlan, Unit
from mapo.ablate.state import eval_dir, read_eval, run_dir
from mapo.ablate.stats import (
    METRICS,
    PAIRED_REFERENCE,
    TRAINING_METRICS,
    aggregate_rows,
    dialogue_metrics,
    eval_metrics,
    paired_dialogue_rows,
    paired_rows,
    training_metrics,
)


def paired_dialogue_markdown(rows: Sequence[dict[str, Any]], reference: str = PAIRED_REFERENCE) -> str:
    def cell(stat: dict[str, Any], digits: int) -> list[str]:
        if stat["mean"] is None:
            return ["–", "–", "–"]
        sem = "" if stat["sem"] is None else f" ± {stat['sem']:.{digits}f}"
        t = "–" if stat["t"] is None else f"{stat['t']:+.1f}"
        return [f"{stat['mean']:+.{digits}f}{sem}", t, f"{stat['worse']:.0%}"]

    lines = [f"| variant | dialogues | return − {reference} (± s.e.) | t | worse | EPM-Q − {reference} (± s.e.) | t | worse |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for row in rows:
        cells = [row["variant"], str(row["return"]["n"]), *cell(row["return"], 2), *cell(row["epmq"], 1)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def format_cell(stats: dict[str, Any]) -> str:
    if stats["mean"] is None:
        return "–"
    digits = 1 if abs(stats["mean"]) >= 10 else 3
    text = f"{stats['mean']:.{digits}f}"
    return text if stats["std"] is None else f"{text} ± {stats['std']:.{digits}f}"


def to_markdown(rows: Sequence[dict[str, Any]], metrics: Sequence[tuple[str, str]] = METRICS) -> str:
    header = ["variant", "seeds", *(title for _, title in metrics)]
    lines = ["| " + " | ".join(header) + " |", "|---|---:|" + "---:|" * len(metrics)]
    for row in rows:
        seeds = "–" if row["variant"] == "base" else str(len(row["seeds"]))
        cells = [row["variant"], seeds, *(format_cell(row["metrics"][k]) for k, _ in metrics)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def run_metrics(out: Path, plan: AblationPlan) -> dict[Unit, list[dict[str, Any]]]:
    """Each started unit's metrics.jsonl rows, in step order."""
    from mapo.run_folder import RunFolder

    return {
        unit: sorted(RunFolder(run_dir(out, unit)).read_metrics(), key=lambda m: m["step"])
        for unit in plan.units()
        if run_dir(out, unit).is_dir()
    }


def curves(out: Path, plan: AblationPlan) -> dict[str, dict[str, list[list[float]]]]:
    """{variant: {metric: [per-seed series]}} of reward_mean and grad_norm (pre-clip) per step."""
    found: dict[str, dict[str, list[list[float]]]] = {}
    for unit, rows in run_metrics(out, plan).items():
        entry = found.setdefault(unit.variant, {"reward_mean": [], "grad_norm": []})
        for key in entry:
            entry[key].append([float(m.get(key, float("nan"))) for m in rows])
    return found


def plot_curves(series: dict[str, dict[str, list[list[float]]]], path: Path) -> Path | None:
    """One figure, two panels: mean reward and pre-clip gradient norm per step, mean ± std over seeds."""
    if not series:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    figure, panels = plt.subplots(1, 2, figsize=(11, 4), constrained_layout=True)
    titles = {"reward_mean": "mean per-turn reward", "grad_norm": "gradient norm before clipping"}
    # ADR rewards (distances) are an order of magnitude larger than IDR's: their own axis, dashed
    absolute = {v for v in series if "reward.kind=adr" in VARIANTS.resolve(v).overrides}
    right = panels[0].twinx() if absolute else None
    handles = []
    for axes_left, key in zip(panels, ("reward_mean", "grad_norm")):
        for index, (variant, metrics) in enumerate(series.items()):
            runs = [r for r in metrics[key] if r]
            if not runs:
                continue
            axes = right if key == "reward_mean" and variant in absolute else axes_left
            width = min(len(r) for r in runs)
            stack = np.asarray([r[:width] for r in runs])
            steps = np.arange(1, width + 1)
            mean = np.nanmean(stack, axis=0)
            style = "--" if variant in absolute else "-"
            (line,) = axes.plot(steps, mean, style, color=f"C{index}", marker="o", markersize=3,
                                label=f"{variant} (n={len(runs)})")
            if key == "reward_mean":
                handles.append(line)
            if len(runs) > 1:
                std = np.nanstd(stack, axis=0, ddof=1)
                axes.fill_between(steps, mean - std, mean + std, color=line.get_color(), alpha=0.15)
        axes_left.set_title(titles[key])
        axes_left.set_xlabel("training step")
        axes_left.xaxis.set_major_locator(MaxNLocator(integer=True))
        axes_left.grid(alpha=0.3)
    if right is not None:
        panels[0].set_ylabel("IDR (solid)")
        right.set_ylabel("ADR (dashed)")
    panels[0].legend(handles=handles, fontsize=8)
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def _html_table(rows: Sequence[dict[str, Any]], metrics: Sequence[tuple[str, str]]) -> str:
    from mapo.evaluate.html import esc

    head = "".join(f"<th>{esc(h)}</th>" for h in ["variant", "seeds", *(t for _, t in metrics)])
    body = "".join(
        "<tr>" + f"<td>{esc(r['variant'])}</td><td class='num'>{len(r['seeds']) or '–'}</td>"
        + "".join(f"<td class='num'>{esc(format_cell(r['metrics'][k]))}</td>" for k, _ in metrics) + "</tr>"
        for r in rows
    )
    return f"<table><tr>{head}</tr>{body}</table>"


def write_outputs(out: Path, plan: AblationPlan) -> Path:
    """ablation.{json,md,html} and curves.png from whatever units have finished."""
    import base64

    from mapo.evaluate.html import esc, page

    per_unit: dict[str, dict[str, float | None]] = {}
    per_dialogue: dict[str, dict[str, dict[str, float | None]]] = {}
    for name in ["base", *(u.name for u in plan.units())]:
        result = read_eval(eval_dir(out, name))
        if result is not None:
            per_unit[name] = eval_metrics(result)
            per_dialogue[name] = dialogue_metrics(result)
    training = {unit.name: training_metrics(rows) for unit, rows in run_metrics(out, plan).items() if rows}
    paired = PAIRED_REFERENCE in plan.variants
    by_dialogue = paired_dialogue_rows(per_dialogue, plan) if paired else []
    tables = [  # (title, rows, metrics)
        ("Held-out evaluation: mean ± sample std over seeds", aggregate_rows(per_unit, plan), METRICS),
        *([(f"Paired with {PAIRED_REFERENCE}: variant minus {PAIRED_REFERENCE} at the same seed, mean ± std",
            paired_rows(per_unit, plan), METRICS)] if paired else []),
        ("Training: per-step reward and pre-clip gradient norm from metrics.jsonl, mean ± std over seeds",
         aggregate_rows(training, plan, TRAINING_METRICS), TRAINING_METRICS),
    ]
    missing = [u.name for u in plan.units() if u.name not in per_unit]
    (out / "ablation.json").write_text(
        json.dumps({"plan": plan.to_dict(), "rows": tables[0][1], "units": per_unit, "training": training,
                    "tables": {title: rows for title, rows, _ in tables}, "paired_by_dialogue": by_dialogue,
                    "missing": missing}, indent=2) + "\n",
        encoding="utf-8",
    )
    markdown = "\n".join(f"### {title}\n\n{to_markdown(rows, metrics)}" for title, rows, metrics in tables)
    dialogue_title = f"Paired by held-out dialogue: variant minus {PAIRED_REFERENCE} on the same scenario at the same seed"
    if by_dialogue:
        markdown += f"\n### {dialogue_title}\n\n{paired_dialogue_markdown(by_dialogue)}"
    (out / "ablation.md").write_text(markdown, encoding="utf-8")
    png = plot_curves(curves(out, plan), out / "curves.png")
    image = ""
    if png is not None:
        encoded = base64.b64encode(png.read_bytes()).decode("ascii")
        image = f"<h2>Training curves</h2><img alt='reward and gradient norm per step' src='data:image/png;base64,{encoded}'>"
    note = f"<p class='meta'>Not finished: {esc(', '.join(missing))}</p>" if missing else ""
    budget = (f"{plan.steps} steps per run; seeds {plan.seeds}; training settings: {', '.join(plan.train)}; "
              f"held-out eval: {json.dumps(dataclasses.asdict(plan.eval))}")
    sections = "".join(f"<h2>{esc(title)}</h2>{_html_table(rows, metrics)}" for title, rows, metrics in tables)
    if by_dialogue:
        sections += f"<h2>{esc(dialogue_title)}</h2><pre>{esc(paired_dialogue_markdown(by_dialogue))}</pre>"
    html = page("mapo ablate", f"<h1>Ablation</h1><p class='meta'>{esc(budget)}</p>{note}{sections}{image}")
    (out / "ablation.html").write_text(html, encoding="utf-8")
    return out / "ablation.md"
