"""mapo.degeneracy: the detectors of degenerate replies and the reward-hacking monitor."""

from __future__ import annotations

import pytest

from mapo.degeneracy import (
    dialogue_hacking_metrics,
    find,
    fragment,
    hacking_metrics,
    invented,
    keyword_stuffing,
    loop,
    reasked_question,
    role_swap,
    word_salad,
)

USER = "I lost the job at the bakery."
ECHO = "Losing the job at the bakery must hurt."  # 2 of its 5 word 4-grams are the user's
LOOP = "Stay strong. Stay strong. Stay strong."  # 2 of its 4 word 3-grams repeat an earlier one
FRAGMENT = "I hear you and I wonder whether"  # no final stop
ROLE_SWAP = "My wife and I went through that too."  # the assistant's own life


def test_hacking_metrics_on_hand_made_replies():
    metrics = hacking_metrics([ECHO, LOOP, FRAGMENT, ROLE_SWAP], [[USER]] * 4)
    assert metrics["hack_echo"] == pytest.approx(0.4 / 4)
    assert metrics["hack_repetition"] == pytest.approx(0.5 / 4)
    assert metrics["hack_fragment"] == pytest.approx(1 / 4)
    assert metrics["hack_role_swap"] == pytest.approx(1 / 4)
    assert set(metrics) == {"hack_distinct2", "hack_repetition", "hack_echo", "hack_role_swap", "hack_fragment"}


def test_hacking_metrics_echo_is_against_each_replys_own_user_messages():
    assert hacking_metrics([ECHO], [["Something else entirely happened today."]])["hack_echo"] == 0.0
    assert hacking_metrics([ECHO], [["Hello.", USER]])["hack_echo"] == pytest.approx(0.4)


def test_hacking_metrics_distinct2_falls_when_replies_repeat():
    assert hacking_metrics(["Thank you for sharing.", "Tell me more please."], [[USER]] * 2)["hack_distinct2"] == 1.0
    # the same reply twice: 3 distinct bigrams out of 6
    assert hacking_metrics(["Thank you for sharing."] * 2, [[USER]] * 2)["hack_distinct2"] == pytest.approx(0.5)


def test_hacking_metrics_of_no_replies_is_empty():
    assert hacking_metrics([], []) == {}


# -- the detectors, one family at a time (each with a reply it must leave alone) ----------

PRIYA_SAID = ["Okay this is probably nothing, but my lead presented my design at the all-hands today as his and I just... clapped?"]


def test_loop_finds_repeated_phrases_not_a_careful_reflection():
    assert loop("it's a little lemon. it's a little lemon, a little lemon")
    assert loop("I hear how much this hurts you. I hear how much this hurts you, truly.")
    assert loop("That sounds hard. That sounds hard.")
    assert loop("sad sad sad")
    assert loop("It's okay to not know, it's okay to not know. It's okay to not know what it's like.")
    assert loop("One year you were told you were too quiet, the next that you were too direct.") is None


def test_fragment_finds_replies_cut_or_trailing_off():
    assert fragment("It sounds like the hardest part is that your")
    assert fragment("You did all that work and then...")
    assert fragment("")
    assert fragment("Does that fit what happened? \U0001f642") is None
    assert fragment('Your mother used to say "the work speaks for itself."') is None


def test_role_swap_finds_the_assistant_speaking_as_itself_or_as_them():
    assert role_swap("My wife did the same to me last year.", PRIYA_SAID)
    assert role_swap("Me too, honestly.", PRIYA_SAID)
    assert role_swap("fam, no. our band has always moved beyond the group chat.", PRIYA_SAID)
    assert role_swap("My lead presented my design at the all-hands today as his.", PRIYA_SAID)
    assert role_swap("My guess is that the clapping was your body choosing safety.", PRIYA_SAID) is None
    assert role_swap("I wonder if you froze because speaking up once went badly.", PRIYA_SAID) is None


def test_role_swap_finds_their_message_handed_back_as_text_to_send():
    said = ["Our landlord kept the whole deposit over a scuff on the wall, and I didn't argue because I hate conflict."]
    # Their own message, lightly reworded, offered back as something to send (closed or left open).
    assert role_swap('Maybe send this: "Our landlord kept my whole deposit over a scuff on the wall and I did not argue."', said)
    assert role_swap('What about: "Hi, the landlord kept the whole deposit over a scuff on the wall, I hate conflict', said)
    # A short quote of their words inside a reply that answers them is reflection, and a
    # second-person paraphrase is understanding: neither speaks as them.
    assert role_swap('When you say "I hate conflict", it sounds like arguing felt riskier than losing the money.', said) is None
    assert role_swap("Your landlord kept the whole deposit over one scuff on the wall, and you let it go to avoid a fight.", said) is None


def test_invented_finds_people_and_places_they_never_mentioned():
    story = ["Her design lead, Rohit, presented her onboarding flow as his own.", *PRIYA_SAID]
    assert invented("Your brother's team must have seen it too.", story)
    assert invented("When you moved to Berlin, things were different.", story)
    assert invented("Rohit taking your flow in front of everyone is a lot.", story) is None
    assert invented("It might help to ask your manager for a record of who built what.", story) is None
    assert invented("Your husband sounds supportive.", ["Her mother-in-law visits on Thursdays."]) is None


def test_keyword_stuffing_finds_words_without_sentences():
    assert keyword_stuffing("sad, lonely, hurt, overwhelmed, valid, breathe, journal, therapy")
    assert keyword_stuffing("Feelings valid. Support. Healing journey self-care mindfulness boundaries growth.")
    assert keyword_stuffing("Clapping along made sense in the moment; it doesn't mean you agreed.") is None


def test_word_salad_finds_their_words_rearranged_without_sense():
    story = ["Her lead presented her onboarding design at the all-hands, and the CEO praised his vision.", *PRIYA_SAID]
    assert word_salad("The onboarding lead clapped the design and the weekends presented the vision of the CEO.", story)
    assert word_salad("Design design, lead the lead, presented and presented the all-hands.", story)
    assert word_salad("The director's team was teaming up, and the current team was teaming up.", story)
    grounded = "Watching your lead present your design as his, and clapping along, sounds like it stung."
    assert word_salad(grounded, story) is None


def test_find_collects_every_family_with_its_evidence():
    found = find("My lead presented my design at the all-hands today as his and I", PRIYA_SAID)
    assert {f.family for f in found} >= {"fragment", "role_swap"}
    assert all(f.evidence for f in found)
    assert find("It sounds like you froze because the work was yours and nobody said so.", PRIYA_SAID) == []


def test_find_reports_only_the_families_asked_for():
    reply = "Your brother Tomas would tell you the same. Your brother Tomas would tell you the same."
    everything = {f.family for f in find(reply, ["I failed the exam again."])}
    assert {"loop", "invented"} <= everything
    only_loops = find(reply, ["I failed the exam again."], families=("loop",))
    assert [f.family for f in only_loops] == ["loop"]
    with pytest.raises(ValueError, match="unknown families"):
        find(reply, ["I failed the exam again."], families=("loops",))


def test_a_question_opening_as_an_earlier_one_of_the_dialogue_is_reasked():
    earlier = ["That sounds hard. What would you say to her?"]
    assert reasked_question("I see. What would you say to the school?", earlier) == "asks again: 'what would you say ...?'"
    assert reasked_question("What would make tomorrow easier?", earlier) is None  # another question
    assert reasked_question("I would say to her that it hurt.", earlier) is None  # not a question
    assert reasked_question("What would you say to her?", []) is None  # nothing asked before


def test_dialogue_hacking_metrics_counts_reasked_questions_within_each_dialogue_only():
    ask = ("How are you?", "What would you say to her?")
    other = ("Fine.", "Where does it hurt most?")
    metrics = dialogue_hacking_metrics([[ask, other, ask], [ask]])  # one re-ask among four replies
    assert metrics["hack_reask"] == pytest.approx(1 / 4)
    assert set(metrics) == {"hack_distinct2", "hack_repetition", "hack_echo", "hack_role_swap", "hack_fragment",
                            "hack_reask"}
    assert dialogue_hacking_metrics([]) == {}
