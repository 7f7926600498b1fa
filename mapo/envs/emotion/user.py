"""The simulated user of the K = 1 emotion-score environment.

`PersonaActor` plays the user offline and deterministically for a given seed: a
reaction that follows the judged change, then the next piece of the person's story
(background first; the hidden intention only once emotion is at least 60, when the
person trusts the listener), told in the first person. It never sends the same
message twice.
"""

from __future__ import annotations

import random
import re
import zlib

from mapo.envs.emotion.persona import Persona
from mapo.envs.empathy.text import sentences


# Reactions by how the last reply landed, in the user's voice (ours).
REACTIONS: dict[str, tuple[str, ...]] = {
    "hurt": (
        "That's not what I needed to hear.",
        "Wow. Okay. I wish I hadn't said anything.",
        "You're not really listening, are you?",
        "That actually makes it worse.",
        "I didn't come here to be lectured.",
        "Right. Never mind, then.",
    ),
    "flat": (
        "Hm. I'm not sure that helps.",
        "That feels a bit beside the point.",
        "I guess. It doesn't really land, though.",
        "Maybe, but that's not quite it.",
        "I've heard that before.",
        "Sure. I don't know.",
    ),
    "neutral": (
        "Maybe.",
        "I don't know, honestly.",
        "Okay...",
        "I suppose so.",
        "Hard to say.",
        "Could be.",
    ),
    "better": (
        "Yeah, that's kind of it.",
        "That helps a little, actually.",
        "Thanks, I think I needed that.",
        "Okay, that makes sense.",
        "It's nice to hear someone say that.",
        "Huh. I hadn't thought of it that way.",
    ),
    "moved": (
        "Yes. Exactly that.",
        "Nobody has put it like that before.",
        "That really means a lot.",
        "I feel like you actually get it.",
        "Wow. Okay. That hit home.",
        "That's exactly what I was afraid to say.",
    ),
}
DISCLOSURE_FRAMES = (
    "The thing is, {}", "And {}", "Also, {}", "What makes it worse: {}", "I keep thinking about this: {}",
)
CLOSING_SUCCESS = "Thank you. I honestly feel so much lighter now. I think I know what to do next."
CLOSING_FAILURE = "I think I'm done talking about this. It isn't helping."
TRUST_EMOTION = 60.0

# Third-person story sentences -> the user's own voice. The persona's pronoun is the
# one its texts use most; only that pronoun's forms are rewritten ("his daughter ...
# near her" keeps the daughter's "her" for a man).
_PRONOUNS = {
    "he": {"he": "I", "him": "me", "his": "my", "himself": "myself"},
    "she": {"she": "I", "her": "my", "hers": "mine", "herself": "myself"},
    "they": {"they": "I", "them": "me", "their": "my", "theirs": "mine", "themselves": "myself"},
}
# after "her": a word here means "her" was an object (-> "me"), not a possessive (-> "my")
_NOT_A_NOUN = frozenset(
    "a an the and or but to in on at for with from about into that this because when while so too very "
    "again anymore yet if as of by than".split()
)
_AGREEMENT = {"am": "am", "is": "am", "are": "am", "was": "was", "were": "was", "has": "have", "does": "do",
              "doesn't": "don't", "isn't": "am not", "aren't": "am not", "wasn't": "wasn't", "weren't": "wasn't",
              "hasn't": "haven't"}
_NOT_A_VERB = frozenset("always sometimes perhaps thus besides afterwards nevertheless less this".split())
_ADVERBS = "secretly|really|just|still|also|never|always|often|only|even|sometimes|desperately|quietly"


def persona_pronoun(*texts: str) -> str | None:
    """'he', 'she' or 'they': whichever set of pronouns the texts use most (None if none)."""
    words = re.findall(r"[a-z]+", " ".join(texts).lower())
    counts = {key: sum(words.count(w) for w in forms) for key, forms in _PRONOUNS.items()}
    best = max(counts, key=lambda k: counts[k])
    return best if counts[best] else None


def _verb_for_i(word: str) -> str:
    low = word.lower()
    if low in _AGREEMENT:
        return _AGREEMENT[low]
    if low in _NOT_A_VERB or not low.endswith("s") or low.endswith(("ss", "us", "is")) or len(low) < 4:
        return word
    if low.endswith("ies"):
        return word[:-3] + "y"
    if low.endswith(("shes", "ches", "xes", "oes", "sses")):
        return word[:-2]
    return word[:-1]


def first_person(sentence: str, pronoun: str | None) -> str:
    """'His laptop died and he has no backup.' -> 'My laptop died and I have no backup.' (for pronoun 'he')."""
    if pronoun is None:
        return sentence
    forms = _PRONOUNS[pronoun]

    def swap(match: re.Match[str]) -> str:
        low, next_word = match.group(1).lower(), (match.group(2) or "").lower()
        if low == "her":  # possessive before a noun-like word, otherwise an object
            return "my" if next_word and next_word not in _NOT_A_NOUN else "me"
        return forms[low]

    pattern = r"\b(" + "|".join(forms) + r")\b(?=\s+([A-Za-z']+)|)"
    out = re.sub(pattern, swap, sentence, flags=re.IGNORECASE)
    out = re.sub(
        rf"\bI\s+((?:(?:{_ADVERBS})\s+)?)([A-Za-z']+)", lambda m: f"I {m.group(1)}{_verb_for_i(m.group(2))}", out
    )
    if re.match(rf"{pronoun}\b", sentence, flags=re.IGNORECASE):  # the person is the subject
        # "He wants X but is afraid": the elided subject of a joined verb is the person too
        out = re.sub(r"\b(but|and|or)\s+(is|are|was|were|has|does|doesn't|isn't|aren't|wasn't|weren't|hasn't)\b",
                     lambda m: f"{m.group(1)} {_verb_for_i(m.group(2))}", out)
    return out[:1].upper() + out[1:]


def _lower_first(text: str) -> str:
    return text if text[:2] == "I " or text[:2] == "I'" else text[:1].lower() + text[1:]


def _band(change: float) -> str:
    if change <= -6:
        return "hurt"
    if change < 0:
        return "flat"
    if change < 3:
        return "neutral"
    if change < 8:
        return "better"
    return "moved"


class PersonaActor:
    """Deterministic offline user: same persona, seed and replies -> same messages."""

    def reset(self, persona: Persona, seed: int | None = None) -> None:
        key = f"{persona.id}:{0 if seed is None else seed}"
        self.rng = random.Random(zlib.crc32(key.encode("utf-8")))
        pronoun = persona_pronoun(persona.persona, persona.background, persona.hidden_intention)
        self.story = [first_person(s, pronoun) for s in sentences(persona.background)]
        self.secrets = [first_person(s, pronoun) for s in sentences(persona.hidden_intention)]
        self.reactions = {band: self.rng.sample(lines, len(lines)) for band, lines in REACTIONS.items()}
        self.said: set[str] = set()

    def opening(self, persona: Persona) -> str:
        if persona.first_message:
            text = persona.first_message
        elif persona.topic:
            text = f"Can I talk to you about something? {persona.topic.rstrip('.')}."
        elif self.story:
            text = f"Can I talk to you about something? {self.story.pop(0)}"
        else:
            text = "Can I talk to you about something that's been weighing on me?"
        self.said.add(text)
        return text

    def reply(self, persona: Persona, emotion: float, change: float, done_reason: str | None) -> str:
        if done_reason in ("success", "failure"):  # the last message of the dialogue
            return self._say(CLOSING_SUCCESS if done_reason == "success" else CLOSING_FAILURE)
        band = _band(change)
        disclosure = ""
        if self.story:
            disclosure = self.story.pop(0)
        elif self.secrets and emotion >= TRUST_EMOTION:
            disclosure = self.secrets.pop(0)
        if disclosure:
            frame = self.rng.choice(DISCLOSURE_FRAMES)
            disclosure = frame.format(_lower_first(disclosure))
        for reaction in self.reactions[band]:
            message = f"{reaction} {disclosure}".strip()
            if message not in self.said:
                return self._say(message)
        # every reaction of this band was used with this disclosure: pair two of them
        lines = self.reactions[band]
        for a in lines:
            for b in lines:
                message = f"{a} {b} {disclosure}".strip()
                if a != b and message not in self.said:
                    return self._say(message)
        raise RuntimeError("the offline actor ran out of distinct messages (over 36 turns in one mood band)")

    def _say(self, message: str) -> str:
        self.said.add(message)
        return message
