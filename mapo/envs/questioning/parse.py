"""The exact mapping from a reply to a move of the questioning game.

A reply is read as its words: lower case, any apostrophe (' ’ ʼ ` ´) read as ', "n't" spelled
"not", runs of letters and digits (so "non-living" is the words "non living").
A phrase (or a candidate name) occurs in a reply when its words occur there consecutively.

- A reply starting with `Guess:` is a guess. The rest (an optional "a"/"an"/"the" first,
  end punctuation ignored) must be exactly one candidate's name: else it is invalid
  ("Guess: cup or fork" guesses nothing).
- Anything else is a question. It is valid when all of these hold, and then asks the one
  attribute it names:
  1. it holds exactly one "?" and ends with it, closing quotes or brackets aside (several
     questions, and a reply cut mid-question, are invalid);
  2. no negation: a word of NEGATIONS (not, no, never, nor, neither, none, nothing, without,
     cannot, a contraction written without its apostrophe such as "isnt", the prefixes "non-"
     and "un-" written with a hyphen, lack/lacks/lacking, opposite, except) or a phrase of
     NEGATION_PHRASES (anything but, free of, other than, instead of): the answer to "Is it not
     alive?" would be ambiguous. A prefix written into the word ("unliving") is no phrase of
     any attribute, so such a question names none and is refused as off the list;
  3. no candidate's name ("Is it a cup or a fork?" is neither a question nor a guess);
  4. it names exactly one attribute, by any of that attribute's phrases ("Is it red and
     round?" names two; "What is it?" names none).

Everything is decided by the words; nothing is guessed about meaning, so a rephrasing
that keeps an attribute's phrase asks that attribute ("Is it a living thing?" asks
`alive` when "living" is one of its phrases).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from mapo.envs.questioning.table import Table

_CONTRACTIONS = ("isnt", "arent", "wasnt", "werent", "doesnt", "dont", "didnt", "cant", "couldnt", "wont", "wouldnt",
                 "shouldnt", "hasnt", "havent", "hadnt", "aint", "mustnt", "neednt", "mightnt", "shant")
NEGATIONS = frozenset({"not", "no", "never", "nor", "neither", "none", "nothing", "without", "cannot", "non", "un",
                       "lack", "lacks", "lacked", "lacking", "opposite", "except", *_CONTRACTIONS})
NEGATION_PHRASES = (("anything", "but"), ("free", "of"), ("other", "than"), ("instead", "of"))
_APOSTROPHES = str.maketrans({c: "'" for c in "\u2018\u2019\u02bc`\u00b4\u2032"})
ARTICLES = frozenset({"a", "an", "the"})
_GUESS = re.compile(r"^guess\s*:(.*)$", re.IGNORECASE | re.DOTALL)

# Why a reply is invalid, as the user says it (one short line; the turn is spent).
INVALID_REASONS = {
    "empty": "Ask one of the listed questions, or reply Guess: <name>.",
    "not_one_question": "Ask one question, ending with a question mark.",
    "negation": "Ask it without 'not'.",
    "names_candidate": "To guess, reply Guess: <name>.",
    "several_attributes": "Ask about one thing at a time.",
    "off_list": "Ask one of the listed questions, or reply Guess: <name>.",
    "unknown_guess": "Guess one name from the list: Guess: <name>.",
}


@dataclass(frozen=True)
class Move:
    """What a reply does: ask `attribute`, guess `candidate`, or nothing (`reason` says why)."""

    kind: Literal["question", "guess", "invalid"]
    attribute: str | None = None
    candidate: str | None = None
    reason: str | None = None


def words(text: str) -> tuple[str, ...]:
    text = text.lower().translate(_APOSTROPHES).replace("n't", " not")
    return tuple(re.findall(r"[a-z0-9]+", text))


def contains(hay: tuple[str, ...], needle: tuple[str, ...]) -> bool:
    """Whether `needle` occurs in `hay` as consecutive words."""
    n = len(needle)
    return n > 0 and any(hay[i : i + n] == needle for i in range(len(hay) - n + 1))


def parse_reply(reply: str, table: Table) -> Move:
    """The move `reply` makes in `table` (see the module docstring)."""
    text = reply.strip()
    if not text:
        return Move("invalid", reason="empty")
    guess = _GUESS.match(text)
    if guess is not None:
        return _parse_guess(guess.group(1), table)
    return parse_question(text, table)


def _parse_guess(rest: str, table: Table) -> Move:
    said = words(rest)
    if said[:1] and said[0] in ARTICLES:
        said = said[1:]
    if re.search(r"[?,;:]|[.!](?=.)", rest.strip().rstrip(".!?")):  # more than one name or sentence
        return Move("invalid", reason="unknown_guess")
    for name in table.candidates:
        if words(name) == said:
            return Move("guess", candidate=name)
    return Move("invalid", reason="unknown_guess")


def parse_question(text: str, table: Table) -> Move:
    text = text.strip().rstrip("\"'\u201d\u2019)").rstrip()  # a closing quote or bracket after the "?"
    if text.count("?") != 1 or not text.endswith("?"):
        return Move("invalid", reason="not_one_question" if text else "empty")
    said = words(text)
    if NEGATIONS.intersection(said) or any(contains(said, phrase) for phrase in NEGATION_PHRASES):
        return Move("invalid", reason="negation")
    if any(contains(said, words(name)) for name in table.candidates):
        return Move("invalid", reason="names_candidate")
    named = [a.key for a in table.attributes if any(contains(said, p) for p in a.phrases)]
    if not named:
        return Move("invalid", reason="off_list")
    if len(named) > 1:
        return Move("invalid", reason="several_attributes")
    return Move("question", attribute=named[0])
