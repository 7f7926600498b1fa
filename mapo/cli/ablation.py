"""`mapo ablate`: every estimator x reward variant x seed under one budget, evaluated, as one table."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from mapo.cli.common import SetOpt, app, fail


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
    from mapo.ablate import plan_for, read_plan, run_ablation
    from mapo.run_folder import new_run_dir

    try:
        if resume is not None:
            if quick or variant or seeds or steps or output or set_:
                raise ValueError("--resume continues an ablation with its own plan.json; drop the other plan options")
            plan, folder = read_plan(resume), resume
        else:
            plan = plan_for(quick, variant, seeds, steps, set_ or ())
            folder = output or new_run_dir("runs", "ablate-quick" if quick else "ablate")
        typer.echo(f"Ablation: {len(plan.units())} runs ({', '.join(plan.variants)} x seeds {plan.seeds}) "
                   f"+ base; {plan.steps} steps each; folder {folder}")
        md = run_ablation(plan, folder, jobs=jobs, on_done=lambda name, did: typer.echo(f"  {name}: {did}"))
    except (ValueError, FileNotFoundError) as err:
        raise fail(err) from None
    typer.echo(md.read_text(encoding="utf-8"))
    typer.echo(f"Table: {md}\nJSON: {md.with_suffix('.json')}\nHTML: {md.with_suffix('.html')}\n"
               f"Curves: {md.parent / 'curves.png'}")
