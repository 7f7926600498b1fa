"""The questioning game's reference players over pool sizes and turn budgets (`mapo env players`).

Each player plays every secret of the scenarios with `pools` different pools (its card's pool_seed 0 ..
pools - 1), through the rollout RL and `mapo eval` use, at each (pool size, replies) setting;
the figures are the game's own (mapo.envs.questioning.metrics). It shows where a budget leaves
room for strategy: at a generous one any question that splits the candidates wins, near
log2(pool) + 1 the random, informative and optimal players separate.
"""

from __future__ import annotations

import dataclasses

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from mapo.core.rollout import RolloutSpec, rollout
from mapo.envs.base import dialogue_summary, environment_factory, load_scenarios
from mapo.envs.questioning.players import load_player

PLAYERS = ("player:random", "player:informative", "player:optimal")


@dataclass(frozen=True)
class Setting:
    pool_size: int
    max_turns: int | None  # None: the game's default, 2 * ceil(log2(pool_size)) + 1

    @classmethod
    def parse(cls, text: str) -> Setting:
        """`8:5` (pool 8, 5 replies) or `8` (pool 8, the game's default budget)."""
        pool, _, turns = text.partition(":")
        try:
            return cls(int(pool), int(turns) if turns else None)
        except ValueError:
            raise ValueError(f"a setting is POOL or POOL:REPLIES (e.g. 8:5), got {text!r}") from None


def play_players(env: str, scenarios: str, settings: Sequence[Setting], pools: int,
                 options: dict[str, Any] | None = None, players: Sequence[str] = PLAYERS,
                 seed: int = 0) -> list[dict[str, Any]]:
    """One row per (setting, player): the setting, the player, games played and the game's figures."""
    if pools < 1:
        raise ValueError(f"pools must be at least 1, got {pools}")
    played = load_scenarios(env, scenarios)
    rows = []
    for setting in settings:
        for name in players:
            player = load_player(name, seed)
            game = {**(options or {}), "pool_size": setting.pool_size}
            if setting.max_turns is not None:
                game["max_turns"] = setting.max_turns
            limit = environment_factory(env, game)().max_turns  # type: ignore[attr-defined]
            spec = RolloutSpec(scenarios_per_step=len(played), samples_per_scenario=1, max_turns=limit)
            dialogues: list[dict[str, Any]] = []
            make_env = environment_factory(env, game)
            for pool_seed in range(pools):
                drawn = [dataclasses.replace(s, card={**s.card, "pool_seed": pool_seed}) for s in played]
                for group in rollout(player, drawn, make_env, spec, seed=seed):
                    dialogues += [{"done_reason": t.done_reason, "turns": [turn.info for turn in t.turns]}
                                  for t in group.trajectories]
            rows.append({"pool_size": setting.pool_size, "max_turns": limit, "player": name,
                         "games": len(dialogues), **(dialogue_summary(env, dialogues) or {})})
    return rows


def budget_table(rows: Sequence[dict[str, Any]]) -> str:
    """The rows as a markdown table: success per player, side by side, per setting."""
    players = list(dict.fromkeys(r["player"] for r in rows))
    settings = list(dict.fromkeys((r["pool_size"], r["max_turns"]) for r in rows))
    by = {(r["pool_size"], r["max_turns"], r["player"]): r for r in rows}
    head = ["pool", "replies", "games"] + [f"{p.removeprefix('player:')} success (bits / question)" for p in players]
    lines = ["| " + " | ".join(head) + " |", "|" + " ---: |" * len(head)]
    for pool, turns in settings:
        cells = [str(pool), str(turns), str(by[(pool, turns, players[0])]["games"])]
        for p in players:
            r = by[(pool, turns, p)]
            bits = r.get("bits_per_question")
            cells.append(f"{100 * r['success_rate']:.1f} % ({'n/a' if bits is None else f'{bits:.3f}'})")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
