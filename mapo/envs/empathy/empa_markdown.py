"""Load EMPA's original case cards (markdown) into `ScenarioCard`s.

An EMPA case card is the actor's prompt: five tagged sections, each a markdown list
of `- key: value` entries (a key may instead carry an indented or numbered sub-list):

    <character_info>        name, gender, age, occupation, personalities, output format, ...
    <empathy_threshold>     "Empathy threshold [High|Mid|Low]" plus bullets on what the person accepts
    <psychological_profile> topic, empathy need, priority of the three kinds of empathy, optional C1..P3
    <experience>            childhood / adolescence / youth episodes, hidden growth line, current status, goals
    <scenario>              cause of the story, background, optional opening line

English keys and EMPA's own (Chinese) keys are both accepted; matching ignores case,
spaces, underscores and the colon style. All five sections are required: a missing
one is a `CardError` naming the file and the section.

How the sections map onto the card:

| card field | from |
| --- | --- |
| persona.name / age / occupation | character_info name, age, occupation (else experience "current status") |
| persona.traits | character_info social/inner personality, plus the empathy_threshold bullets |
| persona.speaking_style | character_info output format / speaking style / chat principle / chat strategy |
| title, opening_line | profile topic; scenario "opening line" wins for the opening line |
| situation | scenario cause + background + character_info current activity |
| memories | experience childhood / adolescence / youth / past experiences (one memory each) |
| growth_arc | experience hidden growth line |
| stages | the companion script `<stem>.json` (EMPA keeps the four story stages there) if present, else four stages built from scenario cause, scenario background, experience current status, experience life goal + vision |
| cues | per axis: the profile's line for that kind of empathy ("Affective empathy: [Priority: High] ..."), else the profile's empathy need |
| category | a `category` entry in any section, else the `category=` argument |
| indicators | the nine levels C1..P3 if the profile gives them (all nine, 0-3), else derived below |

Derived indicators (when the card does not list them): the threshold t (Low 1, Mid 2,
High 3) sets the depth indicators C2, A2, P2 = t; each axis's priority p (High 3,
Mid 2, Low 1, or rank 1/2/3 in an ordered list -> 3/2/1) sets X1 = X3 = p. A harder
to satisfy person (high threshold) has deeper needs everywhere; the axis they put
first weighs most. Because A2/P2 are EMPA's core indicators, a High threshold can make
A or P the deepest axis even when cognitive empathy is listed first: list the nine
levels to control P_0 exactly. `dominant_axis` is the deepest axis of P_0 unless the
card states one (which then must be the deepest, as for YAML cards).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from pydantic import ValidationError

from mapo.core.types import AXES
from mapo.envs.dynamics import INDICATOR_KEYS, initial_vector
from mapo.envs.empathy.cards import CATEGORIES, CardError, EmpathyScenario, ScenarioCard
from mapo.envs.empathy.empa_sections import (
    CANONICAL,
    INDICATOR_RE,
    LEVEL_RE,
    LEVEL_WORDS,
    SECTIONS,
    THRESHOLD,
    Entry,
    Section,
    axis_of,
    norm_key,
    prose,
    split_sections,
)
from mapo.validation import describe_validation_error, read_text

DEFAULT_SPEAKING_STYLE = "Chats in short, natural messages, like a real person typing to someone online."


class _Card:
    """One EMPA file being read: looks entries up and raises errors naming file, line and section."""

    def __init__(self, path: Path, sections: dict[str, Section]) -> None:
        self.path = path
        self.sections = sections

    def error(self, section: str, what: str, line: int | None = None) -> CardError:
        where = f"{self.path}:{line}" if line else str(self.path)
        return CardError(f"{where}: section <{section}>: {what}")

    def entries(self, section: str, name: str) -> list[Entry]:
        return [e for e in self.sections[section].entries if CANONICAL.get(norm_key(e.key)) == name]

    def first(self, section: str, name: str) -> Entry | None:
        found = [e for e in self.entries(section, name) if e.text()]
        return found[0] if found else None

    def value(self, section: str, name: str) -> str:
        entry = self.first(section, name)
        return entry.text() if entry else ""

    def require(self, section: str, name: str, label: str) -> Entry:
        entry = self.first(section, name)
        if entry is None:
            raise self.error(section, f"missing entry {label!r}", self.sections[section].line)
        return entry

    # -- the parts -----------------------------------------------------------------

    def persona(self) -> dict:
        name = self.require("character_info", "name", "name").text()
        age_entry = self.require("character_info", "age", "age")
        age_match = re.search(r"\d+", age_entry.text())
        if age_match is None:
            raise self.error("character_info", f"age {age_entry.text()!r} is not a number", age_entry.line)
        occupation = self.value("character_info", "occupation") or self.value("experience", "status")
        if not occupation:
            raise self.error("character_info", "missing entry 'occupation' (or 'current status' in <experience>)",
                             self.sections["character_info"].line)
        traits = [e.text() for e in self.entries("character_info", "personality") if e.text()]
        traits += [text for _, text in self.threshold_lines() if not THRESHOLD.search(text)]
        if not traits:
            raise self.error("character_info", "no personality entries and no threshold bullets to describe the person",
                             self.sections["character_info"].line)
        style = " ".join(e.text() for e in self.entries("character_info", "style") if e.text())
        return {"name": name, "age": int(age_match.group()), "occupation": occupation,
                "traits": traits, "speaking_style": style or DEFAULT_SPEAKING_STYLE}

    def category(self, default: str | None) -> str:
        for section in SECTIONS:
            entry = self.first(section, "category")
            if entry is not None:
                return _category(self, section, entry)
        if default is None:
            raise CardError(
                f"{self.path}: no category: add '- Category: <one of {', '.join(CATEGORIES)}>' to <character_info> "
                "or pass category= to the loader"
            )
        return default

    def threshold_lines(self) -> list[tuple[int, str]]:
        section = self.sections["empathy_threshold"]
        lines = section.free_lines + [(e.line, f"{e.key}: {e.text()}") for e in section.entries]
        return sorted(lines)

    def threshold(self) -> int:
        for _, text in self.threshold_lines():
            match = THRESHOLD.search(text)
            if match:
                return LEVEL_WORDS[match.group(1).lower()]
        raise self.error("empathy_threshold", "no threshold level; expected e.g. 'Empathy threshold [High]' "
                         "(High, Mid or Low)", self.sections["empathy_threshold"].line)

    def axis_lines(self) -> dict[str, Entry]:
        """The profile's line for each kind of empathy, e.g. 'Affective empathy: [Priority: High] ...'."""
        out: dict[str, Entry] = {}
        for entry in self.sections["psychological_profile"].entries:
            if CANONICAL.get(norm_key(entry.key)):
                continue
            axis = axis_of(entry.key)
            if axis and axis not in out:
                out[axis] = entry
        return out

    def priorities(self) -> dict[str, int]:
        axis_lines = self.axis_lines()
        levels: dict[str, int] = {}
        for axis, entry in axis_lines.items():
            match = re.search(rf"{LEVEL_RE}", entry.text(), re.IGNORECASE)
            if match:
                levels[axis] = LEVEL_WORDS[match.group(1).lower()]
        if len(levels) == 3:
            return levels
        entry = self.first("psychological_profile", "priority")
        if entry is not None:
            order = entry.items or [p for p in re.split(r"[>,，、;]+", entry.value) if p.strip()]
            ranked = [axis_of(item) for item in order]
            if len(ranked) == 3 and sorted(a for a in ranked if a) == sorted(AXES):
                return {axis: 3 - rank for rank, axis in enumerate(ranked)}  # type: ignore[misc]
            raise self.error("psychological_profile", f"priority must rank cognitive, affective and proactive "
                             f"empathy once each, got {order!r}", entry.line)
        missing = [a for a in AXES if a not in levels]
        raise self.error("psychological_profile", f"no priority for axis {', '.join(missing)}: give an ordered "
                         "'Priority' list or '<kind> empathy: [Priority: High|Mid|Low]' lines",
                         self.sections["psychological_profile"].line)

    def indicators(self) -> dict[str, int]:
        section = self.sections["psychological_profile"]
        found: dict[str, tuple[int, int]] = {}
        for entry in section.entries:
            texts = [f"{entry.key}: {entry.value}", *entry.items]
            for text in texts:
                for key, level in INDICATOR_RE.findall(text):
                    found[key.upper()] = (int(level), entry.line)
        if not found:
            t, p = self.threshold(), self.priorities()
            return {f"{axis}{i}": (t if i == 2 else p[axis]) for axis in AXES for i in (1, 2, 3)}
        missing = [k for k in INDICATOR_KEYS if k not in found]
        if missing:
            line = min(line for _, line in found.values())
            raise self.error("psychological_profile", f"indicators given for {', '.join(sorted(found))} but not "
                             f"{', '.join(missing)}: give all nine or none", line)
        for key, (level, line) in found.items():
            if not 0 <= level <= 3:
                raise self.error("psychological_profile", f"indicator {key} = {level} is not a level 0-3", line)
        return {k: found[k][0] for k in INDICATOR_KEYS}

    def cues(self) -> dict[str, list[str]]:
        need = self.value("psychological_profile", "need")
        axis_lines = self.axis_lines()
        out: dict[str, list[str]] = {}
        for axis, cue_name in zip(AXES, ("understanding", "validation", "empowerment")):
            text = ""
            if axis in axis_lines:
                text = re.sub(r"^\W*(?:\[[^\]]*\]|【[^】]*】)\W*", "", axis_lines[axis].text()).strip()
                text = re.sub(rf"^{LEVEL_RE}\s*(priority|优先级)?\W*", "", text, flags=re.IGNORECASE).strip()
            text = text or need
            if not text:
                raise self.error("psychological_profile", f"nothing to describe {cue_name}: add an 'Empathy need' "
                                 "entry or a line per kind of empathy", self.sections["psychological_profile"].line)
            out[cue_name] = [text]
        return out

    def memories(self) -> list[str]:
        memories: list[str] = []
        for entry in self.entries("experience", "memory"):
            memories += [prose(item) for item in entry.items if item] or ([prose(entry.value)] if entry.value else [])
        if not memories:
            raise self.error("experience", "no past experiences (childhood, adolescence, youth or "
                             "'past experiences' entries)", self.sections["experience"].line)
        return memories

    def stages(self) -> list[dict[str, str]]:
        script = self.path.with_suffix(".json")
        if script.is_file():
            return _script_stages(script)
        parts = [
            ("What happened", prose(self.value("scenario", "cause"))),
            ("The background", prose(self.value("scenario", "background"))),
            ("Where they stand now", prose(self.value("experience", "status"))),
            ("What they hope for", prose(self.value("experience", "goal"), self.value("experience", "vision"))),
        ]
        missing = [title for title, content in parts if not content]
        if missing:
            raise CardError(
                f"{self.path}: cannot build the four story stages ({', '.join(missing)} missing): <scenario> needs "
                "'cause' and 'background', <experience> needs 'current status' and 'life goal'; or put the stages "
                f"in {script.name}"
            )
        return [{"title": title, "content": content} for title, content in parts]


def _category(card: _Card, section: str, entry: Entry) -> str:
    value = entry.text().lower()
    long_names = {
        "career development": "career", "interpersonal relationships": "relationships",
        "physical and mental health": "health", "living conditions": "living",
        "leisure and entertainment": "leisure", "values and identity": "values",
    }
    if value in CATEGORIES:
        return value
    if value in long_names:
        return long_names[value]
    raise card.error(section, f"category {entry.text()!r} is not one of {', '.join(CATEGORIES)}", entry.line)


def _script_stages(script: Path) -> list[dict[str, str]]:
    """The four stages from EMPA's script JSON:
    {"stages" | "故事的经过": {"stage1" | "阶段1": {"title" | "标题": ..., "content" | "内容": ...}, ...}}
    (or a list of four such objects)."""
    try:
        data = json.loads(script.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise CardError(f"{script}:{exc.lineno}: invalid JSON: {exc.msg}") from None
    stages = data.get("stages", data.get("故事的经过")) if isinstance(data, dict) else None
    if isinstance(stages, dict):
        stages = [stages[k] for k in sorted(stages, key=lambda k: int(re.sub(r"\D", "", k) or 0))]
    if not isinstance(stages, list) or len(stages) != 4:
        raise CardError(f"{script}: field stages: expected four story stages under 'stages' (or '故事的经过')")
    out = []
    for i, stage in enumerate(stages, 1):
        if not isinstance(stage, dict):
            raise CardError(f"{script}: field stages.{i}: expected an object with title and content")
        title, content = stage.get("title", stage.get("标题")), stage.get("content", stage.get("内容"))
        if not title or not content:
            raise CardError(f"{script}: field stages.{i}: needs 'title' and 'content' (or '标题' and '内容')")
        out.append({"title": str(title), "content": str(content)})
    return out


def load_empa_card(path: str | Path, *, category: str | None = None) -> ScenarioCard:
    """Read one EMPA markdown case card; CardError names file, section (and line) on any problem."""
    path = Path(path)
    text = read_text(path, "card", CardError)
    if category is not None and category not in CATEGORIES:
        raise ValueError(f"category={category!r} is not one of {', '.join(CATEGORIES)}")
    card = _Card(path, split_sections(path, text))
    indicators = card.indicators()
    p0 = initial_vector(indicators)
    stated = card.first("psychological_profile", "dominant_axis")
    if stated is not None:
        dominant = axis_of(stated.text()) or stated.text().strip().upper()
    else:
        dominant = AXES[min(range(3), key=lambda i: p0[i])]
    topic = card.value("psychological_profile", "topic")
    opening = card.value("scenario", "opening") or topic
    if not opening:
        raise card.error("scenario", "no opening line: add '- Opening line: ...' to <scenario> or a "
                         "'Topic' to <psychological_profile>", card.sections["scenario"].line)
    situation = prose(
        card.value("scenario", "cause"), card.value("scenario", "background"), card.value("character_info", "activity")
    )
    if not situation:
        raise card.error("scenario", "missing entry 'cause' (what happened)", card.sections["scenario"].line)
    growth = card.require("experience", "growth", "hidden growth line").text()
    raw = {
        "id": "empa-" + (re.sub(r"[^a-z0-9]+", "-", path.stem.lower()).strip("-") or "card"),
        "title": topic or path.stem,
        "category": card.category(category),
        "dominant_axis": dominant,
        "persona": card.persona(),
        "situation": situation,
        "stages": card.stages(),
        "memories": card.memories(),
        "growth_arc": growth,
        "opening_line": opening,
        "indicators": indicators,
        "cues": card.cues(),
    }
    try:
        return ScenarioCard.model_validate(raw)
    except ValidationError as exc:
        raise CardError(f"{path}: {describe_validation_error(exc)}") from None


def load_empa_cards(folder: str | Path, *, category: str | None = None) -> list[EmpathyScenario]:
    """Every `*.md` EMPA card under `folder` (or one file), as EmpathyScenarios sorted by id."""
    folder = Path(folder)
    files = [folder] if folder.is_file() else sorted(folder.rglob("*.md")) if folder.is_dir() else []
    if not files:
        raise CardError(f"{folder}: no EMPA case cards (*.md) found")
    scenarios: dict[str, EmpathyScenario] = {}
    for file in files:
        scenario = load_empa_card(file, category=category).to_scenario()
        if scenario.id in scenarios:
            raise CardError(f"{file}: field id: {scenario.id!r} is already used by another card in {folder}")
        scenarios[scenario.id] = scenario
    return sorted(scenarios.values(), key=lambda s: s.id)
