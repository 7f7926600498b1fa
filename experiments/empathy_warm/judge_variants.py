"""Judge rounds tried against issue 59's blind readers (twenty-first session), each a change to the
offline judge's levels applied over today's rules, measured before any is kept. Usage:

    python experiments/empathy_warm/judge_variants.py agreement [--variant V] docs/blind/empathy-again-s0 ...
    python experiments/empathy_warm/judge_variants.py calibrate [--variant V] [SPLIT ...]

Variants (default `today`, the judge as it is):
- `heavier`: a degenerate reply (word salad, invented people, loop, fragment, ...) takes the heaviest
  penalties, C_neg -2, A_neg -2 and P_neg -1, instead of -1 on C or A;
- `phrase`: a sentence that says again a run of PHRASE_WORDS words of the listener's earlier replies,
  one of them a content word, the run not the person's own words, is a statement made again ("the
  part you're holding onto" in five replies), beside today's repeats by meaning. Defined (twenty-
  second session) from a proxy over the nine rated sets of issue 59: the side with fewer such replies
  is the reader's in 115 of 186 decisive pairs, where the recorded EPM-Q orders 117 of 201. As a
  judge rule on those nine sets it orders 117 of 201, today's judge 126; fixed before the ratings of
  empathy-reask-s1, the set it is then tested on once;
Two rounds measured here the same way then became the judge's rules, and `today` before their
commits gives the figures before them: `reask-costs`, a question asked again costing A_neg -1 beside
new matter (f6a51db), and `idiom`, "it's a shame" read as "a pity", which names no feeling
(`judge_lexicon.read_idioms`, twenty-third session, after issue 59's re-ask study trained).

`agreement`: each blind set's dialogues scored again (`mapo.lab.blind.rescore`), how often EPM-Q
orders a decisive pair as the reader did. `calibrate`: the judge's pairwise accuracy on the labelled
exemplars (`mapo env calibrate`'s figures; default splits calibration, heldout, adversarial, blind,
policy). The figures of each variant, and which was kept: docs/results.md, twenty-first session.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import mapo.envs.empathy.offline.judge as offline_judge
from mapo.envs.empathy.offline.features import JudgeContext
from mapo.envs.empathy.offline.repeats import MIN_SENTENCE_WORDS, Repeat
from mapo.text import STOPWORDS, sentences, words

HEAVIER = {"C_neg": -2, "A_neg": -2, "P_neg": -1}
PHRASE_WORDS = 3
SPLITS = ("calibration", "heldout", "adversarial", "blind", "policy")
_levels_today = offline_judge.levels_from_features
_repeats_today = offline_judge.repeated_moves
_score_today = offline_judge.OfflineJudge.score


def _heavier_levels(f: Any, deepest_axis: str) -> tuple[dict[str, int], dict[str, str]]:
    levels, evidence = _levels_today(f, deepest_axis)
    for family, found in f.degenerate.items():
        for key, level in HEAVIER.items():
            if levels[key] > level:
                levels[key], evidence[key] = level, f"{family}: {found}"
    return levels, evidence


def _runs(text: str) -> set[tuple[str, ...]]:
    """The runs of PHRASE_WORDS words of `text` that hold a content word."""
    w = words(text)
    runs = (tuple(w[i : i + PHRASE_WORDS]) for i in range(len(w) - PHRASE_WORDS + 1))
    return {r for r in runs if any(len(x) >= 3 and x not in STOPWORDS for x in r)}


class PhraseRepeat(Repeat):
    def evidence(self) -> str:
        return f"says a phrase again: '{self.sentence[:70]}' (earlier: '{self.earlier[:60]}')"


def _phrase_repeats(context: JudgeContext) -> Any:
    """`repeated_moves` of today plus the sentences that say an earlier reply's phrase again;
    bound to the context being scored (`score` passes only the sentences and the earlier replies)."""

    def repeated_moves(reply_sentences: list[str], own_turns: list[str]) -> list[Repeat]:
        found = _repeats_today(reply_sentences, own_turns)
        theirs = set().union(*(_runs(t) for t in context.user_turns))
        earlier = {r: s for turn in own_turns for s in sentences(turn) for r in _runs(s)}
        flagged = {r.sentence for r in found}
        for sentence in reply_sentences:
            if sentence in flagged or len(words(sentence)) < MIN_SENTENCE_WORDS:
                continue
            again = sorted(r for r in _runs(sentence) - theirs if r in earlier)
            if again:
                found.append(PhraseRepeat(sentence, "statement", earlier[again[0]], 1.0))
        return found

    return repeated_moves


def _score_with_phrases(self: Any, context: JudgeContext, response: str) -> Any:
    offline_judge.repeated_moves = _phrase_repeats(context)
    try:
        return _score_today(self, context, response)
    finally:
        offline_judge.repeated_moves = _repeats_today


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("what", choices=("agreement", "calibrate"))
    parser.add_argument("--variant", choices=("today", "heavier", "phrase"), default="today")
    parser.add_argument("paths", nargs="*", help="blind sets (agreement) or exemplar splits (calibrate)")
    args = parser.parse_intermixed_args()
    if args.variant == "heavier":  # over the judge's own rules; `score` looks it up in the module at each call
        offline_judge.levels_from_features = _heavier_levels
    if args.variant == "phrase":
        offline_judge.OfflineJudge.score = _score_with_phrases  # type: ignore[method-assign]
    if args.what == "agreement":
        from mapo.lab.blind.rescore import pooled, rescore_set

        results = [rescore_set(Path(p)) for p in args.paths]
        for r in results:
            means = ", ".join(f"{label} {m['rescored']:.1f}" for label, m in r["mean_epmq"].items())
            print(f"{r['set']}: EPM-Q orders {r['rescored']['wins']} of {r['rescored']['decisive']} as the reader did; {means}")
        pool = pooled(results, "rescored")
        print(f"pooled: {pool['wins']} of {pool['decisive']} ({100 * pool['rate']:.1f} %)")
    else:
        from mapo.envs.empathy.calibrate import evaluate, load_exemplars
        from mapo.envs.empathy.roles import make_role

        for split in args.paths or SPLITS:
            ranking = evaluate(make_role("judge", {"kind": "offline"}), load_exemplars(split))["ranking"]  # type: ignore[arg-type]
            print(f"{split}: pairwise {ranking['accuracy']:.3f} ({ranking['correct']}/{ranking['pairs']})")


if __name__ == "__main__":
    main()
