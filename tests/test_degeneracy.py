"""mapo.degeneracy: the detectors of degenerate replies and the reward-hacking monitor."""

from __future__ import annotations

import pytest

from mapo.degeneracy import hacking_metrics

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
