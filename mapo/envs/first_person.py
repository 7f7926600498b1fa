"""Third-person notes about a person as that person's own words.

The offline simulated users (the empathy environment's actor, the emotion environment's
user) speak from notes written about them: "She admits her review is in six weeks" is
said as "Honestly, my review is in six weeks". `pronoun_of` finds how the notes refer to
the person; `first_person` rewrites one note: a reporting verb becomes a lead-in, the
person's pronouns (and first name) become I / me / my, verbs after "I" agree, quoted
speech stays as written.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from mapo.text import sentences

_FORMS = {
    "he": ("he", "him", "his", "himself"),
    "she": ("she", "her", "hers", "herself"),
    "they": ("they", "them", "their", "theirs", "themselves"),
}


def pronoun_of(texts: Iterable[str]) -> str | None:
    """he / she / they: how the notes refer to the person. The pronoun that starts the most sentences;
    when none starts one, the one whose forms (him, his, ...) occur most; None if neither says."""
    texts = list(texts)
    starts = dict.fromkeys(_FORMS, 0)
    for text in texts:
        for sent in sentences(text):
            first = re.sub(r"^(?:finally|eventually|then|later),?\s+", "", sent.strip(), flags=re.IGNORECASE).split()[:1]
            if first and first[0].lower() in starts:
                starts[first[0].lower()] += 1
    best = max(starts, key=lambda k: starts[k])
    if starts[best]:
        return best
    words = re.findall(r"[a-z]+", " ".join(texts).lower())
    forms = {key: sum(words.count(w) for w in names) for key, names in _FORMS.items()}
    best = max(forms, key=lambda k: forms[k])
    return best if forms[best] else None


_REPORT = re.compile(
    r"^(?:(?:finally|eventually|then|later|at last|suddenly),?\s+)?(?P<who>he|she|they)\s+"
    r"(?:(?:finally|eventually|then|also|quietly|suddenly|only|even)\s+)?"
    r"(?P<verb>describes|recounts|talks about|walks through|lays out|lists|explains|tells of|tells|repeats|reads out"
    r"|gives|goes through|shares|shows|quotes|brings up|mentions|admits|confesses|says|insists|notes|adds|realises"
    r"|realizes|notices|wonders|asks|jokes|complains|fears|suspects|hopes|worries|reveals)"
    r"(?:\s+(?:quietly|softly|bitterly|slowly|almost in passing|half joking),?)?"
    r"(?:\s+(?P<link>that|how|why|what|whether|if|about|with))?\s+",
    re.IGNORECASE,
)
_CLAUSE_LEADS = {
    "admits": "Honestly, ", "confesses": "Honestly, ", "realises": "I'm realising ", "realizes": "I'm realising ",
    "notices": "I've noticed ", "wonders": "I keep wondering ", "asks": "I keep wondering ", "fears": "I'm afraid ",
    "suspects": "I suspect ", "hopes": "I hope ", "worries": "I worry ",
}
_NP_LEAD = "Let me tell you about "
_PRONOUNS = {
    "he": {"he": "I", "him": "me", "his": "my", "himself": "myself"},
    "she": {"she": "I", "hers": "mine", "herself": "myself"},
    "they": {"they": "I", "them": "me", "their": "my", "theirs": "mine", "themselves": "myself"},
}
_PREPOSITIONS = frozenset("with on in at of from to for by about into under over behind like onto upon".split())
_TAKES_OBJECT = frozenset(
    """make makes made let lets tell tells told ask asks asked give gives gave help helps helped call calls called see
    saw watch watched thank thanked leave left find found pay paid send sent show showed teach taught remind reminded
    bring brought keep kept get got take took hear heard meet met hug hugged drove drive drives""".split()
)
# Verbs the card notes use for the persona after "and" / "then" ("... and asks why"): put in the first person too.
_PERSONA_VERBS = frozenset(
    """asks says adds goes feels imagines changes flinches hopes trusts admits laughs jokes stops wonders describes
    explains insists calls tries looks keeps wants needs thinks knows sees leaves makes takes seems sits cries shrugs
    lists mentions notes realises realizes fears worries refuses avoids blames hides replays rehearses quotes reads
    tells has""".split()
)
_OBJECT_NEXT = frozenset(
    "to for with and or a an the that in on at as off up down out again back about from into of by when while "
    "because so but if than too anymore enough herself".split()
)
_NOT_VERBS = frozenset("always also sometimes perhaps was has is does thus less unless across this its his yes us".split())
_ADVERBS = frozenset(
    "never always still just also often sometimes finally really only even then now quietly secretly desperately".split()
)
# "He wants X but is afraid": after a conjunction, an auxiliary with no subject of its own (elided_subject)
_ELIDED = re.compile(r"\b(but|and|or)\s+(is|are|was|were|has|does|doesn't|isn't|aren't|wasn't|weren't|hasn't)\b")
_IRREGULAR = {
    "is": "am", "are": "am", "has": "have", "does": "do", "doesn't": "don't", "isn't": "am not", "aren't": "am not",
    "hasn't": "haven't", "was": "was", "were": "was", "weren't": "wasn't",
}


def _base_form(verb: str) -> str:
    low = verb.lower()
    if low in _IRREGULAR:
        return _IRREGULAR[low]
    if low in _NOT_VERBS or not low.endswith("s") or low.endswith("ss"):
        return verb
    if low.endswith("ies") and len(low) > 4:
        return verb[:-3] + "y"
    if low.endswith(("sses", "shes", "ches", "xes", "zes", "oes")):
        return verb[:-2]
    return verb[:-1]


def _convert_unquoted(text: str, who: str, subject: bool) -> str:
    tokens = re.findall(r"[A-Za-z']+|[^A-Za-z']+", text)
    out: list[str] = []
    table = _PRONOUNS[who]
    for i, tok in enumerate(tokens):
        low = tok.lower()
        if who == "she" and low == "her":
            nxt = next((t.lower() for t in tokens[i + 1 :] if t.strip()), "")
            prev = next((t.lower() for t in reversed(out) if t.strip()), "")
            if not nxt[:1].isalpha() or nxt in _OBJECT_NEXT:
                tok = "me"
            elif prev in _PREPOSITIONS:
                tok = "my"
            else:
                tok = "me" if prev in _TAKES_OBJECT else "my"
        elif low in table:
            tok = table[low]
        elif low in _PERSONA_VERBS:
            prev = next((t.strip().lower() for t in reversed(out) if t.strip()), "")
            if prev in ("and", "then", "but", "or", ","):
                tok = _base_form(tok)
        out.append(tok)
    # verb agreement after "I" (optionally past one adverb): "I admits" -> "I admit"
    words_idx = [i for i, t in enumerate(out) if t[:1].isalpha()]
    for n, i in enumerate(words_idx):
        if out[i] != "I" or n + 1 >= len(words_idx):
            continue
        j = words_idx[n + 1]
        if out[j].lower() in _ADVERBS and n + 2 < len(words_idx):
            j = words_idx[n + 2]
        out[j] = _base_form(out[j])
    converted = "".join(out)
    return _ELIDED.sub(lambda m: f"{m.group(1)} {_base_form(m.group(2))}", converted) if subject else converted


def first_person(note: str, who: str | None, name: str = "", elided_subject: bool = False) -> str:
    """A card's third-person note ("She admits her review is in six weeks") as the persona's
    own words ("Honestly, my review is in six weeks"). Quoted speech is left as written;
    `name` (the persona's first name) becomes "I" / "my" too. With `elided_subject`, a note
    that starts with the person also puts a joined verb in the first person ("He wants to go
    but is afraid" -> "I want to go but am afraid"); it misreads "He and Jun are sure"."""
    text = note.strip()
    if who is None:
        return text
    subject = elided_subject and re.match(rf"{who}\b", text, flags=re.IGNORECASE) is not None
    if name:
        text = re.sub(rf"\b{re.escape(name)}'s\b", "my", text)
        text = re.sub(rf"\b{re.escape(name)}\b", "I", text)
    m = _REPORT.match(text)
    if m and m.group("who").lower() == who:
        verb, link = m.group("verb").lower(), (m.group("link") or "").lower()
        rest = text[m.end() :]
        if verb in _CLAUSE_LEADS:
            lead = _CLAUSE_LEADS[verb] + (link + " " if link in ("how", "why", "what", "whether", "if") else "")
        elif link == "that" or verb in ("says", "insists", "notes", "adds", "jokes", "complains", "mentions", "reveals"):
            lead = "" if link in ("that", "") else link + " "
        else:
            lead = _NP_LEAD + (link + " " if link in ("how", "why", "what", "whether") else "")
        text = lead + rest
    parts = re.split(r"(\"[^\"]*\"|\u201c[^\u201d]*\u201d)", text)
    text = "".join(p if p.startswith(("\"", "\u201c")) else _convert_unquoted(p, who, subject) for p in parts)
    text = re.sub(r"\bI am not\b", "I'm not", text)
    return re.sub(r"(^|[.!?]\s+)(my|me|mine|myself|[a-z])\b", lambda m: m.group(1) + m.group(2).capitalize(), text)
