"""The offline actor: the simulated user, speaking from the card and the need state.

Each reply is 1-3 sentences put together from our own sentence fragments and the
card's content:

- the opening is ``card.opening_line``;
- ``reveal_stage`` / ``reveal_memory`` say ``card.stages[i].content`` or
  ``card.memories[i]`` (written on the cards as third-person notes, turned into the
  persona's first person by ``first_person``), after a short lead-in;
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
from mapo.envs.first_person import first_person, pronoun_of
from mapo.text import sentences

if TYPE_CHECKING:
    from mapo.envs.dynamics import NeedState
    from mapo.envs.empathy.cards import ScenarioCard

THANKS_DELTA = 1.5  # Delta E from which the user thanks rather than just eases

REACTIONS = {
    "pushback": [
        "That's not really what I meant.",
        "I don't think you're hearing me.",
        "That's not it.",
        "That feels a bit like being told off.",
        "I didn't ask to be fixed.",
        "That's easy to say from where you're sitting.",
        "I've heard that before, and it didn't help then either.",
        "You make it sound simpler than it is.",
        "That's not quite what's going on.",
        "I'm not sure that fits at all.",
        "That skips over the hard part.",
        "I feel like we're talking past each other.",
        "That stings a bit.",
        "I wasn't looking for a lecture.",
        "That's not what I needed to hear.",
        "You're not really getting it.",
    ],
    "thanks": [
        "Thank you, that actually helps.",
        "Yes, that's it exactly.",
        "Nobody's put it like that before.",
        "That means a lot.",
        "Thanks for seeing that.",
        "That really lands.",
        "That feels true.",
        "I needed someone to say that.",
        "Yes, that's much closer to it.",
        "I hadn't thought of it that way.",
        "That's kind of you to notice.",
        "That helps more than you'd think.",
    ],
    "ease": [
        "Maybe, yeah.",
        "I suppose that's fair.",
        "That makes some sense.",
        "I can see that a little.",
        "That's a bit of a relief to hear.",
        "Yeah, I think so.",
        "I'll think about that.",
        "That's a fair point.",
        "I guess that's true.",
        "That helps a little.",
        "That's something, I suppose.",
        "Okay, that's not wrong.",
    ],
    "flat": [
        "I don't know.",
        "Maybe.",
        "I'm not sure what to do with that.",
        "I suppose.",
        "Sure, maybe.",
        "I hear you, I think.",
        "Hard to say.",
        "Could be.",
        "I'm not sure.",
        "If you say so.",
    ],
}
MOODS = {
    "raw": [
        "It still feels like too much.",
        "I keep going round in circles.",
        "Most days I just feel stuck.",
        "I can't really think straight about it.",
        "It's all I think about.",
        "I don't know how to get past it.",
        "It's been sitting on my chest all week.",
        "Everything about it still hurts.",
        "I haven't slept properly since.",
        "It's like I'm carrying it everywhere.",
        "I keep replaying it.",
        "I feel a bit lost.",
    ],
    "heavy": [
        "It's still heavy, but at least I'm talking about it.",
        "Some moments it's a bit lighter.",
        "I'm still not sure where I stand.",
        "It's a little clearer than before.",
        "Parts of it still sting.",
        "I'm trying to see it differently.",
        "I think I'm starting to untangle it.",
        "It's less of a fog than it was.",
        "It doesn't hurt in quite the same way now.",
        "I'm not as knotted up as I was.",
    ],
    "steadier": [
        "I feel a bit steadier now.",
        "It doesn't feel quite so huge anymore.",
        "I can breathe a little.",
        "It's starting to make more sense.",
        "I can see a way through, maybe.",
        "I'm less scared of it than I was.",
        "Talking it through helps.",
        "Something's shifted a little.",
        "It feels more like mine to deal with now.",
        "I'm not so tangled up in it.",
    ],
    "lighter": [
        "I feel a lot lighter.",
        "I think I know what I want to do.",
        "It feels manageable now.",
        "I can picture the next step.",
        "I'm almost hopeful about it.",
        "I think I'll be okay.",
        "I feel more like myself.",
        "I can see it clearly now.",
        "It doesn't scare me the way it did.",
        "I'm ready to try something.",
    ],
}
# What the user keeps coming back to on each axis (continue: a mild version; steer: insistent).
NEEDS = {
    "C": [
        "I just don't understand why it happened like that.",
        "What am I missing here?",
        "Does any of this make sense to you?",
        "I can't work out what it actually means.",
        "How did it even get to this point?",
        "Is it me, or is it the situation?",
        "I keep trying to figure out the logic of it.",
        "I can't see the whole picture.",
        "Nothing about it adds up for me.",
        "I don't even know what the real question is.",
    ],
    "A": [
        "Nobody really asks how I feel about it.",
        "Half the time I don't even know what I'm feeling.",
        "It hurts more than I let on.",
        "I'm tired of pretending it's fine.",
        "Some nights it really gets to me.",
        "I feel so alone with it.",
        "I'm embarrassed by how much it's affecting me.",
        "I just want someone to get how much this hurts.",
        "I don't need fixing right now, I need someone to get it.",
        "Can we stay with how awful this feels for a second?",
    ],
    "P": [
        "I don't know what I could even do.",
        "Part of me wants to act, part of me is frozen.",
        "Every option feels wrong.",
        "I keep waiting for it to sort itself out.",
        "I wish I knew where to start.",
        "It doesn't feel like it's up to me.",
        "What would you even do?",
        "I need to feel like I have some say in this.",
        "I don't want to just sit here and wait.",
        "I'm stuck on what comes next.",
    ],
}
# After a reply that made no sense (garbled, looping, cut off, about itself or someone else):
# the person is puzzled or put off, and shares nothing new.
CONFUSED = [
    "Sorry, I'm not following you.",
    "I'm not sure what you mean.",
    "That didn't really make sense to me.",
    "Wait, what?",
    "I think you lost me there.",
    "You stopped in the middle there.",
    "I don't know who you're talking about.",
    "How is that about what I said?",
    "That went right over my head.",
    "Did something go wrong with that message?",
    "I'm a bit lost now.",
    "Hm. That's not really about me.",
    "I don't get what you're saying.",
    "Are you actually listening?",
    "Okay... I'm not sure where that came from.",
    "That sounded like a jumble of my own words.",
]
WITHDRAW = [
    "Never mind.",
    "Maybe this was a bad idea.",
    "Forget it, it doesn't matter.",
    "I don't think I can explain it any better.",
    "Let's just leave it.",
    "I'm starting to wonder why I'm telling you this.",
    "I'll keep it to myself then.",
    "It's fine. It's fine.",
]

STEER_LEADS = [
    "Can we go back to something?",
    "That's not the part that matters most to me.",
    "Let me try to say it differently.",
    "I think the real problem is somewhere else.",
    "Sorry, I keep coming back to this.",
    "The thing is, that's not what's keeping me up.",
    "What I actually mean is this.",
    "Let me put it another way.",
]
TURNING = [
    "Maybe I've been looking at this the wrong way.",
    "I think something just clicked.",
    "Maybe it isn't all on me.",
    "I think I'm starting to see it differently.",
    "Maybe there's more I can do than I thought.",
    "That changes how I see it, a bit.",
]
STAGE_LEADS = [
    "There's more to it, actually.",
    "I haven't told you the worst part.",
    "Can I tell you something else?",
    "Here's the thing.",
    "It's not just that.",
    "There's something else.",
    "I should probably say this too.",
    "Okay, the rest of it.",
]
MEMORY_LEADS = [
    "This reminds me of something.",
    "Something from years ago keeps coming back to me.",
    "Funny, something just came back to me.",
    "It makes me think of something.",
    "I remembered something while you were talking.",
]
CLOSINGS = {
    "success": [
        "Thank you, I think I can take it from here.",
        "This really helped, I know what I want to try.",
        "I feel a lot better than when we started, thank you.",
    ],
    "failure": [
        "I think I'll leave it here.",
        "I don't think this is helping, sorry.",
        "Never mind, I'll figure it out myself.",
    ],
    "timeout": [
        "I'm tired now, I think I'll stop here.",
        "Let's leave it there for today.",
        "I need to go, but thanks for listening.",
    ],
}
GENERAL_LEADS = ["Honestly,", "I mean,", "Well,", "Look,", "I guess", "To be fair,", "And yes,", "Still,"]

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
        spoken = first_person(note, self._who, self._name)
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
