"""A questioning game's reference-player games as supervised fine-tuning data (`mapo env demos`).

It lives with SFT, above the rollout it drives: the environment does not import what plays it.

The games are played through `mapo.core.rollout.rollout`, the rollout RL uses, so every system
prompt and user message is exactly what a policy would see there. One JSON line per game:

    {"messages": [{"role": "system", ...}, {"role": "user", ...}, {"role": "assistant", ...}, ...],
     "id": "twenty-questions-train-00000",
     "meta": {"env", "scenario_id", "player", "pool_size", "done_reason", "turns", "bits"}}

The messages end with the player's last reply (the user's verdict after it is not a turn
anyone learns from). Under a state view (`view: state`) each reply is a record of its own: the
system prompt, the state it was chosen in, the reply. Scenarios of the split are played in order, cycling when `games`
exceeds them; a cycled scenario has the same secret and another pool (the card's pool_seed).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from mapo.core.rollout import RolloutSpec, rollout
from mapo.core.types import Trajectory
from mapo.envs.base import environment_factory, load_scenarios
from mapo.envs.questioning.players import load_player

_TURN_CAP = 1000  # the rollout's cap; the environment's own turn limit ends every game long before


def demo_records(trajectory: Trajectory, env: str, player: str, number: str) -> list[dict[str, Any]]:
    """The game as SFT records: one with the whole dialogue, or, when each reply had a context of its
    own (a state view), one per reply with that context (ids `<number>-<turn>`)."""
    system = [{"role": "system", "content": trajectory.system_prompt}] if trajectory.system_prompt else []
    if any(turn.context_message is not None for turn in trajectory.turns):
        return [demo_record(trajectory, env, player, f"{number}-{turn.index}",
                            system + [{"role": "user", "content": str(turn.context_message)},
                                      {"role": "assistant", "content": turn.response}])
                for turn in trajectory.turns]
    messages = list(system)
    for turn in trajectory.turns:
        messages += [{"role": "user", "content": turn.user_message}, {"role": "assistant", "content": turn.response}]
    return [demo_record(trajectory, env, player, number, messages)]


def demo_record(trajectory: Trajectory, env: str, player: str, number: str,
                messages: list[dict[str, str]]) -> dict[str, Any]:
    return {
        "messages": messages,
        "id": number,
        "meta": {
            "env": env,
            "scenario_id": trajectory.scenario_id,
            "player": player,
            "pool_size": trajectory.turns[0].info.get("pool_size") if trajectory.turns else None,
            "done_reason": trajectory.done_reason,
            "turns": len(trajectory.turns),
            "bits": sum(float(t.info.get("bits", 0.0)) for t in trajectory.turns),
        },
    }


def write_demos(
    env: str,
    player: str,
    games: int,
    split: str,
    out: str | Path,
    options: dict[str, Any] | None = None,
    seed: int = 0,
    solved_only: bool = False,
) -> dict[str, Any]:
    """Play `games` games of `player` ("optimal" | "informative" | "random") on `split` (a bundled
    split or a case file, `path.yaml[:split]`) and write them to `out`
    (JSONL); returns counts: games written, solved, skipped (unsolved, with `solved_only`)."""
    if games < 1:
        raise ValueError(f"--games must be at least 1, got {games}")
    scenarios = load_scenarios(env, split)
    # a cycled scenario draws another pool (its card's pool_seed), so a deterministic player's
    # games do not repeat
    played = [scenarios[k % len(scenarios)] for k in range(games)]
    played = [dataclasses.replace(s, card={**s.card, "pool_seed": k // len(scenarios)}) if k >= len(scenarios) else s
              for k, s in enumerate(played)]
    policy = load_player(f"player:{player}", seed)
    spec = RolloutSpec(scenarios_per_step=len(played), samples_per_scenario=1, max_turns=_TURN_CAP)
    groups = rollout(policy, played, environment_factory(env, options), spec, seed=seed)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    written = solved = skipped = replies = 0
    with out.open("w", encoding="utf-8") as f:
        for k, group in enumerate(groups):
            trajectory = group.trajectories[0]
            success = trajectory.done_reason == "success"
            solved += success
            if solved_only and not success:
                skipped += 1
                continue
            for record in demo_records(trajectory, env, policy.name, f"{env}-{split}-{k:05d}"):
                f.write(json.dumps(record, ensure_ascii=False) + "\n")
            written += 1
            replies += len(trajectory.turns)
    return {"written": written, "solved": solved, "skipped": skipped, "replies": replies, "path": str(out)}
