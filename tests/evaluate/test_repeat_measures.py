"""Issue 59's measures on kept dialogues: re-asks by meaning (`mapo.lab.blind.reask`) and the judge's
agreement with a reader once today's judge scores a blind set again (`mapo.lab.blind.rescore`).

Every dialogue here is written for these tests, on a real card of the test split; the blind set
is written by `write_blind` from two eval folders in `mapo eval`'s format; the judge and the
MiniLM encoder are the real ones."""

from __future__ import annotations

import json

import pytest

from mapo.evaluate.validity import fallback_verdict
from mapo.lab.blind.dialogue_sets import Dialogue, blind_sides, dialogue_sets
from mapo.lab.blind.pairs import write_blind
from mapo.lab.blind.reask import reply_repeats, repeat_rates
from mapo.lab.blind.rescore import pooled, rescore_set

CARD = "living-zofia-the-shared-flat"
PERSON = [
    "I have to decide whether to buy my ex out of the flat. The numbers work. I keep putting it off.",
    "The bank says yes, my sister says yes. So why can't I sign?",
    "We built the kitchen together. I can't picture changing any of it.",
]
ASKED = "You have run the numbers three times and they still do not settle it. What would it mean to you to stay in that flat on your own?"
# A listener that asks one question again and again, in new words each time.
LOOPING = [
    "What would it mean to you to stay in that flat on your own?",
    "How would it feel to live in that flat on your own?",
    "If you stayed in the flat on your own, what would that mean to you?",
]
# A listener that moves on: a new reflection, a validation, a suggestion on their terms.
MOVING_ON = [
    "The numbers work and still you keep putting it off, so maybe this was never only about money. What do you feel when you picture signing?",
    "Everyone around you says yes, yet something in you holds back. It makes sense to hesitate when the flat holds so much of your marriage.",
    "That kitchen you built together carries years of your life. You could give yourself time to decide what stays, on your own terms.",
]


def test_a_question_asked_again_in_new_words_counts_and_a_new_question_does_not():
    again = reply_repeats("The maths is fine, and still you wait. How would it feel to live in that flat on your own?", [ASKED])
    assert again.by_meaning and "question" in again.kinds
    assert not again.by_prefix  # the monitor's four-word prefix misses it
    new = reply_repeats("You knocked that wall down together. Which room do you picture first when you think of changing something?", [ASKED])
    assert not new.by_meaning and not new.by_prefix and not new.kinds
    same_words = reply_repeats("The maths is fine, and still you wait. What would it mean to you to stay in that flat on your own?", [ASKED])
    assert same_words.by_meaning and same_words.by_prefix
    assert not reply_repeats(ASKED, []).kinds  # a first reply repeats nothing


def _eval_folder(root, label, replies, epmq):
    """A `mapo eval` folder of three dialogues on CARD, each the PERSON's lines and `replies`."""
    folder = root / label
    folder.mkdir()
    records = [{"scenario_id": CARD, "sample_index": sample, "turns": [{"turn": n + 1, "user": user, "response": reply}
                for n, (user, reply) in enumerate(zip(PERSON, replies))]} for sample in range(3)]
    summary = {"dialogues": 3, "turns_total": 9, "fallback_turns": 0, "fallbacks": {}}
    summary["validity"] = fallback_verdict(summary)
    data = {"config": {"policy": label, "seed": 0, "env": "empathy", "env_options": {"max_turns": 13}, "scenarios": "test"},
            "summary": summary,
            "scenarios": [{"scenario_id": CARD, "samples": [{"sample_index": s, "epmq": {"epmq": epmq}} for s in range(3)]}]}
    (folder / "eval.json").write_text(json.dumps(data))
    (folder / "transcripts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return folder


def _blind_set(tmp_path):
    # The judge of the day the evals were made (here: the recorded EPM-Q) preferred the looping listener.
    grpo = _eval_folder(tmp_path, "grpo", MOVING_ON, epmq=10.0)
    mapo = _eval_folder(tmp_path, "mapo", LOOPING, epmq=90.0)
    write_blind((grpo, mapo), tmp_path / "set", seed=1)
    return tmp_path / "set", grpo, mapo


def test_each_side_of_a_blind_set_goes_to_the_run_its_key_names(tmp_path):
    folder, grpo, _ = _blind_set(tmp_path)
    key = json.loads((folder / "key.json").read_text())
    assert {entry["A"] for entry in key["pairs"].values()} == {"grpo", "mapo"}  # both orders occur
    sides = blind_sides(folder)
    assert sorted(sides) == ["grpo", "mapo"]
    assert [[r for _, r in d.turns] for d in sides["mapo"]] == [LOOPING] * 3
    assert [[u for u, _ in d.turns] for d in sides["grpo"]] == [PERSON] * 3
    rates = {label: repeat_rates(d) for label, d in sides.items()}
    assert rates["mapo"]["counts"]["reask_meaning"] == 6  # replies 2 and 3 of each dialogue
    assert rates["mapo"]["reask_meaning_only"] > 0  # asked again in words the prefix test misses
    assert rates["grpo"]["counts"]["reask_meaning"] == 0 and rates["grpo"]["replies"] == 9
    # an eval folder's transcripts read the same, under the folder's name
    assert [d.turns for d in dialogue_sets(grpo)["grpo"]] == [d.turns for d in sides["grpo"]]
    assert Dialogue(CARD, 0, tuple(zip(PERSON, LOOPING))).history_before(1) == [
        {"role": "user", "content": PERSON[0]}, {"role": "assistant", "content": LOOPING[0]},
        {"role": "user", "content": PERSON[1]}]


def test_agreement_after_rescoring_counts_ties_as_not_decisive(tmp_path):
    folder, grpo, mapo = _blind_set(tmp_path)
    key = json.loads((folder / "key.json").read_text())
    pairs = sorted(key["pairs"])
    ratings = folder / "rater" / "ratings.csv"
    lines = [line for line in ratings.read_text().splitlines() if line.startswith("#") or line.startswith("pair,")]
    # The reader prefers the listener who moves on, except one pair called a tie.
    for pair in pairs:
        grpo_side = "A" if key["pairs"][pair]["A"] == "grpo" else "B"
        lines.append(f"{pair},{'tie' if pair == pairs[0] else grpo_side},,,")
    ratings.write_text("\n".join(lines) + "\n")
    # the set keeps each run's eval.json beside its key, as the committed sets do
    for label, run in (("grpo", grpo), ("mapo", mapo)):
        (folder / f"eval-{label}.json").write_text((run / "eval.json").read_text())
    result = rescore_set(folder)
    assert (result["recorded"]["wins"], result["recorded"]["decisive"]) == (0, 2)  # the tie is left out
    assert (result["rescored"]["wins"], result["rescored"]["decisive"]) == (2, 2)
    assert result["mean_epmq"]["grpo"]["rescored"] > result["mean_epmq"]["mapo"]["rescored"]
    assert result["mean_epmq"]["mapo"]["recorded"] == 90.0
    both = pooled([result, result], "rescored")
    assert (both["wins"], both["decisive"], both["sets"]) == (4, 4, 2)
    # the full transcripts replay the same here (nothing was cut), and must begin as the pairs do
    assert rescore_set(folder, {"mapo": mapo})["rescored"]["wins"] == 2
    with pytest.raises(ValueError, match="no dialogue that begins as pair p1's mapo side"):
        rescore_set(folder, {"mapo": grpo})


def test_a_replay_gives_the_epmq_the_environment_gave_the_dialogue_live():
    from mapo.envs.dynamics import epmq
    from mapo.envs.empathy.cards import bundled_scenarios
    from mapo.envs.empathy.env import EmpathyEnvironment
    from mapo.lab.blind.rescore import Replayer

    scenario = next(s for s in bundled_scenarios("test") if s.id == CARD)
    env = EmpathyEnvironment(max_turns=13)
    person, turns = env.reset(scenario, seed=0), []
    for reply in MOVING_ON + LOOPING:  # the simulated person answers live here; the replay keeps its lines
        turns.append((person, reply))
        step = env.step(reply)
        if step.done:
            break
        person = step.user_message
    live = epmq(env.record())["epmq"]
    replayed, scored = Replayer.of({"env": "empathy", "env_options": {"max_turns": 13}, "scenarios": "test"}, "test").epmq(
        Dialogue(CARD, 0, tuple(turns)))
    assert scored == len(turns) and replayed == live
