"""RAPO one-turn-lookahead ("branching") rollouts.

Per step one turn index t is drawn (uniform over 1..max_turns, from the step's seed).
Every scenario's dialogue is sampled once up to turn t; its environment is snapshotted
just before turn t's reply is judged. G - 1 more candidate replies are sampled from the
same context, and each is sent to its own copy of the snapshot: one user reaction and
one judge verdict per candidate. A ranker (mapo.methods.ranking) then sees the G
candidates with their reactions together and gives each a rank, score and critique.

Each candidate becomes a trajectory: the shared prefix (turns < t, marked
`branch_prefix`, never trained) plus its own turn t carrying `rank`, `rank_score` and
`critique` in its info. `Rapo.select` turns the scores into group-normalised advantages.
A dialogue that ended before turn t drops out of the step.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from mapo.core.rollout import RolloutSpec, rollout
from mapo.core.types import Group, Scenario, Trajectory, Turn
from mapo.engines.hf import HfEngine
from mapo.envs.base import Environment, StepResult
from mapo.methods.compeer import seen_reply
from mapo.methods.ranking import Candidate, Ranker
from mapo.policy import Policy


class SnapshotEnvironment(Environment):
    """Records the user's reaction in every step's info; keeps a copy of the env as it was before turn `branch_turn`."""

    def __init__(self, inner: Environment, branch_turn: int) -> None:
        self.inner = inner
        self.branch_turn = branch_turn
        self.turn = 0
        self.snapshot: Environment | None = None

    def reset(self, scenario: Scenario, seed: int | None = None) -> str:
        self.turn, self.snapshot = 0, None
        return self.inner.reset(scenario, seed=seed)

    def step(self, response: str) -> StepResult:
        self.turn += 1
        if self.turn == self.branch_turn:
            self.snapshot = copy.deepcopy(self.inner)
        return with_reaction(self.inner.step(response))


def with_reaction(result: StepResult) -> StepResult:
    return result._replace(info={**result.info, "reaction": result.user_message})


def _judged_turn(
    template: Turn,
    response: str,
    ids: list[int],
    logprobs: list[float],
    truncated: bool,
    result: StepResult,
) -> Turn:
    """A candidate turn at the same place as `template`, filled from its own env step (as the rollout does)."""
    info = dict(result.info)
    state = tuple(float(x) for x in info.get("state", ()))
    distance = float(info["distance"]) if "distance" in info else math.sqrt(sum(x * x for x in state))
    return Turn(
        index=template.index,
        user_message=template.user_message,
        response=response,
        action=tuple(float(x) for x in result.action),
        state=state,
        distance=distance,
        levels=dict(info.get("levels") or {}),
        prompt_length=template.prompt_length,
        response_ids=ids,
        old_logprobs=logprobs,
        truncated=truncated,
        info=info,
    )


def branching_rollout(
    policy: Policy,
    scenarios: Sequence[Scenario],
    make_env: Callable[[], Environment],
    spec: RolloutSpec,
    ranker: Ranker,
    seed: int = 0,
    pool: ThreadPoolExecutor | None = None,
    timings: dict[str, float] | None = None,
    on_turn: Callable[[int, int, int], None] | None = None,
    turn: int | None = None,
) -> tuple[list[Group], dict[str, float]]:
    """One group of G = spec.samples_per_scenario candidates per scenario that reached the drawn turn.

    `turn` fixes t instead of drawing it; when no dialogue reaches t the step branches at turn 1.
    `on_turn` is called after every turn of the prefixes, as in `mapo.core.rollout.rollout`.
    """
    g = spec.samples_per_scenario
    t = turn if turn is not None else int(np.random.default_rng(seed).integers(1, spec.max_turns + 1))
    envs: list[SnapshotEnvironment] = []

    def make_snapshotting() -> Environment:
        envs.append(SnapshotEnvironment(make_env(), t))
        return envs[-1]

    prefix_spec = dataclasses.replace(spec, samples_per_scenario=1, max_turns=t)
    prefixes = rollout(
        policy,
        scenarios,
        make_snapshotting,
        prefix_spec,
        seed=seed,
        pool=pool,
        timings=timings,
        on_turn=on_turn,
    )
    reached = [(grp.trajectories[0], env) for grp, env in zip(prefixes, envs) if len(grp.trajectories[0]) == t]
    metrics: dict[str, float] = {
        "branch_turn": float(t),
        "branch_groups": float(len(reached)),
        "ranker_fallbacks": 0.0,
    }
    if not reached:
        if t == 1:
            raise ValueError("branching: no dialogue reached its first reply (context limit?)")
        return branching_rollout(policy, scenarios, make_env, spec, ranker, seed, pool, timings, on_turn, turn=1)

    if any(traj.turns[-1].context_ids is not None for traj, _ in reached):
        raise ValueError("rapo.branching: the environment gives each reply a context of its own (reply_context); "
                         "branching rollouts continue the whole transcript, so use an environment view without one")
    contexts = [traj.token_ids[: traj.turns[-1].prompt_length] for traj, _ in reached for _ in range(g - 1)]
    timings = {} if timings is None else timings
    clock = time.perf_counter()
    samples = HfEngine(policy).sample(
        contexts, spec.max_new_tokens, spec.temperature, spec.top_p, max_sentences=spec.max_sentences
    ) if g > 1 else []
    timings["generate"] = timings.get("generate", 0.0) + time.perf_counter() - clock
    jobs = [
        (env.snapshot, policy.decode(samples[k * (g - 1) + j].ids))
        for k, (_, env) in enumerate(reached)
        for j in range(g - 1)
    ]

    def judge(job: tuple[Any, str]) -> StepResult:
        snapshot, response = job
        return with_reaction(copy.deepcopy(snapshot).step(response))

    clock = time.perf_counter()
    results = list(pool.map(judge, jobs)) if pool is not None and len(jobs) > 1 else [judge(j) for j in jobs]
    timings["env"] = timings.get("env", 0.0) + time.perf_counter() - clock

    groups = []
    for k, (traj, _) in enumerate(reached):
        original = traj.turns[-1]
        prefix = [dataclasses.replace(turn, info={**turn.info, "branch_prefix": True}) for turn in traj.turns[:-1]]
        candidates = [
            (
                original,
                list(traj.token_ids[: original.prompt_length + len(original.response_ids)]),
            )
        ]
        for j in range(g - 1):
            sample, (_, response) = samples[k * (g - 1) + j], jobs[k * (g - 1) + j]
            turn = _judged_turn(
                original,
                response,
                list(sample.ids),
                list(sample.logprobs),
                sample.truncated,
                results[k * (g - 1) + j],
            )
            candidates.append((turn, contexts[k * (g - 1) + j] + list(sample.ids)))
        d_before = traj.distances[-2]
        context = [{"role": "system", "content": traj.system_prompt}]
        for turn in traj.turns[:-1]:
            context += [
                {"role": "user", "content": turn.user_message},
                {"role": "assistant", "content": turn.response},
            ]
        context.append({"role": "user", "content": original.user_message})
        ranking = ranker.rank(
            context,
            [
                Candidate(
                    seen_reply(c),
                    str(c.info["reaction"]),
                    d_before - c.distance,
                    c.levels,
                )
                for c, _ in candidates
            ],
        )
        metrics["ranker_fallbacks"] += float(ranking.fallback)
        trajectories = []
        for i, ((turn, ids), ranked) in enumerate(zip(candidates, ranking.items)):
            turn.info.update(rank=ranked.rank, rank_score=ranked.score, critique=ranked.critique)
            trajectories.append(
                Trajectory(
                    scenario_id=traj.scenario_id,
                    sample_index=i,
                    initial_state=traj.initial_state,
                    turns=[*prefix, turn],
                    done_reason="branch",
                    system_prompt=traj.system_prompt,
                    token_ids=ids,
                )
            )
        groups.append(Group(traj.scenario_id, trajectories))
    return groups, metrics
