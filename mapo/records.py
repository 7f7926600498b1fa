"""What a run writes about its dialogues: one step's metrics and the transcript records.

Shared by training (`metrics.jsonl`, `transcripts.jsonl` of a run folder) and evaluation
(`mapo eval`'s transcripts), so a turn reads the same wherever it was written.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from mapo.core.types import Group, Nested, Turn
from mapo.degeneracy import HACKING_HIGHER_IS_BETTER, HACKING_LABELS, dialogue_hacking_metrics

# Metrics that measure the machine, not the learning: two runs of the same config differ in them.
RUNTIME_KEYS = (
    "threads",
    "time_rollout",
    "time_generate",
    "time_env",
    "time_update",
    "step_time",
    "tokens_per_s_rollout",
    "tokens_per_s_train",
    "wall_time",
    "time_redundancy",  # mapo.methods: seconds spent in an optional method's own work
    "time_distill",
    # the rollout engine's weight sync (mapo.engines): seconds, not results
    "time_sync",
    "sync_export_s",
    "sync_load_s",
    "sync_s",
    # the process's memory after the step (mapo.runtime.memory_figures)
    "memory_rss_gb",
    "memory_heap_used_gb",
    "memory_heap_free_gb",
)


def _stats(values: Sequence[float], prefix: str) -> dict[str, float]:
    if not values:
        return {}
    a = np.asarray(values, dtype=float)
    return {
        f"{prefix}_mean": float(a.mean()),
        f"{prefix}_std": float(a.std()),
        f"{prefix}_abs_mean": float(np.abs(a).mean()),
    }


def rollout_metrics(groups: Sequence[Group], advantages: Nested, components: dict[str, Nested]) -> dict[str, float]:
    """Rewards, outcomes, lengths, advantage statistics and the reward-hacking monitor of one step."""
    trajectories = [t for g in groups for t in g.trajectories]
    turns = [turn for t in trajectories for turn in t.turns]
    reasons = Counter(t.done_reason or "unknown" for t in trajectories)
    metrics: dict[str, float] = {
        "reward_mean": float(np.mean([turn.reward for turn in turns])),
        "return_mean": float(np.mean([sum(t.rewards) for t in trajectories])),
        "success_rate": reasons["success"] / len(trajectories),
        "turns_mean": float(np.mean([len(t) for t in trajectories])),
        "final_distance_mean": float(np.mean([t.distances[-1] for t in trajectories])),
        "response_length_mean": float(np.mean([len(turn.response_ids) for turn in turns])),
        "truncated_fraction": float(np.mean([turn.truncated for turn in turns])),
    }
    metrics.update({f"done_{reason}": count / len(trajectories) for reason, count in sorted(reasons.items())})
    flat = [a for g in advantages for t in g for a in t if a is not None]
    metrics["trained_turn_fraction"] = len(flat) / len(turns)
    metrics.update(_stats(flat, "adv"))
    for name, values in components.items():
        metrics.update(_stats([a for g in values for t in g for a in t if a is not None], f"adv_{name}"))
    # The judge's own degeneracy detectors over the step's replies: the reward-hacking monitor.
    metrics.update(dialogue_hacking_metrics([(u.user_message, u.response) for u in t.turns] for t in trajectories))
    return metrics


def turn_record(turn: Turn, scored: dict[str, Any] | None = None, extras: Iterable[str] = ()) -> dict[str, Any]:
    """One turn as a transcript entry; `scored` (reward, advantage) follows the reply, then the
    judge's view, then the turn-info keys named in `extras` that the turn has."""
    return {
        "turn": turn.index,
        "user": turn.user_message,
        "response": turn.response,
        **(scored or {}),
        "action": list(turn.action),
        "state": list(turn.state),
        "distance": turn.distance,
        "levels": turn.levels,
        "response_tokens": len(turn.response_ids),
        "truncated": turn.truncated,
        **{key: turn.info[key] for key in extras if key in turn.info},
    }


def transcript_records(step: int, groups: Sequence[Group], advantages: Nested, extras: Iterable[str] = ()) -> list[dict[str, Any]]:
    """A training step's dialogues, one record each, with every turn's reward and advantage."""
    extras = tuple(extras)
    records = []
    for group, group_adv in zip(groups, advantages):
        for trajectory, traj_adv in zip(group.trajectories, group_adv):
            records.append(
                {
                    "step": step,
                    "scenario_id": trajectory.scenario_id,
                    "sample_index": trajectory.sample_index,
                    "done_reason": trajectory.done_reason,
                    "return": sum(trajectory.rewards),
                    "initial_state": list(trajectory.initial_state),
                    "turns": [
                        turn_record(turn, {"reward": turn.reward, "advantage": adv}, extras)
                        for turn, adv in zip(trajectory.turns, traj_adv)
                    ],
                }
            )
    return records


def reward_trend(metrics: Sequence[dict[str, Any]]) -> str:
    """One line on how the per-turn reward moved: first third vs last third of the steps, and the slope."""
    steps = [m["step"] for m in metrics]
    rewards = [m["reward_mean"] for m in metrics]
    if len(rewards) < 2:
        return f"reward_mean {rewards[0]:+.3f} (one step)" if rewards else "no steps logged"
    k = max(1, len(rewards) // 3)
    slope = float(np.polyfit(steps, rewards, 1)[0])
    return (
        f"reward_mean: steps {steps[0]}-{steps[k - 1]} {np.mean(rewards[:k]):+.3f} -> "
        f"steps {steps[-k]}-{steps[-1]} {np.mean(rewards[-k:]):+.3f} (slope {slope:+.3f} per step)"
    )


def monitor_worst_mover(metrics: Sequence[dict[str, Any]]) -> str:
    """The reward-hacking monitor's signal that moved most the wrong way, first third of the
    steps against the last third ("nothing worse" when none did); "" without monitor figures."""
    k = max(1, len(metrics) // 3)
    moves = []
    for key, label in HACKING_LABELS.items():
        values = [m[key] for m in metrics if key in m]
        if len(values) < 2:
            continue
        first, last = float(np.mean(values[:k])), float(np.mean(values[-k:]))
        worse_by = (first - last) if key in HACKING_HIGHER_IS_BETTER else (last - first)
        moves.append((worse_by, label, first, last))
    if not moves:
        return ""
    worse_by, label, first, last = max(moves)
    if worse_by <= 0:
        return "monitor: no signal worse than at the start"
    return f"monitor: worst mover {label} {first:.3f} -> {last:.3f} (first vs last third of the steps)"


def training_summary(metrics: Sequence[dict[str, Any]], run_dir: str, base_model: str) -> list[str]:
    """What `mapo train` prints at the end: the reward of the first and last steps and its trend,
    the monitor's worst mover, where the run and its report are, and the evaluations to run next
    (the trained policy and `base_model`, the policy it started from)."""
    lines = []
    if metrics:
        first, last = metrics[0], metrics[-1]
        lines.append(
            f"reward_mean: step {first['step']} {first['reward_mean']:+.3f}, step {last['step']} {last['reward_mean']:+.3f}"
        )
    lines.append(reward_trend(metrics))
    worst = monitor_worst_mover(metrics)
    if worst:
        lines.append(worst)
    lines += [
        f"Run folder: {run_dir}",
        f"Report: {run_dir}/report.html",
        f"Next: mapo eval --model {run_dir} --output {run_dir}/eval && mapo eval --model {base_model} --output {run_dir}/eval-base"
        f" && mapo compare {run_dir}/eval-base {run_dir}/eval",
    ]
    return lines
