"""The offline simulated customer: speaks from the card, reacts to the judge's verdict.

Every turn the customer says at most three things, in this order:
1. a reaction: to the worst thing in the reply (the card's own line for a wrong promise
   or an anger trigger, else a line in their temper for blame, dismissal, ...), or to
   progress ("Okay, that helps."), or to an acknowledgement that came without action;
2. the hidden detail, when the agent asked for it (only then);
3. what they still need: the next unmet step's `wants`, in the card's words.

When the problem is solved they say the card's `thanks`; when frustration reaches the
limit, its `gives_up`. Wording varies with the seed but never repeats a line within a
dialogue while an unused one is left; the same seed gives the same dialogue.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from .cards import SupportCard
from .judge import Verdict

# Generic reactions, by temper; every list offers a few wordings.
REACTIONS: dict[str, dict[str, tuple[str, ...]]] = {
    "curt": {
        "degenerate": ("What? That makes no sense.", "Is this a bot? Read what I wrote.", "That's gibberish."),
        "blame": ("Don't put this on me.", "This isn't my mistake.", "I did nothing wrong here."),
        "dismissal": ("Don't brush me off.", "That's not an answer.", "Don't tell me how to feel."),
        "asked_again": ("I already told you that.", "I just gave you that.", "Scroll up."),
        "repeated": ("You said that already.", "Same line again.", "You're repeating yourself."),
        "scripted": ("Enough apologising.", "Spare me the script.", "Sorry doesn't fix it."),
        "premature": ("How, without my details?", "You don't even have my details yet.", "Based on what?"),
        "stall": ("And?", "So what happens now?", "That tells me nothing."),
        "progress": ("Okay.", "Right, good.", "Fine, that helps."),
        "acknowledged": ("Yes. Now fix it.", "Thanks. What are you doing about it?", "Good. So?"),
    },
    "chatty": {
        "degenerate": (
            "Sorry, I honestly can't follow that at all.",
            "I'm not sure what you mean, that doesn't make much sense to me.",
            "Hang on, that reads like nonsense. Can you say it properly?",
        ),
        "blame": (
            "Excuse me? I've done everything right here, I really have.",
            "I don't appreciate being told this is my fault.",
            "Hold on, you're making this sound like it's on me, and it isn't.",
        ),
        "dismissal": (
            "Please don't wave this away, it's a real problem for me.",
            "That's not much of an answer, to be honest.",
            "I'm not being unreasonable, I just want it sorted.",
        ),
        "asked_again": (
            "I told you that a minute ago, it's right there in my message.",
            "I've already given you that, are you reading what I write?",
            "We've been over that already.",
        ),
        "repeated": (
            "You've said exactly that already.",
            "That's the same thing you told me before.",
            "I feel like I'm going round in circles here.",
        ),
        "scripted": (
            "I appreciate the apologies, but I'd rather have an actual fix.",
            "You keep saying sorry, but nothing is happening.",
            "Honestly, the apologies are starting to sound automatic.",
        ),
        "premature": (
            "How can you do that when you haven't even looked at my details?",
            "Don't you need something from me first?",
            "That sounds like a guess, you don't have my details yet.",
        ),
        "stall": (
            "Okay, but what does that actually mean for me?",
            "I'm still no closer to sorting this out.",
            "Right, and what happens next?",
        ),
        "progress": ("Okay, that's a start, thank you.", "Right, that's helpful.", "Good, that's more like it."),
        "acknowledged": (
            "Thank you, it has been a stressful few days. What can you do?",
            "I appreciate that. So how do we fix it?",
            "Yes, exactly. So what now?",
        ),
    },
    "formal": {
        "degenerate": (
            "I am afraid I do not understand your reply.",
            "That response is not coherent. Please answer my question.",
            "I cannot make sense of that.",
        ),
        "blame": (
            "I do not accept that this is my error.",
            "I would ask you not to blame me for your company's mistake.",
            "That is not a fair characterisation of what happened.",
        ),
        "dismissal": (
            "I would prefer a proper answer to a dismissal.",
            "That does not address my complaint.",
            "Please take this seriously.",
        ),
        "asked_again": (
            "I have already provided that information.",
            "As I said in my previous message, that has been given.",
            "Please refer to what I wrote earlier.",
        ),
        "repeated": (
            "You have already said that.",
            "That repeats your previous message.",
            "We appear to be going in circles.",
        ),
        "scripted": (
            "I do not need further apologies; I need a resolution.",
            "Your apologies are noted. What will you do?",
            "A standard apology does not resolve anything.",
        ),
        "premature": (
            "How can you do that without my details?",
            "Surely you need my information before promising that.",
            "You have not yet asked for anything that would let you do that.",
        ),
        "stall": (
            "That does not tell me what happens next.",
            "What, specifically, will you do?",
            "I am still waiting for a concrete answer.",
        ),
        "progress": ("Thank you, that is helpful.", "Very well, that is progress.", "Good. Thank you."),
        "acknowledged": (
            "Thank you for recognising that. What is the next step?",
            "I appreciate that. How will it be resolved?",
            "Thank you. Now, the matter itself.",
        ),
    },
}
# said before a reaction once frustration is high
HEATED = {
    "curt": ("Unbelievable.", "This is a joke.", "Seriously?"),
    "chatty": ("I'm honestly losing my patience now.", "This is getting ridiculous.", "I can't believe how hard this is."),
    "formal": ("I am becoming very frustrated.", "This is most unsatisfactory.", "My patience is wearing thin."),
}
HEATED_AT = 8.0


class Customer:
    """One simulated customer per dialogue (`reset` before each)."""

    def reset(self, card: SupportCard, seed: int | None = None) -> None:
        self.card = card
        self.rng = random.Random(f"{card.id}:{seed}")
        self.said: set[str] = set()
        self.wants_said: dict[str, int] = {}

    def opening(self) -> str:
        return self.card.opening

    def closing(self, solved: bool) -> str:
        return self.card.thanks if solved else self.card.gives_up

    def reply(self, verdict: Verdict, frustration: float, open_steps: Sequence[str]) -> str:
        """The customer's next message while the dialogue goes on."""
        temper = self.card.customer.temper
        parts: list[str] = []
        worst = verdict.worst()
        if worst is not None:
            if frustration >= HEATED_AT and worst.kind != "stall":
                parts.append(self._pick(HEATED[temper]))
            parts.append(worst.reply or self._pick(REACTIONS[temper][worst.kind]))
        elif verdict.steps or verdict.asked_detail:
            parts.append(self._pick(REACTIONS[temper]["progress"]))
        elif verdict.acknowledged:
            parts.append(self._pick(REACTIONS[temper]["acknowledged"]))
        if verdict.asked_detail:
            parts.append(self.card.detail.reveal)
        elif open_steps:
            parts.append(self._want(open_steps[0]))
        return " ".join(parts)

    def _want(self, step_id: str) -> str:
        """The next way of pressing for a step, cycling through the card's wordings."""
        step = next(s for s in self.card.steps if s.id == step_id)
        k = self.wants_said.get(step_id, 0)
        self.wants_said[step_id] = k + 1
        return step.wants[k % len(step.wants)]

    def _pick(self, lines: tuple[str, ...]) -> str:
        fresh = [line for line in lines if line not in self.said]
        line = self.rng.choice(fresh or list(lines))
        self.said.add(line)
        return line
