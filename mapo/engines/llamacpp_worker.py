"""The llama.cpp worker: a child process that samples many sequences together.

Run as ``python -m mapo.engines.llamacpp_worker``; mapo.engines.llamacpp starts it and
talks to it over stdin/stdout in length-prefixed pickle frames (mapo.engines.wire), each
reply carrying its request's id. It runs in a process group of its own, so a Ctrl-C at
the terminal reaches the trainer, which finishes or abandons the request and stops the
worker itself; it also exits when its input closes. Everything the C library prints goes
to stderr, which the parent sends to the engine's log file; the protocol keeps a private
copy of the original stdout.

Requests: `load`, `adapter` / `model` (new weights, with their version), `close`, and two
ways to sample (mapo.engines.llamacpp_batch decodes; it imports no torch):

- `sample`: one turn of a batch of dialogues; every context decodes to its end, one reply.
- `stream`: opens a stream of replies. `add` frames (same id) bring contexts as they
  come (a dialogue's next turn once its environment answered), each decoding in the steps
  of whatever else is in flight; a reply frame goes back as each sequence ends. `finish`
  closes the stream (its reply carries the stream's statistics). Any other request ends a
  stream that was left open (its client gave up on it).

Fault injection for tests: MAPO_TEST_ENGINE_CRASH names a file holding a count; while it is
positive, a `sample` or `stream` request decrements it and the process exits hard part-way
through decoding (as a crash would).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any, BinaryIO

from mapo.engines.llamacpp_batch import Batch, DrawRules, Sequence, sample_all
from mapo.engines.llamacpp_decoder import Decoder
from mapo.engines.wire import Inbox, StaleVersion, WorkerError, write_frame

CRASH_ENV = "MAPO_TEST_ENGINE_CRASH"


def _crash_step(max_new_tokens: int) -> int | None:
    """The decoding step at which a test asked this process to die, or None (MAPO_TEST_ENGINE_CRASH)."""
    path = os.environ.get(CRASH_ENV)
    if not path or not Path(path).is_file():
        return None
    left = int(Path(path).read_text() or 0)
    if left <= 0:
        return None
    Path(path).write_text(str(left - 1))
    return max(1, max_new_tokens // 2)


def _rules(decoder: Decoder, request: dict[str, Any]) -> DrawRules:
    """The request's draw rules, once its weights version and threads are checked and set."""
    if decoder.ctx is None:
        raise WorkerError("no model is loaded (the last load failed)")
    if request["version"] != decoder.version:
        raise StaleVersion(f"weights are version {decoder.version}, the request expects version {request['version']}")
    decoder.set_threads(request["threads"], tune=request.get("tune_threads", False))
    return DrawRules(request["temperature"], request["top_p"], request["max_new_tokens"], request["max_sentences"],
                     request["end_of_turn_id"])


def _reply(sequence: Sequence) -> dict[str, Any]:
    return {"key": sequence.key, "ids": sequence.ids, "logprobs": sequence.logprobs, "ended": sequence.ended}


def sample(decoder: Decoder, request: dict[str, Any]) -> dict[str, Any]:
    """A `sample` request: every context decoded to its end."""
    rules = _rules(decoder, request)
    contexts: list[list[int]] = request["contexts"]
    if len(contexts) > decoder.slots:
        raise WorkerError(f"{len(contexts)} contexts for {decoder.slots} sequence slots")
    for context in contexts:
        decoder.check_context(context, rules.max_new_tokens)
    started = time.perf_counter()
    sequences, stats = sample_all(decoder, contexts, rules, request["seed"], _crash_step(rules.max_new_tokens))
    replies = [_reply(s) for s in sequences]
    return {
        "ids": [r["ids"] for r in replies],
        "logprobs": [r["logprobs"] for r in replies],
        "ended": [r["ended"] for r in replies],
        "version": decoder.version,
        "stats": {**stats, "worker_s": time.perf_counter() - started},
    }


class Stream:
    """An open `stream` request: its batch, id and statistics."""

    def __init__(self, decoder: Decoder, request: dict[str, Any]) -> None:
        self.batch = Batch(decoder, _rules(decoder, request))
        self.id = request["id"]
        self.seed = request["seed"]
        self.crash_at = _crash_step(request["max_new_tokens"])
        self.steps = 0
        self.opened = time.perf_counter()

    def add(self, request: dict[str, Any]) -> None:
        self.batch.add(request["key"], request["context"], (self.seed, *request["key"]))

    def step(self, replies: BinaryIO) -> None:
        if self.steps == self.crash_at:
            os._exit(70)
        self.steps += 1
        for sequence in self.batch.step():
            write_frame(replies, {"ok": True, "id": self.id, **_reply(sequence)})

    def stats(self) -> dict[str, Any]:
        return {**self.batch.stats, "worker_s": time.perf_counter() - self.opened}


def handle(decoder: Decoder | None, request: dict[str, Any]) -> tuple[Decoder | None, dict[str, Any]]:
    """Answer one request outside a stream: the decoder afterwards and the reply's fields."""
    op = request.get("op")
    if op == "load":
        if decoder is not None:
            decoder.close()
        decoder = Decoder(**request["args"])
        return decoder, {"n_vocab": decoder.n_vocab, "vocabulary": decoder.vocabulary(request["check_ids"])}
    if decoder is None:
        raise WorkerError(f"{op!r} before 'load'")
    if op == "adapter":
        decoder.set_adapter(request["path"], request["version"])
        return decoder, {"version": decoder.version}
    if op == "model":
        decoder.set_model(request["path"], request["version"])
        return decoder, {"version": decoder.version}
    if op == "sample":
        return decoder, sample(decoder, request)
    raise WorkerError(f"unknown request {op!r}")


def serve(fd: int, replies: BinaryIO) -> None:
    """Answer requests read from `fd` until `close` or the end of the input; decode an open stream's
    sequences whenever no request is waiting."""
    inbox = Inbox(fd)
    decoder: Decoder | None = None
    stream: Stream | None = None
    while True:
        request = inbox.next()
        if request is None:
            busy = stream is not None and bool(stream.batch.active)
            try:
                if not inbox.receive(0.0 if busy else None):
                    assert stream is not None
                    try:
                        stream.step(replies)
                    except WorkerError as err:
                        write_frame(replies, {"ok": False, "error": str(err), "stale": False, "id": stream.id})
                        stream = None
            except EOFError:
                return
            continue
        op, tag = request.get("op"), {"id": request.get("id")}  # every reply names its request
        try:
            if op in ("add", "finish") and (stream is None or stream.id != request.get("id")):
                continue  # a frame of a stream that already ended (with an error): nothing to answer
            if op == "add":
                stream.add(request)
                continue
            if op == "finish":
                while stream.batch.active:
                    stream.step(replies)
                result: dict[str, Any] = {"finished": True, "stats": stream.stats()}
                stream = None
            else:
                stream = None  # any other request ends a stream its client left open
                if op == "close":
                    if decoder is not None:
                        decoder.close()
                    write_frame(replies, {"ok": True, **tag})
                    return
                if op == "stream":
                    if decoder is None:
                        raise WorkerError("'stream' before 'load'")
                    stream = Stream(decoder, request)
                    result = {"opened": True}
                else:
                    decoder, result = handle(decoder, request)
        except WorkerError as err:
            stream = None
            write_frame(replies, {"ok": False, "error": str(err), "stale": isinstance(err, StaleVersion), **tag})
            continue
        write_frame(replies, {"ok": True, **result, **tag})


def main() -> None:
    replies = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # stray prints from C or Python land in the log
    serve(sys.stdin.fileno(), replies)


if __name__ == "__main__":
    main()
