"""The outside benchmarks of an ablation: EQ-Bench v2 and EmoBench (EA, EU) on a unit's saved
policy, through `mapo bench`'s own code (the items loaded by the same loaders, answered greedily
by a `PolicyResponder` on the rollout engine, scored and written by `run_benchmark`). Each lands
in its own folder beside the unit's eval; one whose results are complete is not run again."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

from mapo.lab.ablate.plan import BenchmarkBudget
from mapo.lab.ablate.state import bench_dir, read_bench

BENCH_METRICS = (  # (key, column header): per benchmarked policy, from its results.json
    ("eqbench", "EQ-Bench v2 score"),
    ("eqbench_parse_rate", "EQ-Bench parse rate (%)"),
    ("emobench_ea", "EmoBench EA accuracy (%)"),
    ("emobench_ea_parse_rate", "EA parse rate (%)"),
    ("emobench_eu", "EmoBench EU accuracy (%)"),
    ("emobench_eu_parse_rate", "EU parse rate (%)"),
)


def load_items(budget: BenchmarkBudget, benchmark: str) -> tuple[list[Any], dict[str, Any], int]:
    """(items, the results' config, reply token limit) of one benchmark, as `mapo bench` loads them;
    a missing or broken file raises BenchmarkDataError naming it."""
    from mapo.evaluate import emobench, eqbench

    if benchmark == "eqbench":
        items = eqbench.load_eqbench(budget.data, limit=budget.limit)
        return items, {"data": budget.data, "items_selected": None, "limit": budget.limit}, budget.eqbench_max_tokens
    items = emobench.load_emobench(budget.data, tasks=budget.emobench_tasks, languages=budget.languages,
                                   limit=budget.limit)
    if not items:
        raise ValueError(f"{budget.data}: no EmoBench items in languages {budget.languages}")
    config = {"data": budget.data, "tasks": budget.emobench_tasks, "languages": budget.languages,
              "categories": None, "limit": budget.limit}
    return items, config, budget.emobench_max_tokens


def pending(out: Path, name: str, budget: BenchmarkBudget) -> list[str]:
    """The plan's benchmarks the policy `name` ("base" or a unit) has no complete results for."""
    return [b for b in budget.names if read_bench(bench_dir(out, name, b)) is None]


def run_benchmarks(policy: Any, label: str, out: Path, name: str, budget: BenchmarkBudget,
                   benchmarks: list[str]) -> None:
    """Run `benchmarks` on a loaded policy, one engine for all, each into bench_dir(out, name, ...)."""
    from mapo.evaluate import emobench, eqbench
    from mapo.evaluate.bench import run_benchmark
    from mapo.evaluate.responders import policy_responder

    modules = {"eqbench": eqbench, "emobench": emobench}
    with contextlib.closing(policy_responder(policy, label, budget.engine, budget.batch_size)) as responder:
        for benchmark in benchmarks:
            items, config, max_tokens = load_items(budget, benchmark)
            run_benchmark(benchmark, items, responder, getattr(modules[benchmark], f"run_{benchmark}"),
                          bench_dir(out, name, benchmark), config, batch_size=budget.batch_size,
                          max_tokens=max_tokens, temperature=0.0)


def _emobench_task(summary: dict[str, Any], task: str) -> tuple[float | None, float | None]:
    """(accuracy %, parse rate %) of one EmoBench task over all its languages, weighted by items."""
    blocks = list(summary.get(task, {}).values())
    n = sum(b["n"] for b in blocks)
    if not n:
        return None, None
    correct = sum(b["accuracy"]["Overall"] * b["n"] for b in blocks) / n
    return correct, 100.0 * (1 - sum(b["parse_failures"] for b in blocks) / n)


def bench_metrics(results: dict[str, dict[str, Any] | None]) -> dict[str, float | None]:
    """The BENCH_METRICS of one policy from its benchmarks' results.json (None where not run)."""
    metrics: dict[str, float | None] = {key: None for key, _ in BENCH_METRICS}
    eq = results.get("eqbench")
    if eq is not None:
        metrics["eqbench"] = eq["summary"]["score"]
        metrics["eqbench_parse_rate"] = eq["summary"]["parse_rate"]
    emo = results.get("emobench")
    if emo is not None:
        for task in ("EA", "EU"):
            key = f"emobench_{task.lower()}"
            metrics[key], metrics[f"{key}_parse_rate"] = _emobench_task(emo["summary"], task)
    return metrics


def read_bench_metrics(out: Path, name: str, budget: BenchmarkBudget) -> dict[str, float | None] | None:
    """The policy `name`'s benchmark figures and the seconds they took ("bench_seconds", over the
    finished ones), or None when none of its benchmarks has finished."""
    results = {b: read_bench(bench_dir(out, name, b)) for b in budget.names}
    finished = [r for r in results.values() if r is not None]
    if not finished:
        return None
    seconds = [r["config"].get("seconds") for r in finished]
    return {**bench_metrics(results), "bench_seconds": sum(seconds) if None not in seconds else None}
