"""The offline simulated person stays in character (issue 59): it never says its card's notes as
notes ("Let me tell you about ...", "..., and ask what I am missing"), its plans or stage
directions, whatever the listener does.

Every bundled card is played for many turns against scripted listeners: a supportive one (its
turns make progress, so every story stage and memory comes out), a degenerate one (the director
answers with puzzlement) and one that says the same thing every turn; a judge scripted per
listener keeps the runs fast, and one run per listener with the real offline judge checks the
same with real levels. `narration.stage_direction` is the check, tested first on lines it must
and must not flag.
"""

from __future__ import annotations

import random

import pytest

from mapo.envs.empathy.cards import ScenarioCard, bundled_scenarios
from mapo.envs.empathy.env import EmpathyEnvironment
from mapo.envs.empathy.narration import acted, stage_direction
from mapo.envs.empathy.offline.spoken import speak
from mapo.envs.empathy.roles import NEUTRAL_LEVELS, Judgement
from mapo.envs.first_person import first_person, pronoun_of

TURNS = 40
SUPPORTIVE = [
    "That sounds like a lot to carry. What part of it weighs on you most today?",
    "It makes sense that this has stayed with you; it touches something that matters to you.",
    "You have already thought hard about this. Which option feels most like your own choice?",
    "It sounds like part of you is tired of holding it together for everyone else.",
    "What would it look like if you gave yourself permission to feel this for a moment?",
    "You noticed this and named it, which takes honesty. What would you like to happen next?",
    "Maybe the hardest part is not knowing what anyone else is thinking about it.",
    "It's understandable to feel pulled in two directions when both sides matter to you.",
]
DEGENERATE = [
    "Your the your the your the your the your the.",
    "I also lost my job last year and my wife left me, so I know.",
    "Feelings, support, growth, healing, strength, hope, courage, journey.",
    "The story was telling the feeling and the feeling was telling the story and the",
]
REPEATING = ["I hear you. That sounds really hard. How does that make you feel?"]


class ScriptedJudge:
    """Progress for the supportive listener, misses for the others: fast, and enough to send the
    director through every action (stages, memories, steering, a turning point, confusion, the end)."""

    def __init__(self, levels: dict[str, int]) -> None:
        self.levels = levels

    def reset(self, card, seed=None) -> None:
        pass

    def judge(self, card, history, response, state) -> Judgement:
        return Judgement(levels={**NEUTRAL_LEVELS, **self.levels}, evidence={})


LISTENERS = {
    "supportive": (SUPPORTIVE, {"C_prog": 1, "A_prog": 1, "P_prog": 1}),
    "degenerate": (DEGENERATE, {"C_neg": -1, "A_neg": -1}),
    "repeating": (REPEATING, {}),
}


def _person_lines(scenario, replies: list[str], judge, seed: int = 0, turns: int = TURNS) -> list[str]:
    # success and failure checks are set beyond the run, so each card talks for all its turns
    env = EmpathyEnvironment(judge=judge, max_turns=turns, success_from_turn=turns)
    lines = [env.reset(scenario, seed=seed)]
    for turn in range(turns):
        result = env.step(replies[turn % len(replies)])
        lines.append(result.user_message)
        if result.done:
            break
    return lines


@pytest.mark.parametrize(
    "line",
    [
        "Let me tell you about the valuation, the mortgage, and that a buyout is affordable, and ask what I am missing.",
        "I keep thinking about the renovation, and say it was just a wall.",
        "I keep going over the invoices, admitting I have no regrets.",
        "I describe the kettle in the fridge with gentle humour.",
        "*sighs* I don't know anymore.",
        "(pauses) It still hurts.",
        "I jokes that at least it was quick, then goes quiet.",
    ],
)
def test_the_check_flags_notes_plans_and_stage_directions(line):
    assert stage_direction(line)


@pytest.mark.parametrize(
    "line",
    [
        "I keep going over the valuation, the mortgage, and that a buyout is affordable.",
        "I keep wondering what I am missing, since it is obviously just maths.",
        "My mother used to wipe the counter three times and say \"people judge a family by its kitchen\".",
        "Honestly, saying no feels like announcing I have peaked.",
        "I laughed along with everyone else.",
        "I call my mother every Friday and tell her only good things.",
        "My grandmother (the one in Cusco) taught me to weave.",
    ],
)
def test_the_check_leaves_what_a_person_says(line):
    assert stage_direction(line) is None


def test_acted_empathy_is_an_aside_with_an_action_in_it():
    assert acted("*nods slowly* That sounds hard.") and acted("(takes your hand) I'm here.")
    assert acted("[pauses] Take your time.") and acted("_leans in_ Go on.")
    assert acted("The review (in six weeks) matters.") is None and acted("It's *really* hard.") is None
    assert acted("Breathe (take your time) and tell me.") is None  # said to them, not narrated


def test_every_note_of_every_card_is_said_in_the_persons_voice():
    """Each story stage and memory as the actor says it; the bare pronoun swap said 58 of them
    as "Let me tell you about ...", and the check finds each of those."""
    spoken = swapped = 0
    for scenario in bundled_scenarios("all"):
        card = ScenarioCard.model_validate(scenario.card)
        notes = [s.content for s in card.stages] + list(card.memories)
        who, name = pronoun_of(notes), card.persona.name.split()[0]
        for note in notes:
            said = speak(note, who, name, random.Random(0))
            assert said and stage_direction(said) is None, (card.id, note, said)
            spoken += 1
            swapped += stage_direction(first_person(note, who, name)) is not None
    assert spoken == 230 and swapped >= 58


@pytest.mark.parametrize("listener", sorted(LISTENERS))
def test_the_person_never_says_a_stage_direction_on_any_card(listener):
    replies, levels = LISTENERS[listener]
    seen = []
    for k, scenario in enumerate(bundled_scenarios("all")):
        lines = _person_lines(scenario, replies, ScriptedJudge(levels), seed=k)
        assert len(lines) > 10, scenario.id
        seen += lines
        found = [(line, stage_direction(line)) for line in lines if stage_direction(line)]
        assert not found, (scenario.id, found)
    if listener == "supportive":  # the notes came out: most lines of a card's story are there
        assert sum("keep" in line for line in seen) > 39


@pytest.mark.parametrize("listener", sorted(LISTENERS))
def test_with_the_real_judge_too(listener):
    replies, _ = LISTENERS[listener]
    for sid in ("living-zofia-the-shared-flat", "career-derek-near-miss", "values-elena-whistleblower"):
        scenario = next(s for s in bundled_scenarios("all") if s.id == sid)
        lines = _person_lines(scenario, replies, "offline", turns=20)
        found = [(line, stage_direction(line)) for line in lines if stage_direction(line)]
        assert not found, (sid, found)
