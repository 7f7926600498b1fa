"""Positive control of the world-knowledge probe: each probe's own fact, answered, placed first among
its examples. A model that reads its context and copies ranks true above false almost perfectly, so
an AUC near 0.5 on the real probe (where no example shares the fact) is the model, not the scoring.

    PYTHONPATH=. python experiments/knowledge_probe/control.py embedded --probes 80
"""

from __future__ import annotations

import argparse

import numpy as np

from mapo.envs.questioning.cases import bundled_case_file, load_case_set
from mapo.evaluate.checkpoints import load_eval_policy
from mapo.evaluate.knowledge import Probe, build_probes, rank_auc, score_probes
from mapo.runtime import configure_threads


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", help="policy.model: embedded, gemma3-270m, a folder or .gguf file")
    parser.add_argument("--probes", type=int, default=80)
    parser.add_argument("--shots", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    configure_threads(args.threads)
    policy, label = load_eval_policy(args.model, dtype="float32")
    probes = build_probes(load_case_set(bundled_case_file("twenty-questions")), args.probes, args.shots, args.seed)
    truth = np.array([p.fact.truth for p in probes])
    for name, chosen in (("probe", probes), ("own fact first", [Probe(p.fact, (p.fact, *p.shots)) for p in probes])):
        scores = score_probes(policy, chosen)
        print(f"{label} {name}: AUC {rank_auc(scores[truth], scores[~truth]):.3f}, "
              f"accuracy {float(((scores > 0) == truth).mean()):.3f}")


if __name__ == "__main__":
    main()
