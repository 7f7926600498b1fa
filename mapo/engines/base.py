"""The rollout engine contract: token ids in, sampled token ids and their log-probs out.

An engine samples replies for the rollout; the trainer's policy keeps the chat
rendering (prompt ids are built by `Policy.first_prompt_ids` / `next_prompt_ids`) and
trains on exactly the ids the engine returned. Text is never re-tokenised.

Weights: after every optimizer step the trainer calls `sync(version)` with its step
number; before a rollout it calls `check_version(step)`, and an engine whose weights
are not that version raises `StaleWeightsError` instead of sampling from an old policy.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import torch


@dataclass
class KVCache:
    """One sequence's attention keys/values per layer ([kv_heads, tokens, head_dim] each)."""

    layers: list[tuple[torch.Tensor, torch.Tensor]]

    @property
    def length(self) -> int:
        return int(self.layers[0][0].shape[1])


@dataclass
class Sample:
    """One sampled reply: its ids (with the end-of-turn id if it stopped) and their log-probs.

    `cache`, when requested, covers the context and every reply id but the last.
    """

    ids: list[int]
    logprobs: list[float]
    truncated: bool  # cut by the token cap: neither the end-of-turn id nor the sentence limit was reached
    cache: KVCache | None = None


class EngineError(RuntimeError):
    """The engine cannot serve (its process died twice, a sync failed, a request was refused)."""


class StaleWeightsError(EngineError):
    """The engine's weights are not the version the trainer expects."""


@dataclass(frozen=True)
class SyncStats:
    """One weight sync: seconds to export the trainer's weights, to load them, and bytes moved."""

    export_s: float
    load_s: float
    bytes: int

    def as_metrics(self) -> dict[str, float]:
        return {
            "sync_export_s": self.export_s,
            "sync_load_s": self.load_s,
            "sync_s": self.export_s + self.load_s,
            "sync_mb": self.bytes / 1e6,
        }


class RolloutEngine(Protocol):
    """What the rollout and the trainer use (`sample`: see HfEngine.sample, the reference)."""

    name: str
    version: int

    def sample(
        self,
        contexts: Sequence[Sequence[int]],
        max_new_tokens: int,
        temperature: float = 1.0,
        top_p: float = 1.0,
        caches: Sequence[KVCache | None] | None = None,
        keep_cache: bool = False,
        max_sentences: int | None = None,
    ) -> list[Sample]: ...

    def greedy(self, contexts: Sequence[Sequence[int]], max_new_tokens: int) -> list[list[int]]: ...

    def sync(self, version: int) -> SyncStats: ...

    def check_version(self, version: int) -> None: ...

    def describe(self) -> dict[str, Any]:
        """What samples: the engine's name and the settings it runs with (logged in the run folder)."""
        ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class ReplyRequest:
    """One reply to sample on its own schedule (`ContinuousEngine.submit`): the context's ids, the
    stop rules, and the seed of its draw (a dialogue's turn: the same seed, the same reply)."""

    key: Hashable
    context: Sequence[int]
    max_new_tokens: int
    temperature: float
    top_p: float
    max_sentences: int | None
    seed: int


@runtime_checkable
class ContinuousEngine(RolloutEngine, Protocol):
    """An engine that batches continuously: a reply joins the running batch when it is submitted
    and leaves it when it ends, so a dialogue's next turn starts while others still decode, rather
    than every turn waiting for the longest reply of its wave (mapo.core.rollout uses it when the
    engine has it)."""

    def submit(self, requests: Sequence[ReplyRequest]) -> None:
        """Add `requests` to the running batch."""
        ...

    def finished(self) -> list[tuple[Hashable, Sample]]:
        """Decode until at least one submitted reply ends; (key, sample) of those that did, [] when
        none is left. An EngineError leaves no request behind."""
        ...

    def cancel(self) -> None:
        """Drop every submitted reply not returned yet (an interrupted rollout)."""
        ...


def require_version(engine_name: str, have: int, want: int) -> None:
    if have != want:
        raise StaleWeightsError(
            f"the {engine_name} engine serves weights of step {have}, but the trainer is at step {want}: "
            "the last weight sync did not complete, so sampling would use a stale policy"
        )
