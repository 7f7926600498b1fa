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
import os
import pickle
import select
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

import mapo
from mapo.engines.base import EngineError, StaleWeightsError, SyncStats, require_version
from mapo.engines.gguf_export import check_architecture, write_lora_adapter, write_model
from mapo.engines.wire import HEADER, frame_bytes
from mapo.policy import KVCache, Policy, Sample
from mapo.runtime import IDLE, check_threads, usable_cores

log = logging.getLogger("mapo.engines.llamacpp")
SYNC_MODES = ("adapter", "merged")
SOURCE = "source"
AUTO = "auto"
BASE_TYPES = ("F32", "F16", "BF16", "Q8_0")  # Q4_0 re-quantised from Q4_1 weights: KL 0.58 to torch, unusable
MERGED_FROM_SOURCE = (
    "rollout.llamacpp.sync=merged with base_type=source would re-quantise the merged weights to the shipped "
    "file's 4-bit types after every step, so small updates vanish and the engine lags the trainer; set "
    "rollout.llamacpp.base_type to F16 (what torch computes), Q8_0 or F32"
)
# what the engine writes into its working folder; a killed run's leftovers are removed at start
WORKDIR_FILES = ("base.gguf", "adapter-*.gguf", "model-*.gguf", "*.tmp")


@dataclass
class LlamaCppSpec:
    """The llama.cpp engine's knobs (the `rollout.llamacpp` config section)."""

    # sequences decode on this many threads; None: every core the process may use; "idle": the
    # cores idle right now, per request (for a shared CPU: a thread more than the idle cores
    # stalls every barrier, 2 threads on 2 busy cores decoded 10x slower than 1 there)
    threads: int | str | None = None
    sync: str = "adapter"  # adapter: LoRA as a GGUF adapter | merged: whole model in base_type, reloaded
    # the base model llama.cpp runs: "source" = the policy's GGUF file as shipped, or a tensor
    # type (F16, BF16, Q8_0, F32) to write from the torch weights; "auto" = BF16 when the policy
    # computes in bfloat16 (bf16-mixed: BF16 decodes faster and its KL to that policy is F16's),
    # else F16 (KL 1e-5 to a float32 policy on SmolLM2; BF16 20x more). docs/engines.md
    base_type: str = AUTO
    batch_tokens: int = 512  # ids per llama_decode call while prefilling
    timeout_s: float = 900.0  # a request unanswered this long counts as a dead worker

    def __post_init__(self) -> None:
        if self.sync not in SYNC_MODES:
            raise ValueError(f"rollout.llamacpp.sync must be one of {', '.join(SYNC_MODES)}, got {self.sync!r}")
        if self.base_type not in (AUTO, SOURCE, *BASE_TYPES):
            raise ValueError(
                f"rollout.llamacpp.base_type must be {AUTO!r}, {SOURCE!r} or one of {', '.join(BASE_TYPES)}, got {self.base_type!r}"
            )
        if self.sync == "merged" and self.base_type == SOURCE:
            raise ValueError(MERGED_FROM_SOURCE)
        check_threads(self.threads, "rollout.llamacpp.threads")
        if self.batch_tokens < 1 or not self.timeout_s > 0:
            raise ValueError("rollout.llamacpp.batch_tokens must be >= 1 and timeout_s > 0")


def resolve_base_type(base_type: str, policy: Policy) -> str:
    """The base type to run: as configured, or for `auto` BF16 under a bfloat16-computing policy, else F16."""
    if base_type != AUTO:
        return base_type
    return "BF16" if policy.compute_dtype is torch.bfloat16 else "F16"


def engine_threads(threads: int | str | None) -> int:
    """The threads of one request: as configured, every usable core (None), or the idle ones (`idle`)."""
    if threads is None:
        return usable_cores()
    return idle_cores() if threads == IDLE else int(threads)


def idle_cores() -> int:
    """Usable CPU cores not running anything else right now (at least 1): cores - (running threads - this one)."""
    cores = usable_cores()
    try:
        running = int(Path("/proc/loadavg").read_text().split()[3].split("/")[0])
    except (OSError, IndexError, ValueError):
        running = int(os.getloadavg()[0] + 0.5) + 1
    return max(1, min(cores, cores - (running - 1)))


def missing_requirement() -> str | None:
    """Why the engine cannot run here (a message), or None when it can."""
    import importlib.util

    if importlib.util.find_spec("llama_cpp") is None:
        return "llama-cpp-python is not installed (pip install 'llama-cpp-python>=0.3', or scripts/install.sh)"
    return None


def remove_leftovers(workdir: Path) -> None:
    """Delete the weight files (and half-written .tmp files) an engine left in `workdir`."""
    for pattern in WORKDIR_FILES:
        for path in Path(workdir).glob(pattern):
            path.unlink(missing_ok=True)
    shutil.rmtree(Path(workdir) / "tokenizer", ignore_errors=True)


class _WorkerDied(Exception):
    """The worker exited or stopped answering; the message says how."""


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
        self.process: subprocess.Popen[bytes] | None = None
        self._inbox = bytearray()  # reply bytes read but not yet a whole frame
        self._last_id = 0
        self._closed = False
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
        package_root = str(Path(mapo.__file__).resolve().parents[1])
        env = {
            # OpenMP threads that wait passively: a spinning thread on a busy core stalls the others
            "OMP_WAIT_POLICY": "PASSIVE",
            **os.environ,
            "PYTHONPATH": os.pathsep.join(filter(None, [package_root, os.environ.get("PYTHONPATH")])),
        }
        with open(self.log_path, "ab") as log_out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "mapo.engines.llamacpp_worker"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log_out,
                env=env,
                # its own session and process group: a Ctrl-C at the terminal interrupts the trainer,
                # not the worker mid-request; the trainer stops it (close) or its input closing does
                start_new_session=True,
            )
        assert self.process.stdin is not None
        os.set_blocking(self.process.stdin.fileno(), False)  # writes wait in select, with a deadline
        self._inbox.clear()
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
        except _WorkerDied as err:
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

    def _receive_some(self, deadline: float) -> None:
        """Read what the worker has written (up to 1 MiB) into the inbox, waiting until `deadline`."""
        process = self.process
        assert process is not None and process.stdout is not None
        fd = process.stdout.fileno()
        wait = deadline - time.monotonic()
        if wait <= 0 or not select.select([fd], [], [], wait)[0]:
            raise _WorkerDied(f"no answer within {self.spec.timeout_s:.0f} s")
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            raise _WorkerDied(f"exit code {process.wait()}")
        self._inbox += chunk

    def _next_frame(self) -> dict[str, Any] | None:
        """The first whole reply in the inbox (removed from it), or None."""
        if len(self._inbox) < HEADER.size:
            return None
        (size,) = HEADER.unpack_from(self._inbox)
        if len(self._inbox) < HEADER.size + size:
            return None
        payload = bytes(self._inbox[HEADER.size : HEADER.size + size])
        del self._inbox[: HEADER.size + size]
        return pickle.loads(payload)

    def _send(self, message: dict[str, Any], deadline: float) -> None:
        """Write one request frame by `deadline`, reading replies meanwhile (a worker blocked on a
        full reply pipe never reads its input). A frame cut short breaks the stream: the worker is killed."""
        process = self.process
        assert process is not None and process.stdin is not None and process.stdout is not None
        data = memoryview(frame_bytes(message))
        sent = 0
        try:
            while sent < len(data):
                wait = deadline - time.monotonic()
                readable, writable, _ = select.select([process.stdout], [process.stdin], [], max(wait, 0))
                if not readable and not writable:
                    raise _WorkerDied(f"it did not take a request within {self.spec.timeout_s:.0f} s")
                if readable:
                    self._receive_some(deadline)
                if writable:
                    try:
                        sent += os.write(process.stdin.fileno(), data[sent:])
                    except BlockingIOError:
                        continue
                    except OSError:
                        raise _WorkerDied(f"exit code {process.wait()}") from None
        except BaseException:
            if sent:  # half a frame is in the pipe: the worker would misread every later request
                self._kill()
            raise

    def _exchange(self, message: dict[str, Any]) -> dict[str, Any]:
        """Send one request and wait for its reply; _WorkerDied when the process is gone or hangs.

        Requests carry an id and so do replies: a reply to an earlier request that was abandoned
        (a Ctrl-C while waiting) is read and dropped, never taken for this one's.
        """
        if self._closed:
            raise EngineError("the llamacpp engine is closed")
        if self.process is None:
            raise _WorkerDied("it was stopped during an earlier request")
        self._last_id += 1
        message = {**message, "id": self._last_id}
        deadline = time.monotonic() + self.spec.timeout_s
        try:
            self._send(message, deadline)
            while (reply := self._next_frame()) is None or reply.get("id") != message["id"]:
                if reply is not None:
                    log.info("dropped the llamacpp worker's reply to an abandoned request %s", reply.get("id"))
                    continue
                self._receive_some(deadline)
        except _WorkerDied:
            self._kill()
            raise
        if not reply.get("ok"):
            error = reply.get("error", "no reason given")
            kind = StaleWeightsError if reply.get("stale") else EngineError
            raise kind(f"the llamacpp engine refused {message['op']!r}: {error} (log: {self.log_path})")
        return reply

    def _request(self, message: dict[str, Any]) -> dict[str, Any]:
        """`_exchange` with one restart: a worker that dies is started again, reloaded, and asked again."""
        try:
            return self._exchange(message)
        except _WorkerDied as first:
            log.warning("the llamacpp engine's worker died (%s); restarting it once (log: %s)", first, self.log_path)
            self.restarts += 1
            try:
                self._start()
                if self._weights is not None:
                    self._exchange(self._weights)
                return self._exchange(message)
            except _WorkerDied as second:
                raise EngineError(
                    f"the llamacpp engine's worker process died again after a restart ({second}); "
                    f"its log is {self.log_path}"
                ) from None

    def _kill(self) -> None:
        """End the worker process by force and close its pipes."""
        process, self.process = self.process, None
        self._inbox.clear()
        if process is None:
            return
        if process.poll() is None:
            process.kill()
            process.wait()
        for stream in (process.stdin, process.stdout):
            if stream is not None:
                stream.close()

    def close(self) -> None:
        """Stop the worker (politely, then by force); delete the working folder if the engine made it."""
        atexit.unregister(self.close)
        self._closed = True
        process = self.process
        if process is not None and process.poll() is None:
            try:
                self._send({"op": "close", "id": 0}, time.monotonic() + 10)
                process.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired, _WorkerDied):
                pass
        self._kill()
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

    def _generate(
        self, contexts: Sequence[Sequence[int]], max_new_tokens: int, temperature: float, top_p: float,
        max_sentences: int | None,
    ) -> list[Sample]:
        samples: list[Sample] = []
        for start in range(0, len(contexts), self.slots):
            chunk = [list(c) for c in contexts[start : start + self.slots]]
            seed = int(torch.randint(0, 2**62, ()).item())
            reply = self._request(
                {
                    "op": "sample",
                    "contexts": chunk,
                    "max_new_tokens": max_new_tokens,
                    "temperature": temperature,
                    "top_p": top_p,
                    "max_sentences": max_sentences,
                    "end_of_turn_id": self.policy.end_of_turn_id,
                    "seed": seed,
                    "threads": engine_threads(self.spec.threads),
                    "version": self.version,  # the worker refuses to sample from any other weights
                }
            )
            for key in ("prefill_tokens", "reused_tokens", "copied_tokens", "prefill_s", "decode_s"):
                self.stats[key] += reply[key]
            self.stats["generated_tokens"] += sum(len(ids) for ids in reply["ids"])
            for ids, logprobs, ended in zip(reply["ids"], reply["logprobs"], reply["ended"]):
                samples.append(Sample(ids, logprobs, truncated=not ended))
        return samples
