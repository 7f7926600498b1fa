"""What `mapo env list | try | calibrate` show: rich tables and the interactive session (mapo.cli.environment
imports it when one of them runs)."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from mapo.core.rewards import rewards_from_distances
from mapo.core.types import AXES, Scenario
from mapo.envs.base import make_environment
from mapo.envs.dynamics import LEVEL_KEYS
from mapo.envs.empathy.cards import EmpathyScenario, bundled_scenarios, load_card


def scenario_table() -> Table:
    """The bundled cards: id, title, category, dominant axis, ||P_0||, split."""
    table = Table(title="Bundled scenarios")
    table.add_column("id", no_wrap=True)
    table.add_column("title", overflow="ellipsis", max_width=34)
    for column in ("category", "axis", "||P_0||", "split"):
        table.add_column(column, justify="right" if column == "||P_0||" else "left", no_wrap=True)
    for split in ("train", "test"):
        for s in bundled_scenarios(split):
            d0 = math.sqrt(sum(x * x for x in s.initial_state or ()))
            table.add_row(s.id, s.title, s.category, s.dominant_axis, f"{d0:.1f}", split)
    return table


def find_scenario(name: str) -> EmpathyScenario:
    """A bundled card by id, or a card file by path."""
    if name.endswith((".yaml", ".yml")) or Path(name).is_file():
        return load_card(name).to_scenario()
    scenarios = {s.id: s for s in bundled_scenarios("all")}
    if name not in scenarios:
        close = sorted(i for i in scenarios if name.lower() in i)
        hint = f"; did you mean {', '.join(close[:5])}?" if close else "; `mapo env list` shows them"
        raise ValueError(f"no bundled scenario {name!r}{hint}")
    return scenarios[name]


def _vector(v: Any) -> str:
    return "(" + ", ".join(f"{float(x):+.1f}" for x in v) + ")"


def turn_table(info: dict[str, Any], action: tuple[float, ...], reward: float) -> Table:
    """One turn: the judge's levels with evidence, v_t, P_t, D_t and the IDR reward."""
    table = Table(show_header=True, title=f"turn {info['turn']}")
    table.add_column("level")
    table.add_column("value", justify="right")
    table.add_column("evidence")
    for key in LEVEL_KEYS:
        table.add_row(key, str(info["levels"][key]), info["evidence"].get(key, ""))
    table.add_row("v_t (C, A, P)", _vector(action), "")
    table.add_row("P_t (need)", _vector(info["state"]), f"deepest axis {AXES[min(range(3), key=lambda i: info['state'][i])]}")
    table.add_row("D_t", f"{info['distance']:.2f}", f"Delta E {info['delta_e']:+.2f}, alignment {info['alignment']:+.2f}")
    table.add_row("reward (IDR)", f"{reward:+.2f}", f"next move: {info['directive']['action']}")
    return table


def interactive_session(
    scenario: Scenario,
    seed: int,
    read: Callable[[str], str],
    console: Console,
    **env_options: Any,
) -> dict[str, Any]:
    """Play the policy by hand: `read(prompt)` gives each reply (EOFError, "", "/quit" stop).
    Returns the environment's record of the dialogue."""
    env = make_environment("empathy", **env_options)
    opening = env.reset(scenario, seed=seed)
    name = scenario.card["persona"]["name"]
    console.print(f"[bold]{scenario.title}[/bold] ({scenario.id}); you play the supporter. Empty line or /quit ends.")
    console.print(f"[cyan]{name}:[/cyan] {opening}")
    previous = env.state.distance  # type: ignore[attr-defined]
    while True:
        try:
            reply = read("you> ").strip()
        except EOFError:
            reply = ""
        if reply in ("", "/quit"):
            console.print("[dim]stopped[/dim]")
            break
        result = env.step(reply)
        reward = rewards_from_distances([previous, result.info["distance"]], "idr")[0]
        previous = result.info["distance"]
        console.print(turn_table(result.info, result.action, reward))
        console.print(f"[cyan]{name}:[/cyan] {result.user_message}")
        if result.done:
            console.print(f"[bold]done: {result.info['done_reason']}[/bold] after {result.info['turn']} turns")
            break
    return env.record()  # type: ignore[attr-defined,no-any-return]


def calibration_table(result: dict[str, Any], title: str) -> Table:
    """Per-level agreement and the pairwise ranking accuracy of `calibrate.evaluate`."""
    table = Table(title=title)
    table.add_column("level")
    table.add_column("exact", justify="right")
    table.add_column("within 1", justify="right")
    for key in LEVEL_KEYS:
        row = result["per_level"][key]
        table.add_row(key, f"{row['exact']:.3f}", f"{row['within1']:.3f}")
    table.add_row("all six", f"{result['exact_all_six']:.3f}", "")
    ranking = result["ranking"]
    accuracy = "n/a" if ranking["accuracy"] is None else f"{ranking['accuracy']:.3f}"
    table.add_row("ranking", accuracy, f"{ranking['correct']}/{ranking['pairs']} pairs")
    return table


def judge_replies_line(result: dict[str, Any]) -> str:
    """How many replies `calibrate.evaluate` judged, and how many of them were repairs or fallbacks."""
    r = result["replies"]
    line = f"Judged {r['judged']} replies: {r['repaired']} after a repair, {r['fallbacks']} fallbacks"
    if r["fallbacks"]:
        line += (
            f" (no valid judgement: scored as the neutral levels, in {result['ranking']['with_fallback']} of "
            f"{result['ranking']['pairs']} ranked pairs)"
        )
    if r["skipped"]:
        line += f"; {r['skipped']} replies of self-contained contexts skipped (the judge has no score(context, response))"
    return line + "."


def family_table(result: dict[str, Any]) -> Table:
    """Per failure family of `calibrate.evaluate`: how the judge treats the degenerate replies."""
    table = Table(title="Degenerate replies by failure family")
    for name, justify in (("family", "left"), ("replies", "right"), ("no progress", "right"),
                          ("negative level", "right"), ("good reply ranked above", "right")):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for family, m in result["families"].items():
        above = "n/a" if m["good_ranked_above"] is None else f"{m['good_ranked_above']:.0%}"
        table.add_row(family, str(m["replies"]), f"{m['no_progress']:.0%}", f"{m['negative_level']:.0%}", above)
    return table
