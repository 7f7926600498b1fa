"""`mapo bench rollout`: batched vs one trajectory at a time, and the llama.cpp engine vs `hf`.

All modes run the same policy, environment, caps and seeds: `batched` samples all
active trajectories of a turn in one `generate` call (the `hf` engine), `sequential`
rolls out each trajectory alone (`--no-sequential` leaves it out), and, when
llama-cpp-python is installed, `llamacpp` samples the dialogues with the llama.cpp engine
(mapo.engines.llamacpp) with continuous batching across dialogues and turns
(`rollout.continuous: true`) and `llamacpp_waves` with the default turn-synchronous waves, its weights synced once first.
Reported: generated tokens per second of generation time and of wall time (generation +
environment), the ratios batched / sequential and llamacpp / hf (`llamacpp_over_hf`), the
engine's sync time, the behaviour-vs-torch mismatch on its samples (the importance-weight
statistics training logs), and per engine mode where the time goes (`breakdown`: prefill,
decode, sampling, detokenising and stop rules, the worker's own overhead, its idle time, the
round trips, the environment; the decode batch's mean occupancy) against the machine's bound
(mapo.bench.bound: the measured matmul peak and memory bandwidth, the weights' bytes per step).
"""

from __future__ import annotations

import dataclasses
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import torch

from mapo.bench import bench_rollout_spec
from mapo.config import TrainConfig
from mapo.engines.base import RolloutEngine
from mapo.engines.factory import make_engine, resolve_engine
from mapo.engines.hf import HfEngine
from mapo.engines.importance import mismatch_stats
from mapo.bench.bound import decode_bound, machine_limits
from mapo.engines.llamacpp_spec import missing_requirement
from mapo.model_source import resolve_source
from mapo.policy import Policy
from mapo.rollout import RolloutSpec, rollout
from mapo.types import Group, Scenario


def measure(
    policy: Policy,
    runs: list[tuple[list[Scenario], RolloutSpec]],
    make_env: Any,
    pool: ThreadPoolExecutor,
    seed: int,
    engine: RolloutEngine | None = None,
) -> tuple[dict[str, float], list[Group]]:
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
    tokens = sum(len(turn.response_ids) for turn in turns)
    after = getattr(engine, "stats", {})
    worker = {key: after[key] - before.get(key, 0) for key in after}
    return {
        **({"worker": worker} if worker else {}),
        "trajectories": sum(len(g) for g in groups),
        "turns": len(turns),
        "generated_tokens": tokens,
        "generate_s": timings["generate"],
        "env_s": timings["env"],
        "wall_s": wall,
        "tokens_per_s_generate": tokens / max(timings["generate"], 1e-9),
        "tokens_per_s_wall": tokens / max(wall, 1e-9),
    }, groups


def trainer_and_sampler_logprobs(
    policy: Policy, groups: list[Group], temperature: float, top_p: float = 1.0
) -> tuple[np.ndarray, np.ndarray]:
    """(the torch model's log-probs, the sampler's) of every sampled reply token: one forward per dialogue."""
    old, behaviour = [], []
    for group in groups:
        for trajectory in group.trajectories:
            ids = torch.tensor([trajectory.token_ids])
            targets = torch.zeros_like(ids, dtype=torch.bool)
            for turn in trajectory.turns:
                targets[0, turn.prompt_length : turn.prompt_length + len(turn.response_ids)] = True
                behaviour += turn.old_logprobs
            with torch.no_grad():
                logp, _ = policy.token_logprobs(ids, torch.ones_like(ids), targets, temperature=temperature, top_p=top_p)
            old += logp[0].tolist()
    return np.asarray(old), np.asarray(behaviour)


def start_llamacpp(policy: Policy, config: TrainConfig, spec: RolloutSpec, slots: int) -> RolloutEngine | str:
    """The llama.cpp engine for the benchmark, synced to the policy's weights, or why there is none."""
    problem = missing_requirement()
    if problem is None and resolve_engine("auto", policy) != "llamacpp":
        problem = "the policy is not a model the llamacpp engine serves"
    if problem:
        return problem
    kind, path = resolve_source(config.policy)
    engine = make_engine("llamacpp", policy, slots, spec.max_context_tokens, spec.llamacpp,
                         source_gguf=path if kind == "gguf" else None)
    engine.sync(0)
    return engine


def bench_rollout(
    policy: Policy,
    scenarios: list[Scenario],
    make_env: Any,
    config: TrainConfig,
    trajectories: int = 16,
    turns: int | None = None,
    max_new_tokens: int | None = None,
    repeats: int = 1,
    engines: bool = True,
    sequential: bool = True,
) -> dict[str, Any]:
    """Time `trajectories` dialogues in every mode, alternating the order over `repeats`.

    `turns` and `max_new_tokens` default to the config's rollout.max_turns / max_new_tokens;
    `engines=False` leaves the llama.cpp engine out, `sequential=False` the one-at-a-time mode.
    """
    turns = turns or config.rollout.max_turns
    max_new_tokens = max_new_tokens or config.rollout.max_new_tokens
    chosen, base = bench_rollout_spec(config, scenarios, trajectories, turns, max_new_tokens)
    single = dataclasses.replace(base, samples_per_scenario=1, scenarios_per_step=1)
    n = base.samples_per_scenario
    runs = {
        "batched": [(chosen, base)],
        "sequential": [([s], single) for s in chosen for _ in range(n)],
        "llamacpp": [(chosen, dataclasses.replace(base, continuous=True))],
        "llamacpp_waves": [(chosen, dataclasses.replace(base, continuous=False))],
    }
    torch.manual_seed(config.seed)
    HfEngine(policy).sample([policy.first_prompt_ids("warm up", "hello")], 2)  # first-call overheads off the clock
    started = time.perf_counter()
    llama = start_llamacpp(policy, config, base, trajectories) if engines else "--no-engines"
    engine_start_s = time.perf_counter() - started
    modes = ["batched"] + (["sequential"] if sequential else [])
    modes += [] if isinstance(llama, str) else ["llamacpp", "llamacpp_waves"]
    totals: dict[str, list[dict[str, Any]]] = {mode: [] for mode in modes}
    llama_groups: list[Group] = []
    try:
        if not isinstance(llama, str):
            llama.sample([policy.first_prompt_ids("warm up", "hello")], 2)
        with ThreadPoolExecutor(max_workers=config.rollout.env_workers) as pool:
            for r in range(repeats):
                for mode in modes if r % 2 == 0 else modes[::-1]:
                    engine = None if isinstance(llama, str) or not mode.startswith("llamacpp") else llama
                    if engine is not None:
                        llama.sync(0)  # an empty KV cache: no mode starts from prefixes another left in the slots
                    row, groups = measure(policy, runs[mode], make_env, pool, config.seed + r, engine)
                    totals[mode].append(row)
                    if mode == "llamacpp":
                        llama_groups = groups
        extra: dict[str, Any] = {"llamacpp_skipped": llama} if isinstance(llama, str) else {
            "engine_start_s": engine_start_s,
            "base_type": llama.base_type,
            "weight_bytes": llama.base_gguf.stat().st_size,
            "sync": vars(llama.sync(1)),
            "mismatch": vars(
                mismatch_stats(*trainer_and_sampler_logprobs(policy, llama_groups, base.temperature, base.top_p))
            ),
        }
    finally:
        if not isinstance(llama, str):
            llama.close()
    summary = {mode: _sum(rows) for mode, rows in totals.items()}
    if not isinstance(llama, str):
        limits = machine_limits()
        extra["machine_limits"] = limits
        for mode in ("llamacpp", "llamacpp_waves"):
            extra.setdefault("breakdown", {})[mode] = breakdown(summary[mode], extra, policy, limits, trajectories)
    ratios = {}
    if sequential:
        ratios = {
            key: summary["batched"][key] / max(summary["sequential"][key], 1e-9)
            for key in ("tokens_per_s_generate", "tokens_per_s_wall")
        }
    if "llamacpp" in summary:
        for mode, suffix in (("llamacpp", ""), ("llamacpp_waves", "_waves")):
            ratios[f"llamacpp{suffix}_over_hf"] = summary[mode]["tokens_per_s_generate"] / max(
                summary["batched"]["tokens_per_s_generate"], 1e-9
            )
            ratios[f"llamacpp{suffix}_over_hf_wall"] = summary[mode]["tokens_per_s_wall"] / max(
                summary["batched"]["tokens_per_s_wall"], 1e-9
            )
    return {
        **extra,
        "settings": {
            "trajectories": trajectories,
            "turns": turns,
            "max_new_tokens": max_new_tokens,
            "repeats": repeats,
            "samples_per_scenario": n,
        },
        "modes": {mode: {k: v for k, v in row.items() if k != "worker"} for mode, row in summary.items()},
        "repeats": totals,
        "ratios": ratios,
        "target": {"tokens_per_s_generate": 4.0, "llamacpp_over_hf": 4.0},
    }


def breakdown(row: dict[str, Any], engine: dict[str, Any], policy: Policy, limits: dict[str, float], slots: int) -> dict[str, Any]:
    """Where an engine mode's time went, the decode batch's occupancy, and the fraction of the bound reached
    (`engine`: its base type and weight bytes)."""
    worker = row.get("worker", {})
    parts = {key: worker.get(key, 0.0) for key in ("prefill_s", "decode_s", "sample_s", "stop_s")}
    parts["worker_overhead_s"] = worker.get("step_s", 0.0) - sum(parts.values())  # batch filling, bookkeeping
    parts["worker_idle_s"] = max(0.0, worker.get("worker_s", 0.0) - worker.get("step_s", 0.0))  # waiting for contexts
    parts["round_trip_s"] = worker.get("round_trip_s", 0.0)
    parts["env_s"] = row["env_s"]
    rows = worker.get("decode_rows", 0) / max(worker.get("decode_steps", 0), 1)
    decode_rate = worker.get("decode_rows", 0) / max(worker.get("decode_s", 0.0), 1e-9)
    params = sum(p.numel() for name, p in policy.model.named_parameters() if "lora_" not in name)
    peak = limits["matmul_peak_bf16_gflops" if engine["base_type"] == "BF16" else "matmul_peak_fp32_gflops"]
    bound = decode_bound(params, engine["weight_bytes"], rows, peak, limits["memory_gb_s"])
    return {
        **parts,
        "wall_s": row["wall_s"],
        "decode_steps": worker.get("decode_steps", 0),
        "mean_rows": rows,
        "occupancy": rows / slots,
        "decode_tokens_per_s": decode_rate,
        **bound,
        "fraction_of_bound": decode_rate / bound["bound_tokens_per_s"],
    }


def _sum(rows: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {
        k: sum(r[k] for r in rows)
        for k in ("trajectories", "turns", "generated_tokens", "generate_s", "env_s", "wall_s")
    }
    out["tokens_per_s_generate"] = out["generated_tokens"] / max(out["generate_s"], 1e-9)
    out["tokens_per_s_wall"] = out["generated_tokens"] / max(out["wall_s"], 1e-9)
    workers = [r["worker"] for r in rows if "worker" in r]
    if workers:
        out["worker"] = {key: sum(w.get(key, 0) for w in workers) for key in workers[0]}
    return out


COLUMNS = [
    ("trajectories", "trajectories", "{:.0f}"),
    ("generated_tokens", "tokens", "{:.0f}"),
    ("generate_s", "generate s", "{:.1f}"),
    ("env_s", "env s", "{:.1f}"),
    ("tokens_per_s_generate", "tok/s (generate)", "{:.1f}"),
    ("tokens_per_s_wall", "tok/s (wall)", "{:.1f}"),
]
