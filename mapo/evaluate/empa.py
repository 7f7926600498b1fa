"""The EMPA-style multi-turn benchmark: per-dialogue metrics and their aggregate.

A dialogue's metrics are recomputed from its trajectory alone (P_0, each turn's v_t
and judge levels) with `mapo.envs.dynamics`, so they do not depend on what an
environment chose to put in its step info:

- outcome ("success" | "failure" | "timeout" | "other") and the reason the dialogue ended;
- EPM-Q with its nine indices and three components (`dynamics.epmq`);
- mean alignment of v_t to v*_0 and to the current deficit -P_{t-1}, overall and per
  axis (each axis's share of the cosine; the shares sum to the cosine);
- the distance curve D_0..D_T and the need vector P_t per turn;
- fallback counts (turns where an LLM role could not produce a valid output);
- over all replies of the evaluation, the reward-hacking monitor (`mapo.degeneracy`).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from mapo.core.types import AXES, OUTCOMES, Scenario, Trajectory, outcome_of
from mapo.degeneracy import HACKING_LABELS, dialogue_hacking_metrics
from mapo.envs.dynamics import EPMQ_INDICES, DynamicsConfig, NeedState, epmq
from mapo.records import turn_record

EPMQ_KEYS = (*EPMQ_INDICES, "outcome", "efficiency", "stability", "epmq")


def transcript_hacking_metrics(transcripts: Iterable[Mapping[str, Any]]) -> dict[str, float]:
    """The reward-hacking monitor over transcript records (each with turns of user and response)."""
    return dialogue_hacking_metrics([(t["user"], t["response"]) for t in r["turns"]] for r in transcripts)


def monitor_figures(hacking: Mapping[str, float], transcripts: Iterable[Mapping[str, Any]]) -> dict[str, float]:
    """An evaluation's reward-hacking monitor: the figures its summary has (`hacking`), and any it
    lacks (an eval.json written before that figure existed) computed from its `transcripts`, since
    the monitor is a function of the replies. Without transcripts, `hacking` as it is."""
    transcripts = list(transcripts)
    if not transcripts or all(key in hacking for key in HACKING_LABELS):
        return dict(hacking)
    return {**transcript_hacking_metrics(transcripts), **hacking}


def initial_state_of(trajectory: Trajectory) -> tuple[float, ...]:
    """P_0: the trajectory's own, else recovered from the first turn (P_1 - v_1).

    The first turn also wins when the two disagree in size: an environment may keep a
    state of its own (e.g. the K = 1 emotion score on an empathy card's scenario).
    """
    first = trajectory.turns[0] if trajectory.turns else None
    recovered = (
        tuple(float(s) - float(a) for s, a in zip(first.state, first.action))
        if first is not None and first.state and len(first.state) == len(first.action)
        else None
    )
    if trajectory.initial_state and (recovered is None or len(recovered) == len(trajectory.initial_state)):
        return tuple(float(x) for x in trajectory.initial_state)
    if recovered is not None:
        return recovered
    raise ValueError(f"trajectory of scenario {trajectory.scenario_id!r}: no initial state and no turn to recover it from")


def turn_fallbacks(info: Mapping[str, Any]) -> Counter[str]:
    """Which roles fell back on one turn, read from its step info.

    Understands `info["fallbacks"]` as a mapping role -> bool/count, and boolean
    or integer `info["<role>_fallback"]` / `info["fallback"]` entries.
    """
    counts: Counter[str] = Counter()
    for key, value in info.items():
        if key == "fallbacks" and isinstance(value, Mapping):
            for role, flag in value.items():
                counts[str(role)] += int(flag)
        elif key == "fallback" or key.endswith("_fallback"):
            if isinstance(value, (bool, int)):
                counts[key.removesuffix("_fallback") if key != "fallback" else "any"] += int(value)
    return +counts


def fallback_counts(trajectory: Trajectory) -> Counter[str]:
    """How many turns had a fallback, per role (`turn_fallbacks` summed over the turns)."""
    counts: Counter[str] = Counter()
    for turn in trajectory.turns:
        counts.update(turn_fallbacks(turn.info))
    return +counts


def _mean(values: Sequence[float]) -> float:
    return float(np.mean(values)) if len(values) else 0.0


def _axis_means(rows: Sequence[Sequence[float]], axes: Sequence[str]) -> dict[str, float]:
    if not rows:
        return {axis: 0.0 for axis in axes}
    means = np.mean(np.asarray(rows, dtype=float), axis=0)
    return {axis: float(m) for axis, m in zip(axes, means)}


def dialogue_metrics(trajectory: Trajectory, scenario: Scenario | None = None) -> dict[str, Any]:
    """Everything the benchmark reports about one dialogue (plain JSON-ready data). Its dominant
    axis is the empathy scenario's (`EmpathyScenario`); any other scenario has none ("")."""
    from mapo.envs.empathy.cards import EmpathyScenario

    p0 = initial_state_of(trajectory)
    turns = len(trajectory.turns)
    axes = AXES if len(p0) == len(AXES) else tuple(str(i) for i in range(len(p0)))
    # Replay the actions without ending rules: the environment already decided when to stop.
    state = NeedState(p0, DynamicsConfig(success_from_turn=turns + 1, max_turns=turns + 1))
    for turn in trajectory.turns:
        state.step(turn.action, turn.levels or None)
    levels_complete = turns > 0 and all(turn.levels for turn in trajectory.turns)
    score = epmq(state.record()) if levels_complete else None
    return {
        "scenario_id": trajectory.scenario_id,
        "title": scenario.title if scenario else "",
        "category": scenario.category if scenario else "",
        "dominant_axis": scenario.dominant_axis if isinstance(scenario, EmpathyScenario) else "",
        "sample_index": trajectory.sample_index,
        "outcome": outcome_of(trajectory.done_reason),
        "reason": trajectory.done_reason or "unknown",
        "turns": turns,
        "epmq": score,
        "alignment": {
            "target": _mean(state.alignment_target),
            "deficit": _mean(state.alignment_deficit),
            "target_by_axis": _axis_means(state.alignment_target_by_axis, axes),
            "deficit_by_axis": _axis_means(state.alignment_deficit_by_axis, axes),
        },
        "distances": [float(d) for d in state.distances],
        "initial_state": list(p0),
        "final_state": [float(x) for x in state.p],
        "energy": state.energy,
        "fallbacks": dict(fallback_counts(trajectory)),
        "fallback_turns": sum(bool(turn_fallbacks(turn.info)) for turn in trajectory.turns),
    }


def hacking_line(metrics: Mapping[str, float]) -> str:
    """The monitor as one line ("distinct-2 0.812  repetition 0.010 ..."); "n/a" without replies."""
    return "  ".join(f"{label} {metrics[key]:.3f}" for key, label in HACKING_LABELS.items() if key in metrics) or "n/a"


def aggregate(dialogues: Sequence[dict[str, Any]], transcripts: Sequence[Mapping[str, Any]] = ()) -> dict[str, Any]:
    """Pass count and rate, outcome and reason counts, mean EPM-Q (and its parts), success
    rate per dominant axis, mean alignment per axis, fallback totals, and the reward-hacking
    monitor over the replies of `transcripts` (`transcript_record`s; empty without them)."""
    if not dialogues:
        raise ValueError("no dialogues to aggregate")
    n = len(dialogues)
    passes = sum(d["outcome"] == "success" for d in dialogues)
    scored = [d["epmq"] for d in dialogues if d["epmq"] is not None]
    by_axis: dict[str, list[bool]] = defaultdict(list)
    for d in dialogues:
        by_axis[d["dominant_axis"] or "?"].append(d["outcome"] == "success")
    axes = list(dialogues[0]["alignment"]["target_by_axis"])
    fallbacks: Counter[str] = Counter()
    for d in dialogues:
        fallbacks.update(d["fallbacks"])
    return {
        "dialogues": n,
        "scenarios": len({d["scenario_id"] for d in dialogues}),
        "pass_count": passes,
        "pass_rate": passes / n,
        "outcomes": {o: sum(d["outcome"] == o for d in dialogues) for o in OUTCOMES},
        "reasons": dict(Counter(d["reason"] for d in dialogues).most_common()),
        "turns_mean": _mean([d["turns"] for d in dialogues]),
        "final_distance_mean": _mean([d["distances"][-1] for d in dialogues]),
        "epmq_scored": len(scored),
        "epmq": {k: _mean([s[k] for s in scored]) for k in EPMQ_KEYS} if scored else None,
        "success_by_axis": {
            axis: {"dialogues": len(flags), "passes": sum(flags), "rate": sum(flags) / len(flags)}
            for axis, flags in sorted(by_axis.items())
        },
        "alignment": {
            "target": _mean([d["alignment"]["target"] for d in dialogues]),
            "deficit": _mean([d["alignment"]["deficit"] for d in dialogues]),
            "target_by_axis": {a: _mean([d["alignment"]["target_by_axis"][a] for d in dialogues]) for a in axes},
            "deficit_by_axis": {a: _mean([d["alignment"]["deficit_by_axis"][a] for d in dialogues]) for a in axes},
        },
        "fallbacks": dict(sorted(fallbacks.items())),
        "fallback_total": sum(fallbacks.values()),
        # turns with any role's fallback, over all turns: what `mapo.evaluate.validity` judges
        "turns_total": sum(d["turns"] for d in dialogues),
        "fallback_turns": sum(d.get("fallback_turns", 0) for d in dialogues),
        "hacking": transcript_hacking_metrics(transcripts),
    }


def per_scenario(dialogues: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The dialogues grouped by scenario (in first-seen order), with each scenario's pass rate and means."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for d in dialogues:
        groups.setdefault(d["scenario_id"], []).append(d)
    out = []
    for scenario_id, samples in groups.items():
        scored = [s["epmq"]["epmq"] for s in samples if s["epmq"] is not None]
        out.append(
            {
                "scenario_id": scenario_id,
                "title": samples[0]["title"],
                "category": samples[0]["category"],
                "dominant_axis": samples[0]["dominant_axis"],
                "pass_count": sum(s["outcome"] == "success" for s in samples),
                "pass_rate": sum(s["outcome"] == "success" for s in samples) / len(samples),
                "epmq_mean": _mean(scored) if scored else None,
                "samples": list(samples),
            }
        )
    return out


def transcript_record(trajectory: Trajectory, metrics: Mapping[str, Any], extras: Iterable[str] = ()) -> dict[str, Any]:
    """One dialogue as a transcript line (the trainer's transcript fields plus the eval's verdict);
    `extras`: the turn-info keys to keep (the environment's `transcript_keys`)."""
    return {
        "scenario_id": trajectory.scenario_id,
        "title": metrics.get("title", ""),
        "sample_index": trajectory.sample_index,
        "done_reason": trajectory.done_reason,
        "outcome": metrics["outcome"],
        "epmq": metrics["epmq"]["epmq"] if metrics.get("epmq") else None,
        "initial_state": list(metrics["initial_state"]),
        "system_prompt": trajectory.system_prompt,
        "turns": [turn_record(turn, extras=extras) for turn in trajectory.turns],
    }
