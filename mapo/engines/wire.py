"""The worker protocol: length-prefixed pickle frames over a pipe, and the worker's errors."""

from __future__ import annotations

import io
import os
import pickle
import select
import struct
from typing import Any, BinaryIO

HEADER = struct.Struct("<Q")


def read_frame(stream: BinaryIO) -> Any | None:
    """One pickled message, or None at end of stream."""
    header = stream.read(HEADER.size)
    if len(header) < HEADER.size:
        return None
    (size,) = HEADER.unpack(header)
    payload = stream.read(size)
    if len(payload) < size:
        return None
    return pickle.loads(payload)


def frame_bytes(message: Any) -> bytes:
    """One message as its frame: the payload's length, then the pickled payload."""
    payload = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    return HEADER.pack(len(payload)) + payload


def write_frame(stream: BinaryIO, message: Any) -> None:
    stream.write(frame_bytes(message))
    stream.flush()


class Inbox:
    """Bytes read from a pipe (`os.read`, never blocking on a partial frame) and the frames they hold."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.data = bytearray()

    def next(self) -> Any | None:
        """The first whole frame received (removed), or None."""
        stream = io.BytesIO(self.data)
        message = read_frame(stream)  # None: no whole frame yet
        if message is not None:
            del self.data[: stream.tell()]
        return message

    def receive(self, wait_s: float | None) -> bool:
        """Read what the pipe holds (up to 1 MiB), waiting at most `wait_s` (None: until something comes);
        False when nothing came in time; EOFError when the writer closed the pipe."""
        if wait_s is not None and not select.select([self.fd], [], [], max(wait_s, 0.0))[0]:
            return False
        chunk = os.read(self.fd, 1 << 20)
        if not chunk:
            raise EOFError("the pipe was closed")
        self.data += chunk
        return True


class WorkerError(RuntimeError):
    """A request the worker refuses (the message goes back to the parent)."""


class StaleVersion(WorkerError):
    """A sample request expects weights of another version than the worker holds."""
