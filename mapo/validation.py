"""Reading user-written files: text, JSON lines and YAML with errors that name the file (and
line), and pydantic errors as 'field a.b: reason' lines. Shared by scenario cards, persona
files, configs, benchmark data and LLM JSON replies."""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

ModelT = TypeVar("ModelT", bound=BaseModel)


def describe_validation_error(error: ValidationError) -> str:
    """One 'field a.b: reason' per problem, joined by '; '."""
    parts = []
    for item in error.errors():
        msg = item["msg"].removeprefix("Value error, ")
        if item["loc"]:
            parts.append(f"field {'.'.join(str(p) for p in item['loc'])}: {msg}")
        else:  # a whole-object rule; its message starts with the field it is about
            parts.append(f"field {msg}")
    return "; ".join(parts)


def text_of(path: Path) -> str:
    """A UTF-8 text file, decompressed when its name ends in .gz (exports keep transcripts so)."""
    if path.suffix == ".gz":
        with gzip.open(path, "rt", encoding="utf-8") as handle:
            return handle.read()
    return path.read_text(encoding="utf-8")


def compressed_or_plain(folder: Path, name: str) -> Path:
    """`folder/name`, or `folder/name.gz` when only that is there (an export compresses transcripts)."""
    plain = folder / name
    packed = folder / f"{name}.gz"
    return packed if not plain.exists() and packed.exists() else plain


def read_text(path: Path, what: str, error: type[Exception]) -> str:
    """A UTF-8 text file (or its .gz); an unreadable file or another encoding becomes `error` naming the file."""
    try:
        return text_of(path)
    except EOFError:
        raise error(f"{path}: cannot read {what}: the compressed file is cut short") from None
    except OSError as exc:
        raise error(f"{path}: cannot read {what}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise error(f"{path}: {what} is not UTF-8 text ({exc.reason})") from None


def json_lines(path: Path, what: str, error: type[Exception]) -> Iterator[tuple[int, Any]]:
    """(line number, parsed value) of every non-blank line of a JSONL file; a line that is not
    JSON becomes `error` naming the file, the line and the column."""
    for number, line in enumerate(read_text(path, what, error).splitlines(), start=1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as exc:
            raise error(f"{path}:{number}: invalid JSON at column {exc.colno}: {exc.msg}") from None
        yield number, value


def intact_records(path: Path, what: str, error: type[Exception] = ValueError) -> list[dict[str, Any]]:
    """The JSON objects of a .jsonl (or .jsonl.gz) log we append to, skipping any line that is not
    one (a run killed mid-write leaves its last line cut short); an unreadable file is `error`."""
    records = []
    for line in read_text(path, what, error).splitlines():
        try:
            value = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(value, dict):
            records.append(value)
    return records


def read_records(path: Path, what: str, error: type[Exception] = ValueError) -> list[dict[str, Any]]:
    """The JSON objects of a .jsonl file, one a line; anything else is `error` naming the file and line."""
    records = []
    for number, value in json_lines(path, what, error):
        if not isinstance(value, dict):
            raise error(f"{path}:{number}: expected a JSON object, got {type(value).__name__}")
        records.append(value)
    return records


def read_yaml(path: Path, what: str, error: type[Exception]) -> Any:
    """Parse a YAML file; any failure becomes `error` naming the file (and line, if known)."""
    text = read_text(path, what, error)
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise error(f"{path}: invalid YAML{where}: {getattr(exc, 'problem', None) or exc}") from None
    except ValueError as exc:  # a scalar YAML cannot construct, e.g. the date 2020-13-45
        raise error(f"{path}: invalid YAML value: {exc}") from None


def read_yaml_model(path: Path, model: type[ModelT], what: str, error: type[Exception]) -> ModelT:
    """A YAML mapping validated by the pydantic `model`; any failure becomes `error` naming the
    file, the field and the reason."""
    raw = read_yaml(path, what, error)
    if not isinstance(raw, dict):
        raise error(f"{path}: a {what} must be a YAML mapping, got {type(raw).__name__}")
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        raise error(f"{path}: {describe_validation_error(exc)}") from None
