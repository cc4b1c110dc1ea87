"""Fixed capture buffers: how the fork server reads a program's stdout, stderr and status.

Each stream is read into one reused anonymous mapping, never more than its cap (one byte
more is read to know the cap was passed), so a program's output never grows the server, and
the reply sends the buffer's bytes as they are (``protocol.send``'s raw sections).
"""

from __future__ import annotations

import mmap
import os

_READ_CHUNK = 1 << 16


class Capture:
    """One output stream read into a fixed buffer: at most ``cap`` bytes are kept, one more
    is read to know the cap was passed. The buffer (an anonymous mapping) is reused and
    grows only to the largest cap asked for, so a program's output never grows the server
    beyond the caps."""

    def __init__(self) -> None:
        self.buffer = mmap.mmap(-1, mmap.PAGESIZE)
        self.cap = self.size = 0
        self.over = False

    def reset(self, cap: int) -> None:
        if cap + 1 > len(self.buffer):
            self.buffer.close()
            self.buffer = mmap.mmap(-1, cap + 1)
        self.cap, self.size, self.over = cap, 0, False

    def read_from(self, fd: int) -> int:
        """Read what is there: bytes read (0 at end of file), -1 if it would block."""
        if self.size > self.cap:  # already over: read and drop
            try:
                return len(os.read(fd, _READ_CHUNK))
            except BlockingIOError:
                return -1
        with memoryview(self.buffer) as view:
            try:
                got = os.readv(fd, [view[self.size:self.cap + 1]])
            except BlockingIOError:
                return -1
        self.size += got
        if self.size > self.cap:
            self.over = True
        return got

    def view(self) -> memoryview:
        return memoryview(self.buffer)[:min(self.size, self.cap)]
