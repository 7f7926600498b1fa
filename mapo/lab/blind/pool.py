"""`mapo compare --pool-blind SCORE...`: blind ratings of several comparisons of the same two
methods (one per seed pair, say), pooled.

Each SCORE is a folder written by `--score-blind` (its score.json) or that file. The sets must
compare the same two labels. Per label: the decisive pairs it won over all sets with the exact
binomial interval, which treats every pair as independent; and a two-stage bootstrap interval
(sets with replacement, then pairs within each drawn set), which keeps the spread between seeds,
the interval to quote when the sets are seeds of a training run. Also: how many sets each label
won outright, the mean 1-5 scores and the EPM-Q agreement summed over the sets.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mapo.intervals import cluster_bootstrap
from mapo.lab.blind.score import win_share

SCORE_KEYS = ("runs", "pairs", "ties", "win", "scores", "epmq_agreement")


def read_score(path: str | Path) -> dict[str, Any]:
    """A `--score-blind` result: score.json, or the folder holding it."""
    path = Path(path)
    file = path / "score.json" if path.is_dir() else path
    if not file.is_file():
        raise FileNotFoundError(f"{path}: no score.json (the output of `mapo compare --score-blind`)")
    try:
        result = json.loads(file.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise ValueError(f"{file}: not a `--score-blind` result ({err})") from None
    missing = [key for key in SCORE_KEYS if not isinstance(result, dict) or key not in result]
    if not missing and (len(result["runs"]) != 2 or any(label not in result["win"] or label not in result["scores"]
                                                        for label in result["runs"])):
        missing = ["two labels in runs, win and scores"]
    if missing:
        raise ValueError(f"{file}: not a `--score-blind` result (missing: {', '.join(missing)})")
    return result


def pool_scores(paths: list[str | Path]) -> dict[str, Any]:
    """Pooled win shares with both intervals, sets won, mean scores and EPM-Q agreement."""
    if len(paths) < 2:
        raise ValueError(f"--pool-blind pools two or more --score-blind results, got {len(paths)}")
    sets = [(str(path), read_score(path)) for path in paths]
    labels = sets[0][1]["runs"]
    for name, result in sets:
        if set(result["runs"]) != set(labels):
            raise ValueError(f"{name} compares {' and '.join(result['runs'])}, the first set {' and '.join(labels)}: "
                             "only ratings of the same two labels pool")
    first, second = labels
    per_set = [{"set": name, "pairs": r["pairs"], "ties": r["ties"], **{label: r["win"][label]["wins"] for label in labels}}
               for name, r in sets]
    decisive = sum(s[first] + s[second] for s in per_set)
    win = {}
    for label, other in ((first, second), (second, first)):
        boot_low, boot_high = cluster_bootstrap([[1.0] * s[label] + [0.0] * s[other] for s in per_set])
        win[label] = {**win_share(sum(s[label] for s in per_set), decisive), "set_bootstrap_low": boot_low,
                      "set_bootstrap_high": boot_high, "sets_won": sum(s[label] > s[other] for s in per_set)}
    scores = {}
    for label in labels:
        n = sum(r["scores"][label]["n"] for _, r in sets)
        total = sum(r["scores"][label]["mean"] * r["scores"][label]["n"] for _, r in sets if r["scores"][label]["n"])
        scores[label] = {"n": n, "mean": total / n if n else None}
    computed = [r["epmq_agreement"] for _, r in sets if r["epmq_agreement"].get("computed")]
    return {
        "runs": labels, "sets": per_set, "pairs": sum(s["pairs"] for s in per_set),
        "ties": sum(s["ties"] for s in per_set), "win": win, "scores": scores,
        "epmq_agreement": {"sets": len(computed), **win_share(sum(a["wins"] for a in computed),
                                                              sum(a["decisive"] for a in computed))},
    }


def _range(low: float | None, high: float | None) -> str:
    return "n/a" if low is None or high is None else f"{100 * low:.1f}-{100 * high:.1f} %"


def pooled_text(result: dict[str, Any]) -> str:
    """The pooled result as Markdown (what the console prints and pooled.md holds)."""
    labels, sets = result["runs"], result["sets"]
    lines = [f"# Blind pairwise rating, pooled: {labels[0]} vs {labels[1]}", "",
             f"{len(sets)} rating sets, {result['pairs']} pairs, {result['ties']} ties.", ""]
    for label in labels:
        w = result["win"][label]
        if not w["decisive"]:
            lines.append(f"- {label}: no decisive pair")
            continue
        lines.append(f"- {label} preferred in {w['wins']} of {w['decisive']} ({100 * w['rate']:.1f} %); 95 % interval "
                     f"{_range(w['set_bootstrap_low'], w['set_bootstrap_high'])} by set bootstrap (sets, then pairs), "
                     f"{_range(w['low'], w['high'])} exact binomial (pairs as independent); "
                     f"won {w['sets_won']} of {len(sets)} sets outright")
    for label in labels:
        s = result["scores"][label]
        if s["n"]:
            lines.append(f"- {label}: mean score {s['mean']:.2f} of 5 over {s['n']} dialogue(s)")
    a = result["epmq_agreement"]
    if a["decisive"]:
        lines.append(f"- the judge's EPM-Q ordered {a['wins']} of {a['decisive']} decisive pairs as the raters did "
                     f"({100 * a['rate']:.1f} %, {_range(a['low'], a['high'])}; {a['sets']} set(s) with a valid EPM-Q)")
    lines += ["", "| set | pairs | " + " | ".join(labels) + " | tie |", "|---|---:|" + "---:|" * (len(labels) + 1)]
    for s in sets:
        lines.append(f"| {s['set']} | {s['pairs']} | " + " | ".join(str(s[label]) for label in labels) + f" | {s['ties']} |")
    return "\n".join(lines) + "\n"


def pool_blind(paths: list[str | Path], out_dir: str | Path) -> tuple[Path, str]:
    """Pool, and write pooled.json and pooled.md into `out_dir`; returns (pooled.md, its text)."""
    result = pool_scores(paths)
    text = pooled_text(result)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "pooled.json").write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    (out / "pooled.md").write_text(text, encoding="utf-8")
    return out / "pooled.md", text
