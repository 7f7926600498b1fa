"""The questioning game: case sets, the exact question mapping, rewards that cannot be gamed,
reference players, evaluation by name and demonstrations."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli_output import flat
from game_play import play
from mapo.cli import app
from mapo.config import load_config
from mapo.core.rewards import rewards_from_distances
from mapo.envs.base import load_scenarios, make_environment
from mapo.envs.questioning.cases import CaseError, bundled_case_file, forget_case_sets, load_case_set
from mapo.envs.questioning.parse import parse_reply
from mapo.envs.questioning.players import Player
from mapo.evaluate.runner import EvalSpec, run_eval
from mapo.sft.demos import write_demos

TQ = "twenty-questions"
TS = "troubleshooting"


def things():
    return load_case_set(bundled_case_file(TQ)).table("things")


def idr_return(distances):
    return sum(rewards_from_distances(distances, "idr"))


# ---------------------------------------------------------------- case sets


def test_bundled_case_sets_have_their_sizes_and_splits():
    table = things()
    assert len(table.candidates) >= 64 and len(table.attributes) >= 16
    assert len({table.facts[c] for c in table.candidates}) == len(table.candidates)  # all told apart
    train, test = load_scenarios(TQ, "train"), load_scenarios(TQ, "test")
    assert {s.card["secret"] for s in train}.isdisjoint(s.card["secret"] for s in test) and len(test) >= 16
    devices = load_case_set(bundled_case_file(TS)).tables
    assert len(devices) >= 6
    for device in devices:
        assert len(device.candidates) >= 12 and len(device.attributes) >= 10
        assert all(device.fixes[f] for f in device.candidates)
    held_out = {d.name for d in devices if d.split == "test"}
    train_ts, test_ts = load_scenarios(TS, "train"), load_scenarios(TS, "test")
    assert held_out and not any(s.card["table"] in held_out for s in train_ts)
    assert held_out < {s.card["table"] for s in test_ts}
    assert {s.card["table"] for s in test_ts} - held_out  # held-out faults of training devices too
    assert {s.id for s in train_ts}.isdisjoint(s.id for s in test_ts)


def _case_file(tmp_path, candidates, attributes=None):
    attributes = attributes or {
        "alive": {"question": "Is it alive?", "phrases": ["alive"]},
        "round": {"question": "Is it round?", "phrases": ["round"]},
    }
    path = tmp_path / "cases.yaml"
    path.write_text(json.dumps({"name": "mine", "tables": [{"name": "t", "subject": "thing", "attributes": attributes,
                                                            "candidates": candidates}]}))
    forget_case_sets()
    return path


def test_bad_case_sets_name_the_file_and_field(tmp_path):
    same = {"dog": {"has": ["alive"]}, "cat": {"has": ["alive"]}, "ball": {"has": ["round"]}}
    with pytest.raises(CaseError, match=r"cases\.yaml: field tables\[0\]\.candidates\.cat: no attribute tells 'dog' and 'cat' apart"):
        load_case_set(_case_file(tmp_path, same))
    unknown = {"dog": {"has": ["alive", "wings"]}, "ball": {"has": ["round"]}}
    with pytest.raises(CaseError, match=r"cases\.yaml: field tables\[0\]\.candidates\.dog\.has: unknown attribute\(s\) wings"):
        load_case_set(_case_file(tmp_path, unknown))
    clash = {"alive": {"question": "Is it alive?", "phrases": ["alive"]}, "dog_like": {"question": "Is it a dog?", "phrases": ["dog"]}}
    with pytest.raises(CaseError, match=r"attributes\.dog_like\.phrases: 'dog' overlaps the candidate name 'dog'"):
        load_case_set(_case_file(tmp_path, {"dog": {"has": ["alive"]}, "ball": {}}, clash))
    compound = {"alive": {"question": "Is it alive and round?", "phrases": ["alive"]},
                "round": {"question": "Is it round?", "phrases": ["round"]}}
    with pytest.raises(CaseError, match=r"attributes\.alive\.question: 'Is it alive and round\?' does not ask exactly"):
        load_case_set(_case_file(tmp_path, {"dog": {"has": ["alive"]}, "ball": {"has": ["round"]}}, compound))
    with pytest.raises(CaseError, match=r"cases\.yaml: field tables\.0\.candidates\.dog\.colour"):
        load_case_set(_case_file(tmp_path, {"dog": {"has": ["alive"], "colour": "brown"}, "ball": {}}))


def test_pool_larger_than_the_set_is_refused_with_the_file():
    env = make_environment(TS, pool_size=16)
    with pytest.raises(CaseError, match=r"troubleshooting\.yaml: pool_size 16: table 'printer' has 12 candidates"):
        env.reset(load_scenarios(TS, "train")[0])
    with pytest.raises(ValueError, match="pool_size must be an integer >= 2"):
        make_environment(TQ, pool_size=1)


def test_a_scenario_fixes_its_pool_for_every_dialogue():
    scenario = load_scenarios(TQ, "test")[3]
    openings = {make_environment(TQ).reset(scenario, seed=seed) for seed in range(5)}
    assert len(openings) == 1
    pool = openings.pop().splitlines()[0].removeprefix("Candidates: ").removesuffix(".").split(", ")
    assert len(pool) == 8 and scenario.card["secret"] in pool
    big = make_environment(TQ, pool_size=32).reset(scenario).splitlines()[0]
    assert len(big.split(", ")) == 32
    # the card's pool_seed draws another pool of the same secret (every dialogue of it the same)
    reseeded = dataclasses.replace(scenario, card={**scenario.card, "pool_seed": 3})
    other = {make_environment(TQ).reset(reseeded, seed=seed) for seed in range(3)}
    assert len(other) == 1
    other_pool = other.pop().splitlines()[0].removeprefix("Candidates: ").removesuffix(".").split(", ")
    assert scenario.card["secret"] in other_pool and set(other_pool) != set(pool)
    assert make_environment(TQ).reset(dataclasses.replace(scenario, card={**scenario.card, "pool_seed": 0})).splitlines()[0] \
        == make_environment(TQ).reset(scenario).splitlines()[0]  # seed 0 is the card without one


# ---------------------------------------------------------------- the exact mapping


@pytest.mark.parametrize(
    "reply, kind, value",
    [
        ("Is it alive?", "question", "alive"),
        ("  is it a LIVING thing?  ", "question", "alive"),  # a phrase of the same attribute
        ("Could it be used for sport?", "question", "play"),
        ('"Is it a container?"', "question", "container"),  # quoted
        ("Is it alive and round?", "invalid", "several_attributes"),  # compound
        ("Is it alive, round, soft or sharp?", "invalid", "several_attributes"),  # enumeration of attributes
        ("Is it a cup or a fork?", "invalid", "names_candidate"),  # listing candidates is not a guess
        ("Is it a dog?", "invalid", "names_candidate"),
        ("Is it alive? Is it round?", "invalid", "not_one_question"),  # several question marks
        ("Is it alive", "invalid", "not_one_question"),  # cut before the question mark
        ("Is it alive? Does it", "invalid", "not_one_question"),  # cut mid-way through a second one
        ("Isn't it alive?", "invalid", "negation"),
        ("Is it not made of metal?", "invalid", "negation"),
        ("Isnt it alive?", "invalid", "negation"),  # a contraction without its apostrophe
        ("Isn`t it alive?", "invalid", "negation"),  # a backtick for the apostrophe
        ("Isn\u02bct it alive?", "invalid", "negation"),  # U+02BC, the modifier letter apostrophe
        ("Isn\u2019t it alive?", "invalid", "negation"),
        ("Is it non-living?", "invalid", "negation"),
        ("Is it un-alive?", "invalid", "negation"),
        ("Is it anything but alive?", "invalid", "negation"),
        ("Is it the opposite of alive?", "invalid", "negation"),
        ("Is it lacking anything alive?", "invalid", "negation"),
        ("Is it free of metal?", "invalid", "negation"),
        ("Is it something other than alive?", "invalid", "negation"),
        ("Cannot you eat it?", "invalid", "negation"),
        ("Is it unliving?", "invalid", "off_list"),  # a prefix written into the word names no phrase
        ("What is it?", "invalid", "off_list"),
        ("?", "invalid", "off_list"),
        ("", "invalid", "empty"),
        ("Guess: dog", "guess", "dog"),
        ("guess: The Computer Mouse.", "guess", "computer mouse"),
        ("Guess: dog or cup", "invalid", "unknown_guess"),
        ("Guess: dog, cup", "invalid", "unknown_guess"),
        ("Guess: dog. Is it alive?", "invalid", "unknown_guess"),
        ("Guess: unicorn", "invalid", "unknown_guess"),
    ],
)
def test_replies_map_exactly(reply, kind, value):
    move = parse_reply(reply, things())
    assert move.kind == kind
    assert {"question": move.attribute, "guess": move.candidate, "invalid": move.reason}[kind] == value


def test_every_listed_question_asks_its_own_attribute():
    for name in (TQ, TS):
        for table in load_case_set(bundled_case_file(name)).tables:
            for a in table.attributes:
                assert parse_reply(a.question, table).attribute == a.key


# ---------------------------------------------------------------- rewards that cannot be gamed


def test_non_questions_earn_nothing_and_a_rephrased_repeat_earns_nothing():
    scenario = load_scenarios(TQ, "test")[0]
    gaming = ["Is it alive and round?", "Is it a horse or a rock?", "Is it alive? Is it round?", "", "What is it?",
              "Is it not alive?", "Is it alive", "Guess: horse or rock", "Guess: unicorn"]
    infos, distances, conversation = play(TQ, scenario, gaming * 2, max_turns=len(gaming) * 2)
    assert [i["kind"] for i in infos] == ["invalid"] * len(infos)
    assert set(distances) == {distances[0]} and infos[-1]["done_reason"] == "timeout"
    assert all(len(m["content"].split()) <= 10 for m in conversation[3::2])  # one short line each
    honest, rephrased = "Is it alive?", "Is it a living thing?"
    infos, distances, _ = play(TQ, scenario, [honest, rephrased, honest], max_turns=3)
    assert [i["kind"] for i in infos] == ["question", "repeat", "repeat"]
    assert distances[1] == distances[2] == distances[3]


def _pool(conversation):
    """The pool the opening lists (conversation[1])."""
    return conversation[1]["content"].splitlines()[0].partition(": ")[2].removesuffix(".").split(", ")


def _guesser(conversation):
    """Guesses the next pool member every turn, asking nothing."""
    return f"Guess: {_pool(conversation)[(len(conversation) - 2) // 2]}"


def _questioner_who_never_guesses(conversation):
    """The optimal questioner, but stalling with a repeat instead of ever guessing."""
    reply = OPTIMAL.reply(conversation)
    return "Is it alive?" if reply.startswith("Guess") else reply


OPTIMAL = Player("optimal")


def test_optimal_player_gets_log2_pool_bits_and_beats_every_shortcut():
    for pool in (8, 16, 32):
        returns = {"optimal": [], "guess": [], "never": []}
        solved = {"optimal": 0, "guess": 0, "never": 0}
        for scenario in load_scenarios(TQ, "test"):
            for name, player in (("optimal", OPTIMAL.reply), ("guess", _guesser), ("never", _questioner_who_never_guesses)):
                infos, distances, _ = play(TQ, scenario, player, pool_size=pool)
                returns[name].append(idr_return(distances))
                solved[name] += infos[-1]["done_reason"] == "success"
                if name == "optimal":
                    assert sum(i["bits"] for i in infos) == pytest.approx(math.log2(pool))
                    assert idr_return(distances) == pytest.approx(math.log2(pool) + 1)
                if name == "guess":  # a wrong guess is a poor question: it never earns more than one bit
                    assert all(i["bits"] <= 1.0 + 1e-9 for i in infos if i["kind"] == "guess_wrong")
        n = len(returns["optimal"])
        # one guess (the default): guessing down the list solves only where the secret is listed first
        assert solved["optimal"] == n and solved["never"] == 0 and solved["guess"] <= n / 2
        # never guessing caps the return at log2(pool): below every solved game
        assert max(returns["never"]) <= math.log2(pool) + 1e-9 < min(returns["optimal"])
        assert sum(returns["guess"]) < sum(returns["optimal"])


def test_timeout_never_pays_more_than_a_wrong_guess():
    scenario = load_scenarios(TQ, "test")[0]
    env = make_environment(TQ)
    pool = env.reset(scenario).splitlines()[0].partition(": ")[2].removesuffix(".").split(", ")
    wrong = [c for c in pool if c != scenario.card["secret"]]
    # the same opening questions, then either stalling into the timeout or guessing wrong
    for asked in range(0, 3):
        opening = [OPTIMAL.reply] * asked
        stall = play(TQ, scenario, _script(opening, lambda c: "What is it?"), max_turns=asked + 1)[1]
        for name in wrong:
            guess = play(TQ, scenario, _script(opening, lambda c, n=name: f"Guess: {n}"), max_turns=asked + 1)[1]
            for kind in ("idr", "outcome"):
                assert sum(rewards_from_distances(guess, kind)) >= sum(rewards_from_distances(stall, kind)) - 1e-9
            assert sum(rewards_from_distances(guess, "adr")) >= sum(rewards_from_distances(stall, "adr")) - 1e-9
    # and a dialogue that times out after narrowing the pool to one never returns what the guess does
    infos, never, _ = play(TQ, scenario, _questioner_who_never_guesses)
    infos_solved, solved, _ = play(TQ, scenario, OPTIMAL.reply)
    assert infos[-1]["done_reason"] == "timeout" and infos[-1]["candidates_left"] == 1
    for kind in ("idr", "outcome"):
        assert sum(rewards_from_distances(never, kind)) + 1 == pytest.approx(sum(rewards_from_distances(solved, kind)))


def _script(first, then):
    """A player: the callables in `first` for the first turns, then `then`."""
    def reply(conversation):
        t = (len(conversation) - 2) // 2
        return first[t](conversation) if t < len(first) else then(conversation)
    return reply


# ---------------------------------------------------------------- players, evaluation and demonstrations by name


def test_players_on_both_games_read_only_the_conversation():
    for name in (TQ, TS):
        for scenario in load_scenarios(name, "test")[:6]:
            infos, distances, _ = play(name, scenario, OPTIMAL.reply)
            assert infos[-1]["done_reason"] == "success" and distances[-1] == 0
            infos, _, _ = play(name, scenario, Player("random", seed=1).reply)
            assert {i["kind"] for i in infos} <= {"question", "guess_right"}


def test_eval_by_name_reports_figures_beside_both_players(tmp_path):
    spec = EvalSpec(env=TQ, scenarios="test", limit=6, samples=2, max_new_tokens=32, max_sentences=1)
    result = json.loads(run_eval(Player("random", seed=3), spec, tmp_path / "eval", "player:random").read_text())
    summary = result["summary"]
    assert set(summary["references"]) == {"player:optimal", "player:informative"}  # the evaluated player is not repeated
    optimal = summary["references"]["player:optimal"]["figures"]
    assert optimal["success_rate"] == 1.0 and optimal["invalid_rate"] == 0.0
    assert optimal["bits_mean"] == pytest.approx(3.0)  # log2(8) per game; per question about 1 (realised, not expected)
    assert summary["figures"]["bits_per_question"] < optimal["bits_per_question"]
    assert summary["dialogues"] == 12 and summary["epmq"] is None
    turn = [json.loads(line) for line in (tmp_path / "eval" / "transcripts.jsonl").read_text().splitlines()][0]["turns"][0]
    assert turn["kind"] == "question" and "bits" in turn and "candidates_left" in turn

    out = tmp_path / "cli"
    cli = CliRunner().invoke(app, ["eval", "--model", "player:optimal", "--env", TS, "--limit", "4", "--output", str(out)])
    assert cli.exit_code == 0, cli.output
    text = flat(cli.output)
    assert "player:optimal: success rate 100.0%" in text and "player:random: success rate" in text
    assert "player:informative: success rate" in text
    config = json.loads((out / "eval.json").read_text())["config"]
    assert config["max_new_tokens"] == 32 and config["max_sentences"] == 1  # the game's reply limits


def test_demonstrations_are_exactly_what_the_rollout_shows(tmp_path):
    path = tmp_path / "demos.jsonl"
    counts = write_demos(TQ, "random", 30, "train", path, {"pool_size": 8})
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert counts["written"] == len(lines) == 30
    scenarios = {s.id: s for s in load_scenarios(TQ, "train")}
    for record in lines[:10]:
        messages = record["messages"]
        env = make_environment(TQ, pool_size=8)
        assert messages[0] == {"role": "system", "content": env.system_prompt}
        assert messages[1]["content"] == env.reset(scenarios[record["meta"]["scenario_id"]])
        assert [m["role"] for m in messages[1:]] == ["user", "assistant"] * record["meta"]["turns"]
        for reply, answer in zip(messages[2::2], messages[3::2]):
            assert answer["content"] == env.step(reply["content"]).user_message
    result = CliRunner().invoke(app, ["env", "demos", TS, "--player", "optimal", "--games", "5", "--out", str(path)])
    assert result.exit_code == 0 and "5 games written (5 of 5 solved)" in flat(result.output)


def test_bundled_configs_run_the_game_by_name():
    config = load_config(TQ)
    assert config.env.name == TQ and config.rollout.max_sentences == 1 and config.rollout.samples_per_scenario >= 8
    assert config.rollout.max_turns == make_environment(TQ, **config.env.options).max_turns
    assert load_config(TS).env.name == TS
    assert load_config(None).env.name == "empathy"  # `mapo train` with no options is unchanged


def test_mapo_train_by_name_with_the_tiny_model(tmp_path):
    out = tmp_path / "run"
    args = ["train", "--config", TQ, "--output", str(out)]
    for s in ("policy.model=tiny", "policy.lora.r=4", "threads=1", "steps=1", "rollout.samples_per_scenario=2",
              "rollout.max_turns=2", "rollout.engine=hf", "optim.lr=0.01"):
        args += ["--set", s]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert {"env_success_rate", "env_invalid_rate", "env_bits_mean"} <= set(metrics[0])
    turn = json.loads((out / "transcripts.jsonl").read_text().splitlines()[0])["turns"][0]
    assert turn["kind"] in ("question", "repeat", "invalid", "guess_right", "guess_wrong")


def test_a_case_file_of_ones_own_is_a_scenario_source(tmp_path):
    path = _case_file(tmp_path, {"dog": {"has": ["alive"]}, "ball": {"has": ["round"], "split": "test"},
                                 "stone": {}})
    assert [s.id for s in load_scenarios(TQ, str(path))] == ["t/dog", "t/ball", "t/stone"]
    (scenario,) = load_scenarios(TQ, f"{path}:test")
    infos, distances, _ = play(TQ, scenario, ["Is it round?", "Is it alive?", "Guess: ball"], pool_size=3)
    assert [i["kind"] for i in infos] == ["question", "question", "guess_right"]
    assert distances[0] == pytest.approx(math.log2(3) + 1) and distances[-1] == 0


def test_a_wrong_guess_always_ends_the_game():
    scenario = load_scenarios(TQ, "test")[0]
    env = make_environment(TQ)
    pool = env.reset(scenario).splitlines()[0].partition(": ")[2].removesuffix(".").split(", ")
    wrong = [c for c in pool if c != scenario.card["secret"]]
    for name in wrong[:3]:
        infos, _, _ = play(TQ, scenario, lambda c, n=name: f"Guess: {n}")
        assert [(i["kind"], i["done_reason"]) for i in infos] == [("guess_wrong", "failure")]
    # after questions too: one guess, and the wrong one loses
    serial = _script([OPTIMAL.reply], lambda c: f"Guess: {wrong[0]}")
    infos, _, _ = play(TQ, scenario, serial)
    assert [i["done_reason"] for i in infos] == [None, "failure"]
    assert "You have one guess." in env.system_prompt


def test_view_candidates_lists_what_is_still_consistent_and_players_still_read_it():
    scenario = load_scenarios(TQ, "test")[0]
    optimal = Player("optimal")
    infos, _, conversation = play(TQ, scenario, lambda c: optimal.reply(c[1:]), view="candidates")
    users = [m["content"] for m in conversation[3::2]]
    for info, said in zip(infos[:-1], users[:-1]):  # every reply of a game still going lists the rest
        left = said.partition(" Still possible: ")[2].removesuffix(".").split(", ")
        assert len(left) == info["candidates_left"] and scenario.card["secret"] in left
    assert infos[-1]["done_reason"] == "success" and "Still possible" not in users[-1]
    plain, _, _ = play(TQ, scenario, lambda c: optimal.reply(c[1:]))
    assert [i["kind"] for i in plain] == [i["kind"] for i in infos]  # the list changes what is said, not the game
    with pytest.raises(ValueError, match="view must be one of names, candidates, table, state, got 'list'"):
        make_environment(TQ, view="list")


def test_scoring_forfeit_losses_takes_back_every_bit_of_a_lost_game():
    scenario = load_scenarios(TQ, "test")[0]
    secret = scenario.card["secret"]
    optimal = Player("optimal")

    def ask_twice_then_guess_wrong(conversation):
        if len(conversation) < 6:  # system, opening and two questions answered
            return optimal.reply(conversation[1:])
        left = conversation[-1]["content"].partition(" Still possible: ")[2].removesuffix(".").split(", ")
        return f"Guess: {next(c for c in left if c != secret)}"

    plain, plain_d, _ = play(TQ, scenario, ask_twice_then_guess_wrong, view="candidates")
    lost, lost_d, _ = play(TQ, scenario, ask_twice_then_guess_wrong, view="candidates", scoring="forfeit_losses")
    assert [i["kind"] for i in lost] == [i["kind"] for i in plain] == ["question", "question", "guess_wrong"]
    assert lost[-1]["done_reason"] == "failure" and lost_d[-1] == lost_d[0] == plain_d[0]
    assert idr_return(lost_d) == pytest.approx(0.0) and idr_return(plain_d) > 2.0  # the lost game gains nothing
    assert [i["bits"] for i in lost] == [i["bits"] for i in plain]  # the information figures are the game's, unchanged
    won, won_d, _ = play(TQ, scenario, lambda c: optimal.reply(c[1:]), scoring="forfeit_losses")
    assert won[-1]["done_reason"] == "success" and idr_return(won_d) == pytest.approx(won_d[0])


def test_scoring_forfeit_unsolved_takes_back_the_bits_of_a_game_that_never_guesses():
    scenario = load_scenarios(TQ, "test")[0]
    optimal = Player("optimal")

    def never_guess(conversation):  # the optimal questions, then asks again instead of guessing
        reply = optimal.reply(conversation[1:])
        return "Is it alive?" if reply.startswith("Guess") else reply

    kept, kept_d, _ = play(TQ, scenario, never_guess, scoring="forfeit_losses")
    gone, gone_d, _ = play(TQ, scenario, never_guess, scoring="forfeit_unsolved")
    assert kept[-1]["done_reason"] == gone[-1]["done_reason"] == "timeout" and len(gone) == 7
    assert idr_return(kept_d) == pytest.approx(3.0)  # every bit of the pool of 8, the solve bonus missed
    assert idr_return(gone_d) == pytest.approx(0.0) and gone_d[-1] == gone_d[0]
    assert [i["bits"] for i in gone] == [i["bits"] for i in kept]  # the information figures are unchanged
    from mapo.envs.questioning.metrics import game_summary

    # the pool of 8 is down to one candidate after 3 questions: the other 4 replies stall
    assert game_summary([{"done_reason": "timeout", "turns": gone}])["stalled_turns"] == 4.0
    won, won_d, _ = play(TQ, scenario, lambda c: optimal.reply(c[1:]), scoring="forfeit_unsolved")
    assert won[-1]["done_reason"] == "success" and idr_return(won_d) == pytest.approx(won_d[0])
    lost, lost_d, _ = play(TQ, scenario, lambda c: f"Guess: {next(n for n in _pool(c) if n != scenario.card['secret'])}",
                           scoring="forfeit_unsolved")
    assert lost[-1]["done_reason"] == "failure" and idr_return(lost_d) == pytest.approx(0.0)  # a loss forfeits too
    with pytest.raises(ValueError, match="scoring must be one of bits, forfeit_losses, forfeit_unsolved, chance"):
        make_environment(TQ, scoring="forfeit")


SETTINGS = ("pool_size", "max_turns", "view", "show_turns_left", "scoring")


@pytest.mark.parametrize(
    "old, new",
    [
        ({"show_candidates": True}, {"view": "candidates"}),
        ({"show_table": True}, {"view": "table"}),
        ({"show_table": True, "show_candidates": True}, {"view": "table"}),
        ({"show_table": False, "show_candidates": False}, {"view": "names"}),
        ({"need": "bits"}, {"scoring": "bits"}),
        ({"need": "chance", "forfeit_on_failure": False}, {"scoring": "chance"}),
        ({"forfeit_on_failure": True}, {"scoring": "forfeit_losses"}),
        ({"need": "bits", "forfeit_on_failure": True, "forfeit_on_timeout": True}, {"scoring": "forfeit_unsolved"}),
        ({"forfeit_on_failure": False, "forfeit_on_timeout": False}, {"scoring": "bits"}),
        ({"solve_bits": 1.0, "wrong_guesses_allowed": 0, "pool_seed": 0, "pool_size": 16}, {"pool_size": 16}),
        ({"show_candidates": True, "forfeit_on_failure": True, "max_turns": 5, "show_turns_left": True},
         {"view": "candidates", "scoring": "forfeit_losses", "max_turns": 5, "show_turns_left": True}),
        ({"view": "state", "scoring": "chance"}, {"view": "state", "scoring": "chance"}),  # today's names: unchanged
    ],
)
def test_older_option_names_map_to_the_five_settings(old, new):
    from mapo.envs.base import environment_factory, evaluation_options, with_turn_cap
    from mapo.envs.questioning.env import upgrade_options

    given = dict(old)
    assert upgrade_options(given) == new and given == old  # the caller's options are left as they were
    for env in (make_environment(TQ, **old), environment_factory(TQ, old)(), make_environment(TS, **old)):
        wanted = make_environment(TQ, **new)
        assert {k: getattr(env, k) for k in SETTINGS} == {k: getattr(wanted, k) for k in SETTINGS}
    assert evaluation_options(TQ, old) == new
    assert with_turn_cap(TQ, {**old, "show_turns_left": True}, 3) == {**new, "show_turns_left": True, "max_turns": 3}


@pytest.mark.parametrize(
    "old, refusal",
    [
        ({"view": "table", "show_table": True}, "give `view` alone, without show_table / show_candidates"),
        ({"view": "names", "show_candidates": False}, "give `view` alone"),
        ({"scoring": "bits", "forfeit_on_failure": True}, "give `scoring` alone, without need / forfeit_on_"),
        ({"scoring": "chance", "need": "chance"}, "give `scoring` alone"),
        ({"forfeit_on_timeout": True}, "forfeit_on_timeout without forfeit_on_failure is no longer a scoring"),
        ({"forfeit_on_failure": False, "forfeit_on_timeout": True}, "forfeit_on_timeout without forfeit_on_failure"),
        ({"need": "chance", "forfeit_on_failure": True}, "need: chance takes no forfeits; use scoring: chance"),
        ({"need": "chance", "forfeit_on_failure": True, "forfeit_on_timeout": True}, "need: chance takes no forfeits"),
        ({"solve_bits": 2.0}, r"solve_bits is no longer a setting \(the game fixes it at 1.0\)"),
        ({"wrong_guesses_allowed": 1}, r"wrong_guesses_allowed is no longer a setting \(the game fixes it at 0\)"),
        ({"pool_seed": 3}, "pool_seed is no longer a setting .*a scenario's card may give pool_seed"),
        ({"need": "hope"}, "scoring must be one of bits, forfeit_losses, forfeit_unsolved, chance, got 'hope'"),
    ],
)
def test_older_option_names_that_name_no_setting_are_refused(old, refusal):
    from mapo.envs.base import environment_factory, evaluation_options

    with pytest.raises(ValueError, match=refusal):
        make_environment(TQ, **old)
    with pytest.raises(ValueError, match=refusal):
        environment_factory(TS, old)
    if "need" not in old or old["need"] != "hope":  # the mapping itself refuses (an unknown scoring: the game)
        with pytest.raises(ValueError, match=refusal):
            evaluation_options(TQ, old)


def test_show_turns_left_states_the_budget_and_players_guess_on_the_last_reply():
    scenario = load_scenarios(TQ, "test")[0]
    never_guess = make_environment(TQ, show_turns_left=True, view="candidates", max_turns=4)
    opening = never_guess.reset(scenario)
    assert opening.endswith("\n4 replies left.")
    said = [never_guess.step("Is it alive?").user_message for _ in range(2)]
    assert said[0].endswith("Still possible: " + ", ".join(never_guess.game.consistent()) + ". 3 replies left.")
    assert said[1].endswith(" 2 replies left.")
    assert never_guess.step("Is it alive?").user_message.endswith(" 1 reply left.")
    assert "left." not in never_guess.step("Is it alive?").user_message  # the game is over: no budget
    # a random questioner names a candidate on its last reply instead of running out of turns
    shown_player, blind_player = Player("random", seed=1), Player("random", seed=1)
    infos, _, _ = play(TQ, scenario, lambda c: shown_player.reply(c[1:]), show_turns_left=True, max_turns=2)
    blind, _, _ = play(TQ, scenario, lambda c: blind_player.reply(c[1:]), max_turns=2)
    assert infos[0]["attribute"] == blind[0]["attribute"] and infos[0]["candidates_left"] > 1  # the same first question
    assert infos[1]["kind"] in ("guess_right", "guess_wrong") and blind[1]["kind"] == "question"
    assert blind[-1]["done_reason"] == "timeout"  # without the budget shown, it cannot know
    optimal = Player("optimal")
    shown, _, _ = play(TQ, scenario, lambda c: optimal.reply(c[1:]), show_turns_left=True)
    plain, _, _ = play(TQ, scenario, lambda c: optimal.reply(c[1:]))
    assert [i["kind"] for i in shown] == [i["kind"] for i in plain] and shown[-1]["done_reason"] == "success"
    # an evaluation's cap below the game's limit becomes the limit, so the budget shown stays true
    from mapo.envs.base import with_turn_cap

    assert with_turn_cap(TQ, {"show_turns_left": True}, 5) == {"show_turns_left": True, "max_turns": 5}
    assert with_turn_cap(TQ, {"show_turns_left": True}, 13) == {"show_turns_left": True}  # above the 7: kept
    assert with_turn_cap(TQ, {"show_turns_left": True, "pool_size": 16}, 8) == {"show_turns_left": True, "pool_size": 16, "max_turns": 8}
    assert with_turn_cap(TQ, {"show_turns_left": True, "pool_size": 16}, 9) == {"show_turns_left": True, "pool_size": 16}  # its 9
    assert with_turn_cap(TQ, {"show_turns_left": True, "max_turns": 4}, 5) == {"show_turns_left": True, "max_turns": 4}
    assert with_turn_cap(TQ, {"show_turns_left": True, "max_turns": 9}, 7)["max_turns"] == 7
    assert with_turn_cap(TQ, {"show_turns_left": True, "pool_size": 0}, 5) == {"show_turns_left": True, "pool_size": 0}
    assert with_turn_cap(TQ, {"pool_size": 8}, 5) == {"pool_size": 8}  # not shown: the game keeps its 7
    with pytest.raises(ValueError, match="show_turns_left must be true or false"):
        make_environment(TQ, show_turns_left=1)


def test_early_guesses_count_guesses_made_while_several_candidates_were_consistent():
    from mapo.envs.questioning.metrics import game_summary

    scenario = load_scenarios(TQ, "test")[0]
    optimal = Player("optimal")
    blind, _, _ = play(TQ, scenario, lambda c: f"Guess: {scenario.card['secret']}")  # right, but blind
    solved, _, _ = play(TQ, scenario, lambda c: optimal.reply(c[1:]))
    figures = game_summary([{"done_reason": "success", "turns": blind}, {"done_reason": "success", "turns": solved}])
    assert figures["early_guesses"] == 0.5  # one blind guess over two games; the optimal player's is not
    assert figures["stalled_turns"] == 0.0
