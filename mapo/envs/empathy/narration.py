"""Text that narrates instead of speaking, in either role of the empathy dialogue.

- `acted(text)`: actions written out instead of said ("*nods slowly*", "(takes your hand)",
  "[pauses]"): a listener performing empathy rather than giving it. The offline judge pays no
  progress for such a reply; the simulated person never writes one either.
- `stage_direction(text)`: the simulated person speaking its own instructions, plans or the
  narrator's voice of its card ("Let me tell you about the valuation ..., and ask what I am
  missing", "I describe ...", "flatly", "half joking"): what a person would never say aloud.

Each returns its evidence (the words that show it) or None. Pure functions of text.
"""

from __future__ import annotations

import re

from mapo.text import sentences

# Verbs of acted-out body language and care; an aside in brackets or asterisks with one of them is an action.
_ACTION_VERBS = (
    r"nod|sigh|smile|laugh|chuckle|pause|take|look|shrug|lean|hold|reach|hug|squeeze|sit|wait|listen|offer|place|put"
    r"|touch|pat|rest|tilt|soften|breathe|gaze|grin|frown|wipe|hand|extend|open|close|stay|embrace|settle"
)
_MARKED = re.compile(r"\*{1,2}([^*\n]{2,80})\*{1,2}|_([^_\n]{2,80})_")  # *nods*: any form of the verb
_BRACKETED = re.compile(r"\(([^()\n]{2,80})\)|\[([^\[\]\n]{2,80})\]")  # (takes your hand), not (take your time)
_ACTION = re.compile(rf"\b(?:{_ACTION_VERBS})(?:s|es|ed|ing)?\b", re.IGNORECASE)
_NARRATED_ACTION = re.compile(rf"\b(?:{_ACTION_VERBS})(?:s|es|ing)\b", re.IGNORECASE)

# What only a card's narrator says: the report turned into a lead-in, a reporting verb in the
# bare form after "and"/"then" (an instruction to oneself), a participle tail, manner words.
_STAGE_PATTERNS = (
    re.compile(r"\blet me tell you about\b", re.IGNORECASE),
    re.compile(  # (someone else's words in quotes are a story: "used to ... and say 'people judge ...'")
        r"\b(?:and|then)\s+(?:say|ask|add|admit|insist|joke|laugh|confess|complain|go quiet)\b(?!\s*[\"\u201c])",
        re.IGNORECASE,
    ),
    re.compile(
        r",\s*(?:admitting|insisting|adding|asking|saying|joking|confessing)\s+(?:that|I|he|she|they|my|how|what|why|whether)\b",
        re.IGNORECASE,
    ),
    re.compile(
        r"\b(?:flatly|haltingly|half joking|with (?:gentle |dry |dark )?humou?r|in a dry list|word for word"
        r"|almost in passing|goes quiet|wonders? aloud|changes? the subject|lights? up describing)\b",
        re.IGNORECASE,
    ),
)
# A sentence that opens with the speaker narrating their own speech act ("I describe the ...",
# "I say it is fine") rather than performing it (present tense: "I laughed along" is a story).
_NARRATED_ACT = re.compile(
    r"^\W*I\s+(?:describe|explain|list|recount|repeat|read out|lay out|walk through|go through|mention|say|ask"
    r"|tell the story|connect|complain|joke|laugh)\b",
    re.IGNORECASE,
)


def acted(text: str) -> str | None:
    """An action written out in asterisks, underscores or brackets ("*nods slowly*")."""
    for pattern, verb in ((_MARKED, _ACTION), (_BRACKETED, _NARRATED_ACTION)):
        for m in pattern.finditer(text):
            inside = next(g for g in m.groups() if g)
            if verb.search(inside):
                return f"acts instead of speaking: {m.group(0)[:60]}"
    return None


def stage_direction(text: str) -> str | None:
    """The person's own instructions, plans or the card narrator's voice, said aloud."""
    found = acted(text)
    if found:
        return found
    for pattern in _STAGE_PATTERNS:
        m = pattern.search(text)
        if m:
            return f"narrates: '{m.group(0).strip(' ,')}'"
    for s in sentences(text):
        m = _NARRATED_ACT.match(s)
        if m:
            return f"narrates its own words: '{m.group(0).strip()}'"
    return None
