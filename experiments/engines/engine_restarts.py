"""Memory as one process opens and shuts down vLLM engines of two shapes in turn, as an in-process
plateau ablation does (a training chunk's 16 slots, its evaluation's 160): python
experiments/engines/engine_restarts.py (docs/results.md, 2026-12-03: each start after a shutdown left
0.4-1.1 GB more of the heap in use, 10.4 GB after eight)."""
import gc

import torch

torch.set_num_threads(1)
from mapo.model_source import PolicySpec
from mapo.policy import load_policy
from mapo.engines.vllm_engine import open_engine, shut_down_kept
from mapo.runtime import memory_figures
policy = load_policy(PolicySpec(model="experiments/game_state/warm_start"), seed=0)
print("loaded", {k: round(v, 2) for k, v in memory_figures().items()}, flush=True)
for i in range(4):
    for slots in (16, 160):
        engine = open_engine(policy, slots, 1024)
        engine.sync(0)
        engine.close()
        gc.collect()
        print(i, slots, {k: round(v, 2) for k, v in memory_figures().items()}, flush=True)
shut_down_kept(); gc.collect()
print("all shut", {k: round(v, 2) for k, v in memory_figures().items()}, flush=True)
