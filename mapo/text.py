"""Small text helpers shared by the offline roles and the reward-hacking monitor: sentences, words, crude stems."""

from __future__ import annotations

import re

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n+|(?<=\.\.\.)\s*(?=[A-Z])")
_WORD = re.compile(r"[a-z][a-z']*")
# where a reply's sentence ends for the `rollout.max_sentences` stop rule: a run of . ! ? (an
# ellipsis counts once), closing quotes or brackets, then a space or the end. The in-process
# sampler (mapo.policy) and the vLLM engine must stop at the same token.
_REPLY_SENTENCE_END = re.compile(r"[.!?]+[\"'\u201d\u2019)\]]*(?=\s|$)")

# Quoted words (theirs or someone's in their story): double quotes, or single quotes that open
# after a non-letter and close before one, so "you're" and "parents' evenings" stay text.
QUOTED = re.compile(
    r"[\"\u201c][^\"\u201d]{1,80}[\"\u201d]"
    r"|(?<![A-Za-z])['\u2018](?=\S)[^\n]{1,80}?(?<=\S)['\u2019](?![A-Za-z])"
)
STOPWORDS = frozenset(
    """
    a about above after again against all also always am an and any are aren't as at be because been before being
    below between both but by can can't cannot could couldn't did didn't do does doesn't doing don't down during each
    even ever every few for from further get gets getting got had hadn't has hasn't have haven't having he he'd he'll
    he's her here here's hers herself him himself his how how's i i'd i'll i'm i've if in into is isn't it it's its
    itself just let's like made make makes maybe me might more most much must mustn't my myself no nor not now of off
    on once one only or other ought our ours ourselves out over own really same shan't she she'd she'll she's should
    shouldn't so some still such than that that's the their theirs them themselves then there there's these they
    they'd they'll they're they've thing things this those though through to too under until up upon us very was
    wasn't we we'd we'll we're we've were weren't what what's when when's where where's whether which while who who's
    whom why why's will with won't would wouldn't yet you you'd you'll you're you've your yours yourself yourselves
    okay ok yes yeah oh well really quite lot lots way ways kind sort feel feels feeling felt sounds sound seems
    seem going know think want wants said say says tell told see seen come came take took give gave back keep kept
    anyone anything everyone everything someone something nobody nothing people person time times day days year years
    again right good bad hard tough sure part whole first last next new old long little big many enough
    """.split()
)


def count_sentences(text: str) -> int:
    """How many sentence ends a reply's text holds (the stop rule's count)."""
    return len(_REPLY_SENTENCE_END.findall(text))


def sentences(text: str) -> list[str]:
    """Split on sentence-final punctuation, ellipses before a capital, and line breaks."""
    parts = (p.strip() for p in _SENTENCE_END.split(text.strip()))
    return [p for p in parts if p]


def words(text: str) -> list[str]:
    """Lower-case word tokens (apostrophes kept, so "don't" is one word)."""
    return _WORD.findall(text.lower().replace("\u2019", "'"))


def stem(word: str) -> str:
    """A crude stem: plural and -ing/-ed/-ly endings dropped, then the first six letters
    (enough to match "promoted"/"promotion" or "weddings"/"wedding"; never displayed)."""
    word = word.lower().strip("'").removesuffix("'s")
    if word.endswith("ies") and len(word) > 4:
        word = word[:-3] + "y"
    elif word.endswith(("ses", "shes", "ches", "xes", "zes")) and len(word) > 4:
        word = word[:-2]
    elif word.endswith("s") and not word.endswith(("ss", "us", "is")) and len(word) > 3:
        word = word[:-1]
    for ending in ("ing", "ed", "ly"):
        if word.endswith(ending) and len(word) - len(ending) >= 3:
            word = word[: -len(ending)]
            if ending != "ly" and len(word) >= 4 and word[-1] == word[-2] and word[-1] not in "ls":
                word = word[:-1]  # running -> run, planned -> plan (but not called, missed)
            break
    return word[:6]


def content_stems(text: str) -> set[str]:
    """Stems of the words that carry content: no stopwords, at least three letters."""
    return {stem(w) for w in words(text) if len(w) >= 3 and w not in STOPWORDS}
