"""Side-by-side transcript excerpts for the ablation report: the first turns of the same held-out
dialogue as the base, GRPO and MAPO (seed of the plan's first seed) played it.

Which dialogues, by a fixed rule: among the dialogues every shown policy has, the one where the
reference (mapo-idr) gained most EPM-Q over the base, and the one where it gained least (ties go
to the first key in sorted order), so the excerpts show the best and the worst case, not a pick.
"""

from __future__ import annotations

from typing import Any

from mapo.lab.ablate.plan import AblationPlan, Unit
from mapo.lab.ablate.stats import PAIRED_REFERENCE, dialogue_key
from mapo.lab.ablate.tables import Table

EXCERPT_TURNS = 3
SHOWN_BESIDE_THE_BASE = ("grpo-idr", PAIRED_REFERENCE)


def shown_policies(plan: AblationPlan) -> list[str]:
    """The evals shown side by side: the base, then grpo-idr and mapo-idr at the first seed (those in the plan)."""
    return ["base", *(Unit(v, plan.seeds[0]).name for v in SHOWN_BESIDE_THE_BASE if v in plan.variants)]


def pick_dialogues(per_dialogue: dict[str, dict[str, dict[str, float | None]]], plan: AblationPlan,
                   reference: str = PAIRED_REFERENCE) -> list[tuple[str, str, float]]:
    """[(dialogue key, why, reference EPM-Q − base EPM-Q)]: the largest gain, then the smallest
    (one entry when they coincide); [] when the base or the reference has not been evaluated."""
    shown = shown_policies(plan)
    best = Unit(reference, plan.seeds[0]).name
    if best not in shown or any(name not in per_dialogue for name in shown):
        return []
    gains = {}
    for key in sorted(per_dialogue["base"]):
        values = [per_dialogue[name].get(key, {}).get("epmq") for name in shown]
        if all(v is not None for v in values):
            gains[key] = per_dialogue[best][key]["epmq"] - per_dialogue["base"][key]["epmq"]  # type: ignore[operator]
    if not gains:
        return []
    largest = max(gains, key=lambda k: gains[k])
    smallest = min(gains, key=lambda k: gains[k])
    picked = [(largest, f"largest EPM-Q gain of {best} over the base", gains[largest])]
    if smallest != largest:
        picked.append((smallest, f"smallest EPM-Q gain of {best} over the base", gains[smallest]))
    return picked


def excerpt_tables(
    picked: list[tuple[str, str, float]], transcripts: dict[str, list[dict[str, Any]]], plan: AblationPlan,
    turns: int = EXCERPT_TURNS,
) -> list[Table]:
    """One table per picked dialogue: a row per turn, a column per shown policy, each cell the
    user's message and the reply as that policy's dialogue went."""
    shown = shown_policies(plan)
    by_key = {name: {dialogue_key(r["scenario_id"], r["sample_index"]): r for r in transcripts.get(name, [])}
              for name in shown}
    tables = []
    for key, why, gain in picked:
        records = [by_key[name].get(key) for name in shown]
        title = next((r.get("title") for r in records if r and r.get("title")), "") or key.split("#")[0]
        rows = []
        for t in range(turns):
            row = [str(t + 1)]
            for record in records:
                turn = record["turns"][t] if record and t < len(record["turns"]) else None
                row.append(f"user: {turn['user']}\nassistant: {turn['response']}" if turn else "–")
            rows.append(row)
        tables.append(Table(f"{title} ({key}): {why}, {gain:+.1f}", ["turn", *shown], rows, numeric_from=len(shown) + 1,
                            data=[{"dialogue": key, "rule": why, "epmq_gain": gain}]))
    return tables
