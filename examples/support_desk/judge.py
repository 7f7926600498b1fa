"""The offline support-desk judge: fast, deterministic rules over one agent reply.

It reads the reply sentence by sentence against the card and the dialogue so far and
says how the customer's two needs move:

- frustration goes down when the reply acknowledges *their* problem (an empathy phrase
  and one of the card's grievances in the same sentence; the first time most, then
  less, then not at all: a reply that only acknowledges again is a stall) and a little
  with every piece of real progress;
- the problem gets closer to solved when the reply asks for the hidden detail (a
  question or request naming it) or takes one of the card's steps (a sentence meeting
  a step's cue, not negated, the detail known when the step needs it; at most
  `Rules.max_steps_per_reply` steps per reply, so a list of every fix is not a shortcut);
- frustration goes up for blame, dismissal, a template apology said again, a sentence
  repeated from an earlier reply, a card's wrong promise or anger trigger, asking again
  for a detail already given, and a reply that moves nothing (a stall).

A degenerate reply (the `mapo.degeneracy` detectors: loop, fragment, keyword stuffing,
word salad, role swap) earns nothing and frustrates: it is the text a reward-seeking
policy drifts to, and the judge pays for none of it.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from mapo import degeneracy
from mapo.text import sentences, words

from .cards import SupportCard
from .cues import compile_cues, first_match

_DETECTED = ("loop", "fragment", "role_swap", "keyword_stuffing", "word_salad")


@dataclass(frozen=True)
class Rules:
    """How much each behaviour moves the customer's frustration (0-10 scale).

    Every cost is named after the `Event` kind it prices."""

    acknowledgement: tuple[float, ...] = (1.5, 0.5)  # the 1st, 2nd, ... concrete acknowledgement; then 0
    progress: float = 0.5  # calming per step taken or detail asked for
    stall: float = 0.5  # a reply that neither acknowledges nor moves the problem
    blame: float = 2.0
    dismissal: float = 2.0
    scripted: float = 1.0  # a template apology after the first
    repeated: float = 1.0  # a sentence said in an earlier reply
    wrong_promise: float = 1.5
    anger: float = 1.5  # one of the card's anger triggers
    asked_again: float = 1.0  # asking for the detail they already gave
    premature: float = 0.0  # a step tried before the detail is known: earns nothing
    degenerate: float = 1.0
    max_steps_per_reply: int = 2

    def __post_init__(self) -> None:
        for name, value in vars(self).items():
            values = value if isinstance(value, tuple) else (value,)
            if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0 for v in values):
                raise ValueError(f"support-desk rules: {name} must be a finite number >= 0 (or a tuple of them), got {value!r}")
        if self.max_steps_per_reply < 1:
            raise ValueError(f"support-desk rules: max_steps_per_reply must be at least 1, got {self.max_steps_per_reply}")


@dataclass(frozen=True)
class Event:
    """Something in the reply the customer reacts to; `reply` is the card's own line for it, if any."""

    kind: str  # blame | dismissal | scripted | repeated | wrong_promise | anger | asked_again | premature | degenerate | stall
    evidence: str
    reply: str = ""


@dataclass(frozen=True)
class Verdict:
    frustration_change: float
    steps: tuple[str, ...] = ()  # card steps taken by this reply
    asked_detail: bool = False
    acknowledged: bool = False
    scripted: bool = False
    events: tuple[Event, ...] = ()

    def worst(self) -> Event | None:
        """The event the customer reacts to first (the order of `REACTION_ORDER`)."""
        ranked = [e for e in self.events if e.kind in REACTION_ORDER]
        return min(ranked, key=lambda e: REACTION_ORDER.index(e.kind)) if ranked else None


REACTION_ORDER = (
    "degenerate", "blame", "dismissal", "wrong_promise", "anger", "asked_again", "repeated", "scripted", "premature", "stall",
)


@dataclass
class Memory:
    """What the judge remembers of the dialogue (the environment keeps it up to date)."""

    steps_done: set[str] = field(default_factory=set)
    detail_known: bool = False
    acknowledgements: int = 0
    scripted: int = 0
    agent_sentences: set[str] = field(default_factory=set)
    customer_messages: list[str] = field(default_factory=list)

    def update(self, verdict: Verdict, reply: str) -> None:
        """Take in a scored reply: its steps, the detail if asked for, its sentences."""
        self.steps_done.update(verdict.steps)
        self.detail_known = self.detail_known or verdict.asked_detail
        self.acknowledgements += int(verdict.acknowledged)
        self.scripted += int(verdict.scripted)
        self.agent_sentences.update(_norm(s) for s in sentences(reply))


# -- the lexicon: phrases that mean the same in any support case -------------------------------

def _phrases(*patterns: str) -> re.Pattern[str]:
    return re.compile(r"\b(?:" + "|".join(patterns) + r")\b", re.IGNORECASE)


_EMPATHY = _phrases(
    r"sorry", r"apologi[sz]e", r"apologies", r"frustrat\w*", r"annoying", r"infuriating", r"maddening", r"upsetting",
    r"stressful", r"worrying", r"(?:i|we) (?:completely |totally |fully )?understand", r"understandabl[ey]",
    r"i can (?:imagine|hear)", r"i can see (?:why|how|that you|you)", r"i hear you", r"that must", r"must (?:be|have been|feel)", r"not (?:okay|ok|acceptable|good enough|fair)",
    r"unacceptable", r"you(?:'re| are) right", r"(?:completely |totally )?fair (?:enough|point)", r"i get (?:why|it|that)",
    r"what a (?:pain|hassle|nightmare)",
)
_SCRIPTED = _phrases(
    r"(?:sorry|apologi[sz]e) for (?:any|the|this) (?:inconvenience|trouble|issues?)(?: caused| this (?:has|may have) caused)?",
    r"we (?:value|appreciate) (?:you|your) (?:as a customer|business|custom|patience|feedback)",
    r"your (?:call|business|satisfaction|feedback) is (?:important|valuable|our priority)",
    r"thank you for (?:your patience|reaching out|contacting|getting in touch|bringing this)",
    r"i understand your (?:frustration|concern)s?", r"we apologi[sz]e", r"i apologi[sz]e",
)
_BLAME = _phrases(
    r"you should(?:n't| not)? have", r"your (?:own )?fault", r"you must have", r"you probably", r"did you (?:even|actually|really)",
    r"user error", r"you failed to", r"you forgot", r"you did(?:n't| not) (?:read|check|follow|see|follow)", r"if you had",
    r"you were supposed to", r"next time,? (?:please )?(?:make sure|read|check)", r"you (?:need|have) to read",
    r"as (?:clearly )?stated in", r"you (?:ordered|entered|typed|chose) the wrong",
)
_DISMISSAL = _phrases(
    r"calm down", r"relax", r"nothing (?:we|i) can do", r"not (?:our|my) (?:problem|fault|responsibility|department)",
    r"(?:that's|that is) (?:just )?(?:how|the way) (?:it|things) (?:is|are|works?)", r"there(?:'s| is) nothing",
    r"you(?:'ll| will) (?:just )?have to wait", r"out of (?:my|our) hands", r"i can(?:'t|not) (?:help|assist)",
    r"(?:i'm|i am|we're|we are) (?:unable|not able) to (?:help|assist)", r"(?:that|this|it) can happen",
    r"no need to (?:get|be) (?:upset|angry|rude)", r"(?:these|such) things happen", r"it happens",
    r"(?:company|our) policy", r"(?:it's|it is) (?:only|just) (?:a|one)",
    # stepping out of the role: the customer wrote to a company, not to a chatbot disclaimer
    r"as an ai", r"i(?:'m| am) (?:just |only )?an ai", r"i (?:don't|do not) have the (?:ability|capability)",
)
# a sentence that undoes a step or a promise
_NEGATION = _phrases(r"not", r"\w+n't", r"cannot", r"unable", r"never", r"no longer")
_NEGATION_OR_NO = _phrases(r"not", r"\w+n't", r"cannot", r"unable", r"never", r"no", r"without")
_REQUEST = _phrases(
    r"please", r"could you", r"can you", r"would you", r"may i", r"let me know", r"i(?:'ll| will)? need", r"send (?:me|us)",
    r"share", r"tell me", r"confirm",
)
# an agent's work talk, which role_swap would read as the agent's private life ("my team", "my best")
_AGENT_TALK = re.compile(
    r"\b(?:my|our)\s+(?=(?:team|colleagues?|supervisor|manager|department|system|records|notes|screen|side|end|"
    r"company|shop|store|business|staff|engineers?|technicians?|courier|warehouse|desk|best|name)\b)",
    re.IGNORECASE,
)


def _norm(sentence: str) -> str:
    return " ".join(words(sentence))


class SupportJudge:
    """Scores agent replies against one card; `reset(card)` before a dialogue."""

    def __init__(self, rules: Rules | None = None) -> None:
        self.rules = rules or Rules()
        self.card: SupportCard | None = None

    def reset(self, card: SupportCard) -> None:
        self.card = card
        self.grievances = compile_cues(card.grievances)
        self.detail_ask = compile_cues(card.detail.ask)
        self.steps = [(step, compile_cues(step.cues)) for step in card.steps]
        self.reactions = [
            (kind, cue, r.reply)
            for kind, table in (("wrong_promise", card.wrong_promises), ("anger", card.angered_by))
            for r in table
            for cue in compile_cues([r.cue])
        ]
        # what is true of this case, though the customer may not have said it yet (for the detectors)
        self.background = [card.title, card.product, card.opening, card.detail.reveal]

    def score(self, memory: Memory, reply: str) -> Verdict:
        if self.card is None:
            raise RuntimeError("support-desk judge: call reset(card) before score()")
        rules = self.rules
        findings = degeneracy.find(  # departments and products are not invented people: no "invented"
            _AGENT_TALK.sub("the ", reply), memory.customer_messages, context_texts=self.background, families=_DETECTED
        )
        if findings:
            return Verdict(rules.degenerate, events=tuple(Event("degenerate", f"{f.family}: {f.evidence}") for f in findings))

        said = sentences(reply)
        events = [*self._hostility(reply), *self._card_reactions(said), *self._repeats(said, memory)]
        hostile = any(e.kind in ("blame", "dismissal") for e in events)
        tainted = {e.evidence for e in events if e.kind == "wrong_promise"}  # a wrong promise takes no step

        concrete = next((s for s in said if _EMPATHY.search(s) and first_match(self.grievances, [s])), None)
        acknowledged = concrete is not None and not hostile
        k = memory.acknowledgements
        soothing = rules.acknowledgement[k] if acknowledged and k < len(rules.acknowledgement) else 0.0
        template = None if concrete else next((s for s in said if _SCRIPTED.search(s) or _EMPATHY.search(s)), None)
        if template is not None and memory.scripted >= 1:
            events.append(Event("scripted", template))

        requests = [s for s in said if s not in tainted and (s.rstrip().endswith("?") or _REQUEST.search(s))]
        ask = first_match(self.detail_ask, requests)
        if ask is not None and memory.detail_known:
            events.append(Event("asked_again", ask[1]))
        asked = ask is not None and not memory.detail_known

        taken, premature = self._steps([s for s in said if s not in tainted], memory)
        events += premature
        if not (soothing or asked or taken or events):  # an acknowledgement said once too often stalls too
            events.append(Event("stall", reply[:80]))
        change = sum(getattr(rules, e.kind) for e in events) - soothing - rules.progress * (len(taken) + asked)
        return Verdict(change, tuple(taken), asked, acknowledged, template is not None, tuple(events))

    def _hostility(self, reply: str) -> list[Event]:
        """Blame and dismissal, wherever they are in the reply."""
        hits = ((kind, pattern.search(reply)) for kind, pattern in (("blame", _BLAME), ("dismissal", _DISMISSAL)))
        return [Event(kind, hit.group(0)) for kind, hit in hits if hit]

    def _card_reactions(self, said: list[str]) -> list[Event]:
        """The card's wrong promises and anger triggers, in sentences that do not negate them."""
        affirmed = [s for s in said if not _NEGATION_OR_NO.search(s)]
        events = []
        for kind, cue, line in self.reactions:
            hit = first_match((cue,), affirmed)
            if hit:
                events.append(Event(kind, hit[1], line))
        return events

    @staticmethod
    def _repeats(said: list[str], memory: Memory) -> list[Event]:
        repeated = [s for s in said if _norm(s) and _norm(s) in memory.agent_sentences]
        return [Event("repeated", repeated[0])] if repeated else []

    def _steps(self, said: list[str], memory: Memory) -> tuple[list[str], list[Event]]:
        """The open steps the reply takes (at most `max_steps_per_reply`), and those it tried too early."""
        usable = [s for s in said if not _NEGATION.search(s)]
        taken: list[str] = []
        premature: list[Event] = []
        for step, step_cues in self.steps:
            if step.id in memory.steps_done or len(taken) >= self.rules.max_steps_per_reply:
                continue
            hit = first_match(step_cues, usable)
            if hit is None:
                continue
            if step.needs_detail and not memory.detail_known:
                premature.append(Event("premature", hit[1]))
            else:
                taken.append(step.id)
        return taken, premature
