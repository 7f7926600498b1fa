"""Chat templates: the end-of-turn token, and the load-time check that a template is prefix-stable.

mapo builds a dialogue's ids incrementally (prompt, sampled reply, next prompt, ...) and
trains on exactly those ids. That equals what the model's own template renders for the
same dialogue only if the template is *prefix-stable*: rendering turn t+1 must start
with turn t's prompt and reply, token for token. Templates that strip earlier reasoning
(Qwen3), move the system prompt (Mistral puts it in the last user turn) or refuse a
system role (Gemma) are not. `check_template` renders a three-turn dialogue and
compares, turn by turn; a system prompt the template cannot hold stably is folded
into the first user message (what Gemma 3's own template does), anything else stops
the load with a message naming the model and the way out.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

SENTINEL = "\u2063MAPO-REPLY\u2063"  # an assistant reply no template will alter
CHECK_SYSTEM = "You are a kind listener."
CHECK_USERS = ("Hello, I had a rough week.", "My manager keeps ignoring my ideas.", "Thanks, I will try that.")
CHECK_REPLIES = ("I am sorry to hear that. What happened?", "That sounds frustrating. How did it feel?", "Good luck.")


class ChatTemplateError(ValueError):
    """The chat template cannot give mapo the ids it samples; the message names the way out."""


@dataclass(frozen=True)
class TemplateCheck:
    """What the check found: the end-of-turn id and whether the system prompt is folded into the first user turn."""

    end_of_turn_id: int
    fold_system: bool


def load_template(name_or_path: str) -> str:
    """A Jinja chat template: one shipped with mapo by name (`chatml`) or a file path."""
    shipped = resources.files("mapo") / "data" / "chat_templates" / f"{name_or_path}.jinja"
    if shipped.is_file():
        return shipped.read_text(encoding="utf-8")
    path = Path(name_or_path).expanduser()
    if not path.is_file():
        raise ChatTemplateError(f"policy.chat_template: {name_or_path!r} is neither a shipped template (chatml) nor a file")
    return path.read_text(encoding="utf-8")


def render(tokenizer: Any, messages: list[dict[str, str]], generation_prompt: bool) -> str:
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation_prompt)


def encode(tokenizer: Any, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def end_of_turn_id(tokenizer: Any) -> int:
    """The token the template closes an assistant turn with (`<|im_end|>`, `<|eot_id|>`,
    `<end_of_turn>`, `</s>`...): the first token after a reply, when it is a special token;
    else the tokenizer's eos."""
    text = render(tokenizer, [{"role": "user", "content": "-"}, {"role": "assistant", "content": SENTINEL}], False)
    tail = encode(tokenizer, text[text.index(SENTINEL) + len(SENTINEL) :])
    special = set(tokenizer.all_special_ids) | set(getattr(tokenizer, "added_tokens_decoder", {}))
    if tail and tail[0] in special:
        return int(tail[0])
    if tokenizer.eos_token_id is None:
        raise ChatTemplateError("the policy's tokenizer has no end-of-turn (eos) token")
    return int(tokenizer.eos_token_id)


def dialogue(system: str, fold_system: bool, turns: int) -> list[dict[str, str]]:
    """The check's dialogue up to turn `turns`' user message."""
    messages = [{"role": "system", "content": system}] if system and not fold_system else []
    for k in range(turns):
        if k:
            messages.append({"role": "assistant", "content": CHECK_REPLIES[k - 1]})
        user = CHECK_USERS[k]
        messages.append({"role": "user", "content": fold(system, user) if fold_system and k == 0 else user})
    return messages


def fold(system: str, user: str) -> str:
    """A system prompt carried in the first user message."""
    return f"{system}\n\n{user}" if system else user


def _problem(
    tokenizer: Any,
    eot: int,
    fold_system: bool,
    incremental: Callable[[list[list[int]]], list[list[int]]],
) -> str | None:
    """What breaks prefix stability with this system-prompt placement (None: nothing).

    Per turn t the template's own ids must be: prompt_t = the incremental prompt; the
    rendered reply_t follows prompt_t and ends with the end-of-turn token; prompt_{t+1}
    starts with prompt_t + reply_t. `incremental(replies)` gives the prompts mapo builds
    around those reply ids.
    """
    try:
        prompts, replies = [], []
        for t in range(1, len(CHECK_USERS) + 1):
            messages = dialogue(CHECK_SYSTEM, fold_system, t)
            prompt = encode(tokenizer, render(tokenizer, messages, True))
            full = encode(tokenizer, render(tokenizer, [*messages, {"role": "assistant", "content": CHECK_REPLIES[t - 1]}], False))
            if full[: len(prompt)] != prompt:
                return f"turn {t}: the rendered reply does not follow the generation prompt"
            reply = full[len(prompt) :]
            if eot not in reply:
                return f"turn {t}: the rendered reply is not closed by the end-of-turn token"
            replies.append(reply[: reply.index(eot) + 1])
            if prompts and prompt[: len(prompts[-1]) + len(replies[-2])] != prompts[-1] + replies[-2]:
                return f"turn {t}: the prompt does not start with turn {t - 1}'s prompt and reply (the template rewrites history)"
            prompts.append(prompt)
        if incremental(replies) != prompts:
            return "mapo's incremental prompts differ from the template's rendering"
    except Exception as err:  # noqa: BLE001  (a template may refuse a role with raise_exception; any failure counts)
        return f"the template does not render the dialogue ({err})"
    return None


def check_template(
    tokenizer: Any,
    model_name: str,
    incremental: Callable[[bool, list[list[int]]], list[list[int]]],
) -> TemplateCheck:
    """Decide the end-of-turn id and system-prompt placement, or raise ChatTemplateError.

    `incremental(fold_system, replies)` returns the prompts mapo builds turn by turn
    (first prompt, then each previous prompt + reply + next-prompt ids) for the check's
    dialogue; the packed training sequence is those ids, so equality here means the ids
    trained on are the ids the template gives, reply for reply.
    """
    eot = end_of_turn_id(tokenizer)
    problems = []
    for fold_system in (False, True):
        problem = _problem(tokenizer, eot, fold_system, functools.partial(incremental, fold_system))
        if problem is None:
            return TemplateCheck(eot, fold_system)
        problems.append(problem)
    raise ChatTemplateError(
        f"{model_name}: the chat template is not prefix-stable over a three-turn dialogue "
        f"({problems[0]}; with the system prompt in the first user message: {problems[1]}). "
        "Training on its incremental ids would not match what the template renders. Way out: "
        "set policy.chat_template to a template that keeps earlier turns verbatim, a Jinja file "
        "or `chatml` for <|im_start|>/<|im_end|> models such as Qwen3 "
        "(--set policy.chat_template=chatml)."
    )

