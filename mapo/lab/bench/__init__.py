"""Speed benchmarks of mapo's own machinery (`mapo bench rollout`, `mapo bench train`).

Each measures two ways of doing the same work side by side in one process, so the
ratio holds even on a noisy shared machine; results go to a run folder as JSON.
"""

from __future__ import annotations

import dataclasses
import json
import platform
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from mapo.config import TrainConfig
    from mapo.core.rollout import RolloutSpec
    from mapo.core.types import Scenario


def machine() -> dict[str, Any]:
    return {
        "torch_threads": torch.get_num_threads(),
        "platform": platform.platform(),
        "python": platform.python_version(),
    }


def bench_rollout_spec(
    config: TrainConfig, scenarios: list[Scenario], trajectories: int, turns: int, max_new_tokens: int
) -> tuple[list[Scenario], RolloutSpec]:
    """The scenarios giving `trajectories` dialogues (rollout.samples_per_scenario each) and
    the config's rollout spec resized to them."""
    n = config.rollout.samples_per_scenario
    if trajectories % n:
        raise ValueError(f"--trajectories ({trajectories}) must be a multiple of rollout.samples_per_scenario ({n})")
    chosen = [scenarios[k % len(scenarios)] for k in range(trajectories // n)]
    spec = dataclasses.replace(
        config.rollout, max_turns=turns, max_new_tokens=max_new_tokens, scenarios_per_step=len(chosen)
    )
    return chosen, spec


def write_results(folder: Path, name: str, results: dict[str, Any]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.json"
    payload = {"benchmark": name, "time": time.strftime("%Y-%m-%dT%H:%M:%S"), "machine": machine(), **results}
    path.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
    return path


def load_parts(config: Any) -> tuple[Any, list[Any], Any]:
    """The policy, training scenarios and environment factory a TrainConfig describes."""
    from mapo.envs.base import environment_factory, load_scenarios
    from mapo.policy import load_policy
    from mapo.runtime import configure_threads, seed_everything

    configure_threads(config.threads)
    seed_everything(config.seed)
    policy = load_policy(config.policy, seed=config.seed)
    if config.loss.kl_beta > 0:
        policy.keep_reference()
    return policy, load_scenarios(config.env.name, config.env.scenarios), environment_factory(config.env.name, config.env.options)


def ratio_table(title: str, results: dict[str, Any], columns: list[tuple[str, str, str]]) -> Any:
    """A rich table: one row per mode with `columns` (key, header, format), then the ratios."""
    from rich.table import Table

    table = Table(title=title)
    table.add_column("mode")
    for _, header, _ in columns:
        table.add_column(header, justify="right")
    for mode, row in results["modes"].items():
        table.add_row(mode, *(fmt.format(row[key]) for key, _, fmt in columns))
    lines = []
    for key, value in results["ratios"].items():
        target = results.get("target", {}).get(key)
        verdict = "" if target is None else f" (target >= {target:g}x: {'met' if value >= target else 'NOT met'})"
        lines.append(f"ratio {key}: {value:.2f}x{verdict}")
    table.caption = "\n".join(lines)
    return table
