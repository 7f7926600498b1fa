"""The one reading of blind set 8 for issue #30: the rules, the learned judge as decided in
advance (docs/judge.md, 2026-11-25), its ungated form, and the E[v] ranking, in one process.

    cd experiments/learned_judge && PYTHONPATH=../..:. HF_HUB_OFFLINE=1 python set8.py --judge DIR [--decode argmax]

The set is loaded by its folder (it is sealed until this reading). Writes
experiments/learned_judge/set8.json; the same figures come from
`mapo env calibrate --split blind --exemplars mapo/data/judge_exemplars/blind8 [--judge learned --judge-option path=DIR]`.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from lowo import _summary, ev_accuracy  # type: ignore[import-not-found]

from mapo.envs.empathy.calibrate import evaluate, exemplar_dir, load_exemplars
from mapo.envs.empathy.learned.judge import LearnedJudge
from mapo.envs.empathy.offline.judge import OfflineJudge


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--judge", required=True, help="the final judge folder (trained without set 8)")
    parser.add_argument("--decode", default="argmax")
    parser.add_argument("--out", default=str(Path(__file__).with_name("set8.json")))
    args = parser.parse_args()
    held = load_exemplars("blind", exemplar_dir() / "blind8")
    results = {"rules": _summary(evaluate(OfflineJudge(), held), held)}
    gated = LearnedJudge(args.judge, degenerate_gate=True, decode=args.decode)
    ungated = LearnedJudge(args.judge, degenerate_gate=False, decode=args.decode)
    results["learned (decided)"] = _summary(full := evaluate(gated, held), held)
    results["learned, no gate"] = _summary(evaluate(ungated, held), held)
    results["ev_accuracy"] = ev_accuracy(ungated, held)
    results["families"] = full["families"]
    results["replies"], results["contexts"] = len(held), len({e.context_id for e in held})
    Path(args.out).write_text(json.dumps({"options": vars(args), **results}, indent=2) + "\n", encoding="utf-8")
    print(json.dumps({k: v["accuracy"] if isinstance(v, dict) and "accuracy" in v else v for k, v in results.items()
                      if k != "families"}, indent=1))


if __name__ == "__main__":
    main()
