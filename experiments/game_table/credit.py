"""The credit each estimator gives each kind of move, on the same training games (issue 56: why
MAPO learns to stall, measured without another run).

A training run's transcripts (`transcripts_every`) hold every game of the logged steps with its
per-turn rewards. Those steps' groups are rebuilt (games of one scenario at one step) and every
registered estimator is applied to the same rewards; each reply is classed as in `decisions.py`
(a splitting question, a re-asked one, an early guess, ...) and the mean advantage of each class is
printed per estimator (the runs given pooled, or `--each`), with the advantage the run itself logged beside it (a check that the rebuilt
batch is the run's). A class credited above zero is pushed up by that estimator. It extends
`experiments/game_forfeit/credit.py` (the run's own estimator only, by move kind: the earlier game
studies' count of what the T_min cut trains) to every estimator on the same games, by decision class.

`--need chance` re-scores the same games as the environment's `need: chance` would (the best
questioner's chance of failing; mapo.envs.questioning.env) before the estimators see them: the
credit that reward would give the moves the run made.

    python experiments/game_table/credit.py RUN_FOLDER... [--each] [--need chance] [--estimators mapo batch turn grpo]
"""

from __future__ import annotations

import argparse
import collections
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))  # decisions.py beside this file

from decisions import KINDS, decision  # noqa: E402

from mapo.core.advantages import compute_batch  # noqa: E402
from mapo.core.rewards import rewards_from_distances  # noqa: E402
from mapo.envs.questioning.game import chance_distance  # noqa: E402
from mapo.validation import compressed_or_plain, read_records  # noqa: E402

ESTIMATORS = ["mapo", "mapo_ragged", "batch", "turn", "grpo"]


def steps_of(run: Path) -> dict[int, list[list[dict]]]:
    """{step: groups}, each group the games of one scenario ordered by sample index."""
    by_step: dict[int, dict[str, list[dict]]] = collections.defaultdict(lambda: collections.defaultdict(list))
    for row in read_records(compressed_or_plain(run, "transcripts.jsonl"), "transcripts"):
        by_step[row["step"]][row["scenario_id"]].append(row)
    return {step: [sorted(g, key=lambda r: r["sample_index"]) for g in groups.values()]
            for step, groups in sorted(by_step.items())}


def classes(game: dict, max_turns: int) -> list[str]:
    """The decision class of each reply of one game."""
    before, labels = game["turns"][0]["pool_size"], []
    for turn in game["turns"]:
        labels.append(decision(turn["kind"], turn["bits"], before, max_turns - turn["turn"] + 1))
        before = turn["candidates_left"]
    return labels


def chance_rewards(game: dict, max_turns: int) -> list[float]:
    """The game's per-turn rewards under `need: chance` (IDR of the best questioner's chance of failing)."""
    turns = game["turns"]
    distances = [chance_distance(turns[0]["pool_size"], max_turns)]
    for turn in turns[:-1]:
        distances.append(chance_distance(turn["candidates_left"], max_turns - turn["turn"]))
    distances.append(0.0 if game["done_reason"] == "success" else 1.0)
    return rewards_from_distances(distances, "idr")


def credit(runs: list[Path], max_turns: int, estimators: list[str], need: str = "logged"
           ) -> tuple[dict[str, dict[str, float]], dict[str, collections.Counter], collections.Counter]:
    """{estimator (or "logged", on the run's own rewards): {class: mean advantage}} over the runs'
    logged steps (each step its own batch), {estimator: {class: replies it trains}} (MAPO's T_min
    cut leaves the turns after a group's shortest game out), and the class counts."""
    logged_too = ["logged"] if need == "logged" else []
    sums: dict[str, collections.Counter] = {name: collections.Counter() for name in [*estimators, *logged_too]}
    counts: dict[str, collections.Counter] = {name: collections.Counter() for name in sums}
    seen: collections.Counter = collections.Counter()
    for groups in (groups for run in runs for groups in steps_of(run).values()):
        rewards = [[chance_rewards(game, max_turns) if need == "chance" else [t["reward"] for t in game["turns"]]
                    for game in group] for group in groups]
        labels = [[classes(game, max_turns) for game in group] for group in groups]
        results = {name: compute_batch(name, rewards) for name in estimators}
        if logged_too:
            results["logged"] = [[[t.get("advantage") for t in game["turns"]] for game in group] for group in groups]
        for name, advantages in results.items():
            for g_adv, g_lab in zip(advantages, labels):
                for t_adv, t_lab in zip(g_adv, g_lab):
                    for value, label in zip(t_adv, t_lab):
                        if value is not None:
                            sums[name][label] += value
                            counts[name][label] += 1
        seen.update(label for group in labels for game in group for label in game)
    means = {name: {k: sums[name][k] / counts[name][k] for k in counts[name]} for name in sums}
    return means, counts, seen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--max-turns", type=int, default=5, help="the game's reply budget (the tight plan's: 5)")
    parser.add_argument("--estimators", nargs="+", default=ESTIMATORS)
    parser.add_argument("--each", action="store_true", help="a table per run (default: the runs pooled)")
    parser.add_argument("--need", choices=["logged", "chance"], default="logged",
                        help="the rewards: the run's own (default) or the games re-scored by `need: chance`")
    args = parser.parse_args()
    groups = [[run] for run in args.runs] if args.each else [args.runs]
    for runs in groups:
        means, trained, seen = credit(runs, args.max_turns, args.estimators, args.need)
        total = sum(seen.values()) or 1
        print(f"\n{' '.join(map(str, runs)) if len(runs) < 3 else f'{len(runs)} runs pooled'}  ({total} replies)")
        print("mean advantage".ljust(14) + "share".rjust(8) + "".join(name.rjust(12) for name in means))
        for kind in (k for k in KINDS if seen[k]):
            row = "".join(f"{means[name].get(kind, np.nan):12.3f}" for name in means)
            print(kind.ljust(14) + f"{100 * seen[kind] / total:7.1f}%" + row)
        print("replies trained".ljust(22) + "".join(name.rjust(12) for name in args.estimators))
        for kind in (k for k in KINDS if seen[k]):
            print(kind.ljust(22) + "".join(f"{100 * trained[name][kind] / seen[kind]:11.1f}%" for name in args.estimators))


if __name__ == "__main__":
    main()
