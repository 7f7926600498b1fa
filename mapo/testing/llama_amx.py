"""llama.cpp on a CPU that exposes Intel AMX: quantised weights crash it.

With llama-cpp-python 0.3.35 and 0.3.36 on an Intel Xeon with `amx_int8`, the shipped Q4_1 file
crashes the process (SIGSEGV) on the first batch of more than one token: the weights go to
llama.cpp's extra buffer types (AMX and repacked layouts), whose batched kernel fails. Loading
without extra buffer types avoids it. The local OpenAI-compatible server of the tests and of
`mapo bench llm-env` serves that file, so it loads it this way.
"""

from __future__ import annotations

from types import ModuleType

from mapo.provenance import cpu_has_amx  # the machine fact, kept with the others a result records


def use_extra_buffers() -> bool:
    """llama.cpp's `use_extra_bufts` for this CPU: off where AMX would take quantised weights."""
    return not cpu_has_amx()


def patch_default_model_params(llama_cpp: ModuleType) -> None:
    """Make `llama_cpp.llama_model_default_params` (which the `Llama` class, and so llama-cpp-python's
    server, starts from) follow `use_extra_buffers()`."""
    made = llama_cpp.llama_model_default_params
    if getattr(made, "mapo_patched", False):
        return

    def default_params():  # type: ignore[no-untyped-def]
        params = made()
        params.use_extra_bufts = params.use_extra_bufts and use_extra_buffers()
        return params

    default_params.mapo_patched = True  # type: ignore[attr-defined]
    llama_cpp.llama_model_default_params = default_params
