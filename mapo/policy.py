"""The policy: a causal LM with its tokenizer, chat rendering, sampling, log-probs and LoRA.

What it is made of and where it comes from is mapo.model_source (`PolicySpec`); this
module wraps the loaded model. `Policy.sample` is the rollout's token-in/token-out entry
point: contexts of token ids in, sampled reply ids with their log-probs out.

Token discipline: a dialogue's ids are built incrementally (``first_prompt_ids``, then
the sampled reply, then ``next_prompt_ids``) so the ids trained on are exactly the ids
sampled; nothing is re-tokenised from decoded text.
"""

from __future__ import annotations

import contextlib
import copy
import functools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from mapo.chat_template import SENTINEL, check_template, end_of_turn_id, fold, load_template
from mapo.device import model_device, resolve_precision
from mapo.lora import trainable
from mapo.model_source import PolicySpec, load_model, load_tokenizer
from mapo.nucleus import nucleus_logprobs
from mapo.text import count_sentences


@functools.cache
def _cache_name() -> str:
    """generate's key-value cache argument and output field: transformers 5.x renamed
    `past_key_values` to `cache` (the old name warns until 6.0, then goes)."""
    from transformers.generation.utils import GenerateDecoderOnlyOutput

    return "cache" if "cache" in GenerateDecoderOnlyOutput.__dataclass_fields__ else "past_key_values"


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of softmax(logits) over the last axis: logsumexp - sum(p * logits)."""
    p = torch.softmax(logits, dim=-1)
    return torch.logsumexp(logits, dim=-1) - (p * logits).sum(-1)


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
        self.compute_dtype: torch.dtype | None = None  # autocast dtype of every forward (set_compute_dtype)
        self.end_of_turn_id = end_of_turn_id(tokenizer)  # the check below builds prompts with it
        self.pad_id = int(tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id)
        self._reference: torch.nn.Module | None = None
        self.source: str | None = None  # the policy.model it was loaded from (load_policy), named in saved adapters
        checked = check_template(tokenizer, name, self._incremental_prompts)
        self.end_of_turn_id, self.fold_system = checked.end_of_turn_id, checked.fold_system

    # ---- precision

    def set_compute_dtype(self, dtype: torch.dtype | None) -> None:
        """Run every forward (sampling, log-probs) under `dtype` autocast over the weights as they are.

        The output projection stays in the weights' dtype: bfloat16 logits (8 bits of
        mantissa on values near 20) would move each log-prob by ~0.05, far beyond the
        engine mismatch the importance weights are meant to see.
        """
        if self.compute_dtype is None and dtype is not None:
            head = self.model.get_output_embeddings()
            if head is not None:
                _outside_autocast(head, self.device.type)
        self.compute_dtype = dtype

    def computing(self) -> contextlib.AbstractContextManager[Any]:
        """The autocast context of a forward pass (nothing when the policy computes in its weights' dtype)."""
        if self.compute_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.compute_dtype)

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

        The log-probs are those of the distribution each id was drawn from (generate's
        processed scores: softmax(logits / temperature), renormalised over the nucleus when
        top_p < 1): the behaviour policy, which the trainer compares with its own pi_old
        (`token_logprobs` with the same temperature and top_p) in the importance weight.

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
            output_scores=True,  # after the temperature and top-p processors: what was sampled from
            cache_implementation="static" if self.static_cache else None,
        )
        past = self._batch_cache(contexts, caches, width) if caches is not None and not self.static_cache else None
        input_ids, attention = input_ids.to(self.device), attention.to(self.device)
        stopping = [_SentenceLimit(self, width, max_sentences)] if max_sentences else None
        with self.computing():
            out = self.model.generate(
                input_ids=input_ids,
                attention_mask=attention,
                generation_config=config,
                stopping_criteria=stopping,
                **{_cache_name(): past},
            )
        new = out.sequences[:, width:]
        logprobs = torch.stack(
            [
                torch.log_softmax(step.float(), dim=-1).gather(-1, new[:, k : k + 1]).squeeze(-1)
                for k, step in enumerate(out.scores)
            ],
            dim=1,
        )
        layers = _cache_tensors(getattr(out, _cache_name())) if keep_cache and not self.static_cache else None
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
        return count_sentences(self.tokenizer.decode(ids, skip_special_tokens=True))

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
        top_p: float = 1.0,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """log p(ids[b, j] | ids[b, :j]) at every position j where `targets[b, j]` is True, p the
        tempered softmax, restricted to its nucleus and renormalised when top_p < 1 (mapo.nucleus:
        -inf for an id outside it); the entropy is the tempered softmax's.

        Returns [B, J] tensors over the union J of target positions (0 elsewhere) and,
        on request, the entropy there (no gradient). Logits are only computed at
        those positions, which is most of the saving on a 49k vocabulary. The
        log-probability is the target's logit minus the logsumexp, so no full-size
        log-softmax is kept for the backward pass, and the entropy is taken one row
        at a time: the [B, J, vocab] logits are the only full-size tensor alive (top_p < 1
        adds one masked copy).
        """
        input_ids, attention_mask = input_ids.to(self.device), attention_mask.to(self.device)
        positions = torch.nonzero(targets.any(dim=0)).squeeze(-1).to(self.device)
        if positions.numel() and int(positions[0]) == 0:
            raise ValueError("position 0 has no context to predict it from; it cannot be a target")
        with self.computing():  # the backward pass runs outside it, in the dtypes the forward chose
            logits = self.model(
                input_ids=input_ids, attention_mask=attention_mask, logits_to_keep=positions - 1, use_cache=False
            ).logits.float()
        if temperature != 1.0:
            logits = logits / temperature
        logp = nucleus_logprobs(logits, input_ids[:, positions], top_p)
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
        """A loadable export: the adapter (LoRA) or model folder, plus the tokenizer. An adapter's
        config names its base by `policy.model` (not this machine's cache folder of a GGUF file), so
        the folder is itself a `policy.model` anywhere the base is (mapo.model_source)."""
        if self.lora and self.source is not None:
            for adapter in self.model.peft_config.values():
                adapter.base_model_name_or_path = self.source
        # mapo's adapters leave the embeddings alone: PEFT need not look for the base's vocabulary
        self.model.save_pretrained(str(folder), **({"save_embedding_layers": False} if self.lora else {}))
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


def _outside_autocast(module: torch.nn.Module, device_type: str) -> None:
    """Make `module`'s forward run with autocast off (in its weights' dtype), by a pair of hooks."""
    contexts: list[Any] = []

    def enter(mod: torch.nn.Module, args: Any) -> None:
        context = torch.autocast(device_type, enabled=False)
        context.__enter__()
        contexts.append(context)

    def leave(mod: torch.nn.Module, args: Any, output: Any) -> None:
        contexts.pop().__exit__(None, None, None)

    module.register_forward_pre_hook(enter)
    module.register_forward_hook(leave)


def load_policy(spec: PolicySpec, seed: int = 0) -> Policy:
    """Load tokenizer and model as `spec` says, make it trainable (LoRA or full), check the chat template."""
    tokenizer = load_tokenizer(spec)
    if spec.chat_template:
        tokenizer.chat_template = load_template(spec.chat_template)
    model = trainable(load_model(spec, tokenizer, seed=seed), spec, seed)
    model.eval()
    policy = Policy(model, tokenizer, lora=spec.lora.enabled, name=spec.model)
    policy.source = str(Path(spec.model).expanduser() / spec.gguf_file) if spec.gguf_file else spec.model
    policy.static_cache = spec.static_cache
    policy.set_compute_dtype(resolve_precision(spec.dtype, policy.device).compute)
    return policy
