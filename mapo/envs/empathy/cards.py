"""Scenario cards: the YAML schema (pydantic), loading, and the bundled split.

One YAML file per scenario. A folder of cards loads into `EmpathyScenario`s (a
`mapo.core.types.Scenario` with EMPA's own fields); a card that fails validation stops
loading with `CardError` naming the file, the field and the reason. The bundled
cards live in `mapo/data/scenarios/{train,test}/`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from mapo.core.types import AXES, Scenario
from mapo.envs.base import scenarios_from_files
from mapo.validation import read_yaml_model

CATEGORIES = ("career", "relationships", "health", "living", "leisure", "values")


# A list entry that must say something (str_strip_whitespace strips it first).
Text = Annotated[str, Field(min_length=1)]


class CardError(ValueError):
    """A scenario card that cannot be used; the message names file and field."""


@dataclass
class EmpathyScenario(Scenario):
    """A scenario of the empathy environment: the core `Scenario` plus EMPA's own fields.

    `indicators` are EMPA's nine need levels (C1..P3, each 0-3) that give P_0, which is
    also set as `initial_state`; `dominant_axis` is the axis ("C", "A" or "P") this person
    most needs, the deepest of P_0; `opening_line` is their first message. `card` keeps
    the whole validated `ScenarioCard` (persona, stages, cues, ...) that the environment
    and its roles read. `ScenarioCard.to_scenario` builds one.
    """

    indicators: dict[str, int] = field(default_factory=dict)
    dominant_axis: str = ""
    opening_line: str = ""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)


class Persona(_Strict):
    name: str = Field(min_length=1)
    age: int = Field(ge=12, le=110)
    occupation: str = Field(min_length=1)
    traits: list[Text] = Field(min_length=1)
    speaking_style: str = Field(min_length=1)


class Stage(_Strict):
    """One step of the story the user reveals over the dialogue."""

    title: str = Field(min_length=1)
    content: str = Field(min_length=1)


class Indicators(_Strict):
    """EMPA's nine need indicators, each a level 0-3 (higher = deeper need)."""

    C1: int = Field(ge=0, le=3, description="cognitive: complexity of the situation")
    C2: int = Field(ge=0, le=3, description="cognitive: depth of confusion")
    C3: int = Field(ge=0, le=3, description="cognitive: priority")
    A1: int = Field(ge=0, le=3, description="affective: intensity")
    A2: int = Field(ge=0, le=3, description="affective: accessibility (core)")
    A3: int = Field(ge=0, le=3, description="affective: priority")
    P1: int = Field(ge=0, le=3, description="proactive: lack of agency")
    P2: int = Field(ge=0, le=3, description="proactive: value relevance (core)")
    P3: int = Field(ge=0, le=3, description="proactive: priority")


class Cues(_Strict):
    """What each axis of empathy would concretely mean for this person."""

    understanding: list[Text] = Field(min_length=1, description="C: what being understood looks like")
    validation: list[Text] = Field(min_length=1, description="A: which feelings need validating")
    empowerment: list[Text] = Field(min_length=1, description="P: what would empower them")


class ScenarioCard(_Strict):
    id: str = Field(pattern=r"^[a-z0-9][a-z0-9_-]*$")
    title: str = Field(min_length=1)
    category: Literal["career", "relationships", "health", "living", "leisure", "values"]
    dominant_axis: Literal["C", "A", "P"]
    persona: Persona
    situation: str = Field(min_length=1)
    stages: list[Stage] = Field(min_length=4, max_length=4)
    memories: list[Text] = Field(min_length=1)
    growth_arc: str = Field(min_length=1, description="hidden: how this person could grow; never shown to the policy")
    opening_line: str = Field(min_length=1)
    indicators: Indicators
    cues: Cues

    @model_validator(mode="after")
    def _dominant_axis_is_deepest(self) -> "ScenarioCard":
        from mapo.envs.dynamics import initial_vector

        p0 = initial_vector(self.indicators.model_dump())
        if not any(p0):
            raise ValueError("indicators: all nine are 0, so the user has no need to meet")
        deepest = min(p0)
        if p0[AXES.index(self.dominant_axis)] != deepest:
            axis = {a: round(v, 1) for a, v in zip(AXES, p0)}
            raise ValueError(f"dominant_axis: {self.dominant_axis!r} is not the deepest axis of P_0 {axis}")
        return self

    def background(self) -> list[str]:
        """Everything the card says of the person's life beyond the situation (persona, stages,
        memories): true of them, though not said yet."""
        p = self.persona
        return [p.name, p.occupation, *p.traits, *(s.content for s in self.stages), *self.memories]

    def to_scenario(self) -> EmpathyScenario:
        from mapo.envs.dynamics import initial_vector

        indicators = self.indicators.model_dump()
        return EmpathyScenario(
            id=self.id,
            title=self.title,
            category=self.category,
            initial_state=tuple(initial_vector(indicators)),
            card=self.model_dump(),
            indicators=indicators,
            dominant_axis=self.dominant_axis,
            opening_line=self.opening_line,
        )


def load_card(path: str | Path) -> ScenarioCard:
    """Read and validate one card; raise CardError naming file, field and reason."""
    return read_yaml_model(Path(path), ScenarioCard, "card", CardError)


def load_scenarios(folder: str | Path) -> list[EmpathyScenario]:
    """Load every `*.yaml`/`*.yml` card under `folder` (recursively), sorted by id."""
    return scenarios_from_files(folder, lambda file: load_card(file).to_scenario(), "scenario card", CardError)


def bundled_scenario_dir() -> Path:
    return Path(str(resources.files("mapo") / "data" / "scenarios"))


def bundled_scenarios(split: Literal["train", "test", "all"] = "train") -> list[EmpathyScenario]:
    """The cards shipped with mapo: the fixed 24/12 train/test split, or all 36."""
    root = bundled_scenario_dir()
    if split == "all":
        return load_scenarios(root)
    if split not in ("train", "test"):
        raise ValueError(f"unknown split {split!r}; use 'train', 'test' or 'all'")
    return load_scenarios(root / split)


def card_scenarios(source: str) -> list[EmpathyScenario]:
    """The empathy environment's scenario source: a bundled split (train, test, all) or a
    folder (or single file) of cards."""
    if source in ("train", "test", "all"):
        return bundled_scenarios(source)  # type: ignore[arg-type]
    return load_scenarios(source)
