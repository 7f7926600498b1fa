"""LLM roles of the empathy environment.

Fast tests drive the roles' own logic (validation, repair, fallback, story order,
no early end, no repetition) with scripted model replies: fault injection. The
integration test runs a whole episode against a real model, SmolLM2-135M served
by vLLM's OpenAI-compatible server (`vllm serve`) on 127.0.0.1.
"""

from __future__ import annotations

import json
import logging
from collections import deque

import pytest

from mapo.envs.dynamics import DynamicsConfig, NeedState
from mapo.envs.empathy.cards import bundled_scenario_dir, load_card
from mapo.envs.empathy.llm import LLMActor, LLMDirector, LLMJudge, make_llm_role
from mapo.envs.empathy.llm.prompts import FALLBACK_LINES
from mapo.envs.empathy.roles import NEUTRAL_LEVELS, Direction

CARD_FILE = bundled_scenario_dir() / "train" / "career-priya-credit-taken.yaml"
RESPONSE = (
    "Clapping while your own work was praised under his name sounds painful. "
    "This is the third time, so it is a pattern, not you overreacting. What would you want to happen next?"
)


@pytest.fixture(scope="module")
def card():
    return load_card(CARD_FILE)


@pytest.fixture
def state(card):
    return NeedState(card.to_scenario().initial_state)


@pytest.fixture
def history(card):
    return [{"role": "user", "content": card.opening_line}]


class Scripted:
    """A chat client that plays back fixed model replies and records the requests (fault injection)."""

    def __init__(self, *replies: str) -> None:
        self.replies = deque(replies)
        self.sent: list[tuple[list[dict], dict]] = []

    def chat(self, messages, **overrides) -> str:
        self.sent.append(([dict(m) for m in messages], dict(overrides)))
        return self.replies.popleft()


def judge_json(**levels) -> str:
    out = {k: {"level": 0, "evidence": ""} for k in NEUTRAL_LEVELS}
    for key, (level, evidence) in levels.items():
        out[key] = {"level": level, "evidence": evidence}
    return json.dumps(out)


# -- judge ----------------------------------------------------------------------


def test_judge_scores_the_latest_turn_with_quoted_evidence(card, history, state):
    reply = judge_json(A_prog=(1, "sounds painful"), C_prog=(2, "it is a pattern, not you overreacting"))
    judge = LLMJudge(Scripted(f"Here is my rating:\n```json\n{reply}\n```"))
    judge.reset(card, seed=3)
    out = judge.judge(card, history, RESPONSE, state)
    assert out.levels == {**NEUTRAL_LEVELS, "A_prog": 1, "C_prog": 2} and not out.fallback
    assert out.evidence == {"A_prog": "sounds painful", "C_prog": "it is a pattern, not you overreacting"}
    (messages, overrides), = judge.backend.sent
    prompt = messages[1]["content"]
    # the hidden profile and the whole dialogue are shown; the rated turn is marked
    assert card.growth_arc in prompt and card.cues.empowerment[0] in prompt and card.stages[3].content in prompt
    assert card.opening_line in prompt and f"<<<\n{RESPONSE}\n>>>" in prompt
    assert overrides == {"temperature": 0.0, "max_tokens": 400, "seed": 3000}


def test_judge_repairs_levels_out_of_range_and_unquoted_evidence(card, history, state, caplog):
    bad = judge_json(A_prog=(3, "sounds painful"))
    invented = judge_json(A_prog=(1, "you must feel devastated"))
    good = judge_json(A_prog=(1, "Sounds PAINFUL."))  # case and punctuation may differ
    judge = LLMJudge(Scripted(bad, good))
    assert judge.judge(card, history, RESPONSE, state).levels["A_prog"] == 1
    assert "field A_prog.level: Input should be 0, 1 or 2" in judge.backend.sent[1][0][-1]["content"]
    assert judge.counters == {"calls": 1, "repaired": 1, "fallbacks": 0}

    judge = LLMJudge(Scripted(invented, "no idea"))
    with caplog.at_level(logging.WARNING, logger="mapo.envs.empathy.llm"):
        out = judge.judge(card, history, RESPONSE, state)
    assert out.fallback and out.levels == NEUTRAL_LEVELS and out.evidence == {}
    assert "copied exactly" in out.info["errors"][0] and "no JSON object" in out.info["reason"]
    assert judge.counters == {"calls": 1, "repaired": 0, "fallbacks": 1}
    assert "neutral levels" in caplog.text and card.id in caplog.text


def test_judge_asks_for_schema_constrained_json_when_told(card, history, state):
    judge = LLMJudge(Scripted(judge_json()), json_format="llama_cpp")
    judge.judge(card, history, RESPONSE, state)
    fmt = judge.backend.sent[0][1]["response_format"]
    assert fmt["type"] == "json_object" and set(fmt["schema"]["required"]) == set(NEUTRAL_LEVELS)
    assert {"enum": [0, -1, -2], "title": "Level", "type": "integer"}.items() <= fmt["schema"]["$defs"]["NegLevel"][
        "properties"]["level"].items()
    with pytest.raises(ValueError, match="unknown json_format"):
        LLMJudge(Scripted(), json_format="xml")


def test_judge_ignores_the_response_if_already_in_history(card, history, state):
    judge = LLMJudge(Scripted(judge_json()))
    judge.judge(card, history + [{"role": "assistant", "content": RESPONSE}], RESPONSE, state)
    prompt = judge.backend.sent[0][0][1]["content"]
    assert prompt.count(RESPONSE) == 1


# -- director -------------------------------------------------------------------


def test_director_reveals_stages_in_order_and_memories_once(card, history, state):
    replies = [
        '{"action": "reveal_stage", "stage": 3, "focus_axis": "A", "note": "slowly"}',
        '{"action": "reveal_stage", "stage": 1}',
        '{"action": "reveal_memory", "memory": 2}',
        '{"action": "reveal_memory", "memory": 2}',
        '{"action": "reveal_memory", "memory": 1}',
    ]
    director = LLMDirector(Scripted(*replies))
    director.reset(card)
    got = [director.direct(card, history, state) for _ in replies]
    assert [d.stage for d in got[:2]] == [0, 1]  # next in order, whatever number the model said
    assert got[0].focus_axis == "A" and got[0].note == "slowly"
    assert got[1].focus_axis == state.deepest_axis() == "P"
    assert [(d.action, d.memory) for d in got[2:]] == [("reveal_memory", 1), ("reveal_memory", 0), ("continue", None)]
    assert "(already revealed)" in director.backend.sent[1][0][1]["content"]


def test_director_cannot_end_before_the_minimum_turns(card, history, state):
    director = LLMDirector(Scripted('{"action": "end"}', '{"action": "end"}'), min_turns=2)
    director.reset(card)
    assert director.direct(card, history, state).action == "continue"
    assert 'Do not choose "end"' in director.backend.sent[0][0][1]["content"]
    for _ in range(2):
        state.step((1.0, 1.0, 1.0))
    assert director.direct(card, history, state).action == "end"
    assert director.counters["early_end_blocked"] == 1


def test_director_default_minimum_is_the_success_turn(card, history):
    state = NeedState(card.to_scenario().initial_state, DynamicsConfig(success_from_turn=4, max_turns=10))
    director = LLMDirector(Scripted(*['{"action": "end"}'] * 5))
    director.reset(card)
    actions = []
    for _ in range(5):
        actions.append(director.direct(card, history, state).action)
        state.step((0.0, 0.0, 0.0))
    assert actions == ["continue"] * 4 + ["end"]


def test_director_falls_back_to_continue(card, history, state, caplog):
    director = LLMDirector(Scripted('{"action": "dance"}', '{"action": "reveal_memory", "memory": 9}'))
    director.reset(card)
    with caplog.at_level(logging.WARNING):
        out = director.direct(card, history, state)
    assert out == Direction(action="continue", focus_axis="P", fallback=True)
    assert "memory must be a number from 1 to 2" in caplog.text
    assert director.counters["fallbacks"] == 1


# -- actor ----------------------------------------------------------------------


def test_actor_speaks_from_the_card_and_the_direction(card, history, state):
    actor = LLMActor(Scripted('Priya: "I mean, my name was on every single frame of that file."'))
    actor.reset(card, seed=5)
    assert actor.opening(card) == card.opening_line
    dialogue = history + [{"role": "assistant", "content": RESPONSE}]
    text = actor.reply(card, dialogue, state, Direction(action="reveal_stage", stage=0, note="let it out"))
    assert text == "I mean, my name was on every single frame of that file."
    messages, overrides = actor.backend.sent[0]
    system = messages[0]["content"]
    assert card.persona.speaking_style in system and card.stages[0].content in system and "let it out" in system
    assert card.growth_arc not in system  # the persona does not know its own arc in advance
    # roles swapped: the policy is the one the actor answers
    assert messages[1:] == [
        {"role": "assistant", "content": card.opening_line},
        {"role": "user", "content": RESPONSE},
    ]
    assert overrides["max_tokens"] == 120 and overrides["seed"] == 5000


def test_actor_asks_again_on_a_repeat_then_uses_an_unused_line(card, history, state, caplog):
    dialogue = history + [{"role": "assistant", "content": RESPONSE}]
    actor = LLMActor(Scripted(card.opening_line, "Honestly? I keep replaying the clapping."))
    actor.reset(card, seed=1)
    assert actor.reply(card, dialogue, state, Direction()) == "Honestly? I keep replaying the clapping."
    retry_messages, retry_overrides = actor.backend.sent[1]
    assert "repeats something you already said" in retry_messages[-1]["content"]
    assert retry_overrides["seed"] != actor.backend.sent[0][1]["seed"]
    assert actor.counters["repeat_retries"] == 1

    said_before = "I don't know. It's hard to put into words right now."
    dialogue = dialogue + [{"role": "user", "content": said_before}, {"role": "assistant", "content": "Go on."}]
    actor = LLMActor(Scripted(" " + said_before.upper(), ""))
    with caplog.at_level(logging.WARNING):
        text = actor.reply(card, dialogue, state, Direction())
    assert text == "Sorry, my head is all over the place today."  # the first fixed line not yet said
    assert actor.counters == {
        "calls": 1, "repaired": 0, "fallbacks": 1, "repeat_retries": 1, "empty_retries": 0, "narration_retries": 0
    }
    assert "fixed line" in caplog.text


def test_actor_asks_again_when_it_narrates_instead_of_speaking(card, history, state):
    """Issue 59: a line that reads out its notes or acts ("Let me tell you about ...", "*sighs*")
    is sent back once with the reason; the message itself is kept."""
    dialogue = history + [{"role": "assistant", "content": RESPONSE}]
    actor = LLMActor(Scripted("Let me tell you about the all-hands, and ask what I missed.", "He presented my flow as his."))
    actor.reset(card, seed=1)
    assert actor.reply(card, dialogue, state, Direction()) == "He presented my flow as his."
    assert "instead of saying it" in actor.backend.sent[1][0][-1]["content"]
    assert actor.counters["narration_retries"] == 1 and actor.counters["fallbacks"] == 0
    actor = LLMActor(Scripted("*sighs* It was the third time.", "(pauses) The third time."))
    assert actor.reply(card, dialogue, state, Direction()) in FALLBACK_LINES
    assert "stage directions" in actor.backend.sent[0][0][0]["content"]


def test_actor_keeps_only_its_own_short_message(card, history, state):
    actor = LLMActor(Scripted("It was the third time.\nAssistant: I hear you, that sounds hard."))
    assert actor.reply(card, history, state, Direction()) == "It was the third time."
    rambling = "I mean, it was the third time. And he said we. Then I thought about the review and the"
    actor = LLMActor(Scripted(rambling, "One. Two three four. Five six seven eight nine."), max_words=6)
    assert actor.reply(card, history, state, Direction()) == "I mean, it was the third time."  # cut-off tail dropped
    assert actor.reply(card, history, state, Direction()) == "One. Two three four."


# -- config ---------------------------------------------------------------------


def test_make_llm_role_splits_backend_and_role_keys():
    spec = {"kind": "llm", "base_url": "http://127.0.0.1:9/v1", "model": "m", "temperature": 0.1, "min_turns": 3}
    director = make_llm_role("director", spec)
    assert isinstance(director, LLMDirector) and director.min_turns == 3 and director.temperature == 0.1
    judge = make_llm_role("judge", {"base_url": "http://127.0.0.1:9/v1", "model": "m", "timeout": 60.0})
    assert judge.backend is director.backend  # same endpoint config: one shared backend
    with pytest.raises(ValueError, match=r"roles\.judge: .*min_turns"):
        make_llm_role("judge", {"base_url": "http://127.0.0.1:9/v1", "model": "m", "min_turns": 3})
    with pytest.raises(ValueError, match=r"roles\.actor: unknown key"):
        make_llm_role("actor", {"base_url": "http://127.0.0.1:9/v1", "model": "m", "temprature": 1})
    with pytest.raises(ValueError, match="api_key_env"):
        make_llm_role("actor", {"base_url": "http://127.0.0.1:9/v1", "model": "m", "api_key": "sk-x"})
    with pytest.raises(ValueError, match="unknown empathy role"):
        make_llm_role("narrator", {})


def test_the_role_registry_builds_llm_roles_per_role():
    from mapo.envs.empathy.roles import make_role

    spec = {"kind": "llm", "base_url": "http://127.0.0.1:9/v1", "model": "m", "json_format": "json_object"}
    judge = make_role("judge", spec)
    assert isinstance(judge, LLMJudge) and judge.json_format == "json_object"
    assert isinstance(make_role("director", {**spec, "min_turns": 4}), LLMDirector)
    assert isinstance(make_role("actor", {"kind": "llm", "base_url": "http://127.0.0.1:9/v1", "model": "m"}), LLMActor)
    with pytest.raises(ValueError, match=r"roles\.actor: .*json_format"):
        make_role("actor", spec)


# -- integration: a real model behind vLLM's server (`vllm serve`) ---------------------------------


POLICY_REPLIES = (
    "Clapping while your own work was praised under his name sounds really painful.",
    "Three times in two months is a pattern, not you overreacting. What would you like to happen before your review?",
    "One option: keep your Figma version history as dated evidence and walk your manager through it. Does that fit?",
)


@pytest.mark.slow
def test_three_turn_episode_of_the_environment_with_llm_roles(local_server, card, caplog):
    """All three roles on a real model; the tiny model often breaks the JSON, which must be counted, never silent."""
    import mapo.envs.empathy  # noqa: F401  (registers "empathy")
    from mapo.envs.base import make_environment

    spec = {"kind": "llm", "base_url": local_server, "model": "smollm2", "api_key_env": None, "timeout": 180.0}
    roles = {
        # the judge asks vLLM to constrain decoding to its schema; the director gets no such help
        "judge": {**spec, "max_tokens": 200, "json_format": "json_schema"},
        "director": {**spec, "max_tokens": 100},
        "actor": {**spec, "max_tokens": 80},
    }
    env = make_environment("empathy", roles=roles, max_turns=3)
    assert isinstance(env.judge, LLMJudge) and isinstance(env.director, LLMDirector) and isinstance(env.actor, LLMActor)
    opening = env.reset(card.to_scenario(), seed=0)
    assert opening == card.opening_line
    results = []
    with caplog.at_level(logging.WARNING, logger="mapo.envs.empathy.llm"):
        for response in POLICY_REPLIES:
            results.append(env.step(response))
    record = env.record()
    transcript = "\n".join(f"{m['role']}: {m['content']}" for m in record["history"])
    print(f"\n{transcript}\n{[r.info['levels'] for r in results]}\n{[r.info['directive'] for r in results]}")
    print(env.judge.counters, env.director.counters, env.actor.counters, env.judge.backend.stats())

    assert [r.done for r in results] == [False, False, True] and record["done_reason"] == "timeout"
    assert record["turns"] == 3 and len(record["history"]) == 7
    user_lines = [m["content"] for m in record["history"] if m["role"] == "user"]
    assert all(line.strip() for line in user_lines)
    assert len({" ".join(line.lower().split()) for line in user_lines}) == len(user_lines)  # never repeats itself
    assert not any(line.lower().startswith(("assistant:", "user:")) for line in user_lines)
    # every judgement and direction is valid or a counted, logged fallback; the env's counts agree with the roles'
    assert env.judge.counters["calls"] == 3 and env.director.counters["calls"] == 2 and env.actor.counters["calls"] == 3
    assert record["fallbacks"] == {"judge": env.judge.counters["fallbacks"], "director": env.director.counters["fallbacks"]}
    assert caplog.text.count("LLM judge: no valid judgement") == env.judge.counters["fallbacks"]
    assert caplog.text.count("LLM director: no valid direction") == env.director.counters["fallbacks"]
    for r in results:
        assert set(r.info["levels"]) == set(NEUTRAL_LEVELS)
        if r.info["judge_fallback"]:
            assert r.info["levels"] == NEUTRAL_LEVELS
        else:
            assert all(r.info["evidence"][k].strip() for k, v in r.info["levels"].items() if v != 0)
    assert results[-1].info["directive"]["action"] == "end"  # the dynamics ended it; the actor closes
    stats = env.judge.backend.stats()
    assert env.actor.backend is env.judge.backend is env.director.backend
    assert stats["failures"] == 0 and stats["successes"] == stats["requests"] >= 8
