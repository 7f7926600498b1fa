"""The markdown structure of an EMPA case card: tagged sections of `- key: value` entries.

A section is `<name> ... </name>`; an entry is `- key: value`, optionally followed by an
indented or numbered sub-list. Keys are matched after normalising (case, spaces,
underscores, markup) against `KEY_ALIASES`, English first and EMPA's own Chinese keys
after. `mapo.envs.empathy.empa_markdown` maps the sections onto a `ScenarioCard`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from mapo.envs.empathy.cards import CardError

SECTIONS = ("character_info", "empathy_threshold", "psychological_profile", "experience", "scenario")

@dataclass
class Entry:
    key: str  # as written
    value: str
    line: int  # 1-based line in the file
    items: list[str] = field(default_factory=list)  # sub-list lines under the key

    def text(self) -> str:
        """The value and its sub-items as one string."""
        return " ".join([self.value, *self.items]).strip()


@dataclass
class Section:
    name: str
    line: int  # line of the opening tag
    entries: list[Entry]
    free_lines: list[tuple[int, str]]  # lines that are not `- key: value` entries or their sub-items


def norm_key(key: str) -> str:
    return re.sub(r"[\s_\-*`]+", "", key).lower()


# Normalised key -> canonical name. English first, EMPA's Chinese keys after.
KEY_ALIASES: dict[str, tuple[str, ...]] = {
    "name": ("name", "姓名"),
    "gender": ("gender", "sex", "性别"),
    "age": ("age", "年龄"),
    "occupation": ("occupation", "job", "profession", "职业"),
    "personality": ("socialpersonality", "innerpersonality", "corepersonality", "personality", "traits",
                    "社交性格", "内核性格", "性格"),
    "style": ("outputformat", "speakingstyle", "chatprinciple", "chatprinciples", "chatstrategy",
              "输出格式", "说话风格", "聊天原则", "聊天策略"),
    "activity": ("currentactivity", "currentbehaviour", "currentbehavior", "当前行为"),
    "category": ("category", "类别", "场景类别"),
    "topic": ("topic", "chattopic", "聊天话题"),
    "need": ("empathyneed", "empathyneeds", "共情需求"),
    "priority": ("priority", "priorities", "empathypriority", "currentpriorityofempathyneeds",
                 "currentempathypriority", "当下共情需求优先级", "共情需求优先级"),
    "dominant_axis": ("dominantaxis", "主导轴"),
    "indicators": ("indicators", "indicatorlevels", "指标"),
    "memory": ("childhood", "adolescence", "youth", "adulthood", "pastexperience", "pastexperiences",
               "memory", "memories", "童年", "少年", "青年", "成年", "过往经历"),
    "growth": ("hiddengrowthline", "hiddengrowtharc", "growtharc", "growthline",
               "隐形成长主线", "隐形成长主线脉络"),
    "status": ("currentstatus", "currentsituation", "角色现状"),
    "goal": ("lifegoal", "人生目标"),
    "vision": ("lifevision", "人生愿景"),
    "cause": ("cause", "storycause", "causeofthestory", "故事起因"),
    "background": ("background", "backgroundsetting", "背景设定"),
    "opening": ("openingline", "firstmessage", "opening", "开场白"),
}
CANONICAL = {alias: name for name, aliases in KEY_ALIASES.items() for alias in aliases}

# Words naming each kind of empathy (EMPA calls the proactive axis "motivational", 动机).
AXIS_WORDS = {
    "C": ("cognitive", "认知"),
    "A": ("affective", "emotional", "情感"),
    "P": ("proactive", "motivational", "动机"),
}
LEVEL_WORDS = {"high": 3, "高": 3, "mid": 2, "medium": 2, "middle": 2, "中": 2, "low": 1, "低": 1}
LEVEL_RE = r"(high|medium|middle|mid|low|高|中|低)"

ENTRY = re.compile(r"^\s{0,1}[-*]\s+(?P<key>[^:：]{1,60}?)\s*[:：]\s*(?P<value>.*)$")
SUB_ITEM = re.compile(r"^(?:\s{2,}[-*]\s+|\s*\d+[.)、]\s*|\s{2,})(?P<text>\S.*)$")
THRESHOLD = re.compile(rf"(?:threshold|阈值)\W*{LEVEL_RE}", re.IGNORECASE)
INDICATOR_RE = re.compile(r"\b([CAP][123])\s*[=:：]\s*(-?\d+)\b", re.IGNORECASE)


def prose(*parts: str) -> str:
    """Join list fragments into sentences: each capitalised and ended with a full stop if it has none."""
    out = []
    for part in (p.strip() for p in parts):
        if part:
            part = part[0].upper() + part[1:]
            out.append(part if part[-1] in ".!?…。！？\"'" else part + ".")
    return " ".join(out)


def axis_of(text: str) -> str | None:
    low = text.lower()
    hits = [axis for axis, words in AXIS_WORDS.items() if any(w in low for w in words)]
    return hits[0] if len(hits) == 1 else None


def parse_section(name: str, body: str, first_line: int) -> Section:
    entries: list[Entry] = []
    free: list[tuple[int, str]] = []
    for offset, raw in enumerate(body.split("\n")):
        line_no = first_line + offset
        if not raw.strip() or raw.lstrip().startswith("#"):
            continue
        match = ENTRY.match(raw)
        if match:
            entries.append(Entry(match["key"].strip(), match["value"].strip(), line_no))
            continue
        sub = SUB_ITEM.match(raw)
        if sub and entries and (raw.startswith((" ", "\t")) or re.match(r"^\d", raw)):
            entries[-1].items.append(sub["text"].strip())
            continue
        free.append((line_no, raw.strip().lstrip("-* ").strip()))
    return Section(name, first_line, entries, free)


def split_sections(path: Path, text: str) -> dict[str, Section]:
    sections: dict[str, Section] = {}
    for name in SECTIONS:
        open_match = re.search(rf"<{name}>", text)
        if open_match is None:
            needed = ", ".join(f"<{s}>" for s in SECTIONS)
            raise CardError(f"{path}: missing section <{name}> (an EMPA card needs {needed})")
        close = text.find(f"</{name}>", open_match.end())
        open_line = text.count("\n", 0, open_match.start()) + 1
        if close < 0:
            raise CardError(f"{path}:{open_line}: section <{name}> is never closed (no </{name}>)")
        body = text[open_match.end() : close]
        sections[name] = parse_section(name, body, open_line)
    return sections
