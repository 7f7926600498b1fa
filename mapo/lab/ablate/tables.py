"""The ablation report's tables: rows of statistics (mapo.lab.ablate.stats) as cells, and one
`Table` that renders the same cells as markdown (ablation.md) and HTML (ablation.html)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from mapo.intervals import BOOTSTRAP_SEED, RESAMPLES
from mapo.lab.ablate.stats import METRICS, PAIRED_REFERENCE

CI_NOTE = "* the 95 % interval excludes 0."


@dataclass
class Table:
    title: str
    header: list[str]
    rows: list[list[str]]
    note: str = ""
    numeric_from: int = 1  # columns from this one on are right-aligned
    data: list[dict[str, Any]] = field(default_factory=list)  # the statistics behind it (ablation.json)

    def markdown(self) -> str:
        def cell(text: str) -> str:
            return text.replace("|", "\\|").replace("\n", "<br>")

        align = ["---"] * self.numeric_from + ["---:"] * (len(self.header) - self.numeric_from)
        lines = [f"### {self.title}", ""] if self.title else []
        lines += ["| " + " | ".join(self.header) + " |", "|" + "|".join(align) + "|"]
        lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in self.rows]
        return "\n".join(lines + ([f"\n{self.note}"] if self.note else [])) + "\n"

    def html(self) -> str:
        from mapo.report.html import esc

        def cells(row: Sequence[str], tag: str) -> str:
            return "".join(f"<{tag}{' class=num' if i >= self.numeric_from else ''}>"
                           f"{esc(c).replace(chr(10), '<br>')}</{tag}>" for i, c in enumerate(row))

        body = "".join(f"<tr>{cells(r, 'td')}</tr>" for r in self.rows)
        note = f"<p class='meta'>{esc(self.note)}</p>" if self.note else ""
        return f"<h2>{esc(self.title)}</h2><table><tr>{cells(self.header, 'th')}</tr>{body}</table>{note}"


def _digits(value: float) -> int:
    return 1 if abs(value) >= 10 else 3


def format_cell(stats: dict[str, Any], seeds: int | None = None) -> str:
    """"mean ± std" (or the mean alone with one value; "–" with none), and "(n of `seeds`)" when
    fewer of the row's seeds have the figure (an evaluation written before it existed)."""
    if stats["mean"] is None:
        return "–"
    digits = _digits(stats["mean"])
    text = f"{stats['mean']:.{digits}f}"
    text = text if stats["std"] is None else f"{text} ± {stats['std']:.{digits}f}"
    return text if seeds is None or stats["n"] >= seeds else f"{text} ({stats['n']} of {seeds} seeds)"


def interval_cell(stats: dict[str, Any]) -> str:
    """"+mean [low, high]" with "*" when the interval excludes 0; the mean alone without one."""
    if stats["mean"] is None:
        return "–"
    digits = _digits(max(abs(stats["mean"]), abs(stats["low"] or 0), abs(stats["high"] or 0)))
    text = f"{stats['mean']:+.{digits}f}"
    if stats["low"] is None or stats["high"] is None:
        return text
    star = " *" if stats["low"] > 0 or stats["high"] < 0 else ""
    return f"{text} [{stats['low']:+.{digits}f}, {stats['high']:+.{digits}f}]{star}"


def to_markdown(rows: Sequence[dict[str, Any]], metrics: Sequence[tuple[str, str]] = METRICS) -> str:
    """The mean ± std table as markdown, without a title."""
    return summary_table("", rows, metrics).markdown()


def summary_table(title: str, rows: Sequence[dict[str, Any]], metrics: Sequence[tuple[str, str]], note: str = "") -> Table:
    """Rows of `aggregate_rows`: variant, seeds, mean ± std per metric."""
    cells = [[r["variant"], "–" if r["variant"] == "base" and not r["seeds"] else str(len(r["seeds"])),
              *(format_cell(r["metrics"][k], len(r["seeds"]) or None) for k, _ in metrics)] for r in rows]
    return Table(title, ["variant", "seeds", *(t for _, t in metrics)], cells, note, data=list(rows))


def _with_worse_seeds(stats: dict[str, Any]) -> str:
    """An interval cell and, where seeds were paired, at how many of them the variant was worse."""
    cell = interval_cell(stats)
    if stats.get("worse") is None:
        return cell
    return f"{cell} ({round(stats['worse'] * stats['n'])} of {stats['n']} worse)"


def paired_table(title: str, rows: Sequence[dict[str, Any]], metrics: Sequence[tuple[str, str]],
                 reference: str = PAIRED_REFERENCE) -> Table:
    """Rows of `paired_rows`: variant, seeds paired, difference [95 % t interval] and the seeds where
    the variant is worse than the reference, per metric."""
    cells = [[r["variant"], str(len(r["seeds"])), *(_with_worse_seeds(r["metrics"][k]) for k, _ in metrics)] for r in rows]
    note = (f"Variant minus {reference} at the same seed (the base: the evaluation of the policy that seed's runs "
            f"started from minus its {reference}); mean [95 % t interval over seeds] (seeds where it is worse). {CI_NOTE}")
    return Table(title, ["variant", "seeds", *(f"{t} − {reference}" for _, t in metrics)], cells, note, data=list(rows))


def dialogue_table(title: str, rows: Sequence[dict[str, Any]], metrics: Sequence[tuple[str, str]],
                   reference: str = PAIRED_REFERENCE) -> Table:
    """Rows of `paired_dialogue_rows`: variant, seeds / dialogue pairs, difference [95 % cluster
    bootstrap interval] and the share of dialogues worse than the reference, per metric."""
    cells = []
    for r in rows:
        first = r[metrics[0][0]]
        worse = [r[k]["worse"] for k, _ in metrics]
        cells.append([r["variant"], f"{first['seeds']} / {first['n']}",
                      *(f"{interval_cell(r[k])} ({w:.0%} worse)" if w is not None else interval_cell(r[k])
                        for (k, _), w in zip(metrics, worse))])
    note = (f"Variant minus {reference} on the same held-out dialogue (scenario and sample) at the same seed, "
            "pooled; mean [95 % interval of a two-stage bootstrap: seeds with replacement, then the dialogues of "
            f"each drawn seed; {RESAMPLES} resamples, seed {BOOTSTRAP_SEED}] (share of dialogues worse). With few seeds "
            "this interval is narrower than the t interval of the by-seed table: that one is the conservative reading. "
            + CI_NOTE)
    return Table(title, ["variant", "seeds / pairs", *(f"{t} − {reference}" for _, t in metrics)], cells, note,
                 data=list(rows))
