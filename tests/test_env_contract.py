"""The environment contract is one declared type: every hook has its default in
`mapo.envs.base.Environment`, and the library never looks one up with getattr / hasattr."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import mapo
from mapo.core.types import Scenario
from mapo.envs.base import (
    ENVIRONMENTS,
    Environment,
    StepResult,
    declared,
    dialogue_summary,
    evaluation_options,
    load_scenarios,
    reference_players,
    reply_context,
    reply_limits,
    system_prompt_for,
    transcript_keys_for,
    with_turn_cap,
)

PACKAGE = Path(mapo.__file__).parent
# an attribute looked up by name on something that may be an environment or its factory
LOOKUP = re.compile(r"\b(?:getattr|hasattr)\(\s*(?:(?:env|environment|factory|make_env|inner|[a-z_]+\.env)\b|"
                    r"ENVIRONMENTS\.resolve\()")


def test_no_module_looks_up_an_environment_hook_by_name():
    found = [f"{path.relative_to(PACKAGE)}:{n}: {line.strip()}"
             for path in sorted(PACKAGE.rglob("*.py"))
             for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if LOOKUP.search(line)]
    assert not found, "environment hooks found by name instead of through mapo.envs.base.Environment:\n" + "\n".join(found)


def test_the_lookup_pattern_catches_what_it_forbids():
    for line in ('getattr(env, "system_prompt", "")', "hasattr(factory, 'load_scenarios')",
                 'getattr(ENVIRONMENTS.resolve(name), "reply_limits", {})', 'getattr(d.env, "record", None)'):
        assert LOOKUP.search(line), line
    assert not LOOKUP.search('getattr(judge, "score", None)')


class Bare:
    """Only the two required methods (structural typing): every hook takes its default."""

    def reset(self, scenario: Scenario, seed: int | None = None) -> str:
        return "hello"

    def step(self, response: str) -> StepResult:
        return StepResult("", (0.0,), True, {"state": (0.0,)})


class Declared(Environment):
    system_prompt = "Be brief."
    transcript_keys = ("mood",)
    reference_players = ("player:optimal",)
    reply_limits = {"max_new_tokens": 8}

    def __init__(self, shown: bool = False) -> None:
        self.shown = shown

    @classmethod
    def load_scenarios(cls, source: str) -> list[Scenario]:
        return [Scenario(id=f"{source}-0", initial_state=(-1.0,))]

    @staticmethod
    def upgrade_options(options: dict) -> dict:
        options = dict(options)
        if "old_shown" in options:
            options["shown"] = options.pop("old_shown")
        return options

    @staticmethod
    def dialogue_summary(dialogues):
        return {"dialogues": len(dialogues)}

    def reset(self, scenario: Scenario, seed: int | None = None) -> str:
        return "hello"

    def reply_context(self) -> str | None:
        return "the state" if self.shown else None

    def step(self, response: str) -> StepResult:
        return StepResult("", (1.0,), True, {"state": (0.0,)})


def bare_factory(**options) -> Bare:
    return Bare()


@pytest.fixture
def registered():
    ENVIRONMENTS.register("contract-bare")(bare_factory)
    ENVIRONMENTS.register("contract-declared")(Declared)
    yield
    for name in ("contract-bare", "contract-declared"):
        ENVIRONMENTS.remove(name)


def test_a_bare_environment_gets_every_default(registered):
    assert declared(Bare()) is Environment and declared(bare_factory) is Environment
    assert system_prompt_for("contract-bare") == "" and transcript_keys_for("contract-bare") == ()
    assert reference_players("contract-bare") == () and reply_limits("contract-bare") == {}
    assert dialogue_summary("contract-bare", [{"done_reason": "x", "turns": []}]) is None
    assert evaluation_options("contract-bare", {"max_turns": 3, "a": 1}) == {"a": 1}
    assert with_turn_cap("contract-bare", {"a": 1}, 5) == {"a": 1}
    assert reply_context(Bare()) is None
    with pytest.raises(ValueError, match="'contract-bare' does not say how its scenarios load; subclass"):
        load_scenarios("contract-bare", "train")


def test_a_declared_environment_overrides_what_it_declares(registered):
    assert declared(Declared) is Declared and declared(Declared()) is Declared
    assert system_prompt_for("contract-declared") == "Be brief."
    assert system_prompt_for("contract-declared", "Mine.") == "Mine."
    assert transcript_keys_for("contract-declared") == ("mood",)
    assert reference_players("contract-declared") == ("player:optimal",)
    assert reply_limits("contract-declared") == {"max_new_tokens": 8}
    assert dialogue_summary("contract-declared", [{"done_reason": "x", "turns": []}]) == {"dialogues": 1}
    assert dialogue_summary("contract-declared", []) is None
    assert [s.id for s in load_scenarios("contract-declared", "test")] == ["test-0"]
    assert evaluation_options("contract-declared", {"old_shown": True}) == {"shown": True}
    assert reply_context(Declared(shown=True)) == "the state" and reply_context(Declared()) is None
    assert isinstance(Declared(), Environment)
