"""`mapo bench emobench | eqbench`: the published emotional-intelligence benchmarks with their authors' scoring."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from mapo.cli.common import (
    ApiKeyEnvOpt,
    BatchOpt,
    DtypeOpt,
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


def _bench_responder(model, gguf_file, endpoint, endpoint_model, api_key_env, dtype, batch_size):  # type: ignore[no-untyped-def]
    from mapo.evaluate.responders import load_responder

    try:
        return load_responder(
            model, gguf_file=gguf_file, dtype=dtype, endpoint=endpoint, endpoint_model=endpoint_model,
            api_key_env=api_key_env, concurrency=batch_size,
        )
    except (ValueError, FileNotFoundError) as err:
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
    responder = _bench_responder(model, gguf_file, endpoint, endpoint_model, api_key_env, dtype, batch_size)
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
    responder = _bench_responder(model, gguf_file, endpoint, endpoint_model, api_key_env, dtype, batch_size)
    config = {"data": str(data), "items_selected": item, "limit": limit}
    _run_bench("eqbench", eqbench, items, responder, out, config,
               batch_size=batch_size, max_tokens=max_tokens, temperature=temperature)
