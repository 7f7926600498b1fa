"""The person the emotion environment simulates, from a persona JSONL line or a scenario card.

`Persona` is what the judge and the simulated user read: a person with a background, a
topic and a hidden intention (what they really need). `load_personas` reads SAGE/RLVER-style
persona files (JSONL) into `Scenario`s for the environment.

One JSON object per line; blank lines are skipped. Each object describes one
simulated person. The field names vary between datasets, so each field accepts a
few spellings (first match wins):

| field | accepted keys | required |
| --- | --- | --- |
| persona | `persona`, `profile`, `player` (text, or an object rendered as "key: value" lines) | yes |
| background | `background`, `scenario`, `scene` | one of background / topic |
| topic | `topic`, `main_topic`, `title` | one of background / topic |
| hidden intention | `hidden_intention`, `hidden intention`, `intention`, `task` | no |
| initial emotion | `initial_emotion`, `emotion`, `emotion_score`, `initial_emotion_score` (number 0-100) | no |
| first message | `first_message`, `opening_line`, `opening` | no |
| name | `name` | no |
| id | `id` (text or number); else `<file stem>-<line number>` | no |
| category | `category` | no |

Other keys are kept under `card["extra"]`. The scenario's `initial_state` is the K = 1
need vector `(e - 100,)`, so D_0 = 100 - e, where e is the persona's initial emotion or,
when it gives none, an integer in 30-40 drawn from the persona's id and `start_seed`
(`seeded_emotion`): every sample of a scenario starts from the same e, as group
normalisation expects. Errors are `CardError`s naming the file and the line.
"""

from __future__ import annotations

import math
import random
import textwrap
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mapo.core.types import Scenario
from mapo.envs.empathy.cards import CardError
from mapo.validation import json_lines

FIELDS: dict[str, tuple[str, ...]] = {
    "persona": ("persona", "profile", "player"),
    "background": ("background", "scenario", "scene"),
    "topic": ("topic", "main_topic", "title"),
    "hidden_intention": ("hidden_intention", "hidden intention", "intention", "task"),
    "initial_emotion": ("initial_emotion", "emotion", "emotion_score", "initial_emotion_score"),
    "first_message": ("first_message", "opening_line", "opening"),
    "name": ("name",),
    "id": ("id",),
    "category": ("category",),
}
_TEXT_FIELDS = ("persona", "background", "topic", "hidden_intention", "first_message", "name", "category")
START_RANGE = (30, 40)


@dataclass
class Persona:
    """The person the emotion environment simulates."""

    id: str
    persona: str
    background: str = ""
    topic: str = ""
    hidden_intention: str = ""
    first_message: str = ""
    name: str = ""
    initial_emotion: float | None = None
    needs: list[str] = field(default_factory=list)  # what a good reply would do (card cues); judge only

    @classmethod
    def from_scenario(cls, scenario: Scenario) -> Persona:
        """From a persona-JSONL scenario, or from an empathy scenario card (persona, situation, growth arc)."""
        card = scenario.card
        if isinstance(card.get("persona"), Mapping):  # a ScenarioCard dump
            p = card["persona"]
            description = f"{p['name']}, {p['age']}, {p['occupation']}. " + " ".join(p.get("traits", []))
            return cls(
                id=scenario.id,
                persona=description.strip(),
                background=card.get("situation", ""),
                topic=scenario.title,
                hidden_intention=card.get("growth_arc", ""),
                first_message=card.get("opening_line", ""),
                name=p["name"],
                needs=[cue for cues in card.get("cues", {}).values() for cue in cues],
            )
        if not card.get("persona"):
            raise ValueError(f"scenario {scenario.id!r}: no persona to play (card has no 'persona')")
        return cls(
            id=scenario.id,
            persona=card["persona"],
            background=card.get("background", ""),
            topic=card.get("topic", ""),
            hidden_intention=card.get("hidden_intention", ""),
            first_message=card.get("first_message", ""),
            name=card.get("name", ""),
            initial_emotion=card.get("initial_emotion"),
        )


def seeded_emotion(scenario_id: str, seed: int = 0, start_range: tuple[int, int] = START_RANGE) -> float:
    """A start emotion for a persona that gives none: uniform integer in `start_range`, fixed by id and seed."""
    rng = random.Random(zlib.crc32(f"{scenario_id}:{seed}".encode("utf-8")))
    return float(rng.randint(*start_range))


def _text(value: Any, where: str, key: str) -> str:
    if isinstance(value, str):
        return value.strip()
    if isinstance(value, dict):  # structured profiles: one "key: value" line each
        return "\n".join(f"{k}: {_text(v, where, f'{key}.{k}')}" for k, v in value.items() if v not in (None, ""))
    if isinstance(value, list):
        return "; ".join(_text(v, where, key) for v in value)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    raise CardError(f"{where}: field {key!r} must be text, got {type(value).__name__}")


def _pick(obj: dict[str, Any], name: str) -> tuple[str | None, Any]:
    for key in FIELDS[name]:
        if key in obj and obj[key] not in (None, ""):
            return key, obj[key]
    return None, None


def parse_persona(obj: Any, where: str, default_id: str, start_seed: int = 0) -> Scenario:
    """One persona object -> Scenario; `where` ("file:line") prefixes every error."""
    if not isinstance(obj, dict):
        raise CardError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    card: dict[str, Any] = {}
    for name in _TEXT_FIELDS:
        key, value = _pick(obj, name)
        card[name] = _text(value, where, key) if key else ""
    if not card["persona"]:
        raise CardError(f"{where}: field 'persona' is missing (expected one of {', '.join(FIELDS['persona'])})")
    if not card["background"] and not card["topic"]:
        keys = FIELDS["background"] + FIELDS["topic"]
        raise CardError(f"{where}: needs a background or a topic (one of {', '.join(keys)})")

    key, emotion = _pick(obj, "initial_emotion")
    if key is not None:
        if isinstance(emotion, bool) or not isinstance(emotion, (int, float)) or not math.isfinite(emotion):
            raise CardError(f"{where}: field {key!r} must be a number 0-100, got {emotion!r}")
        if not 0 <= emotion <= 100:
            raise CardError(f"{where}: field {key!r} = {emotion} is outside 0-100")
    key_id, raw_id = _pick(obj, "id")
    if key_id is not None and (isinstance(raw_id, bool) or not isinstance(raw_id, (str, int))):
        raise CardError(f"{where}: field 'id' must be text or an integer, got {raw_id!r}")
    scenario_id = str(raw_id).strip() if key_id is not None else default_id
    if key is not None:
        card["initial_emotion"], card["initial_emotion_source"] = float(emotion), "persona"
    else:
        card["initial_emotion"], card["initial_emotion_source"] = seeded_emotion(scenario_id, start_seed), "seeded"

    known = {k for keys in FIELDS.values() for k in keys}
    card["extra"] = {k: v for k, v in obj.items() if k not in known}
    title = card["topic"] or textwrap.shorten(card["background"], width=80, placeholder="...")
    return Scenario(
        id=scenario_id,
        title=title,
        category=card["category"],
        initial_state=(card["initial_emotion"] - 100.0,),
        card=card,
    )


def load_personas(path: str | Path, start_seed: int = 0) -> list[Scenario]:
    """Every persona in a JSONL file, in file order; CardError names file and line on any problem.
    `start_seed` picks the start emotion of personas that give none."""
    path = Path(path)
    scenarios: list[Scenario] = []
    first_line: dict[str, int] = {}
    for line_no, obj in json_lines(path, "persona file", CardError):
        where = f"{path}:{line_no}"
        scenario = parse_persona(obj, where, default_id=f"{path.stem}-{line_no}", start_seed=start_seed)
        if scenario.id in first_line:
            raise CardError(f"{where}: field 'id': {scenario.id!r} is already used on line {first_line[scenario.id]}")
        first_line[scenario.id] = line_no
        scenarios.append(scenario)
    if not scenarios:
        raise CardError(f"{path}: no personas (the file has no JSON lines)")
    return scenarios
