"""How far a second rater agrees with a blind set's writer, scored like `mapo env calibrate` scores the judge.

usage: python scripts/second_rater.py docs/judge/set3_unlabelled.yaml docs/judge/set3_second_rater.yaml

The unlabelled file is what the second rater saw (replies shuffled, no kinds or levels); the labels
file maps each reply id to its six levels. Prints the rater's pairwise agreement with the writer and
the offline judge's accuracy on the pairs both raters order the same way.
"""
import itertools
import sys
from types import SimpleNamespace

import yaml

from mapo.envs.dynamics import LEVEL_KEYS
from mapo.envs.empathy.calibrate import _projection, evaluate, load_exemplars
from mapo.envs.empathy.offline.judge import OfflineJudge


def main(unlabelled_path: str, labels_path: str) -> None:
    labels = yaml.safe_load(open(labels_path))
    contexts = yaml.safe_load(open(unlabelled_path))
    rated = {(c["context_id"], r["text"]): {**dict.fromkeys(LEVEL_KEYS, 0), **(labels[r["id"]] or {})}
             for c in contexts for r in c["replies"]}
    exemplars = [e for e in load_exemplars("blind") if (e.context_id, e.response) in rated]

    class SecondRater:  # plays the judge's part in `evaluate`
        def score(self, context, response):  # type: ignore[no-untyped-def]
            cid = next(e.context_id for e in exemplars if e.context is context and e.response == response)
            return SimpleNamespace(levels=rated[cid, response], evidence={})

    ranking = evaluate(SecondRater(), exemplars)["ranking"]
    print(f"second rater vs writer: {ranking['correct']}/{ranking['pairs']} = {ranking['accuracy']:.3f}")
    judge = OfflineJudge()
    judged = {id(e): judge.score(e.context, e.response).levels for e in exemplars}
    both = agree = 0
    by_context: dict[str, list] = {}
    for e in exemplars:
        by_context.setdefault(e.context_id, []).append(e)
    for items in by_context.values():
        for a, b in itertools.combinations(items, 2):
            t = a.target
            writer = _projection(a.expected, t) - _projection(b.expected, t)
            second = _projection(rated[a.context_id, a.response], t) - _projection(rated[b.context_id, b.response], t)
            if writer * second > 0:
                both += 1
                agree += (_projection(judged[id(a)], t) - _projection(judged[id(b)], t)) * writer > 0
    print(f"offline judge on the {both} pairs both raters order alike: {agree}/{both} = {agree / both:.3f}")


if __name__ == "__main__":
    main(*sys.argv[1:3])
