"""`mapo sft`: supervised fine-tuning on dialogues (the `sft` and `policy` sections of a training config)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from mapo.cli.common import ConfigOpt, ResumeOpt, SetOpt, app, fail, train_config


@app.command()
def sft(
    data: Annotated[Optional[Path], typer.Option("--data", help="JSONL dialogues to learn (sets sft.train_file).")] = None,
    eval_data: Annotated[
        Optional[Path], typer.Option("--eval-data", help="Held-out JSONL dialogues (sets sft.eval_file; default: sft.eval_fraction of --data).")
    ] = None,
    config: ConfigOpt = None,
    set_: SetOpt = None,
    resume: ResumeOpt = None,
    output: Annotated[
        Optional[Path], typer.Option("--output", help="Run folder to write (default: <output_dir>/<name>-sft-<timestamp>).")
    ] = None,
) -> None:
    """Fine-tune the policy on demonstration dialogues (loss on the assistant's tokens only); the run's
    final/ folder is a model for `mapo train --set policy.model=...` and `mapo eval --model ...`."""
    from mapo.reliability import TrainingInterrupted
    from mapo.sft.trainer import run_sft

    if resume is not None and (config is not None or output is not None or data is not None or eval_data is not None):
        raise fail(ValueError("--resume continues a run with its own config.yaml and folder; drop --config/--output/--data"))
    if output is not None and (output / "metrics.jsonl").exists():
        raise fail(ValueError(f"--output {output} already holds a run; use --resume {output} to continue it"))
    overrides = list(set_ or [])
    overrides += [f"sft.train_file={data}"] if data is not None else []
    overrides += [f"sft.eval_file={eval_data}"] if eval_data is not None else []
    settings = None if resume is not None else train_config(config, overrides)
    try:
        run_dir = run_sft(settings, output=output, resume=resume, overrides=overrides if resume else [])
    except (ValueError, FileNotFoundError) as err:
        raise fail(err) from None
    except TrainingInterrupted as err:
        typer.echo(err.resume_hint("mapo sft"))
        raise typer.Exit(130) from None
    from mapo.run_folder import RunFolder

    rows = [m for m in RunFolder(run_dir).read_metrics() if "eval_loss" in m]
    if rows:
        typer.echo(f"held-out loss {rows[0]['eval_loss']:.3f} (step {rows[0]['step']}) -> {rows[-1]['eval_loss']:.3f} (step {rows[-1]['step']})")
    typer.echo(f"Run folder: {run_dir}\nModel: {run_dir / 'final'}")
    typer.echo(f"RL from it: mapo train --set policy.model={run_dir / 'final'}")
