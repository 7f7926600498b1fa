"""The `hf` engine: the trainer's own torch model samples (transformers `generate`).

It is the policy itself, so a sync moves nothing and its log-probs are the trainer's:
the behaviour policy equals pi_old and the importance weights are exactly 1.
"""

from __future__ import annotations

from collections.abc import Sequence

from mapo.engines.base import SyncStats, require_version
from mapo.policy import KVCache, Policy, Sample


class HfEngine:
    name = "hf"

    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self.version = -1  # until the trainer's first sync, like every engine

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
        return self.policy.sample(
            contexts, max_new_tokens, temperature, top_p, caches=caches, keep_cache=keep_cache, max_sentences=max_sentences
        )

    def greedy(self, contexts: Sequence[Sequence[int]], max_new_tokens: int) -> list[list[int]]:
        """Argmax decoding (single-turn benchmarks at temperature 0): the reply ids, end-of-turn kept."""
        import torch
        from transformers import GenerationConfig

        policy = self.policy
        width = max(len(c) for c in contexts)
        input_ids = torch.full((len(contexts), width), policy.pad_id, dtype=torch.long)
        attention = torch.zeros((len(contexts), width), dtype=torch.long)
        for row, ids in enumerate(contexts):
            input_ids[row, width - len(ids) :] = torch.tensor(list(ids), dtype=torch.long)
            attention[row, width - len(ids) :] = 1
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

    def close(self) -> None:
        pass
