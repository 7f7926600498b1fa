"""Judge rounds tried against issue 59's blind readers (twenty-first session), each a change to the
offline judge's levels applied over today's rules, measured before any is kept. Usage:

    python experiments/empathy_warm/judge_variants.py agreement [--variant V] docs/blind/empathy-again-s0 ...
    python experiments/empathy_warm/judge_variants.py calibrate [--variant V] [SPLIT ...]

Variants (default `today`, the judge as it is):
- `heavier`: a degenerate reply (word salad, invented people, loop, fragment, ...) takes the heaviest
  penalties, C_neg -2, A_neg -2 and P_neg -1, instead of -1 on C or A;
(`reask-costs`, a question asked again costing A_neg -1 beside new matter, was measured here the
same way and then became the judge's rule in f6a51db: `today` before that commit gives the figures before it.)

`agreement`: each blind set's dialogues scored again (`mapo.evaluate.rescore`), how often EPM-Q
orders a decisive pair as the reader did. `calibrate`: the judge's pairwise accuracy on the labelled
exemplars (`mapo env calibrate`'s figures; default splits calibration, heldout, adversarial, blind,
policy). The figures of each variant, and which was kept: docs/results.md, twenty-first session.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import mapo.envs.empathy.offline.judge as offline_judge

HEAVIER = {"C_neg": -2, "A_neg": -2, "P_neg": -1}
SPLITS = ("calibration", "heldout", "adversarial", "blind", "policy")
_levels_today = offline_judge.levels_from_features


def _heavier_levels(f: Any, deepest_axis: str) -> tuple[dict[str, int], dict[str, str]]:
    levels, evidence = _levels_today(f, deepest_axis)
    for family, found in f.degenerate.items():
        for key, level in HEAVIER.items():
            if levels[key] > level:
                levels[key], evidence[key] = level, f"{family}: {found}"
    return levels, evidence


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("what", choices=("agreement", "calibrate"))
    parser.add_argument("--variant", choices=("today", "heavier"), default="today")
    parser.add_argument("paths", nargs="*", help="blind sets (agreement) or exemplar splits (calibrate)")
    args = parser.parse_intermixed_args()
    if args.variant == "heavier":  # over the judge's own rules; `score` looks it up in the module at each call
        offline_judge.levels_from_features = _heavier_levels
    if args.what == "agreement":
        from mapo.evaluate.rescore import pooled, rescore_set

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
