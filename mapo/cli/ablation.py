"""`mapo ablate`: every estimator x reward variant x seed under one budget, evaluated, as one table."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from mapo.cli.common import SetOpt, app, fail


@app.command()
def ablate(
    output: Annotated[
        Optional[Path], typer.Option("--output", help="Ablation folder (default: runs/ablate-<time>, or runs/ablate-<plan>-<time>).")
    ] = None,
    resume: Annotated[
        Optional[Path], typer.Option("--resume", help="Continue ABLATION_DIR: skip finished units, resume cut runs from their checkpoints.")
    ] = None,
    quick: Annotated[bool, typer.Option("--quick", help="A few minutes: 2 estimators, 2 seeds, 2 tiny steps, short eval (= --plan quick).")] = False,
    plan_name: Annotated[
        Optional[str], typer.Option("--plan", help="A named plan: default, quick, game (the questioning game: 6 variants x 5 seeds "
                                    "from a warm start given by --set policy.model=...), empathy (mapo and grpo x 5 seeds from an "
                                    "SFT checkpoint given the same way), a plug-in's (mapo.lab.ablate.PLANS) or a 'package.module:factory' "
                                    "path. This project's studies' plans (study, empathy-warm, game-forfeit, game-alpha, game-lr, "
                                    "game-timeout, game-turns, game-turns-alpha) live in experiments/<study>/plan.py and resolve "
                                    "by name from a mapo checkout's root.")
    ] = None,
    bench_data: Annotated[
        Optional[Path], typer.Option("--bench-data", help="Folder with eqbench/ and emobench/ (the authors' files) for plans "
                                     "with benchmarks (study default: ../shared/data).")
    ] = None,
    variant: Annotated[
        Optional[list[str]], typer.Option("--variant", help="Only these variants (repeatable; default: the whole grid).")
    ] = None,
    seeds: Annotated[Optional[int], typer.Option(help="Seeds per variant (0..N-1); more into an existing --output grow it.")] = None,
    seed: Annotated[
        Optional[list[int]], typer.Option("--seed", help="Only these seeds (repeatable; instead of --seeds): a seed to redo, "
                                          "or the share of a study another machine runs, merged later with --export.")
    ] = None,
    steps: Annotated[Optional[int], typer.Option(help="Training steps per run (same rollout budget for all); more into an "
                                                 "existing --output train its finished runs on from their last checkpoint.")] = None,
    jobs: Annotated[int, typer.Option(help="Runs in parallel processes, each with cores/jobs torch threads (a plateau "
                                             "plan's chunks each in a fresh process, also with one job).")] = 1,
    report: Annotated[
        bool, typer.Option("--report", help="With --resume: write the tables and curves from the units finished so far "
                           "and run nothing (a study cut short, or read while it runs).")
    ] = False,
    paired_with: Annotated[
        Optional[list[str]], typer.Option("--paired-with", help="With --report: also pair every variant with this one "
                                          "(repeatable; mapo-idr always is), by seed and by held-out dialogue.")
    ] = None,
    export: Annotated[
        Optional[Path], typer.Option("--export", help="With --resume: copy the finished runs' results without their weights "
                                     "(metrics, transcripts, evaluations) into this folder and write its report there; "
                                     "into an existing export it adds them (the shares of one study). Small enough to commit; "
                                     "--resume EXPORT --report rebuilds the tables.")
    ] = None,
    set_: SetOpt = None,
) -> None:
    """Train every estimator/reward variant with several seeds under one rollout budget, evaluate all
    and the untrained base on held-out scenarios (and the plan's outside benchmarks); write the tables
    with paired 95 % confidence intervals, the training curves and transcript excerpts.

    --set applies to every training run; `eval.FIELD=`, `benchmarks.FIELD=`, `curve.FIELD=` and
    `stop.FIELD=` change the plan's held-out evaluation, benchmarks, held-out curve and plateau rule
    (e.g. --set benchmarks.limit=10; --set curve.every=5: every 5 steps a checkpoint is kept and
    evaluated held-out; --set stop.every=10 --steps 200: every 10 steps a run is evaluated held out
    with the plan's evaluation and stopped once 3 evaluations in a row gained less than 2 points
    each (stop.patience, stop.min_gain), at most at step 200)."""
    from mapo.lab.ablate import plan_for, read_plan, run_ablation, write_outputs
    from mapo.lab.ablate.runner import AblationStopped, sigterm_stops_the_ablation
    from mapo.run_folder import new_run_dir

    folder: Path | None = None
    try:
        if paired_with and not (report or export):
            raise ValueError("--paired-with goes with --report (the tables of a finished or cut ablation)")
        if export is not None and resume is None:
            raise ValueError("--export copies an existing ablation: give its folder with --resume")
        if resume is not None:
            if quick or plan_name or bench_data or variant or seeds or seed or steps or output or set_:
                raise ValueError("--resume continues an ablation with its own plan.json; drop the other plan options")
            plan, folder = read_plan(resume), resume
        elif report:
            raise ValueError("--report reads an existing ablation: give its folder with --resume")
        else:
            if seeds is not None and seed:
                raise ValueError("--seeds N runs seeds 0..N-1 and --seed K only K: give one of them")
            if quick and plan_name not in (None, "quick"):
                raise ValueError(f"--quick is --plan quick; it does not go with --plan {plan_name}")
            name = "quick" if quick else plan_name or "default"
            plan = plan_for(name, variant, seed or seeds, steps, set_ or (), str(bench_data) if bench_data else None)
            folder = output or new_run_dir("runs", "ablate" if name == "default" else f"ablate-{name}")
        if export is not None:
            from mapo.lab.ablate.export import export_ablation

            plan, copied, left = export_ablation(folder, export)
            typer.echo(f"Exported {len(copied)} runs to {export}" + (f"; not finished, left out: {', '.join(left)}" if left else ""))
            md = write_outputs(export, plan, paired_with or ())
        elif report:
            md = write_outputs(folder, plan, paired_with or ())
        else:
            typer.echo(f"Ablation ({plan.name} plan): {len(plan.units())} runs ({', '.join(plan.variants)} x seeds {plan.seeds}) "
                       f"+ base; {'at most ' if plan.stop.every else ''}{plan.steps} steps each; folder {folder}")
            with sigterm_stops_the_ablation():
                md = run_ablation(plan, folder, jobs=jobs, on_done=lambda name, did: typer.echo(f"  {name}: {did}"),
                                  processes=jobs > 1 or plan.stop.every > 0)
    except (ValueError, FileNotFoundError) as err:
        raise fail(err) from None
    except AblationStopped as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(1) from None
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM, here or in a worker: the running units saved checkpoints
        if folder is not None:
            typer.echo(f"Interrupted; finished runs, evaluations and checkpoints are kept. Continue with: "
                       f"mapo ablate --resume {folder}")
        raise typer.Exit(130) from None
    typer.echo(md.read_text(encoding="utf-8"))
    typer.echo(f"Table: {md}\nJSON: {md.with_suffix('.json')}\nHTML: {md.with_suffix('.html')}\n"
               f"Curves: {md.parent / 'curves.png'}")
