"""Dialogues to measure after the fact, from what the project keeps of them.

- A blind set's folder (`mapo compare --blind`'s output: key.json beside rater/pairs.jsonl):
  each pair's two sides, each under the run label the key gives it. These are the dialogues as
  the rater read them, both sides cut to the same number of turns.
- A transcripts file (`mapo eval`'s or a training run's transcripts.jsonl, or its .gz), or a
  folder holding one: every dialogue in full, under the folder's name.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mapo.lab.blind.pairs import SIDES
from mapo.lab.blind.score import check_pairs, read_key
from mapo.validation import compressed_or_plain, read_records


@dataclass(frozen=True)
class Dialogue:
    """One dialogue: its card, its sample, and per turn (the person's message, the listener's reply)."""

    scenario_id: str
    sample_index: int
    turns: tuple[tuple[str, str], ...]
    pair: str | None = None  # the blind pair it was shown in

    def history_before(self, turn: int) -> list[dict[str, str]]:
        """The chat history the listener answered at `turn` (0-based): every message before its reply."""
        history = []
        for user, reply in self.turns[:turn]:
            history += [{"role": "user", "content": user}, {"role": "assistant", "content": reply}]
        return history + [{"role": "user", "content": self.turns[turn][0]}]


def is_blind_set(folder: Path) -> bool:
    return (folder / "key.json").is_file() and (folder / "rater" / "pairs.jsonl").is_file()


def _pair_turns(messages: Any, where: str) -> tuple[tuple[str, str], ...]:
    """A pair side's messages (person, listener, person, ...) as (person, listener) turns."""
    if not isinstance(messages, list) or not all(isinstance(m, dict) and isinstance(m.get("text"), str) for m in messages):
        raise ValueError(f"{where}: expected a list of messages with a text field")
    speakers = [m.get("speaker") for m in messages]
    if len(messages) % 2 or speakers != ["person", "listener"] * (len(messages) // 2):
        raise ValueError(f"{where}: messages must alternate person, listener (starting with the person)")
    return tuple((messages[i]["text"], messages[i + 1]["text"]) for i in range(0, len(messages), 2))


def blind_pairs(folder: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(key, pairs) of a blind set, once the pairs file is the one its key was written for."""
    key_path, pairs_path = folder / "key.json", folder / "rater" / "pairs.jsonl"
    key = read_key(key_path)
    return key, check_pairs(pairs_path, key, key_path)


def pair_dialogue(pair: dict[str, Any], side: str, where: str) -> Dialogue:
    return Dialogue(str(pair["scenario_id"]), int(pair["sample_index"]),
                    _pair_turns(pair.get(side), f"{where}: pair {pair.get('pair')} side {side}"), str(pair["pair"]))


def blind_sides(folder: Path) -> dict[str, list[Dialogue]]:
    """A blind set's dialogues by run label (the key says which side of each pair is which run)."""
    key, pairs = blind_pairs(folder)
    sides: dict[str, list[Dialogue]] = {run["label"]: [] for run in key["runs"]}
    for pair in pairs:
        for side in SIDES:
            label = key["pairs"][pair["pair"]][side]
            sides[label].append(pair_dialogue(pair, side, str(folder / "rater" / "pairs.jsonl")))
    return sides


def transcript_dialogues(path: Path) -> list[Dialogue]:
    """Every dialogue of a transcripts.jsonl (or .gz), or of the one in folder `path`."""
    file = path if path.is_file() else compressed_or_plain(path, "transcripts.jsonl")
    if not file.is_file():
        raise FileNotFoundError(f"{path}: neither a blind set (key.json, rater/pairs.jsonl) nor transcripts.jsonl(.gz)")
    dialogues = []
    for number, record in enumerate(read_records(file, "transcripts"), 1):
        try:
            turns = tuple((str(t["user"]), str(t["response"])) for t in record["turns"])
            dialogues.append(Dialogue(str(record["scenario_id"]), int(record.get("sample_index", 0)), turns))
        except (KeyError, TypeError, ValueError) as err:
            raise ValueError(f"{file}: record {number}: needs scenario_id and turns with user and response ({err})") from None
    return dialogues


def dialogue_sets(path: Path) -> dict[str, list[Dialogue]]:
    """A blind set's sides by run label, or a transcripts file's dialogues under its folder's name."""
    if path.is_dir() and is_blind_set(path):
        return blind_sides(path)
    name = path.parent.name if path.is_file() else path.name
    return {name: transcript_dialogues(path)}
