"""A worker child process spoken to in frames (mapo.engines.wire): requests and replies matched by id.

- Every request carries an id that its replies repeat; a reply to a request abandoned by a
  Ctrl-C is dropped when it arrives, never taken for a later one's.
- Writes and reads wait at most `timeout_s` (select with a deadline); while writing, replies
  are read meanwhile (a worker blocked on a full reply pipe never reads its input).
- A frame cut short would break the stream, so the process is killed instead.
- The worker runs in a session and process group of its own: a Ctrl-C at the terminal reaches
  the parent only, which stops the worker itself (`close`); the worker exits when its input closes.
"""

from __future__ import annotations

import logging
import os
import select
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import mapo
from mapo.engines.wire import Inbox, frame_bytes

log = logging.getLogger("mapo.engines.worker")


class WorkerDied(Exception):
    """The worker exited or stopped answering; the message says how."""


class WorkerProcess:
    """`python -m <module>` as a child with framed pipes; its stderr goes to `log_path`."""

    def __init__(self, module: str, log_path: Path, timeout_s: float) -> None:
        self.module, self.log_path, self.timeout_s = module, Path(log_path), timeout_s
        self.process: subprocess.Popen[bytes] | None = None
        self._inbox: Inbox | None = None  # reply bytes read but not yet a whole frame
        self._last_id = 0

    def start(self) -> None:
        package_root = str(Path(mapo.__file__).resolve().parents[1])
        env = {
            # OpenMP threads that wait passively: a spinning thread on a busy core stalls the others
            "OMP_WAIT_POLICY": "PASSIVE",
            **os.environ,
            "PYTHONPATH": os.pathsep.join(filter(None, [package_root, os.environ.get("PYTHONPATH")])),
        }
        with open(self.log_path, "ab") as log_out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", self.module],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log_out,
                env=env,
                start_new_session=True,
            )
        assert self.process.stdin is not None
        os.set_blocking(self.process.stdin.fileno(), False)  # writes wait in select, with a deadline
        assert self.process.stdout is not None
        self._inbox = Inbox(self.process.stdout.fileno())

    @property
    def pid(self) -> int | None:
        return None if self.process is None else self.process.pid

    def deadline(self) -> float:
        return time.monotonic() + self.timeout_s

    def _receive_some(self, deadline: float) -> None:
        """Read what the worker has written into the inbox, waiting until `deadline`."""
        process, inbox = self.process, self._inbox
        assert process is not None and inbox is not None
        try:
            if not inbox.receive(deadline - time.monotonic()):
                raise WorkerDied(f"no answer within {self.timeout_s:.0f} s")
        except EOFError:
            raise WorkerDied(f"exit code {process.wait()}") from None

    def _next_frame(self) -> dict[str, Any] | None:
        return None if self._inbox is None else self._inbox.next()

    def send(self, message: dict[str, Any], deadline: float) -> None:
        """Write one frame by `deadline`, reading replies into the inbox meanwhile."""
        process = self.process
        if process is None:
            raise WorkerDied("it was stopped during an earlier request")
        assert process.stdin is not None and process.stdout is not None
        data = memoryview(frame_bytes(message))
        sent = 0
        try:
            while sent < len(data):
                wait = deadline - time.monotonic()
                readable, writable, _ = select.select([process.stdout], [process.stdin], [], max(wait, 0))
                if not readable and not writable:
                    raise WorkerDied(f"it did not take a request within {self.timeout_s:.0f} s")
                if readable:
                    self._receive_some(deadline)
                if writable:
                    try:
                        sent += os.write(process.stdin.fileno(), data[sent:])
                    except BlockingIOError:
                        continue
                    except OSError:
                        raise WorkerDied(f"exit code {process.wait()}") from None
        except BaseException:
            if sent:  # half a frame is in the pipe: the worker would misread every later request
                self.kill()
            raise

    def request(self, message: dict[str, Any]) -> int:
        """Send `message` under a new id (returned); its replies repeat the id."""
        self._last_id += 1
        self.send({**message, "id": self._last_id}, self.deadline())
        return self._last_id

    def reply(self, request_id: int, deadline: float | None = None, wake_fd: int | None = None) -> dict[str, Any] | None:
        """The next reply to `request_id`, dropping replies to abandoned requests; None as soon as
        `wake_fd` (if given) turns readable first. WorkerDied when the process is gone or says nothing
        by `deadline` (default: timeout_s from now)."""
        deadline = deadline or self.deadline()
        try:
            while (frame := self._next_frame()) is None or frame.get("id") != request_id:
                if frame is not None:
                    log.info("dropped the worker's reply to an abandoned request %s", frame.get("id"))
                    continue
                if self.process is None or self._inbox is None:
                    raise WorkerDied("it was stopped during an earlier request")
                if wake_fd is not None:
                    readable = select.select([self._inbox.fd, wake_fd], [], [], max(deadline - time.monotonic(), 0))[0]
                    if wake_fd in readable:
                        return None
                self._receive_some(deadline)
        except WorkerDied:
            self.kill()
            raise
        return frame

    def ready(self, request_id: int) -> dict[str, Any] | None:
        """A reply to `request_id` already received (replies to abandoned requests dropped), or None."""
        while (frame := self._next_frame()) is not None and frame.get("id") != request_id:
            log.info("dropped the worker's reply to an abandoned request %s", frame.get("id"))
        return frame

    def exchange(self, message: dict[str, Any]) -> dict[str, Any]:
        """Send one request and wait for its reply; WorkerDied when the process is gone or hangs."""
        try:
            request_id = self.request(message)
        except WorkerDied:
            self.kill()
            raise
        reply = self.reply(request_id)
        assert reply is not None
        return reply

    def kill(self) -> None:
        """End the worker process by force and close its pipes."""
        process, self.process = self.process, None
        self._inbox = None
        if process is None:
            return
        if process.poll() is None:
            process.kill()
            process.wait()
        for stream in (process.stdin, process.stdout):
            if stream is not None:
                stream.close()

    def close(self) -> None:
        """Ask the worker to stop (a `close` request), then stop it by force."""
        process = self.process
        if process is not None and process.poll() is None:
            try:
                self.send({"op": "close", "id": 0}, time.monotonic() + 10)
                process.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired, WorkerDied):
                pass
        self.kill()
