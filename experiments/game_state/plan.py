"""The study of the game in the state view, registered through the plug-in path (a
`package.module:factory` name), so the library keeps no dated plan:

    bash experiments/game_state/build_warm_start.sh runs/game-state-warm      # the weak warm start
    mapo ablate --plan experiments.game_state.plan:state_tight_plan --output runs/game-state-tight
    mapo ablate --plan experiments.game_state.plan:state_long_plan --variants <best two> --output runs/game-state-long

Both plans: MAPO, GRPO, `mapo_ragged` and the state-keyed `mapo_state` on IDR at learning rate 2e-4,
paired by seed (5 seeds at the tight setting), the policy reading the state alone (`view: state`) with
the replies left shown, a lost or timed-out game forfeited (only a solve keeps its bits). Each unit
trains until held-out success levels off: evaluated every 10 steps on the 20 test secrets x 8 games,
it stops once three evaluations in a row each gained less than 2 points, or at 200 steps
(mapo.lab.ablate.plateau). The warm start is SFT on the random player's games in the same view.
"""

from __future__ import annotations

from typing import Any

from mapo.lab.ablate.plan import AblationPlan, questioning_plan
from mapo.lab.ablate.plateau import PlateauStop

VARIANTS = ["mapo-idr-lr2e-4", "grpo-idr-lr2e-4", "mapo_ragged-idr-lr2e-4", "mapo_state-idr-lr2e-4"]
WARM_START = "runs/game-state-warm/sft/final"  # build_warm_start.sh's model


def state_options(pool_size: int, replies: int) -> dict[str, Any]:
    """The game at one setting, in the state view with the budget shown and unsolved games forfeited."""
    return {"pool_size": pool_size, "max_turns": replies, "view": "state", "show_turns_left": True,
            "scoring": "forfeit_unsolved"}


def _plan(name: str, pool_size: int, replies: int, seeds: list[int]) -> AblationPlan:
    return questioning_plan(name, state_options(pool_size, replies), replies, WARM_START, VARIANTS, seeds, 200,
                             transcripts_every=10, stop=PlateauStop(every=10, patience=3, min_gain=0.02))


def state_tight_plan() -> AblationPlan:
    """Pool 8, 5 replies: the four estimators, 5 seeds, each to its plateau (at most 200 steps)."""
    return _plan("game-state-tight", 8, 5, [0, 1, 2, 3, 4])


def state_long_plan() -> AblationPlan:
    """Pool 32, 7 replies: the longer horizon, 3 seeds (run with `--variants` set to the best two)."""
    return _plan("game-state-long", 32, 7, [0, 1, 2])
