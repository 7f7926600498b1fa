"""Opening a training run: a new run folder with its config.yaml, or a resumed one restored from its
latest checkpoint with its own config (`mapo train`, `mapo sft`; the folder's layout is mapo.run_folder).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from mapo.config import TrainConfig, dump_config, load_config
from mapo.device import resolve_precision
from mapo.run_folder import RunFolder, new_run_dir

T = TypeVar("T")


def open_for_resume(resume: str | Path, overrides: Iterable[str] = ()) -> tuple[RunFolder, TrainConfig]:
    """The run folder `--resume` names and its config.yaml with `overrides` applied (a TrainConfig)."""
    run = RunFolder(Path(resume))
    if not (run.path / "config.yaml").is_file():
        raise FileNotFoundError(f"--resume {resume}: not a run folder (no config.yaml)")
    return run, load_config(run.path / "config.yaml", list(overrides))


def restore_latest(run: RunFolder, config: TrainConfig, trainer: Any, logs_kept_without_checkpoint: int) -> None:
    """Write the (possibly overridden) config back, drop half-written checkpoints, and load the
    latest complete one into `trainer`; without one, drop the logs after step
    `logs_kept_without_checkpoint` so the run starts over cleanly."""
    dump_config(config, run.path / "config.yaml")
    run.discard_partial_checkpoints()
    checkpoint = run.latest_checkpoint()
    if checkpoint is not None:
        trainer.load_checkpoint(run, checkpoint)
    else:
        run.drop_logs_after(logs_kept_without_checkpoint)


def open_run(
    config: Any,
    output: str | Path | None,
    resume: str | Path | None,
    overrides: Sequence[str],
    make_trainer: Callable[[Any, Callable[[], Path]], T],
    suffix: str = "",
    logs_kept_without_checkpoint: int = 0,
) -> tuple[RunFolder, T]:
    """The run folder and trainer of a new or resumed run (`mapo train`, `mapo sft`).

    `resume` continues RUN_DIR from its latest checkpoint with its own config.yaml plus
    `overrides` (`restore_latest`); otherwise `config` (a TrainConfig, else the defaults with
    `overrides`) runs in `output` or a new `<output_dir>/<name><suffix>-<timestamp>`.
    `make_trainer(config, folder)` builds the trainer (anything with `policy`, `load_checkpoint`);
    `folder()` gives the run folder's path, creating a new run's (with its config.yaml) on the first
    call, so a trainer that fails to build (bad data, a missing model) leaves no folder behind
    unless it asked for one first (an SFT stage that runs inside it).
    """
    if resume is not None:
        run, config = open_for_resume(resume, overrides)
        trainer = make_trainer(config, lambda: run.path)
        restore_latest(run, config, trainer, logs_kept_without_checkpoint)
        return run, trainer
    config = config or load_config(None, overrides)
    opened: list[RunFolder] = []

    def folder() -> Path:
        if not opened:
            opened.append(RunFolder(Path(output) if output is not None else new_run_dir(config.output_dir, config.name + suffix)))
            dump_config(config, opened[0].path / "config.yaml")
        return opened[0].path

    trainer = make_trainer(config, folder)
    # `auto` is pinned to what it chose here (a timing decides it on a CPU), so a resume, on this
    # machine or another, continues in the precision the run started in
    # (the trainer may have settled `auto` itself: SFT on a CPU trains in float32, mapo.sft.machine)
    chosen = getattr(trainer, "config", config).policy.dtype
    config.policy.dtype = resolve_precision(chosen, trainer.policy.device).name  # type: ignore[attr-defined]
    folder()
    dump_config(config, opened[0].path / "config.yaml")
    return opened[0], trainer
