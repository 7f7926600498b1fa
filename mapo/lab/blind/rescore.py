"""A blind set's dialogues scored again by today's judge, and how often it then sides with the rater.

The key of a blind set keeps each side's EPM-Q as its evaluation computed it, with the judge of
that day. To ask whether a changed judge agrees with the readers more often, each side of every
pair is *replayed*: the person's lines stay as the transcript has them (the simulated person is
not run again), and the environment's own `score_reply` judges each listener reply against the
history before it and moves the need state; EPM-Q is taken from that trajectory (`dynamics.epmq`), under the dynamics the evaluation ran with (its
env_options, read from eval-LABEL.json beside the key or from the key's eval folder). When the
dynamics end the dialogue (success or failure) before the transcript does, the replay stops
there, as the environment would have.

What is replayed is what the rater read: both sides cut to the same number of turns. Given a
side's full transcripts (`full`), that side is replayed whole instead, as its evaluation scored
it; with the judge of that day the replay reproduces the recorded EPM-Q.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mapo.core.types import Scenario
from mapo.envs.dynamics import epmq
from mapo.envs.empathy.cards import card_scenarios
from mapo.envs.empathy.env import EmpathyEnvironment
from mapo.evaluate.compare import read_result
from mapo.lab.blind.dialogue_sets import Dialogue, blind_pairs, pair_dialogue, transcript_dialogues
from mapo.lab.blind.pairs import SIDES
from mapo.lab.blind.score import epmq_agreement, read_ratings, win_share
from mapo.validation import compressed_or_plain, read_text


@dataclass
class Replayer:
    """The environment one evaluation ran (its options and scenario cards), to score dialogues again."""

    env: EmpathyEnvironment
    scenarios: dict[str, Scenario]

    @classmethod
    def of(cls, config: Mapping[str, Any], where: str) -> Replayer:
        if config.get("env", "empathy") != "empathy":
            raise ValueError(f"{where}: an evaluation of {config.get('env')!r}; replaying needs the empathy environment")
        env = EmpathyEnvironment(**dict(config.get("env_options") or {}))
        return cls(env, {s.id: s for s in card_scenarios(str(config.get("scenarios") or "test"))})

    def epmq(self, dialogue: Dialogue) -> tuple[float, int]:
        """(EPM-Q, turns scored) of `dialogue` under this environment's judge and dynamics."""
        if dialogue.scenario_id not in self.scenarios:
            raise ValueError(f"scenario {dialogue.scenario_id!r} is not among the evaluation's cards")
        if not dialogue.turns:
            raise ValueError(f"{dialogue.scenario_id}#{dialogue.sample_index}: no turns to score")
        self.env.reset(self.scenarios[dialogue.scenario_id])  # a fresh need state at the card's start
        state = self.env.state
        assert state is not None
        for turn, (_, reply) in enumerate(dialogue.turns):
            if self.env.score_reply(dialogue.history_before(turn), reply)[2].status is not None:
                break
        return epmq(state.record())["epmq"], state.turn


def eval_config(folder: Path, run: Mapping[str, Any]) -> dict[str, Any]:
    """The config of the evaluation behind one run of a blind set: eval-LABEL.json(.gz) beside the
    key (as the committed sets keep it), else the eval folder the key names."""
    beside = compressed_or_plain(folder, f"eval-{run['label']}.json")
    if beside.is_file():
        return json.loads(read_text(beside, "eval result", ValueError))["config"]
    if Path(run["path"]).exists():
        return read_result(run["path"])[1]["config"]
    raise FileNotFoundError(f"{folder}: no eval-{run['label']}.json(.gz) beside key.json, and {run['path']} is not here")


def _full_dialogues(path: Path) -> dict[tuple[str, int], Dialogue]:
    return {(d.scenario_id, d.sample_index): d for d in transcript_dialogues(path)}


def rescore_set(folder: Path, full: Mapping[str, Path] | None = None) -> dict[str, Any]:
    """EPM-Q agreement with the rater as recorded in the key and as today's judge gives it, with
    each run's mean EPM-Q both ways; `full` maps a run label to its evaluation's transcripts."""
    key, pairs = blind_pairs(folder)
    ratings = read_ratings(folder / "rater" / "ratings.csv", key["pairs_sha256"], [p["pair"] for p in pairs])
    replayers = {run["label"]: Replayer.of(eval_config(folder, run), str(folder)) for run in key["runs"]}
    whole = {label: _full_dialogues(Path(path)) for label, path in (full or {}).items()}
    rescored: dict[str, Any] = {}
    ended_early = 0
    for pair in pairs:
        entry = key["pairs"][pair["pair"]]
        scores = {}
        for side in SIDES:
            label, shown = entry[side], pair_dialogue(pair, side, str(folder))
            dialogue = whole[label].get((shown.scenario_id, shown.sample_index)) if label in whole else shown
            if dialogue is None or dialogue.turns[: len(shown.turns)] != shown.turns:
                raise ValueError(f"{full and full.get(label)}: no dialogue that begins as pair {pair['pair']}'s {label} side")
            scores[side], scored = replayers[label].epmq(dialogue)
            ended_early += scored < len(dialogue.turns)
        rescored[pair["pair"]] = {**entry, "epmq": scores}
    means = {}
    for run in key["runs"]:
        label = run["label"]
        sides = [(p, s) for p in rescored for s in SIDES if key["pairs"][p][s] == label]
        means[label] = {name: sum(pairs_[p]["epmq"][s] for p, s in sides) / len(sides)
                        for name, pairs_ in (("recorded", key["pairs"]), ("rescored", rescored))}
    return {
        "set": str(folder),
        "dialogues": "full for " + ", ".join(sorted(whole)) if whole else "as the rater read them",
        "recorded": epmq_agreement(key, ratings),
        "rescored": epmq_agreement({**key, "pairs": rescored}, ratings),
        "mean_epmq": means,
        "ended_early": ended_early,
    }


def pooled(results: list[dict[str, Any]], which: str) -> dict[str, Any]:
    """The `which` ("recorded" or "rescored") agreement of several sets, pooled over their decisive pairs."""
    computed = [r[which] for r in results if r[which].get("computed")]
    return {"sets": len(computed), **win_share(sum(a["wins"] for a in computed), sum(a["decisive"] for a in computed))}
