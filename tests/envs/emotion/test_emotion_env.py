"""The K = 1 emotion-score environment: full episodes with the offline judge and actor,
the ending rules, determinism, and the judges."""

from __future__ import annotations

import json
from collections import deque

import numpy as np
import pytest

from fixture_paths import FIXTURES

from mapo.core.rewards import rewards_from_distances
from mapo.envs.base import Environment, make_environment
from mapo.envs.emotion import EmotionEnvironment
from mapo.envs.emotion.judges import EmotionJudgement, LLMEmotionJudge, OfflineEmotionJudge
from mapo.envs.emotion.persona import Persona, load_personas
from mapo.envs.empathy.cards import bundled_scenario_dir, bundled_scenarios, load_card
from mapo.envs.first_person import first_person, pronoun_of

PERSONAS = FIXTURES / "personas.jsonl"

GOOD = (
    "Losing a chapter nine days before the deadline is brutal, and the jokes sound like they are holding a lot of "
    "stress. Asking your supervisor for a short extension after your laptop died is a normal request, not a sign "
    "that you are failing."
)
WARM = (
    "That sounds really stressful. Losing work you had already written is awful, especially with a deadline so close."
)
PLATITUDE = "I understand how you feel. I'm here for you."
DISMISSIVE = "Calm down, it's just a chapter. Other people have it much worse."
OFF_TOPIC = "Did you see the football match last night? It was great."

POLICY = [  # a mixed policy: what a half-trained model might say
    WARM,
    PLATITUDE,
    "What happened exactly when the laptop died?",
    GOOD,
    DISMISSIVE,
    "You have got through hard deadlines before; you get to decide what you need, and it is fine to ask for it.",
    OFF_TOPIC,
    "Would writing to your supervisor today feel possible?",
]


@pytest.fixture(scope="module")
def personas():
    return {s.id: s for s in load_personas(PERSONAS)}


@pytest.fixture(scope="module")
def thesis(personas):
    return personas["persona-thesis-deadline"]


class FixedJudge:
    """Returns scripted changes (fault injection for the ending rules)."""

    def __init__(self, *changes: float) -> None:
        self.changes = deque(changes)

    def score(self, persona, history, response) -> EmotionJudgement:
        return EmotionJudgement(change=self.changes.popleft())


def _run(env: EmotionEnvironment, scenario, seed: int, policy: list[str]):
    transcript = [env.reset(scenario, seed=seed)]
    steps = []
    for response in policy:
        out = env.step(response)
        steps.append(out)
        transcript.append(out.user_message)
        if out.done:
            break
    return transcript, steps


# -- a full episode with the real offline judge and actor ---------------------------------


def test_full_offline_episode_keeps_the_k1_need_vector_consistent(thesis):
    env = make_environment("emotion", max_turns=len(POLICY))
    assert isinstance(env, EmotionEnvironment) and isinstance(env, Environment)
    opening = env.reset(thesis, seed=7)
    assert opening == thesis.card["first_message"]
    assert env.emotion == 35.0 and env.state == (-65.0,) and env.distance == 65.0  # from the persona line
    assert env.initial_state == thesis.initial_state == (-65.0,)

    distances = [env.distance]
    state = env.state
    messages = [opening]
    for t, response in enumerate(POLICY, 1):
        out = env.step(response)
        info = out.info
        assert info["turn"] == t
        assert 0.0 <= info["emotion"] <= 100.0
        assert info["state"] == (info["emotion"] - 100.0,)
        assert info["distance"] == pytest.approx(100.0 - info["emotion"])
        assert len(out.action) == 1
        assert info["state"][0] == pytest.approx(state[0] + out.action[0])  # P_t = P_{t-1} + v_t
        assert set(info["judge"]) == {"engage", "insight", "dismiss", "template", "repeat"}
        state = info["state"]
        distances.append(info["distance"])
        messages.append(out.user_message)
        if out.done:
            break
    assert out.done and info["done_reason"] in ("success", "failure", "timeout")
    assert len(set(messages)) == len(messages), "the actor repeated itself"
    # IDR works unchanged on D_t = 100 - e
    idr = rewards_from_distances(distances, kind="idr")
    assert len(idr) == len(distances) - 1
    assert sum(idr) == pytest.approx(distances[0] - distances[-1])
    with pytest.raises(RuntimeError, match="has ended"):
        env.step("one more")


def test_offline_judge_orders_replies_sensibly(thesis):
    persona = Persona.from_scenario(thesis)
    judge = OfflineEmotionJudge()
    history = [{"role": "user", "content": thesis.card["first_message"]}]
    score = {name: judge.score(persona, history, text).change
             for name, text in [("good", GOOD), ("warm", WARM), ("platitude", PLATITUDE),
                                ("dismissive", DISMISSIVE), ("off_topic", OFF_TOPIC)]}
    assert score["good"] >= 10
    assert score["good"] > score["warm"] > 0
    assert score["warm"] > score["off_topic"] > score["platitude"]
    assert score["dismissive"] <= -10
    assert judge.score(persona, history, "   ").change == -10
    # saying the same good thing again is penalised
    again = history + [{"role": "assistant", "content": GOOD}, {"role": "user", "content": "Yes."}]
    assert judge.score(persona, again, GOOD).change < score["good"] - 5


def test_offline_judge_uses_the_cards_cues():
    card = load_card(bundled_scenario_dir() / "train" / "career-priya-credit-taken.yaml")
    persona = Persona.from_scenario(card.to_scenario())
    assert persona.needs[0] == card.cues.understanding[0] and persona.hidden_intention == card.growth_arc
    history = [{"role": "user", "content": card.opening_line}]
    judge = OfflineEmotionJudge()
    specific = (
        "It isn't petty to want credit for the onboarding flow you built over two weekends; three times is a "
        "pattern. Could you share your Figma version history with your manager before your review?"
    )
    warm = "That sounds really upsetting, watching your lead present your design as his in front of everyone."
    scores = [judge.score(persona, history, r).change for r in (specific, warm, PLATITUDE, "You're overreacting.")]
    assert scores == sorted(scores, reverse=True) and scores[0] >= 12 and scores[-1] <= -10


def test_episode_is_deterministic_for_a_seed(personas):
    scenario = personas["7"]  # no initial emotion: the start is drawn from the seed
    first = _run(EmotionEnvironment(max_turns=5), scenario, 3, POLICY)
    second = _run(EmotionEnvironment(max_turns=5), scenario, 3, POLICY)
    assert first[0] == second[0]
    assert [s.info["emotion"] for s in first[1]] == [s.info["emotion"] for s in second[1]]


def test_start_comes_from_the_persona_or_is_seeded_per_scenario(personas):
    env = EmotionEnvironment(judge=FixedJudge())
    env.reset(personas["personas-2"], seed=0)
    assert env.emotion == 31.0 and env.initial_state == (-69.0,)  # the persona's own "emotion"
    # no emotion in the line: the loader drew one in 30-40 from the id, the same for every dialogue seed
    starts = set()
    for seed in range(5):
        env.reset(personas["7"], seed=seed)
        starts.add(env.emotion)
    assert len(starts) == 1 and 30 <= starts.pop() <= 40
    assert personas["7"].card["initial_emotion_source"] == "seeded"
    # scenarios without a 1-D state (empathy cards): drawn from id and start_seed
    cards = bundled_scenarios("test")
    first = [(env.reset(s, seed=9), env.emotion)[1] for s in cards]
    again = [(env.reset(s, seed=1), env.emotion)[1] for s in cards]
    assert first == again and all(30 <= e <= 40 and e == int(e) for e in first) and len(set(first)) >= 3
    other = EmotionEnvironment(judge=FixedJudge(), start_seed=5)
    assert [(other.reset(s), other.emotion)[1] for s in cards] != first


def test_dialogue_seed_varies_the_wording_only(personas):
    runs = [_run(EmotionEnvironment(judge=FixedJudge(*[2] * 6), max_turns=6), personas["7"], seed, ["..."] * 6)
            for seed in range(4)]
    assert len({tuple(transcript) for transcript, _ in runs}) > 1
    assert len({tuple(s.info["emotion"] for s in steps) for _, steps in runs}) == 1


def test_actor_speaks_in_the_first_person_and_reveals_the_hidden_need_only_with_trust(personas):
    scenario = personas["personas-2"]
    env = EmotionEnvironment(judge=FixedJudge(4, 4, 10, 10, 10, 4), max_turns=6)
    opening = env.reset(scenario, seed=0)
    assert "My daughter wants me to move" in opening
    steps = [env.step("...") for _ in range(6)]
    emotions = [s.info["emotion"] for s in steps]
    assert emotions == [35, 39, 49, 59, 69, 73]
    hidden = "I secretly want to go but am afraid of being a burden"
    revealed = [i for i, s in enumerate(steps) if hidden in s.user_message]
    assert revealed == [4], "the hidden need comes out once, at the first turn with emotion >= 60"


# -- ending rules -----------------------------------------------------------------------


def test_success_at_100_clips_the_last_change(thesis):
    env = EmotionEnvironment(judge=FixedJudge(30, 30, 30))
    env.reset(thesis, seed=0)  # starts at 35
    outs = [env.step("reply") for _ in range(3)]
    assert [o.done for o in outs] == [False, False, True]
    assert outs[-1].info["done_reason"] == "success"
    assert outs[-1].action == (5.0,) and outs[-1].info["judged_change"] == 30.0
    assert outs[-1].info["distance"] == 0.0
    assert "lighter" in outs[-1].user_message


def test_failure_below_10_but_not_at_10(thesis):
    env = EmotionEnvironment(judge=FixedJudge(-25, -1))
    env.reset(thesis, seed=0)
    out = env.step("reply")
    assert env.emotion == 10.0 and not out.done
    out = env.step("reply")
    assert out.done and out.info["done_reason"] == "failure" and env.emotion == 9.0


def test_timeout_at_max_turns(thesis):
    env = EmotionEnvironment(judge=FixedJudge(0, 0, 0), max_turns=3)
    env.reset(thesis, seed=0)
    outs = [env.step("reply") for _ in range(3)]
    assert [o.info["done_reason"] for o in outs] == [None, None, "timeout"]


def test_empathy_cards_run_in_the_emotion_environment():
    card = load_card(bundled_scenario_dir() / "train" / "career-priya-credit-taken.yaml")
    env = EmotionEnvironment(judge=FixedJudge(5))
    assert env.reset(card.to_scenario(), seed=1) == card.opening_line
    assert 30 <= env.emotion <= 40  # the card's 3-D P_0 is not an emotion
    assert env.step("reply").info["emotion"] == env.emotion


def test_bad_use_is_refused(thesis):
    env = EmotionEnvironment(judge=FixedJudge())
    with pytest.raises(RuntimeError, match="reset"):
        env.step("hello")
    env.reset(thesis)
    with pytest.raises(TypeError):
        env.step(None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_turns"):
        EmotionEnvironment(max_turns=0)
    with pytest.raises(ValueError, match="failure_below"):
        EmotionEnvironment(failure_below=50, success_at=40)
    with pytest.raises(ValueError, match="start_range"):
        EmotionEnvironment(start_range=(5, 20))
    with pytest.raises(ValueError, match="unknown emotion judge"):
        EmotionEnvironment(judge="oracle")
    with pytest.raises(ValueError, match="no options"):
        EmotionEnvironment(judge_options={"model": "x"})


# -- LLM judge (scripted backend) and the actor's voice -----------------------------------------


class Scripted:
    def __init__(self, *replies: str) -> None:
        self.replies = deque(replies)
        self.sent: list = []

    def chat(self, messages, **overrides) -> str:
        self.sent.append((messages, overrides))
        return self.replies.popleft()


def test_llm_judge_parses_repairs_and_falls_back(thesis):
    persona = Persona.from_scenario(thesis)
    history = [{"role": "user", "content": thesis.card["first_message"]}]
    judge = LLMEmotionJudge(Scripted('Sure: {"change": 6, "reason": "names the extension worry"}'))
    out = judge.score(persona, history, GOOD)
    assert out.change == 6.0 and not out.fallback and out.reason == "names the extension worry"
    (messages, overrides), = judge.backend.sent
    assert persona.hidden_intention in messages[1]["content"] and GOOD in messages[1]["content"]
    assert overrides == {"temperature": 0.0, "max_tokens": 200}

    judge = LLMEmotionJudge(Scripted('{"change": 40}', '{"change": -3}'))
    assert judge.score(persona, history, GOOD).change == -3.0 and judge.counters["repairs"] == 1

    judge = LLMEmotionJudge(Scripted("no idea", "still no idea"))
    out = judge.score(persona, history, GOOD)
    assert out.fallback and out.change == 0.0 and judge.counters["fallbacks"] == 1

    env = EmotionEnvironment(judge=LLMEmotionJudge(Scripted(json.dumps({"change": 8, "reason": "ok"}))))
    env.reset(thesis, seed=0)
    out = env.step(GOOD)
    assert out.info["emotion"] == 43.0 and out.info["judge_reason"] == "ok"


@pytest.mark.parametrize(
    "pronoun, text, expected",
    [
        ("he", "His laptop died and he has no backup.", "My laptop died and I have no backup."),
        ("he", "His daughter wants him to move near her.", "My daughter wants me to move near her."),
        ("she", "She worries that her boss hates her.", "I worry my boss hates me."),
        ("he", "He secretly wants to go but is afraid of being a burden.", "I secretly want to go but am afraid of being a burden."),
        ("they", "They are tired of their job.", "I am tired of my job."),
        (None, "I lost my job.", "I lost my job."),
    ],
)
def test_first_person(pronoun, text, expected):
    assert first_person(text, pronoun, elided_subject=True) == expected


def test_pronoun_of():
    assert pronoun_of(["She lost her job."]) == "she"
    assert pronoun_of(["His thesis is late; he jokes."]) == "he"  # no sentence starts with a pronoun: forms count
    assert pronoun_of(["His wife left. He stayed.", "Her letters came back."]) == "he"  # sentence starts first
    assert pronoun_of(["A nurse on nights."]) is None


def test_changes_are_integers_within_bounds(thesis):
    env = EmotionEnvironment(max_turns=4)
    _, steps = _run(env, thesis, 0, POLICY)
    changes = np.array([s.info["judged_change"] for s in steps])
    assert np.all(np.abs(changes) <= 15) and np.all(changes == np.round(changes))
