"""SFT data: JSONL, one dialogue per line, checked line by line.

    {"messages": [{"role": "system" | "user" | "assistant", "content": "..."}, ...],
     "id": "optional", "meta": {"optional": "anything"}}

An optional system message comes first, then user and assistant messages alternate,
starting with the user (as a rollout does: the environment speaks first). At least one
assistant message; a trailing user message is allowed and not trained (nothing answers
it). Every problem stops the run with the file, the line and the field.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, StrictStr, ValidationError, field_validator, model_validator

from mapo.config import SftSpec
from mapo.validation import describe_validation_error, json_lines


class SftDataError(ValueError):
    """A dialogue file that cannot be trained on; the message names the file, line and field."""


class Message(BaseModel):
    model_config = ConfigDict(extra="forbid")

    role: Literal["system", "user", "assistant"]
    content: StrictStr

    @field_validator("content")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("empty content")
        return value


class Dialogue(BaseModel):
    model_config = ConfigDict(extra="forbid")

    messages: list[Message]
    id: StrictStr | int | None = None
    meta: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _order(self) -> Dialogue:
        if not self.messages:
            raise ValueError("messages: an empty list")
        expected = "user"
        for k, message in enumerate(self.messages):
            if message.role == "system":
                if k:
                    raise ValueError(f"messages.{k}.role: a system message must be the first message")
                continue
            if message.role != expected:
                after = "after a user message" if expected == "assistant" else (
                    "after an assistant message" if k and self.messages[k - 1].role == "assistant"
                    else "first (after an optional system message)"
                )
                raise ValueError(f"messages.{k}.role: expected {expected!r} {after}, got {message.role!r}")
            expected = "assistant" if expected == "user" else "user"
        if not any(m.role == "assistant" for m in self.messages):
            raise ValueError("messages: no assistant message to learn from")
        return self


@dataclass
class Example:
    """One validated dialogue: where it came from (`file:line`), its id and its messages."""

    source: str
    id: str
    messages: list[dict[str, str]]


def read_dialogues(path: str | Path) -> list[Example]:
    """Every dialogue of a JSONL file, validated; SftDataError naming the file, line and field."""
    path = Path(path)
    if not path.is_file():
        raise SftDataError(f"{path}: no such SFT data file")
    examples: list[Example] = []
    seen: dict[str, int] = {}
    for number, value in json_lines(path, "SFT data", SftDataError):
        where = f"{path}:{number}"
        if not isinstance(value, dict):
            raise SftDataError(f"{where}: expected a JSON object with 'messages', got {type(value).__name__}")
        try:
            dialogue = Dialogue.model_validate(value)
        except ValidationError as err:
            raise SftDataError(f"{where}: {describe_validation_error(err)}") from None
        ident = str(dialogue.id) if dialogue.id is not None else f"{path.stem}:{number}"
        if ident in seen:
            raise SftDataError(f"{where}: field id: {ident!r} is also the id of line {seen[ident]}")
        seen[ident] = number
        examples.append(Example(where, ident, [m.model_dump() for m in dialogue.messages]))
    if not examples:
        raise SftDataError(f"{path}: no dialogues (the file is empty)")
    return examples


def train_and_held_out(spec: SftSpec, seed: int) -> tuple[list[Example], list[Example]]:
    """(training dialogues, held-out dialogues): `eval_file`, else a seeded `eval_fraction` of `train_file`."""
    if not spec.train_file:
        raise SftDataError("sft.train_file: no SFT data given (a JSONL file of dialogues; `mapo sft --data FILE`)")
    train = read_dialogues(spec.train_file)
    if spec.eval_file:
        held = read_dialogues(spec.eval_file)
        shared = sorted({e.id for e in train} & {e.id for e in held})
        if shared:
            raise SftDataError(f"{spec.eval_file}: ids also in {spec.train_file}: {', '.join(shared[:5])}")
        return train, held
    if spec.eval_fraction == 0 or len(train) < 2:
        return train, []
    count = min(len(train) - 1, max(1, round(spec.eval_fraction * len(train))))
    order = np.random.default_rng(seed).permutation(len(train))
    chosen = set(order[:count].tolist())
    return [e for k, e in enumerate(train) if k not in chosen], [e for k, e in enumerate(train) if k in chosen]
