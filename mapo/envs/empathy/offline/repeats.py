"""Moves the listener already made in this dialogue: saying them again earns nothing.

A policy that learns which move pays (a question, a validation) makes it every turn; a person
hears the same routine and feels less heard each time. So each sentence of a reply is compared,
by meaning (all-MiniLM, the judge's encoder), with the sentences of the listener's earlier
replies in the dialogue:

- a question is *re-asked* when its cosine to an earlier question is at least QUESTION_SIM,
  however it is phrased ("What might you tell her?" after "What would you say to her?": 0.77),
  or at least FRAMED_QUESTION_SIM in the same frame ("What would you say to the school?": 0.63);
  distinct questions of one good dialogue reach 0.69 at most, so lower would take new questions;
- a statement is *said again* when its cosine to an earlier statement is at least
  STATEMENT_SIM: the same reflection, validation or reassurance in new words (distinct
  statements of one good dialogue reach 0.52);
- the opening statement is a *formula* when at least OPENING_RUN earlier replies opened with
  the same OPENING_WORDS words ("It sounds like ...", turn after turn).

A statement below CLEAR_STATEMENT_SIM must also bring at most NEW_STEMS content words that none
of the earlier replies used: one that builds on an earlier reflection with new matter ("She
stayed home and stayed away; you could go to Carla and ask ...", cosine 0.71 to an earlier line
about Carla, six new words) says something new. (A question reworded brings new words by
definition, so questions have no such test.) Sentences under MIN_SENTENCE_WORDS words are left alone ("I see."). The judge scores what
is left of the reply (`fresh_text`): progress comes only from what is new; a reply with nothing
new earns nothing and, like a reply that asks a question again whatever is new beside it, costs
A_neg -1 (the same routine again).

The reward-hacking monitor's `mapo.degeneracy.reasked_question` counts only questions that open
with the same four words; `tests/envs/empathy/test_repetition.py` measures what it misses.
"""

from __future__ import annotations

from dataclasses import dataclass

from mapo.envs import embeddings
from mapo.text import content_stems, sentences, words

QUESTION_SIM = 0.7  # cosine of a question to an earlier one that makes it the same question ...
FRAMED_QUESTION_SIM = 0.6  # ... or this, asked in the same frame (the same first FRAME_WORDS words)
FRAME_WORDS = 2
STATEMENT_SIM = 0.7  # cosine of a statement to an earlier one that makes it the same move again
CLEAR_STATEMENT_SIM = 0.8  # from here a statement is said again whatever words it adds; below, ...
NEW_STEMS = 3  # ... only if it brings at most this many content words the listener has not used before
OPENING_WORDS = 3  # the words of a reply's opening compared with earlier openings ...
OPENING_RUN = 2  # ... and how many earlier replies must share them for a formula
MIN_SENTENCE_WORDS = 3


@dataclass(frozen=True)
class Repeat:
    """One sentence of the reply that repeats an earlier move: which kind, and what it repeats."""

    sentence: str
    kind: str  # question | statement | opening
    earlier: str
    cosine: float

    def evidence(self) -> str:
        what = {"question": "asks again", "statement": "says again", "opening": "the same opening"}[self.kind]
        return f"{what}: '{self.sentence[:70]}' (earlier: '{self.earlier[:60]}', cosine {self.cosine:.2f})"


def _is_question(sentence: str) -> bool:
    return sentence.rstrip().endswith("?")


def _opening(text: str) -> tuple[str, ...]:
    first = sentences(text)[:1]
    return tuple(words(first[0])[:OPENING_WORDS]) if first else ()


def repeated_moves(reply_sentences: list[str], own_turns: list[str]) -> list[Repeat]:
    """The sentences of a reply that repeat a move of `own_turns` (the listener's earlier replies)."""
    earlier = [s for turn in own_turns for s in sentences(turn) if len(words(s)) >= MIN_SENTENCE_WORDS]
    mine = [s for s in reply_sentences if len(words(s)) >= MIN_SENTENCE_WORDS]
    if not earlier or not mine:
        return []
    used = set().union(*(content_stems(turn) for turn in own_turns))
    vectors = embeddings.embed(list(dict.fromkeys(mine + earlier)))
    index = {t: i for i, t in enumerate(dict.fromkeys(mine + earlier))}
    found: list[Repeat] = []
    for s in mine:
        same_kind = [e for e in earlier if _is_question(e) == _is_question(s)]
        if not same_kind:
            continue
        cosines = vectors[[index[e] for e in same_kind]] @ vectors[index[s]]
        frame = words(s)[:FRAME_WORDS]
        if _is_question(s):
            thresholds = [FRAMED_QUESTION_SIM if words(e)[:FRAME_WORDS] == frame else QUESTION_SIM for e in same_kind]
        elif cosines.max() < CLEAR_STATEMENT_SIM and len(content_stems(s) - used) > NEW_STEMS:
            continue  # close, but it brings new matter of its own
        else:
            thresholds = [STATEMENT_SIM] * len(same_kind)
        over = [k for k in range(len(same_kind)) if cosines[k] >= thresholds[k]]
        if over:
            best = max(over, key=lambda k: cosines[k])
            found.append(Repeat(s, "question" if _is_question(s) else "statement", same_kind[best], float(cosines[best])))
    return _formula(reply_sentences, own_turns, found)


def _formula(reply_sentences: list[str], own_turns: list[str], found: list[Repeat]) -> list[Repeat]:
    """`found` plus the opening statement when it is a formula of the earlier replies' openings."""
    opening = _opening(" ".join(reply_sentences))
    first = reply_sentences[0] if reply_sentences else ""
    if len(opening) == OPENING_WORDS and not _is_question(first) and first not in {r.sentence for r in found}:
        same = [turn for turn in own_turns if _opening(turn) == opening]
        if len(same) >= OPENING_RUN:
            return [*found, Repeat(first, "opening", sentences(same[-1])[0], 1.0)]
    return found


def fresh_text(reply_sentences: list[str], repeats: list[Repeat]) -> str:
    """The reply without its repeated sentences: what it says that is new."""
    repeated = {r.sentence for r in repeats}
    return " ".join(s for s in reply_sentences if s not in repeated)
