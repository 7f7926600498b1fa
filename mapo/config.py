"""The training config: nested dataclasses, read from YAML with `--set key=value` overrides.

The dataclass defaults are the embedded default run (SmolLM2-135M + LoRA on the
offline empathy environment, estimator mapo); `mapo/data/configs/default.yaml`
spells the same values out with comments. Loading merges, in order: defaults, the
YAML file, then each override (dotted key, value parsed as YAML). An unknown key
stops loading with `ConfigError` naming it and listing the valid keys there;
values are type-checked (pydantic) and range-checked (each section's __post_init__).
The pre-`report_to` key `tensorboard: true/false` (older run folders' config.yaml)
still loads, with a FutureWarning: true adds tensorboard to `report_to`.
"""

from __future__ import annotations

import dataclasses
import math
import typing
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Annotated, Any

import yaml

from mapo.core.advantages import AdvantageSpec
from mapo.core.losses import LossSpec
from mapo.core.rollout import RolloutSpec
from mapo.model_source import LoraSpec, PolicySpec
from mapo.registry import Registry
from mapo.runtime import check_threads
from mapo.validation import read_yaml

SFT_SCHEDULES = ("constant", "linear", "cosine")  # the sft section's learning-rate schedules
# mappings passed through to user code unchecked (a method's section names its own in `free_form`)
FREE_FORM = ("env.options", "advantage.options")

# The optional methods' sections (mapo.methods): key -> dataclass, imported when first needed, so the
# config imports no method. The class may list its free-form mappings (a ClassVar `free_form`); any
# section may check the whole config (`check_config(config)`, raising ValueError).
METHOD_SECTIONS: Registry[type] = Registry(
    "method config section",
    builtins={"rapo": "mapo.methods.rapo:RapoSpec", "reasoning": "mapo.methods.compeer:ReasoningSpec"},
)


@dataclass(frozen=True)
class MethodSection:
    """A TrainConfig field `Annotated[Any, MethodSection(name)]` holds that method section: its
    dataclass gives the default, the keys `_merge` accepts and pydantic's checks."""

    name: str

    def spec(self) -> type:
        return METHOD_SECTIONS.resolve(self.name)

    def default(self) -> Any:
        return self.spec()()

    def __get_pydantic_core_schema__(self, source: Any, handler: Any) -> Any:
        return handler.generate_schema(self.spec())


RAPO = MethodSection("rapo")
REASONING = MethodSection("reasoning")


class ConfigError(ValueError):
    """A config file, key or value that cannot be used; the message names it."""


@dataclass
class EnvSpec:
    name: str = "empathy"  # a registered environment or "package.module:Factory" (mapo.envs.base)
    scenarios: str = "train"  # what the environment's load_scenarios reads: for empathy a bundled split
    # (train/test/all) or a folder of cards; for emotion also a persona .jsonl
    options: dict[str, Any] = field(default_factory=dict)  # keyword arguments of the environment
    # stop the run when more than this fraction of a step's turns got a judge/director fallback
    # (an LLM role whose server keeps failing); 1.0 never stops (mapo.reliability)
    max_fallback_fraction: float = 0.5

    def __post_init__(self) -> None:
        if not (isinstance(self.max_fallback_fraction, (int, float)) and 0.0 <= self.max_fallback_fraction <= 1.0):
            raise ValueError(f"env.max_fallback_fraction must be in [0, 1], got {self.max_fallback_fraction!r}")


@dataclass
class RewardSpec:
    kind: str = "idr"  # idr | adr | outcome (mapo.core.rewards)
    redundancy: bool = False  # COMPEER redundancy reweighting (needs sentence embeddings)
    redundancy_a: float = 0.1
    redundancy_b: float = 20.0

    def __post_init__(self) -> None:
        from mapo.core.rewards import REWARD_KINDS

        try:
            REWARD_KINDS.resolve(self.kind)
        except ValueError as err:
            raise ValueError(f"reward.kind: {err}") from None


@dataclass
class OptimSpec:
    lr: float = 5e-4  # LoRA; at 1.5e-3 the 10-step default collapsed into repeated phrases on the hardened judge
    weight_decay: float = 0.0
    betas: tuple[float, float] = (0.9, 0.99)
    max_grad_norm: float = 1.0
    ppo_epochs: int = 1
    minibatches: int = 1  # optimizer steps per epoch; the trajectories are split evenly
    micro_batch_tokens: int = 2048  # padded tokens per forward/backward (gradient accumulation; bounds peak memory)

    def __post_init__(self) -> None:
        if not (math.isfinite(self.lr) and self.lr > 0):
            raise ValueError(f"optim.lr must be a finite number > 0, got {self.lr}")
        if not (math.isfinite(self.max_grad_norm) and self.max_grad_norm > 0):
            raise ValueError(f"optim.max_grad_norm must be a finite number > 0, got {self.max_grad_norm}")
        for name in ("ppo_epochs", "minibatches", "micro_batch_tokens"):
            if getattr(self, name) < 1:
                raise ValueError(f"optim.{name} must be at least 1, got {getattr(self, name)}")


@dataclass
class SftSpec:
    """The `sft` section: the demonstrations and how long and how fast to learn them. `mapo sft` runs
    it alone; `mapo train` runs it first when `train_file` is set, then RL from its output (mapo.sft.chain)."""

    train_file: str | None = None  # JSONL, one dialogue per line; null: no SFT stage before `mapo train`
    eval_file: str | None = None  # held-out dialogues; without one, eval_fraction of train_file is held out
    eval_fraction: float = 0.1  # 0: no held-out loss
    system_prompt: str | None = None  # for dialogues without a system message (RL's: the environment's)
    max_tokens: int = 2048  # a longer dialogue keeps its first turns that fit
    epochs: int = 3
    max_steps: int | None = None  # stop after this many optimizer steps (null: all epochs)
    batch_size: int = 8  # dialogues per optimizer step
    lr: float = 2e-4  # LoRA; full fine-tuning wants ~1e-5
    schedule: str = "constant"  # constant | linear | cosine (to 0 at the last step), after the warmup
    warmup_steps: int = 0
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0
    micro_batch_tokens: int = 2048  # padded tokens per forward/backward (gradient accumulation)
    eval_every: int = 0  # optimizer steps between held-out losses; 0: at the end of every epoch
    checkpoint_every: int = 50  # optimizer steps; the last step is always checkpointed

    def __post_init__(self) -> None:
        if not 0.0 <= self.eval_fraction < 1.0:
            raise ValueError(f"sft.eval_fraction must be in [0, 1), got {self.eval_fraction}")
        if not (math.isfinite(self.lr) and self.lr > 0):
            raise ValueError(f"sft.lr must be a finite number > 0, got {self.lr}")
        if not (math.isfinite(self.max_grad_norm) and self.max_grad_norm > 0):
            raise ValueError(f"sft.max_grad_norm must be a finite number > 0, got {self.max_grad_norm}")
        if self.schedule not in SFT_SCHEDULES:
            raise ValueError(f"sft.schedule must be one of {', '.join(SFT_SCHEDULES)}, got {self.schedule!r}")
        for name in ("max_tokens", "epochs", "batch_size", "micro_batch_tokens", "checkpoint_every"):
            if getattr(self, name) < 1:
                raise ValueError(f"sft.{name} must be at least 1, got {getattr(self, name)}")
        for name in ("warmup_steps", "eval_every"):
            if getattr(self, name) < 0:
                raise ValueError(f"sft.{name} must be >= 0, got {getattr(self, name)}")
        if self.max_steps is not None and self.max_steps < 1:
            raise ValueError(f"sft.max_steps must be at least 1 (or null), got {self.max_steps}")


@dataclass
class TrainConfig:
    name: str = "mapo"
    seed: int = 0
    steps: int = 10
    output_dir: str = "runs"  # run folders go to <output_dir>/<name>-<timestamp>
    threads: int | str | None = None  # torch CPU threads; None = every usable core; "idle" = the cores the load average leaves idle
    checkpoint_every: int = 5  # steps; the last step is always checkpointed
    keep_checkpoints: int = 2
    keep_every: int = 0  # steps; checkpoints at its multiples are also written and never pruned (0 = none)
    transcripts_every: int = 1  # steps; 0 = never
    report_to: list[str] = field(default_factory=list)  # experiment trackers: tensorboard, wandb, mlflow (mapo.tracking)
    # the embedded default adapts SmolLM2's top 12 layers: the backward pass stops there (~40% faster updates)
    policy: PolicySpec = field(default_factory=lambda: PolicySpec(lora=LoraSpec(top_layers=12)))
    rollout: RolloutSpec = field(default_factory=RolloutSpec)
    env: EnvSpec = field(default_factory=EnvSpec)
    reward: RewardSpec = field(default_factory=RewardSpec)
    advantage: AdvantageSpec = field(default_factory=AdvantageSpec)
    loss: LossSpec = field(default_factory=LossSpec)
    optim: OptimSpec = field(default_factory=OptimSpec)
    rapo: Annotated[Any, RAPO] = field(default_factory=RAPO.default)  # RAPO options (mapo.methods.rapo, docs/methods.md)
    # COMPEER structured reasoning (mapo.methods.compeer)
    reasoning: Annotated[Any, REASONING] = field(default_factory=REASONING.default)
    sft: SftSpec = field(default_factory=SftSpec)  # supervised warm start before RL, off until sft.train_file is set (mapo.sft)

    def __post_init__(self) -> None:
        if self.steps < 1:
            raise ValueError(f"steps must be at least 1, got {self.steps}")
        if self.checkpoint_every < 1 or self.keep_checkpoints < 1 or self.transcripts_every < 0 or self.keep_every < 0:
            raise ValueError("checkpoint_every and keep_checkpoints must be >= 1, transcripts_every and keep_every >= 0")
        check_threads(self.threads, "threads")
        if self.loss.kl_beta > 0 and self.rollout.top_p < 1:
            raise ValueError(
                f"loss.kl_beta={self.loss.kl_beta} with rollout.top_p={self.rollout.top_p}: the KL to the reference "
                "is not defined between nucleus policies whose sets differ; set rollout.top_p=1 or loss.kl_beta=0"
            )
        from mapo.tracking import validate_names

        validate_names(self.report_to)
        for section in dataclasses.fields(self):  # a section's checks against the rest of the config
            check = getattr(getattr(self, section.name), "check_config", None)
            if callable(check):
                check(self)


def default_config_path() -> Path:
    return bundled_config_dir() / "default.yaml"


def bundled_config_dir() -> Path:
    return Path(str(resources.files("mapo") / "data" / "configs"))


def resolve_config_path(path: str | Path) -> Path:
    """`path` itself, or, when it is a bare name that is not a file here, the bundled config of that
    name (`mapo train --config twenty-questions` reads mapo/data/configs/twenty-questions.yaml)."""
    path = Path(path)
    if path.exists() or path.suffix or len(path.parts) != 1:
        return path
    bundled = bundled_config_dir() / f"{path.name}.yaml"
    if bundled.is_file():
        return bundled
    names = sorted(p.stem for p in bundled_config_dir().glob("*.yaml"))
    raise ConfigError(f"--config {path}: no such file, and no bundled config of that name; bundled: {', '.join(names)}")


def _section_types(cls: type) -> dict[str, Any]:
    """Each field's type; a method section's (`MethodSection`) is its dataclass."""
    hints = typing.get_type_hints(cls, include_extras=True)
    types = {}
    for f in dataclasses.fields(cls):
        marks = [m for m in getattr(hints[f.name], "__metadata__", ()) if isinstance(m, MethodSection)]
        types[f.name] = marks[0].spec() if marks else hints[f.name]
    return types


def _merge(base: dict[str, Any], update: Any, cls: type, where: str) -> None:
    """Merge `update` into `base` (a dict of `cls`'s fields), rejecting unknown keys."""
    if not isinstance(update, dict):
        raise ConfigError(f"{where or 'config'}: expected a mapping of keys, got {type(update).__name__} {update!r}")
    legacy = _NOT_SET
    if cls is TrainConfig and "tensorboard" in update:  # run folders written before report_to have it
        update = dict(update)
        legacy = update.pop("tensorboard")
    if cls is RolloutSpec:
        update = _without_retired_engine(update)
    types = _section_types(cls)
    for key, value in update.items():
        dotted = f"{where}.{key}" if where else str(key)
        if key not in types:
            section = f"in {where!r}" if where else "at the top level"
            raise ConfigError(f"unknown config key {dotted!r}; valid keys {section}: {', '.join(types)}")
        kind = types[key]
        if dataclasses.is_dataclass(kind) and value is not None:
            if not isinstance(base.get(key), dict):  # an earlier layer set the section to null
                base[key] = {}
            _merge(base[key], value, kind, dotted)
        elif _free_form(cls, key, dotted) and isinstance(value, dict) and isinstance(base.get(key), dict):
            base[key] = _merged_free_form(base[key], value)
        else:
            base[key] = value
    if legacy is not _NOT_SET:  # after the mapping's own report_to, which it extends
        _legacy_tensorboard(base, legacy)


def _free_form(cls: type, key: str, dotted: str) -> bool:
    """Whether `key` of section `cls` is a mapping passed through unchecked (merged key by key)."""
    return dotted in FREE_FORM or key in getattr(cls, "free_form", ())


_NOT_SET = object()
# the llama.cpp engine's settings, in run folders and plans written before vLLM replaced it
RETIRED_ROLLOUT_KEYS = ("llamacpp", "continuous")


def _without_retired_engine(update: dict[str, Any]) -> dict[str, Any]:
    """A rollout section without the retired llama.cpp engine's keys; `engine: llamacpp` reads as auto."""
    kept = {k: v for k, v in update.items() if k not in RETIRED_ROLLOUT_KEYS}
    if kept.get("engine") == "llamacpp":
        kept["engine"] = "auto"
    return kept


def _merged_free_form(base: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    """`update` laid over `base` key by key, nested mappings too: `--set env.options.roles.judge.path=X`
    after `--set env.options.roles.judge.kind=learned` keeps the kind, and so it does after
    `roles.judge=learned`: a name is short for {kind: name} (a plug-in spec's convention). A leaf, or
    a mapping over anything else, replaces."""
    merged = dict(base)
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(merged.get(key), str) and "kind" not in value:
            merged[key] = {"kind": merged[key], **value}
        elif isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merged_free_form(merged[key], value)
        else:
            merged[key] = value
    return merged


def _legacy_tensorboard(base: dict[str, Any], value: Any) -> None:
    """The pre-`report_to` key `tensorboard: bool`: true adds tensorboard to report_to, false does nothing."""
    if not isinstance(value, bool):
        raise ConfigError(f"tensorboard (deprecated, use report_to): expected true or false, got {value!r}")
    warnings.warn(  # FutureWarning: shown to users by default, once per process
        "config key 'tensorboard' is deprecated; use report_to: [tensorboard] (tensorboard: false means report_to: [])",
        FutureWarning,
        stacklevel=2,
    )
    trackers = base.get("report_to")
    if value and isinstance(trackers, list) and "tensorboard" not in trackers:
        base["report_to"] = [*trackers, "tensorboard"]
    elif value and trackers is None:
        base["report_to"] = ["tensorboard"]


def _override(raw: dict[str, Any], assignment: str) -> None:
    key, sep, text = assignment.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigError(f"--set {assignment!r}: expected key=value, e.g. --set rollout.max_turns=3")
    try:
        value = yaml.safe_load(text) if text.strip() else ""
    except (yaml.YAMLError, ValueError) as err:  # ValueError: a scalar YAML cannot construct (date 2020-13-45)
        raise ConfigError(f"--set {key}: the value {text!r} is not valid YAML ({err})") from None
    nested: Any = value
    parts = key.split(".")
    for part in reversed(parts):
        nested = {part: nested}
    # a key inside a free-form mapping extends it instead of replacing it
    _merge(raw, nested, TrainConfig, "")


def _build(raw: dict[str, Any]) -> TrainConfig:
    from pydantic import TypeAdapter, ValidationError

    try:
        return TypeAdapter(TrainConfig).validate_python(raw)
    except ValidationError as err:
        problems = []
        for item in err.errors():
            if item["type"] == "value_error":  # a section's own check: its message names the key
                problems.append(item["msg"].removeprefix("Value error, "))
            else:
                where = ".".join(str(p) for p in item["loc"])
                problems.append(f"{where}: {item['msg']} (got {item.get('input')!r})")
        raise ConfigError("invalid config: " + "; ".join(problems)) from None
    except ValueError as err:  # raised by a __post_init__ outside pydantic's wrapping
        raise ConfigError(f"invalid config: {err}") from None


def config_dict(config: TrainConfig) -> dict[str, Any]:
    """Plain YAML-able data (tuples as lists)."""
    return yaml.safe_load(yaml.safe_dump(_plain(dataclasses.asdict(config))))


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def load_config(path: str | Path | None = None, overrides: Sequence[str] = ()) -> TrainConfig:
    """Defaults <- YAML file (a path, or a bundled config's name) <- each `key=value` override;
    ConfigError on any bad key or value."""
    raw = config_dict(TrainConfig())
    if path is not None:
        path = resolve_config_path(path)
        data = read_yaml(path, "config", ConfigError)
        if data is not None:
            try:
                _merge(raw, data, TrainConfig, "")
            except ConfigError as err:
                raise ConfigError(f"{path}: {err}") from None
    for assignment in overrides:
        _override(raw, assignment)
    return _build(raw)


def dump_config(config: TrainConfig, path: Path) -> None:
    path.write_text(yaml.safe_dump(config_dict(config), sort_keys=False), encoding="utf-8")
