"""`mapo bench rollout | train | mfu | gpu | memory | env | llm-env | grpo | all`: the speed suite.

The suite's benchmarks (mapo.lab.bench.suite.BENCHMARKS) all run through `run_benchmark` and
write one JSON each; `gpu` and `memory` have outputs of their own (a markdown table, the
peak RSS of subprocesses).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from mapo.cli.common import BenchOutOpt, ConfigOpt, SetOpt, bench_app, fail, train_config


def _suite_bench(name: str, config: Optional[Path], overrides: Optional[list[str]], output: Optional[Path], **sizes) -> None:  # type: ignore[no-untyped-def]
    """Run one benchmark of mapo/lab/bench/suite.py: print its table, write its JSON."""
    from rich.console import Console

    from mapo.lab.bench import ratio_table, write_results
    from mapo.lab.bench.suite import columns, run_benchmark
    from mapo.run_folder import new_run_dir

    settings = train_config(config, overrides)
    try:
        results = run_benchmark(name, settings, **sizes)
    except (ValueError, FileNotFoundError, RuntimeError) as err:
        raise fail(err) from None
    folder = output or new_run_dir(settings.output_dir, f"bench-{name}")
    path = write_results(Path(folder), f"bench_{name.replace('-', '_')}", {"config": settings.policy.model, **results})
    if results.get("modes"):
        Console().print(ratio_table(f"mapo bench {name}", results, columns(name)))
    if results.get("skipped"):
        typer.echo(f"skipped: {results['skipped']}")
    typer.echo(f"Results: {path}")



@bench_app.command("rollout")
def bench_rollout_command(
    config: ConfigOpt = None,
    set_: SetOpt = None,
    trajectories: Annotated[int, typer.Option(help="Dialogues per mode.")] = 16,
    turns: Annotated[Optional[int], typer.Option(help="Turns per dialogue (default: rollout.max_turns).")] = None,
    max_new_tokens: Annotated[
        Optional[int], typer.Option(help="Reply length cap (default: rollout.max_new_tokens).")
    ] = None,
    repeats: Annotated[int, typer.Option(help="Alternating repetitions of all modes.")] = 1,
    engine: Annotated[
        Optional[list[str]], typer.Option(help="An engine to time beside hf (repeatable; default: every one installed; none: only hf).")
    ] = None,
    sequential: Annotated[bool, typer.Option(help="Also time one trajectory at a time (the slowest mode).")] = True,
    output: BenchOutOpt = None,
) -> None:
    """The rollout engines against hf, and batched vs one trajectory at a time: tokens/s, turns/s, start-up, mismatch."""
    engines = None if engine is None else tuple(e for e in engine if e != "none")
    _suite_bench("rollout", config, set_, output, trajectories=trajectories, turns=turns,
                 max_new_tokens=max_new_tokens, repeats=repeats, engines=engines, sequential=sequential)


@bench_app.command("train")
def bench_train_command(
    config: ConfigOpt = None,
    set_: SetOpt = None,
    trajectories: Annotated[int, typer.Option(help="Dialogues to train on.")] = 4,
    turns: Annotated[int, typer.Option(help="Turns per dialogue.")] = 6,
    max_new_tokens: Annotated[
        Optional[int], typer.Option(help="Reply length cap (default: rollout.max_new_tokens).")
    ] = None,
    repeats: Annotated[int, typer.Option(help="Alternating repetitions of both layouts.")] = 1,
    output: BenchOutOpt = None,
) -> None:
    """One packed sequence per trajectory vs one sequence per turn: update time and the ratio."""
    _suite_bench("train", config, set_, output, trajectories=trajectories, turns=turns,
                 max_new_tokens=max_new_tokens, repeats=repeats)


@bench_app.command("mfu")
def bench_mfu_command(
    config: ConfigOpt = None,
    set_: SetOpt = None,
    sequences: Annotated[int, typer.Option(help="Packed sequences per update.")] = 4,
    length: Annotated[int, typer.Option(help="Tokens per sequence.")] = 512,
    repeats: Annotated[int, typer.Option(help="Timed updates per dtype (the fastest counts).")] = 3,
    output: BenchOutOpt = None,
) -> None:
    """Training tokens/s as model FLOPs utilisation (counted FLOPs / time) of the measured matmul peak, fp32 and bf16."""
    _suite_bench("mfu", config, set_, output, sequences=sequences, length=length, repeats=repeats)


@bench_app.command("gpu")
def bench_gpu_command(
    config: ConfigOpt = None,
    set_: SetOpt = None,
    shape: Annotated[Optional[list[str]], typer.Option(help="Model shape (mapo/data/shapes or a config.json; repeatable).")] = None,
    contexts: Annotated[int, typer.Option(help="Prompts sampled together in the batched rollout.")] = 16,
    new_tokens: Annotated[int, typer.Option(help="Tokens generated per prompt.")] = 64,
    sequences: Annotated[int, typer.Option(help="Packed sequences per update.")] = 8,
    length: Annotated[int, typer.Option(help="Tokens per sequence.")] = 1024,
    repeats: Annotated[int, typer.Option(help="Timed repetitions (the fastest counts).")] = 3,
    output: BenchOutOpt = None,
) -> None:
    """Random-init SmolLM2-135M and Qwen2.5-1.5B shapes on the policy's device: rollout and update tokens/s, MFU, peak memory."""
    from rich.console import Console

    from mapo.lab.bench import ratio_table, write_results
    from mapo.lab.bench.gpu import COLUMNS, SHAPES, bench_gpu, markdown
    from mapo.run_folder import new_run_dir

    settings = train_config(config, set_)
    try:
        results = bench_gpu(settings, tuple(shape or SHAPES), contexts=contexts, new_tokens=new_tokens,
                            sequences=sequences, length=length, repeats=repeats)
    except (ValueError, FileNotFoundError) as err:
        raise fail(err) from None
    folder = Path(output or new_run_dir(settings.output_dir, "bench-gpu"))
    path = write_results(folder, "bench_gpu", results)
    (folder / "gpu.md").write_text(markdown(results), encoding="utf-8")
    Console().print(ratio_table(f"mapo bench gpu ({results['device']})", results, COLUMNS))
    typer.echo(f"Results: {path}")


@bench_app.command("memory")
def bench_memory_command(
    config: ConfigOpt = None,
    set_: SetOpt = None,
    eval_turns: Annotated[int, typer.Option(help="Turns of the evaluation dialogue (no early success).")] = 45,
    trajectories: Annotated[int, typer.Option(help="Dialogues in the training step.")] = 8,
    turns: Annotated[int, typer.Option(help="Turns per training dialogue.")] = 15,
    limit_gib: Annotated[float, typer.Option(help="Memory limit the peaks are compared with (GiB).")] = 8.0,
    output: BenchOutOpt = None,
) -> None:
    """Peak RSS of a 45-turn evaluation and of one training step, each in its own subprocess."""
    from rich.console import Console

    from mapo.lab.bench import write_results
    from mapo.lab.bench.memory import bench_memory, memory_table
    from mapo.run_folder import new_run_dir

    settings = train_config(config, set_)  # fails early on a bad config, before any subprocess
    try:
        results = bench_memory(str(config) if config else None, set_ or (), eval_turns=eval_turns,
                               trajectories=trajectories, turns=turns, limit_gib=limit_gib)
    except (ValueError, RuntimeError) as err:
        raise fail(err) from None
    folder = output or new_run_dir(settings.output_dir, "bench-memory")
    path = write_results(Path(folder), "bench_memory", {"config": settings.policy.model, **results})
    Console().print(memory_table(results))
    typer.echo(f"Results: {path}")


@bench_app.command("env")
def bench_env_command(
    config: ConfigOpt = None,
    set_: SetOpt = None,
    steps: Annotated[int, typer.Option(help="Environment steps timed.")] = 40,
    output: BenchOutOpt = None,
) -> None:
    """Environment step latency (p50/p90) with the configured judge (offline unless --set says) against the time of one policy reply."""
    _suite_bench("env", config, set_, output, steps=steps)


@bench_app.command("llm-env")
def bench_llm_env_command(
    config: ConfigOpt = None,
    set_: SetOpt = None,
    trajectories: Annotated[int, typer.Option(help="Dialogues per mode.")] = 16,
    turns: Annotated[int, typer.Option(help="Turns per dialogue.")] = 1,
    concurrency: Annotated[int, typer.Option(help="Dialogues in flight in the concurrent mode.")] = 16,
    server_cores: Annotated[str, typer.Option(help="Cores the started vllm serve binds its threads to.")] = "0-1",
    endpoint: Annotated[Optional[str], typer.Option(help="Use this OpenAI-compatible server instead of starting vllm serve.")] = None,
    endpoint_model: Annotated[str, typer.Option(help="Model name the server serves.")] = "smollm2",
    output: BenchOutOpt = None,
) -> None:
    """LLM-role environment throughput, 1 vs N dialogues in flight, against a local vllm serve."""
    _suite_bench("llm-env", config, set_, output, trajectories=trajectories, turns=turns, concurrency=concurrency,
                 server_cores=server_cores, base_url=endpoint, model=endpoint_model)


@bench_app.command("grpo")
def bench_grpo_command(
    config: ConfigOpt = None,
    set_: SetOpt = None,
    prompts: Annotated[int, typer.Option(help="Prompts per step.")] = 4,
    group: Annotated[int, typer.Option(help="Completions per prompt.")] = 4,
    max_new_tokens: Annotated[int, typer.Option(help="Completion length cap.")] = 48,
    timed: Annotated[int, typer.Option(help="Timed steps after the warm-up (the fastest counts).")] = 2,
    output: BenchOutOpt = None,
) -> None:
    """One single-turn GRPO step: ours vs TRL's GRPOTrainer on the same model, prompts and settings."""
    _suite_bench("grpo", config, set_, output, prompts=prompts, group=group, max_new_tokens=max_new_tokens, timed=timed)


@bench_app.command("all")
def bench_all_command(
    config: ConfigOpt = None,
    set_: SetOpt = None,
    only: Annotated[Optional[list[str]], typer.Option("--only", help="Run only these benchmarks (repeatable).")] = None,
    quick: Annotated[bool, typer.Option("--quick", help="Small sizes: a smoke run of the suite.")] = False,
    output: BenchOutOpt = None,
) -> None:
    """The whole speed suite (rollout, train, mfu, env, llm-env, grpo): a JSON each, suite.json and performance.md."""
    from mapo.lab.bench.suite import BENCHMARKS, run_suite
    from mapo.run_folder import new_run_dir

    settings = train_config(config, set_)
    unknown = [n for n in only or [] if n not in BENCHMARKS]
    if unknown:
        raise fail(ValueError(f"--only {', '.join(unknown)}: unknown; choose from {', '.join(BENCHMARKS)}"))
    folder = Path(output or new_run_dir(settings.output_dir, "bench-all"))
    folder.mkdir(parents=True, exist_ok=True)

    def show(name: str, result: dict) -> None:  # type: ignore[type-arg]
        state = result.get("error") or result.get("skipped") or ", ".join(
            f"{k} {v:.3g}" for k, v in result.get("ratios", {}).items())
        typer.echo(f"  {name}: {state}")

    run_suite(settings, folder, list(only) if only else None, quick=quick, on_result=show)
    typer.echo((folder / "performance.md").read_text(encoding="utf-8"))
    typer.echo(f"Results: {folder / 'suite.json'}\nSummary: {folder / 'performance.md'}")
