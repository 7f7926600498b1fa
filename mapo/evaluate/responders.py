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
BENCH_CONTEXT = 4096  # ids per question and answer a local engine holds (EQ-Bench prompts run to ~1k)


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
    """Answers with a local causal LM (`mapo.policy.Policy`) through a rollout engine (mapo.engines):
    one batched call per batch of questions, sampled, or argmax at temperature 0."""

    def __init__(self, policy: Any, name: str, engine: Any) -> None:
        self.policy = policy
        self.name = name
        self.engine = engine

    def respond(self, conversations: Sequence[Conversation], max_tokens: int, temperature: float) -> list[str]:
        contexts = [self.policy.first_prompt_ids(*_split_conversation(c)) for c in conversations]
        if temperature > 0:
            samples = self.engine.sample(contexts, max_new_tokens=max_tokens, temperature=temperature)
            return [self.policy.decode(s.ids) for s in samples]
        return [self.policy.decode(ids) for ids in self.engine.greedy(contexts, max_tokens)]

    def close(self) -> None:
        """Release the engine (a vLLM engine is kept started for the next one of its shape)."""
        self.engine.close()


def policy_responder(policy: Any, label: str, engine_name: str = "auto", concurrency: int = 8) -> PolicyResponder:
    """A loaded policy answering through the rollout engine `engine_name` (auto | hf | vllm,
    mapo.engines.factory), `concurrency` sequences at once, its weights synced."""
    from mapo.engines.factory import make_engine

    engine = make_engine(engine_name, policy, slots=max(1, concurrency), context_per_slot=BENCH_CONTEXT)
    engine.sync(0)
    return PolicyResponder(policy, name=label, engine=engine)


class EndpointPolicy:
    """An OpenAI-compatible chat endpoint as the policy: benchmark answers (`respond`) and
    multi-turn replies for rollouts (`chat_replies`, `mapo.core.rollout.ChatPolicy`), `concurrency` in flight."""

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
    engine_name: str = "auto",
) -> Responder:
    """A local policy (`model`: HF folder, .gguf file, "embedded", "tiny", a training run or checkpoint)
    or an endpoint (`endpoint` URL). A local policy answers through the rollout engine
    `engine_name` (auto | hf | vllm, mapo.engines.factory) with `concurrency` sequences at once."""
    if (model is None) == (endpoint is None):
        raise ValueError("give exactly one of a model (--model) or an OpenAI-compatible endpoint (--endpoint)")
    if endpoint is not None:
        return endpoint_policy(endpoint, endpoint_model, api_key_env, concurrency, timeout)
    from mapo.evaluate.checkpoints import load_eval_policy

    policy, label = load_eval_policy(model, gguf_file=gguf_file, dtype=dtype)
    return policy_responder(policy, label, engine_name, concurrency)
