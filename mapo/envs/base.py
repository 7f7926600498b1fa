"""The environment contract (`Environment`), its `info` contract, the environment registry and
factory, and scenario sources.

An environment plays the simulated user (and its judge) for one dialogue; one instance serves
one trajectory (the rollout makes one per trajectory). `Environment` declares everything the
library reads from one: `reset` and `step` are required; every other member is an optional hook
with its default, which an environment gets by subclassing `Environment` and overrides as it
needs. An object that only has `reset` and `step` (structural typing) gets every default.

The `info` contract of `step` (what the rollout and evaluation read; anything else is kept in the
turn's `info` and the transcripts):

- `state`: P_t after the turn, K floats. Give it: D_t defaults to ||P_t||, and P_0 is
  recovered as P_1 - v_1 when the scenario has no `initial_state`.
- `distance`: D_t, when it is not ||state|| (or there is no state).
- `initial_distance`: D_0, in the first step's info, needed only when neither the
  scenario's `initial_state` nor `state` says it.
- `done_reason`: why the dialogue ended, when `done` ("success", "failure", "timeout",
  or any word of the environment's); evaluation counts "success" as a pass.
- `state_key`: a string naming the state the reply was chosen in, when the environment's state
  is exact (the `mapo_state` estimator normalises a turn's return among turns sharing it).
- `levels`: the judge's ordinal levels as {name: int}, if the judge gives levels
  (EMPA's six make EPM-Q computable).
- `<role>_fallback` (bool) or `fallbacks` ({role: count}): turns an LLM role could not
  serve; they feed the fallback budget and the reports.

Environments are found by name in `ENVIRONMENTS` (a `mapo.registry.Registry`): the built-ins,
anything registered with `@register_environment`, an entry point of group "mapo.environments",
or a `package.module:Factory` path. A factory is a class or function called with the config's
`env.options` as keywords (after its `upgrade_options`); a class that subclasses `Environment`
supplies its hooks, a plain function gets the defaults.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any, ClassVar, NamedTuple, Protocol, runtime_checkable

from mapo.core.types import Scenario
from mapo.registry import Registry


class StepResult(NamedTuple):
    user_message: str
    action: tuple[float, ...]
    done: bool
    info: dict[str, Any]


@runtime_checkable
class Environment(Protocol):
    """What the library reads from an environment: `reset` and `step`, then optional hooks with defaults."""

    # the policy's system prompt when the config does not set rollout.system_prompt
    system_prompt: ClassVar[str] = ""
    # turn-info keys that training and evaluation transcripts keep
    transcript_keys: ClassVar[tuple[str, ...]] = ()
    # policies (e.g. "player:optimal") that `mapo eval` plays beside the evaluated one
    reference_players: ClassVar[tuple[str, ...]] = ()
    # `mapo eval`'s reply limits ({"max_new_tokens": .., "max_sentences": ..}) when nothing else sets them
    reply_limits: ClassVar[Mapping[str, int]] = MappingProxyType({})

    def reset(self, scenario: Scenario, seed: int | None = None) -> str:
        """Start a dialogue on `scenario`; returns the user's opening message. `seed` varies the
        simulated user's wording reproducibly."""
        ...

    def step(self, response: str) -> StepResult:
        """Score the policy's reply: `action` is v_t (K floats, P_t = P_{t-1} + v_t), `user_message`
        the user's next message (read only when `done` is false)."""
        ...

    def reply_context(self) -> str | None:
        """The message that stands in for the dialogue so far as the policy's context for its next
        reply (after `rollout.history_window` exchanges): the current state. None: the policy reads
        the whole transcript."""
        return None

    def episode_metrics(self) -> dict[str, float]:
        """Figures of the dialogue played so far that integrations report per dialogue (e.g. EPM-Q)."""
        return {}

    @classmethod
    def load_scenarios(cls, source: str) -> list[Scenario]:
        """The scenarios `source` names (the config's `env.scenarios`, or `mapo eval --scenarios`)."""
        raise NotImplementedError(f"{cls.__name__} does not say how its scenarios load")

    @staticmethod
    def upgrade_options(options: dict[str, Any]) -> dict[str, Any]:
        """The options with names from older versions mapped to today's (configs and study folders
        keep loading)."""
        return options

    @staticmethod
    def evaluation_options(training_options: dict[str, Any]) -> dict[str, Any]:
        """A training run's options as evaluation uses them: without `max_turns`, the run's cap."""
        return {k: v for k, v in training_options.items() if k != "max_turns"}

    @staticmethod
    def with_turn_cap(options: dict[str, Any], max_turns: int) -> dict[str, Any]:
        """The options with the environment's own timeout at the evaluation's turn cap (default: unchanged)."""
        return options

    @staticmethod
    def dialogue_summary(dialogues: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
        """Figures over dialogues (mappings with "done_reason" and "turns", each turn a mapping of the
        step info keys) that training logs and `mapo eval` reports; None: no figures of its own."""
        return None


def declared(env_or_factory: Any) -> type[Environment]:
    """The class whose hooks apply: the environment's (or factory's) own when it subclasses
    `Environment`, else `Environment` with every default."""
    cls = env_or_factory if isinstance(env_or_factory, type) else type(env_or_factory)
    return cls if Environment in cls.__mro__ else Environment


def environment_system_prompt(env: Environment) -> str:
    """An environment instance's system prompt (an instance may state its own rules)."""
    return env.system_prompt if declared(env) is not Environment else ""


def reply_context(env: Environment) -> str | None:
    """The environment's context for the next reply (its `reply_context`; by default None)."""
    return declared(env).reply_context(env)


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
    """One environment instance: `name` resolved in ENVIRONMENTS, called with `options` (upgraded)."""
    factory = ENVIRONMENTS.resolve(name)
    return factory(**declared(factory).upgrade_options(dict(options)))


def environment_factory(name: str, options: Mapping[str, Any] | None = None) -> Callable[[], Environment]:
    """A zero-argument callable making one environment per trajectory.

    Makes one at once, so bad options fail now with the environment's own message.
    """
    factory = ENVIRONMENTS.resolve(name)
    options = declared(factory).upgrade_options(dict(options or {}))
    factory(**options)

    def make() -> Environment:
        return factory(**options)

    return make


def load_scenarios(name: str, source: str) -> list[Scenario]:
    """The scenarios environment `name` loads from `source` (its `load_scenarios`); never empty."""
    try:
        scenarios = list(hooks(name).load_scenarios(source))
    except NotImplementedError:
        raise ValueError(
            f"env.scenarios: environment {name!r} does not say how its scenarios load; subclass "
            "mapo.envs.base.Environment and give it a load_scenarios(source) -> list[Scenario] classmethod"
        ) from None
    if not scenarios:
        raise ValueError(f"env.scenarios: {source!r} holds no scenarios")
    for k, scenario in enumerate(scenarios):
        if not isinstance(scenario, Scenario):
            raise ValueError(
                f"env.scenarios: environment {name!r} loaded {type(scenario).__name__} at position {k} "
                f"from {source!r}; expected mapo.core.types.Scenario"
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


def hooks(name: str) -> type[Environment]:
    """The hooks of environment `name` (its class when it subclasses Environment, else the defaults)."""
    return declared(ENVIRONMENTS.resolve(name))


def system_prompt_for(name: str, configured: str | None = None) -> str:
    """The policy's system prompt: `configured` when set, else the environment's own ("" if it has none)."""
    return configured if configured is not None else hooks(name).system_prompt


def transcript_keys_for(name: str) -> tuple[str, ...]:
    """The turn-info keys environment `name` wants in the transcripts."""
    return tuple(hooks(name).transcript_keys)


def evaluation_options(name: str, training_options: Mapping[str, Any]) -> dict[str, Any]:
    """A training run's environment options as evaluation uses them (upgraded, then the environment's
    `evaluation_options`)."""
    env = hooks(name)
    return dict(env.evaluation_options(env.upgrade_options(dict(training_options))))


def with_turn_cap(name: str, options: Mapping[str, Any], max_turns: int) -> dict[str, Any]:
    """The options with the environment's own timeout at `max_turns` (its `with_turn_cap`)."""
    env = hooks(name)
    return dict(env.with_turn_cap(env.upgrade_options(dict(options)), max_turns))


def dialogue_summary(name: str, dialogues: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """Environment `name`'s own figures over `dialogues` (its `dialogue_summary`), or None without any."""
    figures = hooks(name).dialogue_summary(dialogues) if dialogues else None
    return dict(figures) if figures is not None else None


def reference_players(name: str) -> tuple[str, ...]:
    """The policies `mapo eval` runs beside the evaluated one on environment `name`."""
    return tuple(hooks(name).reference_players)


def reply_limits(name: str) -> dict[str, int]:
    """Environment `name`'s reply limits for evaluation (by default none)."""
    return dict(hooks(name).reply_limits)
