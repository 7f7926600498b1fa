"""Case sets of the questioning game: the YAML schema, its checks, and the bundled sets.

A case set is one YAML file holding one or more tables. A table is a small world: its
candidates (the possible secrets: things, or a device's faults), its attributes (the
yes/no questions that may be asked: a `question` shown verbatim and the `phrases` that
name it in a question) and, per candidate, the attributes that are true of it (`has`;
every other one is false). A table's `split` holds the whole table out (troubleshooting
holds out whole devices); a candidate's `split` holds out that secret.

Loading checks what makes the answers exact, and stops with `CaseError` naming the file
and the field: an unknown attribute in a `has` list, two candidates no attribute tells
apart, a phrase that names two attributes or occurs in a candidate's name, a listed
question that does not name exactly its own attribute (mapo.envs.questioning.parse), a
candidate name with a comma (the opening message lists names with commas).

The bundled sets live in `mapo/data/games/<name>.yaml` (twenty-questions, troubleshooting).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from mapo.core.types import Scenario
from mapo.envs.questioning.parse import contains, parse_question, words
from mapo.envs.questioning.table import Attribute, Table
from mapo.validation import read_yaml_model

SPLITS = ("train", "test", "all")
BUNDLED = ("twenty-questions", "troubleshooting")

Text = Annotated[str, Field(min_length=1)]


class CaseError(ValueError):
    """A case set that cannot be played; the message names the file and the field."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)


class _Attribute(_Strict):
    question: Text
    phrases: list[Text] = Field(min_length=1)


class _Candidate(_Strict):
    has: list[Text] = Field(default_factory=list)  # not `yes`: YAML reads that key as a boolean
    split: Literal["train", "test"] = "train"
    fix: str = ""  # troubleshooting: what the customer does once the fault is found


class _Table(_Strict):
    name: Text
    subject: Text  # what a candidate is: "thing", "printer fault", ...
    intro: str = ""  # the opening message's first line (troubleshooting: the customer's complaint)
    split: Literal["train", "test"] = "train"
    attributes: dict[str, _Attribute] = Field(min_length=2)
    candidates: dict[str, _Candidate] = Field(min_length=2)


class _CaseFile(_Strict):
    name: Text
    tables: list[_Table] = Field(min_length=1)


@dataclass(frozen=True)
class CaseSet:
    name: str
    path: Path
    tables: tuple[Table, ...]

    def table(self, name: str) -> Table:
        for table in self.tables:
            if table.name == name:
                return table
        raise CaseError(f"{self.path}: no table named {name!r}; tables: {', '.join(t.name for t in self.tables)}")


def bundled_case_file(name: str) -> Path:
    if name not in BUNDLED:
        raise CaseError(f"no bundled case set {name!r}; bundled: {', '.join(BUNDLED)}")
    return Path(str(resources.files("mapo") / "data" / "games" / f"{name}.yaml"))


_loaded: dict[Path, CaseSet] = {}


def load_case_set(path: str | Path) -> CaseSet:
    """The case set in `path`, checked (see the module docstring); cached per path. Every case
    set loaded is one the reference players know (`loaded_case_sets`): a game's environment loads
    its scenario's case file at reset, before any player reads the opening message."""
    path = Path(path)
    if path not in _loaded:
        _loaded[path] = _read_case_set(path)
    return _loaded[path]


def loaded_case_sets() -> list[CaseSet]:
    """The case sets this process has loaded, in loading order."""
    return list(_loaded.values())


def forget_case_sets() -> None:
    """Drop the cache (a case file rewritten in place is read again)."""
    _loaded.clear()


def _read_case_set(path: Path) -> CaseSet:
    raw = read_yaml_model(path, _CaseFile, "case set", CaseError)
    names = [t.name for t in raw.tables]
    if len(set(names)) != len(names):
        raise CaseError(f"{path}: field tables: table names must be unique, got {names}")
    return CaseSet(raw.name, path, tuple(_table(t, f"{path}: field tables[{k}]") for k, t in enumerate(raw.tables)))


def _table(raw: _Table, where: str) -> Table:
    attributes = tuple(
        Attribute(key, a.question, tuple(words(p) for p in a.phrases), _label(a)) for key, a in raw.attributes.items()
    )
    for key, a in raw.attributes.items():
        for phrase in a.phrases:
            if not words(phrase):
                raise CaseError(f"{where}.attributes.{key}.phrases: {phrase!r} has no words")
    candidates = tuple(raw.candidates)
    table = Table(
        name=raw.name,
        subject=raw.subject,
        intro=raw.intro,
        split=raw.split,
        attributes=attributes,
        candidates=candidates,
        facts={c: frozenset(v.has) for c, v in raw.candidates.items()},
        candidate_split={c: v.split for c, v in raw.candidates.items()},
        fixes={c: v.fix for c, v in raw.candidates.items()},
    )
    keys = set(raw.attributes)
    for name, candidate in raw.candidates.items():
        if "," in name or not words(name):
            raise CaseError(f"{where}.candidates.{name}: a candidate name needs words and no comma")
        unknown = sorted(set(candidate.has) - keys)
        if unknown:
            raise CaseError(
                f"{where}.candidates.{name}.has: unknown attribute(s) {', '.join(unknown)}; "
                f"attributes: {', '.join(raw.attributes)}"
            )
    _check_phrases(table, where)
    for a in attributes:  # every listed question must map to its own attribute, and to nothing else
        parsed = parse_question(a.question, table)
        if parsed.attribute != a.key:
            raise CaseError(
                f"{where}.attributes.{a.key}.question: {a.question!r} does not ask exactly this attribute "
                f"({parsed.reason or 'it names ' + str(parsed.attribute)}); reword it or its phrases"
            )
    seen: dict[frozenset[str], str] = {}
    for name in candidates:
        twin = seen.setdefault(table.facts[name], name)
        if twin != name:
            raise CaseError(
                f"{where}.candidates.{name}: no attribute tells {twin!r} and {name!r} apart (same `has` list); "
                "add an attribute that differs, or drop one"
            )
    return table


def _label(raw: _Attribute) -> str:
    """The first phrase its question says (the load checks that one does), else the first phrase."""
    said = words(raw.question)
    return next((p for p in raw.phrases if contains(said, words(p))), raw.phrases[0])


def _check_phrases(table: Table, where: str) -> None:
    """No phrase names two attributes, contains another attribute's phrase, or occurs in a candidate name."""
    owners = [(a.key, p) for a in table.attributes for p in a.phrases]
    for i, (key, phrase) in enumerate(owners):
        for other, other_phrase in owners[i + 1 :]:
            if other != key and (contains(phrase, other_phrase) or contains(other_phrase, phrase)):
                raise CaseError(
                    f"{where}.attributes.{other}.phrases: {' '.join(other_phrase)!r} overlaps "
                    f"{' '.join(phrase)!r} of attribute {key!r}"
                )
        for name in table.candidates:
            if contains(words(name), phrase) or contains(phrase, words(name)):
                raise CaseError(
                    f"{where}.attributes.{key}.phrases: {' '.join(phrase)!r} overlaps the candidate name {name!r}"
                )


# ---------------------------------------------------------------- scenarios and pools


def case_scenarios(case_set: CaseSet, split: str) -> list[Scenario]:
    """One scenario per secret of `split`: id `<table>/<secret>`, the card naming the case file,
    table and secret (the environment draws the pool from the id at reset)."""
    if split not in SPLITS:
        raise CaseError(f"{case_set.path}: unknown split {split!r}; use {', '.join(SPLITS)}")
    scenarios = []
    for table in case_set.tables:
        for secret in table.secrets(split):
            scenarios.append(
                Scenario(
                    id=f"{table.name}/{secret}",
                    title=f"{table.subject}: {secret}",
                    category=table.name,
                    card={"cases": str(case_set.path), "table": table.name, "secret": secret},
                )
            )
    return scenarios


def draw_pool(table: Table, secret: str, size: int, scenario_id: str, seed: int = 0) -> list[str]:
    """The secret and `size - 1` other candidates of its table, in an order drawn from
    (scenario id, size, seed): the same pool for every dialogue of a scenario."""
    if secret not in table.facts:
        raise CaseError(f"table {table.name!r}: the secret {secret!r} is not one of its candidates")
    if not 2 <= size <= len(table.candidates):
        raise CaseError(
            f"pool_size {size}: table {table.name!r} has {len(table.candidates)} candidates; "
            f"the pool must hold 2 to {len(table.candidates)}"
        )
    rng = random.Random(f"{scenario_id}|{size}|{seed}")
    others = [c for c in table.candidates if c != secret]
    pool = [secret, *rng.sample(others, size - 1)]
    rng.shuffle(pool)
    return pool
