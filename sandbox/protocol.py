"""Framing between the pool (main process) and its fork-server workers.

Messages are length-prefixed pickles of plain data (dicts, lists, str, bytes,
numbers). The pool reads them with an unpickler that refuses every global, so
even a confused worker can only ever hand back plain data.

A reply may carry raw byte *sections* after the pickle (a program's stdout, stderr,
status): the worker writes them straight from its fixed capture buffers and the pool
reads each into one buffer of its announced size, so a program's output is never
copied through a pickle, and neither side holds more than one copy of it.
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


def _write_all(fd: int, data) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def send(fd: int, message: object, sections: dict | None = None) -> None:
    """Send ``message`` (plain data; a dict when there are sections), then each section
    (name -> bytes-like) raw; :func:`receive` puts them back into the dict by name."""
    if sections:
        message = dict(message)  # type: ignore[arg-type]
        message["_sections"] = [(name, len(data)) for name, data in sections.items()]
    payload = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    _write_all(fd, _HEADER.pack(len(payload)) + payload)
    for data in (sections or {}).values():
        _write_all(fd, data)


def _read_section(fd: int, size: int) -> bytes | None:
    buffer = bytearray(size)
    view, done = memoryview(buffer), 0
    while done < size:
        got = os.readv(fd, [view[done:]])
        if not got:
            return None
        done += got
    view.release()
    return bytes(buffer)


def receive(fd: int) -> object | None:
    """The next message, or None at end of file."""
    header = _read_exactly(fd, _HEADER.size)
    if header is None:
        return None
    payload = _read_exactly(fd, _HEADER.unpack(header)[0])
    if payload is None:
        return None
    message = PlainDataUnpickler(io.BytesIO(payload)).load()
    if isinstance(message, dict) and "_sections" in message:
        for name, size in message.pop("_sections"):
            data = _read_section(fd, int(size))
            if data is None:
                return None
            message[name] = data
    return message
