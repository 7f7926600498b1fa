"""Choosing and starting the rollout engine a run asked for (`rollout.engine`).

``auto`` (the default) runs vLLM when it is installed and has a model class for the policy's
architecture, and otherwise the in-process `hf` engine, saying why once. ``hf`` and ``vllm`` are
taken as asked; ``vllm`` without vLLM installed is an error naming the install command.
"""

from __future__ import annotations

import logging

from mapo.engines import ENGINE_CHOICES
from mapo.engines.base import EngineError, RolloutEngine
from mapo.engines.hf import HfEngine
from mapo.engines.vllm_engine import open_engine
from mapo.engines.vllm_setup import VllmSpec, missing_requirement, supports
from mapo.policy import Policy

log = logging.getLogger("mapo.engines")
AUTO = "auto"
_said: set[str] = set()


def resolve_engine(name: str, policy: Policy) -> str:
    """The engine to run for `rollout.engine` = `name`: "hf" or "vllm" (auto decides here)."""
    if name not in ENGINE_CHOICES:
        raise ValueError(f"rollout.engine must be one of {', '.join(ENGINE_CHOICES)}; got {name!r}")
    if name != AUTO:
        return name
    reason = missing_requirement() or supports(policy.model)
    if reason is None:
        return "vllm"
    if reason not in _said:  # once per reason and process, not once per evaluation or step
        _said.add(reason)
        log.warning("rollout.engine=auto: sampling with the hf engine (%s)", reason)
    return "hf"


def make_engine(
    name: str, policy: Policy, slots: int, context_per_slot: int, vllm: VllmSpec | None = None
) -> RolloutEngine:
    """Start the engine `resolve_engine(name, policy)` picks, for `slots` sequences of up to
    `context_per_slot` ids; its weights are unsynced (version -1)."""
    chosen = resolve_engine(name, policy)
    if chosen == "hf":
        return HfEngine(policy)
    problem = missing_requirement()
    if problem:
        raise EngineError(f"rollout.engine=vllm: {problem}")
    return open_engine(policy, slots, context_per_slot, vllm)
