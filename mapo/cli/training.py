"""`mapo train`: RL training from a YAML config with --set overrides, or --resume of a run folder."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from mapo.cli.common import ConfigOpt, ResumeOpt, SetOpt, app, fail, train_config


@app.command()
def train(
    config: ConfigOpt = None,
    set_: SetOpt = None,
    resume: ResumeOpt = None,
    output: Annotated[
        Optional[Path], typer.Option("--output", help="Run folder to write (default: <output_dir>/<name>-<timestamp>).")
    ] = None,
) -> None:
    """Train a policy with MAPO (or any registered estimator) on a multi-turn environment."""
    from mapo.core.trainer import train as run_training
    from mapo.reliability import TrainingInterrupted, TrainingStopped

    if resume is not None and (config is not None or output is not None):
        raise fail(ValueError("--resume continues a run with its own config.yaml and folder; drop --config/--output"))
    if output is not None and (output / "metrics.jsonl").exists():
        raise fail(ValueError(f"--output {output} already holds a run; use --resume {output} to continue it"))
    settings = None if resume is not None else train_config(config, set_)
    try:
        result = run_training(settings, output=output, resume=resume, overrides=(set_ or []) if resume else [])
    except (ValueError, FileNotFoundError) as err:
        raise fail(err) from None
    except TrainingStopped as err:  # the environment's servers kept failing (mapo.reliability)
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(1) from None
    except TrainingInterrupted as err:  # Ctrl-C or SIGTERM: a checkpoint was saved
        typer.echo(err.resume_hint("mapo train"))
        raise typer.Exit(130) from None
    for line in result.summary:
        typer.echo(line)
