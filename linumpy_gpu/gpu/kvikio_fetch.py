"""Local chunk files read by kvikio's C++ thread pool.

A full level of 64^3 chunks is 8192 files of about 330 KB. Read from Python threads, every
``open``/``pread``/``close`` hands the GIL around, and the threads queue behind one another
and behind the thread driving the GPU: on the H200 host the pread fetch peaked at 4 threads
(8.4 GB/s of compressed bytes) and got slower with more. Here one Python thread only opens
files and submits reads; kvikio's threads copy the bytes without the GIL.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections import deque
from collections.abc import Sequence
from typing import Any

from ..engine.fetch import (
    DISK_THREADS,
    REPROBE,
    SLOW_THREAD_RATE,
    Allocator,
    ByteRequest,
    LocalFileSource,
    spans_in_file,
)

# Files open at once (kvikio opens each twice, with and without O_DIRECT): well under the
# usual limit of 1024 descriptors.
OPEN_FILES = 128
# Reads in flight on the page cache: each is a memory copy, and more at once only compete
# for cores with the thread driving the GPU (H200 host, a 64^3 level: kvikio's pool with 4
# threads 9.2 GB/s, with 32 threads 7.4). Storage slower than that per read (measured as
# the pread source does) gets more reads in flight: up to SLOW_BYTES_IN_FLIGHT of them.
WARM_READS = 8
# Bytes a fetch reads with WARM_READS in flight before it judges the storage's speed.
PROBE_BYTES = 8 << 20
# On slower storage, reads in flight are bounded by their bytes, not only their number (H200
# host, cold cache: 128 reads of 330 KB reached the disk's rate; 128 reads of 2.7 MB only
# 46% of it, 8 of them 85%).
SLOW_BYTES_IN_FLIGHT = 48 << 20
# kvikio's pool size when the user has not chosen one (KVIKIO_NTHREADS): as many reads in
# flight as a disk wants; on the page cache extra threads cost nothing here (no GIL).
KVIKIO_THREADS = DISK_THREADS

_configured = False
_configure_lock = threading.Lock()


def kvikio_available() -> bool:
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
        if "KVIKIO_NTHREADS" not in os.environ and current < 2:
            resize(KVIKIO_THREADS)
        _configured = True


class KvikioFileSource(LocalFileSource):
    """Reads files under ``root`` with kvikio (``pread`` into the caller's buffers, e.g. the
    pinned staging ring); the same requests and results as :class:`LocalFileSource`."""

    def __init__(self, root: str | os.PathLike[str]):
        super().__init__(root)
        _configure_pool()

    def fetch(
        self,
        requests: Sequence[ByteRequest],
        allocate: Allocator | None = None,
        size_hint: int | None = None,
    ) -> list[memoryview | None]:
        import kvikio

        out: list[memoryview | None] = [None] * len(requests)
        by_key: dict[str, list[int]] = {}
        for i, r in enumerate(requests):
            by_key.setdefault(r.key, []).append(i)
        in_flight: deque[tuple[str, Any, list[tuple[int, memoryview, Any]]]] = deque()
        self._fetches += 1
        probing = not self.slow_storage or self._fetches % REPROBE == 0
        slow_limit = max(
            WARM_READS, min(OPEN_FILES, SLOW_BYTES_IN_FLIGHT // max(1, size_hint or 1))
        )
        limit = WARM_READS if probing else slow_limit
        outstanding = 0
        done_bytes = 0
        t0 = time.perf_counter()

        def collect() -> None:
            # the oldest file's reads; while probing, the first PROBE_BYTES read decide the
            # window for the rest of this fetch (a cold read's first batch is often large)
            nonlocal outstanding, done_bytes, probing, limit
            path, handle, reads = in_flight.popleft()
            outstanding -= len(reads)
            self._finish(path, handle, reads, out)
            done_bytes += sum(len(view) for _, view, _ in reads)
            if probing and done_bytes >= PROBE_BYTES:
                probing = False
                self.slow_storage = self._slow(done_bytes, time.perf_counter() - t0)
                limit = slow_limit if self.slow_storage else WARM_READS

        try:
            for key, members in by_key.items():
                path = self.path_of(key)
                try:
                    handle = kvikio.CuFile(path, "r")
                except (RuntimeError, OSError) as exc:  # kvikio raises RuntimeError
                    if not os.path.isfile(path):  # a missing chunk: the fill value
                        continue
                    raise OSError(f"could not open {path}: {exc}") from None
                reads: list[tuple[int, memoryview, Any]] = []
                in_flight.append((path, handle, reads))
                size = os.fstat(handle.fileno()).st_size
                spans = spans_in_file([requests[i] for i in members], size)
                for i, (start, end) in zip(members, spans, strict=True):
                    length = end - start
                    view = allocate(length) if allocate is not None and length else None
                    if view is None:
                        view = memoryview(bytearray(length))
                    reads.append((i, view, handle.pread(view, length, start) if length else None))
                outstanding += len(reads)
                while in_flight and (outstanding > limit or len(in_flight) > OPEN_FILES):
                    collect()
            while in_flight:
                collect()
        finally:
            # kvikio's threads write into buffers the caller reuses: never return before
            # every submitted read is done, whatever failed
            for path, handle, reads in in_flight:
                with contextlib.suppress(Exception):
                    self._finish(path, handle, reads, out)
        return out

    @staticmethod
    def _slow(nbytes: int, seconds: float) -> bool:
        return nbytes / max(seconds, 1e-9) / WARM_READS < SLOW_THREAD_RATE

    @staticmethod
    def _finish(
        path: str, handle: Any, reads: list[tuple[int, memoryview, Any]], out: list
    ) -> None:
        """Wait for every read of one file (all of them, even after one failed), close it."""
        error = None
        for i, view, future in reads:
            try:
                done = future.get() if future is not None else 0
            except Exception as exc:
                error = error or exc
                continue
            out[i] = view if done == len(view) else view[:done]
        handle.close()
        if error is not None:
            raise OSError(f"could not read {path}: {error}") from error
