"""Fetch stored bytes concurrently: whole objects, byte ranges and suffixes.

Two sources share one interface. Local directories are read with ``os.pread`` from a
thread pool (the GIL is released during the read, so this scales with cores and disks);
any other zarr store (fsspec, object storage, memory, zip) goes through zarr-python's own
async store API, gathered on zarr's event loop.
"""

from __future__ import annotations

import contextlib
import os
import stat
import threading
import time
from collections.abc import Callable, Hashable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

import numpy as np

from linumpy_gpu import config
from linumpy_gpu.config import Settings
from linumpy_gpu.errors import StoreError, StorePermissionError
from linumpy_gpu.io import files as fileio

MAX_IO_THREADS = min(16, 2 * (os.cpu_count() or 2))
# Below this many bytes per read, a thread spends more time handing the GIL around than
# copying (330 KB reads peak at about 4 threads, 2.7 MB reads at 16).
BYTES_PER_THREAD = 96 << 10
# Storage slower than the page cache (a disk, a network file system) needs many requests in
# flight rather than few threads: below this rate per thread at the size-based thread count,
# reads use DISK_THREADS, and every REPROBE-th fetch checks again (the cache warms up).
SLOW_THREAD_RATE = 0.8e9
DISK_THREADS = 32
REPROBE = 8
# Long runs (a shard's inner chunks end to end) are read in pieces of at most this many
# bytes on separate threads: a batch may touch fewer files than there are threads.
PIECE_BYTES = 8 << 20
# On storage slower than the page cache, a reader tells the OS which stored bytes it will
# fetch next, a window beyond the batch being fetched (posix_fadvise WILLNEED, from one
# background thread; the window is the ``read_ahead_bytes`` setting): the disk then streams
# them into the page cache while the current batch is read and between batches, where each
# batch's reads otherwise drain before the next batch's start.
_CAN_ADVISE = hasattr(os, "posix_fadvise")


def threads_for(bytes_per_read: int | None, limit: int = MAX_IO_THREADS) -> int:
    """Read threads for reads of about ``bytes_per_read`` bytes each."""
    if not bytes_per_read:
        return limit
    return max(2, min(limit, round(bytes_per_read / BYTES_PER_THREAD)))


@dataclass(frozen=True)
class ByteRequest:
    """Bytes of one stored object: all of it, ``length`` bytes from ``offset``, or the last
    ``suffix`` bytes."""

    key: str
    offset: int = 0
    length: int | None = None
    suffix: int | None = None
    fd: int | None = None  # an open handle of the object (a source's pin) to read through


@dataclass(frozen=True)
class Pin:
    """A stored object held open: reads through ``fd`` see one version of it (``version``),
    whatever replaces the path meanwhile."""

    fd: int
    version: Hashable


Allocator = Callable[[int], "memoryview | None"]


class ByteSource(Protocol):
    """Reads stored bytes: many objects and ranges per call (see :meth:`fetch`)."""

    def fetch(
        self,
        requests: Sequence[ByteRequest],
        allocate: Allocator | None = None,
        size_hint: int | None = None,
    ) -> list[memoryview | None]:
        """The bytes of each request, or None where the object does not exist. With
        ``allocate``, a source may read straight into the buffers it hands out (e.g.
        pinned staging memory); where it returns None, ordinary memory is used.
        ``size_hint`` (bytes per request, roughly) lets a source pick its parallelism."""
        ...

    def versions(self, keys: Sequence[str]) -> list[Hashable | None]:
        """Per key, a token that changes whenever the stored object is replaced (None: the
        source cannot tell; what was read from it is then trusted for one read only)."""
        ...


def open_regular(path: str) -> tuple[int, os.stat_result] | None:
    """Open a stored object for reading: (descriptor, its stat), or None where it does not
    exist. Anything but a regular file (a FIFO, a device, a folder) is refused before a
    read can block on it or return what is not the object's bytes."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except (FileNotFoundError, NotADirectoryError):
        if os.path.islink(path):
            # a link to a missing file (git-annex or DataLad content not fetched): the
            # object exists but its bytes are elsewhere, so reading it as empty is wrong
            raise StoreError(
                f"'{path}' is a link to '{os.readlink(path)}', which does not exist (content "
                "not fetched, or moved?)"
            ) from None
        return None
    except PermissionError as exc:
        raise StorePermissionError(f"'{path}': permission denied ({exc.strerror})") from exc
    except OSError as exc:
        raise StoreError(f"'{path}': {exc.strerror or exc}") from exc
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise StoreError(
            f"'{path}' is not a regular file (a folder, FIFO or device where a stored object "
            "should be)"
        )
    return fd, info


def file_version(path: str, info: os.stat_result | None = None) -> Hashable | None:
    """A token that changes whenever ``path`` is replaced or rewritten (from ``info``, its
    stat, where given), None if missing."""
    info = info if info is not None else _stat_or_none(path)
    if info is None:
        return None
    return (info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns, fileio.generation(path))


class LocalFileSource:
    """Reads files under ``root`` with positional reads from a shared thread pool
    (``threads`` of them, by default sized per fetch; ``read_ahead_bytes``: how far ahead
    readers may ask the OS to read on slow storage, 0 for never).

    Requests on the same file share one open; ranged requests that touch end to end
    (inner chunks of a shard) are read with one call into one buffer and sliced."""

    _pools: dict[int, ThreadPoolExecutor] = {}
    _pools_lock = threading.Lock()
    _advice: ThreadPoolExecutor | None = None

    def __init__(
        self,
        root: str | os.PathLike[str],
        threads: int | None = None,
        read_ahead_bytes: int = 512 << 20,
    ):
        self.root = os.fspath(root)
        # None: picked per fetch from the read size and the storage's measured speed
        self.threads = threads
        self.read_ahead_bytes = read_ahead_bytes
        self.slow_storage = False  # measured: see SLOW_THREAD_RATE
        self._fetches = 0

    @classmethod
    def pool(cls, threads: int) -> ThreadPoolExecutor:
        """The process's read pool of ``threads`` threads (one pool per size)."""
        with cls._pools_lock:
            if threads not in cls._pools:
                cls._pools[threads] = ThreadPoolExecutor(threads, thread_name_prefix="linumpy-io")
            return cls._pools[threads]

    def path_of(self, key: str) -> str:
        """The file that holds ``key``."""
        return os.path.join(self.root, "") + (key if os.sep == "/" else key.replace("/", os.sep))

    def versions(self, keys: Sequence[str]) -> list[Hashable | None]:
        """Per key, a token that changes whenever its file is replaced (None if missing)."""
        return [file_version(self.path_of(k)) for k in keys]

    @contextlib.contextmanager
    def pinned(self, keys: Sequence[str]) -> Iterator[dict[str, Pin]]:
        """The files of ``keys`` held open for the block (missing ones left out): requests
        carrying a pin's ``fd`` read that version of the file."""
        pins: dict[str, Pin] = {}
        try:
            for key in keys:
                path = self.path_of(key)
                opened = open_regular(path)
                if opened is not None:
                    fd, info = opened
                    pins[key] = Pin(fd, file_version(path, info))
            yield pins
        finally:
            for pin in pins.values():
                os.close(pin.fd)

    def warm_metadata(self, keys: Sequence[str]) -> list[Future]:
        """Look up the files of ``keys`` from DISK_THREADS threads, without waiting: on a
        cold disk each lookup reads a directory block and an inode, and a thread that opens
        files one after another (the kvikio fetch's) would wait for each in turn behind the
        reads already in flight (a level of plane chunks: 2048 files, cold reads at 62-76%
        of the disk's rate without, 87-92% with). Missing files are skipped."""
        pool = self.pool(DISK_THREADS)
        return [pool.submit(_stat_or_none, self.path_of(k)) for k in keys]

    def reads_ahead(self) -> bool:
        """Whether a reader should say which bytes it fetches next (:meth:`will_need`): on
        storage measured slower than the page cache."""
        return self.read_ahead_bytes > 0 and _CAN_ADVISE and self.slow_storage

    def will_need(self, requests: Sequence[ByteRequest]) -> Future | None:
        """Ask the OS to start reading ``requests`` (whole files or ranges) into the page
        cache, without waiting for it. Only a hint: missing files and failed calls are
        skipped, and a later fetch reads the bytes whether or not they arrived."""
        if not _CAN_ADVISE or not requests:
            return None
        spans: dict[str, list[tuple[int, int]]] = {}
        for r in requests:
            if r.suffix is None:  # suffixes are shard indexes: small, read once, cached
                spans.setdefault(r.key, []).append((r.offset, r.length or 0))
        items = [(self.path_of(k), v) for k, v in spans.items()]
        with self._pools_lock:
            if LocalFileSource._advice is None:
                LocalFileSource._advice = ThreadPoolExecutor(
                    1, thread_name_prefix="linumpy-read-ahead"
                )
            pool = LocalFileSource._advice
        return pool.submit(_advise_will_need, items)

    def _read_file(
        self,
        key: str,
        requests: Sequence[ByteRequest],
        allocate: Allocator | None,
    ) -> list[memoryview | None]:
        pinned = requests[0].fd
        if pinned is not None:
            fd, size = pinned, os.fstat(pinned).st_size
        else:
            opened = open_regular(self.path_of(key))
            if opened is None:
                return [None] * len(requests)
            fd, size = opened[0], opened[1].st_size
        try:
            whole = requests[0]
            if len(requests) == 1 and not whole.offset and whole.length is whole.suffix is None:
                # a whole chunk file, the common case: thousands per read
                view = _buffer(allocate, size)
                done = _pread(fd, view, 0, size, 0)
                return [view[:done] if done < size else view]
            spans = spans_in_file(requests, size)
            out: list[memoryview | None] = [None] * len(requests)
            for run in _adjacent_runs(spans, range(len(requests))):
                self._read_run(fd, run, spans, out, allocate)
            return out
        finally:
            if pinned is None:
                os.close(fd)

    @staticmethod
    def _read_run(
        fd: int,
        run: list[int],
        spans: list[tuple[int, int]],
        out: list[memoryview | None],
        allocate: Allocator | None,
    ) -> None:
        start, end = spans[run[0]][0], spans[run[-1]][1]
        view = _buffer(allocate, end - start)
        done = _pread(fd, view, 0, end - start, start)
        for i in run:
            a, b = spans[i]
            out[i] = view[a - start : min(b, start + done) - start]

    def fetch(
        self,
        requests: Sequence[ByteRequest],
        allocate: Allocator | None = None,
        size_hint: int | None = None,
    ) -> list[memoryview | None]:
        """The bytes of each request (None where the file does not exist), read by a thread
        pool sized from the read size and the storage's measured speed."""
        by_key: dict[str, list[int]] = {}
        for i, r in enumerate(requests):
            by_key.setdefault(r.key, []).append(i)
        files = list(by_key.items())
        if len(files) <= 1 and not _long_runs(requests):
            return self._fetch_files(requests, files, allocate, None)
        per_file = size_hint * len(requests) // len(files) if size_hint else None
        sized = self.threads or threads_for(per_file)
        self._fetches += 1
        probing = not self.slow_storage or self._fetches % REPROBE == 0
        threads = sized if probing or self.threads else max(sized, DISK_THREADS)
        t0 = time.perf_counter()
        if _long_runs(requests):
            out = self._fetch_pieces(requests, files, allocate, threads)
        else:
            out = self._fetch_files(requests, files, allocate, threads)
        if probing and not self.threads:
            nbytes = sum(len(v) for v in out if v is not None)
            if nbytes >= 8 << 20:
                rate = nbytes / max(time.perf_counter() - t0, 1e-9) / threads
                self.slow_storage = rate < SLOW_THREAD_RATE
        return out

    def _fetch_files(
        self,
        requests: Sequence[ByteRequest],
        files: list[tuple[str, list[int]]],
        allocate: Allocator | None,
        threads: int | None,
    ) -> list[memoryview | None]:
        """Each file's requests read by one task on a pool of ``threads`` (None: in this
        thread, for a single file)."""
        out: list[memoryview | None] = [None] * len(requests)

        def read(item: tuple[str, list[int]]) -> None:
            key, members = item
            views = self._read_file(key, [requests[i] for i in members], allocate)
            for i, v in zip(members, views, strict=True):
                out[i] = v

        if threads is None:
            for item in files:
                read(item)
            return out
        # Interleaved groups, one task each: a future per file costs about as much as
        # reading 64 KiB.
        groups = min(len(files), 2 * threads)

        def run(g: int) -> None:
            for k in range(g, len(files), groups):
                read(files[k])

        list(self.pool(threads).map(run, range(groups)))
        return out

    def _fetch_pieces(
        self,
        requests: Sequence[ByteRequest],
        files: list[tuple[str, list[int]]],
        allocate: Allocator | None,
        threads: int,
    ) -> list[memoryview | None]:
        """Ranged requests on few files: plan every run of adjacent ranges, then read the
        runs in pieces of at most PIECE_BYTES on the pool."""
        out: list[memoryview | None] = [None] * len(requests)
        runs: list[tuple[int, int, int, memoryview, list[int], list[tuple[int, int]]]] = []
        fds = []
        try:
            for key, members in files:
                pinned = requests[members[0]].fd
                if pinned is not None:
                    fd, size = pinned, os.fstat(pinned).st_size
                else:
                    opened = open_regular(self.path_of(key))
                    if opened is None:
                        continue
                    fd, size = opened[0], opened[1].st_size
                    fds.append(fd)
                spans = spans_in_file([requests[i] for i in members], size)
                span_of = dict(zip(members, spans, strict=True))
                for run in _adjacent_runs(span_of, members):
                    start, end = span_of[run[0]][0], span_of[run[-1]][1]
                    view = _buffer(allocate, end - start)
                    runs.append((fd, start, end - start, view, run, [span_of[k] for k in run]))
            total = sum(r[2] for r in runs)
            piece = max(1 << 20, min(PIECE_BYTES, -(-total // (2 * threads))))
            pieces = [
                (k, a, min(a + piece, runs[k][2]))
                for k in range(len(runs))
                for a in range(0, runs[k][2], piece)
            ]

            def read(item: tuple[int, int, int]) -> int:
                k, a, b = item
                fd, start, _, view, _, _ = runs[k]
                return _pread(fd, view, a, b, start)

            ends = list(self.pool(threads).map(read, pieces)) if pieces else []
            short: dict[int, int] = {}
            for (k, _start, b), done in zip(pieces, ends, strict=True):
                if done < b:  # the file ended early: bytes from here on were not read
                    short[k] = min(short.get(k, done), done)
            for k, (_, start, length, view, members, spans) in enumerate(runs):
                valid = short.get(k, length)
                for i, (a, b) in zip(members, spans, strict=True):
                    out[i] = view[a - start : max(a - start, min(b - start, valid))]
            return out
        finally:
            for fd in fds:
                os.close(fd)


def spans_in_file(requests: Sequence[ByteRequest], size: int) -> list[tuple[int, int]]:
    """[start, end) of each request in a file of ``size`` bytes (clipped to the file)."""
    spans = []
    for r in requests:
        if r.suffix is not None:
            spans.append((max(0, size - r.suffix), size))
        else:
            start = min(r.offset, size)
            end = size if r.length is None else min(size, r.offset + r.length)
            spans.append((start, max(start, end)))
    return spans


def _buffer(allocate: Allocator | None, size: int) -> memoryview:
    """``size`` bytes to read into: from ``allocate`` where it gives them, else ordinary
    memory."""
    view = allocate(size) if allocate is not None and size else None
    return view if view is not None else memoryview(bytearray(size))


def _pread(fd: int, view: memoryview, done: int, end: int, at: int) -> int:
    """Read ``view[done:end]`` from ``fd``'s file, whose byte ``at`` is ``view[0]``; where
    it ended, ``done`` plus the bytes read (short of ``end``: the file ended early)."""
    while done < end:
        n = os.preadv(fd, [view[done:end]], at + done)
        if n == 0:
            break
        done += n
    return done


def _adjacent_runs(
    spans: Sequence[tuple[int, int]] | dict[int, tuple[int, int]], members: Iterable[int]
) -> list[list[int]]:
    """``members`` in the order their ``spans`` start, cut into runs whose spans touch end
    to end (inner chunks of a shard: read with one call into one buffer)."""
    runs: list[list[int]] = []
    for i in sorted(members, key=lambda k: spans[k][0]):
        if runs and spans[i][0] == spans[runs[-1][-1]][1]:
            runs[-1].append(i)
        else:
            runs.append([i])
    return runs


def _long_runs(requests: Sequence[ByteRequest]) -> bool:
    """True for ranged requests (a shard's inner chunks) worth reading in pieces."""
    if not requests or any(r.length is None or r.suffix is not None for r in requests):
        return False
    return sum(r.length or 0 for r in requests) > 2 * PIECE_BYTES


class ZarrStoreSource:
    """Reads through any zarr-python store's async ``get``, at most ``concurrency``
    requests in flight (gathered on zarr's event loop).

    Some servers ignore byte ranges (a plain static HTTP server answers every request with
    the whole object and status 200). Every ranged or suffix answer is therefore checked
    against the length asked for: one longer than that is the whole object, and the bytes
    asked for are cut from it. What the answers teach is kept in ``ignores_ranges`` (None
    until a ranged answer tells). Once the store is known to ignore ranges, each fetch asks
    for every object it needs once, whole, and cuts all its ranges from that one answer,
    rather than downloading the object again for every range; while it is not known yet,
    the other ranged requests of a fetch on an object wait for that object's first answer.
    A store that honours ranges is read as before: one request per range, all at once. (A
    request from an offset to the end cannot be checked, its length being unknown: it is
    trusted until the store is known to ignore ranges. The engine asks for none.)

    Failures reach the caller as linumpy_gpu errors naming the object's URL
    (:func:`~linumpy_gpu.io.stores.translate`); a missing object (HTTP 404) reads as None,
    the fill value.
    """

    def __init__(self, store: Any, concurrency: int = 64, where: str | None = None):
        from linumpy_gpu.io.stores import store_url

        self.store = store
        self.concurrency = concurrency
        self.where = where if where is not None else store_url(store)
        # learned from ranged answers: True once one came back as the whole object
        self.ignores_ranges: bool | None = None

    def fetch(
        self,
        requests: Sequence[ByteRequest],
        allocate: Allocator | None = None,
        size_hint: int | None = None,
    ) -> list[memoryview | None]:
        """The bytes of each request through the store's async ``get``, many at once."""
        from zarr.core.sync import sync

        return sync(self._fetch_all(requests))

    def versions(self, keys: Sequence[str]) -> list[Hashable | None]:
        """None for every key: a zarr store does not say when an object was replaced."""
        return [None] * len(keys)

    def url_of(self, key: str) -> str:
        """Where the object ``key`` lives, for messages."""
        return f"{self.where.rstrip('/')}/{key}" if self.where else key

    def _learn(self, r: ByteRequest, data: bytes) -> tuple[memoryview, bool]:
        """The bytes ``r`` asked for from the answer ``data`` to its ranged request, and
        whether that answer was the whole object (longer than asked: the store ignored the
        range); what the answer says of the store is kept in ``ignores_ranges``."""
        asked = r.suffix if r.suffix is not None else r.length
        if asked == 0:  # fsspec asks for everything where no bytes are asked for
            return memoryview(b""), False
        if asked is None:  # from an offset to the end: cannot be checked
            return memoryview(data), False
        if len(data) > asked:
            self.ignores_ranges = True
            return _cut(r, data), True
        if len(data) == asked and self.ignores_ranges is None:
            self.ignores_ranges = False
        return memoryview(data), False

    async def _fetch_all(self, requests: Sequence[ByteRequest]) -> list[memoryview | None]:
        import asyncio

        from zarr.core.buffer import default_buffer_prototype

        from linumpy_gpu.io.stores import translate

        proto = default_buffer_prototype()
        limit = asyncio.Semaphore(self.concurrency)
        loop = asyncio.get_running_loop()
        # per key, this fetch's one whole-object answer (once the store ignores ranges)
        wholes: dict[str, asyncio.Future[bytes | None]] = {}
        # per key, done once its first ranged answer is in (while ranges are untested)
        firsts: dict[str, asyncio.Future[None]] = {}

        async def get(key: str, rng: Any) -> bytes | None:
            try:
                buf = await self.store.get(key, prototype=proto, byte_range=rng)
            except Exception as exc:
                translated = translate(exc, self.url_of(key), "object")
                if translated is None:
                    raise
                raise translated from exc
            return None if buf is None else buf.to_bytes()

        async def get_whole(key: str) -> bytes | None:
            async with limit:
                return await get(key, None)

        def whole(key: str) -> asyncio.Future[bytes | None]:
            shared = wholes.get(key)
            if shared is None:
                shared = wholes[key] = asyncio.ensure_future(get_whole(key))
            return shared

        async def ranged(r: ByteRequest, rng: Any) -> memoryview | None:
            async with limit:
                if not self.ignores_ranges:  # still so, now that it is this one's turn
                    data = await get(r.key, rng)
                    if data is None:
                        return None
                    view, whole_answer = self._learn(r, data)
                    if whole_answer and r.key not in wholes:
                        # every other range of the object is cut from this answer
                        wholes[r.key] = loop.create_future()
                        wholes[r.key].set_result(data)
                    return view
            data = await whole(r.key)
            return None if data is None else _cut(r, data)

        async def one(r: ByteRequest) -> memoryview | None:
            rng = _zarr_range(r)
            if rng is None:
                if self.ignores_ranges:
                    data = await whole(r.key)
                else:
                    data = await get_whole(r.key)
                return None if data is None else memoryview(data)
            if self.ignores_ranges is None:
                first = firsts.get(r.key)
                if first is None:  # this object's first: it tells whether ranges work
                    first = firsts[r.key] = loop.create_future()
                    try:
                        return await ranged(r, rng)
                    finally:
                        if not first.done():
                            first.set_result(None)
                await first
            return await ranged(r, rng)

        tasks = [asyncio.ensure_future(one(r)) for r in requests]
        try:
            return list(await asyncio.gather(*tasks))
        except BaseException:
            # one failed: the others (and the shared whole-object requests) stop with it
            started: list[asyncio.Future[Any]] = [*tasks, *wholes.values()]
            pending = [t for t in started if not t.done()]
            for t in pending:
                t.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
            raise


def _zarr_range(r: ByteRequest) -> Any:
    """zarr's byte request for ``r`` (None: the whole object)."""
    from zarr.abc.store import OffsetByteRequest, RangeByteRequest, SuffixByteRequest

    if r.suffix is not None:
        return SuffixByteRequest(r.suffix)
    if r.length is not None:
        return RangeByteRequest(r.offset, r.offset + r.length)
    if r.offset:
        return OffsetByteRequest(r.offset)
    return None


def _cut(r: ByteRequest, whole: bytes) -> memoryview:
    """The bytes ``r`` asks for, out of the whole object ``whole``."""
    start, end = spans_in_file([r], len(whole))[0]
    return memoryview(whole)[start:end]


def source_for(store: Any, settings: Settings | None = None) -> ByteSource:
    """The fastest byte source for a zarr store."""
    settings = settings or config.get()
    root = getattr(store, "root", None)
    if type(store).__name__ == "LocalStore" and root is not None:
        return LocalFileSource(root, settings.io_threads, settings.read_ahead_bytes)
    return ZarrStoreSource(store)


class Runs(NamedTuple):
    """Ranges merged into runs: per range its run (``of``); per run its key, start, stop."""

    of: np.ndarray
    key: np.ndarray
    start: np.ndarray
    stop: np.ndarray


def merge_ranges(
    key_ids: np.ndarray,
    offsets: np.ndarray,
    lengths: np.ndarray,
    max_gap: int = 1 << 20,
    max_length: int | None = None,
) -> Runs:
    """Merge byte ranges (``offsets``, ``lengths`` of objects ``key_ids``) of one object
    whose gaps are at most ``max_gap`` bytes into runs, each no longer than ``max_length``
    unless one range is (a shard's inner chunks: thousands per batch, so on arrays)."""
    n = len(key_ids)
    order = np.lexsort((offsets, key_ids))
    keys = key_ids[order].tolist()
    starts = offsets[order].tolist()
    ends = (offsets + lengths)[order].tolist()
    limit = max_length if max_length is not None else float("inf")
    of_sorted = [0] * n
    run_key: list[int] = []
    run_start: list[int] = []
    run_stop: list[int] = []
    cur_key, cur_start, cur_end = None, 0, 0
    for j, (key, start, end) in enumerate(zip(keys, starts, ends, strict=True)):
        grown = max(cur_end, end)
        if key != cur_key or start > cur_end + max_gap or grown - cur_start > limit:
            if cur_key is not None:
                run_key.append(cur_key)
                run_start.append(cur_start)
                run_stop.append(cur_end)
            cur_key, cur_start, grown = key, start, end
        cur_end = grown
        of_sorted[j] = len(run_key)
    if cur_key is not None:
        run_key.append(cur_key)
        run_start.append(cur_start)
        run_stop.append(cur_end)
    of = np.empty(n, dtype=np.int64)
    of[order] = of_sorted
    return Runs(of, *(np.asarray(v, dtype=np.int64) for v in (run_key, run_start, run_stop)))


def _advise_will_need(items: Sequence[tuple[str, Sequence[tuple[int, int]]]]) -> int:
    """posix_fadvise(WILLNEED) on each (offset, length) of each path (length 0: to the
    end); the number of files advised."""
    done = 0
    for path, spans in items:
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            continue
        try:
            for offset, length in spans:
                os.posix_fadvise(fd, offset, length, os.POSIX_FADV_WILLNEED)
            done += 1
        except OSError:
            pass
        finally:
            os.close(fd)
    return done


def _stat_or_none(path: str) -> os.stat_result | None:
    try:
        return os.stat(path)
    except OSError:
        return None


def _fresh_pools_after_fork() -> None:
    # a child made by fork holds the parent's pools without their threads (work handed
    # to them would wait for ever) and its locks as they were: it starts its own
    LocalFileSource._pools = {}
    LocalFileSource._pools_lock = threading.Lock()
    LocalFileSource._advice = None


os.register_at_fork(after_in_child=_fresh_pools_after_fork)
