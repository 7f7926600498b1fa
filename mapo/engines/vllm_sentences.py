"""The sentence limit inside vLLM: a logits processor that ends a reply once it holds N sentences.

vLLM stops at stop ids, stop strings and a token cap, but cannot count sentences. Without this
the engine decodes every reply to the cap and cuts it afterwards, half of the tokens wasted on
the default workload. The processor counts each reply's sentences as it grows
(mapo.engines.stops.SentenceCounter, the rule the `hf` engine stops by) and, once a reply
reaches its limit, leaves the end-of-turn id as the only choice for the next token. The engine
cuts that forced id off again (`sentence_stop`), so the trained ids and log-probs are exactly
what was sampled from the unmodified distribution.

A request opts in with `SamplingParams(extra_args={"max_sentences": N, "end_of_turn_id": E})`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from mapo.engines.stops import SentenceCounter


@dataclass
class _Reply:
    counter: SentenceCounter
    output: Sequence[int]  # vLLM's running list of the request's output ids
    limit: int
    end_of_turn_id: int
    seen: int = 0
    full: bool = False


def sentence_limit_processor(decode: Callable[[list[int]], str]) -> type:
    """A vLLM logits-processor class whose replies count sentences with `decode` (the policy's text).

    vLLM builds the processor itself from the class, so the tokenizer travels in the class.
    """
    from vllm.v1.sample.logits_processor import BatchUpdate, LogitsProcessor

    class SentenceLimit(LogitsProcessor):
        def __init__(self, vllm_config: Any, device: torch.device, is_pin_memory: bool) -> None:
            self.replies: dict[int, _Reply] = {}

        def is_argmax_invariant(self) -> bool:
            return False  # it can force the end of a reply, greedy or not

        def update_state(self, batch_update: BatchUpdate | None) -> None:
            if batch_update is not None:
                for index in batch_update.removed:
                    self.replies.pop(index, None)
                for index, params, _, output in batch_update.added:
                    extra = params.extra_args or {}
                    self.replies.pop(index, None)
                    if extra.get("max_sentences"):
                        self.replies[index] = _Reply(SentenceCounter(decode), output, int(extra["max_sentences"]),
                                                     int(extra["end_of_turn_id"]))
                for a, b, direction in batch_update.moved:
                    first, second = self.replies.pop(a, None), self.replies.pop(b, None)
                    if first is not None:
                        self.replies[b] = first
                    if second is not None and direction.name == "SWAP":
                        self.replies[a] = second
            for reply in self.replies.values():
                while reply.seen < len(reply.output) and not reply.full:
                    reply.full = reply.counter.push(int(reply.output[reply.seen])) >= reply.limit
                    reply.seen += 1

        def apply(self, logits: torch.Tensor) -> torch.Tensor:
            for index, reply in self.replies.items():
                if reply.full and index < logits.shape[0]:
                    kept = logits[index, reply.end_of_turn_id].clone()
                    logits[index] = float("-inf")
                    logits[index, reply.end_of_turn_id] = kept if torch.isfinite(kept) else 0.0
            return logits

    return SentenceLimit
