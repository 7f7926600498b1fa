"""Loading other scenario formats: EMPA's markdown case cards and SAGE/RLVER persona JSONL."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from fixture_paths import FIXTURES

from mapo.envs.dynamics import initial_vector
from mapo.envs.empathy.cards import CardError, EmpathyScenario, ScenarioCard
from mapo.envs.empathy.empa_markdown import SECTIONS, load_empa_card, load_empa_cards
from mapo.envs.emotion.persona import load_personas

EMPA = FIXTURES / "empa"
BAKER = EMPA / "night-baker.md"
TEACHER = EMPA / "hearing-teacher.md"
PERSONAS = FIXTURES / "personas.jsonl"


# -- EMPA markdown ----------------------------------------------------------------------


def test_empa_card_with_derived_indicators_and_script_stages():
    card = load_empa_card(BAKER)
    assert isinstance(card, ScenarioCard)
    assert card.id == "empa-night-baker" and card.category == "living"
    assert card.persona.name == "Mateo Silva" and card.persona.age == 35
    assert card.persona.occupation == "night-shift baker in Lisbon"
    # traits: the two personalities and the threshold bullets, not the threshold line itself
    assert card.persona.traits == [
        "cheerful and joking with customers",
        "needs long stretches of quiet to feel like himself",
        "distrusts quick reassurance",
        "notices at once when someone is reciting a script",
    ]
    assert card.persona.speaking_style == "no more than 30 words per message"
    # threshold High -> C2 = A2 = P2 = 3; priorities A > P > C -> 3, 2, 1 for X1 and X3
    assert card.indicators.model_dump() == {
        "C1": 1, "C2": 3, "C3": 1, "A1": 3, "A2": 3, "A3": 3, "P1": 2, "P2": 3, "P3": 2,
    }
    assert card.dominant_axis == "A"
    assert initial_vector(card.indicators.model_dump()) == (-11.0, -27.0, -22.0)
    # the four stages come from the companion script night-baker.json
    assert [s.title for s in card.stages] == [
        "The drilling", "Mistakes at the oven", "Not wanting to be the difficult one", "His grandfather's silence",
    ]
    assert card.opening_line == "The neighbours' renovation has kept me awake for three weeks"  # the topic
    assert card.growth_arc == "from swallowing irritation to calmly asking for what he needs"
    assert len(card.memories) == 2 and card.memories[0].startswith("Grew up in the flat above")
    assert card.situation.startswith("New neighbours started renovating their flat, and the drilling")
    need = "to have his exhaustion taken seriously and find a way to raise it without starting a feud"
    assert card.cues.understanding == card.cues.validation == card.cues.empowerment == [need]


def test_empa_card_with_listed_indicators_and_per_axis_lines():
    card = load_empa_card(TEACHER, category="health")
    assert card.category == "health"  # the card has no category line
    assert card.indicators.model_dump() == {
        "C1": 1, "C2": 1, "C3": 1, "A1": 2, "A2": 1, "A3": 2, "P1": 2, "P2": 2, "P3": 3,
    }
    assert card.dominant_axis == "P"
    assert card.opening_line.startswith("I answered the wrong question in class today.")
    assert card.cues.understanding == ["understanding that the hearing loss threatens her sense of competence"]
    assert card.cues.validation == ["acknowledging the embarrassment of mishearing a student in front of the class"]
    assert card.cues.empowerment == ["encouragement to book a hearing test and tell the head teacher"]
    # no script file: stages built from scenario and experience
    assert [s.title for s in card.stages] == ["What happened", "The background", "Where they stand now",
                                               "What they hope for"]
    assert card.stages[3].content == (
        "To see her current final-year class through their exams. "
        "To retire knowing she never stopped being good at her job."
    )
    assert card.memories == [
        "Her mother went deaf in her sixties and stopped going to church because she could not follow the sermons.",
        "In her first year of teaching a student called her the best explainer in the school.",
    ]


def test_empa_folder_loads_as_scenarios():
    scenarios = load_empa_cards(EMPA, category="health")
    assert [s.id for s in scenarios] == ["empa-hearing-teacher", "empa-night-baker"]
    assert scenarios[1].category == "living"  # the card's own category wins
    assert scenarios[0].initial_state == (-7.0, -14.0, -21.0)
    assert all(isinstance(s, EmpathyScenario) for s in scenarios)
    assert scenarios[0].dominant_axis == "P" and scenarios[0].opening_line == scenarios[0].card["opening_line"]


def test_empa_original_chinese_keys_are_understood(tmp_path: Path):
    # EMPA's own files use Chinese keys; the content here is ours
    text = BAKER.read_text(encoding="utf-8")
    for english, chinese in [("Name", "姓名"), ("Age", "年龄"), ("Occupation", "职业"), ("Category", "类别"),
                             ("Topic", "聊天话题"), ("Empathy need", "共情需求"),
                             ("Current priority of empathy needs", "当下共情需求优先级"),
                             ("Hidden growth line", "隐形成长主线"), ("Cause", "故事起因")]:
        text = text.replace(f"- {english}:", f"- {chinese}：")
    text = text.replace("Empathy threshold [High]", "共情阈值【高】")
    text = text.replace("1. Affective empathy", "1. 情感共情").replace("2. Proactive empathy", "2. 动机共情")
    text = text.replace("3. Cognitive empathy", "3. 认知共情")
    (tmp_path / "baker.md").write_text(text, encoding="utf-8")
    shutil.copy(EMPA / "night-baker.json", tmp_path / "baker.json")
    original, translated = load_empa_card(BAKER), load_empa_card(tmp_path / "baker.md")
    assert translated.indicators == original.indicators
    assert translated.persona.name == original.persona.name and translated.growth_arc == original.growth_arc


def test_empa_script_with_chinese_keys(tmp_path: Path):
    shutil.copy(TEACHER, tmp_path / "t.md")
    stages = {f"阶段{i}": {"标题": f"Stage {i}", "内容": f"What happens in part {i}."} for i in (2, 1, 4, 3)}
    (tmp_path / "t.json").write_text(json.dumps({"故事的经过": stages}, ensure_ascii=False), encoding="utf-8")
    card = load_empa_card(tmp_path / "t.md", category="health")
    assert [s.title for s in card.stages] == ["Stage 1", "Stage 2", "Stage 3", "Stage 4"]


def _broken(tmp_path: Path, source: Path, old: str, new: str, name: str = "card.md") -> Path:
    text = source.read_text(encoding="utf-8")
    assert old in text
    path = tmp_path / name
    path.write_text(text.replace(old, new, 1), encoding="utf-8")
    return path


@pytest.mark.parametrize("section", SECTIONS)
def test_empa_missing_section_names_file_and_section(tmp_path: Path, section):
    text = TEACHER.read_text(encoding="utf-8")
    text = re.sub(rf"<{section}>.*?</{section}>", "", text, flags=re.DOTALL)
    path = tmp_path / "card.md"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(CardError) as info:
        load_empa_card(path, category="health")
    assert str(info.value).startswith(str(path)) and f"missing section <{section}>" in str(info.value)


@pytest.mark.parametrize(
    "old, new, expected",
    [
        ("</experience>", "", r"card\.md:\d+: section <experience> is never closed"),
        ("- Age: 52", "- Age: fifty-two", r"card\.md:4: section <character_info>: age 'fifty-two' is not a number"),
        ("- Name: Ifeoma Nwosu\n", "", r"card\.md:\d+: section <character_info>: missing entry 'name'"),
        (", P3=3", "", r"card\.md:\d+: section <psychological_profile>: .*but not P3"),
        ("P3=3", "P3=5", r"card\.md:\d+: section <psychological_profile>: indicator P3 = 5"),
        ("- Hidden growth line:", "- Notes:", r"section <experience>: missing entry 'hidden growth line'"),
        ("- Past experiences:", "- Notes:", r"section <experience>: no past experiences"),
    ],
)
def test_empa_errors_name_file_and_line(tmp_path: Path, old, new, expected):
    path = _broken(tmp_path, TEACHER, old, new)
    with pytest.raises(CardError, match=expected) as info:
        load_empa_card(path, category="health")
    assert str(path) in str(info.value)


def test_empa_topic_is_the_opening_line_when_none_is_given(tmp_path: Path):
    path = _broken(tmp_path, TEACHER, "- Opening line: I answered", "- Remark: I answered")
    card = load_empa_card(path, category="health")
    assert card.opening_line == "My hearing is going and I am hiding it from my students"


def test_empa_derived_indicators_need_threshold_and_priorities(tmp_path: Path):
    path = _broken(tmp_path, BAKER, "Empathy threshold [High]", "Quite picky")
    with pytest.raises(CardError, match=r"section <empathy_threshold>: no threshold level"):
        load_empa_card(path)
    path = _broken(tmp_path, BAKER, "  3. Cognitive empathy\n", "", name="b.md")
    with pytest.raises(CardError, match=r"b\.md:\d+: section <psychological_profile>: priority must rank"):
        load_empa_card(path)


def test_empa_category_errors(tmp_path: Path):
    with pytest.raises(CardError, match=r"hearing-teacher\.md: no category"):
        load_empa_card(TEACHER)
    path = _broken(tmp_path, BAKER, "- Category: living", "- Category: sports")
    with pytest.raises(CardError, match=r"card\.md:\d+: section <character_info>: category 'sports'"):
        load_empa_card(path)


def test_empa_stated_dominant_axis_is_checked(tmp_path: Path):
    path = _broken(tmp_path, TEACHER, "- Indicators:", "- Dominant axis: cognitive\n- Indicators:")
    with pytest.raises(CardError, match=r"card\.md: field dominant_axis: 'C' is not the deepest axis"):
        load_empa_card(path, category="health")


def test_empa_stages_without_script_need_enough_material(tmp_path: Path):
    path = _broken(tmp_path, TEACHER, "- Current status:", "- Hobby:")
    with pytest.raises(CardError, match=r"cannot build the four story stages \(Where they stand now missing\)"):
        load_empa_card(path, category="health")


# -- persona JSONL ----------------------------------------------------------------------


def test_personas_load_with_initial_state_for_k1():
    scenarios = load_personas(PERSONAS)
    assert [s.id for s in scenarios] == ["persona-thesis-deadline", "personas-2", "7"]
    thesis, ferry, nurse = scenarios
    assert thesis.initial_state == (-65.0,) and thesis.title == "A lost thesis chapter"
    assert thesis.card["first_message"].startswith("My laptop died")
    assert thesis.card["hidden_intention"].startswith("He wants someone to tell him")
    # a structured profile, the "scene"/"task"/"emotion" spellings, and unknown keys kept aside
    assert ferry.card["persona"].splitlines()[0] == "age: 67"
    assert ferry.card["background"].startswith("His daughter wants him to move")
    assert ferry.card["hidden_intention"].startswith("He secretly wants to go")
    assert ferry.initial_state == (-69.0,) and ferry.card["extra"] == {"source": "handwritten"}
    # numeric id, "player", "hidden intention" with a space; no emotion: drawn from the id in 30-40
    assert nurse.card["persona"].startswith("A 29-year-old nurse")
    assert nurse.card["hidden_intention"].startswith("She needs to hear")
    (state,) = nurse.initial_state
    assert 30 <= state + 100 <= 40 and state == int(state) and nurse.card["initial_emotion_source"] == "seeded"
    assert thesis.card["initial_emotion_source"] == "persona"


def test_persona_start_seed_changes_only_seeded_starts():
    starts = {seed: [s.initial_state for s in load_personas(PERSONAS, start_seed=seed)] for seed in range(6)}
    assert all(v[:2] == [(-65.0,), (-69.0,)] for v in starts.values())
    assert len({v[2] for v in starts.values()}) > 1
    assert starts[0] == [s.initial_state for s in load_personas(PERSONAS)]


@pytest.mark.parametrize(
    "line, expected",
    [
        ('{"persona": "x", "background": "y"', r"bad\.jsonl:2: invalid JSON at column \d+"),
        ('["persona"]', r"bad\.jsonl:2: expected a JSON object, got list"),
        ('{"background": "y"}', r"bad\.jsonl:2: field 'persona' is missing"),
        ('{"persona": "x"}', r"bad\.jsonl:2: needs a background or a topic"),
        ('{"persona": "x", "topic": "t", "emotion": 140}', r"bad\.jsonl:2: field 'emotion' = 140 is outside 0-100"),
        ('{"persona": "x", "topic": "t", "initial_emotion": "calm"}',
         r"bad\.jsonl:2: field 'initial_emotion' must be a number"),
        ('{"persona": "x", "topic": "t", "id": "a"}', r"bad\.jsonl:2: field 'id': 'a' is already used on line 1"),
        ('{"persona": true, "topic": "t"}', r"bad\.jsonl:2: field 'persona' must be text, got bool"),
    ],
)
def test_persona_errors_name_file_and_line(tmp_path: Path, line, expected):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"id": "a", "persona": "p", "topic": "t"}\n' + line + "\n", encoding="utf-8")
    with pytest.raises(CardError, match=expected):
        load_personas(path)


def test_persona_file_errors(tmp_path: Path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n\n", encoding="utf-8")
    with pytest.raises(CardError, match="no personas"):
        load_personas(empty)
    with pytest.raises(CardError, match="cannot read"):
        load_personas(tmp_path / "missing.jsonl")
