"""Start llama.cpp's OpenAI-compatible server (llama-cpp-python[server]) on 127.0.0.1.

Used by the LLM-role integration tests and `mapo bench llm-env`: the embedded
SmolLM2 GGUF (or any GGUF) served under one alias, stopped on exit.

    with LlamaServer(threads=1) as server:
        backend = {"kind": "llm", "base_url": server.base_url, "model": server.alias}
"""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path


class LlamaServerError(RuntimeError):
    """The server is not installed, exited, or did not answer in time; the message holds its log tail."""


SERVER_MODULES = ("uvicorn", "fastapi", "sse_starlette", "starlette_context", "pydantic_settings")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def missing_requirement() -> str | None:
    """Why the server cannot start here (a message), or None when it can."""
    if importlib.util.find_spec("llama_cpp") is None:
        return "llama-cpp-python[server] is not installed (pip install 'llama-cpp-python[server]')"
    # the [server] extra's modules: uvicorn alone can come from another package (mlflow)
    absent = [m for m in SERVER_MODULES if importlib.util.find_spec(m) is None]
    if absent:
        return f"llama-cpp-python is installed without its [server] extra (missing: {', '.join(absent)})"
    return None


class LlamaServer:
    """A llama.cpp server process; `base_url` is ready once the constructor (or `with`) returns."""

    def __init__(
        self,
        model: str | Path | None = None,
        alias: str = "smollm2",
        threads: int = 1,
        n_ctx: int = 4096,
        log_file: str | Path | None = None,
        ready_timeout: float = 60.0,
        extra_args: tuple[str, ...] = (),
    ) -> None:
        problem = missing_requirement()
        if problem:
            raise LlamaServerError(problem)
        if model is None:
            from mapo.model_source import embedded_gguf_path

            model = embedded_gguf_path()
        self.alias = alias
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self.log_file = Path(log_file) if log_file else Path(tempfile.mkdtemp(prefix="llama-server-")) / "server.log"
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "mapo.testing.llama_server_main", "--model", str(model), "--host", "127.0.0.1",
               "--port", str(self.port), "--n_ctx", str(n_ctx), "--model_alias", alias, "--cache", "True",
               "--n_threads", str(threads), "--n_threads_batch", str(threads), *extra_args]
        with open(self.log_file, "wb") as log_out:
            self.process = subprocess.Popen(
                cmd, stdout=log_out, stderr=subprocess.STDOUT, env={**os.environ, "HF_HUB_OFFLINE": "1"}
            )
        try:
            self._wait_ready(ready_timeout)
        except BaseException:
            self.close()
            raise

    def log_tail(self, chars: int = 3000) -> str:
        try:
            return self.log_file.read_text(encoding="utf-8", errors="replace")[-chars:]
        except OSError:
            return ""

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            if self.process.poll() is not None:
                raise LlamaServerError(f"llama.cpp server exited with {self.process.returncode}:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(f"{self.base_url}/models", timeout=2) as response:
                    if response.status == 200:
                        return
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise LlamaServerError(f"llama.cpp server not ready after {timeout:.0f} s:\n{self.log_tail()}")
            time.sleep(0.3)

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def __enter__(self) -> LlamaServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
