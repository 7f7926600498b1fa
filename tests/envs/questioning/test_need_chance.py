"""`scoring: chance`: the distance as the best questioner's chance of failing from here, so a reply
that wastes the budget costs on its own turn (issue 56: what MAPO's immediate half reads)."""

from __future__ import annotations

import pytest

from game_play import play
from mapo.core.rewards import rewards_from_distances
from mapo.envs.base import load_scenarios, make_environment
from mapo.envs.questioning.game import win_chance
from mapo.envs.questioning.players import Player

TQ = "twenty-questions"
TIGHT = {"pool_size": 8, "max_turns": 5, "show_turns_left": True, "scoring": "chance"}


def test_win_chance_counts_the_groups_the_questions_left_can_make():
    assert win_chance(8, 4) == 1.0  # 3 questions split 8 into single candidates
    assert win_chance(8, 3) == 0.5  # 2 questions make 4 groups of 2: the guess wins half
    assert win_chance(3, 2) == pytest.approx(2 / 3)  # ask once (1 | 2), then guess
    assert win_chance(5, 1) == 0.2 and win_chance(1, 1) == 1.0
    with pytest.raises(ValueError, match="candidates and replies left"):
        win_chance(4, 0)


def test_stalling_costs_once_the_slack_is_gone_and_a_game_sums_to_its_outcome():
    scenario = load_scenarios(TQ, "test")[0]
    optimal = Player("optimal")
    won, won_d, _ = play(TQ, scenario, lambda c: optimal.reply(c[1:]), **TIGHT)
    assert won[-1]["done_reason"] == "success" and won_d[0] == 0.0 == won_d[-1]
    assert rewards_from_distances(won_d, "idr") == pytest.approx([0.0] * len(won))  # no chance ever lost

    stall, stall_d, _ = play(TQ, scenario, ["Is it alive?"], **TIGHT)  # the same question, five times
    assert [i["kind"] for i in stall] == ["question", "repeat", "repeat", "repeat", "repeat"]
    assert stall[-1]["done_reason"] == "timeout" and stall_d[-1] == 1.0
    assert [i["candidates_left"] for i in stall] == [2] * 5  # this secret's pool: "alive" leaves two
    # two candidates need one more question while 2+ replies are left: the re-asks are free until
    # the one that leaves a single reply (a coin-flip guess: half the chance), and the last re-ask
    # times the game out (the other half)
    assert rewards_from_distances(stall_d, "idr") == pytest.approx([0.0, 0.0, 0.0, -0.5, -0.5])
    assert [i["bits"] for i in stall][0] > 0  # the information figures are the game's, unchanged


def test_a_guess_is_charged_the_chance_it_throws_away():
    scenario = load_scenarios(TQ, "test")[0]
    secret = scenario.card["secret"]
    env = make_environment(TQ, **TIGHT)
    opening = env.reset(scenario)
    other = next(c for c in opening.split("\n")[0].removeprefix("Candidates: ").rstrip(".").split(", ") if c != secret)
    lost = env.step(f"Guess: {other}")
    assert lost.info["done_reason"] == "failure" and lost.action == pytest.approx((-1.0,))
    env.reset(scenario)
    won = env.step(f"Guess: {secret}")
    assert won.info["done_reason"] == "success" and won.action == pytest.approx((0.0,))  # the best player wins too


def test_chance_is_the_same_under_its_older_name_and_refuses_forfeits_and_unknown_scorings():
    scenario = load_scenarios(TQ, "test")[0]
    older = {**TIGHT, "need": "chance"}
    del older["scoring"]
    for replies in (["Is it alive?"], [f"Guess: {scenario.card['secret']}"]):
        assert play(TQ, scenario, replies, **older)[1] == play(TQ, scenario, replies, **TIGHT)[1]
    with pytest.raises(ValueError, match="need: chance takes no forfeits; use scoring: chance"):
        make_environment(TQ, need="chance", forfeit_on_failure=True)
    with pytest.raises(ValueError, match="wrong_guesses_allowed is no longer a setting"):
        make_environment(TQ, scoring="chance", wrong_guesses_allowed=1)
    with pytest.raises(ValueError, match="scoring must be one of bits, forfeit_losses, forfeit_unsolved, chance"):
        make_environment(TQ, scoring="hope")
