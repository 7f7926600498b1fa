"""The features the offline judge's rules read, computed once per reply (`extract_features`).

- sentences, split into *directives* (an imperative opening such as "Try ..." or
  "Then queue ...", "you could <action verb>", "it might help to ...", "consider",
  or pressure such as "you need to" where it opens a clause) and *talk* (the rest).
  Understanding and validation are read from talk only: advice that names the
  situation does not pass for understanding it.
- `shared`: content-word stems of the talk also found in the situation or the user's
  messages (the user's messages carry every story stage revealed so far).
- `ground_sem`: best cosine of a talk sentence to a sentence of the situation or the
  user's messages.
- `cue[X]`: best cosine of a reply sentence (talk only for C and A) to the card's own
  cues for axis X (understanding, validation, empowerment).
- `grounding` = max(ground_sem, cue[C], cue[A]) + SHARED_WEIGHT x min(|shared|, 5):
  how much of *their* story the reply carries. Generic comfort scores ~0.2-0.4,
  grounded replies 0.5-1.1.
- `advice_fit`: the same for the directives, against the context and the P cues.
- `exemplar[move]`: best cosine of a talk sentence to our topic-free examples of each
  move (C1 clarify, C2 reframe, A1 validate, A2 resonate, P1 affirm/suggest,
  P2 empower); a backstop for phrasings the patterns miss, at EXEMPLAR.
- template / harm formulas: pattern families (templated empathy, platitudes,
  trivialising, minimising, invalidating, pressure, moralising) plus, for paraphrases,
  cosine >= TEMPLATE_SIM / HARM_SIM to banks of such formulas. A harm phrase inside
  quotes, echoing the user's own words, or reporting what someone said ("being told
  to move on") does not count; "you're not overreacting" is validation, not harm. A
  reframe phrase counts only outside sentences in the assistant's own voice (first person
  without "you", apart from its view: "I wonder if ...").
- feelings: feeling words in the talk; *unstated* ones the user has not used;
  *hedged unstated*: a talk sentence naming an unstated feeling tentatively
  ("maybe", "I wonder", "it sounds like", "underneath").
- `repetition`: best cosine of the reply to one of the policy's earlier replies.
- length in words.

- `degenerate`: the failure families of `mapo.degeneracy` (loop, fragment, role swap,
  invented people, keyword stuffing, word salad), plus *off topic*: at least
  OFF_TOPIC_SHARE of the talk's words in sentences whose best cosine to their story and
  cues is below OFF_TOPIC, with fewer than OFF_TOPIC_SHARED stems of theirs and at least
  OFF_TOPIC_OWN of its own (generic comfort has few: it is templated instead).
  And *meta*: the reply talking about itself as a machine or about its own text ("as an AI,
  I don't have access to ...", "This sentence is ..."); *acted*: actions written out instead
  of said ("*nods slowly*", "(takes your hand)", `mapo.envs.empathy.narration.acted`).

The thresholds below are the judge's too; `mapo env calibrate` measures them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from mapo import degeneracy
from mapo.degeneracy import FIRST_PERSON, SECOND_PERSON
from mapo.envs import embeddings
from mapo.envs.empathy.narration import acted
from mapo.envs.empathy.offline.judge_lexicon import (
    AGREEING,
    ASSISTANT_VIEW,
    AXIS_EXEMPLARS,
    CLAUSE_OPENERS,
    FEELING_STEMS,
    FEELINGS,
    HARM_EXEMPLARS,
    HARM_FAMILIES,
    HEDGE,
    IMPERATIVE_VERBS,
    LEADING_WORDS,
    MODAL_SUGGESTION,
    NOT_SELF_CRITICISM,
    PATTERN_FAMILIES,
    PRESSURE,
    REPORTED_SPEECH,
    REPORTING_WORDS,
    SUGGESTION,
    TEMPLATE_EXEMPLARS,
    WEIGHING,
    read_idioms,
)
from mapo.text import QUOTED, content_stems, sentences, stem, words

if TYPE_CHECKING:
    from mapo.envs.dynamics import NeedState
    from mapo.envs.empathy.cards import ScenarioCard

SHARED_WEIGHT = 0.06  # grounding per content stem shared with their story (up to 5)
TEMPLATE_SIM = 0.6  # cosine to a support formula that makes a sentence templated
HARM_SIM = 0.6  # cosine to a dismissive/invalidating/moralising formula that counts as one
MIN_WORDS = 6  # shorter replies carry no substance
OFF_TOPIC = 0.33  # a talk sentence whose best cosine to their story and cues is below this is astray ...
OFF_TOPIC_SHARE = 0.6  # ... and a reply with this share of its talk words astray is off topic, if it
OFF_TOPIC_SHARED = 3  # ... shares fewer content words than this with their story ...
OFF_TOPIC_OWN = 6  # ... and brings this many of its own (generic comfort has few; it is templated, not off topic)
CUE_FIELDS = {"C": "understanding", "A": "validation", "P": "empowerment"}


@dataclass
class JudgeContext:
    """What the offline judge looks at besides the reply itself."""

    situation: str
    cues: dict[str, list[str]]  # axis C/A/P -> what understanding / validation / empowerment means here
    user_turns: list[str]  # the user's messages so far (revealed story stages arrive through these)
    own_turns: list[str]  # the policy's earlier replies
    deepest_axis: str  # the most negative axis of P_{t-1}
    background: list[str] = field(default_factory=list)  # true of their life, not said yet (the card's stages)
    history: list[dict[str, str]] = field(default_factory=list)  # the dialogue as chat messages (for an LLM judge's transcript)

    @classmethod
    def before_reply(cls, card: ScenarioCard, history: list[dict[str, str]], response: str, state: NeedState) -> JudgeContext:
        """The context a judge scores `response` in: the history up to it (a history that already
        ends with the reply, as the environment passes it, has that message dropped)."""
        if history and history[-1].get("role") == "assistant" and history[-1].get("content") == response:
            history = history[:-1]
        return cls.from_dialogue(card, history, state)

    @classmethod
    def from_dialogue(cls, card: ScenarioCard, history: list[dict[str, str]], state: NeedState) -> JudgeContext:
        return cls(
            situation=card.situation,
            cues={axis: list(getattr(card.cues, name)) for axis, name in CUE_FIELDS.items()},
            user_turns=[m["content"] for m in history if m.get("role") == "user"],
            own_turns=[m["content"] for m in history if m.get("role") == "assistant"],
            deepest_axis=state.deepest_axis(),
            background=card.background(),
            history=list(history),
        )


@dataclass
class Features:
    """Everything the level rules look at, computed once per reply.

    "Talk" sentences are the reply's sentences that do not tell the person what to
    do; understanding and validation are read from them only, so advice that names
    the situation does not pass for understanding it.
    """

    n_words: int
    sentences: list[str]
    directives: list[str]  # sentences that tell them what to do (imperative, "you could", "you should")
    questions: list[str]  # talk sentences ending in "?"
    shared: list[str]  # content stems of talk sentences shared with the situation and the user's messages
    ground_sem: float  # best cosine of a talk sentence to a sentence of the situation or the user's messages
    grounding: float  # max(ground_sem, best C/A cue cosine) + SHARED_WEIGHT per shared stem (up to 5)
    advice_fit: float  # the same for the directive sentences, against the context and the P cues
    cue: dict[str, float]  # per axis: best cosine of a reply sentence (talk only for C and A) to the card's cues
    cue_sentence: dict[str, str]
    exemplar: dict[str, float]  # per move C1..P2: best cosine of a talk sentence to our exemplars of that move
    repetition: float  # best cosine of the whole reply to one of the policy's earlier replies
    repeated: str
    hits: dict[str, list[str]] = field(default_factory=dict)  # pattern family -> matched phrases
    feelings: list[str] = field(default_factory=list)  # feeling words in talk sentences
    unstated_feelings: list[str] = field(default_factory=list)  # ... that the user has not used
    hedged_unstated: list[str] = field(default_factory=list)  # talk sentences naming one tentatively ("maybe ... shame")
    degenerate: dict[str, str] = field(default_factory=dict)  # failure family -> evidence (`mapo.degeneracy`, off_topic)


def _is_directive(sentence: str) -> bool:
    lead = words(sentence)[:3]
    while lead and lead[0] in LEADING_WORDS:
        lead = lead[1:]
    if lead and lead[0] in IMPERATIVE_VERBS and not sentence.rstrip().endswith("?"):
        return True
    pressure = any(
        not _reported(sentence, m.start()) and _clause_start(sentence, m.start()) for m in PRESSURE.finditer(sentence)
    )
    modal = any(m.group(1).lower() in IMPERATIVE_VERBS for m in MODAL_SUGGESTION.finditer(sentence))
    return bool(pressure or modal or SUGGESTION.search(sentence))


def _reported(text: str, start: int) -> bool:
    """True when the phrase at `start` reports what someone thinks or was told ("it means you
    have to ...", "being told to move on") or weighs their options ("whether to ... or let it
    go") instead of saying it to the person."""
    before = words(text[:start])[-2:]
    if (before and before[-1] in REPORTING_WORDS) or WEIGHING.search(text[:start]):
        return True
    return len(before) == 2 and before[1] == "to" and before[0] in REPORTED_SPEECH


def _clause_start(text: str, start: int) -> bool:
    """True when `start` opens a clause: after punctuation, at the start, or after a discourse word
    ("so you need to ..."), not inside a question or relative clause ("what would you need to know")."""
    before = text[:start].rstrip()
    if not before or before[-1] in ".,;:!?-\u2014(\"":
        return True
    last = words(before)[-1:]
    return bool(last) and last[0] in CLAUSE_OPENERS


def _own_voice(sentence: str) -> bool:
    """True for a sentence about the assistant itself: first person with no "you", apart from
    the listener's own view ("I think it was ...", "I wonder if ...")."""
    tokens = set(words(ASSISTANT_VIEW.sub(" ", sentence)))
    return bool(FIRST_PERSON & tokens) and not SECOND_PERSON & tokens


def _hits(response: str, user_text: str, talk: list[str]) -> dict[str, list[str]]:
    """Phrases of each family. Harm phrases inside quotes, echoing the user's own words (unless
    the reply agrees with them: "you're right, it's only a race"), reporting what someone
    thinks, or denied ("it isn't petty") do not count; pressure counts only where it opens a
    clause. A reframe counts only in talk sentences not in the assistant's own voice ("just
    because I can't ... doesn't mean I'm ..." is about itself, not a new way for them to see
    what happened)."""
    unquoted = QUOTED.sub(" ", response)
    denied = [m.span() for m in NOT_SELF_CRITICISM.finditer(unquoted)]  # "it isn't petty to ..."
    out = {}
    for name, pattern in PATTERN_FAMILIES.items():
        if name in HARM_FAMILIES:
            found = [
                m for m in pattern.finditer(unquoted)
                if not _reported(unquoted, m.start())
                and (name != "pressure" or _clause_start(unquoted, m.start()))
                and not any(a <= m.start() < b for a, b in denied)
            ]
            out[name] = [
                m.group(0) for m in found
                if m.group(0).lower() not in user_text or AGREEING.search(unquoted[: m.start()])
            ]
        elif name == "reframe":
            theirs = " ".join(s for s in talk if not _own_voice(s))
            out[name] = [m.group(0) for m in pattern.finditer(theirs)]
        else:
            out[name] = [m.group(0) for m in pattern.finditer(response)]
    return out


def _best(sim: np.ndarray, units: list[str]) -> tuple[float, str]:
    if sim.size == 0:
        return 0.0, ""
    row = int(np.argmax(sim.max(axis=1)))
    return float(sim.max()), units[row]


class _Similarity:
    """Cosines between texts embedded together in one encoder call."""

    def __init__(self, texts: list[str]) -> None:
        unique = list(dict.fromkeys(texts))
        self.index = {t: i for i, t in enumerate(unique)}
        self.vectors = embeddings.embed(unique)

    def __call__(self, a: list[str], b: list[str]) -> np.ndarray:
        if not a or not b:
            return np.zeros((len(a), len(b)))
        return self.vectors[[self.index[t] for t in a]] @ self.vectors[[self.index[t] for t in b]].T


EXEMPLAR_TEXTS = (
    [t for ts in AXIS_EXEMPLARS.values() for t in ts]
    + TEMPLATE_EXEMPLARS
    + [t for ts in HARM_EXEMPLARS.values() for t in ts]
)


@dataclass
class ReplyParts:
    """A reply cut into what gets measured, and the context's sentences and cues."""

    response: str
    sents: list[str]
    directives: list[str]
    talk: list[str]
    context_sents: list[str]
    cues: dict[str, list[str]]

    @classmethod
    def of(cls, context: JudgeContext, response: str) -> ReplyParts:
        sents = sentences(response) or [response.strip()]
        directives = [s for s in sents if _is_directive(s)]
        talk = [s for s in sents if s not in directives]
        return cls(
            response=response,
            sents=sents,
            directives=directives,
            talk=talk,
            context_sents=[s for t in (context.situation, *context.user_turns) for s in sentences(t)],
            cues={axis: context.cues.get(axis, []) for axis in "CAP"},
        )

    def texts(self, context: JudgeContext) -> list[str]:
        flat_cues = [c for axis in "CAP" for c in self.cues[axis]]
        whole = [self.response, *context.own_turns] if context.own_turns else []  # for the repetition check
        return [*self.sents, *self.context_sents, *flat_cues, *EXEMPLAR_TEXTS, *whole]


def extract_features(context: JudgeContext, response: str) -> Features:
    """Measure one reply against its context (see the module docstring for each feature)."""
    response = read_idioms(response)  # an idiom's feeling word ("it's a shame") names no feeling
    parts = ReplyParts.of(context, response)
    sents, directives, talk = parts.sents, parts.directives, parts.talk
    context_sents, cue_texts = parts.context_sents, parts.cues
    talk_text = " ".join(talk)
    context_texts = [context.situation, *context.user_turns]
    context_stems = set().union(*(content_stems(t) for t in context_texts))
    user_stems = set().union(*(content_stems(t) for t in context.user_turns)) if context.user_turns else set()
    shared = sorted((content_stems(talk_text) & context_stems) - FEELING_STEMS)
    flat_cues = [c for axis in "CAP" for c in cue_texts[axis]]
    # Every text of this step goes to the encoder in one batch (cached ones cost nothing).
    sim = _Similarity(parts.texts(context))
    sim_talk_ctx = sim(talk, context_sents)
    sim_dir_ctx = sim(directives, context_sents)
    sim_talk_cue = sim(talk, flat_cues)
    sim_all_cue = sim(sents, flat_cues)
    sim_ex = sim(sents, EXEMPLAR_TEXTS)
    n_moves = sum(len(ts) for ts in AXIS_EXEMPLARS.values())
    sim_template = sim_ex[:, n_moves : n_moves + len(TEMPLATE_EXEMPLARS)].max(axis=1)
    sim_harm, start = {}, n_moves + len(TEMPLATE_EXEMPLARS)
    for family, texts in HARM_EXEMPLARS.items():
        sim_harm[family] = sim_ex[:, start : start + len(texts)].max(axis=1)
        start += len(texts)
    sim_ex = sim_ex[[i for i, s in enumerate(sents) if s in talk], :n_moves]

    cue, cue_sentence, start = {}, {}, 0
    for axis in "CAP":
        n = len(cue_texts[axis])
        matrix, units = (sim_all_cue, sents) if axis == "P" else (sim_talk_cue, talk)
        cue[axis], cue_sentence[axis] = _best(matrix[:, start : start + n] if matrix.size else matrix, units)
        start += n
    exemplar, start = {}, 0
    for move, texts in AXIS_EXEMPLARS.items():
        block = sim_ex[:, start : start + len(texts)]
        exemplar[move] = float(block.max()) if block.size else 0.0
        start += len(texts)

    ground_sem = float(sim_talk_ctx.max()) if sim_talk_ctx.size else 0.0
    grounding = max(ground_sem, cue["C"], cue["A"]) + SHARED_WEIGHT * min(len(shared), 5)
    advice_fit = 0.0
    if directives:
        dir_shared = (content_stems(" ".join(directives)) & context_stems) - FEELING_STEMS
        dir_cue = sim(directives, cue_texts["P"]).max() if cue_texts["P"] else 0.0
        dir_ctx = sim_dir_ctx.max() if sim_dir_ctx.size else 0.0
        advice_fit = float(max(dir_ctx, dir_cue)) + SHARED_WEIGHT * min(len(dir_shared), 5)

    repetition, repeated = 0.0, ""
    if context.own_turns:
        sim_own = sim([response], context.own_turns)[0]
        k = int(np.argmax(sim_own))
        repetition, repeated = float(sim_own[k]), context.own_turns[k]

    feelings = [w for w in words(talk_text) if w in FEELINGS]
    unstated = [w for w in feelings if stem(w) not in user_stems]
    hedged = [s for s in talk if HEDGE.search(s) and any(w in FEELINGS and stem(w) not in user_stems for w in words(s))]
    hits = _hits(response, " ".join(context.user_turns).lower(), talk)
    hits["template"] += [f"(close to a support formula) {s}" for s, cos in zip(sents, sim_template) if cos >= TEMPLATE_SIM]
    for family, cosines in sim_harm.items():
        hits[family] += [
            f"(close to a {family} formula) {s}"
            for s, cos in zip(sents, cosines)
            if cos >= HARM_SIM and not NOT_SELF_CRITICISM.search(s)
        ]
    degenerate = {
        f.family: f.evidence
        for f in degeneracy.find(response, context.user_turns, [context.situation], context.background)
    }
    # Off topic: talk (advice is judged by its fit instead) about something else than their story.
    relevance = sim(talk, context_sents + flat_cues)
    if relevance.size and len(words(talk_text)) >= MIN_WORDS:
        lengths = np.array([len(words(s)) for s in talk], dtype=float)
        astray = float(((relevance.max(axis=1) < OFF_TOPIC) * lengths).sum() / max(lengths.sum(), 1.0))
        own = content_stems(talk_text) - FEELING_STEMS
        if astray >= OFF_TOPIC_SHARE and len(own & context_stems) < OFF_TOPIC_SHARED and len(own - context_stems) >= OFF_TOPIC_OWN:
            degenerate["off_topic"] = f"{astray:.0%} of its words are about something else"
    if hits["meta"]:  # about itself as a machine or about its own text: nothing said to them
        degenerate["meta"] = hits["meta"][0]
    performed = acted(response)  # "*nods slowly*": empathy performed, not given
    if performed:
        degenerate["acted"] = performed
    return Features(
        n_words=len(words(response)),
        sentences=sents,
        directives=directives,
        questions=[s for s in talk if s.rstrip().endswith("?")],
        shared=shared,
        ground_sem=ground_sem,
        grounding=grounding,
        advice_fit=advice_fit,
        cue=cue,
        cue_sentence=cue_sentence,
        exemplar=exemplar,
        repetition=repetition,
        repeated=repeated,
        hits=hits,
        feelings=feelings,
        unstated_feelings=unstated,
        hedged_unstated=hedged,
        degenerate=degenerate,
    )
