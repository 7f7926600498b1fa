"""A training run's folder: config, metrics, transcripts, checkpoints.

    <run>/config.yaml          the resolved config
    <run>/metrics.jsonl        one JSON object per step
    <run>/transcripts.jsonl    sampled dialogues (one per line, with their step)
    <run>/provenance.jsonl     software versions and machine, one line per start or resume (mapo.provenance)
    <run>/checkpoints/step-000008/{policy/, trainer_state.pt, trainer_state.json}
    <run>/final/               the trained adapter (or model) + tokenizer
    <run>/tensorboard/         when enabled and installed

Checkpoints are written to a temporary folder and renamed into place, so a killed
run never leaves a half-written one; on resume, lines logged after the checkpoint
are dropped so the files continue exactly where the checkpoint was taken.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from mapo.validation import compressed_or_plain, intact_records

METRICS = "metrics.jsonl"
_CHECKPOINT = re.compile(r"^step-(\d{6,})$")


def checkpoint_step(folder: Path) -> int:
    """The step a checkpoint folder (`step-NNNNNN`) holds."""
    match = _CHECKPOINT.match(folder.name)
    if match is None:
        raise ValueError(f"{folder}: not a checkpoint folder (step-NNNNNN)")
    return int(match.group(1))


def remove_folder(folder: Path) -> None:
    """Rename `folder` to a `.tmp-` name first, then delete it: a kill during the delete leaves a
    temporary folder (a resume discards those), never `folder` with files missing."""
    doomed = folder.with_name(f".tmp-{folder.name}-removing-{os.getpid()}")
    if doomed.exists():
        shutil.rmtree(doomed)
    os.replace(folder, doomed)
    shutil.rmtree(doomed, ignore_errors=True)


def write_folder(folder: Path, write: Callable[[Path], None]) -> Path:
    """`write(tmp)` into a `.tmp-` sibling of `folder`, then put it in `folder`'s place (an old one
    removed by `remove_folder`): at no point is there a `folder` holding part of its files."""
    tmp = folder.with_name(f".tmp-{folder.name}-{os.getpid()}")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    write(tmp)
    if folder.exists():
        remove_folder(folder)
    os.replace(tmp, folder)
    return folder


def read_metrics(run_dir: str | Path, required: bool = False) -> list[dict[str, Any]]:
    """A run folder's logged steps: metrics.jsonl, or metrics.jsonl.gz in a study archived under
    docs/study. A line cut short by a kill is left out (resume drops it for good). [] before the
    first step; with `required`, a folder with neither file is a FileNotFoundError naming it."""
    path = compressed_or_plain(Path(run_dir), METRICS)
    if not path.is_file():
        if required:
            raise FileNotFoundError(f"{path}: no {METRICS} here; is {run_dir} a training run folder?")
        return []
    return intact_records(path, "metrics")


def new_run_dir(root: str | Path, name: str) -> Path:
    """`root/<name>-YYYYmmdd-HHMMSS` (with a suffix if that exists already), created."""
    base = Path(root) / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}"
    path, k = base, 1
    while path.exists():
        k += 1
        path = base.with_name(f"{base.name}-{k}")
    path.mkdir(parents=True)
    return path


class RunFolder:
    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        self.metrics_path = self.path / METRICS
        self.transcripts_path = self.path / "transcripts.jsonl"
        self.checkpoints = self.path / "checkpoints"

    # ---- logs

    def log_metrics(self, metrics: dict[str, Any]) -> None:
        self._append(self.metrics_path, [metrics])

    def log_transcripts(self, records: Iterable[dict[str, Any]]) -> None:
        self._append(self.transcripts_path, records)

    def log_provenance(self, step: int, **extra: Any) -> None:
        """What this start (step 0) or resume (from `step`) runs on, with `extra` (the rollout engine
        actually used): a resume on another install is on record."""
        from mapo.provenance import provenance

        self._append(self.path / "provenance.jsonl", [{"step": step, **provenance(), **extra}])

    @staticmethod
    def _append(path: Path, records: Iterable[dict[str, Any]]) -> None:
        with open(path, "a", encoding="utf-8") as handle:
            for record in records:
                handle.write(json.dumps(record, ensure_ascii=False) + "\n")
            handle.flush()
            os.fsync(handle.fileno())

    def read_metrics(self) -> list[dict[str, Any]]:
        """The logged steps (`read_metrics`)."""
        return read_metrics(self.path)

    def drop_logs_after(self, step: int) -> None:
        """Keep only log lines of steps <= `step` (a resumed run rewrites the rest); a line cut by
        the kill goes too. Kept lines are written back as the logger wrote them."""
        for path in (self.metrics_path, self.transcripts_path):
            if not path.is_file():
                continue
            kept = [r for r in intact_records(path, "log lines") if r.get("step", 0) <= step]
            tmp = path.with_suffix(".tmp")
            tmp.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in kept), encoding="utf-8")
            os.replace(tmp, path)

    # ---- checkpoints

    def checkpoint_dir(self, step: int) -> Path:
        return self.checkpoints / f"step-{step:06d}"

    def save_checkpoint(self, step: int, write: Callable[[Path], None], keep: int, keep_every: int = 0) -> Path:
        """Write via `write(tmp_folder)`, rename into place, keep the newest `keep` and every one whose
        step is a multiple of `keep_every` (> 0)."""
        target = write_folder(self.checkpoint_dir(step), write)
        for old in self.list_checkpoints()[:-keep]:
            if not (keep_every and checkpoint_step(old) % keep_every == 0):
                remove_folder(old)
        return target

    def discard_partial_checkpoints(self) -> None:
        """Remove the temporary folders of checkpoint writes that a kill cut short."""
        if self.checkpoints.is_dir():
            for tmp in self.checkpoints.glob(".tmp-step-*"):
                shutil.rmtree(tmp, ignore_errors=True)

    def list_checkpoints(self) -> list[Path]:
        if not self.checkpoints.is_dir():
            return []
        return sorted((p for p in self.checkpoints.iterdir() if _CHECKPOINT.match(p.name)), key=checkpoint_step)

    def latest_checkpoint(self) -> Path | None:
        found = self.list_checkpoints()
        return found[-1] if found else None
