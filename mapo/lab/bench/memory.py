"""`mapo bench memory`: peak resident memory of an evaluation and of one training step.

Each workload runs in its own Python subprocess (so one cannot inherit the other's
peak) and reports its peak RSS from `resource.getrusage` (Linux: KiB), measured
once after loading the policy and once at the end. The workloads are the ones a
user of the embedded default runs: one evaluation dialogue of up to `eval_turns`
turns (EMPA's 45 by default, with no early success), and one training step of
`trajectories` dialogues of `turns` turns, also with no early success (the library's
rollout, then `mapo.core.step.train_step`: rewards, advantages, the training sequences and one
update, as a training step runs them). Both are compared with a memory limit (8 GiB by default).
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
from collections.abc import Sequence
from typing import Any

GIB = 1024**3


def peak_rss_bytes() -> int:
    """This process's peak resident set size so far (ru_maxrss is KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _evaluation(config: Any, turns: int) -> dict[str, Any]:
    from concurrent.futures import ThreadPoolExecutor

    import torch

    from mapo.core.rollout import rollout
    from mapo.envs.base import environment_factory, load_scenarios
    from mapo.evaluate.runner import EvalSpec, env_options_for
    from mapo.lab.bench import load_parts

    policy, _, _ = load_parts(config)
    loaded = peak_rss_bytes()
    # no early success, so the dialogue runs to the turn cap unless the user gives up first
    spec = EvalSpec(max_turns=turns, env_options={"success_from_turn": turns + 1}, limit=1)
    scenarios = load_scenarios(spec.env, spec.scenarios)[:1]
    torch.manual_seed(config.seed)
    with ThreadPoolExecutor(max_workers=1) as pool:
        groups = rollout(policy, scenarios, environment_factory(spec.env, env_options_for(spec)), spec.rollout_spec(1), seed=config.seed, pool=pool)
    trajectory = groups[0].trajectories[0]
    return {"loaded_bytes": loaded, "turns": len(trajectory), "done_reason": trajectory.done_reason,
            "max_new_tokens": spec.max_new_tokens}


def _training_step(config: Any, trajectories: int, turns: int) -> dict[str, Any]:
    import dataclasses
    from concurrent.futures import ThreadPoolExecutor

    import torch

    from mapo.core.rollout import rollout
    from mapo.core.step import train_step
    from mapo.core.update import make_optimizer
    from mapo.lab.bench import bench_rollout_spec, load_parts

    # no early success here either: every dialogue runs all `turns` unless its user gives up
    options = {**config.env.options, "success_from_turn": turns + 1}
    config = dataclasses.replace(config, env=dataclasses.replace(config.env, options=options))
    policy, scenarios, make_env = load_parts(config)
    loaded = peak_rss_bytes()
    chosen, spec = bench_rollout_spec(config, scenarios, trajectories, turns, config.rollout.max_new_tokens)
    torch.manual_seed(config.seed)
    with ThreadPoolExecutor(max_workers=config.rollout.env_workers) as pool:
        groups = rollout(policy, chosen, make_env, spec, seed=config.seed, pool=pool)
    after_rollout = peak_rss_bytes()
    step = train_step(policy, make_optimizer(policy, config.optim), groups, config, sampled=spec)  # the trainer's step
    return {"loaded_bytes": loaded, "after_rollout_bytes": after_rollout,
            "turns": [len(t) for g in groups for t in g.trajectories],
            "tokens": sum(len(s.input_ids) for s in step.sequences)}


def _worker(request: dict[str, Any]) -> dict[str, Any]:
    from mapo.config import load_config

    config = load_config(request["config"], request["overrides"])
    if request["workload"] == "evaluation":
        result = _evaluation(config, request["eval_turns"])
    else:
        result = _training_step(config, request["trajectories"], request["turns"])
    return {**result, "peak_bytes": peak_rss_bytes()}


def _run_worker(request: dict[str, Any]) -> dict[str, Any]:
    done = subprocess.run([sys.executable, "-m", "mapo.lab.bench.memory", json.dumps(request)],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        tail = "\n".join(done.stderr.strip().splitlines()[-5:])
        raise RuntimeError(f"the {request['workload']} worker failed (exit {done.returncode}):\n{tail}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def bench_memory(
    config_path: str | None = None,
    overrides: Sequence[str] = (),
    eval_turns: int = 45,
    trajectories: int = 8,
    turns: int = 15,
    limit_gib: float = 8.0,
) -> dict[str, Any]:
    """Peak RSS of both workloads, each in a fresh subprocess, against `limit_gib`."""
    if min(eval_turns, trajectories, turns) < 1 or limit_gib <= 0:
        raise ValueError("eval_turns, trajectories and turns must be >= 1 and limit_gib > 0")
    common = {"config": config_path, "overrides": list(overrides)}
    modes = {
        "evaluation": _run_worker({**common, "workload": "evaluation", "eval_turns": eval_turns}),
        "training_step": _run_worker({**common, "workload": "training_step", "trajectories": trajectories,
                                      "turns": turns}),
    }
    for row in modes.values():
        row["peak_gib"] = row["peak_bytes"] / GIB
        row["loaded_gib"] = row["loaded_bytes"] / GIB
        row["within_limit"] = row["peak_bytes"] <= limit_gib * GIB
    return {
        "settings": {"eval_turns": eval_turns, "trajectories": trajectories, "turns": turns, "limit_gib": limit_gib},
        "modes": modes,
        "within_limit": all(row["within_limit"] for row in modes.values()),
    }


def memory_table(results: dict[str, Any]) -> Any:
    """A rich table: peak RSS per workload against the limit."""
    from rich.table import Table

    limit = results["settings"]["limit_gib"]
    table = Table(title=f"mapo bench memory (limit {limit:g} GiB)")
    for column in ("workload", "turns", "RSS after model load GiB", "peak RSS GiB", "within limit"):
        table.add_column(column, justify="left" if column == "workload" else "right")
    for name, row in results["modes"].items():
        turns = row["turns"] if isinstance(row["turns"], int) else f"{len(row['turns'])} x <= {max(row['turns'])}"
        table.add_row(name, str(turns), f"{row['loaded_gib']:.2f}", f"{row['peak_gib']:.2f}",
                      "yes" if row["within_limit"] else "[red]NO[/]")
    return table


if __name__ == "__main__":  # the subprocess side: one JSON request in argv, one JSON line out
    print(json.dumps(_worker(json.loads(sys.argv[1]))))
