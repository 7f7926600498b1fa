"""The `mapo` command: one module per group of subcommands, each importing its heavy
modules lazily so that `mapo --help` stays instant.

    common       the Typer apps, shared options, `mapo version`
    training     mapo train
    sft          mapo sft
    evaluation   mapo eval / compare / report
    ablation     mapo ablate
    environment  mapo env list / try / calibrate (env_console: their tables and the interactive session)
    benchmarks   mapo bench emobench / eqbench / knowledge
    speed        mapo bench rollout / train / mfu / gpu / memory / env / llm-env / grpo / all
"""

import importlib

from mapo.cli.common import app

# Importing a module registers its commands; this order is the order `mapo --help` lists them in.
for _module in ("training", "sft", "evaluation", "ablation", "environment", "benchmarks", "speed"):
    importlib.import_module(f"mapo.cli.{_module}")


def main() -> None:
    app()


__all__ = ["app", "main"]
