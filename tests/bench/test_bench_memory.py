"""`mapo bench memory`: peak RSS of an evaluation and a training step, each in a subprocess."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mapo.cli import app
from mapo.lab.bench.memory import bench_memory, peak_rss_bytes


def test_peak_rss_grows_with_an_allocation():
    import os

    before = peak_rss_bytes()
    # resident now (Linux): earlier tests may have left the peak above it, so allocate past the peak
    resident = int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    block = bytearray(max(0, before - resident) + 200 * 1024 * 1024)  # touched below, so it is resident
    block[::4096] = b"x" * len(block[::4096])
    assert peak_rss_bytes() >= before + 150 * 1024 * 1024


def test_bad_sizes_are_refused_before_any_subprocess(tmp_path):
    result = CliRunner().invoke(app, ["bench", "memory", "--turns", "0", "--output", str(tmp_path)])
    assert result.exit_code == 2
    assert "turns must be >= 1" in result.output
    with pytest.raises(ValueError, match="limit_gib"):
        bench_memory(limit_gib=0)


@pytest.mark.slow
def test_a_small_memory_benchmark_reports_both_workloads(tmp_path):
    result = CliRunner().invoke(app, ["bench", "memory", "--eval-turns", "2", "--trajectories", "4", "--turns", "2",
                                      "--output", str(tmp_path)])
    assert result.exit_code == 0, result.output
    saved = json.loads((tmp_path / "bench_memory.json").read_text(encoding="utf-8"))
    for name in ("evaluation", "training_step"):
        row = saved["modes"][name]
        assert row["loaded_bytes"] <= row["peak_bytes"] < 8 * 1024**3
    assert saved["modes"]["evaluation"]["turns"] == 2
    assert saved["modes"]["training_step"]["turns"] == [2, 2, 2, 2]
