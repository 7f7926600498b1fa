"""A demonstration's token ids, built by the RL path so SFT and RL train on the same ids.

A rollout builds a dialogue as `Policy.first_prompt_ids(system, first user message)`,
then per turn the reply's ids (ending with the end-of-turn id the model samples), then
`Policy.next_prompt_ids(next user message)`, and trains the packed sequence
(`mapo.core.losses.packed_sequence`). SFT builds a `Trajectory` the same way, with each
reply's ids the chat template's rendering of the demonstrated text, and packs it with
the same function: every reply token and its end-of-turn token is trained, nothing else.
"""

from __future__ import annotations

from dataclasses import dataclass

from mapo.chat_template import render
from mapo.core.losses import TrainSequence, packed_sequence
from mapo.core.types import Trajectory, Turn
from mapo.policy import Policy
from mapo.sft.data import Example, SftDataError


def reply_ids(policy: Policy, content: str, where: str = "a reply") -> list[int]:
    """The ids the template gives an assistant message after its header: the text, then end-of-turn."""
    context = [{"role": "user", "content": "-"}]
    prompt = render(policy.tokenizer, context, True)
    full = render(policy.tokenizer, [*context, {"role": "assistant", "content": content}], False)
    end = policy.tokenizer.convert_ids_to_tokens(policy.end_of_turn_id)
    if not full.startswith(prompt) or end not in full[len(prompt) :]:
        raise SftDataError(f"{where}: the chat template does not render this reply after its header and close it with {end!r}")
    text = full[len(prompt) : full.index(end, len(prompt))]
    ids = policy.encode(text)
    if policy.end_of_turn_id in ids:
        raise SftDataError(f"{where}: the reply contains the end-of-turn token {end!r} itself")
    return [*ids, policy.end_of_turn_id]


def dialogue_trajectory(policy: Policy, example: Example, system_prompt: str | None = None) -> Trajectory:
    """The demonstration as a rollout would have recorded it, had the policy sampled these replies.

    `system_prompt` stands in for a dialogue without a system message.
    """
    messages = example.messages
    system = messages[0]["content"] if messages[0]["role"] == "system" else (system_prompt or "")
    exchanges = [m for m in messages if m["role"] != "system"]
    trajectory = Trajectory(scenario_id=example.id, system_prompt=system, done_reason="demonstration")
    ids: list[int] = []
    for k in range(0, len(exchanges) - 1, 2):  # (user, assistant) pairs; a trailing user message is not trained
        user, reply = exchanges[k]["content"], exchanges[k + 1]["content"]
        ids += policy.first_prompt_ids(system, user) if k == 0 else policy.next_prompt_ids(user)
        where = f"{example.source}: messages.{k + 1 + (len(messages) - len(exchanges))}.content"
        response = reply_ids(policy, reply, where)
        trajectory.turns.append(
            Turn(
                index=k // 2 + 1,
                user_message=user,
                response=reply,
                prompt_length=len(ids),
                response_ids=response,
                old_logprobs=[0.0] * len(response),
            )
        )
        ids += response
    trajectory.token_ids = ids
    return trajectory


@dataclass
class Rendered:
    """A dialogue's training sequence, and how many of its turns were cut to fit `max_tokens`."""

    source: str
    sequence: TrainSequence
    dropped_turns: int


def training_sequence(policy: Policy, example: Example, max_tokens: int, system_prompt: str | None = None) -> Rendered:
    """The packed sequence of the dialogue's turns that fit in `max_tokens`, every reply trained."""
    trajectory = dialogue_trajectory(policy, example, system_prompt)
    kept = [t for t in trajectory.turns if t.prompt_length + len(t.response_ids) <= max_tokens]
    if not kept:
        first = trajectory.turns[0]
        raise SftDataError(
            f"{example.source}: the first reply ends at token {first.prompt_length + len(first.response_ids)}, "
            f"beyond sft.max_tokens={max_tokens}; shorten the dialogue or raise sft.max_tokens"
        )
    dropped = len(trajectory.turns) - len(kept)
    trajectory.turns = kept
    sequence = packed_sequence(trajectory, [1.0] * len(kept))
    assert sequence is not None  # every kept turn has reply ids
    return Rendered(example.source, sequence, dropped)
