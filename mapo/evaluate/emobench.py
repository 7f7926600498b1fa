"""EmoBench (Sabour et al., 2024): Emotional Application (EA) and Understanding (EU).

Every item is a multiple-choice question shown with lettered options. Scoring as
the benchmark's authors define it: EA is correct when the chosen option is the
labelled one; EU asks for the emotion and its cause and is correct only when both
are. Accuracy is reported per category and Overall, per language; a reply from
which no option can be read counts as wrong and as a parse failure.

Files (`EA.jsonl`, `EU.jsonl`, one JSON object a line) are read from the folder
given or its `emobench/` subfolder; the prompts below are ours.
"""

from __future__ import annotations

import re
import string
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mapo.evaluate.bench import BenchmarkDataError, ask_in_batches
from mapo.evaluate.responders import Conversation, Responder
from mapo.validation import json_lines

TASKS = ("EA", "EU")
_FIELDS = {
    "EA": ("qid", "language", "category", "question type", "scenario", "subject", "choices", "label"),
    "EU": (
        "qid", "language", "coarse_category", "finegrained_category", "scenario", "subject",
        "emotion_choices", "emotion_label", "cause_choices", "cause_label",
    ),
}

SYSTEM = "You answer multiple-choice questions about people's emotions. Reply with option letters only."

EA_PROMPT = """\
Situation: {scenario}

In this situation, which of these would be the most effective thing for {subject} to do or say?
{options}

Reply with the letter of the best option only, as "Answer: <letter>"."""

EU_PROMPT = """\
Situation: {scenario}

Question 1. Which emotion would {subject} most likely feel in the end?
{emotions}

Question 2. Why would {subject} feel that way?
{causes}

Reply with two lines and nothing else:
Emotion: <letter>
Cause: <letter>"""


@dataclass
class EmoItem:
    """One question. EA: `choices`/`label`; EU: emotion and cause choices and labels.

    `category` is EA's category or EU's coarse category; `subcategory` is EA's
    question type or EU's fine-grained category.
    """

    task: str
    qid: str
    language: str
    category: str
    subcategory: str
    scenario: str
    subject: str
    choices: list[str]
    label: int
    cause_choices: list[str] | None = None
    cause_label: int | None = None

    @property
    def key(self) -> str:
        return f"{self.task}/{self.language}/{self.qid}"


def _letters(n: int) -> str:
    return string.ascii_uppercase[:n]


def _option_lines(options: Sequence[str]) -> str:
    return "\n".join(f"{letter}. {text}" for letter, text in zip(_letters(len(options)), options))


def _label_index(choices: list[str], label: str, where: str, field: str) -> int:
    if label not in choices:
        raise BenchmarkDataError(f"{where}: {field} {label!r} is not one of the choices {choices}")
    return choices.index(label)


def _parse_item(task: str, raw: dict[str, Any], where: str) -> EmoItem:
    missing = [f for f in _FIELDS[task] if f not in raw]
    if missing:
        raise BenchmarkDataError(f"{where}: missing field(s) {missing}")
    for field in ("choices",) if task == "EA" else ("emotion_choices", "cause_choices"):
        value = raw[field]
        if not isinstance(value, list) or len(value) < 2 or not all(isinstance(c, str) for c in value):
            raise BenchmarkDataError(f"{where}: {field} must be a list of at least two strings")
        if len(value) > 26:
            raise BenchmarkDataError(f"{where}: {field} has {len(value)} options; at most 26 can be lettered")
    common = dict(task=task, qid=str(raw["qid"]), language=str(raw["language"]), scenario=str(raw["scenario"]),
                  subject=str(raw["subject"]))
    if task == "EA":
        return EmoItem(**common, category=str(raw["category"]), subcategory=str(raw["question type"]),
                       choices=list(raw["choices"]), label=_label_index(raw["choices"], raw["label"], where, "label"))
    return EmoItem(
        **common,
        category=str(raw["coarse_category"]),
        subcategory=str(raw["finegrained_category"]),
        choices=list(raw["emotion_choices"]),
        label=_label_index(raw["emotion_choices"], raw["emotion_label"], where, "emotion_label"),
        cause_choices=list(raw["cause_choices"]),
        cause_label=_label_index(raw["cause_choices"], raw["cause_label"], where, "cause_label"),
    )


def emobench_folder(data: str | Path) -> Path:
    """The folder holding EA.jsonl / EU.jsonl: `data` itself or its `emobench/` subfolder."""
    root = Path(data).expanduser()
    for folder in (root, root / "emobench"):
        if any((folder / f"{task}.jsonl").is_file() for task in TASKS):
            return folder
    raise BenchmarkDataError(f"{root}: no EmoBench files (EA.jsonl, EU.jsonl) here or in {root / 'emobench'}")


def load_emobench(
    data: str | Path,
    tasks: Iterable[str] = TASKS,
    languages: Iterable[str] | None = None,
    categories: Iterable[str] | None = None,
    limit: int | None = None,
) -> list[EmoItem]:
    """Items of the chosen tasks, filtered by language and category (either level, case-insensitive).

    `limit` keeps the first N items of each task after filtering.
    """
    folder = emobench_folder(data)
    tasks = [t.upper() for t in tasks]
    unknown = [t for t in tasks if t not in TASKS]
    if unknown or not tasks:
        raise ValueError(f"EmoBench task(s) {unknown or tasks}: choose from {', '.join(TASKS)}")
    langs = {x.lower() for x in languages} if languages else None
    cats = {x.lower() for x in categories} if categories else None
    if limit is not None and limit < 1:
        raise ValueError(f"limit must be >= 1, got {limit}")
    items: list[EmoItem] = []
    for task in tasks:
        path = folder / f"{task}.jsonl"
        if not path.is_file():
            raise BenchmarkDataError(f"{path}: file not found (EmoBench task {task})")
        kept = []
        for number, raw in json_lines(path, f"EmoBench task {task}", BenchmarkDataError):
            where = f"{path}:{number}"
            if not isinstance(raw, dict):
                raise BenchmarkDataError(f"{where}: expected a JSON object")
            item = _parse_item(task, raw, where)
            if langs is not None and item.language.lower() not in langs:
                continue
            if cats is not None and item.category.lower() not in cats and item.subcategory.lower() not in cats:
                continue
            kept.append(item)
        items.extend(kept[:limit] if limit is not None else kept)
    return items


def build_prompt(item: EmoItem) -> Conversation:
    if item.task == "EA":
        user = EA_PROMPT.format(scenario=item.scenario, subject=item.subject, options=_option_lines(item.choices))
    else:
        assert item.cause_choices is not None
        user = EU_PROMPT.format(
            scenario=item.scenario,
            subject=item.subject,
            emotions=_option_lines(item.choices),
            causes=_option_lines(item.cause_choices),
        )
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]


# ---------------------------------------------------------------- reading the chosen letters

_CUE = r"(?:answer|option|choice|emotion|cause)"


def _letter_after(cue: str, text: str, n: int) -> int | None:
    """The option named after `cue:` (e.g. "Cause: B", "answer is (C)"), last one wins."""
    letters = _letters(n)
    # The cue is matched in any case, the letter only as a capital ("the answer is a ..." is not "A").
    found = re.findall(rf"\b(?i:{cue})\b\s*(?i:is|:|-)?\s*\(?([A-Z])\)?(?![A-Za-z])", text)
    found = [f for f in found if f in letters]
    return letters.index(found[-1]) if found else None


def _marked_letters(text: str, n: int) -> list[int]:
    """Option letters written as such: "B", "(B)", "B." or "B)" standing alone, in order."""
    letters = _letters(n)
    marks = re.findall(r"(?<![A-Za-z'])\(?([A-Z])(?:\)|\.|:|(?=\s*$)|(?=\s*\n))", text)
    return [letters.index(m) for m in marks if m in letters]


def _named_option(text: str, options: Sequence[str]) -> int | None:
    """The only option whose full text appears in the reply."""
    lowered = text.lower()
    hits = [i for i, option in enumerate(options) if option.strip() and option.strip().lower() in lowered]
    return hits[0] if len(hits) == 1 else None


def parse_choice(text: str, options: Sequence[str]) -> int | None:
    """The option a reply picks (index), or None when it cannot be read unambiguously."""
    n = len(options)
    explicit = _letter_after(_CUE, text, n)
    if explicit is not None:
        return explicit
    marked = set(_marked_letters(text, n))
    if len(marked) == 1:
        return marked.pop()
    return _named_option(text, options) if not marked else None


def parse_emotion_and_cause(text: str, emotions: Sequence[str], causes: Sequence[str]) -> tuple[int | None, int | None]:
    """(emotion index, cause index) from an EU reply; either is None when unreadable."""
    emotion = _letter_after("emotion", text, len(emotions))
    cause = _letter_after("cause", text, len(causes))
    if emotion is None and cause is None:
        # "B\nC" or "B, C": two bare letters in the order asked.
        marks = re.findall(r"(?<![A-Za-z'])\(?([A-Z])(?![A-Za-z])", text)
        if len(marks) == 2:
            e, c = marks
            emotion = _letters(len(emotions)).index(e) if e in _letters(len(emotions)) else None
            cause = _letters(len(causes)).index(c) if c in _letters(len(causes)) else None
    if emotion is None:
        emotion = _named_option(text, emotions)
    if cause is None:
        cause = _named_option(text, causes)
    return emotion, cause


# ---------------------------------------------------------------- scoring


def score_reply(item: EmoItem, reply: str) -> dict[str, Any]:
    """The per-item record: what was read from the reply and whether it is right."""
    record: dict[str, Any] = {
        "key": item.key, "task": item.task, "qid": item.qid, "language": item.language,
        "category": item.category, "subcategory": item.subcategory, "reply": reply,
    }
    if item.task == "EA":
        choice = parse_choice(reply, item.choices)
        record.update(choice=choice, label=item.label, parsed=choice is not None, correct=choice == item.label)
        return record
    assert item.cause_choices is not None
    emotion, cause = parse_emotion_and_cause(reply, item.choices, item.cause_choices)
    record.update(
        emotion=emotion, emotion_label=item.label, cause=cause, cause_label=item.cause_label,
        parsed=emotion is not None and cause is not None,
        emotion_correct=emotion == item.label, cause_correct=cause == item.cause_label,
        correct=emotion == item.label and cause == item.cause_label,
    )
    return record


def _accuracy(records: list[dict[str, Any]], field: str = "correct") -> float:
    return 100.0 * sum(bool(r[field]) for r in records) / len(records)


def summarise(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Accuracy (%) per task, language and category with "Overall", plus counts and parse failures."""
    summary: dict[str, Any] = {}
    by_task: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for record in records:
        by_task[record["task"]].append(record)
    for task, task_records in sorted(by_task.items()):
        by_language: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for record in task_records:
            by_language[record["language"]].append(record)
        task_summary: dict[str, Any] = {}
        for language, rows in sorted(by_language.items()):
            by_category: dict[str, list[dict[str, Any]]] = defaultdict(list)
            for record in rows:
                by_category[record["category"]].append(record)
            block: dict[str, Any] = {
                "accuracy": {cat: _accuracy(r) for cat, r in sorted(by_category.items())} | {"Overall": _accuracy(rows)},
                "n": len(rows),
                "parse_failures": sum(not r["parsed"] for r in rows),
            }
            if task == "EU":
                block["emotion_accuracy"] = _accuracy(rows, "emotion_correct")
                block["cause_accuracy"] = _accuracy(rows, "cause_correct")
            task_summary[language] = block
        summary[task] = task_summary
    summary["n"] = len(records)
    summary["parse_failures"] = sum(not r["parsed"] for r in records)
    return summary


def run_emobench(
    responder: Responder,
    items: Sequence[EmoItem],
    *,
    batch_size: int = 8,
    max_tokens: int = 48,
    temperature: float = 0.0,
    advance: Callable[[int], None] | None = None,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Ask every item (in batches), score the replies; returns (per-item records, summary)."""
    if not items:
        raise ValueError("no EmoBench items to run (check the language/category filters)")
    replies = ask_in_batches(responder, [build_prompt(i) for i in items], batch_size=batch_size,
                             max_tokens=max_tokens, temperature=temperature, advance=advance)
    records = [score_reply(item, reply) for item, reply in zip(items, replies)]
    return records, summarise(records)


def summary_table(summary: dict[str, Any]) -> Any:
    """A rich table: accuracy per task, language and category, with parse failures."""
    from rich.table import Table

    table = Table(title="EmoBench accuracy (%)")
    for column in ("task", "lang", "category", "accuracy", "n", "parse failures"):
        table.add_column(column, justify="right" if column in ("accuracy", "n", "parse failures") else "left")
    for task in TASKS:
        for language, block in summary.get(task, {}).items():
            for category, accuracy in block["accuracy"].items():
                overall = category == "Overall"
                table.add_row(
                    task, language, f"[bold]{category}[/]" if overall else category, f"{accuracy:.1f}",
                    str(block["n"]) if overall else "", str(block["parse_failures"]) if overall else "",
                )
    return table
