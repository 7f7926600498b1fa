"""The update's cost in the state view against the transcript's packed layout, on the same games,
each with the shared prompts computed once (mapo.prompt_sharing, the default) and without.

    python experiments/game_state/update_cost.py MODEL OUT.json [REPEATS]

MODEL: a policy folder (e.g. a warm start's final/). For each view (`state`: each reply its own
sequence, after the state it was chosen in; `table`: the whole dialogue as one packed sequence, the
table in view) it samples one training step's games (2 secrets x 8 dialogues at the tight setting,
the same secrets and seeds in both views), scores them with MAPO on IDR, and times the update of
those sequences (the library's `mapo.core.step.training_batch` and `mapo.core.update.update`, as a
training step runs them, on one thread as a unit of the study does) REPEATS times from the same
weights, alternating the layouts (`VIEW` shares prompts, `VIEW-plain` does not). Reported per layout: tokens fed (plain), trained tokens, sequences, seconds
per update (median), and, for the state view, the share of tokens in contexts that another reply of
the step shares verbatim; then each view's plain over shared seconds.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

import torch

from mapo.config import load_config
from mapo.core.rollout import rollout
from mapo.core.step import advantages_of, score, training_batch
from mapo.core.update import make_optimizer, update
from mapo.envs.base import environment_factory, load_scenarios
from mapo.policy import load_policy

GAME = {"pool_size": 8, "max_turns": 5, "show_turns_left": True, "scoring": "forfeit_unsolved"}


def _config(model: str, view: str):
    return load_config("twenty-questions", [f"policy.model={model}", "rollout.engine=hf", "threads=1",
                                            f"env.options={json.dumps({**GAME, 'view': view})}"])


def _shared_share(groups) -> float:
    counts: dict[tuple[int, ...], int] = {}
    for group in groups:
        for trajectory in group.trajectories:
            for turn in trajectory.turns:
                key = tuple(turn.context_ids or ())
                counts[key] = counts.get(key, 0) + 1
    total = sum(len(k) * n for k, n in counts.items())
    shared = sum(len(k) * (n - 1) for k, n in counts.items() if n > 1)
    return shared / total if total else 0.0


def main(model: str, out: str, repeats: int = 3) -> None:
    results, layouts = {}, {}
    for view in ("state", "table"):
        config = _config(model, view)
        torch.manual_seed(0)
        policy = load_policy(config.policy, seed=0)
        scenarios = load_scenarios(config.env.name, config.env.scenarios)[:2]
        groups = rollout(policy, scenarios, environment_factory(config.env.name, config.env.options), config.rollout)
        score(groups, config.reward.kind)
        sequences = training_batch(groups, advantages_of(groups, config.advantage).values)
        layouts[view] = (config, policy, sequences)
        results[view] = {"sequences": len(sequences), "tokens_fed": sum(len(s.input_ids) for s in sequences),
                         "trained_tokens": sum(s.n_trained for s in sequences), "seconds": [],
                         "replies": sum(len(t.turns) for g in groups for t in g.trajectories)}
        if view == "state":
            results[view]["shared_context_token_share"] = _shared_share(groups)
    for view in list(results):
        results[f"{view}-plain"] = {**results[view], "seconds": []}
    for _ in range(repeats):
        for name in results:
            config, policy, sequences = layouts[name.removesuffix("-plain")]
            policy.share_prompts = not name.endswith("-plain")
            snapshot = [p.detach().clone() for p in policy.trainable_parameters()]
            optimizer = make_optimizer(policy, config.optim)
            start = time.perf_counter()
            update(policy, optimizer, sequences, config.optim, config.loss, config.rollout.temperature,
                   off_policy=True, top_p=config.rollout.top_p)
            results[name]["seconds"].append(time.perf_counter() - start)
            with torch.no_grad():
                for p, saved in zip(policy.trainable_parameters(), snapshot):
                    p.copy_(saved)
    for r in results.values():
        r["seconds_median"] = statistics.median(r["seconds"])
        r["tokens_per_second"] = r["tokens_fed"] / r["seconds_median"]
    results["state_over_table_seconds"] = results["state"]["seconds_median"] / results["table"]["seconds_median"]
    for view in ("state", "table"):
        results[f"{view}_plain_over_shared_seconds"] = (results[f"{view}-plain"]["seconds_median"]
                                                        / results[view]["seconds_median"])
    Path(out).write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 3)
