"""Process set-up shared by training, evaluation and the benchmarks: seeds and torch threads.

Every random draw of a run's step k is seeded from (seed, k, stream), so a run resumed
from a checkpoint, or an evaluation batch, draws exactly what an uninterrupted one would.
"""

from __future__ import annotations

import os
import random

import numpy as np
import torch


def step_seed(seed: int, step: int, stream: int = 0) -> int:
    """A 63-bit seed for step `step` of a run seeded `seed` (independent streams by `stream`)."""
    return int(np.random.SeedSequence([seed, step, stream]).generate_state(1, dtype=np.uint64)[0] >> 1)


def seed_everything(seed: int) -> None:
    """Seed Python's, numpy's and torch's global generators."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def configure_threads(threads: int | None = None) -> int:
    """Set torch's CPU threads: `threads`, or (None) as many cores as the load average leaves idle.

    On a shared CPU, more threads than idle cores makes every matmul wait for a
    descheduled thread: 2 threads on 2 busy cores ran 2-10x slower than 1 here.
    """
    if threads is None:
        cores = os.cpu_count() or 1
        idle = cores - os.getloadavg()[0]
        threads = max(1, min(cores, int(idle + 0.5)))
    torch.set_num_threads(threads)
    return threads
