"""Fetch stored bytes concurrently: whole objects, byte ranges and suffixes.

Two sources share one interface. Local directories are read with ``os.pread`` from a
thread pool (the GIL is released during the read, so this scales with cores and disks);
any other zarr store (fsspec, object storage, memory, zip) goes through zarr-python's own
async store API, gathered on zarr's event loop.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Protocol

DEFAULT_IO_THREADS = min(32, 2 * (os.cpu_count() or 2))


@dataclass(frozen=True)
class ByteRequest:
    """Bytes of one stored object: all of it, ``length`` bytes from ``offset``, or the last
    ``suffix`` bytes."""

    key: str
    offset: int = 0
    length: int | None = None
    suffix: int | None = None


Allocator = Callable[[int], "memoryview | None"]


class ByteSource(Protocol):
    def fetch(
        self, requests: Sequence[ByteRequest], allocate: Allocator | None = None
    ) -> list[memoryview | None]:
        """The bytes of each request, or None where the object does not exist. With
        ``allocate``, a source may read straight into the buffers it hands out (e.g.
        pinned staging memory); where it returns None, ordinary memory is used."""
        ...


class LocalFileSource:
    """Reads files under ``root`` with positional reads from a shared thread pool."""

    _pools: dict[int, ThreadPoolExecutor] = {}
    _pools_lock = threading.Lock()

    def __init__(self, root: str | os.PathLike[str], threads: int = DEFAULT_IO_THREADS):
        self.root = os.fspath(root)
        self.threads = threads

    @classmethod
    def pool(cls, threads: int) -> ThreadPoolExecutor:
        with cls._pools_lock:
            if threads not in cls._pools:
                cls._pools[threads] = ThreadPoolExecutor(threads, thread_name_prefix="linumpy-io")
            return cls._pools[threads]

    def path_of(self, key: str) -> str:
        return os.path.join(self.root, *key.split("/"))

    def read_one(
        self, request: ByteRequest, allocate: Allocator | None = None
    ) -> memoryview | None:
        try:
            fd = os.open(self.path_of(request.key), os.O_RDONLY)
        except (FileNotFoundError, NotADirectoryError):
            return None
        try:
            size = os.fstat(fd).st_size
            if request.suffix is not None:
                offset = max(0, size - request.suffix)
                length = size - offset
            else:
                offset = request.offset
                end = size if request.length is None else min(size, offset + request.length)
                length = max(0, end - offset)
            view = allocate(length) if allocate is not None else None
            if view is None:
                view = memoryview(bytearray(length))
            done = 0
            while done < length:
                n = os.preadv(fd, [view[done:]], offset + done)
                if n == 0:
                    break
                done += n
            return view[:done]
        finally:
            os.close(fd)

    def fetch(
        self, requests: Sequence[ByteRequest], allocate: Allocator | None = None
    ) -> list[memoryview | None]:
        n = len(requests)
        if n <= 1:
            return [self.read_one(r, allocate) for r in requests]
        # Interleaved groups, one task each: per-request executor overhead dominated
        # small-chunk reads (a future per chunk costs about as much as reading 64 KiB).
        groups = min(n, 2 * self.threads)
        out: list[memoryview | None] = [None] * n

        def run(g: int) -> None:
            for i in range(g, n, groups):
                out[i] = self.read_one(requests[i], allocate)

        list(self.pool(self.threads).map(run, range(groups)))
        return out


class ZarrStoreSource:
    """Reads through any zarr-python store's async ``get``."""

    def __init__(self, store: Any, concurrency: int = 64):
        self.store = store
        self.concurrency = concurrency

    def fetch(
        self, requests: Sequence[ByteRequest], allocate: Allocator | None = None
    ) -> list[memoryview | None]:
        from zarr.core.sync import sync

        return sync(self._fetch_all(requests))

    async def _fetch_all(self, requests: Sequence[ByteRequest]) -> list[memoryview | None]:
        import asyncio

        from zarr.abc.store import OffsetByteRequest, RangeByteRequest, SuffixByteRequest
        from zarr.core.buffer import default_buffer_prototype

        proto = default_buffer_prototype()
        limit = asyncio.Semaphore(self.concurrency)

        async def one(r: ByteRequest) -> memoryview | None:
            if r.suffix is not None:
                rng = SuffixByteRequest(r.suffix)
            elif r.length is not None:
                rng = RangeByteRequest(r.offset, r.offset + r.length)
            elif r.offset:
                rng = OffsetByteRequest(r.offset)
            else:
                rng = None
            async with limit:
                buf = await self.store.get(r.key, prototype=proto, byte_range=rng)
            return None if buf is None else memoryview(buf.to_bytes())

        return list(await asyncio.gather(*(one(r) for r in requests)))


def source_for(store: Any) -> ByteSource:
    """The fastest byte source for a zarr store."""
    root = getattr(store, "root", None)
    if type(store).__name__ == "LocalStore" and root is not None:
        return LocalFileSource(root)
    return ZarrStoreSource(store)


def coalesce(
    requests: Sequence[ByteRequest], max_gap: int = 1 << 20
) -> tuple[list[ByteRequest], list[tuple[int, int, int]]]:
    """Merge ranged requests on the same key whose gaps are at most ``max_gap`` bytes.

    Returns the merged requests and, per input request, (merged index, start, length)
    to slice its bytes back out.
    """
    order = sorted(range(len(requests)), key=lambda i: (requests[i].key, requests[i].offset))
    merged: list[ByteRequest] = []
    where: list[tuple[int, int, int]] = [(0, 0, 0)] * len(requests)
    cur_key, cur_start, cur_end = None, 0, 0
    members: list[int] = []

    def flush() -> None:
        if cur_key is None:
            return
        merged.append(ByteRequest(cur_key, cur_start, cur_end - cur_start))
        for i in members:
            r = requests[i]
            where[i] = (len(merged) - 1, r.offset - cur_start, r.length or 0)

    for i in order:
        r = requests[i]
        assert r.length is not None and r.suffix is None
        if r.key == cur_key and r.offset <= cur_end + max_gap:
            cur_end = max(cur_end, r.offset + r.length)
            members.append(i)
            continue
        flush()
        cur_key, cur_start, cur_end, members = r.key, r.offset, r.offset + r.length, [i]
    flush()
    return merged, where
