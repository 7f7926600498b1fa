"""`mapo bench rollout`: the rollout engines side by side, and batched vs one trajectory at a time.

Every mode runs the same policy, environment, caps, stop rules and seeds. `hf` samples all
active trajectories of a turn in one `generate` call (the trainer's own model); `sequential`
rolls out each trajectory alone with it (`--no-sequential` leaves it out); each installed
engine of `--engine` (default: every one that can run here) samples the same dialogues, its
weights synced once first; an engine that batches continuously (vLLM) is also run in waves
(`<engine>-waves`, `InWaves`), so the two schedules are compared in the same run. Reported per mode: tokens and turns per second of generation time
and of wall time (generation + environment), where the time goes (`breakdown`), and for each
engine its start-up (process-level: every `mapo train`, ablate unit and eval pays it), one
weight sync, and the behaviour-vs-trainer mismatch on its samples (the importance-weight
statistics training logs). Ratios are against `hf` measured in the same run.
"""

from __future__ import annotations

import dataclasses
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import torch

from mapo.config import TrainConfig
from mapo.core.losses import training_sequences
from mapo.core.rollout import RolloutSpec, rollout
from mapo.core.types import Group, Scenario
from mapo.engines.base import ContinuousEngine, RolloutEngine
from mapo.engines.factory import make_engine
from mapo.engines.importance import mismatch_stats
from mapo.lab.bench import bench_rollout_spec
from mapo.policy import Policy


def measure(
    policy: Policy,
    runs: list[tuple[list[Scenario], RolloutSpec]],
    make_env: Any,
    pool: ThreadPoolExecutor,
    seed: int,
    engine: RolloutEngine | None = None,
) -> tuple[dict[str, Any], list[Group]]:
    """Roll out `runs` one after another; their timings and token counts, and the groups."""
    timings: dict[str, float] = {}
    groups: list[Group] = []
    before = dict(getattr(engine, "stats", {}))
    start = time.perf_counter()
    for k, (scenarios, spec) in enumerate(runs):
        torch.manual_seed(seed + k)
        groups += rollout(
            policy, scenarios, make_env, spec, seed=seed + 1000 * k, pool=pool, timings=timings, engine=engine
        )
    wall = time.perf_counter() - start
    turns = [turn for g in groups for t in g.trajectories for turn in t.turns]
    after = getattr(engine, "stats", {})
    row: dict[str, Any] = {
        "trajectories": sum(len(g) for g in groups),
        "turns": len(turns),
        "generated_tokens": sum(len(turn.response_ids) for turn in turns),
        "generate_s": timings["generate"],
        "env_s": timings["env"],
        "wall_s": wall,
    }
    engine_stats = {key: after[key] - before.get(key, 0) for key in after}
    if engine_stats:
        row["engine"] = engine_stats
    return _rates(row), groups


def _rates(row: dict[str, Any]) -> dict[str, Any]:
    row["tokens_per_s_generate"] = row["generated_tokens"] / max(row["generate_s"], 1e-9)
    row["tokens_per_s_wall"] = row["generated_tokens"] / max(row["wall_s"], 1e-9)
    row["turns_per_s_wall"] = row["turns"] / max(row["wall_s"], 1e-9)
    return row


def trainer_and_sampler_logprobs(
    policy: Policy, groups: list[Group], temperature: float, top_p: float = 1.0
) -> tuple[np.ndarray, np.ndarray]:
    """(the torch model's log-probs, the sampler's) of every sampled reply token, over the sequences
    training would build (one per dialogue, or one per reply under a history window)."""
    old, behaviour = [], []
    for group in groups:
        for trajectory in group.trajectories:
            for seq in training_sequences(trajectory, [0.0] * len(trajectory.turns)):
                ids = torch.tensor([seq.input_ids], dtype=torch.long)
                targets = torch.tensor([seq.trained], dtype=torch.bool)
                with torch.no_grad():
                    logp, _ = policy.token_logprobs(ids, torch.ones_like(ids), targets, temperature=temperature, top_p=top_p)
                old += logp[0].tolist()  # one row: the union of target positions is its own, in order
                behaviour += [x for x, trained in zip(seq.old_logprobs, seq.trained) if trained]
    return np.asarray(old), np.asarray(behaviour)


class InWaves:
    """`engine` without its continuous batching: the rollout samples it a turn index at a time,
    every turn waiting for its wave's longest reply (the bench's `<engine>-waves` mode)."""

    def __init__(self, engine: RolloutEngine) -> None:
        self._engine = engine

    def __getattr__(self, name: str) -> Any:
        if name in ("submit", "finished", "cancel"):  # mapo.engines.base.ContinuousEngine's
            raise AttributeError(name)
        return getattr(self._engine, name)


def available_engines(policy: Policy) -> dict[str, str | None]:
    """Each engine other than hf, and why it cannot run here (None when it can)."""
    from mapo.engines.vllm_setup import missing_requirement, supports

    return {"vllm": missing_requirement() or supports(policy.model)}


def start_engine(name: str, policy: Policy, spec: RolloutSpec, slots: int) -> tuple[RolloutEngine, dict[str, float]]:
    """The engine, synced to the policy's weights, and what starting it cost (construction, first sync)."""
    from mapo.engines.vllm_engine import shut_down_kept

    shut_down_kept()  # a started engine kept from earlier in this process would hide the start-up
    began = time.perf_counter()
    engine = make_engine(name, policy, slots, spec.max_context_tokens, vllm=spec.vllm)
    built = time.perf_counter()
    engine.sync(0)
    return engine, {"start_s": built - began, "first_sync_s": time.perf_counter() - built}


def bench_rollout(
    policy: Policy,
    scenarios: list[Scenario],
    make_env: Any,
    config: TrainConfig,
    trajectories: int = 16,
    turns: int | None = None,
    max_new_tokens: int | None = None,
    repeats: int = 1,
    engines: tuple[str, ...] | None = None,
    sequential: bool = True,
) -> dict[str, Any]:
    """Time `trajectories` dialogues in every mode, alternating the order over `repeats`.

    `turns` and `max_new_tokens` default to the config's rollout.max_turns / max_new_tokens;
    `engines` names the engines beside hf (default: every one installed; () for none).
    """
    turns = turns or config.rollout.max_turns
    max_new_tokens = max_new_tokens or config.rollout.max_new_tokens
    chosen, base = bench_rollout_spec(config, scenarios, trajectories, turns, max_new_tokens)
    single = dataclasses.replace(base, samples_per_scenario=1, scenarios_per_step=1)
    n = base.samples_per_scenario
    reasons = available_engines(policy)
    wanted = list(reasons) if engines is None else list(engines)
    skipped = {name: reasons.get(name) or "unknown engine" for name in wanted if reasons.get(name, "unknown engine")}
    runs: dict[str, list[tuple[list[Scenario], RolloutSpec]]] = {"hf": [(chosen, base)]}
    if sequential:
        runs["sequential"] = [([s], single) for s in chosen for _ in range(n)]
    started: dict[str, RolloutEngine] = {}
    views: dict[str, RolloutEngine] = {}  # mode -> the engine it samples with
    extra: dict[str, Any] = {"skipped": skipped} if skipped else {}
    sampled: dict[str, list[Group]] = {}
    totals: dict[str, list[dict[str, Any]]] = {}
    try:
        for name in [e for e in wanted if e not in skipped]:
            engine, cost = start_engine(name, policy, base, trajectories)
            started[name] = views[name] = engine
            extra.setdefault("engines", {})[name] = cost
            runs[name] = [(chosen, base)]
            if isinstance(engine, ContinuousEngine):
                views[f"{name}-waves"] = InWaves(engine)
                runs[f"{name}-waves"] = [(chosen, base)]
        modes = list(runs)
        totals = {mode: [] for mode in modes}
        with ThreadPoolExecutor(max_workers=config.rollout.env_workers) as pool:
            for r in range(repeats):
                for mode in modes if r % 2 == 0 else modes[::-1]:
                    engine = views.get(mode)
                    if engine is not None:
                        engine.sync(0)  # an empty cache: no mode starts from prefixes another left behind
                    row, groups = measure(policy, runs[mode], make_env, pool, config.seed + r, engine)
                    totals[mode].append(row)
                    sampled.setdefault(mode, groups)
        for name in extra.get("engines", {}):
            engine = started[name]
            sync = engine.sync(1)
            extra["engines"][name].update({
                "sync_s": sync.export_s + sync.load_s, "sync_mb": sync.bytes / 1e6,
                "mismatch": vars(mismatch_stats(*trainer_and_sampler_logprobs(
                    policy, sampled[name], base.temperature, base.top_p))),
            })
    finally:
        for engine in started.values():
            engine.close()
    summary = {mode: _sum(rows) for mode, rows in totals.items()}
    ratios: dict[str, float] = {}
    for mode in summary:
        if mode == "hf":
            continue
        for key in ("tokens_per_s_generate", "tokens_per_s_wall", "turns_per_s_wall"):
            ratios[f"{mode}_over_hf_{key}"] = summary[mode][key] / max(summary["hf"][key], 1e-9)
    return {
        **extra,
        "settings": {
            "trajectories": trajectories, "turns": turns, "max_new_tokens": max_new_tokens,
            "max_sentences": base.max_sentences, "temperature": base.temperature, "repeats": repeats,
            "samples_per_scenario": n,
        },
        "modes": summary,
        "repeats": totals,
        "ratios": ratios,
    }


def _sum(rows: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {
        k: sum(r[k] for r in rows) for k in ("trajectories", "turns", "generated_tokens", "generate_s", "env_s", "wall_s")
    }
    stats = [r["engine"] for r in rows if "engine" in r]
    if stats:
        out["engine"] = {key: sum(s.get(key, 0) for s in stats) for key in stats[0]}
    return _rates(out)


COLUMNS = [
    ("trajectories", "trajectories", "{:.0f}"),
    ("turns", "turns", "{:.0f}"),
    ("generated_tokens", "tokens", "{:.0f}"),
    ("generate_s", "generate s", "{:.1f}"),
    ("env_s", "env s", "{:.1f}"),
    ("tokens_per_s_wall", "tok/s (wall)", "{:.1f}"),
    ("turns_per_s_wall", "turns/s (wall)", "{:.2f}"),
]
