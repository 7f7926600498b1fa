"""The llama.cpp engine's rollout modes alone: continuous batching against turn-synchronous waves.

`mapo bench rollout` without the (slow) hf modes: the default config's 16 dialogues x 3 turns
through one engine, the two modes alternating over `--repeats` rounds (order reversed every
other round), each from an empty KV cache. Prints wall time, tokens/s and the worker's split.

    PYTHONPATH=. python scripts/rollout_modes.py [--repeats 2] [--trajectories 16]
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from concurrent.futures import ThreadPoolExecutor

from mapo.bench import bench_rollout_spec, load_parts
from mapo.bench.rollout import measure, start_llamacpp
from mapo.config import TrainConfig


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--trajectories", type=int, default=16)
    args = parser.parse_args()
    config = TrainConfig()
    policy, scenarios, make_env = load_parts(config)
    chosen, spec = bench_rollout_spec(config, scenarios, args.trajectories, 3, 96)
    engine = start_llamacpp(policy, config, spec, args.trajectories)
    if isinstance(engine, str):
        raise SystemExit(engine)
    engine.sample([policy.first_prompt_ids("warm up", "hello")], 2)
    try:
        with ThreadPoolExecutor(config.rollout.env_workers) as pool:
            for r in range(args.repeats):
                for continuous in (True, False) if r % 2 == 0 else (False, True):
                    engine.sync(0)  # an empty cache
                    runs = [(chosen, dataclasses.replace(spec, continuous=continuous))]
                    row, _ = measure(policy, runs, make_env, pool, config.seed + r, engine)
                    worker = row["worker"]
                    print(
                        f"{'continuous' if continuous else 'waves':10} round {r}: wall {row['wall_s']:.1f} s, "
                        f"{row['generated_tokens']} tokens, {row['tokens_per_s_wall']:.1f} tok/s wall; prefill "
                        f"{worker['prefill_s']:.1f} s, decode {worker['decode_s']:.1f} s, "
                        f"{worker['decode_rows'] / worker['decode_steps']:.2f} rows a step; load {os.getloadavg()[0]:.1f}",
                        flush=True,
                    )
    finally:
        engine.close()


if __name__ == "__main__":
    main()
