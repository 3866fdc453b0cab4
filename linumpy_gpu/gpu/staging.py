"""Pinned host staging for compressed bytes: reads land here, then one copy to the GPU.

A process-wide pool of pinned arenas, bounded by a cap (``LINUMPY_GPU_PINNED_CAP`` bytes,
default 1 GiB). A read takes one arena per batch in flight (two with prefetching) and gives
it back once that batch's bytes are on the device; threads reading at once share the pool
and wait for an arena rather than exceed the cap.
"""

from __future__ import annotations

import os
import threading
from typing import Any

import numpy as np

DEFAULT_CAP = int(os.environ.get("LINUMPY_GPU_PINNED_CAP", 1 << 30))
ALIGN = 64


class Arena:
    """One pinned buffer handed out front to back (thread-safe bump allocation)."""

    def __init__(self, size: int):
        import cupy

        self.size = size
        self._mem = cupy.cuda.alloc_pinned_memory(size)
        self.array = np.frombuffer(self._mem, dtype=np.uint8, count=size)
        self.base = self.array.ctypes.data
        self.used = 0
        self._lock = threading.Lock()

    def reset(self) -> None:
        self.used = 0

    def reserve(self, n: int) -> memoryview | None:
        """A writable view of ``n`` bytes, or None when the arena is full."""
        with self._lock:
            start = self.used
            end = start + n
            if end > self.size:
                return None
            self.used = -(-end // ALIGN) * ALIGN
        return memoryview(self.array[start:end])

    def offset_of(self, view: Any) -> int | None:
        """Offset of a view inside this arena, or None if it lives elsewhere."""
        addr = np.frombuffer(view, dtype=np.uint8).ctypes.data if len(view) else None
        if addr is None or not self.base <= addr < self.base + self.size:
            return None
        return addr - self.base


class StagingPool:
    def __init__(self, cap: int = DEFAULT_CAP):
        self.cap = cap
        self._free: list[Arena] = []
        self._allocated = 0
        self._cond = threading.Condition()

    def acquire(self, size: int, wait: float = 0.25) -> Arena | None:
        """An arena of at least ``size`` bytes (capped), or None if the cap stays exhausted
        for ``wait`` seconds (the caller then reads into ordinary memory)."""
        import time

        size = max(1 << 20, -(-size // (1 << 20)) * (1 << 20))
        size = min(size, self.cap)
        deadline = time.monotonic() + wait
        with self._cond:
            while True:
                fits = [a for a in self._free if a.size >= size]
                if fits:
                    arena = min(fits, key=lambda a: a.size)
                    self._free.remove(arena)
                    arena.reset()
                    return arena
                if self._allocated + size <= self.cap:
                    self._allocated += size
                    break
                if self._free:  # drop a too-small free arena to make room
                    small = self._free.pop()
                    self._allocated -= small.size
                    continue
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return None
                self._cond.wait(remaining)
        try:
            return Arena(size)
        except Exception:
            with self._cond:
                self._allocated -= size
            return None

    def release(self, arena: Arena) -> None:
        with self._cond:
            self._free.append(arena)
            self._cond.notify()

    @property
    def allocated(self) -> int:
        return self._allocated


_pool: StagingPool | None = None
_pool_lock = threading.Lock()


def staging_pool() -> StagingPool:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = StagingPool()
        return _pool
