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

    def sync(self, version: int) -> SyncStats:
        self.version = version
        return SyncStats(0.0, 0.0, 0)

    def check_version(self, version: int) -> None:
        require_version(self.name, self.version, version)

    def close(self) -> None:
        pass
