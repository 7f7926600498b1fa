"""`--plan game-timeout` (docs/study/game-timeout, game-timeout-60): the game with a timed-out game
forfeited too (`forfeit_on_timeout`). With lost games alone forfeited, a policy that narrows the
pool to one candidate and never names it keeps 3 of 4 bits, and one seed of each estimator
learned to (docs/results.md, 2026-11-26); now only a solve pays."""

from __future__ import annotations

from experiments.game_forfeit.plan import GAME_FORFEIT_OPTIONS, game_forfeit_plan
from mapo.lab.ablate.plan import AblationPlan, with_env_options

GAME_TIMEOUT_OPTIONS = {**GAME_FORFEIT_OPTIONS, "forfeit_on_timeout": True}


def game_timeout_plan() -> AblationPlan:
    """The game-forfeit plan with a game that runs out of turns unsolved forfeited as a lost one:
    its five IDR variants, 3 seeds."""
    plan = with_env_options(game_forfeit_plan(), GAME_TIMEOUT_OPTIONS, "game-timeout")
    plan.variants, plan.seeds = ["mapo-idr", "grpo-idr", "mapo_ragged-idr", "turn-idr", "batch-idr"], [0, 1, 2]
    return plan
