"""`mapo compare A B [C ...]`: results side by side, each against the first (the baseline).

Takes `mapo eval` results (eval.json or its folder) or benchmark results
(results.json of `mapo bench emobench|eqbench`, or its folder); all inputs must be
of one kind. Writes a markdown and an HTML table: one row per metric, one column
per run, and the difference of every later run from the first.

An eval result scored mostly on fallbacks (`mapo.evaluate.validity`) keeps its column, headed
INVALID: its judged metrics read "invalid" and get no difference, so nothing ranks it; its
fallback shares and reward-hacking monitor (which no judge makes) are shown, and the reason
follows the table.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mapo.degeneracy import HACKING_HIGHER_IS_BETTER, HACKING_LABELS
from mapo.evaluate.empa import EPMQ_KEYS, monitor_figures
from mapo.evaluate.validity import verdict_of
from mapo.report.html import esc, page
from mapo.validation import compressed_or_plain, read_records, read_text


@dataclass
class Metric:
    name: str
    value: float | None
    higher_is_better: bool = True
    judged: bool = True  # made from the judge's levels: meaningless when the result is invalid


@dataclass
class Result:
    label: str
    kind: str  # "eval" | "emobench" | "eqbench"
    path: Path
    metrics: list[Metric]
    invalid: str | None = None  # why the result's judged metrics are not shown (None: valid)

    @property
    def heading(self) -> str:
        return f"{self.label} (INVALID)" if self.invalid else self.label


def result_file(path: str | Path) -> Path:
    """eval.json / results.json itself, or the one inside the folder given; each may be gzipped
    (`X.gz`, as an archived study under docs/study keeps eval.json)."""
    path = Path(path)
    if path.is_dir():
        for name in ("eval.json", "results.json"):
            if (found := compressed_or_plain(path, name)).is_file():
                return found
        raise FileNotFoundError(f"{path}: no eval.json or results.json in this folder")
    path = compressed_or_plain(path.parent, path.name)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file or folder")
    return path


def read_result(path: str | Path) -> tuple[Path, Any]:
    """(the result file `path` names, its parsed JSON); a file that is not JSON is a ValueError naming it."""
    file = result_file(path)
    try:
        return file, json.loads(read_text(file, "result", ValueError))
    except json.JSONDecodeError as err:
        raise ValueError(f"{file}: not valid JSON ({err.msg})") from None


def _eval_metrics(data: dict[str, Any]) -> list[Metric]:
    s = data["summary"]
    metrics = [
        Metric("pass rate (%)", 100.0 * s["pass_rate"]),
        Metric("pass count", s["pass_count"]),
        Metric("dialogues", s["dialogues"], judged=False),
    ]
    epmq = s.get("epmq") or {}
    names = {"epmq": "EPM-Q", "outcome": "EPM-Q outcome", "efficiency": "EPM-Q efficiency", "stability": "EPM-Q stability"}
    for key in ("epmq", "outcome", "efficiency", "stability", *EPMQ_KEYS[:9]):
        metrics.append(Metric(names.get(key, key), epmq.get(key)))
    metrics.extend(_hacking_metrics(s.get("hacking") or {}))
    for axis, block in s["success_by_axis"].items():
        metrics.append(Metric(f"success rate, dominant axis {axis} (%)", 100.0 * block["rate"]))
    alignment = s["alignment"]
    metrics.append(Metric("alignment to v*_0", alignment["target"]))
    metrics.append(Metric("alignment to deficit", alignment["deficit"]))
    for axis, value in alignment["target_by_axis"].items():
        metrics.append(Metric(f"alignment to v*_0, axis {axis}", value))
    for axis, value in alignment["deficit_by_axis"].items():
        metrics.append(Metric(f"alignment to deficit, axis {axis}", value))
    metrics.append(Metric("turns (mean)", s["turns_mean"], higher_is_better=False))
    metrics.append(Metric("final distance D_T (mean)", s["final_distance_mean"], higher_is_better=False))
    for outcome, count in s["outcomes"].items():
        metrics.append(Metric(f"outcome: {outcome}", count, higher_is_better=outcome == "success"))
    metrics.append(Metric("fallbacks", s["fallback_total"], higher_is_better=False, judged=False))
    for role, share in verdict_of(s)["shares"].items():
        metrics.append(Metric(f"fallback share of turns, {role} (%)", 100.0 * share, higher_is_better=False, judged=False))
    return metrics


def _hacking_metrics(hacking: dict[str, float]) -> list[Metric]:
    """The reward-hacking monitor's rows, beside EPM-Q so a score won by echoing shows;
    every row even when absent (an eval.json older than the monitor shows "–")."""
    rows = []
    for key, label in HACKING_LABELS.items():
        better = key in HACKING_HIGHER_IS_BETTER
        rows.append(Metric(f"reward hacking: {label} ({'higher' if better else 'lower'} is better)",
                           hacking.get(key), higher_is_better=better, judged=False))
    return rows


def _emobench_metrics(data: dict[str, Any]) -> list[Metric]:
    s = data["summary"]
    metrics = []
    for task in ("EA", "EU"):
        for language, block in s.get(task, {}).items():
            for category, accuracy in block["accuracy"].items():
                metrics.append(Metric(f"{task} {language} {category} (%)", accuracy))
            metrics.append(Metric(f"{task} {language} parse failures", block["parse_failures"], higher_is_better=False))
    return metrics


def _eqbench_metrics(data: dict[str, Any]) -> list[Metric]:
    s = data["summary"]
    return [
        Metric("EQ-Bench score", s["score"]),
        Metric("parse rate (%)", s["parse_rate"]),
        Metric("first-pass score", s["first_pass_score"]),
        Metric("items", s["n"]),
    ]


def load_result(path: str | Path, label: str | None = None) -> Result:
    file, data = read_result(path)
    kind = data.get("benchmark", "eval") if isinstance(data, dict) else None
    readers = {"eval": _eval_metrics, "emobench": _emobench_metrics, "eqbench": _eqbench_metrics}
    if kind not in readers or "summary" not in data:
        raise ValueError(f"{file}: not a mapo eval or benchmark result (no summary / unknown benchmark)")
    transcripts = compressed_or_plain(file.parent, "transcripts.jsonl")
    try:
        hacking = data["summary"].get("hacking") or {}
        if kind == "eval" and transcripts.is_file() and any(key not in hacking for key in HACKING_LABELS):
            # an eval.json older than a monitor figure: computed from the replies beside it
            data["summary"]["hacking"] = monitor_figures(hacking, read_records(transcripts, "transcripts"))
        metrics = readers[kind](data)
    except (KeyError, TypeError) as err:
        raise ValueError(f"{file}: {kind} result is missing {err}") from None
    verdict = verdict_of(data["summary"]) if kind == "eval" else {"valid": True}
    return Result(label or file.parent.name, kind, file, metrics, None if verdict["valid"] else verdict["reason"])


def delta(value: float | str | None, base: float | str | None) -> float | None:
    if not isinstance(value, (int, float)) or not isinstance(base, (int, float)):  # missing or invalid
        return None
    if not (math.isfinite(value) and math.isfinite(base)):
        return None
    return value - base


INVALID = "invalid"


def table_rows(results: Sequence[Result]) -> list[tuple[Metric, list[float | str | None]]]:
    """(metric of the first result, the values of every result) in the first result's order,
    then metrics only later results have; an invalid result's judged values are `INVALID`."""
    order: list[str] = []
    first: dict[str, Metric] = {}
    for result in results:
        for metric in result.metrics:
            if metric.name not in first:
                order.append(metric.name)
                first[metric.name] = metric
    lookup = [{m.name: INVALID if r.invalid and m.judged else m.value for m in r.metrics} for r in results]
    return [(first[name], [values.get(name) for values in lookup]) for name in order]


def _num(value: float | str | None) -> str:
    """Counts as integers, scores with two decimals, small fractions with three significant digits."""
    if value is None:
        return "–"
    if isinstance(value, str):
        return value
    if isinstance(value, int):
        return str(value)
    return f"{value:.2f}" if abs(value) >= 1 else f"{value:.3g}"


def _signed(value: float | None) -> str:
    return "–" if value is None else ("+" if value > 0 else "") + _num(value)


def check_kinds(results: Sequence[Result]) -> None:
    if len(results) < 2:
        raise ValueError("compare needs at least two results")
    kinds = {r.kind for r in results}
    if len(kinds) > 1:
        detail = ", ".join(f"{r.path} ({r.kind})" for r in results)
        raise ValueError(f"cannot compare results of different kinds: {detail}")


def to_markdown(results: Sequence[Result]) -> str:
    check_kinds(results)
    base = results[0].label
    header = ["metric", results[0].heading]
    for r in results[1:]:
        header += [r.heading, f"Δ vs {base}"]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|"]
    for metric, values in table_rows(results):
        cells = [metric.name, _num(values[0])]
        for value in values[1:]:
            cells += [_num(value), _signed(delta(value, values[0]))]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n" + "".join(f"\n{line}\n" for line in invalid_notes(results))


def invalid_notes(results: Sequence[Result]) -> list[str]:
    """One line per invalid result: its name, why, and where its numbers are."""
    return [f"INVALID {r.label}: {r.invalid}. Its judged metrics are not shown or compared (they are in {r.path})."
            for r in results if r.invalid]


def to_html(results: Sequence[Result]) -> str:
    check_kinds(results)
    base = results[0].label
    head = f"<th>metric</th><th class='num'>{esc(results[0].heading)}</th>" + "".join(
        f"<th class='num'>{esc(r.heading)}</th><th class='num'>Δ vs {esc(base)}</th>" for r in results[1:]
    )
    rows = []
    for metric, values in table_rows(results):
        cells = [f"<td>{esc(metric.name)}</td><td class='num'>{_num(values[0])}</td>"]
        for value in values[1:]:
            d = delta(value, values[0])
            good = d is not None and d != 0 and (d > 0) == metric.higher_is_better
            colour = "" if d is None or d == 0 else ("color:#2f8f4e" if good else "color:#c2452d")
            cells.append(f"<td class='num'>{_num(value)}</td><td class='num' style='{colour}'>{_signed(d)}</td>")
        rows.append(f"<tr>{''.join(cells)}</tr>")
    sources = "".join(f"<li>{esc(r.label)}: {esc(r.path)}</li>" for r in results)
    notes = "".join(f"<p style='color:#c2452d'>{esc(line)}</p>" for line in invalid_notes(results))
    body = (
        f"<h1>Comparison ({esc(results[0].kind)})</h1><p class='meta'>Δ = run − {esc(base)}; green is better.</p>"
        f"<table><tr>{head}</tr>{''.join(rows)}</table>{notes}<h2>Sources</h2><ul>{sources}</ul>"
    )
    return page(f"mapo compare: {', '.join(r.label for r in results)}", body)


def write_comparison(paths: Sequence[str | Path], out_dir: str | Path, labels: Sequence[str] | None = None) -> tuple[Path, Path, str]:
    """Write compare.md and compare.html into `out_dir`; returns (md path, html path, markdown text)."""
    if labels and len(labels) != len(paths):
        raise ValueError(f"{len(labels)} labels for {len(paths)} results; give one label per result or none")
    results = [load_result(p, labels[i] if labels else None) for i, p in enumerate(paths)]
    seen: dict[str, int] = {}
    for r in results:  # two folders with the same name would make an unreadable table
        seen[r.label] = seen.get(r.label, 0) + 1
        if seen[r.label] > 1:
            r.label = f"{r.label} ({seen[r.label]})"
    markdown = to_markdown(results)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    md_path, html_path = out / "compare.md", out / "compare.html"
    md_path.write_text(markdown, encoding="utf-8")
    html_path.write_text(to_html(results), encoding="utf-8")
    return md_path, html_path, markdown
