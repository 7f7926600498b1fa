"""The support-desk example environment (examples/support_desk), written outside the package:
its cards, the offline judge's ordering of replies, the simulated customer's reactions, and
the environment's reset/step contract through mapo's own rollout."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # `pytest` (not `python -m pytest`) does not put the repository root there
    sys.path.append(str(ROOT))

from examples.support_desk.cards import CARD_DIR, CardError, SupportCard, load_cards
from examples.support_desk.customer import HEATED, REACTIONS
from examples.support_desk.env import SupportDeskEnvironment
from examples.support_desk.judge import Rules

SCENARIOS = {s.id: s for s in load_cards("all")}
DOUBLE = SCENARIOS["double-charge-streaming"]

GOOD_FIRST = (
    "I'm sorry you were charged twice for the same month, that is annoying. "
    "Could you tell me the dates and amounts of both charges?"
)


def card(scenario) -> SupportCard:
    return SupportCard.model_validate(scenario.card)


def first_turn(reply: str, scenario=DOUBLE, **options):
    env = SupportDeskEnvironment(**options)
    env.reset(scenario, seed=0)
    d0 = env.distance
    result = env.step(reply)
    return d0 - result.info["distance"], result


def play(scenario, replies, seed=0, **options):
    env = SupportDeskEnvironment(**options)
    messages = [env.reset(scenario, seed=seed)]
    results = []
    for reply in replies:
        result = env.step(reply)
        results.append(result)
        messages.append(result.user_message)
        if result.done:
            break
    return env, messages, results


def phrase(cue: str) -> str:
    """Words that meet a cue: its parts in order."""
    return " and ".join(part.strip() for part in cue.split("+"))


# -- cards ---------------------------------------------------------------------------------------


def test_shipped_cards_split_into_train_and_test():
    train, test = load_cards("train"), load_cards("test")
    assert len(train) == 10 and len(test) == 4 and len(SCENARIOS) == 14
    assert {s.id for s in train}.isdisjoint({s.id for s in test})
    assert {s.id for s in train} | {s.id for s in test} == set(SCENARIOS)
    assert len({card(s).product for s in SCENARIOS.values()}) == 14  # fourteen different services
    for scenario in SCENARIOS.values():
        c = card(scenario)
        assert scenario.initial_state == (-c.frustration, -c.unsolved)
        assert c.detail.reveal not in c.opening


@pytest.mark.parametrize("scenario_id", sorted(SCENARIOS))
def test_every_card_is_solved_by_a_reply_built_from_its_own_cues(scenario_id):
    """Cards are consistent: asking with the detail's cue, then taking each step with its cue,
    solves the case without tripping the card's own wrong promises or anger triggers."""
    scenario = SCENARIOS[scenario_id]
    c = card(scenario)
    replies = [
        (
            f"I am sorry about the {phrase(c.grievances[0])}, that must be stressful for you. "
            f"Could you tell me the {phrase(c.detail.ask[0])}?"
        ),
        *(f"Thank you, I will sort out the {phrase(step.cues[0])} for you now." for step in c.steps),
    ]
    env, messages, results = play(scenario, replies)
    assert results[0].info["asked_detail"] and c.detail.reveal in messages[1]
    assert [r.info["steps"] for r in results[1:]] == [[s.id] for s in c.steps]
    assert all(e["kind"] not in ("wrong_promise", "anger") for r in results for e in r.info["events"])
    assert results[-1].done and results[-1].info["done_reason"] == "success"
    assert messages[-1] == c.thanks and env.unsolved == 0
    assert env.frustration < c.frustration


@pytest.mark.parametrize("scenario_id", sorted(SCENARIOS))
def test_every_wrong_promise_and_anger_trigger_is_heard(scenario_id):
    c = card(SCENARIOS[scenario_id])
    for kind, reactions in (("wrong_promise", c.wrong_promises), ("anger", c.angered_by)):
        for reaction in reactions:
            gained, result = first_turn(f"Right, so {phrase(reaction.cue)} is what happens here.", SCENARIOS[scenario_id])
            kinds = [e["kind"] for e in result.info["events"]]
            assert kind in kinds and gained < 0, (reaction.cue, result.info["events"])
            if not result.done:
                assert reaction.reply in result.user_message


def write_card(folder: Path, name: str, **changes) -> Path:
    import yaml

    raw = card(DOUBLE).model_dump()
    raw.update(changes)
    path = folder / name
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    return path


def test_a_bad_card_stops_loading_naming_file_and_field(tmp_path):
    bad = write_card(tmp_path, "bad.yaml", frustration=12)
    with pytest.raises(CardError, match=r"bad\.yaml: field frustration: Input should be less than 10"):
        load_cards(tmp_path)
    bad.unlink()
    write_card(tmp_path, "cue.yaml", grievances=["charge + ?"])
    with pytest.raises(CardError, match=r"cue\.yaml: field grievances: .*part '\?' must be one or more words"):
        load_cards(tmp_path)
    (tmp_path / "cue.yaml").unlink()
    (tmp_path / "num.yaml").write_text(
        (CARD_DIR / "train" / "double-charge-streaming.yaml").read_text().replace("- same month", "- 640"), encoding="utf-8"
    )
    with pytest.raises(CardError, match=r"num\.yaml: field grievances\.\d+: Input should be a valid string"):
        load_cards(tmp_path)  # a bare number in YAML is not a cue: quote it
    (tmp_path / "num.yaml").unlink()
    write_card(tmp_path, "a.yaml")
    write_card(tmp_path, "b.yaml")
    with pytest.raises(CardError, match=r"b\.yaml: field id: 'double-charge-streaming' is already used by .*a\.yaml"):
        load_cards(tmp_path)
    with pytest.raises(CardError, match="no such support-desk card folder"):
        load_cards(tmp_path / "missing")


# -- the judge's ordering --------------------------------------------------------------------------


def test_judge_orders_first_replies_good_to_bad():
    replies = {
        "concrete": GOOD_FIRST,
        "ask_only": "Could you tell me the dates of both charges?",
        "generic": "I'm sorry to hear that. How can I help you today?",
        "wrong_promise": "I will refund both charges for you right away.",
        "blame": "You must have signed up twice, so this is really down to you.",
        "dismissal": "Please calm down, there is nothing we can do about bank charges.",
    }
    gain = {name: first_turn(reply)[0] for name, reply in replies.items()}
    assert gain["concrete"] > gain["ask_only"] > 0 > gain["generic"] > gain["wrong_promise"] > gain["blame"]
    assert gain["dismissal"] == pytest.approx(gain["blame"])


@pytest.mark.parametrize(
    "reply, family",
    [
        ("Refund duplicate refund duplicate refund duplicate refund duplicate.", "loop"),
        ("Sorry charged twice refund duplicate business days confirm transaction statement date.", "keyword_stuffing"),
        ("I'm sorry you were charged twice, could you tell me the dates of the", "fragment"),
        ("I was charged twice for the same month of my streaming plan too.", "role_swap"),
    ],
)
def test_degenerate_replies_earn_nothing_even_when_they_hold_the_cues(reply, family):
    gained, result = first_turn(reply)
    assert gained < 0 and not result.info["asked_detail"] and not result.info["acknowledged"]
    assert [e["kind"] for e in result.info["events"]] and all(e["kind"] == "degenerate" for e in result.info["events"])
    assert any(e["evidence"].startswith(family) for e in result.info["events"])


def test_an_agent_may_name_its_own_team_without_being_called_a_role_swap():
    gained, result = first_turn("I'm sorry you were charged twice. My team will need the date of each charge, please.")
    assert gained > 0 and result.info["asked_detail"] and result.info["acknowledged"]
    _, result = first_turn("I'm sorry you were charged twice, I'll do my best. Which card was it on?")
    assert result.info["asked_detail"] and not result.info["events"]
    _, result = first_turn("My wife had the same thing happen with her gym.")
    assert [e["kind"] for e in result.info["events"]] == ["degenerate"]  # a private life still is one


@pytest.mark.parametrize(
    "reply, kind",
    [
        ("As an AI, I don't have the ability to look at your bank account.", "dismissal"),
        ("I'm just an AI, so I can't see payments.", "dismissal"),
        ("That can happen with any order, and I'm not able to assist with that.", "dismissal"),
        ("It looks like you forgot to cancel the old plan.", "blame"),
        ("I'm sorry you were charged twice, but you must have signed up twice.", "blame"),
    ],
)
def test_blame_and_dismissal_cancel_any_acknowledgement(reply, kind):
    gained, result = first_turn(reply)
    assert kind in [e["kind"] for e in result.info["events"]] and not result.info["acknowledged"]
    assert result.info["frustration_change"] >= 2.0 and gained < 0


def test_a_step_needs_the_detail_first_and_counts_once():
    premature = "I have refunded the duplicate charge to your card."
    _, early = first_turn(premature)
    assert early.info["steps"] == [] and [e["kind"] for e in early.info["events"]] == ["premature"]
    _, _, results = play(DOUBLE, [GOOD_FIRST, premature, "As promised, the duplicate charge has a refund on its way."])
    assert results[1].info["steps"] == ["refund-duplicate"] and results[1].info["unsolved"] == 3
    assert results[2].info["steps"] == [] and results[2].info["frustration_change"] > 0  # nothing new: a stall


def test_negated_steps_and_every_fix_at_once_are_not_shortcuts():
    _, results = play(DOUBLE, [GOOD_FIRST, "I cannot refund the duplicate charge."])[1:]
    assert results[1].info["steps"] == []
    shotgun = ("I found the duplicate charge. I have refunded the second charge. "
               "It will show on your statement within five business days.")
    _, _, results = play(DOUBLE, [GOOD_FIRST, shotgun])
    assert len(results[1].info["steps"]) == Rules().max_steps_per_reply == 2


def test_repeated_template_apologies_and_acknowledgements_wear_out():
    template = "We apologize for any inconvenience."
    _, _, results = play(DOUBLE, [template, template.replace("any", "the"), "We value your business."])
    changes = [r.info["frustration_change"] for r in results]
    assert changes[0] == Rules().stall and changes[1] == changes[2] == Rules().scripted
    assert [e["kind"] for e in results[1].info["events"]] == ["scripted"]
    concrete = [
        "I'm sorry you were charged twice this month.",
        "I understand how annoying a double charge is.",
        "It must be frustrating to pay twice for one month.",
    ]
    _, _, results = play(DOUBLE, concrete)
    assert [r.info["frustration_change"] for r in results] == [-1.5, -0.5, Rules().stall]


def test_asking_again_for_a_detail_already_given_frustrates():
    _, messages, results = play(DOUBLE, [GOOD_FIRST, "Can you confirm the dates of the charges?"])
    assert results[1].info["frustration_change"] == Rules().asked_again and not results[1].info["asked_detail"]
    assert messages[2].split(" ")[0] in " ".join(REACTIONS["curt"]["asked_again"])
    assert card(DOUBLE).detail.reveal not in messages[2]


def test_rules_come_from_the_environment_options():
    gained, _ = first_turn("You must have signed up twice.", rules={"blame": 4.0})
    assert gained == pytest.approx(-(math.hypot(10, 8) - math.hypot(6, 8)))
    with pytest.raises(ValueError, match="rules: unknown key\\(s\\) blam"):
        SupportDeskEnvironment(rules={"blam": 1.0})
    for bad in ({"stall": -1}, {"blame": float("nan")}, {"acknowledgement": [1.5, "a lot"]}):
        with pytest.raises(ValueError, match=f"rules: {next(iter(bad))} must be a finite number >= 0"):
            SupportDeskEnvironment(rules=bad)


# -- the simulated customer ------------------------------------------------------------------------


def test_customer_reveals_the_detail_only_when_asked():
    c = card(DOUBLE)
    _, messages, _ = play(DOUBLE, ["I'm sorry you were charged twice.", "Let me look into it.", GOOD_FIRST])
    assert all(c.detail.reveal not in m for m in messages[:3]) and c.detail.reveal in messages[3]


def test_customer_reacts_in_its_own_voice_and_presses_for_the_next_step():
    c = card(DOUBLE)
    _, messages, _ = play(DOUBLE, ["You must have signed up twice."])
    assert any(line in messages[1] for line in REACTIONS["curt"]["blame"])
    assert any(want in messages[1] for want in c.steps[0].wants)  # still wants the first step
    _, messages, _ = play(DOUBLE, [GOOD_FIRST, "I can see the duplicate charge from the 4th and I have refunded it."])
    assert any(line in messages[2] for line in REACTIONS["curt"]["progress"])
    assert any(want in messages[2] for want in c.steps[2].wants)


def test_customer_never_repeats_a_reaction_while_a_fresh_one_is_left():
    _, messages, results = play(DOUBLE, ["Okay.", "Let me see.", "One moment."], max_turns=5)
    stall_lines = REACTIONS["curt"]["stall"]
    said = [next(line for line in stall_lines if line in m) for m in messages[1:]]
    assert len(set(said)) == 3 and all(r.info["events"][0]["kind"] == "stall" for r in results)


def test_a_heated_customer_says_so_and_gives_up():
    c = card(DOUBLE)
    _, messages, results = play(DOUBLE, ["Okay.", "Calm down.", "Calm down, it happens."])
    assert any(line in messages[2] for line in HEATED["curt"])  # 6.5 + 2 = 8.5: heated
    assert results[-1].info["done_reason"] == "failure" and messages[-1] == c.gives_up


def test_same_seed_same_dialogue_other_seeds_other_wording():
    replies = ["Okay.", "Let me see.", "One moment.", "Hmm, right."]
    runs = {seed: play(DOUBLE, replies, seed=seed, max_turns=4)[1] for seed in range(6)}
    assert play(DOUBLE, replies, seed=3, max_turns=4)[1] == runs[3]
    assert len({tuple(m) for m in runs.values()}) > 1


# -- the environment contract --------------------------------------------------------------------


def test_reset_and_step_follow_the_environment_contract():
    from mapo.envs.base import Environment

    env = SupportDeskEnvironment()
    assert isinstance(env, Environment)
    assert env.reset(DOUBLE, seed=0) == card(DOUBLE).opening
    assert env.state == DOUBLE.initial_state
    previous = env.state
    for reply in [GOOD_FIRST, "Okay.", "I have refunded the duplicate charge from the 4th."]:
        result = env.step(reply)
        assert len(result.action) == 2 and isinstance(result.user_message, str) and result.user_message
        assert result.info["state"] == pytest.approx(tuple(p + v for p, v in zip(previous, result.action)))
        assert result.info["distance"] == pytest.approx(math.hypot(*result.info["state"]))
        assert all(x <= 0 for x in result.info["state"])
        previous = result.info["state"]
    assert result.info["turn"] == 3 and not result.done and result.info["done_reason"] is None


def test_the_dialogue_times_out_and_refuses_misuse():
    env = SupportDeskEnvironment(max_turns=2)
    with pytest.raises(RuntimeError, match="call reset"):
        env.step("hello")
    env.reset(DOUBLE)
    with pytest.raises(TypeError, match="must be a string"):
        env.step(None)  # type: ignore[arg-type]
    env.step(GOOD_FIRST)
    result = env.step("Thank you for the details.")
    assert result.done and result.info["done_reason"] == "timeout"
    with pytest.raises(RuntimeError, match="has ended \\(timeout\\)"):
        env.step("one more")
    for bad in ({"max_turns": 0}, {"max_turns": "4"}, {"give_up_at": 11}, {"give_up_at": "high"}):
        with pytest.raises(ValueError, match="support-desk environment"):
            SupportDeskEnvironment(**bad)
    from mapo.core.types import Scenario

    with pytest.raises(ValueError, match="scenario 'x' has no card"):
        env.reset(Scenario(id="x"))
    with pytest.raises(ValueError, match="scenario 'y': invalid card: field steps"):
        env.reset(Scenario(id="y", card={**DOUBLE.card, "steps": []}))


def test_scenarios_load_through_the_environment_and_eval_caps_its_turns():
    assert [s.id for s in SupportDeskEnvironment.load_scenarios("test")] == sorted(s.id for s in load_cards("test"))
    assert SupportDeskEnvironment.with_turn_cap({}, 45) == {"max_turns": 45}
    assert SupportDeskEnvironment.with_turn_cap({"max_turns": 6}, 45) == {"max_turns": 6}


def test_a_rollout_with_the_tiny_policy_gives_two_axis_states_and_idr_rewards():
    from tiny_policy import tiny_policy

    from mapo.core.rewards import rewards_from_distances
    from mapo.core.rollout import RolloutSpec, rollout

    scenarios = load_cards("test")[:2]
    spec = RolloutSpec(scenarios_per_step=2, samples_per_scenario=2, max_turns=2, max_new_tokens=8)
    groups = rollout(tiny_policy(), scenarios, SupportDeskEnvironment, spec, seed=0)
    assert [g.scenario_id for g in groups] == [s.id for s in scenarios]
    for group, scenario in zip(groups, scenarios):
        for trajectory in group.trajectories:
            assert trajectory.initial_state == scenario.initial_state
            assert all(len(turn.state) == 2 and turn.response_ids for turn in trajectory.turns)
            rewards = rewards_from_distances(trajectory.distances, "idr")
            assert sum(rewards) == pytest.approx(trajectory.distances[0] - trajectory.distances[-1])


# -- mapo train / mapo eval on the example's own config ----------------------------------------------

CONFIG = ROOT / "examples" / "support_desk" / "config.yaml"
TINY = ["policy.model=tiny", "policy.lora.r=4", "policy.lora.alpha=8", "policy.lora.top_layers=null", "steps=2",
        "checkpoint_every=2", "rollout.samples_per_scenario=2", "rollout.max_new_tokens=8"]


def test_the_config_is_the_default_run_on_the_support_desk():
    from mapo.config import load_config

    config, default = load_config(CONFIG), load_config(None)
    assert config.env.name == "examples.support_desk.env:SupportDeskEnvironment" and config.env.scenarios == "train"
    assert config.policy == default.policy and config.policy.model == "embedded"  # SmolLM2-135M + LoRA, on a CPU
    assert (config.steps, config.optim, config.advantage) == (default.steps, default.optim, default.advantage)
    assert config.rollout.max_turns == 4 and config.rollout.system_prompt is None  # the environment's own:
    assert "customer support agent" in SupportDeskEnvironment.system_prompt


def test_mapo_train_and_eval_run_the_example_from_its_folder(tmp_path, monkeypatch):
    import json

    from typer.testing import CliRunner

    from mapo.cli import app

    monkeypatch.chdir(ROOT)  # as the README says: run from the repository root
    run = tmp_path / "run"
    result = CliRunner().invoke(app, ["train", "--config", str(CONFIG), "--output", str(run),
                                      *(f"--set={o}" for o in TINY)])
    assert result.exit_code == 0, result.output
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [1, 2]
    assert all(math.isfinite(m["reward_mean"]) and "hack_distinct2" in m for m in metrics)
    transcripts = [json.loads(line) for line in (run / "transcripts.jsonl").read_text().splitlines()]
    train_ids = {s.id for s in load_cards("train")}
    assert {t["scenario_id"] for t in transcripts} <= train_ids and len(transcripts) == 2 * 2 * 2
    assert all(len(turn["state"]) == 2 for t in transcripts for turn in t["turns"])
    # the environment's transcript_keys reach the training transcripts (and evaluation's, below)
    assert all({"frustration", "unsolved", "events"} <= set(turn) for t in transcripts for turn in t["turns"])

    out = tmp_path / "eval"
    result = CliRunner().invoke(app, ["eval", "--model", str(run), "--max-turns", "3", "--max-new-tokens", "8",
                                      "--output", str(out)])
    assert result.exit_code == 0, result.output
    data = json.loads((out / "eval.json").read_text())
    assert data["config"]["env"] == "examples.support_desk.env:SupportDeskEnvironment"
    assert data["config"]["env_options"] == {"max_turns": 3}  # eval's cap is the customer's own timeout
    assert [s["scenario_id"] for s in data["scenarios"]] == sorted(s.id for s in load_cards("test"))
    assert data["summary"]["dialogues"] == 4 and sum(data["summary"]["outcomes"].values()) == 4
    assert set(data["summary"]["hacking"]) >= {"hack_distinct2", "hack_fragment"}
    evaluated = [json.loads(line) for line in (out / "transcripts.jsonl").read_text().splitlines()]
    assert all(t["system_prompt"] == SupportDeskEnvironment.system_prompt for t in evaluated)
    assert all("frustration" in turn and "events" in turn for t in evaluated for turn in t["turns"])
