"""`mapo bench all`: every speed benchmark in one process, one JSON each, and a markdown summary.

Each benchmark's figure is a ratio of two things measured in the same run (or, for
MFU, against the matmul peak measured in the same run), so a shared or busy
machine shifts both sides alike. `summary_markdown` writes the table that goes
into docs/performance.md, with the machine it ran on.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mapo.config import TrainConfig
from mapo.provenance import machine_description

# name -> (what it measures, the ratio key its target applies to)
BENCHMARKS: dict[str, str] = {
    "rollout": "the vLLM engine vs hf, and batched vs one trajectory at a time (tokens/s, turns/s)",
    "train": "one packed sequence per trajectory vs one sequence per turn, 6 turns (update time)",
    "mfu": "training tokens/s as counted model FLOPs per second over the measured matmul peak",
    "env": "environment step latency (the configured judge) vs one policy reply",
    "llm-env": "LLM-role environment on vllm serve: 1 vs 16 dialogues in flight (turns/s)",
    "grpo": "one single-turn GRPO step: TRL GRPOTrainer time / mapo time",
}

# Small sizes for `--quick` (a smoke run of the whole suite in a few minutes).
QUICK_SIZES: dict[str, dict[str, Any]] = {
    "rollout": {"trajectories": 8, "turns": 2, "max_new_tokens": 16},
    "train": {"trajectories": 4, "turns": 6, "max_new_tokens": 16},
    "mfu": {"sequences": 2, "length": 256, "repeats": 1},
    "env": {"steps": 16},
    "llm-env": {"trajectories": 4, "turns": 1, "concurrency": 4},
    "grpo": {"prompts": 2, "group": 4, "max_new_tokens": 16, "timed": 1},
}


def run_benchmark(name: str, config: TrainConfig, **sizes: Any) -> dict[str, Any]:
    """Run one benchmark by name with its sizes; returns its results dict."""
    from mapo.lab.bench import load_parts

    if name not in BENCHMARKS:
        raise ValueError(f"unknown benchmark {name!r}; choose from {', '.join(BENCHMARKS)}")
    if name in ("rollout", "train", "env"):
        module = __import__(f"mapo.lab.bench.{'env' if name == 'env' else name}", fromlist=["x"])
        policy, scenarios, make_env = load_parts(config)
        function = module.bench_env_latency if name == "env" else getattr(module, f"bench_{name}")
        return function(policy, scenarios, make_env, config, **sizes)
    if name == "mfu":
        from mapo.lab.bench.mfu import bench_mfu
        from mapo.runtime import configure_threads

        configure_threads(config.threads)
        return bench_mfu(config, **sizes)
    if name == "llm-env":
        from mapo.lab.bench.env import bench_llm_env
        from mapo.testing.vllm_server import missing_requirement

        problem = missing_requirement()
        if problem:
            return {"settings": sizes, "modes": {}, "ratios": {}, "skipped": problem}
        return bench_llm_env(config, **sizes)
    from mapo.envs.base import load_scenarios
    from mapo.lab.bench.grpo import bench_grpo
    from mapo.runtime import configure_threads

    configure_threads(config.threads)
    return bench_grpo(config, load_scenarios(config.env.name, config.env.scenarios), **sizes)


def columns(name: str) -> list[tuple[str, str, str]]:
    from mapo.lab.bench import env, grpo, mfu, rollout, train

    return {
        "rollout": rollout.COLUMNS, "train": train.COLUMNS, "mfu": mfu.COLUMNS,
        "env": env.LATENCY_COLUMNS, "llm-env": env.LLM_COLUMNS, "grpo": grpo.COLUMNS,
    }[name]


def run_suite(config: TrainConfig, folder: Path, names: list[str] | None = None, quick: bool = False,
              on_result: Callable[[str, dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """Run `names` (default: all), writing bench_<name>.json each and suite.json + performance.md."""
    import json

    from mapo.lab.bench import write_results

    chosen = names or list(BENCHMARKS)
    results: dict[str, Any] = {}
    for name in chosen:
        started = time.perf_counter()
        try:
            result = run_benchmark(name, config, **(QUICK_SIZES[name] if quick else {}))
        except Exception as err:  # noqa: BLE001  (one broken benchmark must not lose the others' numbers)
            result = {"modes": {}, "ratios": {}, "error": f"{type(err).__name__}: {err}",
                      "traceback": traceback.format_exc()}
        result["seconds_total"] = time.perf_counter() - started
        write_results(folder, f"bench_{name.replace('-', '_')}", {"config": config.policy.model, **result})
        results[name] = result
        if on_result:
            on_result(name, result)
    machine = machine_description()
    (folder / "suite.json").write_text(json.dumps({"machine": machine, "quick": quick, "results": results},
                                                  indent=2, default=str) + "\n", encoding="utf-8")
    (folder / "performance.md").write_text(summary_markdown(results, machine, quick), encoding="utf-8")
    return results


def _ratio_lines(name: str, result: dict[str, Any]) -> list[str]:
    if "error" in result:
        return [f"| {name} | – | – | – | failed: {result['error'].splitlines()[0]} |"]
    if "skipped" in result and not result["ratios"]:
        return [f"| {name} | – | – | – | skipped: {result['skipped']} |"]
    lines = []
    targets = result.get("target", {})
    for key, value in result["ratios"].items():
        target = targets.get(key)
        verdict = "" if target is None else ("met" if value >= target else "**not met**")
        shown = f"{value:.1%}" if key.startswith("mfu") else f"{value:.2f}x"
        wanted = "" if target is None else (f">= {target:.0%}" if key.startswith("mfu") else f">= {target:g}x")
        lines.append(f"| {name} | {key} | {shown} | {wanted} | {verdict} |")
    if "skipped" in result:
        lines.append(f"| {name} | – | – | – | partly skipped: {result['skipped']} |")
    return lines


def _mode_table(name: str, result: dict[str, Any]) -> str:
    if not result.get("modes"):
        return ""
    cols = columns(name)
    header = "| mode | " + " | ".join(h for _, h, _ in cols) + " |"
    rule = "|---|" + "---:|" * len(cols)
    rows = []
    for mode, row in result["modes"].items():
        cells = [fmt.format(row[key]) if key in row else "–" for key, _, fmt in cols]
        rows.append(f"| {mode} | " + " | ".join(cells) + " |")
    note = f"\n\nNote: {result['note']}" if result.get("note") else ""
    return f"**{name}**: {BENCHMARKS[name]}; settings `{result.get('settings', {})}`\n\n" + "\n".join([header, rule, *rows]) + note


def summary_markdown(results: dict[str, Any], machine: dict[str, Any], quick: bool) -> str:
    where = (
        f"Measured {time.strftime('%Y-%m-%d')} with `mapo bench all{' --quick' if quick else ''}` on: "
        f"{machine['cpu']}, {machine['cores']} cores, {machine['memory_gib']} GiB, torch {machine['torch']} "
        f"({machine['torch_threads']} threads), load average {machine['load_average_1min']} at the end."
    )
    head = [
        where,
        "",
        "| benchmark | figure | measured | target | verdict |",
        "|---|---|---:|---:|---|",
    ]
    for name, result in results.items():
        head += _ratio_lines(name, result)
    tables = [_mode_table(name, r) for name, r in results.items()]
    return "\n".join(head) + "\n\n" + "\n\n".join(t for t in tables if t) + "\n"
