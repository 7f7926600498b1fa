"""Support-desk scenario cards: the YAML schema (pydantic), loading, and the shipped split.

One YAML file per customer. A card says who is writing in and about what, the detail
the agent has to ask for (the customer holds it back until asked), the steps that
solve the problem (each with the cue phrases that count as taking it), what this
customer wants acknowledged, and what makes them angrier. A card that fails
validation stops loading with `CardError` naming the file, the field and the reason.
The shipped cards live next to this file in `cards/{train,test}/`.

The state of a dialogue is P = (-frustration, -unsolved): frustration starts at the
card's `frustration` (0-10), unsolved at the sum of the detail's and the steps' weights.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)

from mapo.core.types import Scenario
from mapo.envs.base import scenarios_from_files
from mapo.validation import read_yaml_model

from .cues import parse_cue

CARD_DIR = Path(__file__).parent / "cards"
SPLITS = ("train", "test", "all")
MAX_FRUSTRATION = 10.0

Text = Annotated[str, Field(min_length=1)]


class CardError(ValueError):
    """A support-desk card that cannot be used; the message names file and field."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True, frozen=True)


def _check_cues(cues: list[str]) -> list[str]:
    for cue in cues:
        parse_cue(cue)  # ValueError names the cue and its bad part
    return cues


class Customer(_Strict):
    name: str = Field(min_length=1)
    # how they talk: picks the wording of their generic reactions (see customer.py)
    temper: Literal["curt", "chatty", "formal"]


class Detail(_Strict):
    """What the agent cannot solve the problem without, and the customer only gives when asked."""

    label: str = Field(min_length=1, description="what it is, e.g. 'the order number'")
    ask: list[Text] = Field(min_length=1, description="cues: a question naming any of these asks for it")
    reveal: str = Field(min_length=1, description="what the customer says when asked")
    weight: float = Field(default=2.0, gt=0, le=5)

    _cues = field_validator("ask")(_check_cues)


class Step(_Strict):
    """One thing the agent must do or say for the problem to count as solved."""

    id: str = Field(pattern=r"^[a-z0-9][a-z0-9_-]*$")
    cues: list[Text] = Field(min_length=1, description="cues: a sentence meeting any of them takes the step")
    wants: list[Text] = Field(min_length=1, description="how the customer presses for it while it is missing")
    needs_detail: bool = Field(default=True, description="only possible once the detail is known")
    weight: float = Field(default=2.0, gt=0, le=5)

    _cues = field_validator("cues")(_check_cues)


class Reaction(_Strict):
    """A phrase that hurts with this customer, and what they say back."""

    cue: str = Field(min_length=1)
    reply: str = Field(min_length=1)

    _cue = field_validator("cue")(lambda cue: _check_cues([cue])[0])


class SupportCard(_Strict):
    id: str = Field(pattern=r"^[a-z0-9][a-z0-9_-]*$")
    title: str = Field(min_length=1)
    product: str = Field(min_length=1, description="the product or service, e.g. 'broadband'")
    customer: Customer
    frustration: float = Field(ge=1, lt=MAX_FRUSTRATION, description="at the start, 0 calm .. 10 walks away")
    opening: str = Field(min_length=1)
    grievances: list[Text] = Field(min_length=1, description="cues: what they want acknowledged")
    detail: Detail
    steps: list[Step] = Field(min_length=2)
    wrong_promises: list[Reaction] = Field(min_length=1, description="promises that are false for this case")
    angered_by: list[Reaction] = Field(min_length=1, description="what makes this customer angrier")
    thanks: str = Field(min_length=1, description="their last line once the problem is solved")
    gives_up: str = Field(min_length=1, description="their last line when they give up")

    _cues = field_validator("grievances")(_check_cues)

    @model_validator(mode="after")
    def _steps_unique(self) -> SupportCard:
        ids = [s.id for s in self.steps]
        repeated = sorted({i for i in ids if ids.count(i) > 1})
        if repeated:
            raise ValueError(f"steps: step id(s) {', '.join(repeated)} used more than once")
        return self

    @property
    def unsolved(self) -> float:
        """How far the problem is from solved at the start: the detail's and the steps' weights."""
        return self.detail.weight + sum(s.weight for s in self.steps)

    def to_scenario(self) -> Scenario:
        return Scenario(
            id=self.id,
            title=self.title,
            category=self.product,
            initial_state=(-self.frustration, -self.unsolved),
            card=self.model_dump(),
        )


def load_card(path: str | Path) -> SupportCard:
    """Read and validate one card; CardError names the file, the field and the reason."""
    return read_yaml_model(Path(path), SupportCard, "support-desk card", CardError)


def load_cards(source: str | Path) -> list[Scenario]:
    """Scenarios from a split of the shipped cards ('train', 'test', 'all'), a folder of
    cards (searched recursively) or one card file; sorted by id, ids unique."""
    if str(source) in SPLITS:
        source = CARD_DIR if source == "all" else CARD_DIR / str(source)
    return scenarios_from_files(source, lambda file: load_card(file).to_scenario(), "support-desk card", CardError)
