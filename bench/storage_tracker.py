"""Peak memory of a block of code: the tensor storages it allocates (any device), and the
process's resident memory (:func:`rss`, :func:`reset_rss_peak`).

Details: docs/modules.md.
"""

from __future__ import annotations

import re
import weakref
from pathlib import Path
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten


class StorageTracker(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.current = 0
        self.peak = 0
        self._refs: dict[int, Any] = {}

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        out = func(*args, **(kwargs or {}))
        inputs = {t.untyped_storage().data_ptr() for t in tree_flatten((args, kwargs))[0]
                  if isinstance(t, torch.Tensor) and t.device.type != "meta"}
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor) and t.device.type != "meta":
                self._count(t.untyped_storage(), inputs)
        return out

    def _count(self, storage: torch.UntypedStorage, inputs: set[int]) -> None:
        if storage.data_ptr() not in inputs:
            self.track(storage)

    def track(self, storage: torch.UntypedStorage) -> None:
        """Count ``storage`` until it is freed (once: a storage seen before, or empty, is not)."""
        key = id(storage)
        size = storage.nbytes()
        if key in self._refs or size == 0:
            return
        self.current += size
        self.peak = max(self.peak, self.current)

        def freed(_ref: Any, key: int = key, size: int = size) -> None:
            self.current -= size
            self._refs.pop(key, None)

        self._refs[key] = weakref.ref(storage, freed)

    def reset_peak(self) -> None:
        """Start a new peak from what is alive now."""
        self.peak = self.current


def rss(key: str = "VmRSS") -> int:
    """The process's resident memory in bytes (``VmHWM``: its peak since the last reset)."""
    return int(re.search(rf"{key}:\s+(\d+) kB", Path("/proc/self/status").read_text()).group(1)) * 1024


def reset_rss_peak() -> bool:
    """Reset ``VmHWM`` to the current resident memory; False where the kernel refuses."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False
