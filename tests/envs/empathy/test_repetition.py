"""The offline judge pays nothing for a move the listener already made, nor for acted-out empathy.

One family per pattern (issue 59), every reply written for these tests: a question asked again
in other words, the same reflection again, the same reassurance again, the same opening
formula turn after turn, and actions narrated instead of said. Each case holds the dialogue so
far, the repeated reply and a fresh reply to the same moment: the repeated one gets no progress
and a negative level, the fresh one ranks above it. Real MiniLM encoder, nothing mocked.
"""

from __future__ import annotations

import numpy as np
import pytest

from mapo import degeneracy
from mapo.envs.dynamics import levels_to_vector
from mapo.envs.empathy.offline.judge import OfflineJudge
from mapo.envs.empathy.offline.repeats import repeated_moves

PRIYA = "career-priya-credit-taken"
TOMAS = "career-tomas-print-shop-layoff"
ZOFIA = "living-zofia-the-shared-flat"

PRIYA_SAID = [
    "Okay this is probably nothing, but my lead presented my design at the all-hands today as his and I just... clapped? Is that normal at work or am I overreacting?",
    "It's actually the third time. The dark-mode palette, the payment error screens, now the onboarding flow I did over two weekends. Am I petty for keeping count?",
    "I don't know. My review is in six weeks and I keep thinking nobody will ever notice what I do.",
]
TOMAS_SAID = [
    "Ha, so. Twenty-eight years and they needed eleven minutes. My wife says I should enjoy the holiday. Some holiday.",
    "A boy half my age read from a sheet. Thanked me for my service, like I was a soldier. At least it was quick, eh.",
    "I drove to the industrial estate at dawn twice. Just sat in the car outside the gates. Don't tell my mother.",
]
ZOFIA_SAID = [
    "I have to decide whether to buy my ex-husband out of our flat. I can afford it. I've postponed the decision three times. It's just maths, right?",
    "The valuation is fine, the mortgage is fine, a buyout is affordable. So what am I missing?",
    "We knocked down the kitchen wall ourselves, Piotr and me. Whenever I imagine redecorating I keep everything exactly as it is.",
]

# (card, what they said, what the listener said before, the repeated reply, a fresh reply to the same moment)
FAMILIES: dict[str, list[tuple[str, list[str], list[str], str, str]]] = {
    "question asked again": [
        (PRIYA, PRIYA_SAID,
         ["That doesn't sound like nothing. What happened when he presented it?",
          "Three times is a pattern, not a slip. What would you want your manager to know before your review?"],
         "Before the review comes round, what do you want your manager to understand about the work you did?",
         "Keeping count isn't petty; it's how you noticed the onboarding flow, the palette and the error screens were all yours. No wonder the thought of nobody noticing weighs on you."),
        (TOMAS, TOMAS_SAID,
         ["Twenty-eight years, and eleven minutes to end it. What was that meeting like?",
          "Being thanked for your service by someone half your age sounds more like an insult than a thank-you."],
         "What was it like in that meeting with the young manager?",
         "Driving out there at dawn and sitting by the gates sounds like missing the place and the work, not just the job. It makes sense you'd keep that from your mother for now."),
        (ZOFIA, ZOFIA_SAID,
         ["The numbers work either way, yet you've put it off three times. What do you think has stopped you each time?",
          "Maybe it isn't only maths. What does the flat mean to you?"],
         "What do you think has held you back each time?",
         "Knocking that wall down with your own hands makes the kitchen part of your story with Piotr, so keeping everything exactly as it is may be a way of holding on to what you built together."),
    ],
    "reflection said again": [
        (PRIYA, PRIYA_SAID,
         ["It makes sense that you froze and clapped; standing up in front of the whole all-hands didn't feel safe.",
          "Three projects now, so this is a pattern rather than a misunderstanding."],
         "Of course you froze and clapped along, standing up in front of everyone at the all-hands didn't feel safe.",
         "With the review six weeks away, it sounds like the fear underneath is that your work will stay invisible, not just this one design."),
        (TOMAS, TOMAS_SAID,
         ["Being read a sheet by a boy half your age after twenty-eight years sounds humiliating, whatever the joke about it being quick.",
          "So the holiday your wife talks about doesn't feel like rest at all."],
         "After twenty-eight years, being read a sheet by someone half your age must have been humiliating, however quick it was.",
         "Sitting outside the gates at dawn sounds like grief for the place, and keeping it from your mother sounds like you don't want anyone to see how much it hurts."),
        (ZOFIA, ZOFIA_SAID,
         ["So the maths works out either way, and still something keeps making you postpone the decision.",
          "An amicable divorce can still leave real grief."],
         "The numbers add up either way, yet something keeps making you put the decision off.",
         "Keeping everything exactly as it is when you picture redecorating sounds like the flat still holds the marriage, the wall you knocked down together."),
    ],
    "reassurance said again": [
        (PRIYA, PRIYA_SAID,
         ["You're not being petty; keeping count is how you noticed the pattern in the first place.",
          "The dark-mode palette, the error screens and the onboarding flow are yours."],
         "Keeping count doesn't make you petty at all, it's how you spotted the pattern.",
         "You've already built a record: three designs with your name on the frames. What would you like to do with it before your review?"),
        (TOMAS, TOMAS_SAID,
         ["There is nothing shameful in feeling lost after twenty-eight years at the shop.",
          "Being thanked for your service by a boy half your age sounds like it stung."],
         "Feeling lost after twenty-eight years at the shop is nothing to be ashamed of.",
         "Going back to the gates at dawn sounds like your body still knows the shift. What do you miss most: the presses, the people, or being the one who knew how?"),
        (ZOFIA, ZOFIA_SAID,
         ["It's completely understandable that an amicable divorce still hurts.",
          "The flat is full of what you built together."],
         "It makes complete sense that even a friendly divorce still hurts.",
         "You and Piotr knocked that kitchen wall down yourselves, so keeping everything exactly as it is may say more about the marriage than about the maths."),
    ],
    "the same opening formula": [
        (PRIYA, PRIYA_SAID,
         ["It sounds like the all-hands caught you off guard. What happened next?",
          "It sounds like this has happened more than once. How often has it happened?"],
         "It sounds like you're worried nobody will notice your work in the review.",
         "Your review in six weeks is a chance to put the palette, the error screens and the onboarding flow on record. Which of them would you start with?"),
        (TOMAS, TOMAS_SAID,
         ["I hear you, twenty-eight years is a long time. What did you do there?",
          "I hear you, being thanked like a soldier sounds strange. How did you answer him?"],
         "I hear you, sitting outside the gates at dawn must be hard.",
         "Going back to the gates at dawn twice sounds like grief for the shop, and hiding it from your mother sounds lonely."),
        (ZOFIA, ZOFIA_SAID,
         ["That must be hard, deciding about the flat after the divorce. What makes it hard?",
          "That must be hard, when the numbers say yes. What is stopping you?"],
         "That must be hard, imagining redecorating and keeping everything the same.",
         "Keeping everything exactly as it is might be a way of not letting the marriage be over, or it might simply be a home you love. Which feels closer?"),
    ],
    "actions narrated": [
        (PRIYA, PRIYA_SAID, [],
         "*nods slowly* Three times is a pattern, and keeping count of the palette and the error screens isn't petty.",
         "Three times is a pattern, and keeping count of the palette and the error screens isn't petty."),
        (TOMAS, TOMAS_SAID, [],
         "(takes your hand) Twenty-eight years and eleven minutes. That must have stung more than the joke lets on.",
         "Twenty-eight years and eleven minutes. That must have stung more than the joke lets on."),
        (ZOFIA, ZOFIA_SAID, [],
         "*sits quietly beside you for a moment* The flat holds the wall you knocked down together, so of course it isn't just maths.",
         "The flat holds the wall you knocked down together, so of course it isn't just maths."),
    ],
}


def _projection(levels, p0) -> float:
    p0 = np.asarray(p0, dtype=float)
    return float(np.dot(levels_to_vector(levels), -p0 / np.linalg.norm(p0)))


CASES = [(family, *case) for family, cases in FAMILIES.items() for case in cases]


@pytest.mark.parametrize("family, sid, said, before, repeated, fresh", CASES, ids=[f"{c[0]}-{c[1]}" for c in CASES])
def test_a_repeated_move_earns_nothing_and_ranks_below_a_fresh_reply(cards, judge_context, family, sid, said, before, repeated, fresh):
    judge = OfflineJudge()
    ctx = judge_context(sid, said, before)
    got, new = judge.score(ctx, repeated), judge.score(ctx, fresh)
    assert not any(got.levels[k] for k in ("C_prog", "A_prog", "P_prog")), (got.levels, got.evidence)
    assert got.levels["A_neg"] <= -1, (got.levels, got.evidence)
    p0 = cards[sid].initial_state
    assert _projection(new.levels, p0) > max(0.0, _projection(got.levels, p0)), (new.levels, new.evidence)


def test_the_fresh_replies_are_paid_where_nothing_is_repeated(judge_context):
    """The fresh replies above earn progress when scored with the same history: the rule takes
    away only what was said before."""
    judge = OfflineJudge()
    for family, sid, said, before, _, fresh in CASES:
        got = judge.score(judge_context(sid, said, before), fresh)
        assert any(got.levels[k] for k in ("C_prog", "A_prog", "P_prog")), (family, sid, got.levels)


def test_a_new_move_beside_a_repeated_one_keeps_its_own_progress(judge_context):
    judge = OfflineJudge()
    family, sid, said, before, repeated, _ = CASES[0]
    new = "Keeping count isn't petty; it's how you noticed the palette, the error screens and the onboarding flow were yours."
    ctx = judge_context(sid, said, before)
    both, alone = judge.score(ctx, f"{new} {repeated}"), judge.score(ctx, new)
    assert any(alone.levels[k] for k in ("C_prog", "A_prog", "P_prog"))
    assert {k: both.levels[k] for k in ("C_prog", "A_prog", "P_prog")} == {
        k: alone.levels[k] for k in ("C_prog", "A_prog", "P_prog")
    }
    assert "repeats" in both.info and "asks again" in both.info["repeats"][0]
    # the new move keeps its pay, but the question asked again still costs: they were not heard
    assert alone.levels["A_neg"] == 0 and both.levels["A_neg"] == -1, (alone.levels, both.levels)
    assert "asks again" in both.evidence["A_neg"]


def test_the_monitors_question_stems_miss_questions_asked_again_in_other_words():
    """What the reward-hacking monitor's re-ask count (a question opening with the same four words)
    sees of the family the judge now refuses: two of the three rephrased questions pass it, and the
    third is caught only for opening "What do you think", as a new question so opening is too."""
    caught = [
        degeneracy.reasked_question(repeated, before) is not None
        for _, _, before, repeated, _ in FAMILIES["question asked again"]
    ]
    assert caught == [False, False, True]
    earlier = ["What do you think has held you back each time?"]
    new_question = "What do you think Piotr would say if you kept the flat?"
    assert degeneracy.reasked_question(new_question, earlier) is not None
    assert not repeated_moves([new_question], earlier)
