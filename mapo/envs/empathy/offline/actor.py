"""The offline actor: the simulated user, speaking from the card and the need state.

Each reply is 1-3 sentences put together from our own sentence fragments and the
card's content:

- the opening is ``card.opening_line``;
- ``reveal_stage`` / ``reveal_memory`` say ``card.stages[i].content`` or
  ``card.memories[i]`` (written on the cards as third-person notes, said in the persona's
  own voice by ``spoken.speak``: what they say, never the note's "she explains ... and asks"),
  after a short lead-in;
- ``confused`` (the policy's reply made no sense): puzzlement in the persona's voice,
  and withdrawal when the reply also did harm; nothing new is shared;
- the reaction follows the last Delta E: push back after a regression, thank after
  clear progress (Delta E >= ``THANKS_DELTA``), ease after small progress;
- the mood follows D_t / D_0 (raw, heavy, steadier, lighter), ``steer`` voices the
  deepest deficit axis, ``turning_point`` a shift in view, ``end`` a closing line
  that fits the outcome;
- the persona's speaking style shapes the text: phrases it quotes ("I mean", "it's
  fine") become occasional lead-ins, "lowercase" / "few capitals" lowercases,
  "formal" drops contractions, "terse", "short", "clipped" or "gruff" caps a turn at
  two sentences, "trails off" / "stop in the middle" / "pauses" ends a sentence with "...".

No sentence is said twice in a dialogue (and so no reply either): every fragment is
drawn, with the dialogue's own seeded random generator, from those not yet used, and
lead-ins multiply the pools. Deterministic for a given seed and card.
"""

from __future__ import annotations

import random
import re
from typing import TYPE_CHECKING

from mapo.envs.empathy.roles import Direction
from mapo.envs.empathy.offline.actor_lines import (
    CLOSINGS,
    CONFUSED,
    GENERAL_LEADS,
    MEMORY_LEADS,
    MOODS,
    NEEDS,
    REACTIONS,
    STAGE_LEADS,
    STEER_LEADS,
    TURNING,
    WITHDRAW,
)
from mapo.envs.empathy.offline.spoken import speak
from mapo.envs.first_person import pronoun_of
from mapo.text import sentences

if TYPE_CHECKING:
    from mapo.envs.dynamics import NeedState
    from mapo.envs.empathy.cards import ScenarioCard

THANKS_DELTA = 1.5  # Delta E from which the user thanks rather than just eases

# -- style -------------------------------------------------------------------------------

_CONTRACTIONS = {
    "I'm": "I am", "don't": "do not", "can't": "cannot", "it's": "it is", "It's": "It is", "that's": "that is",
    "That's": "That is", "I've": "I have", "you're": "you are", "You're": "You are", "isn't": "is not",
    "doesn't": "does not", "didn't": "did not", "won't": "will not", "I'll": "I will", "I'd": "I would",
    "there's": "there is", "There's": "There is", "wasn't": "was not", "what's": "what is", "Nobody's": "Nobody has",
    "haven't": "have not", "you'd": "you would", "Let's": "Let us", "Here's": "Here is", "Something's": "Something has",
}


class Style:
    """What the persona's speaking style changes about the text."""

    def __init__(self, speaking_style: str) -> None:
        low = speaking_style.lower()
        self.lowercase = "lowercase" in low or "few capitals" in low or "no capitals" in low
        self.formal = "formal" in low and "informal" not in low
        self.max_sentences = 2 if any(w in low for w in ("terse", "short", "clipped", "gruff", "curt")) else 3
        self.trails = any(w in low for w in ("trails off", "stop in the middle", "pauses", "hesitant", "ellips"))
        quoted = re.findall(r"[\"\u201c]([^\"\u201d]{1,40})[\"\u201d]", speaking_style)
        self.leads = [q.strip().rstrip(".!") + "," for q in quoted if len(q.split()) <= 4 and not q.strip().endswith("?")]

    def apply(self, text: str) -> str:
        if self.formal:
            for short, full in _CONTRACTIONS.items():
                text = re.sub(rf"(?<![\w']){re.escape(short)}(?![\w'])", full, text)
        if self.lowercase:
            text = text.lower()
        return text


def _mood(state: NeedState) -> str:
    ratio = state.distance / state.d0 if state.d0 > 0 else 0.0
    if ratio > 0.85:
        return "raw"
    if ratio > 0.6:
        return "heavy"
    if ratio > 0.35:
        return "steadier"
    return "lighter"


def _normal(sentence: str) -> str:
    return re.sub(r"[^a-z0-9 ]", "", sentence.lower()).strip()


class OfflineActor:
    """The simulated user, from the card and the need state; deterministic for a seed."""

    def __init__(self) -> None:
        self._rng = random.Random(0)
        self._used: set[str] = set()
        self._style = Style("")
        self._who: str | None = None
        self._name = ""

    def reset(self, card: ScenarioCard, seed: int | None = None) -> None:
        self._rng = random.Random(f"{seed}:{card.id}")
        self._used = set()
        self._style = Style(card.persona.speaking_style)
        self._who = pronoun_of([s.content for s in card.stages] + list(card.memories))
        self._name = card.persona.name.split()[0]

    def opening(self, card: ScenarioCard) -> str:
        for s in sentences(card.opening_line):
            self._used.add(_normal(s))
        return card.opening_line

    # -- choosing fragments that were never said -----------------------------------------

    def _fresh(self, pool: list[str], leads: bool = True) -> str | None:
        """An unused sentence from `pool`, bare or after a lead-in; None when all are used."""
        options = list(pool)
        self._rng.shuffle(options)
        for sentence in options:
            if _normal(sentence) not in self._used:
                return sentence
        if not leads:
            return None
        lead_pool = self._style.leads + GENERAL_LEADS
        combos = [(lead, s) for lead in lead_pool for s in pool]
        self._rng.shuffle(combos)
        for lead, sentence in combos:
            candidate = f"{lead} {sentence[0].lower()}{sentence[1:]}" if not sentence.startswith("I ") else f"{lead} {sentence}"
            if _normal(candidate) not in self._used:
                return candidate
        return None

    def _reveal(self, leads: list[str], note: str) -> list[str | None]:
        """A lead-in and up to two sentences of the card's note; the lead-in goes first when space is short."""
        spoken = speak(note, self._who, self._name, self._rng)
        content = [s for s in sentences(spoken) if _normal(s) not in self._used][:2]
        if len(content) >= self._style.max_sentences:
            return list(content)
        return [self._fresh(leads), *content]

    # -- the reply ---------------------------------------------------------------------------

    def reply(self, card: ScenarioCard, history: list[dict[str, str]], state: NeedState, direction: Direction) -> str:
        last = state.delta_e[-1] if state.delta_e else 0.0
        reaction = "pushback" if last < 0 else "thanks" if last >= THANKS_DELTA else "ease" if last > 0 else "flat"
        focus = direction.focus_axis if direction.focus_axis in NEEDS else state.deepest_axis()
        action = direction.action
        parts: list[str | None]
        if action == "end":
            status = state.status() or "timeout"
            parts = [self._fresh(CLOSINGS[status]), self._fresh(MOODS[_mood(state)], leads=False)]
        elif action == "reveal_stage" and direction.stage is not None and direction.stage < len(card.stages):
            parts = self._reveal(STAGE_LEADS, card.stages[direction.stage].content)
        elif action == "reveal_memory" and direction.memory is not None and direction.memory < len(card.memories):
            parts = self._reveal(MEMORY_LEADS, card.memories[direction.memory])
        elif action == "turning_point":
            parts = [self._fresh(REACTIONS["thanks"]), self._fresh(TURNING), self._fresh(MOODS[_mood(state)], leads=False)]
        elif action == "confused":
            parts = [self._fresh(CONFUSED), self._fresh(WITHDRAW, leads=False) if last < 0 else None]
        elif action == "steer":
            first = self._fresh(REACTIONS["pushback"]) if reaction == "pushback" else self._fresh(STEER_LEADS)
            parts = [first, self._fresh(NEEDS[focus])]
        else:
            parts = [self._fresh(REACTIONS[reaction]), self._fresh(MOODS[_mood(state)], leads=False) or self._fresh(NEEDS[focus])]
        said = [p for p in parts if p][: self._style.max_sentences]
        if not said:  # every fragment is spent (a very long dialogue): say where things stand, once
            said = [f"We've been at this for {state.turn} turns now."]
        if self._style.trails and len(said) > 1 and self._rng.random() < 0.5:
            said[0] = said[0].rstrip(".!") + "..."
        for s in said:
            self._used.add(_normal(s))
        return self._style.apply(" ".join(said))
