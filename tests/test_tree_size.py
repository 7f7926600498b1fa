"""The tracked tree stays small enough to copy to a remote GPU machine (64 MiB is a common limit
there, and a clone should not download a study's raw outputs): at most 32 MiB. Studies keep
their results compressed (docs/study, docs/blind); run folders are never committed, and weights
only as the LoRA adapter (7.5 MB) of the warm start a running study needs every session, since SFT
on another CPU does not rebuild the same weights (experiments/game_state/warm_start). An unfinished
unit is not committed either: it resumes from runs/ on the machine it ran on."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LIMIT_MIB = 32


def tracked_files() -> list[Path]:
    """The files git tracks in this checkout; skips the test outside a git checkout."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    listed = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z"], capture_output=True)
    if listed.returncode != 0:
        pytest.skip(f"{ROOT} is not a git checkout")
    return [ROOT / name for name in listed.stdout.decode().split("\0") if name]


def test_the_tracked_tree_is_at_most_32_mib():
    sizes = {path: path.stat().st_size for path in tracked_files() if path.is_file()}
    total = sum(sizes.values()) / 2**20
    largest = sorted(sizes, key=sizes.get, reverse=True)[:5]
    assert total <= LIMIT_MIB, (f"the tracked tree is {total:.1f} MiB, over {LIMIT_MIB} MiB; largest: "
                                + ", ".join(f"{p.relative_to(ROOT)} ({sizes[p] / 2**20:.1f} MiB)" for p in largest))
