"""Every decoder of the learned judge on the leave-one-writer-out folds that `lowo.py --save-folds
DIR` wrote (each fold's judge folder, trained without its unit): pairwise accuracy per unit,
with and without the degenerate gate, beside the rules. No training; inference only.

    cd experiments/learned_judge && PYTHONPATH=../..:. HF_HUB_OFFLINE=1 python decoders.py --folds DIR

Writes experiments/learned_judge/decoders.json.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from lowo import UNITS, _summary  # type: ignore[import-not-found]

from mapo.envs.empathy.calibrate import evaluate
from mapo.envs.empathy.learned.judge import LearnedJudge
from mapo.envs.empathy.learned.model import DECODERS
from mapo.envs.empathy.learned.train import training_exemplars, writer_unit


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--folds", required=True)
    parser.add_argument("--decoders", nargs="+", default=list(DECODERS), choices=DECODERS)
    parser.add_argument("--out", default=str(Path(__file__).with_name("decoders.json")))
    args = parser.parse_args()
    pool = training_exemplars()
    table: dict[str, dict[str, dict]] = {}
    for unit in UNITS:
        held = [e for e in pool if writer_unit(e) == unit]
        for decode in args.decoders:
            for gate in (False, True):
                judge = LearnedJudge(Path(args.folds) / unit, degenerate_gate=gate, decode=decode)
                name = decode + ("+gate" if gate else "")
                table.setdefault(name, {})[unit] = _summary(evaluate(judge, held), held)
        print(unit, {n: round(table[n][unit]["accuracy"], 3) for n in table}, flush=True)
    means = {n: sum(r["accuracy"] for r in rows.values()) / len(rows) for n, rows in table.items()}
    Path(args.out).write_text(json.dumps({"folds": table, "mean": means}, indent=2) + "\n", encoding="utf-8")
    print("mean", json.dumps({n: round(m, 4) for n, m in means.items()}))


if __name__ == "__main__":
    main()
