"""A card's story note as the person says it: what they say, never how the note reports it.

Card notes are written from outside ("She explains the valuation, the mortgage, and that a
buyout is affordable, and asks what she is missing"). `first_person` swaps the pronouns, but
the note's reporting verbs then become the person's own stage directions ("Let me tell you
about ..., and ask what I am missing"). `speak` rewrites the note, still in the third person,
one sentence at a time, before `first_person`:

- a clause joined by ", and <verb>", "then <verb>" or ", <verb>ing" with a verb of saying
  becomes its own sentence with the person as subject ("..., and asks why" -> "She asks why");
- the narrator's manner words go ("flatly", "with dry humour", "half joking", "word for word"),
  and so do pure actions ("then goes quiet") and asides about what is left unsaid ("without
  saying what he wants");
- saying verbs with a clause keep only the clause ("says that X", "laughs that X" -> X; "admits"
  and "asks why" keep `first_person`'s lead-ins, "Honestly," and "I keep wondering why");
- a verb that reports a noun phrase ("describes the renovation") becomes one of the person's
  own lead-ins, drawn per dialogue ("I keep going over the renovation"); with a clause of
  theirs ("explains he started organising") the clause alone is said;
- "calls it X" becomes "It is X", "asks <not a question>" "keeps asking".

`mapo.envs.empathy.narration.stage_direction` is the check: a test speaks every note of every
bundled card this way and finds none.
"""

from __future__ import annotations

import itertools
import random
import re
from collections.abc import Iterator

from mapo.envs.first_person import first_person
from mapo.text import sentences

# Verbs of saying that may open a clause of their own after "and", "then" or a comma.
_SAYING = (
    r"says|asks|adds|admits|confesses|insists|jokes|laughs|wonders|calls it|notes|mentions|goes quiet|recalls|quotes"
    r"|changes the subject|shows"
)
_PARTICIPLE = {"admitting": "admits", "insisting": "insists", "adding": "adds", "asking": "asks", "saying": "says",
               "joking": "jokes", "confessing": "confesses"}
_JOINED = re.compile(rf"(?:,\s*(?:and\s+)?(?:then\s+)?|\s+and\s+(?:then\s+)?|\s+then\s+|;\s*)(?=(?:{_SAYING})\b)")
_JOINED_PARTICIPLE = re.compile(  # (a comma may have gone with a manner phrase: "in a dry list, insisting")
    rf"(?:,\s*|\s+)(?=(?:{'|'.join(_PARTICIPLE)})\s+(?:that|he|she|they|his|her|their|how|what|why|whether)\b)"
)
_MANNER = re.compile(
    r"(?:,\s*)?\b(?:flatly|haltingly|aloud|half joking|with (?:gentle |dry |dark )?humou?r|in a dry list"
    r"|word for word|almost in passing)\b(?:\s*,)?",
    re.IGNORECASE,
)
_UNSAID = re.compile(r",?\s*without saying\b[^.;:]*", re.IGNORECASE)
_ACTION_ONLY = re.compile(r"^(?:(?:goes|falls) (?:quiet|silent)|changes the subject)\b", re.IGNORECASE)
# Verbs that report what the note's sentence is about (a noun phrase), as `first_person` reads them.
_REPORTING = (
    r"describes|explains|lists|talks about|tells the story of|tells of|tells about|tells|recounts|repeats|lights up describing"
    r"|reads out|lays out|walks through|goes through|gives|mentions|shows|complains about|complains|jokes about"
    r"|brings up|quotes"
)
_REPORT = re.compile(rf"^(?P<verb>{_REPORTING})\s+(?P<rest>.+)$", re.IGNORECASE | re.DOTALL)
_CLAUSE_THAT = re.compile(
    r"^(?P<verb>says|adds|insists|notes|jokes|laughs|mentions|complains|explains)\s+(?:(?:quietly|softly|bitterly)\s+)?"
    r"(?P<that>that\s+(?!is\b|was\b))?(?P<rest>.+)$",  # ("says that is why ...": a demonstrative)
    re.IGNORECASE | re.DOTALL,
)
_CALLS_IT = re.compile(r"^calls it\s+(?P<rest>.+)$", re.IGNORECASE | re.DOTALL)
_ASKS_PLAIN = re.compile(r"^asks\s+(?!how\b|what\b|why\b|whether\b|if\b|who\b|when\b|where\b)(?P<rest>.+)$", re.IGNORECASE)
_CONNECTS = re.compile(r"^connects (?:it|this|that) to\s+(?P<rest>.+)$", re.IGNORECASE | re.DOTALL)
# The person's own ways into a part of the story (ours), one drawn per note.
REVEAL_LEADS = ("keeps going over", "keeps thinking about", "cannot stop thinking about", "keeps coming back to")
_PRONOUN_SUBJECTS = ("he", "she", "they", "it", "i")


def _subject(sentence: str, who: str, name: str) -> tuple[str, str] | None:
    """(subject, the rest) when `sentence` opens with the person (their pronoun or first name)."""
    for subject in (who, name):
        if subject and re.match(rf"{re.escape(subject)}\b", sentence, flags=re.IGNORECASE):
            return sentence[: len(subject)], sentence[len(subject) :].lstrip()
    return None


def _clauses(predicate: str) -> list[str]:
    """A predicate cut where a new verb of saying joins it ("describes X, and says Y")."""
    predicate = _JOINED_PARTICIPLE.sub(lambda m: ". ", predicate)
    parts = re.split(r"\.\s+(?=(?:" + "|".join(_PARTICIPLE) + r")\b)", predicate)
    out: list[str] = []
    for part in parts:
        word = part.split(" ", 1)[0].lower()
        if word in _PARTICIPLE:
            part = _PARTICIPLE[word] + part[len(word) :]
        out += [p.strip(" ,;") for p in _JOINED.split(part) if p.strip(" ,;")]
    return out


def _end(text: str) -> str:
    return text if text.endswith((".", "!", "?")) else text + "."


def _is_clause(verb: str, rest: str) -> bool:
    """Whether a saying verb is followed by what was said ("says it is fine", "explains he ...")
    rather than by what it is about ("explains the valuation", "jokes about ...")."""
    first = rest.split(" ", 1)[0].lower()
    if first in _PRONOUN_SUBJECTS:
        return True
    return verb.lower() not in ("explains", "mentions", "complains") and first != "about"


def _said(predicate: str, subject: str, who: str, leads: Iterator[str]) -> str | None:
    """One clause of the person's, as a third-person sentence `first_person` turns into speech."""
    predicate = predicate.rstrip(" .")
    if _ACTION_ONLY.match(predicate):
        return None
    m = _CALLS_IT.match(predicate)
    if m:
        return _end(f"It is {m.group('rest')}")
    m = _CONNECTS.match(predicate)
    if m:
        return _end(f"It goes back to {m.group('rest')}")
    m = _ASKS_PLAIN.match(predicate)
    if m:
        return _end(f"{subject} keeps asking {m.group('rest')}")
    m = _CLAUSE_THAT.match(predicate)
    if m and (m.group("that") or _is_clause(m.group("verb"), m.group("rest"))):
        rest = m.group("rest")
        return _end(rest[0].upper() + rest[1:])
    m = _REPORT.match(predicate)
    if m:
        rest = m.group("rest")
        if rest.split(" ", 1)[0].lower() in (who, "that"):  # "explains he started ...": his own clause
            rest = rest.split(" ", 1)[1] if rest.lower().startswith("that ") else rest
            return _end(rest[0].upper() + rest[1:])
        return _end(f"{subject} {next(leads)} {rest}")
    return _end(f"{subject} {predicate}")


def speak(note: str, who: str | None, name: str, rng: random.Random) -> str:
    """The note in the person's own voice (see the module docstring); `rng` draws the lead-ins."""
    text = " ".join(note.split())
    if who is None:
        return text
    text = _UNSAID.sub("", _MANNER.sub("", text))
    text = re.sub(r"\b([ap])\.m\.(?=\s+[a-z])", r"\1m", text)  # "5 a.m. start" is one sentence
    text = re.sub(r"\b([ap])\.m\.$", r"\1m.", text)
    text = re.sub(r"\s+,", ",", re.sub(r"\s{2,}", " ", text))
    spoken: list[str] = []
    leads = itertools.cycle(rng.sample(REVEAL_LEADS, len(REVEAL_LEADS)))  # a different one each time in a note
    for sentence in sentences(text):
        opened = _subject(sentence, who, name)
        if opened is None:
            spoken.append(first_person(sentence, who, name))
            continue
        subject, predicate = opened
        for clause in _clauses(predicate):
            said = _said(clause, subject, who, leads)
            if said:
                spoken.append(first_person(said, who, name))
    return " ".join(s[0].upper() + s[1:] for s in spoken if s)
