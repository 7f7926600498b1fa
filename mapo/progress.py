"""Progress bars with an ETA for every long command (rich, on stderr).

`progress_bar(total, description)` yields a callable `advance(n=1, **fields)`; the bar
shows done/total, an optional status line of `fields`, elapsed time and the
remaining-time estimate. When stderr is not a terminal (CI, pipes) rich falls back to
plain periodic lines, so logs stay readable.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

_CONSOLE = Console(stderr=True)


@contextlib.contextmanager
def progress_bar(
    total: int, description: str, *, completed: int = 0, status: str = "", show: bool = True, **fields: Any
) -> Iterator[Callable[..., None]]:
    """A bar over `total` units of work, `completed` of them already done; call the yielded
    `advance(n, **fields)` as units finish. `status` is a rich format of `{task.fields[...]}`
    shown after the count, `fields` their starting values; `show=False` draws nothing."""
    columns: list[ProgressColumn] = [TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn()]
    if status:
        columns.append(TextColumn(status))
    columns += [TextColumn("elapsed"), TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn()]
    with Progress(*columns, console=_CONSOLE, transient=False, disable=not show) as progress:
        task = progress.add_task(description, total=total, completed=completed, **fields)

        def advance(n: int = 1, **values: Any) -> None:
            progress.update(task, advance=n, **values)

        yield advance
