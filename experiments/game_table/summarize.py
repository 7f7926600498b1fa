"""The part of a game evaluation worth committing: its settings, the policy's figures and the
three reference players' on the same games (eval.json without the per-scenario rows); given a
base evaluation of the same games (same secrets, pools and samples), also the success difference
with its 95 % interval (a two-stage bootstrap over secrets, then their games: mapo.intervals).

    python experiments/game_table/summarize.py runs/game-table-warm/eval experiments/game_table/warm_start_eval.json
    python experiments/game_table/summarize.py runs/game-table-pilot/eval pilot_eval.json runs/game-table-warm/eval
    E=docs/study/game-state-tight/evals; python experiments/game_table/summarize.py \
        $E/mapo_state-idr-lr2e-4-s0/curve/step-000020 /tmp/s20.json $E/base   # an export's evaluations
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

KEPT_CONFIG = ("policy", "env", "env_options", "scenarios", "samples", "max_turns", "max_new_tokens", "temperature", "seed")


def _read(eval_dir: Path) -> dict:
    """The folder's eval.json, or an export's eval.json.gz (docs/study/*/evals/...)."""
    from mapo.lab.ablate.state import read_eval

    data = read_eval(eval_dir)
    if data is None:
        raise SystemExit(f"{eval_dir}: no finished eval.json or eval.json.gz")
    return data


def _success_by_secret(eval_dir: Path) -> dict[str, dict[int, float]]:
    data = _read(eval_dir)
    return {s["scenario_id"]: {d["sample_index"]: 100.0 * (d["outcome"] == "success") for d in s["samples"]}
            for s in data["scenarios"]}


def paired_difference(eval_dir: Path, base_dir: Path) -> dict:
    """Success (points) of `eval_dir` minus `base_dir`'s, game by game, with its 95 % interval."""
    from mapo.intervals import cluster_bootstrap

    mine, base = _success_by_secret(eval_dir), _success_by_secret(base_dir)
    if mine.keys() != base.keys():
        raise ValueError(f"{eval_dir} and {base_dir} did not play the same secrets")
    clusters = [[mine[k][i] - base[k][i] for i in base[k]] for k in base]
    low, high = cluster_bootstrap(clusters)
    games = sum(len(c) for c in clusters)
    return {"base": str(base_dir), "games": games, "success_minus_base": sum(map(sum, clusters)) / games,
            "interval_95": [low, high]}


def summarize(eval_dir: Path, base_dir: Path | None = None) -> dict:
    data = _read(eval_dir)
    summary = data["summary"]
    paired = {"paired_with_base": paired_difference(eval_dir, base_dir)} if base_dir is not None else {}
    return {
        "config": {key: data["config"].get(key) for key in KEPT_CONFIG},
        "dialogues": summary["dialogues"],
        "policy": summary["figures"],
        "references": {name: r["figures"] for name, r in summary.get("references", {}).items()},
        **paired,
        "provenance": data.get("provenance"),
    }


if __name__ == "__main__":
    if len(sys.argv) not in (3, 4):
        sys.exit("usage: summarize.py EVAL_DIR OUT.json [BASE_EVAL_DIR]")
    base = Path(sys.argv[3]) if len(sys.argv) == 4 else None
    Path(sys.argv[2]).write_text(json.dumps(summarize(Path(sys.argv[1]), base), indent=2) + "\n", encoding="utf-8")
    print(f"Summary: {sys.argv[2]}")
