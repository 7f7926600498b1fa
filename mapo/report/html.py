"""A self-contained HTML transcript viewer (no scripts, no external files).

Takes transcript records (one dialogue each, as written to transcripts.jsonl by
`mapo eval` or the trainer): an index of the dialogues, then each dialogue with a
chart of its distance D_t and need components P_t per turn, and a table of its
turns showing the need vector P_t as bars beside the user message, the reply, the
judge's action v_t and levels.
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence
from typing import Any

from mapo.core.types import AXES, outcome_of

AXIS_COLOURS = {"C": "#2f6fb0", "A": "#c2452d", "P": "#2f8f4e"}
OUTCOME_COLOURS = {"success": "#2f8f4e", "failure": "#c2452d", "timeout": "#b08a2f", "other": "#777"}
_DISTANCE_COLOUR = "#222"

STYLE = """
body { font: 14px/1.45 system-ui, -apple-system, Segoe UI, Roboto, sans-serif; margin: 24px auto; max-width: 1200px;
       color: #222; padding: 0 16px; }
h1 { font-size: 22px; margin-bottom: 4px; } h2 { font-size: 17px; margin: 20px 0 6px; }
summary h2 { display: inline; margin: 0; }
table { border-collapse: collapse; width: 100%; margin: 8px 0 16px; }
th, td { border-bottom: 1px solid #e2e2e2; padding: 5px 7px; text-align: left; vertical-align: top; }
th { background: #f5f5f5; font-weight: 600; } td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
.badge { display: inline-block; padding: 1px 8px; border-radius: 10px; color: #fff; font-size: 12px; font-weight: 600; }
details { border: 1px solid #ddd; border-radius: 6px; margin: 12px 0; padding: 8px 12px; }
summary { cursor: pointer; } .meta { color: #666; font-size: 13px; }
.msg { white-space: pre-wrap; max-width: 330px; } .user { color: #444; } .bot { color: #111; }
.bars { width: 190px; } .nrow { display: flex; align-items: center; gap: 5px; font-size: 11px; line-height: 13px; }
.nrow b { width: 10px; } .nrow i { width: 26px; text-align: right; font-style: normal; color: #555; }
.bar { flex: 1; height: 9px; background: #eee; position: relative; }
.bar span { position: absolute; right: 0; top: 0; height: 9px; }
.vec { font-family: ui-monospace, Menlo, monospace; font-size: 12px; white-space: nowrap; }
.pos { color: #2f8f4e; } .neg { color: #c2452d; } .legend span { margin-right: 14px; font-size: 12px; }
.kv td:first-child { color: #555; width: 40%; }
pre { overflow-x: auto; } svg, img { max-width: 100%; height: auto; }
@media (max-width: 700px) {  /* a phone: wide tables scroll inside themselves, never the page */
  body { margin: 12px auto; padding: 0 10px; } table { display: block; overflow-x: auto; }
  .msg { max-width: 70vw; }
}
"""


def esc(value: Any) -> str:
    return html.escape(str(value), quote=True)


def badge(outcome: str) -> str:
    colour = OUTCOME_COLOURS.get(outcome, OUTCOME_COLOURS["other"])
    return f'<span class="badge" style="background:{colour}">{esc(outcome)}</span>'


def _fmt(value: Any, digits: int = 2) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return esc(value)


def _axes(size: int) -> tuple[str, ...]:
    return AXES if size == len(AXES) else tuple(str(i) for i in range(size))


def _states(record: Mapping[str, Any]) -> list[list[float]]:
    """P_0..P_T of a transcript record."""
    return [list(record.get("initial_state") or [])] + [list(t.get("state") or []) for t in record.get("turns", [])]


def _nice_ticks(low: float, high: float, most: int = 8) -> list[float]:
    """At most `most` round tick values (1, 2 or 5 x 10^k apart) covering [low, high]."""
    if high - low < 1e-9:
        low, high = low - 1.0, high + 1.0
    raw = (high - low) / (most - 1)
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= raw)
    first = math.floor(low / step + 1e-9)
    last = math.ceil(high / step - 1e-9)
    return [round(k * step, 10) for k in range(first, last + 1)]


def line_chart(series: Sequence[tuple[str, str, Sequence[float]]], width: int = 560, height: int = 190) -> str:
    """An inline SVG line chart of (label, colour, values) series over turn index 0..T."""
    points = [v for _, _, values in series for v in values if math.isfinite(v)]
    if not points:
        return ""
    ticks = _nice_ticks(min(points + [0.0]), max(points + [0.0]))
    low, high = ticks[0], ticks[-1]
    longest = max(len(values) for _, _, values in series)
    left, right, top, bottom = 38, 10, 10, 24
    plot_w, plot_h = width - left - right, height - top - bottom

    def x(i: int) -> float:
        return left + plot_w * (i / max(longest - 1, 1))

    def y(v: float) -> float:
        return top + plot_h * (high - v) / (high - low)

    parts = [f'<svg width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img">']
    for value in ticks:  # horizontal grid with labels
        parts.append(f'<line x1="{left}" x2="{width - right}" y1="{y(value):.1f}" y2="{y(value):.1f}" stroke="#eee"/>')
        parts.append(f'<text x="{left - 4}" y="{y(value) + 4:.1f}" font-size="10" text-anchor="end" fill="#777">{value:g}</text>')
    parts.append(f'<line x1="{left}" x2="{width - right}" y1="{y(0):.1f}" y2="{y(0):.1f}" stroke="#bbb"/>')
    step = max(1, math.ceil(longest / 12))
    for i in range(0, longest, step):
        parts.append(f'<text x="{x(i):.1f}" y="{height - 8}" font-size="10" text-anchor="middle" fill="#777">{i}</text>')
    for label, colour, values in series:
        coords = " ".join(f"{x(i):.1f},{y(v):.1f}" for i, v in enumerate(values) if math.isfinite(v))
        parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="2" points="{coords}"><title>{esc(label)}</title></polyline>')
    parts.append("</svg>")
    return "".join(parts)


def _need_bars(state: Sequence[float], scale: float) -> str:
    """One bar per axis growing leftwards with the unmet need |P_t,k| (pale when over-met, > 0)."""
    rows = []
    for axis, value in zip(_axes(len(state)), state):
        width = min(100.0, 100.0 * abs(value) / scale) if scale > 0 else 0.0
        colour = AXIS_COLOURS.get(axis, "#888")
        opacity = "1" if value <= 0 else "0.35"
        rows.append(
            f'<div class="nrow" title="{esc(axis)} = {value:.1f}"><b style="color:{colour}">{esc(axis)}</b>'
            f'<div class="bar"><span style="width:{width:.1f}%;background:{colour};opacity:{opacity}"></span></div>'
            f"<i>{value:+.0f}</i></div>"
        )
    return "".join(rows)


def _vector(values: Sequence[float]) -> str:
    out = []
    for axis, value in zip(_axes(len(values)), values):
        cls = "pos" if value > 0 else "neg" if value < 0 else ""
        out.append(f'<span class="{cls}">{esc(axis)}{value:+.0f}</span>')
    return " ".join(out)


def _levels(levels: Mapping[str, Any] | None) -> str:
    if not levels:
        return ""
    return "<br>".join(f"{esc(k)} {esc(v)}" for k, v in levels.items() if v)


def dialogue_section(record: Mapping[str, Any], anchor: str, open_: bool = False) -> str:
    states = _states(record)
    turns = record.get("turns", [])
    size = len(states[0]) if states and states[0] else (len(turns[0].get("state") or []) if turns else 0)
    axes = _axes(size)
    distances = [math.sqrt(sum(x * x for x in s)) if s else float("nan") for s in states]
    scale = max([abs(x) for s in states for x in s] + [1.0])
    outcome = record.get("outcome") or outcome_of(record.get("done_reason"))
    series = [("D_t", _DISTANCE_COLOUR, distances)] + [
        (f"P_t {axis}", AXIS_COLOURS.get(axis, "#888"), [s[k] if len(s) > k else float("nan") for s in states])
        for k, axis in enumerate(axes)
    ]
    legend = "".join(
        f'<span style="color:{colour}">&#9632; {esc(label)}</span>' for label, colour, _ in series
    )
    meta = [f"{len(turns)} turns", f"reason: {esc(record.get('done_reason'))}"]
    if record.get("epmq") is not None:
        meta.append(f"EPM-Q {record['epmq']:.1f}")
    if "step" in record:
        meta.append(f"training step {esc(record['step'])}")
    if "return" in record:
        meta.append(f"return {record['return']:+.2f}")
    rows = [
        "<tr><td class='num'>0</td><td colspan='2' class='meta'>start</td><td></td>"
        f"<td class='bars'>{_need_bars(states[0], scale) if states[0] else ''}</td>"
        f"<td class='num'>{_fmt(distances[0], 1)}</td><td></td></tr>"
    ]
    for turn, state, distance in zip(turns, states[1:], distances[1:]):
        rows.append(
            f"<tr><td class='num'>{esc(turn.get('turn', ''))}</td>"
            f"<td class='msg user'>{esc(turn.get('user', ''))}</td>"
            f"<td class='msg bot'>{esc(turn.get('response', ''))}</td>"
            f"<td class='vec'>{_vector(turn.get('action') or [])}</td>"
            f"<td class='bars'>{_need_bars(state, scale) if state else ''}</td>"
            f"<td class='num'>{_fmt(distance, 1)}</td>"
            f"<td class='vec'>{_levels(turn.get('levels'))}</td></tr>"
        )
    title = record.get("title") or record.get("scenario_id", "")
    return (
        f'<details id="{esc(anchor)}"{" open" if open_ else ""}><summary><h2>{esc(title)}</h2> '
        f"<span class='meta'>sample {esc(record.get('sample_index', 0))}</span> {badge(outcome)} "
        f"<span class='meta'>{' · '.join(meta)}</span></summary>"
        f"<div class='legend'>{legend}</div>{line_chart(series)}"
        "<table><tr><th class='num'>t</th><th>user</th><th>assistant</th><th>v_t</th>"
        f"<th>need P_t ({'/'.join(axes)})</th><th class='num'>D_t</th><th>levels</th></tr>{''.join(rows)}</table></details>"
    )


def summary_table(summary: Mapping[str, Any]) -> str:
    rows = "".join(f"<tr><td>{esc(k)}</td><td>{_fmt(v, 3)}</td></tr>" for k, v in summary.items())
    return f"<table class='kv'>{rows}</table>"


def page(title: str, body: str) -> str:
    return (
        f"<!doctype html><html lang='en'><head><meta charset='utf-8'>"
        f"<meta name='viewport' content='width=device-width, initial-scale=1'><title>{esc(title)}</title>"
        f"<style>{STYLE}</style></head><body>{body}</body></html>\n"
    )


def render_transcripts(records: Sequence[Mapping[str, Any]], title: str, summary: Mapping[str, Any] | None = None) -> str:
    """The viewer page for these dialogues (the first one expanded)."""
    with_steps = any("step" in record for record in records)  # training transcripts
    index_rows = []
    for k, record in enumerate(records):
        states = _states(record)
        d0 = math.sqrt(sum(x * x for x in states[0])) if states[0] else float("nan")
        dt = math.sqrt(sum(x * x for x in states[-1])) if states[-1] else float("nan")
        outcome = record.get("outcome") or outcome_of(record.get("done_reason"))
        step = f"<td class='num'>{esc(record.get('step', ''))}</td>" if with_steps else ""
        index_rows.append(
            f"<tr><td><a href='#d{k}'>{esc(record.get('title') or record.get('scenario_id', ''))}</a></td>"
            f"{step}<td class='num'>{esc(record.get('sample_index', 0))}</td><td>{badge(outcome)}</td>"
            f"<td class='num'>{len(record.get('turns', []))}</td><td class='num'>{_fmt(record.get('epmq'), 1)}</td>"
            f"<td class='num'>{_fmt(d0, 1)} → {_fmt(dt, 1)}</td></tr>"
        )
    body = [f"<h1>{esc(title)}</h1>"]
    if summary:
        body.append(summary_table(summary))
    step_header = "<th class='num'>step</th>" if with_steps else ""
    body.append(
        f"<table><tr><th>scenario</th>{step_header}<th class='num'>sample</th><th>outcome</th>"
        f"<th class='num'>turns</th><th class='num'>EPM-Q</th><th class='num'>D_0 → D_T</th></tr>{''.join(index_rows)}</table>"
    )
    body.extend(dialogue_section(record, f"d{k}", open_=k == 0) for k, record in enumerate(records))
    return page(title, "".join(body))
