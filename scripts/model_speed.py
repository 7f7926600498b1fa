"""Policies side by side on the llama.cpp engine: rollout tokens/s, the trainer's forward pass over
the same dialogues, the adapter sync and the engine's mismatch to torch (docs/models.md).

Each model's rollouts alternate with the others' (`--repeats`), in one process, so on a shared
machine the ratios compare like with like even where the absolute figures do not.

    PYTHONPATH=. python scripts/model_speed.py embedded gemma3-270m --repeats 2
"""

from __future__ import annotations

import argparse
import json
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from mapo.bench import bench_rollout_spec, load_parts
from mapo.bench.rollout import measure, start_llamacpp, trainer_and_sampler_logprobs
from mapo.config import load_config
from mapo.engines.importance import mismatch_stats


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="+", help="policy.model values (embedded, gemma3-270m, a folder ...)")
    parser.add_argument("--trajectories", type=int, default=8)
    parser.add_argument("--turns", type=int, default=2)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--output", type=Path, default=Path("runs/model_speed.json"))
    args = parser.parse_args()

    parts = {}
    for model in args.models:
        config = load_config(None, [f"policy.model={model}"])
        started = time.perf_counter()
        policy, scenarios, make_env = load_parts(config)
        load_s = time.perf_counter() - started
        chosen, spec = bench_rollout_spec(config, scenarios, args.trajectories, args.turns, args.max_new_tokens)
        engine = start_llamacpp(policy, config, spec, args.trajectories)
        if isinstance(engine, str):
            raise SystemExit(f"{model}: no llama.cpp engine ({engine})")
        engine.sample([policy.first_prompt_ids("warm up", "hello")], 2)
        parts[model] = dict(policy=policy, make_env=make_env, runs=[(chosen, spec)], engine=engine, config=config,
                            spec=spec, load_s=load_s, rows=[], forward_s=[], sync_s=[], groups=[])
    try:
        with ThreadPoolExecutor(max_workers=4) as pool:
            for r in range(args.repeats):
                for model in args.models if r % 2 == 0 else args.models[::-1]:
                    p = parts[model]
                    row, groups = measure(p["policy"], p["runs"], p["make_env"], pool, p["config"].seed + r, p["engine"])
                    started = time.perf_counter()
                    old, behaviour = trainer_and_sampler_logprobs(p["policy"], groups, p["spec"].temperature)
                    p["forward_s"].append(time.perf_counter() - started)
                    p["sync_s"].append(vars(p["engine"].sync(r + 1)))
                    p["rows"].append(row)
                    p["groups"].append((old, behaviour))
    finally:
        for p in parts.values():
            p["engine"].close()
    results = {}
    for model, p in parts.items():
        tokens = sum(row["generated_tokens"] for row in p["rows"])
        generate = sum(row["generate_s"] for row in p["rows"])
        old = np.concatenate([o for o, _ in p["groups"]])
        behaviour = np.concatenate([b for _, b in p["groups"]])
        results[model] = {
            "load_s": p["load_s"], "tokens": tokens, "generate_s": generate,
            "tokens_per_s_generate": tokens / generate, "forward_s": sum(p["forward_s"]),
            "forward_ms_per_token": 1000 * sum(p["forward_s"]) / tokens,
            "sync_total_s": float(np.mean([s["export_s"] + s["load_s"] for s in p["sync_s"]])),
            "sync_mb": p["sync_s"][-1]["bytes"] / 1e6, "base_type": p["engine"].base_type,
            "mismatch": vars(mismatch_stats(old, behaviour)), "rows": p["rows"],
        }
    first = args.models[0]
    for model in args.models[1:]:
        results[model]["over_" + first] = {
            "tokens_per_s_generate": results[model]["tokens_per_s_generate"] / results[first]["tokens_per_s_generate"],
            "forward_ms_per_token": results[model]["forward_ms_per_token"] / results[first]["forward_ms_per_token"],
        }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(results, indent=2, default=str))
    for model, r in results.items():
        m = r["mismatch"]
        print(f"{model}: {r['tokens']} tokens, {r['tokens_per_s_generate']:.1f} tok/s (generate), forward "
              f"{r['forward_ms_per_token']:.1f} ms/token, sync {r['sync_total_s']:.3f} s ({r['sync_mb']:.1f} MB, "
              f"base {r['base_type']}), KL {m['kl_behaviour_old']:.2e}, max ratio {m['ratio_max']:.3f}, load {r['load_s']:.0f} s")
        for key, value in r.items():
            if key.startswith("over_"):
                print(f"  {key}: " + ", ".join(f"{k} {v:.2f}x" for k, v in value.items()))
    print(f"Results: {args.output}")


if __name__ == "__main__":
    main()
