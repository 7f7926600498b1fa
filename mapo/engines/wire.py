"""The worker protocol: length-prefixed pickle frames over a pipe, and the worker's errors."""

from __future__ import annotations

import pickle
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


class WorkerError(RuntimeError):
    """A request the worker refuses (the message goes back to the parent)."""


class StaleVersion(WorkerError):
    """A sample request expects weights of another version than the worker holds."""
