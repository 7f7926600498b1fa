"""`mapo env list | try | calibrate | train-judge | demos | players`: the empathy environment's cards, its simulated
user, its judge's calibration; the questioning game's demonstrations and its reference players over budgets."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from mapo.cli.common import OutOpt, env_app, fail


@env_app.command("list")
def env_list() -> None:
    """Table of the bundled scenario cards: id, title, category, dominant axis, ||P_0||, split."""
    from rich.console import Console

    from mapo.cli.env_console import scenario_table
    from mapo.envs.empathy.cards import bundled_scenario_dir

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

    from mapo.cli.env_console import find_scenario, interactive_session
    from mapo.run_folder import new_run_dir

    try:
        chosen = find_scenario(scenario)
        console = Console()
        record = interactive_session(chosen, seed, console.input, console, max_turns=max_turns)
    except ValueError as err:
        raise fail(err) from None
    out = Path(output) if output else new_run_dir("runs", "env-try")
    out.mkdir(parents=True, exist_ok=True)
    (out / "dialogue.json").write_text(json.dumps(record, indent=2, ensure_ascii=False), encoding="utf-8")
    typer.echo(f"Dialogue: {out / 'dialogue.json'}")


@env_app.command("calibrate")
def env_calibrate(
    split: Annotated[str, typer.Option(help="Exemplars to score: heldout, calibration, adversarial, blind, policy or all.")] = "heldout",
    exemplars: Annotated[Optional[Path], typer.Option(help="Folder of exemplar .yaml files (default: bundled).")] = None,
    judge: Annotated[str, typer.Option(help="Judge kind: offline, llm, or any registered kind (as roles.judge.kind in a config).")] = "offline",
    judge_option: Annotated[
        Optional[list[str]],
        typer.Option("--judge-option", help="Judge option key=value, as in roles.judge of a config, e.g. base_url=http://127.0.0.1:8080/v1 (repeatable)."),
    ] = None,
    concurrency: Annotated[int, typer.Option(help="Replies judged at once (an LLM judge's requests in flight).")] = 8,
    limit: Annotated[Optional[int], typer.Option(help="Score only the first N contexts (all their replies).")] = None,
    output: OutOpt = None,
) -> None:
    """Score a judge (the offline one by default) on the labelled exemplars: per-level agreement,
    ranking accuracy, degenerate families, and an LLM judge's repairs and fallbacks."""
    import json

    from rich.console import Console

    from mapo.cli.common import key_values
    from mapo.cli.env_console import calibration_table, family_table, judge_replies_line
    from mapo.envs.empathy.calibrate import evaluate, first_contexts, load_exemplars
    from mapo.envs.empathy.roles import make_role
    from mapo.run_folder import new_run_dir

    options = key_values(judge_option, "--judge-option")
    if judge == "llm":  # as many requests in flight as replies judged at once, unless the option says
        options.setdefault("concurrency", concurrency)
    try:
        items = first_contexts(load_exemplars(split, exemplars), limit)  # type: ignore[arg-type]
        scorer = make_role("judge", {"kind": judge, **options})
        result = evaluate(scorer, items, concurrency=concurrency)
    except ValueError as err:
        raise fail(err) from None
    console = Console()
    name = "LLM" if judge == "llm" else judge.capitalize()
    title = f"{name} judge on {split} exemplars ({result['items']} replies, {result['contexts']} contexts)"
    console.print(calibration_table(result, title))
    if result["families"]:
        console.print(family_table(result))
    typer.echo(judge_replies_line(result))
    out = Path(output) if output else new_run_dir("runs", "calibrate")
    out.mkdir(parents=True, exist_ok=True)
    record = {"split": split, "judge": {"kind": judge, **options}, **result}
    (out / "calibration.json").write_text(json.dumps(record, indent=2, ensure_ascii=False), encoding="utf-8")
    typer.echo(f"Results: {out / 'calibration.json'}")


@env_app.command("train-judge")
def env_train_judge(
    out: Annotated[Path, typer.Option("--output", "--out", help="The judge folder to write (judge.json, weights.pt).")],
    exemplars: Annotated[Optional[Path], typer.Option(help="Folder of exemplar .yaml files (default: bundled; sealed sets left out).")] = None,
    split: Annotated[
        Optional[list[str]], typer.Option("--split", help="Splits to train on (repeatable; default calibration, heldout, adversarial, blind).")
    ] = None,
    exclude: Annotated[
        Optional[list[str]], typer.Option("--exclude", help="Writer units to leave out, e.g. blind7 (a blind set) or a split (repeatable).")
    ] = None,
    epochs: Annotated[int, typer.Option(help="Passes over the training replies.")] = 4,
    layers: Annotated[int, typer.Option(help="Top encoder layers fine-tuned (the rest stay as shipped).")] = 1,
    max_length: Annotated[int, typer.Option(help="Tokens of (context, reply) read.")] = 256,
    seed: Annotated[int, typer.Option(help="Seed of the heads' initialisation, dropout and batch order.")] = 0,
    threads: Annotated[int, typer.Option(help="CPU threads for torch.")] = 1,
    limit: Annotated[Optional[int], typer.Option(help="Train on the first N contexts only (a smoke test).")] = None,
) -> None:
    """Fine-tune the learned judge (a MiniLM cross-encoder, `judge: learned`) on the labelled exemplars, on the CPU."""
    import json

    from mapo.envs.empathy.calibrate import first_contexts
    from mapo.envs.empathy.learned.train import TRAIN_SPLITS, TrainOptions, train_to_folder, training_exemplars

    options = TrainOptions(trained_layers=layers, epochs=epochs, max_length=max_length, seed=seed, threads=threads)
    try:
        items = first_contexts(training_exemplars(exemplars, tuple(split or TRAIN_SPLITS), exclude or ()), limit)
        summary = train_to_folder(out, items, options)
    except ValueError as err:
        raise fail(err) from None
    typer.echo(json.dumps(summary))
    typer.echo(f"Judge: {out} (use it with --judge learned --judge-option path={out}, or roles.judge: {{kind: learned, path: {out}}})")


@env_app.command("demos")
def env_demos(
    env: Annotated[str, typer.Argument(help="A questioning game: twenty-questions or troubleshooting.")],
    out: Annotated[Path, typer.Option("--output", "--out", help="The JSONL file to write (one dialogue per line).")],
    player: Annotated[str, typer.Option(help="Reference player: optimal, informative or random.")] = "random",
    games: Annotated[int, typer.Option(help="How many games to write.")] = 200,
    split: Annotated[str, typer.Option(help="Secrets to play: train, test or all, or a case file path.yaml[:split].")] = "train",
    env_option: Annotated[
        Optional[list[str]], typer.Option("--env-option", help="Environment keyword: key=value, e.g. pool_size=16 (repeatable).")
    ] = None,
    seed: Annotated[int, typer.Option(help="Seed of the random player.")] = 0,
    solved_only: Annotated[bool, typer.Option("--solved-only", help="Write only the games the player solved.")] = False,
) -> None:
    """Write a reference player's games as supervised (SFT) dialogues: exactly the system prompt
    and user messages an RL rollout shows, and the player's replies."""
    from mapo.cli.common import key_values
    from mapo.sft.demos import write_demos

    try:
        counts = write_demos(env, player, games, split, out, key_values(env_option, "--env-option"), seed, solved_only)
    except ValueError as err:
        raise fail(err) from None
    typer.echo(
        f"{counts['written']} games written ({counts['solved']} of {games} solved"
        + (f", {counts['skipped']} unsolved skipped" if solved_only else "") + f")\nDemonstrations: {counts['path']}"
    )


@env_app.command("players")
def env_players(
    env: Annotated[str, typer.Argument(help="A questioning game: twenty-questions or troubleshooting.")],
    setting: Annotated[
        Optional[list[str]], typer.Option("--setting", help="POOL:REPLIES, or POOL for the game's default budget (repeatable).")
    ] = None,
    scenarios: Annotated[str, typer.Option(help="Secrets to play: train, test, all, or a case file path.yaml[:split].")] = "test",
    pools: Annotated[int, typer.Option(help="Pools drawn per secret (pool_seed 0 .. N-1).")] = 50,
    env_option: Annotated[
        Optional[list[str]], typer.Option("--env-option", help="Environment keyword: key=value (repeatable; default: the budget shown).")
    ] = None,
    seed: Annotated[int, typer.Option(help="Seed of the random and informative players.")] = 0,
    out: Annotated[Optional[Path], typer.Option("--json", help="Also write the rows (every figure) to this JSON file.")] = None,
) -> None:
    """Play the reference players (random, informative, optimal) on every secret with many pools at
    each pool size and budget; print their success side by side (and the rows as JSON with --json)."""
    import json

    from mapo.cli.common import key_values
    from mapo.evaluate.player_budgets import Setting, budget_table, play_players

    options = key_values(env_option, "--env-option") if env_option else {"show_turns_left": True}
    try:
        settings = [Setting.parse(s) for s in (setting or ["8:5", "16:6", "32:7", "8", "16", "32"])]
        rows = play_players(env, scenarios, settings, pools, options, seed=seed)
    except ValueError as err:
        raise fail(err) from None
    typer.echo(budget_table(rows))
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps({"env": env, "scenarios": scenarios, "pools": pools, "options": options,
                                         "seed": seed, "rows": rows}, indent=2) + "\n", encoding="utf-8")
        typer.echo(f"Rows: {out}")
