"""The table in view (`view: table`), the informative player, and every reference player and a
policy on a case file of one's own (`--scenarios path.yaml[:split]`)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from cli_output import flat
from game_play import play, write_case_file
from mapo.cli import app
from mapo.envs.base import load_scenarios, make_environment
from mapo.envs.questioning.cases import bundled_case_file, forget_case_sets, load_case_set
from mapo.envs.questioning.parse import contains, words
from mapo.envs.questioning.players import Player
from mapo.evaluate.player_budgets import Setting, play_players
from mapo.evaluate.runner import EvalSpec, run_eval
from mapo.sft.demos import write_demos

TQ = "twenty-questions"
TS = "troubleshooting"


@pytest.fixture(autouse=True)
def _forget_case_files():
    """A case file a test loaded is not known to the next test's players."""
    yield
    forget_case_sets()


def _table_lines(message, header_end):
    """The `name: facts` lines after the line ending with `header_end`, up to a budget note."""
    lines = message.splitlines()
    start = next(k for k, line in enumerate(lines) if line.endswith(header_end)) + 1
    return [line for line in lines[start:] if not line.endswith("left.")]


@pytest.mark.parametrize("env_name", [TQ, TS])
def test_view_table_lists_what_is_true_of_each_candidate_left_and_changes_nothing_else(env_name):
    scenario = load_scenarios(env_name, "test")[0]
    table = load_case_set(bundled_case_file(env_name)).table(scenario.card["table"])
    player = Player("optimal")
    shown, shown_d, conversation = play(env_name, scenario, player.reply, view="table", show_turns_left=True)
    plain, plain_d, _ = play(env_name, scenario, player.reply, show_turns_left=True)
    # the parser, the reward and the answers are the table's, unchanged
    assert [(i["kind"], i["bits"], i["attribute"]) for i in shown] == [(i["kind"], i["bits"], i["attribute"]) for i in plain]
    assert shown_d == plain_d and shown[-1]["done_reason"] == "success"
    opening = conversation[1]["content"]
    pool = opening.splitlines()[1 if table.intro else 0].partition(": ")[2].removesuffix(".").split(", ")
    rows = _table_lines(opening, "):")
    assert rows == [f"{name}: {', '.join(table.true_of(name)) or '-'}" for name in pool]
    assert opening.splitlines()[-1] == f"{make_environment(env_name).max_turns} replies left."
    for info, said in zip(shown[:-1], conversation[3::2]):  # compact: only the candidates still possible
        rows = _table_lines(said["content"], "Still possible:")
        assert len(rows) == info["candidates_left"] and scenario.card["secret"] in [r.partition(":")[0] for r in rows]
        assert said["content"].splitlines()[-1].endswith("left.")  # the budget on its own line, last
    assert "Still possible" not in conversation[-1]["content"]  # the game is over


def test_each_attribute_is_shown_by_the_phrase_its_question_says():
    for name in (TQ, TS):
        for table in load_case_set(bundled_case_file(name)).tables:
            for a in table.attributes:
                assert contains(words(a.question), words(a.label)) and words(a.label) in a.phrases


def test_the_informative_player_asks_only_questions_that_split_and_sits_between_the_others():
    scenarios = load_scenarios(TQ, "test")
    for scenario in scenarios[:5]:
        infos, _, _ = play(TQ, scenario, Player("informative", seed=2).reply, view="candidates")
        assert infos[-1]["done_reason"] == "success"
        assert all(i["bits"] > 0 for i in infos if i["kind"] == "question")  # every question splits
    rows = play_players(TQ, "test", [Setting(8, 5)], pools=3, options={"show_turns_left": True})
    success = {r["player"]: r["success_rate"] for r in rows}
    assert {r["games"] for r in rows} == {3 * len(scenarios)}
    assert success["player:random"] < success["player:informative"] < success["player:optimal"]
    with pytest.raises(ValueError, match="POOL:REPLIES"):
        Setting.parse("eight")


def test_every_player_and_demonstrations_play_a_case_file_of_ones_own(tmp_path):
    path = write_case_file(tmp_path / "vehicles.yaml")
    source = f"{path}:test"
    for kind in ("optimal", "informative", "random"):
        for scenario in load_scenarios(TQ, source):
            infos, _, _ = play(TQ, scenario, Player(kind, seed=1).reply, pool_size=5, view="table")
            assert {i["kind"] for i in infos} <= {"question", "guess_right", "guess_wrong"}
            if kind == "optimal":
                assert infos[-1]["done_reason"] == "success"
    demos = tmp_path / "demos.jsonl"
    counts = write_demos(TQ, "informative", 8, source, demos, {"pool_size": 5, "view": "table"})
    records = [json.loads(line) for line in demos.read_text().splitlines()]
    assert counts["written"] == 8 and "True of each" in records[0]["messages"][1]["content"]
    assert records[0]["meta"]["player"] == "player:informative"
    rows = play_players(TQ, source, [Setting(5, None)], pools=2)
    assert {r["player"]: r["success_rate"] for r in rows}["player:optimal"] == 1.0
    out = tmp_path / "players.json"
    result = CliRunner().invoke(app, ["env", "players", TQ, "--scenarios", source, "--pools", "2", "--setting", "5:3",
                                      "--json", str(out)])
    assert result.exit_code == 0, result.output
    assert "| 5 | 3 | 8 |" in result.output  # pool 5, 3 replies, 4 secrets x 2 pools
    assert [r["player"] for r in json.loads(out.read_text())["rows"]] == ["player:random", "player:informative", "player:optimal"]


def test_two_loaded_tables_that_disagree_about_the_opening_are_refused(tmp_path):
    mine = write_case_file(tmp_path / "a.yaml")
    other = json.loads(mine.read_text())
    other["tables"][0]["candidates"]["car"]["has"] = ["wheels", "engine", "street", "water"]  # an amphibious car
    (tmp_path / "b.yaml").write_text(json.dumps(other))
    load_case_set(tmp_path / "b.yaml")
    (scenario,) = [s for s in load_scenarios(TQ, str(mine)) if s.card["secret"] == "car"]
    with pytest.raises(ValueError, match="two tables that disagree"):
        play(TQ, scenario, Player("optimal").reply, pool_size=9)


def test_eval_on_a_case_file_plays_all_three_players_beside_a_policy(tmp_path):
    path = write_case_file(tmp_path / "vehicles.yaml")
    out = tmp_path / "players"
    result = CliRunner().invoke(app, ["eval", "--model", "player:optimal", "--env", TQ, "--scenarios", f"{path}:test",
                                      "--env-option", "pool_size=5", "--env-option", "view=table", "--output", str(out)])
    assert result.exit_code == 0, result.output
    text = flat(result.output)
    assert "player:optimal: success rate 100.0%" in text
    assert "player:informative: success rate" in text and "player:random: success rate" in text
    # a policy (the tiny test model) on the same file: its rollout and the three players
    out = tmp_path / "tiny"
    result = CliRunner().invoke(app, ["eval", "--model", "tiny", "--engine", "hf", "--env", TQ, "--scenarios", f"{path}:test",
                                      "--env-option", "pool_size=4", "--max-new-tokens", "8", "--output", str(out)])
    assert result.exit_code == 0, result.output
    summary = json.loads((out / "eval.json").read_text())["summary"]
    assert summary["dialogues"] == 4 and "success_rate" in summary["figures"]
    assert set(summary["references"]) == {"player:optimal", "player:informative", "player:random"}


def test_a_failure_after_the_rollout_keeps_the_policys_results(tmp_path, monkeypatch):
    import mapo.evaluate.runner as runner

    def unreadable(name, *args):
        raise ValueError(f"{name} cannot read this game")

    monkeypatch.setattr(runner, "_reference_summary", unreadable)
    spec = EvalSpec(env=TQ, scenarios="test", limit=2, max_new_tokens=32, max_sentences=1)
    data = json.loads(run_eval(Player("optimal"), spec, tmp_path / "eval", "player:optimal").read_text())
    assert data["summary"]["dialogues"] == 2 and data["summary"]["figures"]["success_rate"] == 1.0
    assert "cannot read this game" in data["summary"]["references_error"] and "references" not in data["summary"]
    assert len((tmp_path / "eval" / "transcripts.jsonl").read_text().splitlines()) == 2
