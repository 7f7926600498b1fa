"""The ablation's statistics: each run's, evaluation's and held-out dialogue's figures, mean and
sample std over seeds, and every metric's difference to the reference variant with a 95 %
confidence interval, paired by seed (t interval over seeds) and by held-out dialogue (the same
scenario and sample at the same seed; two-stage cluster bootstrap, `mapo.intervals`)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from mapo.degeneracy import HACKING_HIGHER_IS_BETTER, HACKING_LABELS
from mapo.evaluate.empa import monitor_figures, transcript_hacking_metrics
from mapo.intervals import cluster_bootstrap, t_interval
from mapo.lab.ablate.plan import AblationPlan, Unit
from mapo.lab.ablate.state import seed_base_name

METRICS = (  # (key, column header): held-out evaluation metrics in the table
    ("pass_rate", "pass rate (%)"),
    ("epmq", "EPM-Q"),
    ("return", "mean return (IDR)"),
    ("alignment", "alignment to v*_0"),
)
HACKING_METRICS = tuple(  # the reward-hacking monitor over the held-out replies (mapo.degeneracy)
    (key, f"{label} ({'higher' if key in HACKING_HIGHER_IS_BETTER else 'lower'} is better)")
    for key, label in HACKING_LABELS.items()
)
GAME_METRICS = (  # an environment's own figures (eval.json summary.figures), where it has them: the game's
    ("bits_per_question", "bits per question"),
    ("repeat_rate", "repeated questions (share of turns)"),
    ("invalid_rate", "invalid replies (share of turns)"),
    ("wrong_guesses", "wrong guesses per game"),
    ("early_guesses", "guesses with 2+ candidates left, per game"),
    ("stalled_turns", "turns not guessing the one candidate left, per game"),
)
DIALOGUE_METRICS = METRICS + HACKING_METRICS  # what one held-out dialogue has
TRAINING_METRICS = (  # (key, column header): from each run's metrics.jsonl
    ("reward_first", "train reward, first 3 steps"),
    ("reward_last", "train reward, last 3 steps"),
    ("reward_flatness", "last 3 − previous 3 steps"),
    ("truncated_pct", "replies cut at the token cap (%)"),
    ("grad_norm_median", "grad norm, median step"),
    ("grad_norm_max", "grad norm, largest step"),
    ("grad_norm_peak_ratio", "largest / median"),
)
SPEED_METRICS = (("steps_to_half", "steps to half the best final success"),
                 ("steps_to_half_gain", "steps to half the best gain over the start"))
HELDOUT_SPEED = ("heldout_steps_to_half_gain", "held-out checks: first step at half the best gain")
LOWER_IS_BETTER = frozenset(HACKING_LABELS) - HACKING_HIGHER_IS_BETTER | {
    "truncated_pct", "repeat_rate", "invalid_rate", "wrong_guesses", "steps_to_half", "steps_to_half_gain", HELDOUT_SPEED[0]}
PAIRED_REFERENCE = "mapo-idr"


def training_metrics(rows: Sequence[dict[str, Any]]) -> dict[str, float | None]:
    """Reward at the start and end of a run, how flat its end is, the share of replies cut at the
    token cap, and the spread of its pre-clip gradient norms.

    Flatness is the mean reward of the last 3 steps minus that of the 3 before (None under 6
    steps): near 0 once training has stopped gaining. A step's norm is its largest over optimizer
    steps (`grad_norm_max`), so a peak inside a step is not averaged away; largest / median
    measures how spiky the run's gradients were.
    """
    rewards = [float(m["reward_mean"]) for m in rows]
    norms = [float(m.get("grad_norm_max", m.get("grad_norm", float("nan")))) for m in rows]
    norms = [n for n in norms if math.isfinite(n)]
    cut = [float(m["truncated_fraction"]) for m in rows if "truncated_fraction" in m]
    median = float(np.median(norms)) if norms else None
    return {
        "reward_first": float(np.mean(rewards[:3])) if rewards else None,
        "reward_last": float(np.mean(rewards[-3:])) if rewards else None,
        "reward_flatness": float(np.mean(rewards[-3:]) - np.mean(rewards[-6:-3])) if len(rewards) >= 6 else None,
        "truncated_pct": 100.0 * float(np.mean(cut)) if cut else None,
        "grad_norm_median": median,
        "grad_norm_max": max(norms) if norms else None,
        "grad_norm_peak_ratio": max(norms) / median if norms and median else None,
    }


def eval_metrics(result: dict[str, Any], transcripts: Iterable[dict[str, Any]] = ()) -> dict[str, float | None]:
    """The table's metrics from one eval.json: pass rate, EPM-Q, the held-out IDR return D_0 - D_T,
    alignment, and the reward-hacking monitor. A monitor figure an older eval.json lacks is computed
    from its `transcripts` (the monitor is a function of the replies), else None."""
    from mapo.core.rewards import rewards_from_distances

    summary = result["summary"]
    returns = [
        sum(rewards_from_distances(sample["distances"], "idr"))
        for scenario in result["scenarios"]
        for sample in scenario["samples"]
        if len(sample["distances"]) > 1
    ]
    hacking = monitor_figures(summary.get("hacking") or {}, transcripts)
    figures = summary.get("figures") or {}
    return {
        "pass_rate": 100.0 * summary["pass_rate"],
        "epmq": summary["epmq"]["epmq"] if summary.get("epmq") else None,
        "return": float(np.mean(returns)) if returns else None,
        "alignment": summary["alignment"]["target"],
        **{key: hacking.get(key) for key, _ in HACKING_METRICS},
        **{key: figures.get(key) for key, _ in GAME_METRICS},
    }


def reaches(value: float, target: float) -> bool:
    """value >= target, counting a float a rounding away as there: 23 of 40 games is 100 * 0.575 =
    57.49999999999999 %, which must reach a target of 57.5 %."""
    return value >= target or math.isclose(value, target, rel_tol=1e-9, abs_tol=1e-12)


def steps_to_reach(series: Sequence[float], target: float, window: int = 3) -> int | None:
    """The first step (1-based, at least `window`) at which the mean of `series` over the last
    `window` steps reaches `target`; None if it never does. A trailing mean, so one lucky step of
    a noisy on-policy success rate does not count as reaching it."""
    for step in range(window, len(series) + 1):
        if reaches(float(np.mean(series[step - window:step])), target):
            return step
    return None


def steps_to_half(success: dict[str, Sequence[float]], final: dict[str, float | None], steps: int,
                  variant_of: dict[str, str], start: float = 0.0) -> dict[str, float]:
    """Per unit: the steps its training success (env_success_rate per step, 0-1) needs to reach half
    the way from `start` to the best variant's final held-out success (`final`: a unit's held-out
    success in %, averaged per variant; `start` in % too: 0 for half the best success, the untrained
    policy's for half the best gain, the figure that still moves from a warm start). A run that never
    reaches it counts as `steps` + 1 (censored: the figure is then a lower bound, which is why the
    report says how many were). Empty when nothing was evaluated or no variant beat `start`."""
    target = half_target(final, variant_of, start)
    if target is None:
        return {}
    return {unit: float(steps_to_reach(series, target / 100.0) or steps + 1) for unit, series in success.items()}


def half_target(final: dict[str, float | None], variant_of: dict[str, str], start: float = 0.0) -> float | None:
    """Half the way from `start` to the best variant's mean final held-out success (both in %);
    None when nothing was evaluated or no variant beat `start`."""
    by_variant: dict[str, list[float]] = {}
    for unit, value in final.items():
        if value is not None and unit in variant_of:
            by_variant.setdefault(variant_of[unit], []).append(value)
    best = max((float(np.mean(v)) for v in by_variant.values()), default=None)
    return None if best is None or best <= start else start + 0.5 * (best - start)


def heldout_steps_to(points: dict[int, float], target: float, steps: int, checks: Sequence[int]) -> float | None:
    """The first checked step after the start whose held-out success (%) reaches `target`; `steps` + 1
    when none does (censored, as in steps_to_half); None when one of `checks` before that is missing
    (a run trained before the plan had a curve, or one whose checkpoint was lost): the first
    crossing is then not known. Checks are sparse, so no trailing mean: each is a held-out
    evaluation, not one step's own rollouts."""
    for step in sorted({*checks, *(s for s in points if s > 0)}):
        if step not in points:
            return None
        if reaches(points[step], target):
            return float(step)
    return float(steps + 1)


def dialogue_key(scenario_id: str, sample_index: int) -> str:
    return f"{scenario_id}#{sample_index}"


def dialogue_metrics(result: dict[str, Any], transcripts: Iterable[dict[str, Any]] = ()) -> dict[str, dict[str, float | None]]:
    """Per held-out dialogue ("<scenario>#<sample>"): passed (100 or 0), EPM-Q, IDR return D_0 - D_T,
    alignment, and the reward-hacking monitor over its own replies (from its transcript record;
    None without one: distinct-2 here is within the dialogue, not across the evaluation)."""
    hacking = {
        dialogue_key(r["scenario_id"], r["sample_index"]):
            transcript_hacking_metrics([r])
        for r in transcripts
    }
    found = {}
    for scenario in result["scenarios"]:
        for sample in scenario["samples"]:
            distances, epmq = sample["distances"], sample.get("epmq")
            key = dialogue_key(scenario["scenario_id"], sample["sample_index"])
            monitor = hacking.get(key, {})
            found[key] = {
                "pass_rate": 100.0 * (sample.get("outcome") == "success"),
                "epmq": epmq["epmq"] if epmq else None,
                "return": distances[0] - distances[-1] if len(distances) > 1 else None,
                "alignment": (sample.get("alignment") or {}).get("target"),
                **{k: monitor.get(k) for k, _ in HACKING_METRICS},
            }
    return found


def _worse_share(diffs: np.ndarray, key: str) -> float | None:
    """The share of paired differences in the worse direction for this metric."""
    if not diffs.size:
        return None
    return float(np.mean(diffs > 0 if key in LOWER_IS_BETTER else diffs < 0))


def _compared(plan: AblationPlan, reference: str, present: Iterable[str]) -> list[str]:
    """The variants compared with the reference: the base when it was measured, then the others."""
    return [v for v in ["base", *plan.variants] if v != reference and (v != "base" or "base" in present)]


def _name(variant: str, seed: int, present: Iterable[str]) -> str:
    return base_name(seed, present) if variant == "base" else Unit(variant, seed).name


def base_name(seed: int, present: Iterable[str]) -> str:
    """The evaluation `seed`'s runs started from: its own (`base-s<seed>`, an export of shares
    from several warm starts) where there is one, else the base."""
    return seed_base_name(seed) if seed_base_name(seed) in present else "base"


def _seeds_run(per_unit: Iterable[str], plan: AblationPlan) -> list[int]:
    """The plan's seeds with a unit in `per_unit` (a seed yet to run has no start to count)."""
    return [s for s in plan.seeds if any(Unit(v, s).name in per_unit for v in plan.variants)]


def seed_starts(per_unit: dict[str, dict[str, float | None]], plan: AblationPlan, key: str = "pass_rate") -> dict[int, float]:
    """Per seed, `key` of the policy its runs started from (empty when the base was not evaluated)."""
    if "base" not in per_unit:
        return {}
    found = {s: per_unit[base_name(s, per_unit)].get(key) for s in _seeds_run(per_unit, plan)}
    return {s: float(v) for s, v in found.items() if v is not None}


def paired_dialogue_rows(
    per_dialogue: dict[str, dict[str, dict[str, float | None]]],
    plan: AblationPlan,
    reference: str = PAIRED_REFERENCE,
    metrics: Sequence[tuple[str, str]] = DIALOGUE_METRICS,
) -> list[dict[str, Any]]:
    """Per variant and metric: the difference to the reference on the same held-out dialogue at the
    same seed (the base: the evaluation of the seed's start, `base_name`), pooled over seeds and dialogues: n, mean,
    the 95 % two-stage cluster bootstrap interval (seeds, then dialogues) and the share worse.

    Dialogues of one run share a policy: they are not independent draws, which is why the
    interval resamples whole seeds first rather than treating the dialogues as n independent pairs.
    """
    rows = []
    for variant in _compared(plan, reference, per_dialogue):
        stats: dict[str, Any] = {}
        for key, _ in metrics:
            clusters: list[list[float]] = []
            for seed in plan.seeds:
                mine, theirs = per_dialogue.get(_name(variant, seed, per_dialogue)), per_dialogue.get(Unit(reference, seed).name)
                if mine is None or theirs is None:
                    continue
                clusters.append([mine[d][key] - theirs[d][key] for d in theirs  # type: ignore[operator]
                                 if d in mine and mine[d].get(key) is not None and theirs[d].get(key) is not None])
            pooled = np.asarray([x for c in clusters for x in c], dtype=float)
            low, high = cluster_bootstrap(clusters)
            stats[key] = {"n": int(pooled.size), "seeds": sum(1 for c in clusters if c),
                          "mean": float(pooled.mean()) if pooled.size else None, "low": low, "high": high,
                          "worse": _worse_share(pooled, key)}
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
    per_unit: dict[str, dict[str, float | None]], plan: AblationPlan, metrics: Sequence[tuple[str, str]] = METRICS,
    variants: Sequence[str] | None = None,
) -> list[dict[str, Any]]:
    """One row for the base (if present) and one per variant (default: the plan's): each metric's
    mean/std over the variant's seeds; a metric a unit lacks counts as missing. The base row is its
    one evaluation, or, where seeds started from different policies (`base_name`), the mean over
    the seeds run of each seed's start."""
    rows = []
    if "base" in per_unit:
        starts = {s: base_name(s, per_unit) for s in _seeds_run(per_unit, plan)}
        seeds = list(starts) if set(starts.values()) - {"base"} else []
        names = [starts[s] for s in seeds] or ["base"]
        rows.append({"variant": "base", "seeds": seeds,
                     "metrics": {k: mean_std([per_unit[n].get(k) for n in names]) for k, _ in metrics}})
    for variant in plan.variants if variants is None else variants:
        found = [(s, per_unit[Unit(variant, s).name]) for s in plan.seeds if Unit(variant, s).name in per_unit]
        rows.append(
            {
                "variant": variant,
                "seeds": [s for s, _ in found],
                "metrics": {k: mean_std([m.get(k) for _, m in found]) for k, _ in metrics},
            }
        )
    return rows


def paired_rows(
    per_unit: dict[str, dict[str, float | None]],
    plan: AblationPlan,
    reference: str = PAIRED_REFERENCE,
    metrics: Sequence[tuple[str, str]] = METRICS,
) -> list[dict[str, Any]]:
    """Per variant (and the base), each metric minus the reference variant's at the same seed:
    mean, sample std and the 95 % t interval over seeds (`intervals.t_interval`).

    Runs with the same seed share their random streams (scenarios, sampling noise), so the
    paired difference removes the between-seed spread that dominates a few-seed table. The base
    pairs each seed's reference with the evaluation of that seed's start (`base_name`).
    """
    rows = []
    for variant in _compared(plan, reference, per_unit):
        seeds = [s for s in plan.seeds if _name(variant, s, per_unit) in per_unit and Unit(reference, s).name in per_unit]
        diffs = {}
        for key, _ in metrics:
            pairs = [(per_unit[_name(variant, s, per_unit)].get(key), per_unit[Unit(reference, s).name].get(key)) for s in seeds]
            found = t_interval([a - b if a is not None and b is not None else None for a, b in pairs])
            kept = [v for v in found["values"] if v is not None and math.isfinite(v)]
            found["worse"] = _worse_share(np.asarray(kept, dtype=float), key)
            diffs[key] = found
        # the seeds some metric of the row pairs at (a run still going has training figures, no evaluation)
        paired = [s for k, s in enumerate(seeds) if any(d["values"][k] is not None for d in diffs.values())]
        rows.append({"variant": variant, "seeds": paired, "metrics": diffs})
    return rows
