"""What the single-turn benchmarks share: asking in batches and writing a results folder."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from mapo.evaluate.responders import Conversation, Responder


class BenchmarkDataError(ValueError):
    """A benchmark file is missing, unreadable or has an item that breaks the format."""


def ask_in_batches(
    responder: Responder,
    conversations: Sequence[Conversation],
    *,
    batch_size: int,
    max_tokens: int,
    temperature: float,
    advance: Callable[[int], None] | None = None,
) -> list[str]:
    """The replies, in order; `advance(n)` is called after each batch (progress bars)."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0 (0 = greedy), got {temperature}")
    replies: list[str] = []
    for start in range(0, len(conversations), batch_size):
        batch = conversations[start : start + batch_size]
        answers = responder.respond(batch, max_tokens=max_tokens, temperature=temperature)
        if len(answers) != len(batch):
            raise RuntimeError(f"{responder.name} returned {len(answers)} replies for {len(batch)} questions")
        replies.extend(answers)
        if advance is not None:
            advance(len(batch))
    return replies


def write_results(out_dir: Path, benchmark: str, config: dict[str, Any], summary: dict[str, Any],
                  records: Sequence[dict[str, Any]], **extra: Any) -> Path:
    """`results.json` (benchmark, config, summary, then `extra`'s entries: provenance) and
    `predictions.jsonl` (one scored item a line)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    results = out_dir / "results.json"
    results.write_text(json.dumps({"benchmark": benchmark, "config": config, "summary": summary, **extra}, indent=2,
                                  ensure_ascii=False) + "\n", encoding="utf-8")
    write_jsonl(out_dir / "predictions.jsonl", records)
    return results


def write_jsonl(path: Path, records: Sequence[dict[str, Any]]) -> None:
    with open(path, "w", encoding="utf-8") as handle:
        for record in records:
            handle.write(json.dumps(record, ensure_ascii=False) + "\n")


def run_benchmark(
    benchmark: str,
    items: Sequence[Any],
    responder: Responder,
    run: Callable[..., tuple[list[dict[str, Any]], dict[str, Any]]],
    out_dir: Path,
    config: dict[str, Any],
    **run_options: Any,
) -> tuple[Path, dict[str, Any]]:
    """Run a loaded benchmark with a progress bar and write its results folder."""
    import time

    from mapo.progress import progress_bar

    started = time.time()
    with progress_bar(len(items), f"{benchmark} ({responder.name})") as advance:
        records, summary = run(responder, items, advance=advance, **run_options)
    config = {**config, **run_options, "responder": responder.name, "items": len(items),
              "seconds": round(time.time() - started, 1)}
    return write_results(out_dir, benchmark, config, summary, records), summary
