"""`mapo bench emobench | eqbench | knowledge`: the published emotional-intelligence benchmarks with
their authors' scoring, and the world-knowledge probe (mapo.evaluate.knowledge)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from mapo.cli.common import (
    ApiKeyEnvOpt,
    BatchOpt,
    DtypeOpt,
    EngineOpt,
    EndpointModelOpt,
    EndpointOpt,
    GgufFileOpt,
    LimitOpt,
    ModelOpt,
    OutOpt,
    TemperatureOpt,
    bench_app,
    fail,
)


def _bench_responder(model, gguf_file, endpoint, endpoint_model, api_key_env, dtype, batch_size, engine):  # type: ignore[no-untyped-def]
    from mapo.engines.base import EngineError
    from mapo.evaluate.responders import load_responder

    try:
        return load_responder(
            model, gguf_file=gguf_file, dtype=dtype, endpoint=endpoint, endpoint_model=endpoint_model,
            api_key_env=api_key_env, concurrency=batch_size, engine_name=engine,
        )
    except (ValueError, FileNotFoundError, EngineError) as err:
        raise fail(err) from None


def _run_bench(name: str, module: Any, items: list[Any], responder: Any, out: Optional[Path], config: dict[str, Any],
               **options: Any) -> None:
    """Run `module`'s benchmark with a progress bar, write its results folder, print its table;
    a dead endpoint is a clean error."""
    from rich.console import Console

    from mapo.backends.endpoint import BackendError
    from mapo.evaluate.bench import run_benchmark
    from mapo.run_folder import new_run_dir

    out_dir = out or new_run_dir("runs", f"bench-{name}")
    try:
        results, summary = run_benchmark(name, items, responder, getattr(module, f"run_{name}"), out_dir, config, **options)
    except BackendError as err:
        raise fail(err) from None
    Console().print(module.summary_table(summary))
    typer.echo(f"Results: {results}\nPredictions: {out_dir / 'predictions.jsonl'}")


@bench_app.command("emobench")
def bench_emobench(
    data: Annotated[Path, typer.Option(help="Folder with EA.jsonl / EU.jsonl (or its parent with emobench/).")],
    model: ModelOpt = None,
    gguf_file: GgufFileOpt = None,
    endpoint: EndpointOpt = None,
    endpoint_model: EndpointModelOpt = None,
    api_key_env: ApiKeyEnvOpt = "OPENAI_API_KEY",
    dtype: DtypeOpt = "float32",
    engine: EngineOpt = "auto",
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
    from mapo.evaluate import emobench

    try:
        items = emobench.load_emobench(data, tasks=task, languages=language, categories=category, limit=limit)
    except ValueError as err:
        raise fail(err) from None
    if not items:
        raise fail(ValueError("no EmoBench items left after the language/category filters"))
    responder = _bench_responder(model, gguf_file, endpoint, endpoint_model, api_key_env, dtype, batch_size, engine)
    config = {"data": str(data), "tasks": task, "languages": language, "categories": category, "limit": limit}
    _run_bench("emobench", emobench, items, responder, out, config,
               batch_size=batch_size, max_tokens=max_tokens, temperature=temperature)


@bench_app.command("eqbench")
def bench_eqbench(
    data: Annotated[Path, typer.Option(help="The EQ-Bench v2 questions JSON (or a folder holding it).")],
    model: ModelOpt = None,
    gguf_file: GgufFileOpt = None,
    endpoint: EndpointOpt = None,
    endpoint_model: EndpointModelOpt = None,
    api_key_env: ApiKeyEnvOpt = "OPENAI_API_KEY",
    dtype: DtypeOpt = "float32",
    engine: EngineOpt = "auto",
    item: Annotated[Optional[list[str]], typer.Option(help="Keep only these item ids (repeatable).")] = None,
    limit: LimitOpt = None,
    batch_size: BatchOpt = 8,
    max_tokens: Annotated[int, typer.Option(help="Reply length limit in tokens (scores + critique).")] = 600,
    temperature: TemperatureOpt = 0.0,
    out: OutOpt = None,
) -> None:
    """EQ-Bench v2, full-scale scoring: benchmark score over parseable items and the parse rate."""
    from mapo.evaluate import eqbench

    try:
        items = eqbench.load_eqbench(data, limit=limit, ids=item)
    except ValueError as err:
        raise fail(err) from None
    responder = _bench_responder(model, gguf_file, endpoint, endpoint_model, api_key_env, dtype, batch_size, engine)
    config = {"data": str(data), "items_selected": item, "limit": limit}
    _run_bench("eqbench", eqbench, items, responder, out, config,
               batch_size=batch_size, max_tokens=max_tokens, temperature=temperature)


@bench_app.command("knowledge")
def bench_knowledge(
    model: ModelOpt = "embedded",
    gguf_file: GgufFileOpt = None,
    dtype: DtypeOpt = "float32",
    cases: Annotated[str, typer.Option(help="The facts: a bundled case set (twenty-questions, troubleshooting) or a case YAML file.")] = "twenty-questions",
    probes: Annotated[int, typer.Option(help="Facts to ask, half true and half false (even).")] = 200,
    shots: Annotated[int, typer.Option(help="Solved examples before each, half true (even; 0 = none).")] = 4,
    seed: Annotated[int, typer.Option(help="Seed of the draw of facts and examples.")] = 0,
    threads: Annotated[Optional[int], typer.Option(help="torch CPU threads (default: every usable core).")] = None,
    batch_size: Annotated[int, typer.Option(help="Sequences per forward pass (a probe is two: yes and no).")] = 16,
    out: OutOpt = None,
) -> None:
    """World-knowledge probe: yes/no facts of a game's table, scored by log p(" yes") - log p(" no"); AUC and accuracy."""
    import time

    from rich.console import Console

    from mapo.envs.questioning.cases import BUNDLED, bundled_case_file, load_case_set
    from mapo.envs.questioning.players import is_player
    from mapo.evaluate.bench import write_results
    from mapo.evaluate.checkpoints import load_eval_policy
    from mapo.evaluate.knowledge import build_probes, score_probes, summarise
    from mapo.progress import progress_bar
    from mapo.provenance import provenance
    from mapo.run_folder import new_run_dir
    from mapo.runtime import configure_threads

    if model is None or is_player(model):
        raise fail(ValueError(f"--model {model}: the probe reads a language model's log-probabilities; name one"))
    try:
        case_set = load_case_set(bundled_case_file(cases) if cases in BUNDLED else Path(cases))
        items = build_probes(case_set, probes, shots, seed)
        configure_threads(threads)
        policy, label = load_eval_policy(model, gguf_file=gguf_file, dtype=dtype)
        started = time.time()
        with progress_bar(len(items), f"knowledge ({label})") as advance:
            scores = score_probes(policy, items, batch_size, advance)
    except (ValueError, FileNotFoundError) as err:  # a bad case file (CaseError), a missing model, too many probes
        raise fail(err) from None
    summary = summarise([p.fact.truth for p in items], scores)
    config = {"model": label, "dtype": dtype, "cases": str(case_set.path), "probes": probes, "shots": shots,
              "seed": seed, "threads": threads, "seconds": round(time.time() - started, 1), "answers": ["yes", "no"],
              "example_prompt": items[0].prompt()}
    records = [{**p.record(), "score": float(s)} for p, s in zip(items, scores)]
    folder = out or new_run_dir("runs", "bench-knowledge")
    results = write_results(folder, "knowledge", config, summary, records, provenance=provenance())
    Console().print(knowledge_table(label, summary))
    typer.echo(f"Results: {results}\nPredictions: {folder / 'predictions.jsonl'}")


def knowledge_table(label: str, summary: dict[str, Any]) -> Any:
    """One row: the model's AUC and accuracy with their intervals, and how often it says yes."""
    from rich.table import Table

    table = Table(title=f"World-knowledge probe ({summary['probes']} facts, half true)")
    for header in ("model", "AUC", f"{summary['level']:.0%} interval", "accuracy", f"{summary['level']:.0%} interval", "says yes"):
        table.add_column(header, justify="left" if header == "model" else "right")
    table.add_row(label, f"{summary['auc']:.3f}", f"{summary['auc_low']:.3f} - {summary['auc_high']:.3f}",
                  f"{summary['accuracy']:.3f}", f"{summary['accuracy_low']:.3f} - {summary['accuracy_high']:.3f}",
                  f"{summary['yes_rate']:.2f}")
    return table
