"""Cue phrases: how a card says what a sentence must contain to count.

A cue is one or more parts joined by "+"; a sentence matches when it holds every part.
A part is one or more words said in that order (a word: letters and digits, with ' - . or :
inside, so "12.99" and "14:05" are words); each word matches any word it begins
(so "refund" matches "refunded", "charge" matches "charges"). Examples:

    "refund + duplicate"      refund ... duplicate, in either order
    "business day"            "business days", "business day", not "day of business"

Matching is case-insensitive and works on one sentence at a time, so a cue cannot be
met by words scattered across a reply.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_WORD = re.compile(r"^[a-z0-9][a-z0-9'.:-]*$")


@dataclass(frozen=True)
class Cue:
    text: str
    patterns: tuple[re.Pattern[str], ...]

    def matches(self, sentence: str) -> bool:
        return all(p.search(sentence) for p in self.patterns)


def parse_cue(text: str) -> Cue:
    """Compile a cue; ValueError naming the bad part when it is not words joined by '+'."""
    parts = [part.strip().lower() for part in text.split("+")]
    patterns = []
    for part in parts:
        words = part.split()
        if not words or not all(_WORD.match(w) for w in words):
            raise ValueError(f"cue {text!r}: part {part!r} must be one or more words (letters and digits, with ' - . or : inside)")
        # each word starts a word of the sentence; the words follow each other
        body = r"\W+".join(re.escape(w) + r"[\w'-]*" for w in words)
        patterns.append(re.compile(r"(?<![\w'-])" + body, re.IGNORECASE))
    return Cue(text, tuple(patterns))


def compile_cues(texts: list[str]) -> tuple[Cue, ...]:
    return tuple(parse_cue(t) for t in texts)


def first_match(cues: tuple[Cue, ...], sentences: list[str]) -> tuple[Cue, str] | None:
    """The first (cue, sentence) where a cue matches a sentence, or None."""
    for sentence in sentences:
        for cue in cues:
            if cue.matches(sentence):
                return cue, sentence
    return None
