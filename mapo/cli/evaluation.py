"""`mapo eval`, `mapo compare`, `mapo report`: a policy on held-out scenarios, results side by side, a run's curves."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from mapo.cli.common import (
    ApiKeyEnvOpt,
    EndpointModelOpt,
    EndpointOpt,
    EngineOpt,
    GgufFileOpt,
    ModelOpt,
    OutOpt,
    app,
    fail,
    key_values,
)


@app.command("eval")
def eval_command(
    model: ModelOpt = None,
    gguf_file: GgufFileOpt = None,
    endpoint: EndpointOpt = None,
    endpoint_model: EndpointModelOpt = None,
    api_key_env: ApiKeyEnvOpt = "OPENAI_API_KEY",
    dtype: Annotated[Optional[str], typer.Option(help="float32 or bfloat16 (local models; default: the model's).")] = None,
    env: Annotated[Optional[str], typer.Option(help="Registered environment or package.module:Factory (default: empathy, or the run's).")] = None,
    env_option: Annotated[
        Optional[list[str]], typer.Option("--env-option", help="Environment keyword: key=value (YAML value; repeatable).")
    ] = None,
    scenarios: Annotated[str, typer.Option(help="What the environment loads: a bundled split (train/test/all), a folder of cards, a persona .jsonl (emotion), ...")] = "test",
    limit: Annotated[Optional[int], typer.Option(help="Only the first N scenarios.")] = None,
    samples: Annotated[int, typer.Option(help="Dialogues per scenario.")] = 1,
    max_turns: Annotated[int, typer.Option(help="Turn cap per dialogue (EMPA: 45).")] = 45,
    temperature: Annotated[float, typer.Option(help="Sampling temperature (> 0).")] = 0.7,
    top_p: Annotated[float, typer.Option(help="Nucleus sampling mass.")] = 1.0,
    max_new_tokens: Annotated[
        Optional[int], typer.Option(help="Reply length cap in tokens (default: the environment's reply limit, or 96).")
    ] = None,
    max_sentences: Annotated[
        Optional[int], typer.Option(help="A reply ends after this many sentences (default: the run's, the environment's, or 3; 0: no limit).")
    ] = None,
    max_context_tokens: Annotated[int, typer.Option(help="Dialogue length cap in tokens (local models).")] = 8192,
    system_prompt: Annotated[Optional[str], typer.Option(help="The policy's system prompt (default: the run's, or the environment's).")] = None,
    seed: Annotated[int, typer.Option(help="Seed for sampling and the simulated users.")] = 0,
    batch_scenarios: Annotated[int, typer.Option(help="Scenarios rolled out together.")] = 4,
    engine: EngineOpt = "auto",
    max_fallback_fraction: Annotated[
        Optional[float], typer.Option(help="Mark the result invalid when more than this share of turns got a "
                                      "judge/director fallback (default: the run's env.max_fallback_fraction, or 0.5).")
    ] = None,
    allow_fallbacks: Annotated[
        bool, typer.Option("--allow-fallbacks", help="Exit 0 on an invalid result (it stays marked invalid).")
    ] = False,
    out: OutOpt = None,
) -> None:
    """Run a policy on a scenario set with EMPA's evaluation settings; write eval.json, transcripts and a viewer.

    Exits 1 when the result is invalid (too many turns scored with fallback values) unless --allow-fallbacks."""
    import json

    from mapo.backends.endpoint import BackendError
    from mapo.engines.base import EngineError
    from mapo.evaluate.checkpoints import load_eval_policy, run_config
    from mapo.evaluate.empa import hacking_line
    from mapo.evaluate.responders import endpoint_policy
    from mapo.evaluate.runner import eval_spec_for, figures_line, run_eval
    from mapo.evaluate.validity import json_format_hint
    from mapo.run_folder import new_run_dir

    if (model is None) == (endpoint is None):
        raise fail(ValueError("give exactly one of a model (--model) or an OpenAI-compatible endpoint (--endpoint)"))
    try:
        trained = run_config(model) if model is not None else None
        spec = eval_spec_for(
            trained, env, key_values(env_option, "--env-option"), max_sentences=max_sentences, system_prompt=system_prompt,
            scenarios=scenarios, limit=limit, samples=samples, max_turns=max_turns, temperature=temperature,
            top_p=top_p, max_new_tokens=max_new_tokens, max_context_tokens=max_context_tokens, seed=seed,
            scenarios_per_batch=batch_scenarios, engine=engine, max_fallback_fraction=max_fallback_fraction,
            allow_fallbacks=allow_fallbacks,
        )
        if endpoint is not None:
            policy = endpoint_policy(endpoint, endpoint_model, api_key_env, concurrency=spec.env_workers)
            label = policy.name
        else:
            policy, label = load_eval_policy(model, gguf_file=gguf_file, dtype=dtype, seed=seed)
        path = run_eval(policy, spec, out or new_run_dir("runs", "eval"), label)
    except (ValueError, FileNotFoundError, BackendError, EngineError) as err:
        raise fail(err) from None
    data = json.loads(path.read_text(encoding="utf-8"))
    summary, verdict = data["summary"], data["summary"]["validity"]
    shares = "  ".join(f"{role} {share:.0%}" for role, share in verdict["shares"].items())
    if verdict["valid"]:
        epmq = summary["epmq"]["epmq"] if summary["epmq"] else None
        typer.echo(
            f"pass {summary['pass_count']}/{summary['dialogues']} ({100 * summary['pass_rate']:.1f}%)  "
            f"EPM-Q {'n/a' if epmq is None else f'{epmq:.1f}'}  "
            # DESIGN 3's reported alignment is cos(v_t, -P_{t-1}); EPM-Q's Align uses cos(v_t, v*_0)
            f"alignment to deficit -P_t-1 {summary['alignment']['deficit']:+.3f}  "
            f"alignment to v*_0 {summary['alignment']['target']:+.3f}  "
            f"fallbacks {summary['fallback_total']} (share of turns: {shares})"
        )
    else:  # no score printed: a number made of neutral fallback levels gets quoted like any other
        typer.echo(f"INVALID: {verdict['reason']}")
        typer.echo(f"fallback share of turns: {shares}; pass rate and EPM-Q not shown (eval.json keeps them, "
                   "marked invalid)")
        hint = json_format_hint(data["config"]["env_options"], verdict)
        if hint:
            typer.echo(f"hint: {hint}")
    typer.echo(f"reward hacking: {hacking_line(summary['hacking'])}")
    if "figures" in summary:
        typer.echo(f"{label}: {figures_line(summary['figures'])}")
    for name, reference in summary.get("references", {}).items():
        typer.echo(f"{name}: {figures_line(reference['figures'])}")
    if "references_error" in summary:
        typer.echo(f"reference players not played (the policy's results are kept): {summary['references_error']}", err=True)
    typer.echo(f"Eval: {path}\nTranscripts: {path.parent / 'transcripts.jsonl'}\nViewer: {path.parent / 'transcripts.html'}")
    if not verdict["valid"]:
        if not allow_fallbacks:
            typer.echo("error: invalid evaluation (exit 1); --allow-fallbacks keeps it with exit 0", err=True)
            raise typer.Exit(1)
        typer.echo("kept as asked (--allow-fallbacks); the result stays marked invalid")


@app.command()
def compare(
    results: Annotated[list[Path], typer.Argument(
        help="Two or more eval (or benchmark) result folders / JSON files; the first is the baseline. "
             "With --blind: two eval folders. With --score-blind: PAIRS KEY RATINGS. With --pool-blind: score folders.")],
    label: Annotated[Optional[list[str]], typer.Option(help="A column name per result, in order (default: folder names).")] = None,
    blind: Annotated[bool, typer.Option("--blind", help="Write pairs of transcripts for a blind rater, and a separate key.")] = False,
    score_blind: Annotated[bool, typer.Option("--score-blind", help="Score a rater's ratings: PAIRS KEY RATINGS.")] = False,
    pool_blind: Annotated[bool, typer.Option("--pool-blind", help="Pool several --score-blind results of the same two "
                                             "labels (one per seed, say): SCORE folders.")] = False,
    turns: Annotated[Optional[int], typer.Option(help="--blind: show only the first N turns of each dialogue.")] = None,
    seed: Annotated[Optional[int], typer.Option(help="--blind: seed of the A/B order (default: a fresh one, kept in the key).")] = None,
    out: OutOpt = None,
) -> None:
    """Side-by-side table (markdown and HTML) of results, with each one's difference from the first;
    or a blind pairwise comparison of two evals (--blind, then --score-blind, and --pool-blind over
    several; docs/blind-rating.md)."""
    from mapo.run_folder import new_run_dir

    mode = [name for name, given in (("blind", blind), ("blind-score", score_blind), ("blind-pool", pool_blind)) if given]
    default = None if out else new_run_dir("runs", mode[0] if len(mode) == 1 else "compare")
    target = out or default
    try:
        if len(mode) > 1:
            raise ValueError("give one of --blind, --score-blind and --pool-blind")
        if blind:
            _write_blind(results, label, turns, seed, target)
        elif score_blind:
            _score_blind(results, target)
        elif pool_blind:
            from mapo.lab.blind.pool import pool_blind as pool

            md, text = pool(list(results), target)
            typer.echo(text)
            typer.echo(f"Pooled: {md}")
        else:
            from mapo.evaluate.compare import write_comparison

            md, html_path, markdown = write_comparison(results, target, label)
            typer.echo(markdown)
            typer.echo(f"Comparison: {md}\nHTML: {html_path}")
    except (ValueError, FileNotFoundError) as err:
        if default is not None and not any(default.iterdir()):
            default.rmdir()  # refused input leaves no empty run folder behind
        raise fail(err) from None


def _write_blind(results: list[Path], labels: Optional[list[str]], turns: Optional[int], seed: Optional[int], out: Path) -> None:
    import json

    from mapo.lab.blind.pairs import write_blind

    if len(results) != 2:
        raise ValueError(f"--blind compares two eval folders, got {len(results)}")
    rater, key, count = write_blind((results[0], results[1]), out, labels, turns, seed)
    for run in json.loads(key.read_text(encoding="utf-8"))["runs"]:
        if not run["verdict"]["valid"]:
            typer.echo(f"note: {run['label']}'s evaluation is invalid ({run['verdict']['reason']}); its transcripts "
                       "pair as usual, but the score will not report agreement with its EPM-Q")
    typer.echo(f"{count} pairs for the rater: {rater}/pairs.md (read in full), ratings to fill in: {rater}/ratings.csv")
    typer.echo(f"Key (keep it from the rater until the ratings are in): {key}")
    typer.echo(f"Then: mapo compare --score-blind {rater}/pairs.jsonl {key} {rater}/ratings.csv")


def _score_blind(results: list[Path], out: Path) -> None:
    from mapo.lab.blind.score import score_blind

    if len(results) != 3:
        raise ValueError(f"--score-blind takes PAIRS KEY RATINGS, got {len(results)} path(s)")
    md, text = score_blind(results[0], results[1], results[2], out)
    typer.echo(text)
    typer.echo(f"Score: {md}")


@app.command()
def report(
    runs: Annotated[list[Path], typer.Argument(help="Training run folders (with metrics.jsonl); several with --png: one curve each.")],
    png: Annotated[
        Optional[Path], typer.Option("--png", help="Also draw the runs' learning curve into this PNG file (mean and each run).")
    ] = None,
    references: Annotated[
        Optional[Path], typer.Option("--references", help="An eval folder or eval.json whose reference players (a game's optimal, informative "
                                     "and random) are drawn as lines on the curve.")
    ] = None,
    title: Annotated[str, typer.Option(help="The figure's title (with --png).")] = "",
) -> None:
    """Write RUN/report.html: training curves as embedded plots, links to transcripts and checkpoints;
    with --png, one learning-curve image of all the runs given."""
    from mapo.evaluate.compare import result_file
    from mapo.report.curves import reference_figures, write_learning_curve
    from mapo.report.run import write_report

    try:
        for run in runs:
            typer.echo(f"Report: {write_report(run)}")
        if png is not None:
            drawn = reference_figures(result_file(references)) if references is not None else None
            typer.echo(f"Learning curve: {write_learning_curve(runs, png, drawn, title=title)}")
        elif references is not None:
            raise ValueError("--references goes with --png")
    except (FileNotFoundError, ValueError) as err:
        raise fail(err) from None
