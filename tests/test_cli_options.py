"""The CLI's option spellings: a command that writes a file or folder takes --output, as `mapo eval`
and `mapo train` do (--out stays accepted where it was the name)."""

from __future__ import annotations

import json

import typer
from typer.testing import CliRunner

from mapo.cli import app


def _commands(command, path=()):
    for name, sub in getattr(command, "commands", {}).items():
        yield from _commands(sub, (*path, name))
    if not getattr(command, "commands", None):
        yield " ".join(path), command


def test_every_command_that_takes_out_also_takes_output():
    spelled_out = {name: param.opts for name, command in _commands(typer.main.get_command(app))
                   for param in command.params if "--out" in param.opts}
    assert spelled_out, "no command takes --out: drop this test's premise"
    assert {name: opts for name, opts in spelled_out.items() if "--output" not in opts} == {}


def test_env_demos_writes_to_output_as_to_out(tmp_path):
    for spelling in ("--output", "--out"):
        path = tmp_path / f"demos{spelling}.jsonl"
        args = ["env", "demos", "troubleshooting", "--player", "optimal", "--games", "2", spelling, str(path)]
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 0, result.output
        assert len([json.loads(line) for line in path.read_text().splitlines()]) == 2
