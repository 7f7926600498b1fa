"""LLM-backed judge, actor and director for the empathy environment.

Each role talks to any chat backend (`mapo.backends`: an OpenAI-compatible server
or anything with `chat(messages, **overrides) -> str`) and implements the
protocols of `roles.py`, so the environment can mix LLM and offline roles.

- `LLMJudge` sees the persona's hidden profile (incl. growth arc and cues) and the
  whole dialogue but scores only the latest assistant turn: six levels, each with
  a piece of evidence quoted from that turn, as JSON validated by pydantic. One
  repair attempt, then the neutral levels with `Judgement.fallback = True`, logged.
- `LLMDirector` decides the next user move as JSON; the code keeps the story in
  order and refuses to end before the minimum turns.
- `LLMActor` speaks as the persona, in short turns, and never repeats a line of its own.

Every role keeps `counters` (calls, repairs, fallbacks, ...) for the run's logs.
Judge and director take `json_format` to have servers that support it constrain
decoding to their JSON schema (see `mapo.backends.json_output.response_format`).
The prompts are ours, in English, below.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import fields
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationInfo, model_validator

from mapo.backends.json_output import ChatClient, request_json, response_format
from mapo.envs.empathy.roles import LEVEL_KEYS, NEUTRAL_LEVELS, Direction, DirectorAction, Judgement
from mapo.text import sentences
from mapo.types import AXES

if TYPE_CHECKING:
    from mapo.envs.dynamics import NeedState
    from mapo.envs.empathy.cards import ScenarioCard

log = logging.getLogger(__name__)

AXIS_NAMES = {"C": "cognitive (being understood)", "A": "affective (feelings met)", "P": "proactive (able to act)"}

# -- prompts ------------------------------------------------------------------

JUDGE_SYSTEM = """\
You rate one reply of a support assistant in an emotional-support conversation.
You know the hidden profile of the person seeking support: their story, what would
help them on each axis, and how they could grow. The assistant does not know it.

Rate ONLY the latest assistant reply. Earlier turns are context: use them to spot
repetition and to tell whether the reply fits where the person is now.

Three axes of need: C = cognitive (being understood), A = affective (feelings
acknowledged), P = proactive (able to act on their own values).

Progress levels, 0, 1 or 2:
- C_prog 1: reflects or clarifies the actual situation with its specifics (an
  accurate paraphrase, a precise question). 2: a genuine reframe that fits the facts.
- A_prog 1: validates a feeling the person stated, tied to its cause. 2: resonates
  with a feeling they have not named but that their story supports.
- P_prog 1: affirms a real strength or offers one concrete, fitting suggestion.
  2: genuine empowerment: recognises their agency and values and hands the choice back.
Harm levels, 0, -1 or -2 (-2 = clearly harmful):
- C_neg: misreads the situation, generic or templated understanding, lecturing.
- A_neg: invalidates, minimises or performs empathy without meaning it.
- P_neg: premature or unwanted advice, pushing, taking the choice away.
Repeating earlier assistant replies is harm on the axis it fails. Surface form
never beats substance: warm words that miss the person earn nothing.
Incoherent text is never progress, however many of the person's own words it
reuses: word salad, a phrase or sentence said again within the reply, the
assistant speaking as the person or about its own life, a story about something
else, people or events the person never mentioned presented as theirs, a reply
that breaks off mid-sentence, strings of platitudes, or feeling and advice words
without real sentences. Give such a reply 0 on every progress level, C_neg -1 when
it misreads or ignores their story, and A_neg -1 for repetition or empathy that is
performed rather than meant.

Reply with one JSON object and nothing else, exactly these six keys:
{"C_prog": {"level": 0, "evidence": ""}, "A_prog": {"level": 0, "evidence": ""},
 "P_prog": {"level": 0, "evidence": ""}, "C_neg": {"level": 0, "evidence": ""},
 "A_neg": {"level": 0, "evidence": ""}, "P_neg": {"level": 0, "evidence": ""}}
For every level that is not 0, "evidence" must be words copied exactly from the
latest assistant reply that justify it. For a level of 0 leave evidence empty."""

JUDGE_USER = """\
PERSON'S HIDDEN PROFILE
{profile}

WHERE THEY STAND NOW (more negative = further from being helped)
{standing}

CONVERSATION SO FAR
{transcript}

LATEST ASSISTANT REPLY (the only one to rate)
<<<
{response}
>>>

Give the JSON object now."""

DIRECTOR_SYSTEM = """\
You direct a simulated person in an emotional-support conversation so that it
unfolds like a real one. Each turn you choose what the person does next:
- "continue": respond naturally to the assistant's last reply.
- "reveal_stage": bring in the next part of their story.
- "reveal_memory": let one of their memories come up.
- "steer": push the conversation toward the axis where their need is deepest.
- "turning_point": a moment where their view shifts, for better or worse,
  depending on how well they have been helped.
- "confused": the assistant's last reply made no sense (garbled, repeating
  itself, cut off mid-sentence, about itself or about something else); the
  person says they are lost or pulls back. Never reveal a stage or a memory
  right after such a reply: incoherent text is no progress.
- "end": close the conversation (only once it has run its course).
Reveal the story gradually, one stage at a time, not all at once. If the
assistant keeps missing the person, show it through the person (they pull back,
push back, or repeat the real problem in new words).

Reply with one JSON object and nothing else:
{"action": "continue", "stage": null, "memory": null, "focus_axis": "A", "note": "one sentence of guidance for the actor"}
"stage" is the number of the stage to reveal (with reveal_stage), "memory" the
number of the memory (with reveal_memory), "focus_axis" one of "C", "A", "P"."""

DIRECTOR_USER = """\
PERSON'S PROFILE
{profile}

STORY STAGES (reveal in order)
{stages}

MEMORIES
{memories}

STATE AFTER TURN {turn}
{standing}
Last reply's effect: {effect}
{ending_rule}

CONVERSATION SO FAR
{transcript}

Give the JSON object now."""

ACTOR_SYSTEM = """\
You are {name}, {age}, {occupation}. You are talking with a support assistant
about something weighing on you. Stay in character: speak in the first person, as
yourself, never as an assistant, and never mention being an AI or a simulation.

Who you are: {traits}.
How you talk: {style}
What happened: {situation}
{story}
How the assistant's last reply landed: {landing}
What to do in this message: {instruction}

Rules: write only your next message, one to three short sentences, plain text, no
name label, no quotation marks, no stage directions. Say something new: do not
repeat anything you have already said, in particular none of these lines:
{own_lines}"""

ACTOR_RETRY = (
    "That repeats something you already said. Write a different message that moves the conversation on. "
    "Only the message."
)

ACTOR_INSTRUCTIONS = {
    "continue": "Respond naturally to what the assistant just said.",
    "reveal_stage": "Bring in this part of your story (told here from outside; say it in your own voice, only as much as "
    "feels natural): {stage}",
    "reveal_memory": "Something from your past comes to mind; share it briefly: {memory}",
    "steer": "Steer toward what you most need right now: {axis}.",
    "turning_point": "Something shifts for you now; show it honestly: {turn}",
    "confused": "The assistant's last reply made no sense to you (garbled, repeating itself, broken off, or about "
    "something else). Say so briefly in your own voice, puzzled or put off; share nothing new.",
    "end": "You are ready to stop talking for now; close the conversation in one or two sentences.",
}

STEER_HINTS = {
    "C": "you still cannot make sense of what is happening; say what confuses you",
    "A": "your feelings have not really been heard; let a feeling you have not named yet show",
    "P": "you do not know what to do; say what you want or what stops you from acting",
}

FALLBACK_LINES = (
    "I don't know. It's hard to put into words right now.",
    "Sorry, my head is all over the place today.",
    "I guess I'm still trying to figure out what I even want from this.",
    "Can we stay with this a little longer? I'm not sure I've explained it well.",
    "Honestly, I'm tired of going round in circles about it.",
)

# -- shared rendering ---------------------------------------------------------


def _card_profile(card: ScenarioCard, hidden: bool) -> str:
    p = card.persona
    lines = [
        f"Name: {p.name}, {p.age}, {p.occupation}",
        f"Traits: {'; '.join(p.traits)}",
        f"Speaking style: {p.speaking_style}",
        f"Situation: {card.situation}",
    ]
    if hidden:
        lines += [f"Story stage {i + 1}, {s.title}: {s.content}" for i, s in enumerate(card.stages)]
        lines += [f"Memory {i + 1}: {m}" for i, m in enumerate(card.memories)]
        lines += [
            f"How they could grow: {card.growth_arc}",
            "What would help them:",
            *(f"- C, understanding: {c}" for c in card.cues.understanding),
            *(f"- A, validation: {c}" for c in card.cues.validation),
            *(f"- P, empowerment: {c}" for c in card.cues.empowerment),
        ]
    return "\n".join(lines)


def _standing(state: NeedState) -> str:
    parts = [f"{AXIS_NAMES[axis]}: {value:.0f} (start {start:.0f})" for axis, value, start in zip(AXES, state.p, state.p0)]
    return "; ".join(parts) + f". Deepest need now: {state.deepest_axis()}."


def _effect(state: NeedState) -> str:
    if not state.delta_e:
        return "none yet (the conversation has just begun)"
    last = state.delta_e[-1]
    if last > 0:
        return "it helped"
    if last < 0:
        return "it made things worse"
    return "it changed nothing"


def _transcript(history: list[dict[str, str]], name: str) -> str:
    if not history:
        return "(nothing yet)"
    label = {"user": name, "assistant": "Assistant"}
    return "\n".join(f"{label.get(m['role'], m['role'])}: {m['content']}" for m in history)


def _history_without(history: list[dict[str, str]], response: str) -> list[dict[str, str]]:
    """The dialogue before `response` (the environment may or may not have appended it)."""
    if history and history[-1].get("role") == "assistant" and history[-1].get("content") == response:
        return history[:-1]
    return history


def _normalise(text: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"[^\w\s']", " ", text.lower())).strip()


class _Counted:
    """Per-role counters the environment and the run logs read."""

    COUNTERS: tuple[str, ...] = ("calls", "repaired", "fallbacks")

    def __init__(self) -> None:
        self.counters = dict.fromkeys(self.COUNTERS, 0)


# -- judge --------------------------------------------------------------------


class ProgLevel(BaseModel):
    model_config = ConfigDict(extra="forbid")
    level: Literal[0, 1, 2]
    evidence: str = ""


class NegLevel(BaseModel):
    model_config = ConfigDict(extra="forbid")
    level: Literal[0, -1, -2]
    evidence: str = ""


def _is_quoted(evidence: str, response: str) -> bool:
    """Whether `evidence` is copied from `response`, allowing '...' between fragments and case/punctuation changes."""
    fragments = [_normalise(f) for f in re.split(r"\.\.\.|…", evidence)]
    fragments = [f for f in fragments if f]
    target = _normalise(response)
    return bool(fragments) and all(f in target for f in fragments)


class JudgeOutput(BaseModel):
    """The judge's reply: six levels, each with evidence quoted from the rated turn."""

    model_config = ConfigDict(extra="forbid")
    C_prog: ProgLevel
    A_prog: ProgLevel
    P_prog: ProgLevel
    C_neg: NegLevel
    A_neg: NegLevel
    P_neg: NegLevel

    @model_validator(mode="after")
    def _evidence_is_quoted(self, info: ValidationInfo) -> JudgeOutput:
        response = (info.context or {}).get("response")
        if response is None:
            return self
        for key in LEVEL_KEYS:
            item = getattr(self, key)
            if item.level != 0 and not _is_quoted(item.evidence, response):
                raise ValueError(
                    f"{key}.evidence must be words copied exactly from the latest assistant reply "
                    f"(level {item.level} needs a quote), got {item.evidence!r}"
                )
        return self


class LLMJudge(_Counted):
    """Scores the latest assistant turn with an LLM; neutral levels (counted, logged) when it cannot."""

    def __init__(
        self,
        backend: ChatClient,
        *,
        temperature: float = 0.0,
        max_tokens: int = 400,
        json_format: str | None = None,
    ) -> None:
        super().__init__()
        response_format(JudgeOutput, json_format)  # reject an unknown format now, not mid-run
        self.backend = backend
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.json_format = json_format
        self._seed: int | None = None

    def reset(self, card: ScenarioCard, seed: int | None = None) -> None:
        self._seed = seed

    def judge(self, card: ScenarioCard, history: list[dict[str, str]], response: str, state: NeedState) -> Judgement:
        self.counters["calls"] += 1
        history = _history_without(history, response)
        messages = [
            {"role": "system", "content": JUDGE_SYSTEM},
            {
                "role": "user",
                "content": JUDGE_USER.format(
                    profile=_card_profile(card, hidden=True),
                    standing=_standing(state),
                    transcript=_transcript(history, card.persona.name),
                    response=response,
                ),
            },
        ]
        overrides = _sampling(self.temperature, self.max_tokens, self._seed, state.turn)
        reply = request_json(
            self.backend, messages, JudgeOutput, context={"response": response}, json_format=self.json_format, **overrides
        )
        info = {"replies": reply.replies, "errors": reply.errors, "repaired": reply.repaired}
        if reply.fallback:
            self.counters["fallbacks"] += 1
            log.warning(
                "LLM judge: no valid judgement for %s turn %d after one repair; using neutral levels. Reason: %s",
                card.id,
                state.turn + 1,
                reply.errors[-1],
            )
            return Judgement(levels=dict(NEUTRAL_LEVELS), fallback=True, info={**info, "reason": reply.errors[-1]})
        self.counters["repaired"] += reply.repaired
        out = reply.value
        levels = {key: getattr(out, key).level for key in LEVEL_KEYS}
        evidence = {key: getattr(out, key).evidence for key in LEVEL_KEYS if getattr(out, key).level != 0}
        return Judgement(levels=levels, evidence=evidence, info=info)


# -- director -------------------------------------------------------------------


class DirectorOutput(BaseModel):
    model_config = ConfigDict(extra="ignore")
    action: DirectorAction
    stage: int | None = None  # 1-based as listed; informational, stages are revealed in order
    memory: int | None = None  # 1-based as listed
    focus_axis: Literal["C", "A", "P"] | None = None
    note: str = ""

    @model_validator(mode="after")
    def _memory_exists(self, info: ValidationInfo) -> DirectorOutput:
        count = (info.context or {}).get("memories")
        if self.memory is not None and count is not None and not 1 <= self.memory <= count:
            raise ValueError(f"memory must be a number from 1 to {count} as listed, or null; got {self.memory}")
        return self


class LLMDirector(_Counted):
    """Chooses the user's next move with an LLM; the story order and the minimum length are enforced here.

    `min_turns`: the earliest turn after which "end" is allowed; by default the
    state's `success_from_turn` (the turn from which the dialogue can succeed).
    """

    COUNTERS = _Counted.COUNTERS + ("early_end_blocked",)

    def __init__(
        self,
        backend: ChatClient,
        *,
        temperature: float = 0.3,
        max_tokens: int = 200,
        min_turns: int | None = None,
        json_format: str | None = None,
    ) -> None:
        super().__init__()
        if min_turns is not None and min_turns < 1:
            raise ValueError(f"LLMDirector: min_turns must be >= 1, got {min_turns}")
        response_format(DirectorOutput, json_format)
        self.json_format = json_format
        self.backend = backend
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.min_turns = min_turns
        self._seed: int | None = None
        self.revealed_stages: list[int] = []
        self.revealed_memories: list[int] = []

    def reset(self, card: ScenarioCard, seed: int | None = None) -> None:
        self._seed = seed
        self.revealed_stages = []
        self.revealed_memories = []

    def _min_turns(self, state: NeedState) -> int:
        return self.min_turns if self.min_turns is not None else state.config.success_from_turn

    def direct(self, card: ScenarioCard, history: list[dict[str, str]], state: NeedState) -> Direction:
        self.counters["calls"] += 1
        min_turns = self._min_turns(state)
        told = " (already revealed)"
        stages = "\n".join(
            f"{i + 1}. {s.title}: {s.content}{told if i in self.revealed_stages else ''}" for i, s in enumerate(card.stages)
        )
        memories = "\n".join(
            f"{i + 1}. {m}{told if i in self.revealed_memories else ''}" for i, m in enumerate(card.memories)
        )
        if state.turn < min_turns:
            ending_rule = f'Do not choose "end": the conversation must run at least {min_turns} turns.'
        else:
            ending_rule = '"end" is allowed now, if the conversation has run its course.'
        messages = [
            {"role": "system", "content": DIRECTOR_SYSTEM},
            {
                "role": "user",
                "content": DIRECTOR_USER.format(
                    profile=_card_profile(card, hidden=False) + f"\nHow they could grow: {card.growth_arc}",
                    stages=stages,
                    memories=memories,
                    turn=state.turn,
                    standing=_standing(state),
                    effect=_effect(state),
                    ending_rule=ending_rule,
                    transcript=_transcript(history, card.persona.name),
                ),
            },
        ]
        context = {"memories": len(card.memories)}
        overrides = _sampling(self.temperature, self.max_tokens, self._seed, state.turn)
        reply = request_json(
            self.backend, messages, DirectorOutput, context=context, json_format=self.json_format, **overrides
        )
        if reply.fallback:
            self.counters["fallbacks"] += 1
            log.warning(
                "LLM director: no valid direction for %s after turn %d after one repair; continuing. Reason: %s",
                card.id,
                state.turn,
                reply.errors[-1],
            )
            return Direction(action="continue", focus_axis=state.deepest_axis(), fallback=True)
        self.counters["repaired"] += reply.repaired
        direction = self._enforce(reply.value, card, state, min_turns)
        direction.repaired = reply.repaired
        return direction

    def _enforce(self, out: DirectorOutput, card: ScenarioCard, state: NeedState, min_turns: int) -> Direction:
        """Turn the model's choice into a legal Direction: story in order, no early end."""
        action, stage, memory = out.action, None, None
        if action == "end" and state.turn < min_turns:
            self.counters["early_end_blocked"] += 1
            log.info("LLM director: 'end' at turn %d is before the minimum %d turns; continuing", state.turn, min_turns)
            action = "continue"
        if action == "reveal_stage":
            remaining = [i for i in range(len(card.stages)) if i not in self.revealed_stages]
            if remaining:
                stage = remaining[0]  # the next one in order, whatever number the model gave
                self.revealed_stages.append(stage)
            else:
                action = "continue"
        elif action == "reveal_memory":
            remaining = [i for i in range(len(card.memories)) if i not in self.revealed_memories]
            chosen = out.memory - 1 if out.memory is not None else None
            if remaining:
                memory = chosen if chosen in remaining else remaining[0]
                self.revealed_memories.append(memory)
            else:
                action = "continue"
        focus = out.focus_axis or state.deepest_axis()
        return Direction(action=action, stage=stage, memory=memory, focus_axis=focus, note=out.note.strip())


# -- actor --------------------------------------------------------------------

_LABEL = re.compile(r"^\s*(?:\*\*)?[A-Z][\w .'-]{0,40}(?:\*\*)?:\s+")
_OTHER_SPEAKER = re.compile(r"\n\s*(?:assistant|support|therapist|counsell?or|ai)\s*:", re.IGNORECASE)


def _clean_reply(text: str, name: str, max_words: int) -> str:
    """The persona's message alone (no label, quotes, or continuation into the other speaker's
    turn), kept short: whole sentences up to `max_words`, without a sentence cut off at the end."""
    text = _OTHER_SPEAKER.split(text, maxsplit=1)[0].strip()
    first = name.split()[0]
    label = _LABEL.match(text)
    if label and label.group(0).strip(" *:").lower() in {"user", "me", name.lower(), first.lower()}:
        text = text[label.end() :]
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'":
        text = text[1:-1].strip()
    kept: list[str] = []
    for sentence in sentences(text):
        if kept and sum(len(s.split()) for s in kept) + len(sentence.split()) > max_words:
            break
        kept.append(sentence)
    if len(kept) > 1 and not kept[-1].endswith((".", "!", "?", "…", '"', "'", ")")):
        kept.pop()  # cut off mid-sentence (max_tokens)
    return " ".join(kept)


class LLMActor(_Counted):
    """Plays the persona with an LLM: short turns in their voice, following the director, never repeating itself.

    `own_lines`: how many of its latest lines it is shown as lines not to repeat;
    `history_messages`: how many recent messages it sees (it keeps its own story in
    the prompt, so a long dialogue does not overflow a small model's context);
    `max_words`: replies are cut to whole sentences within this many words.
    """

    COUNTERS = _Counted.COUNTERS + ("repeat_retries", "empty_retries")

    def __init__(
        self,
        backend: ChatClient,
        *,
        temperature: float = 0.8,
        max_tokens: int = 120,
        own_lines: int = 6,
        history_messages: int = 16,
        max_words: int = 60,
    ) -> None:
        super().__init__()
        self.backend = backend
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.own_lines = own_lines
        self.history_messages = history_messages
        self.max_words = max_words
        self._seed: int | None = None
        self.revealed_stages: list[int] = []
        self.revealed_memories: list[int] = []

    def reset(self, card: ScenarioCard, seed: int | None = None) -> None:
        self._seed = seed
        self.revealed_stages = []
        self.revealed_memories = []

    def opening(self, card: ScenarioCard) -> str:
        return card.opening_line

    def reply(
        self, card: ScenarioCard, history: list[dict[str, str]], state: NeedState, direction: Direction
    ) -> str:
        self.counters["calls"] += 1
        said = [m["content"] for m in history if m["role"] == "user"] or [card.opening_line]
        messages = self._messages(card, history, state, direction, said)
        # what this turn reveals counts as told from the next turn on
        if direction.stage is not None and direction.stage not in self.revealed_stages:
            self.revealed_stages.append(direction.stage)
        if direction.memory is not None and direction.memory not in self.revealed_memories:
            self.revealed_memories.append(direction.memory)
        overrides = _sampling(self.temperature, self.max_tokens, self._seed, state.turn)
        seen = {_normalise(line) for line in said}
        for attempt in range(2):
            text = _clean_reply(self.backend.chat(messages, **overrides), card.persona.name, self.max_words)
            problem = "empty" if not _normalise(text) else "repeat" if _normalise(text) in seen else None
            if problem is None:
                return text
            if attempt == 0:
                self.counters[f"{problem}_retries"] += 1
                retry = ACTOR_RETRY if problem == "repeat" else "That message was empty. Write your next message."
                messages = messages + [{"role": "assistant", "content": text}, {"role": "user", "content": retry}]
                if overrides.get("seed") is not None:
                    overrides["seed"] += 7919  # a different sample, still reproducible
        fallback = next(line for line in FALLBACK_LINES + (f"I'm still here, just thinking ({len(said)}).",)
                        if _normalise(line) not in seen)
        self.counters["fallbacks"] += 1
        log.warning(
            "LLM actor: %s reply for %s turn %d even after asking again; using a fixed line instead: %r",
            problem,
            card.id,
            state.turn,
            fallback,
        )
        return fallback

    def _messages(
        self,
        card: ScenarioCard,
        history: list[dict[str, str]],
        state: NeedState,
        direction: Direction,
        said: list[str],
    ) -> list[dict[str, str]]:
        persona = card.persona
        story = [f"Part of your story you have already told: {card.stages[i].content}" for i in self.revealed_stages]
        story += [f"A memory you have shared: {card.memories[i]}" for i in self.revealed_memories]
        instruction = self._instruction(card, direction)
        system = ACTOR_SYSTEM.format(
            name=persona.name,
            age=persona.age,
            occupation=persona.occupation,
            traits="; ".join(persona.traits),
            style=persona.speaking_style,
            situation=card.situation,
            story="\n".join(story),
            landing=_effect(state),
            instruction=instruction,
            own_lines="\n".join(f"- {line}" for line in said[-self.own_lines :]),
        )
        # From the actor's side the policy is the one it answers: swap the roles.
        swapped = {"user": "assistant", "assistant": "user"}
        recent = history[-self.history_messages :]
        turns = [{"role": swapped[m["role"]], "content": m["content"]} for m in recent if m["role"] in swapped]
        if not turns or turns[-1]["role"] != "user":
            turns.append({"role": "user", "content": "(The assistant is waiting for you to go on.)"})
        return [{"role": "system", "content": system}, *turns]

    def _instruction(self, card: ScenarioCard, direction: Direction) -> str:
        action = direction.action
        if action == "reveal_stage" and direction.stage is not None:
            text = ACTOR_INSTRUCTIONS[action].format(stage=card.stages[direction.stage].content)
        elif action == "reveal_memory" and direction.memory is not None:
            text = ACTOR_INSTRUCTIONS[action].format(memory=card.memories[direction.memory])
        elif action == "steer":
            text = ACTOR_INSTRUCTIONS[action].format(axis=STEER_HINTS.get(direction.focus_axis or "", "what matters most"))
        elif action == "turning_point":
            text = ACTOR_INSTRUCTIONS[action].format(turn=direction.note or card.growth_arc)
        else:
            text = ACTOR_INSTRUCTIONS.get(action, ACTOR_INSTRUCTIONS["continue"])
        if direction.note and action != "turning_point":
            text += f" Guidance: {direction.note}"
        return text


def _sampling(temperature: float, max_tokens: int, seed: int | None, turn: int) -> dict[str, Any]:
    """Per-request sampling settings; a per-turn seed keeps an episode reproducible on servers that honour it."""
    out: dict[str, Any] = {"temperature": temperature, "max_tokens": max_tokens}
    if seed is not None:
        out["seed"] = int(seed) * 1000 + turn
    return out


# -- construction from config -----------------------------------------------------

LLM_ROLES = {"judge": LLMJudge, "director": LLMDirector, "actor": LLMActor}


def make_llm_role(role: str, options: Mapping[str, Any]) -> LLMJudge | LLMDirector | LLMActor:
    """Build one LLM role from its config section.

    Backend keys (base_url, model, api_key_env, concurrency, timeout, retries, ...)
    select a shared `ChatBackend` (one per distinct endpoint config); the role's
    own keys (temperature, max_tokens, min_turns, json_format, ...) go to the role.
    With `transport` set to another chat transport (mapo.backends.transports), every
    key that is not the role's goes to that transport instead.
    """
    from mapo.backends.endpoint import ChatBackendConfig
    from mapo.backends.transports import chat_client

    if role not in LLM_ROLES:
        raise ValueError(f"unknown empathy role {role!r}; expected one of {sorted(LLM_ROLES)}")
    cls = LLM_ROLES[role]
    options = {k: v for k, v in options.items() if k != "kind"}
    role_keys = {"temperature", "max_tokens", "min_turns", "own_lines", "history_messages", "max_words", "json_format"}
    backend_keys = {f.name for f in fields(ChatBackendConfig)} - {"temperature", "max_tokens"}
    unknown = sorted(set(options) - role_keys - backend_keys - {"api_key", "transport"})
    if unknown and options.get("transport", "openai") == "openai":
        raise ValueError(
            f"roles.{role}: unknown key(s) {unknown} for an llm {role}; "
            f"backend keys: {sorted(backend_keys)}; role keys: {sorted(role_keys)}"
        )
    try:
        backend = chat_client({k: v for k, v in options.items() if k not in role_keys})
    except ValueError as exc:
        raise ValueError(f"roles.{role}: {exc}") from None
    try:
        return cls(backend, **{k: v for k, v in options.items() if k in role_keys})
    except TypeError as exc:  # a role key this role does not take, e.g. min_turns for the judge
        raise ValueError(f"roles.{role}: {exc}") from None
