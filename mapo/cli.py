"""The `mapo` command. Each subcommand imports its heavy modules lazily so that
`mapo --help` stays instant."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

app = typer.Typer(
    help="mapo: multi-turn dialogue RL with process rewards (MAPO, GRPO, REINFORCE++, ...).",
    no_args_is_help=True,
    add_completion=False,
)
env_app = typer.Typer(help="Scenario cards and the simulated-user environment.", no_args_is_help=True)
app.add_typer(env_app, name="env")
bench_app = typer.Typer(help="Benchmarks: EmoBench, EQ-Bench v2, and speed benchmarks.", no_args_is_help=True)
app.add_typer(bench_app, name="bench")


def _print_version(value: bool) -> None:
    if value:
        from mapo import __version__

        typer.echo(__version__)
        raise typer.Exit()


@app.callback()
def _options(
    version: Annotated[
        bool, typer.Option("--version", callback=_print_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    pass  # only the eager --version option; the app's help text is Typer(help=...)


@app.command()
def version() -> None:
    """Print the installed mapo version."""
    _print_version(True)


# ---------------------------------------------------------------- evaluation commands (mapo/evaluate)

ModelOpt = Annotated[
    Optional[str],
    typer.Option("--model", help="Policy: HF model folder, .gguf file, 'embedded', 'tiny', or a run folder/checkpoint."),
]
GgufFileOpt = Annotated[Optional[str], typer.Option(help="GGUF file inside the --model folder.")]
EndpointOpt = Annotated[
    Optional[str], typer.Option(help="OpenAI-compatible base URL (e.g. http://127.0.0.1:8000/v1) instead of --model.")
]
EndpointModelOpt = Annotated[Optional[str], typer.Option(help="Model name the endpoint serves.")]
ApiKeyEnvOpt = Annotated[str, typer.Option(help="Environment variable holding the endpoint's API key.")]
DtypeOpt = Annotated[str, typer.Option(help="float32 or bfloat16 (local models).")]
BatchOpt = Annotated[int, typer.Option(help="Questions per generate call (local) or in flight (endpoint).")]
TemperatureOpt = Annotated[float, typer.Option(help="Sampling temperature; 0 = greedy.")]
LimitOpt = Annotated[Optional[int], typer.Option(help="Only the first N items (per task), after filtering.")]
OutOpt = Annotated[Optional[Path], typer.Option("--output", help="Output folder (default: runs/<command>-<time>).")]


def _bench_responder(model, gguf_file, endpoint, endpoint_model, api_key_env, dtype, batch_size):  # type: ignore[no-untyped-def]
    from mapo.evaluate.responders import load_responder

    try:
        return load_responder(
            model, gguf_file=gguf_file, dtype=dtype, endpoint=endpoint, endpoint_model=endpoint_model,
            api_key_env=api_key_env, concurrency=batch_size,
        )
    except (ValueError, FileNotFoundError) as err:
        raise _fail(err) from None


def _run_bench(benchmark: str, items, responder, run, out_dir: Path, config: dict, **options):  # type: ignore[no-untyped-def]
    """Run with a progress bar and write the results folder; a dead endpoint is a clean error."""
    from mapo.backends.openai_compat import BackendError
    from mapo.evaluate.bench import run_benchmark

    try:
        return run_benchmark(benchmark, items, responder, run, out_dir, config, **options)
    except BackendError as err:
        raise _fail(err) from None


@bench_app.command("emobench")
def bench_emobench(
    data: Annotated[Path, typer.Option(help="Folder with EA.jsonl / EU.jsonl (or its parent with emobench/).")],
    model: ModelOpt = None,
    gguf_file: GgufFileOpt = None,
    endpoint: EndpointOpt = None,
    endpoint_model: EndpointModelOpt = None,
    api_key_env: ApiKeyEnvOpt = "OPENAI_API_KEY",
    dtype: DtypeOpt = "float32",
    task: Annotated[list[str], typer.Option(help="EA and/or EU (repeatable).")] = ["EA", "EU"],  # noqa: B006
    language: Annotated[Optional[list[str]], typer.Option(help="Keep only these languages (en, zh; repeatable).")] = None,
    category: Annotated[Optional[list[str]], typer.Option(help="Keep only these categories, either level (repeatable).")] = None,
    limit: LimitOpt = None,
    batch_size: BatchOpt = 8,
    max_tokens: Annotated[int, typer.Option(help="Reply length limit in tokens.")] = 48,
    temperature: TemperatureOpt = 0.0,
    out: OutOpt = None,
) -> None:
    """EmoBench (EA, EU): accuracy per category and Overall, per language, with parse failures."""
    from rich.console import Console

    from mapo.evaluate import emobench
    from mapo.run_folder import new_run_dir

    try:
        items = emobench.load_emobench(data, tasks=task, languages=language, categories=category, limit=limit)
    except ValueError as err:
        raise _fail(err) from None
    if not items:
        raise _fail(ValueError("no EmoBench items left after the language/category filters"))
    responder = _bench_responder(model, gguf_file, endpoint, endpoint_model, api_key_env, dtype, batch_size)
    out_dir = out or new_run_dir("runs", "bench-emobench")
    config = {"data": str(data), "tasks": task, "languages": language, "categories": category, "limit": limit}
    results, summary = _run_bench(
        "emobench", items, responder, emobench.run_emobench, out_dir, config,
        batch_size=batch_size, max_tokens=max_tokens, temperature=temperature,
    )
    console = Console()
    console.print(emobench.summary_table(summary))
    typer.echo(f"Results: {results}\nPredictions: {out_dir / 'predictions.jsonl'}")


@bench_app.command("eqbench")
def bench_eqbench(
    data: Annotated[Path, typer.Option(help="The EQ-Bench v2 questions JSON (or a folder holding it).")],
    model: ModelOpt = None,
    gguf_file: GgufFileOpt = None,
    endpoint: EndpointOpt = None,
    endpoint_model: EndpointModelOpt = None,
    api_key_env: ApiKeyEnvOpt = "OPENAI_API_KEY",
    dtype: DtypeOpt = "float32",
    item: Annotated[Optional[list[str]], typer.Option(help="Keep only these item ids (repeatable).")] = None,
    limit: LimitOpt = None,
    batch_size: BatchOpt = 8,
    max_tokens: Annotated[int, typer.Option(help="Reply length limit in tokens (scores + critique).")] = 600,
    temperature: TemperatureOpt = 0.0,
    out: OutOpt = None,
) -> None:
    """EQ-Bench v2, full-scale scoring: benchmark score over parseable items and the parse rate."""
    from rich.console import Console

    from mapo.evaluate import eqbench
    from mapo.run_folder import new_run_dir

    try:
        items = eqbench.load_eqbench(data, limit=limit, ids=item)
    except ValueError as err:
        raise _fail(err) from None
    responder = _bench_responder(model, gguf_file, endpoint, endpoint_model, api_key_env, dtype, batch_size)
    out_dir = out or new_run_dir("runs", "bench-eqbench")
    config = {"data": str(data), "items_selected": item, "limit": limit}
    results, summary = _run_bench(
        "eqbench", items, responder, eqbench.run_eqbench, out_dir, config,
        batch_size=batch_size, max_tokens=max_tokens, temperature=temperature,
    )
    console = Console()
    console.print(eqbench.summary_table(summary))
    typer.echo(f"Results: {results}\nPredictions: {out_dir / 'predictions.jsonl'}")


# ---------------------------------------------------------------- training (mapo/trainer.py) and speed benchmarks

ConfigOpt = Annotated[Optional[Path], typer.Option("--config", help="YAML training config (default: the embedded default run).")]
SetOpt = Annotated[
    Optional[list[str]],
    typer.Option("--set", help="Override a config key: --set rollout.max_turns=3 (dotted key, YAML value; repeatable)."),
]


def _fail(err: Exception) -> typer.Exit:
    typer.echo(f"error: {err}", err=True)
    return typer.Exit(2)


def _train_config(config: Optional[Path], overrides: Optional[list[str]]):  # type: ignore[no-untyped-def]
    from mapo.config import load_config

    try:
        return load_config(config, overrides or [])
    except ValueError as err:
        raise _fail(err) from None


@app.command()
def train(
    config: ConfigOpt = None,
    set_: SetOpt = None,
    resume: Annotated[
        Optional[Path], typer.Option("--resume", help="Continue RUN_DIR from its latest checkpoint (with its config.yaml).")
    ] = None,
    output: Annotated[
        Optional[Path], typer.Option("--output", help="Run folder to write (default: <output_dir>/<name>-<timestamp>).")
    ] = None,
) -> None:
    """Train a policy with MAPO (or any registered estimator) on a multi-turn environment."""
    from mapo.reliability import TrainingInterrupted, TrainingStopped
    from mapo.trainer import train as run_training

    if resume is not None and (config is not None or output is not None):
        raise _fail(ValueError("--resume continues a run with its own config.yaml and folder; drop --config/--output"))
    if output is not None and (output / "metrics.jsonl").exists():
        raise _fail(ValueError(f"--output {output} already holds a run; use --resume {output} to continue it"))
    settings = None if resume is not None else _train_config(config, set_)
    try:
        run_dir = run_training(settings, output=output, resume=resume, overrides=(set_ or []) if resume else [])
    except (ValueError, FileNotFoundError) as err:
        raise _fail(err) from None
    except TrainingStopped as err:  # the environment's servers kept failing (mapo.reliability)
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(1) from None
    except TrainingInterrupted as err:  # Ctrl-C: a checkpoint was saved
        typer.echo(f"Interrupted after step {err.step}; checkpoint saved. Continue with: mapo train --resume {err.run_dir}")
        raise typer.Exit(130) from None
    from mapo.run_folder import RunFolder
    from mapo.records import reward_trend

    typer.echo(reward_trend(RunFolder(run_dir).read_metrics()))
    typer.echo(f"Run folder: {run_dir}")


def _speed_bench(name: str, config: Optional[Path], overrides: Optional[list[str]], output: Optional[Path], **sizes: int) -> None:
    from rich.console import Console

    from mapo.bench import load_parts, ratio_table, write_results
    from mapo.run_folder import new_run_dir

    settings = _train_config(config, overrides)
    module = __import__(f"mapo.bench.{name}", fromlist=["bench"])
    try:
        policy, scenarios, make_env = load_parts(settings)
        results = getattr(module, f"bench_{name}")(policy, scenarios, make_env, settings, **sizes)
    except (ValueError, FileNotFoundError) as err:
        raise _fail(err) from None
    folder = output or new_run_dir(settings.output_dir, f"bench-{name}")
    path = write_results(Path(folder), f"bench_{name}", {"config": settings.policy.model, **results})
    Console().print(ratio_table(f"mapo bench {name}", results, module.COLUMNS))
    typer.echo(f"Results: {path}")


BenchOutOpt = Annotated[Optional[Path], typer.Option("--output", help="Folder for the JSON (default: runs/bench-<name>-<time>).")]


@bench_app.command("rollout")
def bench_rollout_command(
    config: ConfigOpt = None,
    set_: SetOpt = None,
    trajectories: Annotated[int, typer.Option(help="Dialogues per mode.")] = 16,
    turns: Annotated[Optional[int], typer.Option(help="Turns per dialogue (default: rollout.max_turns).")] = None,
    max_new_tokens: Annotated[
        Optional[int], typer.Option(help="Reply length cap (default: rollout.max_new_tokens).")
    ] = None,
    repeats: Annotated[int, typer.Option(help="Alternating repetitions of both modes.")] = 1,
    output: BenchOutOpt = None,
) -> None:
    """Batched multi-turn rollout vs one trajectory at a time: tokens/s and their ratio."""
    _speed_bench("rollout", config, set_, output, trajectories=trajectories, turns=turns,
                 max_new_tokens=max_new_tokens, repeats=repeats)


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
    _speed_bench("train", config, set_, output, trajectories=trajectories, turns=turns,
                 max_new_tokens=max_new_tokens, repeats=repeats)


def _suite_bench(name: str, config: Optional[Path], overrides: Optional[list[str]], output: Optional[Path], **sizes) -> None:  # type: ignore[no-untyped-def]
    """Run one benchmark of mapo/bench/suite.py: print its table, write its JSON."""
    from rich.console import Console

    from mapo.bench import ratio_table, write_results
    from mapo.bench.suite import columns, run_benchmark
    from mapo.run_folder import new_run_dir

    settings = _train_config(config, overrides)
    try:
        results = run_benchmark(name, settings, **sizes)
    except (ValueError, FileNotFoundError, RuntimeError) as err:
        raise _fail(err) from None
    folder = output or new_run_dir(settings.output_dir, f"bench-{name}")
    path = write_results(Path(folder), f"bench_{name.replace('-', '_')}", {"config": settings.policy.model, **results})
    if results.get("modes"):
        Console().print(ratio_table(f"mapo bench {name}", results, columns(name)))
    if results.get("skipped"):
        typer.echo(f"skipped: {results['skipped']}")
    typer.echo(f"Results: {path}")


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

    from mapo.bench import ratio_table, write_results
    from mapo.bench.gpu import COLUMNS, SHAPES, bench_gpu, markdown
    from mapo.run_folder import new_run_dir

    settings = _train_config(config, set_)
    try:
        results = bench_gpu(settings, tuple(shape or SHAPES), contexts=contexts, new_tokens=new_tokens,
                            sequences=sequences, length=length, repeats=repeats)
    except (ValueError, FileNotFoundError) as err:
        raise _fail(err) from None
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

    from mapo.bench import write_results
    from mapo.bench.memory import bench_memory, memory_table
    from mapo.run_folder import new_run_dir

    settings = _train_config(config, set_)  # fails early on a bad config, before any subprocess
    try:
        results = bench_memory(str(config) if config else None, set_ or (), eval_turns=eval_turns,
                               trajectories=trajectories, turns=turns, limit_gib=limit_gib)
    except (ValueError, RuntimeError) as err:
        raise _fail(err) from None
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
    """Offline environment step latency (p50/p90) against the time of one policy reply."""
    _suite_bench("env", config, set_, output, steps=steps)


@bench_app.command("llm-env")
def bench_llm_env_command(
    config: ConfigOpt = None,
    set_: SetOpt = None,
    trajectories: Annotated[int, typer.Option(help="Dialogues per mode.")] = 16,
    turns: Annotated[int, typer.Option(help="Turns per dialogue.")] = 1,
    concurrency: Annotated[int, typer.Option(help="Dialogues in flight in the concurrent mode.")] = 16,
    server_threads: Annotated[int, typer.Option(help="llama.cpp threads.")] = 2,
    endpoint: Annotated[Optional[str], typer.Option(help="Use this OpenAI-compatible server instead of starting llama.cpp.")] = None,
    endpoint_model: Annotated[str, typer.Option(help="Model name the server serves.")] = "smollm2",
    output: BenchOutOpt = None,
) -> None:
    """LLM-role environment throughput, 1 vs N dialogues in flight, against a local llama.cpp server."""
    _suite_bench("llm-env", config, set_, output, trajectories=trajectories, turns=turns, concurrency=concurrency,
                 server_threads=server_threads, base_url=endpoint, model=endpoint_model)


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
    from mapo.bench.suite import BENCHMARKS, run_suite
    from mapo.run_folder import new_run_dir

    settings = _train_config(config, set_)
    unknown = [n for n in only or [] if n not in BENCHMARKS]
    if unknown:
        raise _fail(ValueError(f"--only {', '.join(unknown)}: unknown; choose from {', '.join(BENCHMARKS)}"))
    folder = Path(output or new_run_dir(settings.output_dir, "bench-all"))
    folder.mkdir(parents=True, exist_ok=True)

    def show(name: str, result: dict) -> None:  # type: ignore[type-arg]
        state = result.get("error") or result.get("skipped") or ", ".join(
            f"{k} {v:.3g}" for k, v in result.get("ratios", {}).items())
        typer.echo(f"  {name}: {state}")

    run_suite(settings, folder, list(only) if only else None, quick=quick, on_result=show)
    typer.echo((folder / "performance.md").read_text(encoding="utf-8"))
    typer.echo(f"Results: {folder / 'suite.json'}\nSummary: {folder / 'performance.md'}")


def _key_values(pairs: Optional[list[str]], flag: str) -> dict:  # type: ignore[type-arg]
    """{key: YAML value} from repeated `key=value` options."""
    import yaml

    out = {}
    for pair in pairs or []:
        key, sep, text = pair.partition("=")
        if not sep or not key.strip():
            raise _fail(ValueError(f"{flag} {pair!r}: expected key=value"))
        try:
            out[key.strip()] = yaml.safe_load(text) if text.strip() else ""
        except yaml.YAMLError as err:
            raise _fail(ValueError(f"{flag} {key}: the value {text!r} is not valid YAML ({err})")) from None
    return out


@app.command("eval")
def eval_command(
    model: ModelOpt = None,
    gguf_file: GgufFileOpt = None,
    endpoint: EndpointOpt = None,
    endpoint_model: EndpointModelOpt = None,
    api_key_env: ApiKeyEnvOpt = "OPENAI_API_KEY",
    dtype: Annotated[Optional[str], typer.Option(help="float32 or bfloat16 (local models; default: the model's).")] = None,
    env: Annotated[Optional[str], typer.Option(help="Registered environment (default: empathy, or the run's).")] = None,
    env_option: Annotated[
        Optional[list[str]], typer.Option("--env-option", help="Environment keyword: key=value (YAML value; repeatable).")
    ] = None,
    scenarios: Annotated[str, typer.Option(help="Bundled split (train/test/all), a folder of cards, or a persona .jsonl.")] = "test",
    limit: Annotated[Optional[int], typer.Option(help="Only the first N scenarios.")] = None,
    samples: Annotated[int, typer.Option(help="Dialogues per scenario.")] = 1,
    max_turns: Annotated[int, typer.Option(help="Turn cap per dialogue (EMPA: 45).")] = 45,
    temperature: Annotated[float, typer.Option(help="Sampling temperature (> 0).")] = 0.7,
    top_p: Annotated[float, typer.Option(help="Nucleus sampling mass.")] = 1.0,
    max_new_tokens: Annotated[int, typer.Option(help="Reply length cap in tokens.")] = 96,
    max_sentences: Annotated[
        Optional[int], typer.Option(help="A reply ends after this many sentences (default: the run's, or 3; 0: no limit).")
    ] = None,
    max_context_tokens: Annotated[int, typer.Option(help="Dialogue length cap in tokens (local models).")] = 8192,
    system_prompt: Annotated[Optional[str], typer.Option(help="The policy's system prompt (default: the run's, or mapo's).")] = None,
    seed: Annotated[int, typer.Option(help="Seed for sampling and the simulated users.")] = 0,
    batch_scenarios: Annotated[int, typer.Option(help="Scenarios rolled out together.")] = 4,
    out: OutOpt = None,
) -> None:
    """Run a policy on a scenario set with EMPA's evaluation settings; write eval.json, transcripts and a viewer."""
    import json

    from mapo.backends.openai_compat import BackendError
    from mapo.run_folder import new_run_dir
    from mapo.evaluate.checkpoints import load_eval_policy, run_config
    from mapo.evaluate.empa import hacking_line
    from mapo.evaluate.responders import endpoint_policy
    from mapo.envs.base import evaluation_options
    from mapo.evaluate.runner import EvalSpec, run_eval

    if (model is None) == (endpoint is None):
        raise _fail(ValueError("give exactly one of a model (--model) or an OpenAI-compatible endpoint (--endpoint)"))
    try:
        trained = run_config(model) if model is not None else None
        spec = EvalSpec(
            env=env or (trained.env.name if trained else "empathy"),
            env_options=_key_values(env_option, "--env-option") or (
                evaluation_options(trained.env.name, trained.env.options) if trained and not env else {}),
            scenarios=scenarios, limit=limit, samples=samples, max_turns=max_turns, temperature=temperature,
            top_p=top_p, max_new_tokens=max_new_tokens, max_context_tokens=max_context_tokens, seed=seed,
            max_sentences=(max_sentences or None) if max_sentences is not None else (
                trained.rollout.max_sentences if trained else EvalSpec.max_sentences),
            system_prompt=system_prompt if system_prompt is not None else (
                trained.rollout.system_prompt if trained else EvalSpec.system_prompt),
            scenarios_per_batch=batch_scenarios,
        )
        if endpoint is not None:
            policy = endpoint_policy(endpoint, endpoint_model, api_key_env, concurrency=spec.env_workers)
            label = policy.name
        else:
            policy, label = load_eval_policy(model, gguf_file=gguf_file, dtype=dtype)
        path = run_eval(policy, spec, out or new_run_dir("runs", "eval"), label)
    except (ValueError, FileNotFoundError, BackendError) as err:
        raise _fail(err) from None
    summary = json.loads(path.read_text(encoding="utf-8"))["summary"]
    epmq = summary["epmq"]["epmq"] if summary["epmq"] else None
    typer.echo(
        f"pass {summary['pass_count']}/{summary['dialogues']} ({100 * summary['pass_rate']:.1f}%)  "
        f"EPM-Q {'n/a' if epmq is None else f'{epmq:.1f}'}  "
        # DESIGN 3's reported alignment is cos(v_t, -P_{t-1}); EPM-Q's Align uses cos(v_t, v*_0)
        f"alignment to deficit -P_t-1 {summary['alignment']['deficit']:+.3f}  "
        f"alignment to v*_0 {summary['alignment']['target']:+.3f}  "
        f"fallbacks {summary['fallback_total']}"
    )
    typer.echo(f"reward hacking: {hacking_line(summary['hacking'])}")
    typer.echo(f"Eval: {path}\nTranscripts: {path.parent / 'transcripts.jsonl'}\nViewer: {path.parent / 'transcripts.html'}")


@app.command()
def compare(
    results: Annotated[list[Path], typer.Argument(help="Two or more eval (or benchmark) result folders / JSON files; the first is the baseline.")],
    label: Annotated[Optional[list[str]], typer.Option(help="A column name per result, in order (default: folder names).")] = None,
    out: OutOpt = None,
) -> None:
    """Side-by-side table (markdown and HTML) of results, with each one's difference from the first."""
    from mapo.run_folder import new_run_dir
    from mapo.evaluate.compare import write_comparison

    try:
        md, html_path, markdown = write_comparison(results, out or new_run_dir("runs", "compare"), label)
    except (ValueError, FileNotFoundError) as err:
        raise _fail(err) from None
    typer.echo(markdown)
    typer.echo(f"Comparison: {md}\nHTML: {html_path}")


@app.command()
def report(run: Annotated[Path, typer.Argument(help="A training run folder (with metrics.jsonl).")]) -> None:
    """Write RUN/report.html: training curves as embedded plots, links to transcripts and checkpoints."""
    from mapo.evaluate.report import write_report

    try:
        path = write_report(run)
    except FileNotFoundError as err:
        raise _fail(err) from None
    typer.echo(f"Report: {path}")


# ---------------------------------------------------------------- ablation (mapo/ablate.py)


@app.command()
def ablate(
    output: Annotated[
        Optional[Path], typer.Option("--output", help="Ablation folder (default: runs/ablate-<time>, or runs/ablate-quick-<time>).")
    ] = None,
    resume: Annotated[
        Optional[Path], typer.Option("--resume", help="Continue ABLATION_DIR: skip finished units, resume cut runs from their checkpoints.")
    ] = None,
    quick: Annotated[bool, typer.Option("--quick", help="A few minutes: 2 estimators, 2 seeds, 2 tiny steps, short eval.")] = False,
    variant: Annotated[
        Optional[list[str]], typer.Option("--variant", help="Only these variants (repeatable; default: the whole grid).")
    ] = None,
    seeds: Annotated[Optional[int], typer.Option(help="Seeds per variant (0..N-1).")] = None,
    steps: Annotated[Optional[int], typer.Option(help="Training steps per run (same rollout budget for all).")] = None,
    jobs: Annotated[int, typer.Option(help="Runs in parallel processes, each with cores/jobs torch threads.")] = 1,
    set_: SetOpt = None,
) -> None:
    """Train every estimator/reward variant with several seeds under one rollout budget, evaluate all
    and the untrained base on held-out scenarios; write the mean ± std table and the training curves."""
    import dataclasses
    import json

    from mapo.ablate import VARIANTS, AblationPlan, quick_plan, run_ablation
    from mapo.run_folder import new_run_dir

    try:
        if resume is not None:
            if quick or variant or seeds or steps or output or set_:
                raise ValueError("--resume continues an ablation with its own plan.json; drop the other plan options")
            plan = AblationPlan.from_dict(json.loads((resume / "plan.json").read_text(encoding="utf-8")))
            folder = resume
        else:
            plan = quick_plan() if quick else AblationPlan()
            if variant:
                plan = dataclasses.replace(plan, variants=list(variant))
            if seeds is not None:
                plan = dataclasses.replace(plan, seeds=list(range(seeds)))
            if steps is not None:
                plan = dataclasses.replace(plan, steps=steps)
            plan.train = [*plan.train, *(set_ or [])]
            folder = output or new_run_dir("runs", "ablate-quick" if quick else "ablate")
        typer.echo(f"Ablation: {len(plan.units())} runs ({', '.join(plan.variants)} x seeds {plan.seeds}) "
                   f"+ base; {plan.steps} steps each; folder {folder}")
        md = run_ablation(plan, folder, jobs=jobs, on_done=lambda name, did: typer.echo(f"  {name}: {did}"))
    except KeyError as err:
        raise _fail(ValueError(f"unknown variant {err}; registered: {', '.join(VARIANTS)}")) from None
    except (ValueError, FileNotFoundError) as err:
        raise _fail(err) from None
    typer.echo(md.read_text(encoding="utf-8"))
    typer.echo(f"Table: {md}\nJSON: {md.with_suffix('.json')}\nHTML: {md.with_suffix('.html')}\n"
               f"Curves: {md.parent / 'curves.png'}")


# ---------------------------------------------------------------- environment commands (mapo/envs/empathy)


@env_app.command("list")
def env_list() -> None:
    """Table of the bundled scenario cards: id, title, category, dominant axis, ||P_0||, split."""
    from rich.console import Console

    from mapo.envs.empathy.cards import bundled_scenario_dir
    from mapo.envs.empathy.console import scenario_table

    Console().print(scenario_table())
    typer.echo(f"Cards: {bundled_scenario_dir()}")


@env_app.command("try")
def env_try(
    scenario: Annotated[str, typer.Argument(help="A bundled scenario id (see `mapo env list`) or a card .yaml file.")],
    seed: Annotated[int, typer.Option(help="Seed of the simulated user.")] = 0,
    max_turns: Annotated[int, typer.Option(help="Timeout in turns.")] = 45,
    output: OutOpt = None,
) -> None:
    """Play the policy yourself against the offline simulated user; each turn shows the judge's
    levels, v_t, the need vector, the distance, the IDR reward and the user's reply."""
    import json

    from rich.console import Console

    from mapo.envs.empathy.console import find_scenario, interactive_session
    from mapo.run_folder import new_run_dir

    try:
        chosen = find_scenario(scenario)
        console = Console()
        record = interactive_session(chosen, seed, console.input, console, max_turns=max_turns)
    except ValueError as err:
        raise _fail(err) from None
    out = Path(output) if output else new_run_dir("runs", "env-try")
    out.mkdir(parents=True, exist_ok=True)
    (out / "dialogue.json").write_text(json.dumps(record, indent=2, ensure_ascii=False), encoding="utf-8")
    typer.echo(f"Dialogue: {out / 'dialogue.json'}")


@env_app.command("calibrate")
def env_calibrate(
    split: Annotated[str, typer.Option(help="Exemplars to score: heldout, calibration, adversarial, blind or all.")] = "heldout",
    exemplars: Annotated[Optional[Path], typer.Option(help="Folder of exemplar .yaml files (default: bundled).")] = None,
    output: OutOpt = None,
) -> None:
    """Score the offline judge on the labelled exemplars: per-level agreement and ranking accuracy."""
    import json

    from rich.console import Console

    from mapo.envs.empathy.calibrate import evaluate, load_exemplars
    from mapo.envs.empathy.console import calibration_table, family_table
    from mapo.envs.empathy.judge import OfflineJudge
    from mapo.run_folder import new_run_dir

    try:
        items = load_exemplars(split, exemplars)  # type: ignore[arg-type]
        result = evaluate(OfflineJudge(), items)
    except ValueError as err:
        raise _fail(err) from None
    console = Console()
    console.print(calibration_table(result, f"Offline judge on {split} exemplars ({result['items']} replies, {result['contexts']} contexts)"))
    if result["families"]:
        console.print(family_table(result))
    out = Path(output) if output else new_run_dir("runs", "calibrate")
    out.mkdir(parents=True, exist_ok=True)
    (out / "calibration.json").write_text(json.dumps({"split": split, **result}, indent=2, ensure_ascii=False), encoding="utf-8")
    typer.echo(f"Results: {out / 'calibration.json'}")


def main() -> None:
    app()


if __name__ == "__main__":
    main()
