"""The offline judge reads a feeling idiom as what it means: "it's a shame" is "a pity" and names
no shame, so it does not pay the resonance with an unstated deep feeling (A_prog 2) that naming
shame earns. Issue 59's re-ask study found MAPO paid for the idiom in 17 held-out replies at seed 0.
Replies written for this test; real MiniLM encoder, nothing mocked.
"""

from __future__ import annotations

import pytest

from mapo.envs.empathy.offline.judge import OfflineJudge
from mapo.envs.empathy.offline.judge_lexicon import read_idioms

TOMAS = "career-tomas-print-shop-layoff"
TOMAS_SAID = [
    "Ha, so. Twenty-eight years and they needed eleven minutes. My wife says I should enjoy the holiday. Some holiday.",
    "A boy half my age read from a sheet. Thanked me for my service, like I was a soldier. At least it was quick, eh.",
    "I drove to the industrial estate at dawn twice. Just sat in the car outside the gates. Don't tell my mother.",
]
IDIOMS = [
    "Sitting in the car outside the gates at dawn is a shame, and keeping it from your mother is a shame for both of you.",
    "Twenty-eight years ended in eleven minutes, and it's a shame that you still drive to the gates at dawn.",
    "What happened in that meeting is such a shame for you, and the car at the gates is a real shame too.",
]
THE_FEELING = ("Driving to the gates at dawn and keeping it from your mother, maybe there's some shame in it too, "
               "as if losing the job says something about who you are.")


@pytest.mark.parametrize(
    "text, read",
    [
        ("It's a shame they let you go.", "It's a pity they let you go."),
        ("What a shame, and such a shame for both of you.", "What a pity, and such a pity for both of you."),
        ("That's a real shame.", "That's a real pity."),
        ("Maybe there's some shame in it.", "Maybe there's some shame in it."),  # the feeling takes no article
        ("The shame of it stays with you.", "The shame of it stays with you."),
    ],
)
def test_the_idiom_is_read_as_a_pity_and_the_feeling_is_left_alone(text, read):
    assert read_idioms(text) == read


@pytest.mark.parametrize("reply", IDIOMS)
def test_the_idiom_earns_no_deep_feeling(judge_context, reply):
    got = OfflineJudge().score(judge_context(TOMAS, TOMAS_SAID, []), reply)
    assert got.levels["A_prog"] < 2, (got.levels, got.evidence)


def test_naming_the_feeling_they_have_not_named_still_earns_resonance(judge_context):
    got = OfflineJudge().score(judge_context(TOMAS, TOMAS_SAID, []), THE_FEELING)
    assert got.levels["A_prog"] == 2, (got.levels, got.evidence)
