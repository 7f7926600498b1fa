"""The policy: a causal LM with its tokenizer, chat rendering, log-probs and LoRA.

What it is made of and where it comes from is mapo.model_source (`PolicySpec`); this
module wraps the loaded model. Sampling from it is the `hf` rollout engine's job
(mapo.engines.hf): contexts of token ids in, sampled reply ids with their log-probs out.

Token discipline: a dialogue's ids are built incrementally (``first_prompt_ids``, then
the sampled reply, then ``next_prompt_ids``) so the ids trained on are exactly the ids
sampled; nothing is re-tokenised from decoded text.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import torch

from mapo.chat_template import SENTINEL, check_template, end_of_turn_id, fold, load_template
from mapo.device import model_device, resolve_precision
from mapo.lora import trainable
from mapo.model_source import PolicySpec, load_model, load_tokenizer
from mapo.nucleus import nucleus_logprobs
from mapo.prompt_sharing import SharedLayout, layout_if_worth, shared_logits, supports_sharing


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of softmax(logits) over the last axis: logsumexp - sum(p * logits)."""
    p = torch.softmax(logits, dim=-1)
    return torch.logsumexp(logits, dim=-1) - (p * logits).sum(-1)


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
        self.share_prompts = supports_sharing(model)  # log-probs compute each shared prompt once (token_logprobs)
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
        adds one masked copy). Rows that share a prompt compute it once (mapo.prompt_sharing;
        `share_prompts` False turns that off).
        """
        input_ids, attention_mask = input_ids.to(self.device), attention_mask.to(self.device)
        positions = torch.nonzero(targets.any(dim=0)).squeeze(-1).to(self.device)
        if positions.numel() and int(positions[0]) == 0:
            raise ValueError("position 0 has no context to predict it from; it cannot be a target")
        layout = self._sharing_layout(input_ids, attention_mask, targets)
        with self.computing():  # the backward pass runs outside it, in the dtypes the forward chose
            if layout is not None:
                logits = shared_logits(self.model, layout, positions, self.pad_id, self.device).float()
            else:
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

    def _sharing_layout(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, targets: torch.Tensor
    ) -> SharedLayout | None:
        """The rows' prompt-shared layout (mapo.prompt_sharing) when it pays, else None. Rows are
        right-padded, as `mapo.core.losses.collate` makes them."""
        if not self.share_prompts:
            return None
        rows = [ids[:n] for ids, n in zip(input_ids.tolist(), attention_mask.sum(dim=1).tolist())]
        trained = targets.any(dim=1).tolist()
        firsts = [int(first) if any_ else None for first, any_ in zip(targets.int().argmax(dim=1).tolist(), trained)]
        return layout_if_worth(rows, firsts)

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
