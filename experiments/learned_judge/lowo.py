"""Leave-one-writer-out for the learned judge on blind sets 3-7 (issue #30).

For each writer unit (one blind set: one writer per set, per the files' headers) train the
cross-encoder on every other training reply (calibration, heldout, adversarial and the other
blind sets; sealed sets are never loaded), then score the unit with `calibrate.evaluate`
(pairwise ranking accuracy, a tie counts as wrong) beside the offline judge's rules on the
same unit. The frozen layers' states are computed once and shared by the folds.

    PYTHONPATH=. HF_HUB_OFFLINE=1 python experiments/learned_judge/lowo.py [--epochs 4 --layers 1]

Writes experiments/learned_judge/lowo.json.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from mapo.envs.dynamics import LEVEL_KEYS
from mapo.envs.empathy.calibrate import evaluate, first_contexts
from mapo.envs.empathy.learned.judge import LearnedJudge
from mapo.envs.empathy.learned.model import save
from mapo.envs.empathy.learned.train import BottomCache, TrainOptions, train, training_exemplars, writer_unit
from mapo.envs.empathy.offline.judge import OfflineJudge

UNITS = ("blind3", "blind4", "blind5", "blind6", "blind7")


def _ties(result: dict, held: list) -> int:
    """Ranked pairs (labelled projections differ) whose judged projections are equal: counted wrong."""
    import itertools

    import numpy as np

    from mapo.envs.dynamics import levels_to_vector

    proj = [
        (e.context_id, float(np.dot(levels_to_vector(e.expected), e.target)), float(np.dot(levels_to_vector(p["judged"]), e.target)))
        for e, p in zip(held, result["predictions"])
    ]
    return sum(
        a[0] == b[0] and a[1] != b[1] and a[2] == b[2] for a, b in itertools.combinations(proj, 2)
    )


def _summary(result: dict, held: list) -> dict:
    fam = result["families"]
    degenerate = [p for p in result["predictions"] if p["family"]]
    return {
        "accuracy": result["ranking"]["accuracy"],
        "pairs": result["ranking"]["pairs"],
        "correct": result["ranking"]["correct"],
        "exact": {k: round(v["exact"], 3) for k, v in result["per_level"].items()},
        "ties": _ties(result, held),
        "degenerate": len(degenerate),
        "degenerate_no_progress": sum(round(f["no_progress"] * f["replies"]) for f in fam.values()),
    }


VARIANTS = {  # name -> LearnedJudge options; the kind's defaults are degenerate_gate=True, decode=argmax
    "learned": {"degenerate_gate": False, "decode": "argmax"},
    "learned+gate": {"degenerate_gate": True, "decode": "argmax"},
    "rounded": {"degenerate_gate": False, "decode": "rounded"},
    "rounded+gate": {"degenerate_gate": True, "decode": "rounded"},
}


def ev_accuracy(judge: LearnedJudge, held: list) -> float:
    """Pairwise accuracy of the continuous E[v] . v*_0 under the heads' probabilities: not a judge
    the environment can use (it takes integer levels), a measure of what the rounding to levels costs."""
    import itertools

    import numpy as np

    from mapo.envs.dynamics import levels_to_vector
    from mapo.envs.empathy.learned.model import value_table

    table = value_table()
    rows = []
    for e in held:
        probs = np.asarray([judge.score(e.context, e.response).info["probabilities"][k] for k in LEVEL_KEYS])
        rows.append((e.context_id, float(np.dot(levels_to_vector(e.expected), e.target)),
                     float(np.einsum("km,kma->a", probs, table) @ e.target)))
    pairs = [(a, b) for a, b in itertools.combinations(rows, 2) if a[0] == b[0] and a[1] != b[1]]
    return sum((a[1] - b[1]) * (a[2] - b[2]) > 0 for a, b in pairs) / len(pairs)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--layers", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--units", nargs="+", default=list(UNITS))
    parser.add_argument("--limit", type=int, default=None, help="first N training contexts only (a smoke run)")
    parser.add_argument("--save-folds", default=None, help="write each fold's judge folder under this folder")
    parser.add_argument("--out", default=str(Path(__file__).with_name("lowo.json")))
    args = parser.parse_args()
    options = TrainOptions(trained_layers=args.layers, epochs=args.epochs, seed=args.seed)
    pool = training_exemplars()
    cache = BottomCache(options.max_length)
    rules = OfflineJudge()
    folds: dict[str, dict] = {}
    methods = ["rules", *VARIANTS]
    for unit in args.units:
        held = [e for e in pool if writer_unit(e) == unit]
        train_on = first_contexts([e for e in pool if writer_unit(e) != unit], args.limit)
        started = time.perf_counter()
        tokenizer, model, config, summary = train(train_on, options, cache=cache)
        if args.save_folds:
            save(Path(args.save_folds) / unit, model, config)
        fold: dict = {"train": summary, "rules": _summary(evaluate(rules, held), held)}
        for name, kw in VARIANTS.items():
            fold[name] = _summary(evaluate(LearnedJudge.from_model(tokenizer, model, config, **kw), held), held)
        fold["ev_accuracy"] = ev_accuracy(LearnedJudge.from_model(tokenizer, model, config, degenerate_gate=False), held)
        fold["seconds"] = round(time.perf_counter() - started, 1)
        folds[unit] = fold
        print(unit, json.dumps({m: round(fold[m]["accuracy"], 3) for m in methods}), "ev", round(fold["ev_accuracy"], 3), flush=True)
        Path(args.out).write_text(json.dumps({"options": vars(args), "folds": folds}, indent=2) + "\n", encoding="utf-8")
    means = {m: sum(f[m]["accuracy"] for f in folds.values()) / len(folds) for m in methods}
    means["ev_accuracy"] = sum(f["ev_accuracy"] for f in folds.values()) / len(folds)
    Path(args.out).write_text(json.dumps({"options": vars(args), "folds": folds, "mean": means}, indent=2) + "\n", encoding="utf-8")
    print("mean", json.dumps(means))


if __name__ == "__main__":
    main()
