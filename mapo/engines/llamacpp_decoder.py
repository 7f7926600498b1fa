"""The worker's llama.cpp model and context: `slots` KV-cache sequences and what each one holds.

Loaded with llama-cpp-python's low-level API (no `Llama` object): one context of `slots`
sequences with a KV stream each (a sequence attends over its own ids only), a LoRA
adapter swapped in place, and `forward`, which decodes (slot, position, id, wants logits)
items in `llama_decode` calls of at most `batch` ids and hands each call's logits rows
to a callback as a view of llama.cpp's own buffer (no copy of the vocabulary-wide rows).
"""

from __future__ import annotations

import ctypes
import logging
import time
from collections.abc import Callable

import numpy as np

from mapo.engines.amx import use_extra_buffers
from mapo.engines.wire import WorkerError

# a copied slot moves its whole KV buffer (one memcpy, about the cost of prefilling a few ids):
# worth it from this many shared ids on
MIN_SHARED = 8
Item = tuple[int, int, int, bool]  # (slot, position, token id, wants logits)


class ThreadTuner:
    """The thread count that decodes fastest now, by measurement: an average of the seconds per id of
    decode calls for each count from 1 to `most`; every EXPLORE-th call tries
    another count, so the choice follows the machine's load (on a shared CPU one thread can beat two:
    a descheduled thread stalls every barrier of the others)."""

    EXPLORE = 12
    WEIGHT = 0.25  # of the newest measurement in the running average

    def __init__(self, most: int) -> None:
        self.counts = list(range(1, most + 1))
        self.seconds_per_id: dict[int, float] = {}
        self.calls = 0

    def best(self) -> int:
        untried = [n for n in self.counts if n not in self.seconds_per_id]
        if untried:
            return untried[-1]
        return min(self.counts, key=lambda n: self.seconds_per_id[n])

    def choose(self) -> int:
        """The count for the next decode call."""
        self.calls += 1
        best = self.best()
        others = [n for n in self.counts if n != best]
        if others and self.calls % self.EXPLORE == 0:
            return others[(self.calls // self.EXPLORE) % len(others)]
        return best

    def record(self, threads: int, seconds: float, ids: int) -> None:
        old = self.seconds_per_id.get(threads)
        new = seconds / ids
        self.seconds_per_id[threads] = new if old is None else (1 - self.WEIGHT) * old + self.WEIGHT * new


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
        self.forward_s = 0.0  # seconds inside llama_decode, for the breakdown
        self.tuner: ThreadTuner | None = None  # set_threads(..., tune=True): the count is measured
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

    def set_threads(self, threads: int, tune: bool = False) -> None:
        """Decode on `threads` threads, or with `tune` on the count from 1 to `threads` measured fastest."""
        if not tune:
            self.tuner = None
        elif self.tuner is None or self.tuner.counts[-1] != threads:
            self.tuner = ThreadTuner(threads)
        self._use_threads(threads)

    def _use_threads(self, threads: int) -> None:
        if threads != self.threads:
            self.threads = threads
            self.lib.llama_set_n_threads(self.ctx, threads, threads)

    def decode_reply(self, ids: list[int]) -> str:
        """The text of reply ids, as the policy's tokenizer decodes it (special ids skipped)."""
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    def vocabulary(self, ids: list[int]) -> list[str]:
        return [self.lib.llama_vocab_get_text(self.vocab, i).decode("utf-8", errors="replace") for i in ids]

    def check_context(self, context: list[int], room: int) -> None:
        """WorkerError unless `context` is a non-empty list of ids that fits a slot with `room` ids to spare."""
        if not context or len(context) > self.context_per_slot - room:
            raise WorkerError(
                f"a context of {len(context)} ids does not fit a slot of {self.context_per_slot} with room to reply"
            )
        if max(context) >= self.n_vocab or min(context) < 0:
            raise WorkerError(f"a context holds an id outside the vocabulary of {self.n_vocab}")

    # ---- slots

    def best_slot(self, context: list[int], free: list[int]) -> tuple[int, int]:
        """(slot, cached ids it keeps) among `free`: the longest shared prefix (the last id is always
        fed again, for its logits)."""
        shared, slot = max((common_prefix(context, self.cached[s]), -s) for s in free)
        return -slot, min(shared, len(context) - 1)

    def copy_slot(self, source: int, target: int, keep: int) -> None:
        """Make `target` hold the first `keep` ids of `source` (a group's shared opening)."""
        self.lib.llama_memory_seq_cp(self.memory, source, target, -1, -1)
        self.lib.llama_memory_seq_rm(self.memory, target, keep, -1)
        self.cached[target] = self.cached[source][:keep]

    def trim(self, slot: int, keep: int) -> None:
        """Drop what `slot` holds past its first `keep` ids; its record says only what its cache surely
        holds (a decode that fails part-way leaves cells past it, which the next trim removes)."""
        self.lib.llama_memory_seq_rm(self.memory, slot, keep, -1)
        del self.cached[slot][keep:]

    # ---- decoding

    def forward(self, items: list[Item], take: Callable[[np.ndarray, list[int]], None]) -> None:
        """Decode `items` in batches, in order; after each `llama_decode` call `take(rows, slots)` gets the
        logits rows it produced ([len(slots), vocab], a view valid until the next call) and their slots.
        A slot's record grows by an id once llama.cpp decoded it."""
        lib, batch = self.lib, self.batch
        for start in range(0, len(items), self.batch_size):
            chunk = items[start : start + self.batch_size]
            batch.n_tokens = len(chunk)
            for k, (slot, pos, token, want) in enumerate(chunk):
                batch.token[k] = token
                batch.pos[k] = pos
                batch.n_seq_id[k] = 1
                batch.seq_id[k][0] = slot
                batch.logits[k] = want
            # measured on decode steps of at least half the slots (seconds per id of a near-empty step or a
            # long prefill are another matter)
            tuning = self.tuner is not None and self.slots // 2 <= len(chunk) <= self.slots
            if tuning:
                self._use_threads(self.tuner.choose())
            elif self.tuner is not None:
                self._use_threads(self.tuner.best())
            began = time.perf_counter()
            code = lib.llama_decode(self.ctx, batch)
            took = time.perf_counter() - began
            self.forward_s += took
            if tuning:
                self.tuner.record(self.threads, took, len(chunk))
            if code != 0:
                raise WorkerError(f"llama_decode returned {code} (1: the KV cache is full)")
            for slot, _, token, _ in chunk:
                self.cached[slot].append(token)
            wanted = [slot for slot, _, _, want in chunk if want]
            if wanted:
                take(np.ctypeslib.as_array(lib.llama_get_logits(self.ctx), shape=(len(wanted), self.n_vocab)), wanted)

    def close(self) -> None:
        self._free_context()
        if self.model is not None:
            self.lib.llama_model_free(self.model)
            self.model = None
