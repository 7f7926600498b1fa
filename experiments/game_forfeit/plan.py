"""The game with a lost game scored as no progress (`forfeit_on_failure`), and the two studies run
on those rules: `--plan game-forfeit`, `--plan game-alpha` and `--plan game-lr` (docs/study/game-lr).

IDR read turn by turn pays a wrong guess the candidate it removes, so a blind guess among few
candidates out-earns a good question (docs/games.md); forfeiting returns the need to its start
when the game is lost, so a losing dialogue's rewards sum to 0. The game template otherwise.
"""

from __future__ import annotations

from mapo.lab.ablate.plan import AblationPlan, game_plan, with_env_options

GAME_FORFEIT_OPTIONS = {"pool_size": 8, "show_candidates": True, "forfeit_on_failure": True}


def game_forfeit_plan() -> AblationPlan:
    """The game plan's grid (MAPO, GRPO, turn-only, batch-only and RLOO on IDR, MAPO on the outcome)
    and MAPO without the T_min cut (MAPO's cut leaves half the guesses untrained), 5 seeds, on the
    questioning game with lost games forfeited."""
    plan = with_env_options(game_plan(), GAME_FORFEIT_OPTIONS, "game-forfeit")
    plan.variants = ["mapo-idr", "grpo-idr", "mapo_ragged-idr", "turn-idr", "batch-idr", "rloo-idr", "mapo-outcome"]
    return plan


def game_alpha_plan() -> AblationPlan:
    """The alpha sweep on the game-forfeit settings: MAPO's turn-level share of the mix at 0 (batch
    only), 0.25, 0.5 (MAPO), 0.75 and 1 (turn only), 3 seeds."""
    plan = game_forfeit_plan()
    plan.variants = ["batch-idr", "mapo-a0.25-idr", "mapo-idr", "mapo-a0.75-idr", "turn-idr"]
    plan.seeds = [0, 1, 2]
    plan.name = "game-alpha"
    return plan


def game_lr_plan() -> AblationPlan:
    """MAPO and GRPO each at learning rates 5e-4 and 2e-4 on the game-forfeit settings, seeds 3-7:
    the rate that suits one estimator's gradients need not suit the other's, so a comparison of
    estimators needs each at more than one (docs/results.md, 2026-11-27)."""
    plan = game_forfeit_plan()
    plan.variants = ["mapo-idr", "grpo-idr", "mapo-idr-lr2e-4", "grpo-idr-lr2e-4"]
    plan.seeds = [3, 4, 5, 6, 7]  # those of the first lr 2e-4 runs, copied in (docs/study/game-lr)
    plan.name = "game-lr"
    return plan
