"""Framing between the pool (main process) and its fork-server workers.

Messages are length-prefixed pickles of plain data (dicts, lists, str, bytes,
numbers). The pool reads them with an unpickler that refuses every global, so
even a confused worker can only ever hand back plain data.
"""

from __future__ import annotations

import io
import os
import pickle
import struct

_HEADER = struct.Struct("!I")


class PlainDataUnpickler(pickle.Unpickler):
    """An unpickler for plain data only: any class or function reference is refused."""

    def find_class(self, module: str, name: str):  # noqa: D401 - pickle's hook
        raise pickle.UnpicklingError(f"refused global {module}.{name} in a sandbox message")


def _read_exactly(fd: int, n: int) -> bytes | None:
    chunks = []
    while n:
        chunk = os.read(fd, n)
        if not chunk:
            return None
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def send(fd: int, message: object) -> None:
    payload = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    view = memoryview(_HEADER.pack(len(payload)) + payload)
    while view:
        view = view[os.write(fd, view):]


def receive(fd: int) -> object | None:
    """The next message, or None at end of file."""
    header = _read_exactly(fd, _HEADER.size)
    if header is None:
        return None
    payload = _read_exactly(fd, _HEADER.unpack(header)[0])
    if payload is None:
        return None
    return PlainDataUnpickler(io.BytesIO(payload)).load()
