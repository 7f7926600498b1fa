"""`mapo bench train`: one packed sequence per trajectory vs one sequence per turn.

The rollout, rewards, advantages and the packed sequences are the library's own (mapo.core.rollout,
mapo.core.step: what a training step trains on). The per-turn layout (`mapo.core.losses.per_turn_sequences`)
is one the library does NOT train with: it is built here only as the baseline the packed layout
is measured against. Both updates see the same trajectories, advantages, optimizer settings and
start from the same weights (restored in between); the per-turn layout re-reads every earlier
turn once per later turn, the packed one reads the dialogue once.
Reported: seconds per update, tokens fed to the model, trained tokens per second,
and the per-turn/packed time ratio.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import torch

from mapo.config import TrainConfig
from mapo.core.losses import TrainSequence, per_turn_sequences
from mapo.core.rollout import RolloutSpec, rollout
from mapo.core.step import advantages_of, score, training_batch
from mapo.core.types import Scenario
from mapo.core.update import make_optimizer, update
from mapo.lab.bench import bench_rollout_spec
from mapo.policy import Policy


def _timed_update(
    policy: Policy, sequences: list[TrainSequence], config: TrainConfig, spec: RolloutSpec
) -> dict[str, float]:
    snapshot = [p.detach().clone() for p in policy.trainable_parameters()]
    optimizer = make_optimizer(policy, config.optim)
    start = time.perf_counter()
    # the update as a training step calls it (mapo.core.step.train_step): importance-corrected against the sampler
    stats = update(
        policy, optimizer, sequences, config.optim, config.loss, spec.temperature, off_policy=True, top_p=spec.top_p
    )
    seconds = time.perf_counter() - start
    with torch.no_grad():
        for p, saved in zip(policy.trainable_parameters(), snapshot):
            p.copy_(saved)
    trained = sum(s.n_trained for s in sequences) * config.optim.ppo_epochs
    return {
        "sequences": len(sequences),
        "input_tokens": sum(len(s.input_ids) for s in sequences) * config.optim.ppo_epochs,
        "trained_tokens": trained,
        "seconds": seconds,
        "trained_tokens_per_s": trained / max(seconds, 1e-9),
        "loss": stats["loss"],
    }


def bench_train(
    policy: Policy,
    scenarios: list[Scenario],
    make_env: Any,
    config: TrainConfig,
    trajectories: int = 4,
    turns: int = 6,
    max_new_tokens: int | None = None,
    repeats: int = 1,
) -> dict[str, Any]:
    """Roll out `trajectories` dialogues of up to `turns` turns, then time both update layouts."""
    max_new_tokens = max_new_tokens or config.rollout.max_new_tokens
    chosen, spec = bench_rollout_spec(config, scenarios, trajectories, turns, max_new_tokens)
    torch.manual_seed(config.seed)
    with ThreadPoolExecutor(max_workers=config.rollout.env_workers) as pool:
        groups = rollout(policy, chosen, make_env, spec, seed=config.seed, pool=pool)
    score(groups, config.reward.kind)
    advantages = advantages_of(groups, config.advantage).values
    pairs = [(t, a) for g, ga in zip(groups, advantages) for t, a in zip(g.trajectories, ga)]
    layouts = {
        "packed": training_batch(groups, advantages),
        "per_turn": [s for t, a in pairs for s in per_turn_sequences(t, a)],  # the baseline only
    }
    if not layouts["packed"]:
        raise ValueError("no turn received an advantage (every group had one trajectory?); nothing to train")
    rows: dict[str, list[dict[str, float]]] = {"packed": [], "per_turn": []}
    for r in range(repeats):
        for mode in ("packed", "per_turn") if r % 2 == 0 else ("per_turn", "packed"):
            rows[mode].append(_timed_update(policy, layouts[mode], config, spec))
    summary = {}
    for mode, results in rows.items():
        total = {k: sum(x[k] for x in results) for k in ("input_tokens", "trained_tokens", "seconds")}
        total["sequences"] = results[0]["sequences"]
        total["trained_tokens_per_s"] = total["trained_tokens"] / max(total["seconds"], 1e-9)
        summary[mode] = total
    turn_counts = [len(t) for t, _ in pairs]
    return {
        "settings": {
            "trajectories": trajectories,
            "turns": turns,
            "max_new_tokens": max_new_tokens,
            "repeats": repeats,
            "turns_per_trajectory": turn_counts,
            "trained_turns": sum(1 for _, a in pairs for x in a if x is not None),
        },
        "modes": summary,
        "repeats": rows,
        "ratios": {"speedup": summary["per_turn"]["seconds"] / max(summary["packed"]["seconds"], 1e-9)},
        "target": {"speedup": 2.0},
    }


COLUMNS = [
    ("sequences", "sequences", "{:.0f}"),
    ("input_tokens", "tokens in", "{:.0f}"),
    ("trained_tokens", "trained tokens", "{:.0f}"),
    ("seconds", "update s", "{:.2f}"),
    ("trained_tokens_per_s", "trained tok/s", "{:.1f}"),
]
