"""Local chunk files read by kvikio's C++ thread pool.

A full level of 64^3 chunks is 8192 files of about 330 KB. Read from Python threads, every
``open``/``pread``/``close`` hands the GIL around, and the threads queue behind one another
and behind the thread driving the GPU: a Python-thread fetch peaks at about 4 threads and
gets slower with more. Here one Python thread only opens files and submits reads;
kvikio's threads copy the bytes without the GIL.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from linumpy_gpu import config
from linumpy_gpu.errors import StoreError
from linumpy_gpu.io.sources import (
    DISK_THREADS,
    REPROBE,
    SLOW_THREAD_RATE,
    Allocator,
    ByteRequest,
    LocalFileSource,
    open_regular,
    spans_in_file,
)

# Files open at once (each three times: once here, twice by kvikio, with and without
# O_DIRECT): well under the usual limit of 1024 descriptors.
OPEN_FILES = 128
# Reads in flight on the page cache: each is a memory copy, and more at once only compete
# for cores with the thread driving the GPU (a warm 64^3 level reads about a quarter slower
# with 32 in flight than with 4). Storage slower than that per read (measured as the pread
# source does) gets more reads in flight: up to SLOW_BYTES_IN_FLIGHT of them.
WARM_READS = 8
# Bytes a fetch reads with WARM_READS in flight before it judges the storage's speed.
PROBE_BYTES = 8 << 20
# On slower storage, reads in flight are bounded by their bytes, not only their number: a
# disk reaches its rate with 128 reads of 330 KB in flight but not with 128 reads of
# several MiB, and about 128 MiB in flight serves both best (less starves the disk, more
# makes it seek). Counted per read as submitted: a shard's inner chunks come as runs of
# several MiB each.
SLOW_BYTES_IN_FLIGHT = 128 << 20
# Looking files up ahead (``warm_metadata``) costs the thread driving the GPU its share of the
# GIL; it pays only on storage, and PROBE_BYTES alone misjudge a busy page cache as slow
# often enough (a warm level reads a quarter slower when every fetch looks its files up).
# So it waits until a whole fetch of at least CONFIRM_BYTES came in below
# CONFIRMED_SLOW_RATE: a page cache fills pinned memory at 6-25 GB/s, a disk at about 2.
CONFIRM_BYTES = 64 << 20
CONFIRMED_SLOW_RATE = 3e9
# Before that (a cold read's first fetch, its largest: up to 3/4 of the pinned ring), a
# fetch its probe judged slow looks up this many files ahead of the ones it opens, a window
# at a time, for as long as the whole fetch so far comes in below CONFIRMED_SLOW_RATE: a
# misjudged page cache then pays for one window, not for every file of the fetch. Plane
# chunks are one file per directory, so each cold open reads a directory and an inode.
# Whole files only: a shard's runs touch few files, and looking them up ahead only takes
# the thread's time.
LOOK_AHEAD_FILES = 64
# kvikio's pool size when the user has not chosen one (KVIKIO_NTHREADS): as many reads in
# flight as a disk wants; on the page cache extra threads cost nothing here (no GIL).
KVIKIO_THREADS = DISK_THREADS
# Ranges of larger files (a shard's runs of inner chunks) on storage confirmed slow (a whole
# fetch, see CONFIRM_BYTES) are read with O_DIRECT: kvikio's opportunistic direct reads send
# page-aligned middles to the device as submitted, past the page cache and its readahead,
# which a disk serves faster for long runs; whole chunk files the other way (readahead
# serves a whole small file well), so they stay buffered. Never while probing (on the page
# cache O_DIRECT would read the disk instead), and only where the reader does not ask the
# OS to read ahead (what it advised is in the page cache, which O_DIRECT skips).

_configured = False
_configure_lock = threading.Lock()
_direct_users = 0  # fetches reading with O_DIRECT now (kvikio's switch is process-wide)
_direct_before = False


def kvikio_available() -> bool:
    """Whether kvikio imports here."""
    try:
        import kvikio  # noqa: F401
    except Exception:
        return False
    return True


def _configure_pool() -> None:
    """Give kvikio's pool KVIKIO_THREADS threads, unless the user sized it (its default is
    one thread, which would serialize every read)."""
    global _configured
    with _configure_lock:
        if _configured:
            return
        import kvikio.defaults

        if hasattr(kvikio.defaults, "set"):  # kvikio >= 25.02
            current = kvikio.defaults.get("num_threads")

            def resize(n: int) -> None:
                kvikio.defaults.set("num_threads", n)
        else:
            current = kvikio.defaults.get_num_threads()
            resize = kvikio.defaults.num_threads_reset
        if not config.environment_sets("KVIKIO_NTHREADS") and current < 2:
            resize(KVIKIO_THREADS)
        _configured = True


@contextlib.contextmanager
def _direct_reads() -> Iterator[None]:
    """kvikio's direct reads on for the duration (kvikio's switch is process-wide: it goes
    back to what it was when the last fetch using it is done); nothing where kvikio has no
    such switch (before 25.10)."""
    global _direct_users, _direct_before
    import kvikio.defaults

    with _configure_lock:
        if _direct_users == 0:
            try:
                _direct_before = bool(kvikio.defaults.get("auto_direct_io_read"))
                kvikio.defaults.set("auto_direct_io_read", True)
            except Exception:  # an older kvikio: buffered reads
                supported = False
            else:
                supported = True
        else:
            supported = True
        if supported:
            _direct_users += 1
    try:
        yield
    finally:
        if supported:
            with _configure_lock:
                _direct_users -= 1
                if _direct_users == 0:
                    kvikio.defaults.set("auto_direct_io_read", _direct_before)


@dataclass
class _ReadGroup:
    """Reads of one file submitted together, waited for together."""

    path: str
    handle: Any
    reads: list[tuple[int, memoryview, Any]] = field(default_factory=list)
    nbytes: int = 0
    closes: bool = True  # the file's last group: close it once done
    own_fd: int | None = None  # the descriptor kvikio opened the file through, if ours


class KvikioFileSource(LocalFileSource):
    """Reads files under ``root`` with kvikio (``pread`` into the caller's buffers, e.g. the
    pinned staging ring); the same requests and results as :class:`LocalFileSource`."""

    def __init__(
        self,
        root: str | os.PathLike[str],
        threads: int | None = None,
        read_ahead_bytes: int = 512 << 20,
    ):
        super().__init__(root, threads, read_ahead_bytes)
        self.slow_confirmed = False  # a whole fetch was slow: see CONFIRMED_SLOW_RATE
        _configure_pool()

    def reads_ahead(self) -> bool:
        """Only once a whole fetch was slow (CONFIRM_BYTES): a probe's PROBE_BYTES misjudge a
        busy page cache as slow too often for hints that cost the fetch thread its time."""
        return super().reads_ahead() and self.slow_confirmed

    def fetch(
        self,
        requests: Sequence[ByteRequest],
        allocate: Allocator | None = None,
        size_hint: int | None = None,
    ) -> list[memoryview | None]:
        """The bytes of each request (see :meth:`LocalFileSource.fetch`), read by kvikio's
        thread pool with a bounded number of reads and bytes in flight."""
        import kvikio

        out: list[memoryview | None] = [None] * len(requests)
        by_key: dict[str, list[int]] = {}
        for i, r in enumerate(requests):
            by_key.setdefault(r.key, []).append(i)
        # reads of one file go in groups, waited for oldest first; a file closes with its
        # last group (a shard's runs are waited for as they go, not all at once)
        in_flight: deque[_ReadGroup] = deque()
        self._fetches += 1
        probing = not self.slow_storage or self._fetches % REPROBE == 0
        # (reads, bytes) in flight: a number of reads on the page cache, bytes on storage
        limit = (WARM_READS, None) if probing else (OPEN_FILES, SLOW_BYTES_IN_FLIGHT)
        keys = list(by_key)
        opened = 0  # files of ``keys`` opened so far
        looked_up = 0  # files of ``keys`` handed to warm_metadata so far
        if not probing and self.slow_confirmed:
            self.warm_metadata(keys)
            looked_up = len(keys)
        outstanding = 0
        outstanding_bytes = 0
        done_bytes = 0
        # left after the finally below: every read is done before direct reads go off
        ranges = all(r.length is not None for r in requests)
        direct = (
            _direct_reads()
            # bytes a reader asked the OS for ahead are in the page cache, which O_DIRECT skips
            if not probing and self.slow_confirmed and ranges and not self.reads_ahead()
            else contextlib.nullcontext()
        )
        t0 = time.perf_counter()

        def rate_so_far() -> float:
            return done_bytes / max(time.perf_counter() - t0, 1e-9)

        def collect() -> None:
            # the oldest group; while probing, the first PROBE_BYTES read decide the window
            # for the rest of this fetch (a cold read's first batch is often large), and on
            # slow storage the files not yet opened are looked up from many threads
            nonlocal outstanding, outstanding_bytes, done_bytes, probing, limit, looked_up
            group = in_flight.popleft()
            nbytes = group.nbytes
            outstanding -= len(group.reads)
            outstanding_bytes -= nbytes
            self._finish(group, out)
            done_bytes += nbytes
            if probing and done_bytes >= PROBE_BYTES:
                probing = False
                self.slow_storage = self._slow(done_bytes, time.perf_counter() - t0)
                if self.slow_storage:
                    limit = (OPEN_FILES, SLOW_BYTES_IN_FLIGHT)
                    if self.slow_confirmed:
                        self.warm_metadata(keys[opened:])
                        looked_up = len(keys)
            if (
                not ranges
                and self.slow_storage
                and not probing
                and looked_up - opened < LOOK_AHEAD_FILES // 2
                and looked_up < len(keys)
                and rate_so_far() < CONFIRMED_SLOW_RATE
            ):
                start = max(looked_up, opened)
                looked_up = min(len(keys), start + LOOK_AHEAD_FILES)
                self.warm_metadata(keys[start:looked_up])

        def too_many() -> bool:
            reads, nbytes = limit
            return (
                outstanding > reads
                or (nbytes is not None and outstanding_bytes > nbytes)
                or len(in_flight) > OPEN_FILES
            )

        with direct:
            try:
                for key, members in by_key.items():
                    opened += 1
                    path = self.path_of(key)
                    pinned = requests[members[0]].fd
                    own = None
                    if pinned is None:
                        # opened here first (a FIFO refused before a read can block on it),
                        # then by kvikio through this handle: kvikio opens a file twice
                        # (with and without O_DIRECT) and reads parts through each, so both
                        # must be this version of the file, whatever replaces the path
                        held = open_regular(path)
                        if held is None:
                            continue  # a missing chunk: the fill value
                        own = held[0]
                    # a pinned file is read through its open handle: the version its index
                    # came from, whatever replaced the path since
                    try:
                        handle = kvikio.CuFile(
                            f"/proc/self/fd/{pinned if own is None else own}", "r"
                        )
                    except (RuntimeError, OSError) as exc:  # kvikio raises RuntimeError
                        if own is not None:
                            os.close(own)
                        raise StoreError(f"could not open '{path}': {exc}") from exc
                    # ours stays open with kvikio's handle: the number must not name another
                    # file while kvikio may still open the path it built from it
                    group = _ReadGroup(path, handle, own_fd=own)
                    in_flight.append(group)
                    size = os.fstat(handle.fileno()).st_size
                    spans = spans_in_file([requests[i] for i in members], size)
                    for k, (i, (start, end)) in enumerate(zip(members, spans, strict=True)):
                        length = end - start
                        view = allocate(length) if allocate is not None and length else None
                        if view is None:
                            view = memoryview(bytearray(length))
                        future = handle.pread(view, length, start) if length else None
                        group.reads.append((i, view, future))
                        group.nbytes += length
                        outstanding += 1
                        outstanding_bytes += length
                        if too_many() and k + 1 < len(members):
                            group.closes = False  # more of this file follows in a new group
                            group = _ReadGroup(path, handle, own_fd=own)
                            in_flight.append(group)
                            while len(in_flight) > 1 and too_many():
                                collect()
                    while len(in_flight) > 1 and too_many():
                        collect()
                while in_flight:
                    collect()
                if done_bytes >= CONFIRM_BYTES:
                    self.slow_confirmed = rate_so_far() < CONFIRMED_SLOW_RATE
            finally:
                # kvikio's threads write into buffers the caller reuses: never return before
                # every submitted read is done, whatever failed; every file opened is closed
                handles = {id(g.handle): g for g in in_flight}
                for group in in_flight:
                    group.closes = handles[id(group.handle)] is group
                    with contextlib.suppress(Exception):
                        self._finish(group, out)
        return out

    @staticmethod
    def _slow(nbytes: int, seconds: float) -> bool:
        return nbytes / max(seconds, 1e-9) / WARM_READS < SLOW_THREAD_RATE

    @staticmethod
    def _finish(group: _ReadGroup, out: list) -> None:
        """Wait for every read of a group (all of them, even after one failed); close its
        file after its last group."""
        error = None
        for i, view, future in group.reads:
            try:
                done = future.get() if future is not None else 0
            except Exception as exc:
                error = error or exc
                continue
            out[i] = view if done == len(view) else view[:done]
        if group.closes:
            try:
                group.handle.close()
            finally:
                if group.own_fd is not None:
                    os.close(group.own_fd)  # ours, whatever kvikio's close did
        if error is not None:
            raise StoreError(f"could not read {group.path}: {error}") from error
