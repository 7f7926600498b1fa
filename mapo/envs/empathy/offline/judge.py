"""The offline judge: the six EMPA levels of a reply from measurable features.

Deterministic rules over sentence embeddings (all-MiniLM-L6-v2, `mapo/envs/embeddings.py`) and
phrase patterns (`judge_lexicon.py`), tuned on the calibration half of
`mapo/data/judge_exemplars/` (see `mapo env calibrate`). Every non-zero level carries
its evidence: the phrase or the feature that triggered it.

Features are `features.py`'s (its docstring lists them).

Rules (`levels_from_features`)
------------------------------
A reply *earns* progress only if it has at least MIN_WORDS words, is not a repeat
(repetition >= REPETITION), not rambling (> RAMBLING_WORDS words), carries no harm
phrase, no false reassurance ("I'm sure it'll work out", "you're doing great") and no
platitude, is not *templated* (a support formula with fewer than two shared stems) and
is not degenerate: a gain must mean a better listener, never text
that reuses their words without sense. It is *grounded* when grounding >= GROUNDED.

- C_prog 2: grounded, a reframe or resonance phrase ("maybe it isn't ...", "rather
  than", "says more about") or C2 exemplar, and grounding >= DEEP_GROUNDED.
  C_prog 1: grounded and a reflection ("so ...", "it sounds like"), a question,
  cue[C] >= CUE_C1, the C1 exemplar, or two shared stems in a paraphrase (a talk sentence
  with cosine >= PARAPHRASE to one of theirs): their nouns in a misreading are not understanding.
- A_prog 2: grounded, a hedged unstated feeling, an unstated *deep* one (shame, grief,
  fear, feeling invisible: what lies under the stated anger or sadness; an idiom such as "it's a
  shame" is read as "a pity" and names none), or a resonance
  phrase / A2 exemplar with an unstated feeling, and cue[A] >= CUE_A2 (or, for a deep one,
  grounding >= DEEP_GROUNDED). A_prog 1: grounded and a feeling
  word, a validating phrase ("makes sense", "no wonder") or the A1 exemplar.
- P_prog 2: an empowering phrase ("you get to", "what would you want", "on your
  terms") or, for a question, the P2 exemplar, when grounded or cue[P] >= CUE_P.
  P_prog 1: a directive with advice_fit >= ADVICE_FIT and no pressure, or a grounded
  affirmation of a strength ("you've already ...", "that took courage").
- C_neg -2: trivialising ("not a big deal", "at least you ...", "it's only a ...").
  C_neg -1: minimising or a platitude; rambling without DEEP_GROUNDED grounding; a
  moralising lecture that is not grounded.
- A_neg -2: invalidating ("you're overreacting", "no reason to cry", "don't be so
  dramatic"), hostile or fatalistic ("you're not going anywhere", "nothing will change"). A_neg -1, first that applies: a repeat of an earlier reply; any harm
  phrase or false reassurance; templated empathy; advice while the affective need is the
  deepest (state.deepest_axis() == "A", no A progress, at least half the sentences are
  directives); a reply of substance that earns nothing and whose grounding is below
  GENERIC or that carries at most one word of theirs and asks nothing (generic comfort).
- Degenerate families add C_neg -1 where they misread or ignore the story (word salad,
  role swap, off topic, meta, invented, keyword stuffing) and A_neg -1 for repetition or
  performed empathy (loop, role swap, off topic, meta, keyword stuffing, and *acted*: actions
  written out instead of said, "*nods slowly*", "(takes your hand)"), when not already set.
- Moves made again (`repeats.py`): a question the listener already asked however phrased, a
  statement it already made (the same reflection, validation or reassurance), an opening formula
  used turn after turn. The reply's levels of progress are those of its new sentences alone (never
  above the whole reply's), its negative levels the whole reply's, and a reply whose new part
  earns nothing gets A_neg -1 (the same routine again), as does any reply that asks a question
  again, new matter beside it or not (otherwise a re-asked reply is still paid on its other axes,
  and re-asking stays cheap for a policy; docs/judge.md).
- P_neg -2: moralising, blaming or guilt-tripping ("your own fault", "be grateful",
  "family comes first"). P_neg -1: pressure ("you need to", "you should", "just tell
  them").

Thresholds are module constants below; `mapo env calibrate` measures them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mapo.envs import embeddings
from mapo.envs.empathy.offline.features import MIN_WORDS, Features, JudgeContext, ReplyParts, extract_features
from mapo.envs.empathy.offline.judge_lexicon import DEEP_FEELINGS
from mapo.envs.empathy.offline.repeats import Repeat, fresh_text, repeated_moves
from mapo.envs.empathy.roles import NEUTRAL_LEVELS, Judgement
from mapo.text import sentences

if TYPE_CHECKING:
    from mapo.envs.dynamics import NeedState
    from mapo.envs.empathy.cards import ScenarioCard

GROUNDED = 0.42  # grounding needed for any C or A progress
GENERIC = 0.35  # below this grounding, a reply of substance that earns nothing is generic (A_neg -1)
DEEP_GROUNDED = 0.6  # grounding needed for a reframe (C_prog 2)
CUE_C1 = 0.45  # cue[C] that alone counts as understanding
CUE_A2 = 0.35  # cue[A] needed for resonance (A_prog 2)
CUE_P = 0.35  # cue[P] that lets empowerment count without grounding
ADVICE_FIT = 0.2  # advice_fit below which a suggestion is off the point
EXEMPLAR = 0.65  # cosine to our move exemplars that counts as that move
REPETITION = 0.8  # cosine to an earlier reply that counts as repeating it
PARAPHRASE = 0.6  # cosine of a talk sentence to one of theirs that makes shared words a paraphrase
RAMBLING_WORDS = 110  # longer replies bury the point

# Failure families and the rubric's negative levels for them: text that misreads or ignores
# their story (C_neg -1); repetition, or empathy performed with no one in it (A_neg -1). A
# fragment only earns nothing: what it says before the cut may be fine.
C_NEG_FAMILIES = frozenset({"word_salad", "role_swap", "off_topic", "meta", "invented", "keyword_stuffing"})
A_NEG_FAMILIES = frozenset({"loop", "role_swap", "off_topic", "meta", "keyword_stuffing", "acted"})
PROGRESS_KEYS = ("C_prog", "A_prog", "P_prog")


class OfflineJudge:
    """Rules over `Features`; deterministic; every non-zero level names its evidence."""

    def reset(self, card: ScenarioCard, seed: int | None = None) -> None:
        """Stateless: nothing to reset (the history carries the earlier turns)."""

    def judge(self, card: ScenarioCard, history: list[dict[str, str]], response: str, state: NeedState) -> Judgement:
        return self.score(JudgeContext.before_reply(card, history, response, state), response)

    def prime(self, items: list[tuple[JudgeContext, str]]) -> None:
        """Embed every text that scoring `items` will need in one batched pass (fills the cache)."""
        texts = [t for context, response in items for t in ReplyParts.of(context, response).texts(context)]
        texts += [s for context, _ in items for turn in context.own_turns for s in sentences(turn)]  # repeated_moves
        embeddings.embed(list(dict.fromkeys(texts)))

    def score(self, context: JudgeContext, response: str) -> Judgement:
        if not response.strip():
            return Judgement(levels={**NEUTRAL_LEVELS, "A_neg": -1}, evidence={"A_neg": "empty reply"})
        f = extract_features(context, response)
        levels, evidence = levels_from_features(f, context.deepest_axis)
        info: dict[str, Any] = {"features": _summary(f)}
        found = repeated_moves(f.sentences, context.own_turns)
        if found:
            levels, evidence = _without_repeats(context, f, found, levels, evidence)
            info["repeats"] = [r.evidence() for r in found]
        return Judgement(levels=levels, evidence=evidence, info=info)


def _without_repeats(
    context: JudgeContext, f: Features, found: list[Repeat], levels: dict[str, int], evidence: dict[str, str]
) -> tuple[dict[str, int], dict[str, str]]:
    """Progress only for what the reply says that is new (`found` are its repeats); its negative
    levels stand, and a reply whose new part earns nothing, or that asks a question again, is the
    same routine again (A_neg -1)."""
    fresh = fresh_text(f.sentences, found)
    if fresh.strip():
        new_levels, new_evidence = levels_from_features(extract_features(context, fresh), context.deepest_axis)
    else:
        new_levels, new_evidence = dict(NEUTRAL_LEVELS), {}
    out, ev = dict(levels), dict(evidence)
    for key in PROGRESS_KEYS:
        out[key] = min(levels[key], new_levels[key])
        if out[key]:
            ev[key] = new_evidence[key]
        else:
            ev.pop(key, None)
    # A question they already answered tells them they were not heard, whatever else the reply says.
    asked = [r for r in found if r.kind == "question"]
    if out["A_neg"] == 0 and (asked or not any(out[key] for key in PROGRESS_KEYS)):
        out["A_neg"], ev["A_neg"] = -1, (asked or found)[0].evidence()
    return out, ev


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
    harmful = bool(h["invalidating"] or h["trivialising"] or h["moralising"] or h["minimising"] or h["reassurance"])
    degenerate = f.degenerate
    earns = f.n_words >= MIN_WORDS and not (
        repeated or rambling or harmful or templated or h["platitude"] or degenerate
    )

    if earns and grounded and f.sentences != f.directives:
        reframe = h["reframe"] or h["resonance"] or _close(f, "C2")
        if reframe and f.grounding >= DEEP_GROUNDED:
            put("C_prog", 2, reframe[0])
        # Naming their nouns is not understanding them (a policy learns to drop their words into
        # a misreading): shared words count only in a close paraphrase of what they said.
        elif (
            h["reflect"] or f.questions or f.cue["C"] >= CUE_C1 or _close(f, "C1")
            or (len(f.shared) >= 2 and f.ground_sem >= PARAPHRASE)
        ):
            put("C_prog", 1, "names " + ", ".join(f.shared[:4]) if f.shared else f.cue_sentence["C"])
        deep = [w for w in f.unstated_feelings if w in DEEP_FEELINGS]
        resonance = f.hedged_unstated or deep or (h["resonance"] or _close(f, "A2") if f.unstated_feelings else [])
        # A deep feeling they have not named, in a reply that carries their story closely, is
        # resonance even where the card's own validation cues are worded differently.
        if resonance and (f.cue["A"] >= CUE_A2 or (deep and f.grounding >= DEEP_GROUNDED)):
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
        put("A_neg", -1, (h["trivialising"] or h["minimising"] or h["moralising"] or h["reassurance"])[0])
    elif templated:
        put("A_neg", -1, h["template"][0])
    elif deepest_axis == "A" and lv["A_prog"] == 0 and f.directives and 2 * len(f.directives) >= len(f.sentences):
        put("A_neg", -1, "advice while the affective need is deepest: " + f.directives[0])
    elif f.n_words >= MIN_WORDS and not any(lv[k] for k in ("C_prog", "A_prog", "P_prog")) and (
        f.grounding < GENERIC or (len(f.shared) <= 1 and not f.questions and not degenerate)
    ):
        # Comfort that could be said to anyone is performed, not given: a contentless line must
        # not be a zero-cost harbour for a policy that has learned its attempts are punished.
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
