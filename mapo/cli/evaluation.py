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
    out: OutOpt = None,
) -> None:
    """Run a policy on a scenario set with EMPA's evaluation settings; write eval.json, transcripts and a viewer."""
    import json

    from mapo.backends.endpoint import BackendError
    from mapo.engines.base import EngineError
    from mapo.evaluate.checkpoints import load_eval_policy, run_config
    from mapo.evaluate.empa import hacking_line
    from mapo.evaluate.responders import endpoint_policy
    from mapo.run_folder import new_run_dir
    from mapo.evaluate.runner import eval_spec_for, figures_line, run_eval

    if (model is None) == (endpoint is None):
        raise fail(ValueError("give exactly one of a model (--model) or an OpenAI-compatible endpoint (--endpoint)"))
    try:
        trained = run_config(model) if model is not None else None
        spec = eval_spec_for(
            trained, env, key_values(env_option, "--env-option"), max_sentences=max_sentences, system_prompt=system_prompt,
            scenarios=scenarios, limit=limit, samples=samples, max_turns=max_turns, temperature=temperature,
            top_p=top_p, max_new_tokens=max_new_tokens, max_context_tokens=max_context_tokens, seed=seed,
            scenarios_per_batch=batch_scenarios, engine=engine,
        )
        if endpoint is not None:
            policy = endpoint_policy(endpoint, endpoint_model, api_key_env, concurrency=spec.env_workers)
            label = policy.name
        else:
            policy, label = load_eval_policy(model, gguf_file=gguf_file, dtype=dtype, seed=seed)
        path = run_eval(policy, spec, out or new_run_dir("runs", "eval"), label)
    except (ValueError, FileNotFoundError, BackendError, EngineError) as err:
        raise fail(err) from None
    summary = json.loads(path.read_text(encoding="utf-8"))["summary"]
    epmq = summary["epmq"]["epmq"] if summary["epmq"] else None
    typer.echo(
        f"pass {summary['pass_count']}/{summary['dialogues']} ({100 * summary['pass_rate']:.1f}%)  "
        f"EPM-Q {'n/a' if epmq is None else f'{epmq:.1f}'}  "
        # DESIGN 3's reported alignment is cos(v_t, -P_{t-1}); EPM-Q's Align uses cos(v_t, v*_0)
        f"alignment to deficit -P_t-1 {summary['alignment']['deficit']:+.3f}  "
        f"alignment to v*_0 {summary['alignment']['target']:+.3f}  "
        f"fallbacks {summary['fallback_total']}"
    )
    typer.echo(f"reward hacking: {hacking_line(summary['hacking'])}")
    if "figures" in summary:
        typer.echo(f"{label}: {figures_line(summary['figures'])}")
    for name, reference in summary.get("references", {}).items():
        typer.echo(f"{name}: {figures_line(reference['figures'])}")
    typer.echo(f"Eval: {path}\nTranscripts: {path.parent / 'transcripts.jsonl'}\nViewer: {path.parent / 'transcripts.html'}")


@app.command()
def compare(
    results: Annotated[list[Path], typer.Argument(help="Two or more eval (or benchmark) result folders / JSON files; the first is the baseline.")],
    label: Annotated[Optional[list[str]], typer.Option(help="A column name per result, in order (default: folder names).")] = None,
    out: OutOpt = None,
) -> None:
    """Side-by-side table (markdown and HTML) of results, with each one's difference from the first."""
    from mapo.run_folder import new_run_dir
    from mapo.evaluate.compare import write_comparison

    try:
        md, html_path, markdown = write_comparison(results, out or new_run_dir("runs", "compare"), label)
    except (ValueError, FileNotFoundError) as err:
        raise fail(err) from None
    typer.echo(markdown)
    typer.echo(f"Comparison: {md}\nHTML: {html_path}")


@app.command()
def report(run: Annotated[Path, typer.Argument(help="A training run folder (with metrics.jsonl).")]) -> None:
    """Write RUN/report.html: training curves as embedded plots, links to transcripts and checkpoints."""
    from mapo.evaluate.report import write_report

    try:
        path = write_report(run)
    except FileNotFoundError as err:
        raise fail(err) from None
    typer.echo(f"Report: {path}")
