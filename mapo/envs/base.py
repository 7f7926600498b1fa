"""The environment protocol, its `info` contract, the environment registry and factory,
and scenario sources.

An environment plays the simulated user (and its judge) for one dialogue; one
instance serves one trajectory (the rollout makes one per trajectory):

- `reset(scenario, seed=None) -> str`: start a dialogue on `scenario`; returns the
  user's opening message. `seed` varies the simulated user's wording reproducibly.
- `step(response) -> StepResult(user_message, action, done, info)`: score the policy's
  reply; `action` is v_t (K floats, P_t = P_{t-1} + v_t), `user_message` the user's next
  message (read only when `done` is false).

The `info` contract (what the rollout and evaluation read; anything else is kept in the
turn's `info` and the transcripts):

- `state`: P_t after the turn, K floats. Give it: D_t defaults to ||P_t||, and P_0 is
  recovered as P_1 - v_1 when the scenario has no `initial_state`.
- `distance`: D_t, when it is not ||state|| (or there is no state).
- `initial_distance`: D_0, in the first step's info, needed only when neither the
  scenario's `initial_state` nor `state` says it.
- `done_reason`: why the dialogue ended, when `done` ("success", "failure", "timeout",
  or any word of the environment's); evaluation counts "success" as a pass.
- `levels`: the judge's ordinal levels as {name: int}, if the judge gives levels
  (EMPA's six make EPM-Q computable).
- `<role>_fallback` (bool) or `fallbacks` ({role: count}): turns an LLM role could not
  serve; they feed the fallback budget and the reports.

Environments are found by name in `ENVIRONMENTS` (a `mapo.registry.Registry`): the
built-ins "empathy" and "emotion", anything registered with `@register_environment`,
an entry point of group "mapo.environments", or a `package.module:Factory` path. A
factory is a class or function called with the config's `env.options` as keywords.
It says how its scenarios load with a `load_scenarios(source: str) -> list[Scenario]`
attribute (a staticmethod on a class): `source` is the config's `env.scenarios` or
`mapo eval --scenarios`. Its `system_prompt` attribute (optional) is the policy's system
prompt when the config does not set `rollout.system_prompt`; its `transcript_keys` (optional)
name the turn-info keys that training and evaluation transcripts keep. Its `dialogue_summary`
(optional) turns dialogues (mappings with "done_reason" and "turns", each turn a mapping of
the step info keys) into figures that training logs and `mapo eval` reports; its
`reference_players` (optional) name policies (e.g. "player:optimal") that `mapo eval` runs
beside the evaluated one; its `reply_limits` (optional, {"max_new_tokens": .., "max_sentences": ..})
are `mapo eval`'s reply limits when neither the command nor a training run sets them. Two
optional attributes adapt `mapo eval`:
`evaluation_options(training_options) -> dict` (what a training run's options become
for evaluation; default: drop `max_turns`) and `with_turn_cap(options, max_turns) ->
dict` (set the environment's own timeout to the evaluation's turn cap; default: none).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple, Protocol, runtime_checkable

from mapo.registry import Registry
from mapo.types import Scenario


class StepResult(NamedTuple):
    user_message: str
    action: tuple[float, ...]
    done: bool
    info: dict[str, Any]


@runtime_checkable
class Environment(Protocol):
    def reset(self, scenario: Scenario, seed: int | None = None) -> str: ...

    def step(self, response: str) -> StepResult: ...


EnvironmentFactory = Callable[..., Environment]
# Built-ins are imported on first use, so importing mapo stays light (no role or model is
# loaded until an environment is made).
ENVIRONMENTS: Registry[EnvironmentFactory] = Registry(
    "environment",
    group="mapo.environments",
    builtins={
        "empathy": "mapo.envs.empathy.env:EmpathyEnvironment",
        "emotion": "mapo.envs.emotion.env:EmotionEnvironment",
        "twenty-questions": "mapo.envs.questioning.env:TwentyQuestionsEnvironment",
        "troubleshooting": "mapo.envs.questioning.env:TroubleshootingEnvironment",
    },
)


def register_environment(name: str) -> Callable[[EnvironmentFactory], EnvironmentFactory]:
    """Decorator: make an environment class (or factory function) available by name."""
    return ENVIRONMENTS.register(name)


def make_environment(name: str, **options: Any) -> Environment:
    """One environment instance: `name` resolved in ENVIRONMENTS, called with `options`."""
    return ENVIRONMENTS.resolve(name)(**options)


def environment_factory(name: str, options: Mapping[str, Any] | None = None) -> Callable[[], Environment]:
    """A zero-argument callable making one environment per trajectory.

    Makes one at once, so bad options fail now with the environment's own message.
    """
    factory = ENVIRONMENTS.resolve(name)
    options = dict(options or {})
    factory(**options)

    def make() -> Environment:
        return factory(**options)

    return make


def load_scenarios(name: str, source: str) -> list[Scenario]:
    """The scenarios environment `name` loads from `source` (its `load_scenarios`); never empty."""
    factory = ENVIRONMENTS.resolve(name)
    loader = getattr(factory, "load_scenarios", None)
    if not callable(loader):
        raise ValueError(
            f"env.scenarios: environment {name!r} does not say how its scenarios load; give its factory "
            "a load_scenarios(source) -> list[Scenario] (see mapo.envs.base)"
        )
    scenarios = list(loader(source))
    if not scenarios:
        raise ValueError(f"env.scenarios: {source!r} holds no scenarios")
    for k, scenario in enumerate(scenarios):
        if not isinstance(scenario, Scenario):
            raise ValueError(
                f"env.scenarios: environment {name!r} loaded {type(scenario).__name__} at position {k} "
                f"from {source!r}; expected mapo.types.Scenario"
            )
    return scenarios


def scenarios_from_files(
    source: str | Path, load_one: Callable[[Path], Scenario], what: str, error: type[Exception]
) -> list[Scenario]:
    """Scenarios from one file, or from every `*.yaml`/`*.yml` under a folder (recursively),
    each read by `load_one`: sorted by id, ids unique, errors (`error`) naming the file. The
    usual body of an environment's `load_scenarios` for one-card-per-file scenarios."""
    folder = Path(source)
    if folder.is_file():
        return [load_one(folder)]
    if not folder.is_dir():
        raise error(f"{folder}: no such {what} folder or file")
    files = sorted(p for p in folder.rglob("*") if p.suffix in (".yaml", ".yml"))
    if not files:
        raise error(f"{folder}: no {what} files (*.yaml) found")
    first_file: dict[str, Path] = {}
    scenarios = []
    for file in files:
        scenario = load_one(file)
        if scenario.id in first_file:
            raise error(f"{file}: field id: {scenario.id!r} is already used by {first_file[scenario.id]}")
        first_file[scenario.id] = file
        scenarios.append(scenario)
    return sorted(scenarios, key=lambda s: s.id)


def system_prompt_for(name: str, configured: str | None = None) -> str:
    """The policy's system prompt: `configured` when set, else the environment's own ("" if it has none)."""
    if configured is not None:
        return configured
    return str(getattr(ENVIRONMENTS.resolve(name), "system_prompt", ""))


def transcript_keys_for(name: str) -> tuple[str, ...]:
    """The turn-info keys environment `name` wants in the transcripts (its `transcript_keys`; by default none)."""
    return tuple(getattr(ENVIRONMENTS.resolve(name), "transcript_keys", ()))


def evaluation_options(name: str, training_options: Mapping[str, Any]) -> dict[str, Any]:
    """A training run's environment options as evaluation uses them (the environment's
    `evaluation_options`; by default without `max_turns`, the training run's cap)."""
    hook = getattr(ENVIRONMENTS.resolve(name), "evaluation_options", None)
    if callable(hook):
        return dict(hook(dict(training_options)))
    return {k: v for k, v in training_options.items() if k != "max_turns"}


def with_turn_cap(name: str, options: Mapping[str, Any], max_turns: int) -> dict[str, Any]:
    """The options with the environment's own timeout at `max_turns` (its `with_turn_cap`; by default unchanged)."""
    hook = getattr(ENVIRONMENTS.resolve(name), "with_turn_cap", None)
    return dict(hook(dict(options), max_turns)) if callable(hook) else dict(options)


def dialogue_summary(name: str, dialogues: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """Environment `name`'s own figures over `dialogues` (its `dialogue_summary`), or None without one."""
    hook = getattr(ENVIRONMENTS.resolve(name), "dialogue_summary", None)
    return dict(hook(dialogues)) if callable(hook) and dialogues else None


def reference_players(name: str) -> tuple[str, ...]:
    """The policies `mapo eval` runs beside the evaluated one on environment `name` (its `reference_players`)."""
    return tuple(getattr(ENVIRONMENTS.resolve(name), "reference_players", ()))


def reply_limits(name: str) -> dict[str, int]:
    """Environment `name`'s reply limits for evaluation (its `reply_limits`; by default none)."""
    return dict(getattr(ENVIRONMENTS.resolve(name), "reply_limits", {}))
