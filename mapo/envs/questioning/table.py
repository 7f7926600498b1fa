"""One world of the questioning game: its candidates, its attributes and what is true of each.

A table is what a case set (cases.py) loads and what the parser (parse.py), the game (game.py)
and the reference players read; it has no dependency of its own, so none of them imports
another to name it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Attribute:
    key: str
    question: str
    phrases: tuple[tuple[str, ...], ...]  # each phrase as its words (mapo.envs.questioning.parse.words)
    label: str = ""  # the attribute's phrase that its question says: how the table in view names it


@dataclass(frozen=True)
class Table:
    """One world of the game: candidates, attributes, and the truth `facts[candidate][attribute]`."""

    name: str
    subject: str
    intro: str
    split: str
    attributes: tuple[Attribute, ...]
    candidates: tuple[str, ...]
    facts: dict[str, frozenset[str]]  # candidate -> the attribute keys true of it
    candidate_split: dict[str, str]
    fixes: dict[str, str]

    def attribute(self, key: str) -> Attribute:
        return next(a for a in self.attributes if a.key == key)

    def answer(self, candidate: str, attribute: str) -> bool:
        return attribute in self.facts[candidate]

    def true_of(self, candidate: str) -> list[str]:
        """The labels of the attributes true of `candidate`, in the table's order of attributes."""
        return [a.label or a.key for a in self.attributes if a.key in self.facts[candidate]]

    def secrets(self, split: str) -> list[str]:
        """The candidates that are secrets of `split`: a held-out table's are all test."""
        if split == "all":
            return list(self.candidates)
        return [c for c in self.candidates if (self.split if self.split == "test" else self.candidate_split[c]) == split]
