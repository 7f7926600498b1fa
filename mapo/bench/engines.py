"""Rollout engines side by side: `hf` (torch `generate`) vs `llamacpp`, same dialogues.

Both engines roll out the same scenarios x samples x turns with the same policy,
environment, caps and seeds, alternating which goes first over `repeats`; reported
are generated tokens per second of generation time (and of wall time), their ratio
llamacpp / hf, the cost of a weight sync both ways (LoRA adapter vs merged and
re-quantised model: export, load, size), and the behaviour-vs-torch mismatch on the
llama.cpp engine's own samples (the importance-weight statistics the trainer logs),
before and after a sync of a perturbed adapter.
"""

from __future__ import annotations

import dataclasses
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import torch

from mapo.bench import bench_rollout_spec
from mapo.bench.rollout import _sum
from mapo.config import TrainConfig
from mapo.engines.base import RolloutEngine
from mapo.engines.hf import HfEngine
from mapo.engines.importance import mismatch_stats
from mapo.engines.llamacpp import LlamaCppEngine, LlamaCppSpec
from mapo.policy import Policy
from mapo.rollout import rollout
from mapo.types import Group, Scenario


def _measure(
    policy: Policy, engine: RolloutEngine, scenarios: list[Scenario], spec: Any, make_env: Any, pool: Any, seed: int
) -> tuple[dict[str, float], list[Group]]:
    timings: dict[str, float] = {}
    torch.manual_seed(seed)
    start = time.perf_counter()
    groups = rollout(policy, scenarios, make_env, spec, seed=seed, pool=pool, timings=timings, engine=engine)
    wall = time.perf_counter() - start
    turns = [turn for g in groups for t in g.trajectories for turn in t.turns]
    tokens = sum(len(turn.response_ids) for turn in turns)
    return {
        "trajectories": sum(len(g) for g in groups),
        "turns": len(turns),
        "generated_tokens": tokens,
        "generate_s": timings["generate"],
        "env_s": timings["env"],
        "wall_s": wall,
        "tokens_per_s_generate": tokens / max(timings["generate"], 1e-9),
        "tokens_per_s_wall": tokens / max(wall, 1e-9),
    }, groups


def torch_logprobs(policy: Policy, groups: list[Group], temperature: float) -> tuple[np.ndarray, np.ndarray]:
    """(trainer log-probs, sampler log-probs) of every sampled reply token, the former by one forward per dialogue."""
    old, behaviour = [], []
    for group in groups:
        for trajectory in group.trajectories:
            ids = torch.tensor([trajectory.token_ids])
            targets = torch.zeros_like(ids, dtype=torch.bool)
            for turn in trajectory.turns:
                targets[0, turn.prompt_length : turn.prompt_length + len(turn.response_ids)] = True
                behaviour += turn.old_logprobs
            with torch.no_grad():
                logp, _ = policy.token_logprobs(ids, torch.ones_like(ids), targets, temperature=temperature)
            old += logp[0].tolist()
    return np.asarray(old), np.asarray(behaviour)


def _perturb_lora(policy: Policy, seed: int, scale: float) -> None:
    """Set every LoRA B to noise of `scale` (a stand-in for a trained adapter of that size)."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in policy.model.named_parameters():
            if "lora_B" in name:
                param.copy_(torch.randn(param.shape, generator=generator) * scale)


def bench_engines(
    policy: Policy,
    scenarios: list[Scenario],
    make_env: Any,
    config: TrainConfig,
    source_gguf: Path | None,
    trajectories: int = 16,
    turns: int | None = None,
    max_new_tokens: int | None = None,
    repeats: int = 1,
    syncs: int = 3,
    lora_scale: float = 0.02,
    spec: LlamaCppSpec | None = None,
) -> dict[str, Any]:
    turns = turns or config.rollout.max_turns
    max_new_tokens = max_new_tokens or config.rollout.max_new_tokens
    chosen, rollout_spec = bench_rollout_spec(config, scenarios, trajectories, turns, max_new_tokens)
    hf = HfEngine(policy)
    spec = spec or LlamaCppSpec()
    started = time.perf_counter()
    llama = LlamaCppEngine(policy, slots=trajectories, context_per_slot=rollout_spec.max_context_tokens, spec=spec,
                           source_gguf=source_gguf)
    start_s = time.perf_counter() - started
    results: dict[str, Any] = {"engine_start_s": start_s}
    try:
        for engine in (hf, llama):
            engine.sync(0)
        engines: dict[str, RolloutEngine] = {"hf": hf, "llamacpp": llama}
        torch.manual_seed(config.seed)
        hf.sample([policy.first_prompt_ids("warm up", "hello")], 2)  # first-call overheads off the clock
        llama.sample([policy.first_prompt_ids("warm up", "hello")], 2)
        rows: dict[str, list[dict[str, float]]] = {"hf": [], "llamacpp": []}
        samples: list[Group] = []
        with ThreadPoolExecutor(max_workers=config.rollout.env_workers) as pool:
            for r in range(repeats):
                for name in ("hf", "llamacpp") if r % 2 == 0 else ("llamacpp", "hf"):
                    row, groups = _measure(policy, engines[name], chosen, rollout_spec, make_env, pool, config.seed + r)
                    rows[name].append(row)
                    if name == "llamacpp":
                        samples = groups
            old, behaviour = torch_logprobs(policy, samples, rollout_spec.temperature)
            results["mismatch_base"] = vars(mismatch_stats(old, behaviour))
            results["sync"] = {"adapter": _sync_costs(llama, syncs)}
            _perturb_lora(policy, seed=1, scale=lora_scale)
            llama.sync(syncs + 1)
            _, groups = _measure(policy, llama, chosen, rollout_spec, make_env, pool, config.seed)
            results["mismatch_adapter"] = vars(mismatch_stats(*torch_logprobs(policy, groups, rollout_spec.temperature)))
            merged = LlamaCppEngine(policy, slots=trajectories, context_per_slot=rollout_spec.max_context_tokens,
                                    spec=dataclasses.replace(spec, sync="merged"), source_gguf=source_gguf)
            try:
                results["sync"]["merged"] = _sync_costs(merged, syncs)
                _, groups = _measure(policy, merged, chosen, rollout_spec, make_env, pool, config.seed)
                results["mismatch_merged"] = vars(mismatch_stats(*torch_logprobs(policy, groups, rollout_spec.temperature)))
            finally:
                merged.close()
        results["engine_stats"] = dict(llama.stats)
    finally:
        llama.close()
    summary = {name: _sum(r) for name, r in rows.items()}
    results.update(
        {
            "settings": {"trajectories": trajectories, "turns": turns, "max_new_tokens": max_new_tokens,
                         "repeats": repeats, "threads": torch.get_num_threads(), "llamacpp": vars(spec),
                         "lora_scale": lora_scale},
            "modes": summary,
            "repeats": rows,
            "ratios": {
                "llamacpp_over_hf": summary["llamacpp"]["tokens_per_s_generate"]
                / max(summary["hf"]["tokens_per_s_generate"], 1e-9),
                "llamacpp_over_hf_wall": summary["llamacpp"]["tokens_per_s_wall"]
                / max(summary["hf"]["tokens_per_s_wall"], 1e-9),
            },
            "target": {"llamacpp_over_hf": 4.0},
        }
    )
    return results


def _sync_costs(engine: LlamaCppEngine, syncs: int) -> dict[str, float]:
    stats = [engine.sync(k + 1) for k in range(syncs)]
    return {
        "export_s": float(np.mean([s.export_s for s in stats])),
        "load_s": float(np.mean([s.load_s for s in stats])),
        "total_s": float(np.mean([s.export_s + s.load_s for s in stats])),
        "mb": stats[-1].bytes / 1e6,
    }

