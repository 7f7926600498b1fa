"""The simulated user of the K = 1 emotion-score environment.

`PersonaActor` plays the user offline and deterministically for a given seed: a
reaction that follows the judged change, then the next piece of the person's story
(background first; the hidden intention only once emotion is at least 60, when the
person trusts the listener), told in the first person. It never sends the same
message twice.
"""

from __future__ import annotations

import random
import zlib

from mapo.envs.emotion.persona import Persona
from mapo.envs.first_person import first_person, pronoun_of
from mapo.text import sentences


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
        pronoun = pronoun_of([persona.persona, persona.background, persona.hidden_intention])
        self.story = [first_person(s, pronoun, elided_subject=True) for s in sentences(persona.background)]
        self.secrets = [first_person(s, pronoun, elided_subject=True) for s in sentences(persona.hidden_intention)]
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
