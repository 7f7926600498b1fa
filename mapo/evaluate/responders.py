"""Single-shot chat answering for the benchmarks: a local policy or an OpenAI-compatible endpoint.

A `Responder` turns a batch of chat conversations into reply texts. The local one
reuses the policy's loading and chat rendering (`mapo.policy`); the endpoint one
reuses the project's HTTP backend (`mapo.backends.openai_compat`). Temperature 0
means greedy decoding (the benchmarks' usual setting).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

Conversation = list[dict[str, str]]


class Responder(Protocol):
    name: str

    def respond(self, conversations: Sequence[Conversation], max_tokens: int, temperature: float) -> list[str]: ...


def _split_conversation(conversation: Conversation) -> tuple[str, str]:
    """(system prompt, user message) of a one-question conversation."""
    roles = [m["role"] for m in conversation]
    if roles not in (["user"], ["system", "user"]):
        raise ValueError(f"a benchmark question is [system,] user; got roles {roles}")
    system = conversation[0]["content"] if roles[0] == "system" else ""
    return system, conversation[-1]["content"]


class PolicyResponder:
    """Answers with a local causal LM (`mapo.policy.Policy`), one batched generate per call."""

    def __init__(self, policy: Any, name: str) -> None:
        self.policy = policy
        self.name = name

    def respond(self, conversations: Sequence[Conversation], max_tokens: int, temperature: float) -> list[str]:
        contexts = [self.policy.first_prompt_ids(*_split_conversation(c)) for c in conversations]
        if temperature > 0:
            samples = self.policy.sample(contexts, max_new_tokens=max_tokens, temperature=temperature)
            return [self.policy.decode(s.ids) for s in samples]
        return [self.policy.decode(ids) for ids in self._greedy(contexts, max_tokens)]

    def _greedy(self, contexts: list[list[int]], max_tokens: int) -> list[list[int]]:
        # Policy.sample only samples (its log-probs need a temperature); benchmarks want argmax decoding.
        import torch
        from transformers import GenerationConfig

        policy = self.policy
        width = max(len(c) for c in contexts)
        input_ids = torch.full((len(contexts), width), policy.pad_id, dtype=torch.long)
        attention = torch.zeros((len(contexts), width), dtype=torch.long)
        for row, ids in enumerate(contexts):
            input_ids[row, width - len(ids) :] = torch.tensor(ids, dtype=torch.long)
            attention[row, width - len(ids) :] = 1
        config = GenerationConfig(
            do_sample=False,
            max_new_tokens=max_tokens,
            eos_token_id=policy.end_of_turn_id,
            pad_token_id=policy.pad_id,
        )
        with torch.no_grad():
            out = policy.model.generate(
                input_ids=input_ids.to(policy.device), attention_mask=attention.to(policy.device), generation_config=config
            )
        return [row[width:].tolist() for row in out]


class EndpointPolicy:
    """An OpenAI-compatible chat endpoint as the policy: benchmark answers (`respond`) and
    multi-turn replies for rollouts (`chat_replies`, `mapo.rollout.ChatPolicy`), `concurrency` in flight."""

    def __init__(self, backend: Any) -> None:
        self.backend = backend
        self.name = f"{backend.config.model} @ {backend.config.base_url}"

    def respond(self, conversations: Sequence[Conversation], max_tokens: int, temperature: float) -> list[str]:
        return self.backend.chat_many(list(conversations), max_tokens=max_tokens, temperature=temperature)

    def chat_replies(
        self, conversations: list[Conversation], max_new_tokens: int, temperature: float, top_p: float
    ) -> list[str]:
        return self.backend.chat_many(conversations, max_tokens=max_new_tokens, temperature=temperature, top_p=top_p)


def endpoint_policy(
    endpoint: str, model: str | None, api_key_env: str | None = "OPENAI_API_KEY", concurrency: int = 8,
    timeout: float = 120.0,
) -> EndpointPolicy:
    from mapo.backends.endpoint import ChatBackendConfig
    from mapo.backends.openai_compat import ChatBackend

    if not model:
        raise ValueError("--endpoint needs --endpoint-model: the model name the server serves")
    config = ChatBackendConfig(base_url=endpoint, model=model, api_key_env=api_key_env, concurrency=concurrency,
                               timeout=timeout)
    return EndpointPolicy(ChatBackend(config))


def load_responder(
    model: str | None = None,
    *,
    gguf_file: str | None = None,
    dtype: str = "float32",
    endpoint: str | None = None,
    endpoint_model: str | None = None,
    api_key_env: str | None = "OPENAI_API_KEY",
    concurrency: int = 8,
    timeout: float = 120.0,
) -> Responder:
    """A local policy (`model`: HF folder, .gguf file, "embedded", "tiny", a training run or checkpoint)
    or an endpoint (`endpoint` URL)."""
    if (model is None) == (endpoint is None):
        raise ValueError("give exactly one of a model (--model) or an OpenAI-compatible endpoint (--endpoint)")
    if endpoint is not None:
        return endpoint_policy(endpoint, endpoint_model, api_key_env, concurrency, timeout)
    from mapo.evaluate.checkpoints import load_eval_policy

    policy, label = load_eval_policy(model, gguf_file=gguf_file, dtype=dtype)
    return PolicyResponder(policy, name=label)
