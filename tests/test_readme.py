"""The README is a front page a newcomer reads in one screen, and its Python example runs as written
(the real default policy, two steps of MAPO on the example's own environment)."""

from __future__ import annotations

import math
import re

from fixture_paths import REPO

from mapo.envs.base import ENVIRONMENTS

README = REPO / "README.md"


def test_the_readme_fits_one_screen_of_lines():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 150
    assert [n for n, line in enumerate(lines, 1) if len(line) > 120] == []


def test_the_readme_python_example_trains(tmp_path, monkeypatch):
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.DOTALL)
    assert len(blocks) == 1
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {"__name__": "readme"}
    try:
        exec(compile(blocks[0], f"{README}:python", "exec"), namespace)  # noqa: S102  (our own README)
    finally:
        ENVIRONMENTS.remove("ask-back")
    result = namespace["result"]
    assert (result.run_dir / "final").is_dir() and len(result.metrics) == 2
    assert math.isfinite(result.final_metrics["reward_mean"])
