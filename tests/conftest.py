"""Fixtures shared by several test files."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def local_server(tmp_path_factory):
    """vLLM's OpenAI-compatible server (`vllm serve`) with SmolLM2-135M on 127.0.0.1; yields the base URL."""
    from mapo.testing.vllm_server import ServerError, VllmServer, missing_requirement

    if missing_requirement():
        pytest.skip(missing_requirement())
    try:
        server = VllmServer(log_file=tmp_path_factory.mktemp("vllm") / "server.log")
    except ServerError as err:
        pytest.fail(str(err))
    with server:
        yield server.base_url
