"""`python -m mapo.testing.llama_server_main ARGS`: llama-cpp-python's OpenAI-compatible server
(`python -m llama_cpp.server ARGS`), loaded so that it does not crash on a CPU with AMX
(mapo.testing.llama_amx)."""

from __future__ import annotations

import llama_cpp.llama_cpp
from llama_cpp.server.__main__ import main

from mapo.testing.llama_amx import patch_default_model_params

if __name__ == "__main__":
    patch_default_model_params(llama_cpp.llama_cpp)  # the bindings the Llama class starts its model from
    main()
