"""The llama.cpp worker: a child process that samples many sequences together.

Run as ``python -m mapo.engines.llamacpp_worker``; mapo.engines.llamacpp starts it and
talks to it over stdin/stdout in length-prefixed pickle frames (one request, one
reply, carrying the request's id). It runs in a process group of its own, so a Ctrl-C
at the terminal reaches the trainer, which finishes or abandons the request and stops
the worker itself; it also exits when its input closes. Everything the C library
prints goes to stderr, which the parent sends to the engine's log file; the protocol
keeps a private copy of the original stdout.

What it does per `sample` request (one turn of a batch of dialogues):

- every context gets a sequence slot of the KV cache: the slot whose cached ids share
  the longest prefix with it (a dialogue's earlier turns are already there), and only
  the ids after that prefix are decoded (prefix reuse); contexts that share a longer
  prefix with another context of the request (the N samples of a scenario open with the
  same prompt) copy that context's slot once it is prefilled instead;
- all sequences then decode together, one token each per `llama_decode` call;
- tokens are drawn in numpy from softmax(logits / temperature) (top-p optional) with
  the request's seed, and the log-probability recorded is that of the tempered softmax:
  the same quantity the trainer computes, from this engine's own logits;
- a reply stops at the end-of-turn id, at `max_sentences` sentences (mapo.text.count_sentences,
  decoding with the policy's own tokenizer.json) or at `max_new_tokens`.

It imports no torch. Fault injection for tests: MAPO_TEST_ENGINE_CRASH names a file
holding a count; while it is positive, a `sample` request decrements it and the
process exits hard halfway through decoding (as a crash would).
"""

from __future__ import annotations

import ctypes
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from mapo.engines.amx import use_extra_buffers
from mapo.engines.sampling import draw
from mapo.engines.wire import StaleVersion, WorkerError, read_frame, write_frame
from mapo.text import count_sentences

# a copied slot moves its whole KV buffer (one memcpy, about the cost of prefilling a few ids):
# worth it from this many shared ids on
MIN_SHARED = 8
CRASH_ENV = "MAPO_TEST_ENGINE_CRASH"


def common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    if n == 0:
        return 0
    differ = np.asarray(a[:n]) != np.asarray(b[:n])
    return int(np.argmax(differ)) if differ.any() else n


class Decoder:
    """A llama.cpp model and context with `slots` sequences, plus what each slot's cache holds."""

    def __init__(self, model: str, slots: int, context_per_slot: int, threads: int, batch: int, tokenizer: str) -> None:
        import llama_cpp
        from tokenizers import Tokenizer

        self.lib = llama_cpp
        logging.getLogger("llama-cpp-python").setLevel(logging.WARNING)
        llama_cpp.llama_backend_init()
        self.slots, self.context_per_slot, self.threads, self.batch_size = slots, context_per_slot, threads, batch
        self.tokenizer = Tokenizer.from_file(tokenizer)
        self.model = self.ctx = self.batch = None
        self.adapter = None
        self.version = -1
        self._load_model(model)

    # ---- model, context, adapter

    def _load_model(self, path: str) -> None:
        lib = self.lib
        self._free_context()
        if self.model is not None:
            lib.llama_model_free(self.model)
            self.model = None
        params = lib.llama_model_default_params()
        params.n_gpu_layers = 0
        params.use_extra_bufts = params.use_extra_bufts and use_extra_buffers()  # mapo.engines.amx
        model = lib.llama_model_load_from_file(path.encode(), params)
        if not model:
            raise WorkerError(f"llama.cpp could not load the model {path}")
        self.model = model
        self.vocab = lib.llama_model_get_vocab(model)
        self.n_vocab = int(lib.llama_vocab_n_tokens(self.vocab))
        cparams = lib.llama_context_default_params()
        cparams.n_ctx = self.slots * self.context_per_slot
        cparams.n_batch = self.batch_size
        cparams.n_ubatch = self.batch_size
        cparams.n_seq_max = self.slots
        cparams.n_threads = self.threads
        cparams.n_threads_batch = self.threads
        cparams.kv_unified = False  # one KV stream per slot: a sequence attends over its own tokens only
        cparams.no_perf = True
        ctx = lib.llama_init_from_model(model, cparams)
        if not ctx:
            raise WorkerError(f"llama.cpp could not create a context of {self.slots} x {self.context_per_slot} tokens")
        self.ctx = ctx
        self.memory = lib.llama_get_memory(ctx)
        self.batch = lib.llama_batch_init(self.batch_size, 0, 1)
        self.cached: list[list[int]] = [[] for _ in range(self.slots)]

    def _free_context(self) -> None:
        lib = self.lib
        if self.batch is not None:
            lib.llama_batch_free(self.batch)
            self.batch = None
        if self.ctx is not None:
            lib.llama_free(self.ctx)
            self.ctx = None
        if self.adapter is not None:
            lib.llama_adapter_lora_free(self.adapter)
            self.adapter = None

    def clear(self) -> None:
        """Forget every cached sequence (new weights make cached keys/values stale)."""
        self.lib.llama_memory_clear(self.memory, True)
        self.cached = [[] for _ in range(self.slots)]

    def set_adapter(self, path: str | None, version: int) -> None:
        lib = self.lib
        old = self.adapter
        if path is None:
            lib.llama_set_adapters_lora(self.ctx, None, 0, None)
            self.adapter = None
        else:
            adapter = lib.llama_adapter_lora_init(self.model, path.encode())
            if not adapter:
                raise WorkerError(f"llama.cpp could not load the LoRA adapter {path} (see the log above)")
            adapters = (lib.llama_adapter_lora_p_ctypes * 1)(adapter)
            scales = (ctypes.c_float * 1)(1.0)
            if lib.llama_set_adapters_lora(self.ctx, adapters, 1, scales) != 0:
                lib.llama_adapter_lora_free(adapter)
                raise WorkerError(f"llama.cpp refused the LoRA adapter {path}")
            self.adapter = adapter
        if old is not None:
            lib.llama_adapter_lora_free(old)
        self.clear()
        self.version = version

    def set_model(self, path: str, version: int) -> None:
        self.version = -1  # a failed load leaves no version that could pass a check
        self._load_model(path)
        self.version = version

    def vocabulary(self, ids: list[int]) -> list[str]:
        return [self.lib.llama_vocab_get_text(self.vocab, i).decode("utf-8", errors="replace") for i in ids]

    # ---- decoding

    def _decode(self, items: list[tuple[int, int, int, bool]]) -> dict[int, np.ndarray]:
        """Feed (slot, position, token, want logits) items in batches; the logits asked for, by slot."""
        lib, batch = self.lib, self.batch
        out: dict[int, np.ndarray] = {}
        for start in range(0, len(items), self.batch_size):
            chunk = items[start : start + self.batch_size]
            batch.n_tokens = len(chunk)
            for k, (slot, pos, token, want) in enumerate(chunk):
                batch.token[k] = token
                batch.pos[k] = pos
                batch.n_seq_id[k] = 1
                batch.seq_id[k][0] = slot
                batch.logits[k] = want
            code = lib.llama_decode(self.ctx, batch)
            if code != 0:
                raise WorkerError(f"llama_decode returned {code} (1: the KV cache is full)")
            wanted = [slot for slot, _, _, want in chunk if want]
            if wanted:
                rows = np.ctypeslib.as_array(lib.llama_get_logits(self.ctx), shape=(len(wanted), self.n_vocab))
                for row, slot in enumerate(wanted):
                    out[slot] = rows[row].copy()
        return out

    def _assign(self, contexts: list[list[int]]) -> list[tuple[int, int]]:
        """(slot, cached ids kept) per context: longest shared prefix first, each slot used once."""
        pairs = sorted(
            ((common_prefix(c, self.cached[s]), i, s) for i, c in enumerate(contexts) for s in range(self.slots)),
            reverse=True,
        )
        chosen: dict[int, tuple[int, int]] = {}
        used: set[int] = set()
        for shared, i, s in pairs:
            if i in chosen or s in used:
                continue
            chosen[i] = (s, min(shared, len(contexts[i]) - 1))  # the last id is fed again for its logits
            used.add(s)
        return [chosen[i] for i in range(len(contexts))]

    def _donors(self, contexts: list[list[int]], plan: list[tuple[int, int]]) -> dict[int, tuple[int, int]]:
        """{receiver: (donor, shared ids)}: contexts that gain MIN_SHARED ids or more by copying the
        slot of another context of this request (which is prefilled first) instead of their own."""
        donors: dict[int, tuple[int, int]] = {}
        givers: list[int] = []
        for i, context in enumerate(contexts):
            best = max(((common_prefix(context, contexts[j]), j) for j in givers), default=(0, -1))
            if best[0] - plan[i][1] >= MIN_SHARED:
                donors[i] = (best[1], best[0])
            else:
                givers.append(i)
        return donors

    def sample(self, request: dict[str, Any]) -> dict[str, Any]:
        contexts: list[list[int]] = request["contexts"]
        if self.ctx is None:
            raise WorkerError("no model is loaded (the last load failed)")
        if request["version"] != self.version:
            raise StaleVersion(f"weights are version {self.version}, the request expects version {request['version']}")
        if len(contexts) > self.slots:
            raise WorkerError(f"{len(contexts)} contexts for {self.slots} sequence slots")
        limit = self.context_per_slot - request["max_new_tokens"]
        for c in contexts:
            if not c or len(c) > limit:
                raise WorkerError(f"a context of {len(c)} ids does not fit a slot of {self.context_per_slot} with room to reply")
            if max(c) >= self.n_vocab or min(c) < 0:
                raise WorkerError(f"a context holds an id outside the vocabulary of {self.n_vocab}")
        if request["threads"] != self.threads:
            self.threads = request["threads"]
            self.lib.llama_set_n_threads(self.ctx, self.threads, self.threads)
        started = time.perf_counter()
        crash_at = _crash_step(request["max_new_tokens"])
        plan = self._assign(contexts)
        donors = self._donors(contexts, plan)
        logits: dict[int, np.ndarray] = {}
        prefilled_ids = copied = 0
        # first the contexts that are prefilled from their own slot, then those that start from a
        # copy of another context's slot (a group's N dialogues open with the same prompt)
        for wave in ([i for i in range(len(contexts)) if i not in donors], sorted(donors)):
            prefill: list[tuple[int, int, int, bool]] = []
            for i in wave:
                context, (slot, keep) = contexts[i], plan[i]
                if i in donors:
                    donor, shared = donors[i]
                    self.lib.llama_memory_seq_cp(self.memory, plan[donor][0], slot, -1, -1)
                    copied += min(shared, len(context) - 1) - keep
                    keep = min(shared, len(context) - 1)
                    plan[i] = (slot, keep)
                self.lib.llama_memory_seq_rm(self.memory, slot, keep, -1)
                # the slot's record says only what its cache surely holds: a decode that fails
                # part-way leaves cells past it, which the next request's seq_rm trims
                self.cached[slot] = list(context[:keep])
                prefill += [(slot, p, context[p], p == len(context) - 1) for p in range(keep, len(context))]
            logits.update(self._decode(prefill))
            for i in wave:
                self.cached[plan[i][0]] = list(contexts[i])
            prefilled_ids += len(prefill)
        prefilled = time.perf_counter()
        rng = np.random.default_rng(request["seed"])
        eot, max_sentences = request["end_of_turn_id"], request["max_sentences"]
        replies: list[list[int]] = [[] for _ in contexts]
        logprobs: list[list[float]] = [[] for _ in contexts]
        ended = [False] * len(contexts)
        active = list(range(len(contexts)))
        for step in range(request["max_new_tokens"]):
            if step == crash_at:
                os._exit(70)
            rows = np.stack([logits[plan[i][0]] for i in active])
            tokens, token_logprobs = draw(rows, request["temperature"], request["top_p"], rng)
            going = []
            for i, token, logprob in zip(active, tokens.tolist(), token_logprobs.tolist()):
                replies[i].append(token)
                logprobs[i].append(logprob)
                if token == eot:
                    ended[i] = True
                elif max_sentences and count_sentences(self.tokenizer.decode(replies[i], skip_special_tokens=True)) >= max_sentences:
                    ended[i] = True
                elif len(replies[i]) < request["max_new_tokens"]:
                    going.append(i)
            if not going:
                break
            feed = [(plan[i][0], len(self.cached[plan[i][0]]), replies[i][-1], True) for i in going]
            logits = self._decode(feed)
            for slot, _, token, _ in feed:  # recorded once the cache holds it
                self.cached[slot].append(token)
            active = going
        done = time.perf_counter()
        return {
            "ids": replies,
            "logprobs": logprobs,
            "ended": ended,
            "version": self.version,
            "prefill_tokens": prefilled_ids,
            "reused_tokens": sum(keep for _, keep in plan),
            "copied_tokens": copied,
            "prefill_s": prefilled - started,
            "decode_s": done - prefilled,
        }

    def close(self) -> None:
        self._free_context()
        if self.model is not None:
            self.lib.llama_model_free(self.model)
            self.model = None


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


def serve(requests: BinaryIO, replies: BinaryIO) -> None:
    """Answer requests until `close` or the end of the input stream."""
    decoder: Decoder | None = None
    while (request := read_frame(requests)) is not None:
        op = request.get("op")
        tag = {"id": request.get("id")}  # every reply names its request: the parent drops stale ones
        try:
            if op == "load":
                decoder = Decoder(**request["args"])
                result: Any = {"n_vocab": decoder.n_vocab, "vocabulary": decoder.vocabulary(request["check_ids"])}
            elif decoder is None:
                raise WorkerError(f"{op!r} before 'load'")
            elif op == "adapter":
                decoder.set_adapter(request["path"], request["version"])
                result = {"version": decoder.version}
            elif op == "model":
                decoder.set_model(request["path"], request["version"])
                result = {"version": decoder.version}
            elif op == "sample":
                result = decoder.sample(request)
            elif op == "close":
                decoder.close()
                write_frame(replies, {"ok": True, **tag})
                return
            else:
                raise WorkerError(f"unknown request {op!r}")
        except WorkerError as err:
            write_frame(replies, {"ok": False, "error": str(err), "stale": isinstance(err, StaleVersion), **tag})
            continue
        write_frame(replies, {"ok": True, **result, **tag})


def main() -> None:
    replies = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # stray prints from C or Python land in the log
    serve(sys.stdin.buffer, replies)


if __name__ == "__main__":
    main()
