"""A stream of replies from the llama.cpp worker: contexts go in as they come, replies come back as they end.

The rollout adds every dialogue's first prompt, then each dialogue's next prompt as soon as its
environment answered; meanwhile the worker decodes whatever is in flight, so its batch stays
full instead of idling to the end of each turn's longest reply (continuous batching across
dialogues and turns). A context's key names it (dialogue, turn) and seeds its draws, so what a
dialogue samples does not depend on the timing of the others.

A worker that dies while the stream is open is restarted once (mapo.engines.llamacpp) and every
context whose reply had not come back is added again; a second death is an EngineError.
"""

from __future__ import annotations

import select
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from mapo.engines.base import EngineError, Sample
from mapo.engines.worker_process import WorkerDied, WorkerProcess

Key = tuple[int, ...]
T = TypeVar("T")


class StreamingEngine(Protocol):
    """What a stream needs of its engine (mapo.engines.llamacpp.LlamaCppEngine): the worker, its
    reply check, one restart, and the statistics the replies add to."""

    worker: WorkerProcess
    closed: bool
    stats: Any

    def check_reply(self, op: str, reply: dict[str, Any]) -> None: ...

    def restart(self, why: WorkerDied) -> None: ...

    def died_again(self, why: WorkerDied) -> EngineError: ...


class ReplyStream:
    """An open `stream` request; `add` contexts, `take` finished replies, `finish` when done."""

    def __init__(self, engine: StreamingEngine, rules: dict[str, Any]) -> None:
        self.engine, self.rules = engine, rules
        self.pending: dict[Key, list[int]] = {}  # added, reply not yet taken
        self.restarted = False
        self.stream_id = 0
        self._guarded(self._open, again=False)

    def _open(self) -> None:
        worker = self.engine.worker
        if self.engine.closed:
            raise EngineError("the llamacpp engine is closed")
        self.stream_id = worker.request({"op": "stream", **self.rules})
        reply = worker.reply(self.stream_id)
        assert reply is not None
        self.engine.check_reply("stream", reply)
        for key, context in self.pending.items():
            self._send_add(key, context)

    def _send_add(self, key: Key, context: list[int]) -> None:
        worker = self.engine.worker
        worker.send({"op": "add", "id": self.stream_id, "key": key, "context": context}, worker.deadline())

    def _guarded(self, action: Callable[[], T], again: bool = True) -> T | None:
        """`action`, and after a worker death one restart, the stream reopened, its pending contexts
        added again, and (`again`) `action` once more."""
        try:
            return action()
        except WorkerDied as first:
            self.engine.worker.kill()
            if self.restarted:
                raise self.engine.died_again(first) from None
            self.restarted = True
            self.engine.restart(first)
            try:
                self._open()
                return action() if again else None
            except WorkerDied as second:
                self.engine.worker.kill()
                raise self.engine.died_again(second) from None

    def add(self, key: Key, context: list[int]) -> None:
        """Queue `context` (ids) under `key`, a tuple of ints that also seeds its draws."""
        if key in self.pending:
            raise ValueError(f"a context with key {key} is already in the stream")
        self.pending[key] = list(context)
        self._guarded(lambda: self._send_add(key, self.pending[key]), again=False)  # reopening adds it

    def take(self, wake_fd: int | None = None) -> list[tuple[Key, Sample]]:
        """The replies that ended, at least one unless `wake_fd` turns readable first (then maybe none)
        or nothing is pending and no `wake_fd` is given."""
        if not self.pending and wake_fd is None:
            return []
        return self._guarded(lambda: self._take(wake_fd)) or []

    def _take(self, wake_fd: int | None) -> list[tuple[Key, Sample]]:
        worker = self.engine.worker
        frames = []
        if self.pending:
            frame = worker.reply(self.stream_id, wake_fd=wake_fd)
        else:  # every dialogue is with its environment: wait for one to come back
            select.select([wake_fd], [], [])
            frame = None
        while frame is not None:
            self.engine.check_reply("stream", frame)
            frames.append(frame)
            frame = worker.ready(self.stream_id)
        taken = []
        for frame in frames:
            key = tuple(frame["key"])
            del self.pending[key]
            taken.append((key, Sample(frame["ids"], frame["logprobs"], truncated=not frame["ended"])))
        return taken

    def finish(self) -> dict[str, float]:
        """Close the stream; its worker statistics (returned) go to the engine's `stats` too."""
        if self.pending:
            raise ValueError(f"{len(self.pending)} contexts of the stream have not been taken")

        def close() -> dict[str, Any]:
            worker = self.engine.worker
            worker.send({"op": "finish", "id": self.stream_id}, worker.deadline())
            reply = worker.reply(self.stream_id)
            assert reply is not None
            return reply

        reply = self._guarded(close)
        assert reply is not None
        self.engine.check_reply("stream", reply)
        self.engine.stats.update(reply["stats"])
        return reply["stats"]
