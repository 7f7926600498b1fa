"""The offline judge: the six EMPA levels of a reply from measurable features.

Deterministic rules over sentence embeddings (all-MiniLM-L6-v2, `embeddings.py`) and
phrase patterns (`judge_lexicon.py`), tuned on the calibration half of
`mapo/data/judge_exemplars/` (see `mapo env calibrate`). Every non-zero level carries
its evidence: the phrase or the feature that triggered it.

Features of a reply (`extract_features`)
----------------------------------------
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
  to move on") does not count; "you're not overreacting" is validation, not harm.
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

Rules (`levels_from_features`)
------------------------------
A reply *earns* progress only if it has at least MIN_WORDS words, is not a repeat
(repetition >= REPETITION), not rambling (> RAMBLING_WORDS words), carries no harm
phrase and no platitude, is not *templated* (a support formula with fewer than two
shared stems) and is not degenerate: a gain must mean a better listener, never text
that reuses their words without sense. It is *grounded* when grounding >= GROUNDED.

- C_prog 2: grounded, a reframe or resonance phrase ("maybe it isn't ...", "rather
  than", "says more about") or C2 exemplar, and grounding >= DEEP_GROUNDED.
  C_prog 1: grounded and a reflection ("so ...", "it sounds like"), a question, two
  shared stems, cue[C] >= CUE_C1 or the C1 exemplar.
- A_prog 2: grounded, a hedged unstated feeling, an unstated *deep* one (shame, grief,
  fear, feeling invisible: what lies under the stated anger or sadness), or a resonance
  phrase / A2 exemplar with an unstated feeling, and cue[A] >= CUE_A2. A_prog 1: grounded and a feeling
  word, a validating phrase ("makes sense", "no wonder") or the A1 exemplar.
- P_prog 2: an empowering phrase ("you get to", "what would you want", "on your
  terms") or, for a question, the P2 exemplar, when grounded or cue[P] >= CUE_P.
  P_prog 1: a directive with advice_fit >= ADVICE_FIT and no pressure, or a grounded
  affirmation of a strength ("you've already ...", "that took courage").
- C_neg -2: trivialising ("not a big deal", "at least you ...", "it's only a ...").
  C_neg -1: minimising or a platitude; rambling without DEEP_GROUNDED grounding; a
  moralising lecture that is not grounded.
- A_neg -2: invalidating ("you're overreacting", "no reason to cry", "don't be so
  dramatic"). A_neg -1, first that applies: a repeat of an earlier reply; any harm
  phrase; templated empathy; advice while the affective need is the deepest
  (state.deepest_axis() == "A", no A progress, at least half the sentences are
  directives); a reply of substance that earns nothing and whose grounding is below
  GENERIC (generic comfort).
- Degenerate families add C_neg -1 where they misread or ignore the story (word salad,
  role swap, off topic, invented, keyword stuffing) and A_neg -1 for repetition or
  performed empathy (loop, role swap, off topic, keyword stuffing), when not already set.
- P_neg -2: moralising, blaming or guilt-tripping ("your own fault", "be grateful",
  "family comes first"). P_neg -1: pressure ("you need to", "you should", "just tell
  them").

Thresholds are module constants below; `mapo env calibrate` measures them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from mapo import degeneracy
from mapo.envs.empathy import embeddings
from mapo.envs.empathy.judge_lexicon import (
    AGREEING,
    AXIS_EXEMPLARS,
    CLAUSE_OPENERS,
    DEEP_FEELINGS,
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
    QUOTED,
    REPORTED_SPEECH,
    REPORTING_WORDS,
    SUGGESTION,
    TEMPLATE_EXEMPLARS,
    WEIGHING,
)
from mapo.envs.empathy.roles import NEUTRAL_LEVELS, Judgement
from mapo.text import content_stems, sentences, stem, words

if TYPE_CHECKING:
    from mapo.envs.dynamics import NeedState
    from mapo.envs.empathy.cards import ScenarioCard

SHARED_WEIGHT = 0.06  # grounding per content stem shared with their story (up to 5)
GROUNDED = 0.42  # grounding needed for any C or A progress
GENERIC = 0.35  # below this grounding, a reply of substance that earns nothing is generic (A_neg -1)
DEEP_GROUNDED = 0.6  # grounding needed for a reframe (C_prog 2)
CUE_C1 = 0.45  # cue[C] that alone counts as understanding
CUE_A2 = 0.35  # cue[A] needed for resonance (A_prog 2)
CUE_P = 0.35  # cue[P] that lets empowerment count without grounding
ADVICE_FIT = 0.2  # advice_fit below which a suggestion is off the point
EXEMPLAR = 0.65  # cosine to our move exemplars that counts as that move
TEMPLATE_SIM = 0.6  # cosine to a support formula that makes a sentence templated
HARM_SIM = 0.6  # cosine to a dismissive/invalidating/moralising formula that counts as one
MIN_WORDS = 6  # shorter replies carry no substance
REPETITION = 0.8  # cosine to an earlier reply that counts as repeating it
RAMBLING_WORDS = 110  # longer replies bury the point
OFF_TOPIC = 0.33  # a talk sentence whose best cosine to their story and cues is below this is astray ...
OFF_TOPIC_SHARE = 0.6  # ... and a reply with this share of its talk words astray is off topic, if it
OFF_TOPIC_SHARED = 3  # ... shares fewer content words than this with their story ...
OFF_TOPIC_OWN = 6  # ... and brings this many of its own (generic comfort has few; it is templated, not off topic)

CUE_FIELDS = {"C": "understanding", "A": "validation", "P": "empowerment"}
# Failure families and the rubric's negative levels for them: text that misreads or ignores
# their story (C_neg -1); repetition, or empathy performed with no one in it (A_neg -1). A
# fragment only earns nothing: what it says before the cut may be fine.
C_NEG_FAMILIES = frozenset({"word_salad", "role_swap", "off_topic", "invented", "keyword_stuffing"})
A_NEG_FAMILIES = frozenset({"loop", "role_swap", "off_topic", "keyword_stuffing"})


@dataclass
class JudgeContext:
    """What the offline judge looks at besides the reply itself."""

    situation: str
    cues: dict[str, list[str]]  # axis C/A/P -> what understanding / validation / empowerment means here
    user_turns: list[str]  # the user's messages so far (revealed story stages arrive through these)
    own_turns: list[str]  # the policy's earlier replies
    deepest_axis: str  # the most negative axis of P_{t-1}
    background: list[str] = field(default_factory=list)  # true of their life, not said yet (the card's stages)

    @classmethod
    def from_dialogue(cls, card: ScenarioCard, history: list[dict[str, str]], state: NeedState) -> JudgeContext:
        return cls(
            situation=card.situation,
            cues={axis: list(getattr(card.cues, name)) for axis, name in CUE_FIELDS.items()},
            user_turns=[m["content"] for m in history if m.get("role") == "user"],
            own_turns=[m["content"] for m in history if m.get("role") == "assistant"],
            deepest_axis=state.deepest_axis(),
            background=card.background(),
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


def _hits(response: str, user_text: str) -> dict[str, list[str]]:
    """Phrases of each family. Harm phrases inside quotes, echoing the user's own words (unless
    the reply agrees with them: "you're right, it's only a race"), reporting what someone
    thinks, or denied ("it isn't petty") do not count; pressure counts only where it opens a
    clause."""
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
class _Parts:
    """A reply cut into what gets measured, and the context's sentences and cues."""

    response: str
    sents: list[str]
    directives: list[str]
    talk: list[str]
    context_sents: list[str]
    cues: dict[str, list[str]]

    @classmethod
    def of(cls, context: JudgeContext, response: str) -> _Parts:
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
    parts = _Parts.of(context, response)
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
    hits = _hits(response, " ".join(context.user_turns).lower())
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


class OfflineJudge:
    """Rules over `Features`; deterministic; every non-zero level names its evidence."""

    def reset(self, card: ScenarioCard, seed: int | None = None) -> None:
        """Stateless: nothing to reset (the history carries the earlier turns)."""

    def judge(self, card: ScenarioCard, history: list[dict[str, str]], response: str, state: NeedState) -> Judgement:
        if history and history[-1].get("role") == "assistant" and history[-1].get("content") == response:
            history = history[:-1]
        return self.score(JudgeContext.from_dialogue(card, history, state), response)

    def prime(self, items: list[tuple[JudgeContext, str]]) -> None:
        """Embed every text that scoring `items` will need in one batched pass (fills the cache)."""
        texts = [t for context, response in items for t in _Parts.of(context, response).texts(context)]
        embeddings.embed(list(dict.fromkeys(texts)))

    def score(self, context: JudgeContext, response: str) -> Judgement:
        if not response.strip():
            return Judgement(levels={**NEUTRAL_LEVELS, "A_neg": -1}, evidence={"A_neg": "empty reply"})
        f = extract_features(context, response)
        levels, evidence = levels_from_features(f, context.deepest_axis)
        return Judgement(levels=levels, evidence=evidence, info={"features": _summary(f)})


def _summary(f: Features) -> dict[str, Any]:
    return {
        "n_words": f.n_words,
        "shared": f.shared,
        "grounding": round(f.grounding, 3),
        "advice_fit": round(f.advice_fit, 3),
        "cue": {a: round(v, 3) for a, v in f.cue.items()},
        "exemplar": {m: round(v, 3) for m, v in f.exemplar.items()},
        "repetition": round(f.repetition, 3),
        "hits": {k: v for k, v in f.hits.items() if v},
        "directives": len(f.directives),
        "unstated_feelings": f.unstated_feelings,
        "degenerate": f.degenerate,
    }


def _close(f: Features, move: str) -> list[str]:
    """Evidence that a talk sentence is close to our exemplars of `move` (a backstop for
    phrasings the patterns miss), or nothing."""
    return [f"(close to our {move} exemplars)"] if f.exemplar[move] >= EXEMPLAR else []


def levels_from_features(f: Features, deepest_axis: str) -> tuple[dict[str, int], dict[str, str]]:
    """The six levels and their evidence, by the rules in the module docstring."""
    lv = dict(NEUTRAL_LEVELS)
    ev: dict[str, str] = {}
    h = f.hits

    def put(key: str, level: int, evidence: str) -> None:
        lv[key], ev[key] = level, evidence

    # A support formula with barely a word from their story is templated, whatever else it says.
    templated = bool(h["template"]) and len(f.shared) < 2
    grounded = f.grounding >= GROUNDED and not templated
    repeated = f.repetition >= REPETITION
    rambling = f.n_words > RAMBLING_WORDS
    harmful = bool(h["invalidating"] or h["trivialising"] or h["moralising"] or h["minimising"])
    degenerate = f.degenerate
    earns = f.n_words >= MIN_WORDS and not (
        repeated or rambling or harmful or templated or h["platitude"] or degenerate
    )

    if earns and grounded and f.sentences != f.directives:
        reframe = h["reframe"] or h["resonance"] or _close(f, "C2")
        if reframe and f.grounding >= DEEP_GROUNDED:
            put("C_prog", 2, reframe[0])
        elif h["reflect"] or f.questions or len(f.shared) >= 2 or f.cue["C"] >= CUE_C1 or _close(f, "C1"):
            put("C_prog", 1, "names " + ", ".join(f.shared[:4]) if f.shared else f.cue_sentence["C"])
        deep = [w for w in f.unstated_feelings if w in DEEP_FEELINGS]
        resonance = f.hedged_unstated or deep or (h["resonance"] or _close(f, "A2") if f.unstated_feelings else [])
        if resonance and f.cue["A"] >= CUE_A2:
            put("A_prog", 2, resonance[0])
        elif f.feelings or h["validate"] or _close(f, "A1"):
            put("A_prog", 1, (f.feelings or h["validate"] or _close(f, "A1"))[0])
    if earns:
        empower = h["empower"] or (_close(f, "P2") if f.questions else [])
        if empower and (grounded or f.cue["P"] >= CUE_P):
            put("P_prog", 2, empower[0])
        elif f.directives and f.advice_fit >= ADVICE_FIT and not h["pressure"]:
            put("P_prog", 1, f.directives[0])
        elif grounded and (h["affirm"] or _close(f, "P1")):
            put("P_prog", 1, (h["affirm"] or _close(f, "P1"))[0])

    if h["trivialising"]:
        put("C_neg", -2, h["trivialising"][0])
    elif h["minimising"] or h["platitude"]:
        put("C_neg", -1, (h["minimising"] or h["platitude"])[0])
    elif rambling and f.grounding < DEEP_GROUNDED:
        put("C_neg", -1, f"{f.n_words} words that bury their point")
    elif h["moralising"] and not grounded:
        put("C_neg", -1, "lecture that ignores the situation: " + h["moralising"][0])

    if h["invalidating"]:
        put("A_neg", -2, h["invalidating"][0])
    elif repeated:
        put("A_neg", -1, f"repeats an earlier reply (cosine {f.repetition:.2f}): {f.repeated[:80]}")
    elif harmful:  # dismissing the problem or lecturing also leaves the feelings unmet
        put("A_neg", -1, (h["trivialising"] or h["minimising"] or h["moralising"])[0])
    elif templated:
        put("A_neg", -1, h["template"][0])
    elif deepest_axis == "A" and lv["A_prog"] == 0 and f.directives and 2 * len(f.directives) >= len(f.sentences):
        put("A_neg", -1, "advice while the affective need is deepest: " + f.directives[0])
    elif f.grounding < GENERIC and f.n_words >= MIN_WORDS and not any(lv[k] for k in ("C_prog", "A_prog", "P_prog")):
        put("A_neg", -1, "generic: nothing from their story")

    # Degenerate text earns nothing (above) and, where the rubric has a level for it, loses:
    # misreading their story (C_neg), repetition or performative empathy (A_neg).
    for family, evidence in degenerate.items():
        if family in C_NEG_FAMILIES and lv["C_neg"] == 0:
            put("C_neg", -1, f"{family}: {evidence}")
        if family in A_NEG_FAMILIES and lv["A_neg"] == 0:
            put("A_neg", -1, f"{family}: {evidence}")

    if h["moralising"]:
        put("P_neg", -2, h["moralising"][0])
    elif h["pressure"]:
        put("P_neg", -1, h["pressure"][0])
    return lv, ev
