"""The study of the game with the table in view (issue 56 item 6), registered through the
plug-in path (mapo.registry: a `package.module:factory` name), so the library keeps no dated plan:

    bash experiments/game_table/build_warm_start.sh runs/game-table-warm     # the weak warm start
    mapo ablate --plan experiments.game_table.plan:table_tight_plan \
        --set policy.model=runs/game-table-warm/sft/final --output runs/game-table-tight
    mapo ablate --plan experiments.game_table.plan:table_long_plan ...       # pool 32, 7 replies

Both plans: MAPO, GRPO and `mapo_ragged` on IDR at learning rate 2e-4, paired by seed (5 seeds),
with the table and the replies left shown and a lost or timed-out game forfeited (only a solve
keeps its bits). The tight budget (pool 8, 5 replies) is where the reference players separate
(docs/games.md: random 43 %, informative 82 %, optimal 99 % on the test secrets); the long one
(pool 32, 7 replies) is the longer horizon where turn-level credit should matter most. The policy
chooses when the game ends (it guesses), the case where MAPO's normalisation by turn index can
carry a length bias: `mapo_ragged` against MAPO decides whether the T_min cut or the ragged form
is better there. The warm start is built at the tight setting; the long plan starts from it too
(the format and the table's reading carry over; the pool and budget are new to it).

`hidden_tight_plan`: the tight setting with the table hidden, so the model must know the facts it asks
about (issue 60 compares SmolLM2 and Gemma 3 270M with and without it: experiments/models/side_by_side.sh).

`table_chance_plan`: the tight setting with `need: chance` instead of bits and forfeits (the
distance is the best questioner's chance of failing from here, so a reply that wastes the budget
costs on its own turn): whether MAPO still learns to stall when the reward it reads turn by turn
carries the budget (`credit.py` measured why it stalls on bits).
"""

from __future__ import annotations

from typing import Any

from mapo.lab.ablate.plan import AblationPlan, CurveBudget, questioning_plan

VARIANTS = ["mapo-idr-lr2e-4", "grpo-idr-lr2e-4", "mapo_ragged-idr-lr2e-4"]
SEEDS = [0, 1, 2, 3, 4]
WARM_START = "runs/game-table-warm/sft/final"  # build_warm_start.sh's model


def table_options(pool_size: int, replies: int, need: str = "bits", show_table: bool = True) -> dict[str, Any]:
    """The game's options at one setting: the table (unless `show_table` is off) and the budget shown;
    on bits, losses forfeited (`need: chance` charges a lost game itself)."""
    shown = {"pool_size": pool_size, "max_turns": replies, "show_table": show_table, "show_turns_left": True}
    if need == "chance":
        return {**shown, "need": "chance"}
    return {**shown, "forfeit_on_failure": True, "forfeit_on_timeout": True}


def _plan(name: str, pool_size: int, replies: int, steps: int, need: str = "bits",
          show_table: bool = True) -> AblationPlan:
    return questioning_plan(name, table_options(pool_size, replies, need, show_table), replies, WARM_START,
                             VARIANTS, SEEDS, steps, curve=CurveBudget(every=5, samples=2))


def table_tight_plan() -> AblationPlan:
    """Pool 8, 5 replies: MAPO, GRPO, mapo_ragged, 5 seeds, 40 steps."""
    return _plan("game-table-tight", 8, 5, steps=40)


def table_long_plan() -> AblationPlan:
    """Pool 32, 7 replies: the same grid at the longer horizon."""
    return _plan("game-table-long", 32, 7, steps=40)


def hidden_tight_plan() -> AblationPlan:
    """Pool 8, 5 replies with the table hidden (the candidates listed, their attributes not): the
    same grid, for a model's own knowledge of the facts (issue 60)."""
    return _plan("game-hidden-tight", 8, 5, steps=40, show_table=False)


def table_chance_plan() -> AblationPlan:
    """Pool 8, 5 replies, the need as the best questioner's chance of failing: the same grid."""
    return _plan("game-table-chance", 8, 5, steps=40, need="chance")
