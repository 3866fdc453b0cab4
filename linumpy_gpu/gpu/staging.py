"""Pinned host staging for compressed bytes: reads land here, then go to the GPU.

A process-wide ring of fixed-size pinned arenas (64 MiB each), bounded by a cap (the
``pinned_bytes`` setting, default 1 GiB). A batch fills arenas as its reads need them (one
:class:`StagedBatch` per batch) and gives them back as soon as its bytes are on the device,
so the next batch's reads never wait for a decode. Threads reading at once share the ring:
a batch that knows about how many bytes it will read takes that many arenas before its
first read, all at once and in turn with the other readers, so readers queue for the ring
instead of each filling part of it and spilling the rest into ordinary memory (8 threads
reading plane-chunked tiles would otherwise run slower together than one thread alone).
A read that cannot get an arena within a short wait reads into ordinary memory instead of
exceeding the cap.
"""

from __future__ import annotations

import ctypes
import itertools
import threading
import time
from collections import deque
from collections.abc import Sequence
from typing import Any, cast

import numpy as np

from linumpy_gpu.core.placement import SLOT_ALIGN

ARENA_BYTES = 64 << 20
# How long a batch waits for arenas held by others before reading into ordinary memory:
# long enough for the previous batch's upload to give its arenas back (~15 ms for 768 MiB),
# short enough that readers filling the ring from several threads do not queue behind one
# another for long.
ARENA_WAIT = 0.1
# How long a batch that holds nothing waits in turn for the arenas it asked for up front
# (others give theirs back once uploaded, a few ms to tens of ms each); past it, the batch
# takes arenas as its reads need them, as if it had asked for none.
QUEUE_WAIT = 10.0
ALIGN = SLOT_ALIGN  # every reservation starts on a slot boundary, like device buffers


def buffer_address(view: Any) -> int:
    """The address of a buffer's first byte (ValueError for an empty one)."""
    try:  # writable buffers (pinned arenas and views of them): ctypes reads it directly
        return ctypes.addressof(ctypes.c_char.from_buffer(view))
    except TypeError:  # read-only (bytes)
        if not len(view):
            raise ValueError("an empty buffer has no address") from None
        return np.frombuffer(view, dtype=np.uint8).__array_interface__["data"][0]


class Arena:
    """One pinned buffer, handed out front to back."""

    def __init__(self, size: int, memory: Any = None):
        """``memory``: a writable buffer of ``size`` bytes (default: new pinned memory)."""
        if memory is None:
            import cupy

            memory = cupy.cuda.alloc_pinned_memory(size)
        self.size = size
        self._mem = memory
        self.array = np.frombuffer(self._mem, dtype=np.uint8, count=size)
        self.view = memoryview(cast(Any, self.array))  # numpy arrays are buffers
        self.base = self.array.ctypes.data
        self.used = 0


class StagingPool:
    """The ring: at most ``cap`` bytes of pinned arenas, reused across reads."""

    def __init__(
        self,
        cap: int = 1 << 30,
        arena_bytes: int = ARENA_BYTES,
        make_arena: Any = Arena,
    ):
        self.cap = max(cap, 1 << 20)
        self.arena_bytes = max(1 << 20, min(arena_bytes, self.cap))
        self._make_arena = make_arena
        self._free: list[Arena] = []
        self._allocated = 0  # pinned bytes the ring holds (free or lent)
        self._cond = threading.Condition()
        self._queue: deque[int] = deque()  # tickets of batches waiting for arenas up front
        self._tickets = itertools.count()

    def acquire(self, size: int, wait: float = ARENA_WAIT) -> Arena | None:
        """An arena of at least ``size`` bytes, or None when the cap stays exhausted for
        ``wait`` seconds or ``size`` exceeds the cap (the caller then uses ordinary memory)."""
        size = max(self.arena_bytes, -(-size // (1 << 20)) * (1 << 20))
        if size > self.cap:
            return None
        deadline = time.monotonic() + wait
        with self._cond:
            while True:
                fits = [a for a in self._free if a.size >= size]
                if fits:
                    arena = min(fits, key=lambda a: a.size)
                    self._free.remove(arena)
                    arena.used = 0
                    return arena
                if self._allocated + size <= self.cap:
                    self._allocated += size
                    break
                if self._free:  # drop a too-small free arena to make room
                    self._allocated -= self._free.pop().size
                    continue
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return None
                self._cond.wait(remaining)
        try:
            return self._make_arena(size)
        except Exception:
            with self._cond:
                self._allocated -= size
                self._cond.notify()
            return None

    def arenas_for(self, nbytes: int) -> int:
        """How many standard arenas ``nbytes`` of reads take (at most the cap's worth)."""
        return min(self.cap // self.arena_bytes, -(-max(0, nbytes) // self.arena_bytes))

    def acquire_many(self, count: int, wait: float | None = None) -> list[Arena]:
        """``count`` arenas (at most the cap's worth), all at once: callers wait in turn
        (first come, first served) until that many are free, or get none after ``wait``
        seconds. A caller must hold no arena while it waits here (holders never wait for
        others without a bound, so the ring cannot deadlock)."""
        count = min(count, self.cap // self.arena_bytes)
        if count <= 0:
            return []
        deadline = time.monotonic() + (QUEUE_WAIT if wait is None else wait)
        with self._cond:
            ticket = next(self._tickets)
            self._queue.append(ticket)
            try:
                while True:
                    if self._queue[0] == ticket:
                        taken = self._take_locked(count)
                        if taken is not None:
                            break
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        return []
                    self._cond.wait(remaining)
            finally:
                self._queue.remove(ticket)
                self._cond.notify_all()  # the next in turn, or a lazy waiter
        arenas, fresh = taken
        made = []
        try:
            for _ in range(fresh):
                made.append(self._make_arena(self.arena_bytes))
        except Exception:
            with self._cond:
                self._allocated -= (fresh - len(made)) * self.arena_bytes
                self._cond.notify_all()
        return arenas + made

    def _take_locked(self, count: int) -> tuple[list[Arena], int] | None:
        """Free arenas and a number of new ones to make that add up to ``count``, with
        the new ones counted against the cap; None when the cap does not allow it now."""
        held = self._allocated - sum(a.size for a in self._free)  # by other batches
        if held + count * self.arena_bytes > self.cap:
            return None
        while True:  # free arenas larger than standard ones make room for new ones
            free = sorted(self._free, key=lambda a: a.size)
            use = free[:count]
            fresh = count - len(use)
            if self._allocated + fresh * self.arena_bytes <= self.cap:
                break
            self._free.remove(free[-1])
            self._allocated -= free[-1].size
        for arena in use:
            self._free.remove(arena)
            arena.used = 0
        self._allocated += fresh * self.arena_bytes
        return use, fresh

    def release(self, arena: Arena) -> None:
        """Give ``arena`` back to the ring."""
        with self._cond:
            self._free.append(arena)
            self._cond.notify_all()

    def batch(self, expected_bytes: int = 0) -> StagedBatch:
        """A batch's staging; with ``expected_bytes``, the arenas for that many bytes are
        taken up front (see :meth:`acquire_many`)."""
        return StagedBatch(self, expected_bytes)


class StagedBatch:
    """The arenas one batch reads into. ``reserve`` is the fetch stage's allocator
    (thread-safe); ``upload`` copies every arena to one device buffer (one copy per arena)
    and hands the arenas back once the copies are done."""

    def __init__(self, pool: StagingPool, expected_bytes: int = 0):
        self.pool = pool
        self.arenas: list[Arena] = []
        self._lock = threading.Lock()
        self._exhausted = False
        # taken up front, handed to reads in order; those left over go back with the rest
        self._ahead: list[Arena] = (
            pool.acquire_many(pool.arenas_for(expected_bytes)) if expected_bytes > 0 else []
        )

    def reserve(self, n: int) -> memoryview | None:
        """A writable pinned view of ``n`` bytes, or None (use ordinary memory)."""
        with self._lock:
            if self._exhausted:
                return None
            arena = self.arenas[-1] if self.arenas else None
            if (arena is None or arena.used + n > arena.size) and self._ahead:
                fits = next((a for a in self._ahead if a.size >= n), None)
                if fits is not None:
                    self._ahead.remove(fits)
                    self.arenas.append(fits)
                    arena = fits
            if arena is None or arena.used + n > arena.size:
                held = sum(a.size for a in self.arenas) + sum(a.size for a in self._ahead)
                # waiting only helps if other readers' arenas, not this batch's, fill the cap
                alone = held + max(n, self.pool.arena_bytes) > self.pool.cap
                arena = self.pool.acquire(n, wait=0.0 if alone else ARENA_WAIT)
                if arena is None:
                    self._exhausted = True
                    return None
                self.arenas.append(arena)
            start = arena.used
            arena.used = -(-(start + n) // ALIGN) * ALIGN
            return arena.view[start : start + n]

    def locate(self, view: Any) -> tuple[int, int] | None:
        """(arena index, offset) of bytes inside this batch's arenas (any view of them,
        e.g. a slice of what ``reserve`` handed out), else None."""
        found = self.locate_all([view])
        return None if found is None else (int(found[0][0]), int(found[1][0]))

    def locate_all(self, views: Sequence[Any]) -> tuple[np.ndarray, np.ndarray] | None:
        """Per view, the index of the arena of this batch that holds its bytes and their
        offset in it (int64 arrays), or None unless every view lies in an arena (a batch
        of small chunks has thousands: one address each, the rest on arrays)."""
        if not views or not self.arenas:
            return None
        try:
            addrs = np.fromiter(map(buffer_address, views), dtype=np.int64, count=len(views))
        except ValueError:  # an empty view: no address
            return None
        sizes = np.fromiter(map(len, views), dtype=np.int64, count=len(views))
        bases = np.array([a.base for a in self.arenas], dtype=np.int64)
        ends = bases + np.array([a.size for a in self.arenas], dtype=np.int64)
        order = np.argsort(bases)
        k = np.searchsorted(bases[order], addrs, side="right") - 1
        arena = order[np.maximum(k, 0)]
        inside = (k >= 0) & (addrs + sizes <= ends[arena])
        if not inside.all():
            return None
        return arena, addrs - bases[arena]

    def upload(
        self, device_buffer_factory: Any, stream: Any, release: bool = True
    ) -> tuple[Any, list[int]]:
        """Copy the used part of every arena into one device buffer made by
        ``device_buffer_factory(nbytes)``; returns it and each arena's start in it. Waits for
        the copies, then gives the arenas back (``release=False``: the caller does, once it
        no longer reads them)."""
        starts, total = [], 0
        for arena in self.arenas:
            starts.append(total)
            total += -(-arena.used // ALIGN) * ALIGN
        dev = device_buffer_factory(max(total, 1))
        for arena, start in zip(self.arenas, starts, strict=True):
            if arena.used:
                dev[start : start + arena.used].data.copy_from_host_async(
                    ctypes.c_void_p(arena.base), arena.used, stream
                )
        stream.synchronize()
        if release:
            self.release()
        return dev, starts

    def release(self) -> None:
        """Give every arena of this batch back to the ring (again is harmless)."""
        with self._lock:
            arenas, self.arenas = self.arenas + self._ahead, []
            self._ahead = []
            self._exhausted = True
        for arena in arenas:
            self.pool.release(arena)


_pools: dict[int, StagingPool] = {}
_pools_lock = threading.Lock()


def staging_pool(cap: int) -> StagingPool:
    """The process's ring of ``cap`` bytes (one per cap: readers that share a cap share
    its arenas)."""
    with _pools_lock:
        if cap not in _pools:
            _pools[cap] = StagingPool(cap)
        return _pools[cap]


def download_spans(
    addresses: np.ndarray,
    sizes: np.ndarray,
    stream: Any,
    pool: StagingPool | None = None,
    room: int = 0,
) -> tuple[list[memoryview], StagedBatch | None]:
    """Copy device spans (``sizes[i]`` bytes at device address ``addresses[i]``) to host
    memory: into ``pool``'s pinned arenas where it has room (one packing kernel, then one
    copy per arena), the rest into one ordinary buffer. Each view has ``room`` writable
    bytes after its span's. Waits for the copies; returns the views and the batch whose
    arenas they lie in, to be released once they are no longer read (None: no arenas)."""
    import cupy

    from linumpy_gpu.gpu.kernels import kernel

    n = len(sizes)
    sizes = np.asarray(sizes, dtype=np.int64)
    spaced = -(-(sizes + room) // ALIGN) * ALIGN  # every span starts 8-byte aligned
    staged = pool.batch(int(spaced.sum())) if pool is not None and n else None
    views: list[Any] = [None] * n
    try:
        if staged is not None:  # (an empty view has no address to locate: ordinary memory)
            views = [staged.reserve(int(s)) if s else None for s in sizes + room]
        pinned = np.flatnonzero([v is not None for v in views])
        ordinary = np.flatnonzero([v is None for v in views])
        dst = np.zeros(n, dtype=np.int64)  # each span's offset in the device packing buffer
        arena_starts: list[int] = []
        total = 0
        if pinned.size:
            assert staged is not None
            arena_of, offset = staged.locate_all([views[i] for i in pinned]) or (None, None)
            assert arena_of is not None and offset is not None  # reserve hands out arena views
            for arena in staged.arenas:
                arena_starts.append(total)
                total += -(-arena.used // ALIGN) * ALIGN
            dst[pinned] = np.asarray(arena_starts, dtype=np.int64)[arena_of] + offset
        ordinary_start = total
        if ordinary.size:
            dst[ordinary] = total + np.concatenate([[0], np.cumsum(spaced[ordinary][:-1])])
            total += int(spaced[ordinary].sum())
        if n:
            with stream:
                packed = cupy.empty(max(total, 1), dtype=np.uint8)
                spans = np.stack(
                    [
                        np.asarray(addresses, dtype=np.uint64),
                        np.uint64(packed.data.ptr) + dst.astype(np.uint64),
                        sizes.astype(np.uint64),
                    ],
                    axis=1,
                )
                d_spans = cupy.asarray(spans)
                kernel("copy_spans")((n,), (256,), (d_spans, np.int32(n)))
            for arena, start in zip(staged.arenas if staged else [], arena_starts, strict=True):
                packed[start : start + arena.used].data.copy_to_host_async(
                    ctypes.c_void_p(arena.base), arena.used, stream
                )
            if ordinary.size:
                host = np.empty(total - ordinary_start, dtype=np.uint8)
                packed[ordinary_start:].data.copy_to_host_async(
                    ctypes.c_void_p(host.ctypes.data), host.nbytes, stream
                )
                whole = memoryview(cast(Any, host))
                for i in ordinary.tolist():
                    start = int(dst[i]) - ordinary_start
                    views[i] = whole[start : start + int(sizes[i]) + room]
            stream.synchronize()
    except BaseException:
        if staged is not None:
            staged.release()  # a failed copy must not keep the ring's arenas
        raise
    return views, staged
