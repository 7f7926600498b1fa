"""The sequences the worker decodes together, one `llama_decode` step at a time; new ones join between steps.

Each sequence gets a KV-cache slot: the free slot whose cached ids share the longest prefix
with its context (a dialogue's earlier turns are already there), so only the ids after that
prefix are decoded. A sequence whose context shares a longer prefix with another sequence's
(the N samples of a scenario open with the same prompt) waits for that one's prefill and
copies its slot. A step feeds every sequence's pending ids at once (prefill ids of sequences
that joined and one sampled id of each decoding one), then draws one id per sequence that got
logits, all rows together (mapo.engines.sampling), each with a generator of its own: what a
sequence samples depends on its own seed, not on which others share its steps.

Stop rules, per sequence: the end-of-turn id, `max_sentences` sentence ends (counted
incrementally, mapo.engines.stops), `max_new_tokens`.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mapo.engines.llamacpp_decoder import MIN_SHARED, Decoder, Item, common_prefix
from mapo.engines.sampling import draw
from mapo.engines.stops import SentenceCounter
from mapo.engines.wire import WorkerError


@dataclass(frozen=True)
class DrawRules:
    """How replies are drawn and where they stop."""

    temperature: float
    top_p: float
    max_new_tokens: int
    max_sentences: int | None
    end_of_turn_id: int


@dataclass
class Sequence:
    key: Any
    context: list[int]
    slot: int
    rng: np.random.Generator
    feed: list[int]  # ids still to decode: the context's uncached part, then each sampled id
    counter: SentenceCounter | None
    donor: Sequence | None = None  # waits for it to be prefilled, then copies its slot
    ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    ended: bool = False  # stopped by end-of-turn or the sentence limit (not the token cap)
    done: bool = False

    @property
    def prefilled(self) -> bool:
        return self.donor is None and (bool(self.ids) or len(self.feed) == 0)


class Batch:
    """Sequences on one Decoder's slots; `add` them, `step` until each is done."""

    def __init__(self, decoder: Decoder, rules: DrawRules) -> None:
        self.decoder, self.rules = decoder, rules
        self.active: list[Sequence] = []
        self.stats: Counter[str] = Counter()

    def free_slots(self) -> list[int]:
        used = {s.slot for s in self.active}
        return [s for s in range(self.decoder.slots) if s not in used]

    def add(self, key: Any, context: list[int], seed: Any, slot: int | None = None) -> Sequence:
        """Start a sequence on `slot` (default: the free slot sharing most with `context`)."""
        decoder = self.decoder
        decoder.check_context(context, self.rules.max_new_tokens)
        free = self.free_slots()
        if not free:
            raise WorkerError(f"more sequences than the {decoder.slots} slots")
        slot, keep = decoder.best_slot(context, [slot] if slot is not None else free)
        donor = max(self.active, key=lambda s: common_prefix(context, s.context), default=None)
        shared = 0 if donor is None else min(common_prefix(context, donor.context), len(context) - 1)
        counter = SentenceCounter(decoder.decode_reply) if self.rules.max_sentences else None
        sequence = Sequence(key, context, slot, np.random.default_rng(seed), [], counter)
        if shared - keep >= MIN_SHARED:
            sequence.donor = donor
        else:
            decoder.trim(slot, keep)
            sequence.feed = context[keep:]
            self.stats["reused_tokens"] += keep
        self.active.append(sequence)
        return sequence

    def _copy_from_donors(self) -> None:
        for s in self.active:
            if s.donor is not None and s.donor.prefilled:
                keep = min(common_prefix(s.context, self.decoder.cached[s.donor.slot]), len(s.context) - 1)
                self.decoder.copy_slot(s.donor.slot, s.slot, keep)
                self.stats["copied_tokens"] += keep
                s.donor, s.feed = None, s.context[keep:]

    def step(self) -> list[Sequence]:
        """Decode every ready sequence's pending ids and draw the next id of each; the sequences
        that finished (removed from the batch)."""
        self._copy_from_donors()
        ready = [s for s in self.active if s.donor is None and s.feed]
        if not ready:
            return []
        by_slot = {s.slot: s for s in ready}
        items: list[Item] = []
        prefill = decode = 0
        for s in ready:
            start = len(self.decoder.cached[s.slot])
            items += [(s.slot, start + k, token, k == len(s.feed) - 1) for k, token in enumerate(s.feed)]
            if s.ids:
                decode += len(s.feed)
            else:
                prefill += len(s.feed)
        forward_before = self.decoder.forward_s
        began = time.perf_counter()
        self.decoder.forward(items, lambda rows, slots: self._draw(rows, [by_slot[slot] for slot in slots]))
        forward = self.decoder.forward_s - forward_before
        stats = self.stats
        stats["steps"] += 1
        stats["step_s"] += time.perf_counter() - began
        stats["prefill_tokens"] += prefill
        stats["prefill_s"] += forward * prefill / (prefill + decode)
        stats["decode_s"] += forward * decode / (prefill + decode)
        if decode:
            stats["decode_steps"] += 1
            stats["decode_rows"] += decode
        finished = [s for s in self.active if s.done]
        self.active = [s for s in self.active if not s.done]
        return finished

    def _draw(self, rows: np.ndarray, sequences: list[Sequence]) -> None:
        """One id for each of `sequences` from its row of logits; apply the stop rules."""
        rules, stats = self.rules, self.stats
        began = time.perf_counter()
        uniforms = np.array([s.rng.random() for s in sequences])
        tokens, logprobs = draw(rows, rules.temperature, rules.top_p, uniforms)
        drawn = time.perf_counter()
        stats["sample_s"] += drawn - began
        for s, token, logprob in zip(sequences, tokens.tolist(), logprobs.tolist()):
            s.ids.append(token)
            s.logprobs.append(logprob)
            s.feed = [token]
            if token == rules.end_of_turn_id:
                s.ended = s.done = True
            elif s.counter is not None and s.counter.push(token) >= (rules.max_sentences or 0):
                s.ended = s.done = True
            elif len(s.ids) >= rules.max_new_tokens:
                s.done = True
        stats["stop_s"] += time.perf_counter() - drawn
        stats["generated_tokens"] += len(sequences)


def sample_all(
    decoder: Decoder, contexts: list[list[int]], rules: DrawRules, seed: int, crash_at: int | None = None
) -> tuple[list[Sequence], Counter[str]]:
    """Decode `contexts` together to the end (one turn of a batch of dialogues); sequence k draws with
    the generator seeded by (seed, k). Slots go to the contexts sharing the longest prefixes first."""
    batch = Batch(decoder, rules)
    for k in assignment_order(decoder, contexts):
        batch.add(k, contexts[k], (seed, k))
    sequences = sorted(batch.active, key=lambda s: s.key)
    step = 0
    while batch.active:
        if step == crash_at:
            import os

            os._exit(70)
        batch.step()
        step += 1
    return sequences, batch.stats


def assignment_order(decoder: Decoder, contexts: list[list[int]]) -> list[int]:
    """The contexts in the order they should pick slots: the one sharing most with a cached slot first."""
    best = [max((common_prefix(c, cached) for cached in decoder.cached), default=0) for c in contexts]
    return sorted(range(len(contexts)), key=lambda k: (-best[k], k))
