"""Resident memory after repeated RL updates of 72 state-view-sized sequences (240-300 ids, 3-12 trained),
with and without glibc malloc_trim: python experiments/engines/heap.py (docs/results.md, 2026-12-02)."""
import torch, gc, random
torch.set_num_threads(2)
from mapo.core.losses import TrainSequence, LossSpec
from mapo.core.update import update, make_optimizer
from mapo.config import load_config
from mapo.policy import load_policy
from mapo.model_source import LoraSpec, PolicySpec
def rss(): return int(open("/proc/self/statm").read().split()[1]) * 4096 / 2**30
cfg = load_config(None, [])
policy = load_policy(PolicySpec(dtype="bf16-mixed", lora=LoraSpec(r=16, alpha=32)), seed=0)
opt = make_optimizer(policy, cfg.optim)
print("start", round(rss(),2), flush=True)
rng = random.Random(0)
for step in range(8):
    seqs = []
    for _ in range(72):
        n = rng.randint(240, 300); r = rng.randint(3, 12)
        ids = [rng.randint(10, 40000) for _ in range(n + r)]
        tr = [False]*n + [True]*r
        seqs.append(TrainSequence(ids, tr, [rng.gauss(0,1) if t else 0.0 for t in tr], [-1.0 if t else 0.0 for t in tr],
                                  behaviour_logprobs=[-1.0 if t else 0.0 for t in tr]))
    update(policy, opt, seqs, cfg.optim, cfg.loss, temperature=0.7, off_policy=True)
    gc.collect()
    before = rss()
    import ctypes; ctypes.CDLL("libc.so.6").malloc_trim(0)
    print(step, "after update", round(before,2), "after trim", round(rss(),2), flush=True)
