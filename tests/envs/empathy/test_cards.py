"""The bundled scenario cards (split, balance, difficulty, distinctness) and card validation errors."""

from __future__ import annotations

import copy
import statistics
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import yaml

from mapo.core.types import AXES, Scenario
from mapo.envs.dynamics import initial_vector
from mapo.envs.empathy.cards import (
    CATEGORIES,
    CardError,
    EmpathyScenario,
    bundled_scenario_dir,
    bundled_scenarios,
    load_card,
    load_scenarios,
)

EXAMPLE_CARD = bundled_scenario_dir() / "test" / "leisure-noor-dance-class.yaml"


def _difficulty(scenario) -> float:
    return float(np.linalg.norm(scenario.initial_state))


@pytest.fixture(scope="module")
def splits():
    return {"train": bundled_scenarios("train"), "test": bundled_scenarios("test")}


def test_all_36_cards_load_with_a_24_12_split(splits):
    assert len(splits["train"]) == 24
    assert len(splits["test"]) == 12
    assert len(bundled_scenarios("all")) == 36


def test_ids_are_unique_and_match_file_names():
    files = sorted(bundled_scenario_dir().rglob("*.yaml"))
    assert len(files) == 36
    ids = [load_card(f).id for f in files]
    assert len(set(ids)) == 36
    assert all(f.stem == card_id for f, card_id in zip(files, ids))


@pytest.mark.parametrize("split, per_category, per_axis", [("train", 4, 8), ("test", 2, 4)])
def test_split_is_balanced_by_category_and_axis(splits, split, per_category, per_axis):
    scenarios = splits[split]
    assert Counter(s.category for s in scenarios) == {c: per_category for c in CATEGORIES}
    assert Counter(s.dominant_axis for s in scenarios) == {a: per_axis for a in AXES}


def test_every_category_has_each_axis_twice_overall(splits):
    pairs = Counter((s.category, s.dominant_axis) for s in splits["train"] + splits["test"])
    assert pairs == {(c, a): 2 for c in CATEGORIES for a in AXES}


def test_dominant_axis_is_the_deepest_axis_of_p0(splits):
    for scenario in splits["train"] + splits["test"]:
        p0 = initial_vector(scenario.indicators)
        assert scenario.initial_state == tuple(p0)
        assert min(p0) == p0[AXES.index(scenario.dominant_axis)], scenario.id


@pytest.mark.parametrize("split", ["train", "test"])
def test_each_split_spans_mild_to_severe(splits, split):
    d = sorted(_difficulty(s) for s in splits[split])
    assert d[0] <= 12.0, "no mild card"
    assert d[-1] >= 30.0, "no severe card"
    assert any(13.0 <= x < 25.0 for x in d), "no moderate card"
    assert any(25.0 <= x < 30.0 for x in d), "no high card"
    assert sum(x >= 30.0 for x in d) >= 2


def test_train_and_test_difficulty_are_similar(splits):
    train = [_difficulty(s) for s in splits["train"]]
    test = [_difficulty(s) for s in splits["test"]]
    assert abs(statistics.median(train) - statistics.median(test)) <= 5.0
    assert abs(min(train) - min(test)) <= 3.0
    assert abs(max(train) - max(test)) <= 3.0


def test_cards_are_rich_and_hand_written():
    cards = [load_card(f) for f in sorted(bundled_scenario_dir().rglob("*.yaml"))]
    for card in cards:
        assert 2 <= len(card.memories) <= 4, card.id
        for cues in (card.cues.understanding, card.cues.validation, card.cues.empowerment):
            assert 2 <= len(cues) <= 4, card.id
        assert len({s.title for s in card.stages}) == 4, card.id
        assert len(card.situation.split()) >= 30, card.id
    # nothing repeated across cards: names, opening lines, stage titles, cues, memories
    for texts in (
        [c.persona.name for c in cards],
        [c.opening_line for c in cards],
        [c.growth_arc for c in cards],
        [s.title for c in cards for s in c.stages],
        [s.content for c in cards for s in c.stages],
        [m for c in cards for m in c.memories],
        [q for c in cards for q in c.cues.understanding + c.cues.validation + c.cues.empowerment],
    ):
        repeated = [t for t, n in Counter(texts).items() if n > 1]
        assert not repeated, repeated
    ages = [c.persona.age for c in cards]
    assert min(ages) < 20 and max(ages) > 70


def test_to_scenario_keeps_the_whole_card():
    card = load_card(EXAMPLE_CARD)
    scenario = card.to_scenario()
    assert isinstance(scenario, EmpathyScenario) and isinstance(scenario, Scenario)
    assert scenario.id == "leisure-noor-dance-class"
    assert scenario.opening_line == card.opening_line
    assert scenario.dominant_axis == card.dominant_axis == "P"
    assert scenario.indicators == card.indicators.model_dump()
    assert scenario.initial_state == (0.0, -5.0, -9.0)
    assert scenario.card["cues"]["empowerment"] == card.cues.empowerment
    assert scenario.card["growth_arc"] == card.growth_arc


# -- invalid cards ---------------------------------------------------------------------


def _example() -> dict:
    return yaml.safe_load(EXAMPLE_CARD.read_text(encoding="utf-8"))


def _drop_growth_arc(d):
    del d["growth_arc"]


def _set(path: str, value):
    def mutate(d):
        *parents, last = path.split(".")
        for key in parents:
            d = d[key]
        d[last] = value

    return mutate


def _three_stages(d):
    d["stages"] = d["stages"][:3]


def _extra_field(d):
    d["mood"] = "sad"


def _extra_persona_field(d):
    d["persona"]["nickname"] = "Nuni"


def _blank_trait(d):
    d["persona"]["traits"].append("   ")


INVALID = [
    ("missing-field", _drop_growth_arc, ["growth_arc", "Field required"]),
    ("wrong-category", _set("category", "sports"), ["field category", "career"]),
    ("indicator-4", _set("indicators.A2", 4), ["field indicators.A2", "less than or equal to 3"]),
    ("wrong-axis", _set("dominant_axis", "A"), ["field dominant_axis", "not the deepest axis"]),
    ("unknown-axis", _set("dominant_axis", "X"), ["field dominant_axis"]),
    ("extra-field", _extra_field, ["field mood", "Extra inputs are not permitted"]),
    ("extra-nested-field", _extra_persona_field, ["field persona.nickname", "Extra inputs"]),
    ("three-stages", _three_stages, ["field stages", "at least 4"]),
    ("blank-trait", _blank_trait, ["field persona.traits.3"]),
    ("age-text", _set("persona.age", "forty"), ["field persona.age"]),
    ("no-need", _set("indicators", {k: 0 for k in ("C1", "C2", "C3", "A1", "A2", "A3", "P1", "P2", "P3")}),
     ["field indicators", "no need"]),
    ("bad-id", _set("id", "Has Spaces"), ["field id"]),
]


@pytest.mark.parametrize("name, mutate, expected", INVALID, ids=[i[0] for i in INVALID])
def test_invalid_card_names_file_and_field(tmp_path: Path, name, mutate, expected):
    data = _example()
    mutate(data)
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    with pytest.raises(CardError) as info:
        load_card(path)
    message = str(info.value)
    assert message.startswith(str(path))
    for part in expected:
        assert part in message


def test_invalid_card_stops_folder_loading(tmp_path: Path):
    good = _example()
    bad = copy.deepcopy(good)
    bad["id"] = "broken"
    bad["indicators"]["C1"] = 4
    (tmp_path / "a-good.yaml").write_text(yaml.safe_dump(good), encoding="utf-8")
    (tmp_path / "b-broken.yaml").write_text(yaml.safe_dump(bad), encoding="utf-8")
    with pytest.raises(CardError, match=r"b-broken\.yaml: field indicators\.C1"):
        load_scenarios(tmp_path)


def test_bad_yaml_names_file_and_line(tmp_path: Path):
    path = tmp_path / "bad.yaml"
    path.write_text("id: x\ntitle: [unclosed\ncategory: career\n", encoding="utf-8")
    with pytest.raises(CardError) as info:
        load_card(path)
    assert str(info.value).startswith(f"{path}: invalid YAML at line")


def test_card_that_is_not_a_mapping(tmp_path: Path):
    path = tmp_path / "list.yaml"
    path.write_text("- just\n- a list\n", encoding="utf-8")
    with pytest.raises(CardError, match="must be a YAML mapping"):
        load_card(path)


def test_duplicate_id_in_folder_names_id_and_both_files(tmp_path: Path):
    data = _example()
    (tmp_path / "first.yaml").write_text(yaml.safe_dump(data), encoding="utf-8")
    sub = tmp_path / "more"
    sub.mkdir()
    (sub / "second.yml").write_text(yaml.safe_dump(data), encoding="utf-8")
    with pytest.raises(CardError) as info:
        load_scenarios(tmp_path)
    message = str(info.value)
    assert "'leisure-noor-dance-class'" in message
    assert "first.yaml" in message and "second.yml" in message


def test_folder_errors(tmp_path: Path):
    with pytest.raises(CardError, match="no scenario card files"):
        load_scenarios(tmp_path)
    with pytest.raises(CardError, match="no such scenario card folder"):
        load_scenarios(tmp_path / "missing")
    with pytest.raises(ValueError, match="unknown split"):
        bundled_scenarios("validation")  # type: ignore[arg-type]


def test_single_file_loads_as_a_folder_of_one():
    (scenario,) = load_scenarios(EXAMPLE_CARD)
    assert scenario.id == "leisure-noor-dance-class"
