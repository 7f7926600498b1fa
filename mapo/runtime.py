"""Process set-up shared by training, evaluation and the benchmarks: seeds, torch threads, and
the trainer state a checkpoint holds beside the weights (step, optimizer, generators).

Every random draw of a run's step k is seeded from (seed, k, stream), so a run resumed
from a checkpoint, or an evaluation batch, draws exactly what an uninterrupted one would.
"""

from __future__ import annotations

import ctypes
import json
import os
import random
import sys
from pathlib import Path
from typing import Any

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


def release_freed_memory() -> None:
    """Hand the pages the heap holds free back to the system (glibc's `malloc_trim`; elsewhere nothing).

    glibc keeps what freed tensors leave in its arenas, and an update's tensors change shape with
    every batch, so little of it is reused: a state-view run on the CPU grew by about 0.5 GB a step
    (11 GB at step 30, two runs side by side killed out of memory). One update of 72 sequences left
    5.9 GB resident, 1.9 GB after the trim."""
    if not sys.platform.startswith("linux"):
        return
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # another C library (musl): no malloc_trim
        pass


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]


def memory_figures() -> dict[str, float]:
    """This process's resident memory (GB) and, under glibc, what its heap holds: `memory_heap_used_gb`
    allocated by the program, `memory_heap_free_gb` freed but kept (mallinfo2, over every arena; mmapped
    blocks count as used). A run whose resident memory grows with the first is holding on to objects;
    with the second, the heap is fragmented. {} where /proc is missing."""
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
    except (OSError, IndexError, ValueError):
        return {}
    figures = {"memory_rss_gb": pages * os.sysconf("SC_PAGE_SIZE") / 2**30}
    try:
        mallinfo2 = ctypes.CDLL("libc.so.6").mallinfo2
    except (OSError, AttributeError):  # not glibc, or older than 2.33
        return figures
    mallinfo2.restype = _MallInfo2
    info = mallinfo2()
    figures["memory_heap_used_gb"] = (info.uordblks + info.hblkhd) / 2**30
    figures["memory_heap_free_gb"] = info.fordblks / 2**30
    return figures


def write_trainer_state(folder: Path, step: int, optimizer: torch.optim.Optimizer, **extra: Any) -> None:
    """The step, the optimizer and every random generator (plus `extra` entries) into a checkpoint folder."""
    rng = {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()}
    torch.save({"step": step, "optimizer": optimizer.state_dict(), **extra, "rng": rng}, folder / "trainer_state.pt")
    (folder / "trainer_state.json").write_text(json.dumps({"step": step}) + "\n", encoding="utf-8")


def read_trainer_state(folder: Path, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """Restore the optimizer and the random generators `write_trainer_state` saved; returns the state
    (its "step" and any extra entries)."""
    state = torch.load(folder / "trainer_state.pt", weights_only=False)
    optimizer.load_state_dict(state["optimizer"])
    torch.set_rng_state(state["rng"]["torch"])
    np.random.set_state(state["rng"]["numpy"])
    random.setstate(state["rng"]["python"])
    return state


IDLE = "idle"


def usable_cores() -> int:
    """The CPU cores this process may run on (its affinity mask; all cores where there is none)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # no affinity call (macOS)
        return os.cpu_count() or 1


def check_threads(threads: int | str | None, key: str) -> None:
    """A clear error unless `threads` is null, `idle` or a whole number >= 1 (`key` names the setting)."""
    if threads is None or threads == IDLE:
        return
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ValueError(f"{key} must be a whole number >= 1, {IDLE!r} or null, got {threads!r}")


def choose_threads(threads: int | str | None = None) -> tuple[int, str]:
    """(threads, why): a number as given; None every usable core; `idle` the cores the load average leaves idle.

    `idle` is for a shared CPU: more threads than idle cores makes every matmul wait for
    a descheduled thread (2 threads on 2 busy cores ran 2-10x slower than 1 there). On
    a machine of one's own it is a trap: the minute after any busy moment (an install,
    a compile) it takes 1 core and keeps it for the whole run.
    """
    check_threads(threads, "threads")
    cores = usable_cores()
    if threads is None:
        return cores, f"every core this process may use (threads: null; {IDLE!r} takes only the idle ones)"
    if threads == IDLE:
        load = os.getloadavg()[0]
        chosen = max(1, min(cores, int(cores - load + 0.5)))
        return chosen, f"threads: idle, {cores} usable cores with a 1-minute load average of {load:.2f}"
    return int(threads), f"threads: {threads} as configured ({cores} usable cores)"


def configure_threads(threads: int | str | None = None) -> int:
    """Set torch's CPU threads as `choose_threads` decides; returns how many."""
    count, _ = choose_threads(threads)
    torch.set_num_threads(count)
    return count
