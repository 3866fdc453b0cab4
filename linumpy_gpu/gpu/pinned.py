"""Reusable host buffers beside the staging ring, pinned only within one process-wide budget.

The staging ring (:mod:`.staging`) holds the bytes reads land in. A few paths still pack
bytes into a buffer of their own before one copy to or from the device: frames that did not
land in the ring (it stayed full past its wait, or they came through zarr's codec pipeline),
chunks decoded on the CPU by other codecs, and compressed chunks on their way back from the
GPU encoder. Each thread keeps one such buffer per path and grows it by doubling. Pinned,
such buffers would grow outside every cap (tile readers spilling past the ring each holding
a batch's worth). Here they are pinned while all of them together fit DEFAULT_BUDGET
(256 MiB); past it a buffer is ordinary memory, which the driver copies through its own
staging (slower, bounded).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import numpy as np

DEFAULT_BUDGET = 256 << 20
MIN_BYTES = 1 << 20


class SidePinnedBudget:
    """Bytes of side buffers pinned now, against the budget."""

    def __init__(self, budget: int = DEFAULT_BUDGET):
        self.budget = budget
        self.pinned = 0
        self._lock = threading.Lock()

    def reserve(self, nbytes: int) -> bool:
        """Count ``nbytes`` more pinned bytes, if the budget has room; whether it had."""
        with self._lock:
            if self.pinned + nbytes > self.budget:
                return False
            self.pinned += nbytes
            return True

    def give_back(self, nbytes: int) -> None:
        """Count ``nbytes`` pinned bytes as freed."""
        with self._lock:
            self.pinned -= nbytes


_budget = SidePinnedBudget()  # the process-wide budget


def _alloc_pinned(nbytes: int) -> Any:
    import cupy

    return cupy.cuda.alloc_pinned_memory(nbytes)


class GrowingHostBuffer:
    """One owner's reusable buffer: :meth:`get` returns at least ``nbytes`` of it, pinned
    where the budget allows (``is_pinned`` says which; the device reads pinned memory
    directly, ordinary memory only through a copy)."""

    def __init__(
        self,
        budget: SidePinnedBudget | None = None,
        alloc_pinned: Callable[[int], Any] = _alloc_pinned,
    ):
        self._budget = budget or _budget
        self._alloc_pinned = alloc_pinned
        self._memory: Any = None
        self._view: np.ndarray | None = None
        self._reserved = 0
        self.is_pinned = False

    @property
    def capacity(self) -> int:
        """Bytes of pinned memory this buffer holds for reuse."""
        return 0 if self._view is None else self._view.size

    def get(self, nbytes: int) -> np.ndarray:
        """At least ``nbytes`` of this buffer (grown, pinned where the budget allows)."""
        nbytes = max(1, nbytes)
        if self._view is not None and self._view.size >= nbytes:
            self.is_pinned = True
            return self._view
        held = 0 if self._view is None else self._view.size
        for size in (max(nbytes, 2 * held, MIN_BYTES), nbytes):
            if self._budget.reserve(size - self._reserved):
                try:
                    memory = self._alloc_pinned(size)
                except Exception:
                    self._budget.give_back(size - self._reserved)
                    raise
                self._memory, self._reserved, self.is_pinned = memory, size, True
                self._view = np.frombuffer(memory, dtype=np.uint8, count=size)
                return self._view
        # Ordinary memory is not kept: holding the largest batch ever packed per thread
        # would only move the unbounded growth from pinned memory to RAM.
        self.is_pinned = False
        return np.empty(nbytes, dtype=np.uint8)

    def _drop(self) -> None:
        self._budget.give_back(self._reserved)
        self._memory, self._view, self._reserved, self.is_pinned = None, None, 0, False

    def __del__(self) -> None:  # per-thread owners go with their thread
        self._drop()
