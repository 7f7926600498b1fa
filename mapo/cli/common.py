"""What every `mapo` subcommand shares: the Typer apps, the common options, and how an error ends a command."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer

app = typer.Typer(
    help="mapo: multi-turn dialogue RL with process rewards (MAPO, GRPO, REINFORCE++, ...).",
    no_args_is_help=True,
    add_completion=False,
)
env_app = typer.Typer(help="Scenario cards and the simulated-user environment.", no_args_is_help=True)
app.add_typer(env_app, name="env")
bench_app = typer.Typer(help="Benchmarks: EmoBench, EQ-Bench v2, the world-knowledge probe, and speed benchmarks.", no_args_is_help=True)
app.add_typer(bench_app, name="bench")


def _print_version(value: bool) -> None:
    if value:
        from mapo import __version__

        typer.echo(__version__)
        raise typer.Exit()


@app.callback()
def _options(
    version: Annotated[
        bool, typer.Option("--version", callback=_print_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    pass  # only the eager --version option; the app's help text is Typer(help=...)


@app.command()
def version() -> None:
    """Print the installed mapo version."""
    _print_version(True)


# ---------------------------------------------------------------- options shared by several commands

ModelOpt = Annotated[
    Optional[str],
    typer.Option("--model", help="Policy: HF model folder, .gguf file, 'embedded', 'tiny', or a run folder/checkpoint."),
]
GgufFileOpt = Annotated[Optional[str], typer.Option(help="GGUF file inside the --model folder.")]
EndpointOpt = Annotated[
    Optional[str], typer.Option(help="OpenAI-compatible base URL (e.g. http://127.0.0.1:8000/v1) instead of --model.")
]
EndpointModelOpt = Annotated[Optional[str], typer.Option(help="Model name the endpoint serves.")]
ApiKeyEnvOpt = Annotated[str, typer.Option(help="Environment variable holding the endpoint's API key.")]
DtypeOpt = Annotated[str, typer.Option(help="float32 or bfloat16 (local models).")]
BatchOpt = Annotated[int, typer.Option(help="Questions per generate call (local) or in flight (endpoint).")]
TemperatureOpt = Annotated[float, typer.Option(help="Sampling temperature; 0 = greedy.")]
EngineOpt = Annotated[
    str, typer.Option(help="Rollout engine of a local model: auto (vllm when installed, else hf), hf or vllm.")
]
LimitOpt = Annotated[Optional[int], typer.Option(help="Only the first N items (per task), after filtering.")]
OutOpt = Annotated[Optional[Path], typer.Option("--output", help="Output folder (default: runs/<command>-<time>).")]
ResumeOpt = Annotated[
    Optional[Path], typer.Option("--resume", help="Continue RUN_DIR from its latest checkpoint (with its config.yaml).")
]
ConfigOpt = Annotated[Optional[Path], typer.Option("--config", help="YAML training config, or a bundled one by name (twenty-questions, troubleshooting); default: the embedded default run.")]
SetOpt = Annotated[
    Optional[list[str]],
    typer.Option("--set", help="Override a config key: --set rollout.max_turns=3 (dotted key, YAML value; repeatable)."),
]
BenchOutOpt = Annotated[Optional[Path], typer.Option("--output", help="Folder for the JSON (default: runs/bench-<name>-<time>).")]


# ---------------------------------------------------------------- helpers


def fail(err: Exception) -> typer.Exit:
    """Print `error: ...` and end the command with exit status 2 (bad input, a missing file, a dead server)."""
    typer.echo(f"error: {err}", err=True)
    return typer.Exit(2)


def train_config(config: Optional[Path], overrides: Optional[list[str]]) -> Any:
    """The TrainConfig of --config and --set; a bad key or value ends the command."""
    from mapo.config import load_config

    try:
        return load_config(config, overrides or [])
    except ValueError as err:
        raise fail(err) from None


def key_values(pairs: Optional[list[str]], flag: str) -> dict:  # type: ignore[type-arg]
    """{key: YAML value} from repeated `key=value` options."""
    import yaml

    out = {}
    for pair in pairs or []:
        key, sep, text = pair.partition("=")
        if not sep or not key.strip():
            raise fail(ValueError(f"{flag} {pair!r}: expected key=value"))
        try:
            out[key.strip()] = yaml.safe_load(text) if text.strip() else ""
        except yaml.YAMLError as err:
            raise fail(ValueError(f"{flag} {key}: the value {text!r} is not valid YAML ({err})")) from None
    return out
