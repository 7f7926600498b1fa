"""Choosing and starting the rollout engine a run asked for (`rollout.engine`).

``auto`` (the default) runs llama.cpp when llama-cpp-python is installed and the
policy's architecture is one it serves (Llama, Mistral, Qwen2/2.5, Qwen3, Gemma 3:
mapo.engines.gguf_arch), and otherwise the in-process `hf` engine, saying why once
(an architecture outside the list by its name). ``hf`` and ``llamacpp`` are taken as asked; ``llamacpp``
without llama-cpp-python is an error naming the install command.
"""

from __future__ import annotations

import logging
from pathlib import Path

from mapo.engines import ENGINE_CHOICES
from mapo.engines.base import EngineError, RolloutEngine
from mapo.engines.gguf_export import ExportError, check_architecture
from mapo.engines.hf import HfEngine
from mapo.engines.llamacpp import LlamaCppEngine
from mapo.engines.llamacpp_spec import LlamaCppSpec, missing_requirement
from mapo.policy import Policy

log = logging.getLogger("mapo.engines")
AUTO = "auto"
_said: set[str] = set()


def resolve_engine(name: str, policy: Policy) -> str:
    """The engine to run for `rollout.engine` = `name`: "hf" or "llamacpp" (auto decides here)."""
    if name not in ENGINE_CHOICES:
        raise ValueError(f"rollout.engine must be one of {', '.join(ENGINE_CHOICES)}; got {name!r}")
    if name != AUTO:
        return name
    reason = missing_requirement()
    if reason is None:
        try:
            check_architecture(policy.model)
        except ExportError as err:
            reason = str(err)
    if reason is None:
        return "llamacpp"
    if reason not in _said:  # once per reason and process, not once per evaluation or step
        _said.add(reason)
        log.warning("rollout.engine=auto: sampling with the hf engine (%s)", reason)
    return "hf"


def make_engine(
    name: str,
    policy: Policy,
    slots: int,
    context_per_slot: int,
    spec: LlamaCppSpec | None = None,
    source_gguf: Path | None = None,
    log_dir: Path | None = None,
    workdir: Path | None = None,
) -> RolloutEngine:
    """Start the engine `resolve_engine(name, policy)` picks; its weights are unsynced (version -1).

    `workdir` holds the exported weights while the engine runs (default: a temporary folder);
    it is removed when the engine closes.
    """
    chosen = resolve_engine(name, policy)
    if chosen == "hf":
        return HfEngine(policy)
    problem = missing_requirement()
    if problem:
        raise EngineError(f"rollout.engine=llamacpp: {problem}")
    return LlamaCppEngine(
        policy, slots, context_per_slot, spec, source_gguf=source_gguf, workdir=workdir, log_dir=log_dir,
        remove_workdir=True,
    )
