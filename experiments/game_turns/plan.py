"""`--plan game-turns` and `--plan game-turns-alpha` (docs/study/game-turns, game-turns-60,
game-turns-alpha): the game with the turn budget shown (`show_turns_left`).

With timeouts forfeited, RL learned to guess by candidates left alone, at 4 candidates with 6
replies left as with 1 left, since the policy could not see the budget (docs/results.md,
2026-11-27); shown, guessing on the last reply is learnable (the reference players do it, so a
warm start built from their games recorded with the budget shown does: docs/games.md) and an
early gamble no longer stands in for it.
"""

from __future__ import annotations

from experiments.game_forfeit.plan import game_forfeit_plan
from experiments.game_timeout.plan import GAME_TIMEOUT_OPTIONS
from mapo.lab.ablate.plan import AblationPlan, with_env_options

GAME_TURNS_OPTIONS = {**GAME_TIMEOUT_OPTIONS, "show_turns_left": True}


def game_turns_plan() -> AblationPlan:
    """The game plan's grid and MAPO without the T_min cut, all at learning rate 2e-4 (the steadier
    rate on this game), 5 seeds, on the game-timeout settings with the replies left shown."""
    plan = with_env_options(game_forfeit_plan(), GAME_TURNS_OPTIONS, "game-turns")
    plan.variants = ["mapo-idr-lr2e-4", "grpo-idr-lr2e-4", "mapo_ragged-idr-lr2e-4", "turn-idr-lr2e-4",
                     "batch-idr-lr2e-4", "rloo-idr-lr2e-4", "mapo-outcome-lr2e-4"]
    return plan


def game_turns_alpha_plan() -> AblationPlan:
    """The alpha sweep on the game-turns settings: MAPO's turn-level share of the mix at 0 (batch
    only), 0.25, 0.5 (MAPO), 0.75 and 1 (turn only), at learning rate 2e-4, 3 seeds."""
    plan = game_turns_plan()
    plan.variants = ["batch-idr-lr2e-4", "mapo-a0.25-idr-lr2e-4", "mapo-idr-lr2e-4", "mapo-a0.75-idr-lr2e-4",
                     "turn-idr-lr2e-4"]
    plan.seeds = [0, 1, 2]
    plan.name = "game-turns-alpha"
    return plan
