"""Reusable host memory for the stored bytes of CPU reads.

A read fetches each batch's stored (compressed) bytes, decodes them and drops them. Read
into fresh memory, every batch pays a page fault per 4 KiB the kernel copies into: on a
2-core machine about a fifth of a whole-level read. Here a batch reads into arenas that
earlier batches gave back, so only the first batches of a process touch new memory.

Arenas in use are not capped (readers on several threads never wait for one another);
free arenas are kept up to ``keep_bytes`` and the rest given back to the allocator, so a
process holds at most that much between reads.
"""

from __future__ import annotations

import os
import threading

ARENA_BYTES = 16 << 20
KEEP_BYTES = 128 << 20
_ALIGN = 64  # each reservation starts on a cache line


class HostStagingPool:
    """Arenas of ``arena_bytes`` handed to batches and taken back for reuse."""

    def __init__(self, arena_bytes: int = ARENA_BYTES, keep_bytes: int = KEEP_BYTES):
        self.arena_bytes = arena_bytes
        self.keep_bytes = keep_bytes
        self._free: list[bytearray] = []
        self._lock = threading.Lock()

    def batch(self) -> HostStagedBatch:
        """A batch's staging: its ``reserve(n)`` hands out views, ``release()`` gives its
        arenas back."""
        return HostStagedBatch(self)

    @property
    def kept(self) -> int:
        """Bytes of free arenas kept for reuse."""
        with self._lock:
            return sum(len(a) for a in self._free)

    def _take(self) -> bytearray:
        with self._lock:
            if self._free:
                return self._free.pop()
        return bytearray(self.arena_bytes)

    def _give_back(self, arenas: list[bytearray]) -> None:
        with self._lock:
            for arena in arenas:
                kept = len(self._free) * self.arena_bytes
                if len(arena) == self.arena_bytes and kept + len(arena) <= self.keep_bytes:
                    self._free.append(arena)


class HostStagedBatch:
    """The arenas one batch reads into (``reserve`` is called from the fetch threads)."""

    def __init__(self, pool: HostStagingPool):
        self.pool = pool
        self._arenas: list[bytearray] = []  # every arena this batch holds
        self._filling: bytearray | None = None  # the standard arena being handed out
        self._used = 0  # bytes handed out of it
        self._lock = threading.Lock()

    def reserve(self, n: int) -> memoryview:
        """``n`` writable bytes for one read (a chunk larger than an arena gets its own)."""
        if n > self.pool.arena_bytes:
            own = bytearray(n)
            with self._lock:
                self._arenas.append(own)
            return memoryview(own)
        with self._lock:
            if self._filling is None or self._used + n > self.pool.arena_bytes:
                self._filling = self.pool._take()
                self._arenas.append(self._filling)
                self._used = 0
            start = self._used
            self._used = -(-(start + n) // _ALIGN) * _ALIGN
            return memoryview(self._filling)[start : start + n]

    def release(self) -> None:
        """Give the arenas back (the views handed out must no longer be read)."""
        with self._lock:
            arenas, self._arenas = self._arenas, []
            self._filling, self._used = None, 0
        self.pool._give_back(arenas)


_pool = HostStagingPool()


def host_staging_pool() -> HostStagingPool:
    """The process's pool, shared by every CPU read."""
    return _pool


def _fresh_pool_after_fork() -> None:
    # the parent's locks may have been held by its other threads at the fork
    global _pool
    _pool = HostStagingPool()


os.register_at_fork(after_in_child=_fresh_pool_after_fork)
