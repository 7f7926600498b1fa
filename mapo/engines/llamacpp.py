"""The `llamacpp` engine: llama.cpp samples the rollouts, in a worker process of its own.

- Weights: the base model is the policy's GGUF file as shipped (the embedded SmolLM2
  Q4_1) or, for a policy without one, a GGUF written from its torch weights. After
  every optimizer step `sync` writes the trained LoRA adapter as a GGUF adapter and the
  worker swaps it in (`sync: adapter`; a policy training other weights too is refused),
  or writes the whole merged model in the base type (F16, Q8_0, F32: `source` is refused,
  it would re-quantise to 4 bits every step) and the worker reloads it (`sync: merged`,
  also the way for full fine-tuning). Each sync carries the trainer's step as the weights' version; a sample
  request names the version it expects and the worker refuses any other.
- Sampling: mapo.engines.llamacpp_worker (many sequences per decode call, each
  dialogue's earlier turns kept in its KV-cache slot).
- Protocol: every request carries an id that its reply repeats (a reply to a request
  abandoned by a Ctrl-C is dropped, never taken for the next one's); writes and reads
  wait at most `timeout_s`; the worker has its own process group.
- Faults: a worker that dies (or stops answering for `timeout_s`) during a request is
  restarted once, reloaded with the current weights, and the request repeated; if it
  dies again the engine stops with an EngineError naming its log file.
"""

from __future__ import annotations

import atexit
import logging
import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from mapo.engines.base import EngineError, KVCache, Sample, StaleWeightsError, SyncStats, require_version
from mapo.engines.gguf_export import check_architecture, write_lora_adapter, write_model
from mapo.engines.llamacpp_spec import (
    SOURCE,
    LlamaCppSpec,
    engine_threads,
    missing_requirement,
    remove_leftovers,
    resolve_base_type,
)
from mapo.engines.llamacpp_stream import ReplyStream
from mapo.engines.worker_process import WorkerDied, WorkerProcess
from mapo.policy import Policy

log = logging.getLogger("mapo.engines.llamacpp")
WORKER_MODULE = "mapo.engines.llamacpp_worker"


class LlamaCppEngine:
    name = "llamacpp"

    def __init__(
        self,
        policy: Policy,
        slots: int,
        context_per_slot: int,
        spec: LlamaCppSpec | None = None,
        source_gguf: Path | None = None,
        workdir: Path | None = None,
        log_dir: Path | None = None,
        remove_workdir: bool = False,
    ) -> None:
        """`source_gguf`: the GGUF file the policy's base weights came from, if any (used as
        the base with `base_type: source`). `slots` sequences of up to `context_per_slot`
        ids each decode together. The worker's log goes to `log_dir` (default: `workdir`),
        which outlives the engine; the `workdir` (exported weights) is deleted on close when the
        engine made it (None) or `remove_workdir` says so.
        """
        problem = missing_requirement()
        if problem:
            raise EngineError(problem)
        self.spec = spec or LlamaCppSpec()
        self.policy = policy
        self.base_type = resolve_base_type(self.spec.base_type, policy)
        check_architecture(policy.model)
        if self.base_type == SOURCE and source_gguf is None:
            raise EngineError("rollout.llamacpp.base_type=source needs a policy loaded from a GGUF file")
        self.slots, self.context_per_slot = slots, context_per_slot
        self.source_gguf = Path(source_gguf) if source_gguf else None  # its vocabulary goes into exported models
        self._own_workdir = workdir is None or remove_workdir  # deleted again by close()
        self.workdir = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="mapo-llamacpp-"))
        self.workdir.mkdir(parents=True, exist_ok=True)
        if self._own_workdir:
            remove_leftovers(self.workdir)  # a killed run's weights (a resumed run starts here)
        self.log_path = Path(log_dir or self.workdir) / "llamacpp.log"
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        policy.tokenizer.save_pretrained(str(self.workdir / "tokenizer"))
        self.version = -1
        self._weights: dict[str, Any] | None = None  # the last weights loaded, replayed after a restart
        self.restarts = 0
        self.stats: Counter[str] = Counter()
        self.worker = WorkerProcess(WORKER_MODULE, self.log_path, self.spec.timeout_s)
        self.closed = False
        atexit.register(self.close)  # an engine nobody closed still ends its worker and work folder
        try:
            if self.base_type == SOURCE:
                self.base_gguf = Path(source_gguf)
            else:
                self.base_gguf = self._write_base()
            self._start()
        except BaseException:
            self.close()
            raise

    # ---- the worker process

    def _write_base(self) -> Path:
        path = self.workdir / "base.gguf"
        write_model(self.policy.model, self.policy.tokenizer, path, default_type=self.base_type, merge_lora=False,
                    vocabulary=self.source_gguf)
        return path

    def _start(self) -> None:
        """Start the worker, load the base model, and check that it shares the policy's vocabulary."""
        self.worker.start()
        check_ids = sorted({*self.policy.tokenizer.all_special_ids, *range(0, len(self.policy.tokenizer), 997)})
        load = {
            "op": "load",
            "args": {
                "model": str(self.base_gguf),
                "slots": self.slots,
                "context_per_slot": self.context_per_slot,
                "threads": engine_threads(self.spec.threads),
                "batch": self.spec.batch_tokens,
                "tokenizer": str(self.workdir / "tokenizer" / "tokenizer.json"),
            },
            "check_ids": check_ids,
        }
        try:
            reply = self._exchange(load)
        except WorkerDied as err:
            raise EngineError(
                f"the llamacpp engine's worker died while loading {self.base_gguf} ({err}); its log is {self.log_path}"
            ) from None
        expected = self.policy.tokenizer.convert_ids_to_tokens(check_ids)
        wrong = [(i, a, b) for i, a, b in zip(check_ids, reply["vocabulary"], expected) if a != b]
        if reply["n_vocab"] < len(self.policy.tokenizer) or wrong:
            raise EngineError(
                f"the llamacpp engine's model {self.base_gguf} does not share the policy's vocabulary "
                f"({reply['n_vocab']} vs {len(self.policy.tokenizer)} tokens; first differing id: {wrong[:1]})"
            )

    @property
    def process(self) -> Any:
        """The worker's subprocess.Popen (None while stopped)."""
        return self.worker.process

    def _exchange(self, message: dict[str, Any]) -> dict[str, Any]:
        """One request and its reply; WorkerDied when the process is gone or hangs, EngineError
        (StaleWeightsError for a version mismatch) when the worker refuses it."""
        if self.closed:
            raise EngineError("the llamacpp engine is closed")
        reply = self.worker.exchange(message)
        self.check_reply(message["op"], reply)
        return reply

    def check_reply(self, op: str, reply: dict[str, Any]) -> None:
        """EngineError (StaleWeightsError for a version mismatch) when the worker refused a request."""
        if not reply.get("ok"):
            error = reply.get("error", "no reason given")
            kind = StaleWeightsError if reply.get("stale") else EngineError
            raise kind(f"the llamacpp engine refused {op!r}: {error} (log: {self.log_path})")

    def _request(self, message: dict[str, Any]) -> dict[str, Any]:
        """`_exchange` with one restart: a worker that dies is started again, reloaded, and asked again."""
        try:
            return self._exchange(message)
        except WorkerDied as first:
            self.restart(first)
            try:
                return self._exchange(message)
            except WorkerDied as second:
                raise self.died_again(second) from None

    def restart(self, why: WorkerDied) -> None:
        """Start a worker again after `why`, with the last synced weights; EngineError if it dies again."""
        log.warning("the llamacpp engine's worker died (%s); restarting it once (log: %s)", why, self.log_path)
        self.restarts += 1
        try:
            self._start()
            if self._weights is not None:
                self._exchange(self._weights)
        except WorkerDied as second:
            raise self.died_again(second) from None

    def died_again(self, why: WorkerDied) -> EngineError:
        return EngineError(
            f"the llamacpp engine's worker process died again after a restart ({why}); its log is {self.log_path}"
        )

    def close(self) -> None:
        """Stop the worker (politely, then by force); delete the working folder if the engine made it."""
        atexit.unregister(self.close)
        self.closed = True
        self.worker.close()
        if self._own_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> LlamaCppEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- weights

    def sync(self, version: int) -> SyncStats:
        """Bring the policy's current weights to the worker as `version`; EngineError if that fails."""
        self.version = -1  # until the worker confirms, no version is served
        started = time.perf_counter()
        path: Path | None = None
        if self.spec.sync == "adapter" and not self.policy.lora:
            # no adapter: the base holds the weights (written from them, or their source file); weights
            # that change without LoRA (full fine-tuning) need sync=merged, which the trainer picks
            message = {"op": "adapter", "path": None, "version": version}
        elif self.spec.sync == "adapter":
            path = write_lora_adapter(self.policy.model, self.workdir / f"adapter-{version}.gguf")
            message = {"op": "adapter", "path": str(path), "version": version}
        else:  # never base_type=source (LlamaCppSpec refuses it): no re-quantising to 4 bits every step
            path = write_model(
                self.policy.model, self.policy.tokenizer, self.workdir / f"model-{version}.gguf",
                default_type=self.base_type, vocabulary=self.source_gguf,
            )
            message = {"op": "model", "path": str(path), "version": version}
        exported = time.perf_counter()
        reply = self._request(message)
        loaded = time.perf_counter()
        previous, self._weights = self._weights, message
        if previous is not None and previous["path"] not in (None, message["path"]):
            Path(previous["path"]).unlink(missing_ok=True)
        self.version = int(reply["version"])
        return SyncStats(exported - started, loaded - exported, path.stat().st_size if path else 0)

    def check_version(self, version: int) -> None:
        require_version(self.name, self.version, version)

    # ---- sampling

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
        """`Policy.sample`'s contract, sampled by llama.cpp. `caches` and `keep_cache` are not
        needed: the worker keeps each dialogue's prefix in its KV cache by itself.

        The seed comes from torch's generator, so a seeded trainer samples reproducibly.
        """
        if temperature <= 0:
            raise ValueError(f"temperature must be > 0 for sampling, got {temperature}")
        return self._generate(contexts, max_new_tokens, temperature, top_p, max_sentences)

    def greedy(self, contexts: Sequence[Sequence[int]], max_new_tokens: int) -> list[list[int]]:
        """Argmax decoding (single-turn benchmarks at temperature 0): the reply ids, end-of-turn kept."""
        return [s.ids for s in self._generate(contexts, max_new_tokens, 0.0, 1.0, None)]

    def _rules(self, max_new_tokens: int, temperature: float, top_p: float, max_sentences: int | None) -> dict[str, Any]:
        """A sampling request's fields: how to draw, where to stop, which weights and threads."""
        return {
            "max_new_tokens": max_new_tokens,
            "temperature": temperature,
            "top_p": top_p,
            "max_sentences": max_sentences,
            "end_of_turn_id": self.policy.end_of_turn_id,
            "seed": int(torch.randint(0, 2**62, ()).item()),  # from torch's generator: a seeded run repeats
            "threads": engine_threads(self.spec.threads),
            "tune_threads": self.spec.threads is None,  # null: up to every usable core, the fastest count
            "version": self.version,  # the worker refuses to sample from any other weights
        }

    def count(self, worker_stats: dict[str, float], client_s: float) -> None:
        """Add a request's worker statistics to `stats`; the client's waiting beyond the worker's own
        time is the round trip (pickling, pipes, waking up)."""
        self.stats.update(worker_stats)
        self.stats["round_trip_s"] += max(0.0, client_s - worker_stats.get("worker_s", 0.0))

    def _generate(
        self, contexts: Sequence[Sequence[int]], max_new_tokens: int, temperature: float, top_p: float,
        max_sentences: int | None,
    ) -> list[Sample]:
        samples: list[Sample] = []
        for start in range(0, len(contexts), self.slots):
            chunk = [list(c) for c in contexts[start : start + self.slots]]
            began = time.perf_counter()
            reply = self._request(
                {"op": "sample", "contexts": chunk, **self._rules(max_new_tokens, temperature, top_p, max_sentences)}
            )
            self.count(reply["stats"], time.perf_counter() - began)
            for ids, logprobs, ended in zip(reply["ids"], reply["logprobs"], reply["ended"]):
                samples.append(Sample(ids, logprobs, truncated=not ended))
        return samples

    def stream(
        self, max_new_tokens: int, temperature: float = 1.0, top_p: float = 1.0, max_sentences: int | None = None
    ) -> ReplyStream:
        """A stream of replies: `add` contexts as they come, `take` replies as they end (continuous
        batching across dialogues and turns); the engine keeps one stream open at a time."""
        if temperature <= 0:
            raise ValueError(f"temperature must be > 0 for sampling, got {temperature}")
        return ReplyStream(self, self._rules(max_new_tokens, temperature, top_p, max_sentences))
