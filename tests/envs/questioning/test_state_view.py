"""`view: state` (the policy's context for each reply is the game's state alone), the reference
players on it, the exact state key, and the question-quality info (`split`, `most_even`) with
the figures it feeds."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from cli_output import flat
from game_play import play
from mapo.cli import app
from mapo.core.rollout import RolloutSpec, rollout
from mapo.envs.base import environment_factory, load_scenarios, make_environment, reply_context
from mapo.envs.questioning.cases import bundled_case_file, load_case_set
from mapo.envs.questioning.metrics import game_summary
from mapo.envs.questioning.players import Player, known_tables, read_state
from mapo.evaluate.player_budgets import Setting, play_players
from mapo.sft.data import read_dialogues
from mapo.sft.demos import write_demos

TQ = "twenty-questions"
TS = "troubleshooting"
TIGHT = {"pool_size": 8, "max_turns": 5, "show_turns_left": True}


def _expected_state(env_name, table, left, unasked, last_answer=None, replies_left=None):
    """The state message spelled out from the table: what the policy must read."""
    labels = make_environment(env_name).labels
    lines = [table.intro] if table.intro else []
    if last_answer is not None:
        lines.append(f"Last answer: {last_answer}")
    lines.append(f"{labels[0]} still possible: {', '.join(left)}.")
    lines.append(f"{labels[2]}:")
    lines += [f"{name}: {', '.join(table.true_of(name)) or '-'}" for name in left]
    lines.append(f"{labels[1]} not asked yet: {' '.join(a.question for a in unasked)}")
    if replies_left is not None:
        lines.append(f"{replies_left} {'reply' if replies_left == 1 else 'replies'} left.")
    return "\n".join(lines)


@pytest.mark.parametrize("env_name", [TQ, TS])
@pytest.mark.parametrize("show_turns_left", [True, False])
def test_the_state_message_is_the_candidates_left_the_questions_left_and_the_last_answer(env_name, show_turns_left):
    scenario = load_scenarios(env_name, "test")[0]
    table = load_case_set(bundled_case_file(env_name)).table(scenario.card["table"])
    options = {"max_turns": 5, "show_turns_left": show_turns_left}
    env = make_environment(env_name, view="state", **options)
    with pytest.raises(RuntimeError, match="reset"):
        env.reply_context()
    opening = env.reset(scenario)
    assert opening == make_environment(env_name, view="table", **options).reset(scenario)  # the transcript's opening
    pool = list(env.game.pool)
    budget = (lambda n: n) if show_turns_left else (lambda n: None)
    state = env.reply_context()
    assert state == _expected_state(env_name, table, pool, table.attributes, replies_left=budget(5))
    assert "Last answer" not in state and state.endswith("5 replies left.") == show_turns_left
    assert reply_context(env) == state  # as the rollout asks for it

    # a question that splits the pool, a second one, then a re-ask: the state follows the game
    secret = scenario.card["secret"]
    first, second = _two_splitting_questions(table, pool, secret)
    said = [env.step(first.question), env.step(second.question), env.step(first.question)]
    asked = {first.key, second.key}
    unasked = [a for a in table.attributes if a.key not in asked]
    answer = "Yes" if table.answer(secret, first.key) else "No"
    assert said[-1].info["kind"] == "repeat" and not said[-1].done
    state = env.reply_context()
    left = env.game.consistent()
    assert 1 <= len(left) < len(pool) and secret in left
    assert state == _expected_state(env_name, table, left, unasked, f"{answer}, as I said.", budget(2))
    assert first.question not in state and second.question not in state  # asked: no longer offered
    assert [name for name in pool if name not in left and f"\n{name}: " in state] == []  # ruled out: gone
    # the transcript keeps the table view's messages
    _, _, conversation = play(env_name, scenario, [first.question, second.question, first.question, "What?", "What?"],
                              view="table", **options)
    assert [r.user_message for r in said] == [m["content"] for m in conversation[3:9:2]]
    # the reference players read the state back exactly
    assert read_state(state, known_tables()) == (table, left, [a.key for a in unasked])


def _two_splitting_questions(table, pool, secret):
    """Two questions that each split what is left of `pool` when asked in turn (`secret` answering)."""
    def splits(key, left):
        return 0 < sum(table.answer(c, key) for c in left) < len(left)

    for first in table.attributes:
        left = [c for c in pool if table.answer(c, first.key) == table.answer(secret, first.key)]
        second = next((a for a in table.attributes if a is not first and splits(a.key, left)), None)
        if splits(first.key, pool) and second is not None:
            return first, second
    raise AssertionError("no two splitting questions")


@pytest.mark.parametrize("view", ["names", "candidates", "table"])
def test_other_views_give_no_context_of_their_own(view):
    env = make_environment(TQ, view=view)
    env.reset(load_scenarios(TQ, "test")[0])
    assert env.reply_context() is None and reply_context(env) is None
    env.step("Is it alive?")
    assert env.reply_context() is None


def _played(kind, view):
    factory = environment_factory(TQ, {**TIGHT, "view": view})
    scenarios = load_scenarios(TQ, "test")
    spec = RolloutSpec(scenarios_per_step=len(scenarios), samples_per_scenario=1, max_turns=5)
    groups = rollout(Player(kind, seed=1), scenarios, factory, spec, seed=0)
    assert [len(g.trajectories) for g in groups] == [1] * len(scenarios)
    return [g.trajectories[0] for g in groups]


@pytest.mark.parametrize("kind", ["optimal", "informative", "random"])
def test_each_reference_player_plays_the_state_as_it_plays_the_table(kind):
    table_view, state_view = _played(kind, "table"), _played(kind, "state")
    for shown, state in zip(table_view, state_view):
        assert shown.done_reason == state.done_reason
        assert [t.response for t in shown.turns] == [t.response for t in state.turns]
        assert [t.user_message for t in shown.turns] == [t.user_message for t in state.turns]  # the same transcript
        assert [t.info["state_key"] for t in shown.turns] == [t.info["state_key"] for t in state.turns]
        assert all(t.context_message is None and t.context_ids is None for t in shown.turns)
        assert all(t.context_message is not None for t in state.turns)
        assert all(t.context_ids is None for t in state.turns)  # text-only players have no ids
        assert state.turns[0].context_message.startswith("Candidates still possible: ")
        assert all("Last answer: " in t.context_message for t in state.turns[1:])
        left = 6 - len(state.turns)  # the replies left when the last one was chosen
        assert state.turns[-1].context_message.endswith(f"{left} {'reply' if left == 1 else 'replies'} left.")
    solved = sum(t.done_reason == "success" for t in state_view)
    if kind == "optimal":
        assert solved == len(state_view)  # pool 8 in 5 replies: 3 questions and the guess, with a reply to spare
    else:
        assert 0 < solved < len(state_view)


def test_the_state_key_names_the_state_a_reply_was_chosen_in():
    scenario = load_scenarios(TQ, "test")[0]
    table = load_case_set(bundled_case_file(TQ)).table(scenario.card["table"])
    env = make_environment(TQ, max_turns=6)
    pool = env.reset(scenario).splitlines()[0].removeprefix("Candidates: ").removesuffix(".").split(", ")
    first, second = _two_splitting_questions(table, pool, scenario.card["secret"])
    one_way, _, _ = play(TQ, scenario, [first.question, second.question, "What is it?"], max_turns=6)
    other_way, _, _ = play(TQ, scenario, [second.question, first.question, "What is it?"], max_turns=6)
    again, _, _ = play(TQ, scenario, [first.question, second.question, "What is it?"], max_turns=6, view="state")
    assert one_way[0]["state_key"] == other_way[0]["state_key"] == f"{','.join(sorted(pool))}||6"  # before the reply
    assert one_way[1]["state_key"] != other_way[1]["state_key"]  # different questions asked: different states
    assert one_way[2]["state_key"] == other_way[2]["state_key"]  # the same answers, in another order: one state
    assert [i["state_key"] for i in again] == [i["state_key"] for i in one_way]  # the view changes no state
    assert one_way[2]["state_key"].endswith(f"|{','.join(sorted((first.key, second.key)))}|4")
    # a question that rules nothing out still changes the state (one question fewer to ask), as does a turn spent
    useless = next(a for a in table.attributes if len({table.answer(c, a.key) for c in pool}) == 1)
    asked, _, _ = play(TQ, scenario, [useless.question, "What is it?", "What is it?"], max_turns=6)
    stalled, _, _ = play(TQ, scenario, ["What is it?", "What is it?", "What is it?"], max_turns=6)
    assert asked[1]["state_key"].split("|")[0] == stalled[1]["state_key"].split("|")[0] == ",".join(sorted(pool))
    assert len({asked[1]["state_key"], stalled[1]["state_key"], stalled[2]["state_key"]}) == 3


def test_split_and_most_even_judge_each_question_and_feed_the_figures():
    scenario = load_scenarios(TQ, "test")[0]
    assert scenario.card["secret"] == "horse"
    replies = ["Is it alive?", "Is it sweet?", "What is it?", "Is it alive?", "Is it usually outdoors?",
               "Is it bigger than a person?", "Guess: horse"]
    infos, _, _ = play(TQ, scenario, replies, max_turns=9)
    # alive: 2 of the 8 (usually outdoors would have split them 4 | 4); nothing is sweet; the re-ask
    # and outdoors (both horse and turtle) teach nothing; bigger tells the two apart, as evenly as can be
    assert [i["kind"] for i in infos] == ["question", "question", "invalid", "repeat", "question", "question", "guess_right"]
    assert [i["split"] for i in infos] == [True, False, None, False, False, True, None]
    assert [i["most_even"] for i in infos] == [False, False, None, False, False, True, None]
    figures = game_summary([{"done_reason": "success", "turns": infos}])
    assert figures["split_rate"] == pytest.approx(2 / 5) and figures["most_even_rate"] == pytest.approx(1 / 5)
    assert figures["split_share"] == pytest.approx(2 / 7) and figures["most_even_share"] == pytest.approx(1 / 7)
    first, _, _ = play(TQ, scenario, ["Is it usually outdoors?", "Guess: horse"])
    assert (first[0]["split"], first[0]["most_even"]) == (True, True)  # horse, rock, turtle, helicopter | the rest
    # once one candidate is left no question splits, so none is the most even (a stall, not a good question)
    stalled, _, _ = play(TQ, scenario, ["Is it alive?", "Is it bigger than a person?", "Is it made of metal?"], max_turns=3)
    assert stalled[-1]["candidates_left"] == 1 and (stalled[-1]["split"], stalled[-1]["most_even"]) == (False, False)
    figures = game_summary([{"done_reason": "timeout", "turns": stalled}])
    assert figures["split_rate"] == pytest.approx(2 / 3) and figures["most_even_rate"] == pytest.approx(1 / 3)
    # transcripts written before these keys: no figures, not zeros
    older = [{k: v for k, v in i.items() if k not in ("split", "most_even")} for i in infos]
    figures = game_summary([{"done_reason": "success", "turns": older}])
    assert [figures[k] for k in ("split_rate", "most_even_rate", "split_share", "most_even_share")] == [None] * 4
    # guesses only: no question to judge
    guessed = game_summary([{"done_reason": "success", "turns": play(TQ, scenario, ["Guess: horse"])[0]}])
    assert guessed["split_rate"] is None and guessed["split_share"] is None


def test_player_budgets_are_the_same_on_the_state_and_the_optimal_player_asks_the_most_even_question():
    rows = {view: play_players(TQ, "test", [Setting(8, 5)], pools=2, options={"show_turns_left": True, "view": view})
            for view in ("table", "state")}
    assert rows["table"] == rows["state"]
    by = {r["player"]: r for r in rows["state"]}
    assert {r["games"] for r in rows["state"]} == {2 * len(load_scenarios(TQ, "test"))}
    assert by["player:optimal"]["most_even_rate"] == 1.0 == by["player:optimal"]["split_rate"]
    assert by["player:informative"]["split_rate"] == 1.0 > by["player:informative"]["most_even_rate"]
    assert by["player:random"]["split_rate"] < 1.0
    one_pool = play_players(TQ, "test", [Setting(8, 5)], pools=1, players=["player:random"], options=TIGHT)
    assert one_pool[0]["games"] == len(load_scenarios(TQ, "test")) and one_pool[0] != by["player:random"]


def test_demonstrations_on_the_state_are_one_record_per_reply(tmp_path):
    path = tmp_path / "demos.jsonl"
    options = {**TIGHT, "view": "state"}
    counts = write_demos(TQ, "optimal", 3, "test", path, options)
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert counts["written"] == 3 and counts["solved"] == 3 and counts["replies"] == len(records) > 3
    scenarios = {s.id: s for s in load_scenarios(TQ, "test")}
    games = {}
    for record in records:
        number, _, turn = record["id"].rpartition("-")
        games.setdefault(number, []).append((int(turn), record))
    assert len(games) == 3
    for number, played in games.items():
        assert [turn for turn, _ in played] == list(range(1, len(played) + 1))
        meta = played[0][1]["meta"]
        assert all(r["meta"] == meta for _, r in played) and meta["turns"] == len(played)
        env = make_environment(TQ, **options)
        env.reset(scenarios[meta["scenario_id"]])
        for _, record in played:  # each: the system prompt, the state the reply was chosen in, the reply
            system, state, reply = record["messages"]
            assert system == {"role": "system", "content": env.system_prompt}
            assert state == {"role": "user", "content": env.reply_context()} and reply["role"] == "assistant"
            env.step(reply["content"])
        assert env.done_reason == "success"
    assert len(read_dialogues(path)) == len(records)  # a file `mapo sft` reads
    plain = write_demos(TQ, "optimal", 3, "test", tmp_path / "plain.jsonl", TIGHT)
    lines = (tmp_path / "plain.jsonl").read_text().splitlines()
    assert plain["written"] == len(lines) == 3 and plain["replies"] == counts["replies"]  # one record a game
    result = CliRunner().invoke(app, ["env", "demos", TS, "--player", "optimal", "--games", "2", "--env-option", "view=state",
                                      "--out", str(path)])
    assert result.exit_code == 0, result.output
    assert "2 games written (2 of 2 solved)" in flat(result.output)
    assert len(path.read_text().splitlines()) > 2
