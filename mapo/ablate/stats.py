"""The ablation's statistics: each run's and evaluation's figures, mean and sample std over
seeds, and the paired differences to the reference variant (per seed and per dialogue)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from mapo.ablate.plan import AblationPlan, Unit


METRICS = (  # (key, column header): held-out evaluation metrics in the table
    ("pass_rate", "pass rate (%)"),
    ("epmq", "EPM-Q"),
    ("return", "mean return (IDR)"),
    ("alignment", "alignment to v*_0"),
)
TRAINING_METRICS = (  # (key, column header): from each run's metrics.jsonl
    ("reward_first", "train reward, first 3 steps"),
    ("reward_last", "train reward, last 3 steps"),
    ("grad_norm_median", "grad norm, median step"),
    ("grad_norm_max", "grad norm, largest step"),
    ("grad_norm_peak_ratio", "largest / median"),
)
PAIRED_REFERENCE = "mapo-idr"


def training_metrics(rows: Sequence[dict[str, Any]]) -> dict[str, float | None]:
    """Reward at the start and end of a run and the spread of its pre-clip gradient norms.

    A step's norm is its largest over optimizer steps (`grad_norm_max`), so a peak inside a
    step is not averaged away; largest / median measures how spiky the run's gradients were.
    """
    rewards = [float(m["reward_mean"]) for m in rows]
    norms = [float(m.get("grad_norm_max", m.get("grad_norm", float("nan")))) for m in rows]
    norms = [n for n in norms if math.isfinite(n)]
    median = float(np.median(norms)) if norms else None
    return {
        "reward_first": float(np.mean(rewards[:3])) if rewards else None,
        "reward_last": float(np.mean(rewards[-3:])) if rewards else None,
        "grad_norm_median": median,
        "grad_norm_max": max(norms) if norms else None,
        "grad_norm_peak_ratio": max(norms) / median if norms and median else None,
    }


def eval_metrics(result: dict[str, Any]) -> dict[str, float | None]:
    """The table's metrics from one eval.json; the return is the held-out IDR return D_0 - D_T."""
    from mapo.rewards import rewards_from_distances

    summary = result["summary"]
    returns = [
        sum(rewards_from_distances(sample["distances"], "idr"))
        for scenario in result["scenarios"]
        for sample in scenario["samples"]
        if len(sample["distances"]) > 1
    ]
    return {
        "pass_rate": 100.0 * summary["pass_rate"],
        "epmq": summary["epmq"]["epmq"] if summary.get("epmq") else None,
        "return": float(np.mean(returns)) if returns else None,
        "alignment": summary["alignment"]["target"],
    }


def dialogue_metrics(result: dict[str, Any]) -> dict[str, dict[str, float | None]]:
    """Per held-out dialogue ("<scenario>#<sample>"): its IDR return D_0 - D_T and its EPM-Q."""
    found = {}
    for scenario in result["scenarios"]:
        for sample in scenario["samples"]:
            distances, epmq = sample["distances"], sample.get("epmq")
            found[f"{scenario['scenario_id']}#{sample['sample_index']}"] = {
                "return": distances[0] - distances[-1] if len(distances) > 1 else None,
                "epmq": epmq["epmq"] if epmq else None,
            }
    return found


def paired_dialogue_rows(
    per_dialogue: dict[str, dict[str, dict[str, float | None]]], plan: AblationPlan, reference: str = PAIRED_REFERENCE
) -> list[dict[str, Any]]:
    """Per variant: the difference to the reference on the same held-out dialogue at the same seed,
    pooled over seeds and dialogues; mean, standard error, t = mean / s.e., and the share worse.

    Dialogues of one run share a policy, so they are not independent draws: t overstates the
    evidence somewhat. It still shows which gaps are far outside the dialogue-to-dialogue noise.
    """
    rows = []
    for variant in ["base", *plan.variants]:
        if variant == reference:
            continue
        stats: dict[str, Any] = {}
        for key in ("return", "epmq"):
            diffs = []
            for seed in plan.seeds:
                mine = per_dialogue.get("base" if variant == "base" else Unit(variant, seed).name)
                theirs = per_dialogue.get(Unit(reference, seed).name)
                if mine is None or theirs is None:
                    continue
                diffs += [mine[d][key] - theirs[d][key] for d in theirs
                          if d in mine and mine[d][key] is not None and theirs[d][key] is not None]
            a = np.asarray(diffs, dtype=float)
            sem = float(a.std(ddof=1) / math.sqrt(a.size)) if a.size > 1 else None
            stats[key] = {"n": int(a.size), "mean": float(a.mean()) if a.size else None, "sem": sem,
                          "t": float(a.mean()) / sem if sem else None,
                          "worse": float(np.mean(a < 0)) if a.size else None}
        rows.append({"variant": variant, **stats})
    return rows


def mean_std(values: Sequence[float | None]) -> dict[str, Any]:
    """Mean and sample standard deviation (ddof = 1) over seeds; missing values are left out.

    One value has no spread: std is None. No values: both None.
    """
    kept = [float(v) for v in values if v is not None and math.isfinite(v)]
    if not kept:
        return {"mean": None, "std": None, "n": 0, "values": list(values)}
    a = np.asarray(kept)
    return {
        "mean": float(a.mean()),
        "std": float(a.std(ddof=1)) if a.size > 1 else None,
        "n": int(a.size),
        "values": list(values),
    }


def aggregate_rows(
    per_unit: dict[str, dict[str, float | None]], plan: AblationPlan, metrics: Sequence[tuple[str, str]] = METRICS
) -> list[dict[str, Any]]:
    """One row for the base (if present) and one per variant: each metric's mean/std over the variant's seeds."""
    rows = []
    if "base" in per_unit:
        rows.append({"variant": "base", "seeds": [], "metrics": {k: mean_std([per_unit["base"][k]]) for k, _ in metrics}})
    for variant in plan.variants:
        found = [(s, per_unit[Unit(variant, s).name]) for s in plan.seeds if Unit(variant, s).name in per_unit]
        rows.append(
            {
                "variant": variant,
                "seeds": [s for s, _ in found],
                "metrics": {k: mean_std([m[k] for _, m in found]) for k, _ in metrics},
            }
        )
    return rows


def paired_rows(
    per_unit: dict[str, dict[str, float | None]], plan: AblationPlan, reference: str = PAIRED_REFERENCE
) -> list[dict[str, Any]]:
    """Per variant, each metric minus the reference variant's at the same seed, mean/std over seeds.

    Runs with the same seed share their random streams (scenarios, sampling noise), so the
    paired difference removes the between-seed spread that dominates a 3-seed table.
    """
    rows = []
    for variant in plan.variants:
        if variant == reference:
            continue
        seeds = [s for s in plan.seeds if Unit(variant, s).name in per_unit and Unit(reference, s).name in per_unit]
        diffs = {}
        for key, _ in METRICS:
            pairs = [(per_unit[Unit(variant, s).name][key], per_unit[Unit(reference, s).name][key]) for s in seeds]
            diffs[key] = mean_std([a - b if a is not None and b is not None else None for a, b in pairs])
        rows.append({"variant": variant, "seeds": seeds, "metrics": diffs})
    return rows
