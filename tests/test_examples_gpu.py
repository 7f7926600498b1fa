"""The one-GPU recipes (examples/gpu) are valid configs whose environment builds."""

from __future__ import annotations

from pathlib import Path

import pytest

from mapo.config import load_config
from mapo.envs.base import make_environment

EXAMPLES = sorted((Path(__file__).parent.parent / "examples" / "gpu").glob("*.yaml"))


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_gpu_example_config_loads(path):
    config = load_config(path)
    assert config.policy.device == "cuda" and config.policy.dtype == "auto"
    assert config.env.options["judge"] == "llm"
    make_environment(config.env.name, **config.env.options)


def test_both_recipes_are_there():
    assert [p.stem for p in EXAMPLES] == ["qwen2.5-1.5b", "qwen2.5-7b"]
