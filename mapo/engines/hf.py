"""The `hf` engine: the trainer's own torch model samples (transformers `generate`).

It is the policy itself, so a sync moves nothing. Its log-probs are those of the distribution
each id was drawn from (generate's processed scores), the behaviour policy; on a CPU in
float32 they equal the trainer's pi_old to float error (docs/engines.md).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import torch

from mapo.engines.base import KVCache, Sample, SyncStats, require_version
from mapo.engines.stops import SentenceCounter, sentence_stop
from mapo.policy import Policy


@functools.cache
def _cache_name() -> str:
    """generate's key-value cache argument and output field: transformers 5.x renamed
    `past_key_values` to `cache` (the old name warns until 6.0, then goes)."""
    from transformers.generation.utils import GenerateDecoderOnlyOutput

    return "cache" if "cache" in GenerateDecoderOnlyOutput.__dataclass_fields__ else "past_key_values"


def _cache_tensors(cache: Any) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(keys, values) per layer of a transformers cache, [batch, kv_heads, tokens, head_dim]."""
    if hasattr(cache, "layers"):
        return [(layer.keys, layer.values) for layer in cache.layers]
    return list(zip(cache.key_cache, cache.value_cache))


def reply_text(policy: Policy) -> Any:
    """The text of reply ids as the stop rule reads it (special ids skipped)."""
    return lambda ids: policy.tokenizer.decode(list(ids), skip_special_tokens=True)


class _SentenceLimit:
    """A `generate` stopping criterion: a row is done once its reply holds `limit` sentences, counted
    as the reply grows (mapo.engines.stops), each new id once."""

    def __init__(self, policy: Policy, limit: int, rows: int) -> None:
        self.limit = limit
        self.counters = [SentenceCounter(reply_text(policy)) for _ in range(rows)]
        self.done = [False] * rows

    def __call__(self, input_ids: torch.Tensor, scores: Any, **kwargs: Any) -> torch.Tensor:
        newest = input_ids[:, -1].tolist()
        for row, token in enumerate(newest):
            if not self.done[row]:
                self.done[row] = self.counters[row].push(int(token)) >= self.limit
        return torch.tensor(self.done, dtype=torch.bool, device=input_ids.device)


def left_padded(contexts: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """`contexts` as one left-padded batch of ids and its attention mask (generate's layout)."""
    width = max(len(c) for c in contexts)
    input_ids = torch.full((len(contexts), width), pad_id, dtype=torch.long)
    attention = torch.zeros((len(contexts), width), dtype=torch.long)
    for row, ids in enumerate(contexts):
        input_ids[row, width - len(ids) :] = torch.tensor(list(ids), dtype=torch.long)
        attention[row, width - len(ids) :] = 1
    return input_ids, attention


class HfEngine:
    name = "hf"

    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self.version = -1  # until the trainer's first sync, like every engine

    @torch.no_grad()
    def sample(
        self,
        contexts: Sequence[Sequence[int]],
        max_new_tokens: int,
        temperature: float = 1.0,
        top_p: float = 1.0,
        caches: Sequence[KVCache | None] | None = None,
        keep_cache: bool = False,
        max_sentences: int | None = None,
    ) -> list[Sample]:
        """One batched `generate` call over left-padded contexts; replies stop at end-of-turn,
        or once they hold `max_sentences` complete sentences (a stop rule, like a stop string:
        the ids kept are exactly the ids sampled, and the reply is whole rather than cut).

        The log-probs are those of the distribution each id was drawn from (generate's
        processed scores: softmax(logits / temperature), renormalised over the nucleus when
        top_p < 1): the behaviour policy, which the trainer compares with its own pi_old
        (`token_logprobs` with the same temperature and top_p) in the importance weight.

        `caches[i]`, a `KVCache` returned for an earlier prefix of `contexts[i]`, spares
        recomputing that prefix (a dialogue's history, turn after turn); with
        `keep_cache` every Sample carries the cache of its context + reply for next time.
        """
        from transformers import GenerationConfig

        policy = self.policy
        policy.model.eval()
        if not contexts:
            return []
        if temperature <= 0:
            raise ValueError(f"temperature must be > 0 for sampling, got {temperature}")
        input_ids, attention = left_padded(contexts, policy.pad_id)
        width = input_ids.shape[1]
        config = GenerationConfig(
            do_sample=True,
            temperature=temperature,
            top_p=top_p,
            top_k=0,
            max_new_tokens=max_new_tokens,
            eos_token_id=policy.end_of_turn_id,
            pad_token_id=policy.pad_id,
            return_dict_in_generate=True,
            output_scores=True,  # after the temperature and top-p processors: what was sampled from
            cache_implementation="static" if policy.static_cache else None,
        )
        past = self._batch_cache(contexts, caches, width) if caches is not None and not policy.static_cache else None
        input_ids, attention = input_ids.to(policy.device), attention.to(policy.device)
        stopping = [_SentenceLimit(policy, max_sentences, len(contexts))] if max_sentences else None
        with policy.computing():
            out = policy.model.generate(
                input_ids=input_ids,
                attention_mask=attention,
                generation_config=config,
                stopping_criteria=stopping,
                **{_cache_name(): past},
            )
        new = out.sequences[:, width:]
        logprobs = torch.stack(
            [
                torch.log_softmax(step.float(), dim=-1).gather(-1, new[:, k : k + 1]).squeeze(-1)
                for k, step in enumerate(out.scores)
            ],
            dim=1,
        )
        layers = _cache_tensors(getattr(out, _cache_name())) if keep_cache and not policy.static_cache else None
        if layers and layers[0][0].shape[2] != out.sequences.shape[1] - 1:
            layers = None  # a cache that drops positions (sliding window): nothing reusable to hand back
        samples = []
        for row, context in enumerate(contexts):
            ids = new[row].tolist()
            stop = ids.index(policy.end_of_turn_id) + 1 if policy.end_of_turn_id in ids else len(ids)
            by_rule = sentence_stop(reply_text(policy), ids[:stop], max_sentences) if max_sentences else None
            stop = by_rule or stop
            cache = None
            if layers is not None:
                # K/V of the context and every reply token but the last (which was never fed back)
                start, end = width - len(context), width + stop - 1
                cache = KVCache([(k[row, :, start:end].clone(), v[row, :, start:end].clone()) for k, v in layers])
            ended = by_rule is not None or policy.end_of_turn_id in ids[:stop]
            samples.append(Sample(ids[:stop], logprobs[row, :stop].tolist(), not ended, cache))
        return samples

    def _batch_cache(self, contexts: Sequence[Sequence[int]], caches: Sequence[KVCache | None], width: int) -> Any:
        """A left-padded batch cache over the first C columns, C = width - the most new tokens of a row.

        Row i's context is right-aligned at column pad_i = width - len(context_i); its
        cached prefix fills columns pad_i..C (anything it has beyond C is fed again).
        """
        from transformers import DynamicCache

        if len(caches) != len(contexts):
            raise ValueError(f"{len(caches)} caches for {len(contexts)} contexts")
        cached = [0 if c is None else c.length for c in caches]
        for row, (n, context) in enumerate(zip(cached, contexts)):
            if n >= len(context):
                raise ValueError(
                    f"row {row}: a cache of {n} tokens leaves nothing new of a {len(context)}-token context"
                )
        columns = width - max(len(c) - n for c, n in zip(contexts, cached))
        if columns <= 0:
            return None
        template = next(c for c in caches if c is not None).layers
        past = DynamicCache(config=self.policy.model.config)
        for layer, (k0, v0) in enumerate(template):
            keys = k0.new_zeros((len(contexts), k0.shape[0], columns, k0.shape[2]))
            values = v0.new_zeros((len(contexts), v0.shape[0], columns, v0.shape[2]))
            for row, (cache, context) in enumerate(zip(caches, contexts)):
                used = columns - (width - len(context))
                if cache is not None and used > 0:
                    keys[row, :, columns - used :] = cache.layers[layer][0][:, :used]
                    values[row, :, columns - used :] = cache.layers[layer][1][:, :used]
            past.update(keys, values, layer)
        return past

    def greedy(self, contexts: Sequence[Sequence[int]], max_new_tokens: int) -> list[list[int]]:
        """Argmax decoding (single-turn benchmarks at temperature 0): the reply ids, end-of-turn kept."""
        import torch
        from transformers import GenerationConfig

        policy = self.policy
        input_ids, attention = left_padded(contexts, policy.pad_id)
        width = input_ids.shape[1]
        config = GenerationConfig(
            do_sample=False, max_new_tokens=max_new_tokens, eos_token_id=policy.end_of_turn_id, pad_token_id=policy.pad_id
        )
        with torch.no_grad():
            out = policy.model.generate(
                input_ids=input_ids.to(policy.device), attention_mask=attention.to(policy.device), generation_config=config
            )
        return [row[width:].tolist() for row in out]

    def sync(self, version: int) -> SyncStats:
        self.version = version
        return SyncStats(0.0, 0.0, 0)

    def check_version(self, version: int) -> None:
        require_version(self.name, self.version, version)

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "where": "in process, the trainer's torch model (generate)"}

    def close(self) -> None:
        pass
