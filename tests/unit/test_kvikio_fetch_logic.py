"""The kvikio fetch's own logic (which reads go in flight, in what order they are collected,
what happens when one fails), against a stand-in for kvikio that reads with a thread pool:
kvikio itself needs the CUDA driver even for host reads (tests/test_gpu_fetch.py runs the
real one on the GPU host)."""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import types
from concurrent.futures import ThreadPoolExecutor

import pytest

import linumpy_gpu.gpu.kvikio_source as kvikio_fetch
from linumpy_gpu.io.sources import ByteRequest, LocalFileSource
from tests.helpers.fetch_cases import mixed_requests, recording_allocator, write_chunk_files


class FakeKvikio:
    """kvikio's CuFile / IOFuture / defaults as far as the fetch uses them, with the same
    failure modes: a missing file raises RuntimeError, a read that meets the end of the
    file early raises at ``get()``."""

    def __init__(self, fail_on: str | None = None):
        self.pool = ThreadPoolExecutor(6)
        self.lock = threading.Lock()
        self.open_now = 0
        self.most_open = 0
        self.futures: list = []
        self.handles: list = []
        self.pending_bytes = 0  # submitted, not yet waited for by the fetch
        self.most_pending_bytes = 0
        self.threads = 1
        self.direct = False  # kvikio's auto_direct_io_read
        self.direct_reads = 0  # reads that ran while it was on
        self.fail_on = fail_on
        fake = self

        class IOFuture:
            def __init__(self, future, size):
                self._future = future
                self._size = size
                with fake.lock:
                    fake.pending_bytes += size
                    fake.most_pending_bytes = max(fake.most_pending_bytes, fake.pending_bytes)

            def get(self) -> int:
                with fake.lock:
                    fake.pending_bytes -= self._size
                    self._size = 0
                return self._future.result()

        class CuFile:
            def __init__(self, path, flags="r"):
                try:
                    self._fd = os.open(path, os.O_RDONLY)
                except OSError as exc:
                    raise RuntimeError(f"KvikIO failure: {exc}") from None
                # the file a handle opened through /proc/self/fd names (the fetch opens
                # each file itself first and gives kvikio that handle)
                self.given = str(path)
                self.path = os.path.realpath(str(path))
                self.closed = False
                with fake.lock:
                    fake.open_now += 1
                    fake.most_open = max(fake.most_open, fake.open_now)
                    fake.handles.append(self)

            def fileno(self) -> int:
                return self._fd

            def pread(self, buf, size, file_offset=0):
                view = memoryview(buf).cast("B")[:size]

                def read() -> int:
                    if fake.direct:
                        with fake.lock:
                            fake.direct_reads += 1
                    if fake.fail_on and self.path.endswith(fake.fail_on):
                        raise RuntimeError("posix_host_read: EOF")
                    done = os.preadv(self._fd, [view], file_offset)
                    if done != size:
                        raise RuntimeError("posix_host_read: EOF")
                    return done

                future = fake.pool.submit(read)
                fake.futures.append(future)
                return IOFuture(future, size)

            def close(self) -> None:
                if not self.closed:
                    os.close(self._fd)
                    self.closed = True
                    with fake.lock:
                        fake.open_now -= 1

        self.module = types.ModuleType("kvikio")
        self.module.CuFile = CuFile
        defaults = types.ModuleType("kvikio.defaults")
        names = {"num_threads": "threads", "auto_direct_io_read": "direct"}
        defaults.get = lambda key: getattr(fake, names[key])
        defaults.set = lambda key, value: setattr(fake, names[key], value)
        self.module.defaults = defaults


@pytest.fixture
def fake_kvikio(monkeypatch):
    def install(fail_on: str | None = None) -> FakeKvikio:
        fake = FakeKvikio(fail_on)
        monkeypatch.setitem(sys.modules, "kvikio", fake.module)
        monkeypatch.setitem(sys.modules, "kvikio.defaults", fake.module.defaults)
        monkeypatch.setattr(kvikio_fetch, "_configured", False)
        monkeypatch.delenv("KVIKIO_NTHREADS", raising=False)
        return fake

    return install


@pytest.fixture
def files(tmp_path):
    return tmp_path, write_chunk_files(tmp_path, 200, 60_000, seed=8)


@pytest.mark.parametrize("slow_storage", [False, True])
@pytest.mark.parametrize("staged", [False, True])
def test_same_bytes_as_the_pread_source(fake_kvikio, files, staged, slow_storage):
    fake = fake_kvikio()
    root, blobs = files
    requests = mixed_requests(blobs)
    allocate, handed_out = recording_allocator()

    source = kvikio_fetch.KvikioFileSource(root)
    source.slow_storage = slow_storage
    got = source.fetch(requests, allocate if staged else None)
    expected = LocalFileSource(root).fetch(requests)
    for r, a, b in zip(requests, got, expected, strict=True):
        assert (a is None) == (b is None), r
        if a is not None:
            assert bytes(a) == bytes(b), r
    if staged:
        assert all(any(v.obj is h.obj for h in handed_out) for v in got if v is not None and len(v))
    assert fake.open_now == 0 and all(h.closed for h in fake.handles)
    limit = kvikio_fetch.OPEN_FILES if slow_storage else kvikio_fetch.WARM_READS
    assert fake.most_open <= limit + 1  # reads in flight bound the open files
    if slow_storage:
        assert fake.most_open > kvikio_fetch.WARM_READS + 1


def test_slow_storage_bounds_the_bytes_in_flight(fake_kvikio, files, monkeypatch):
    """On slow storage, small files go many at a time (up to OPEN_FILES), large reads only
    as many as SLOW_BYTES_IN_FLIGHT holds: also the runs of one shard file, which are waited
    for as they go rather than all at once."""
    fake = fake_kvikio()
    root, blobs = files
    source = kvikio_fetch.KvikioFileSource(root)
    source.slow_storage = True
    got = source.fetch([ByteRequest(k) for k in blobs])
    assert [bytes(v) for v in got] == list(blobs.values())
    assert fake.most_open - 1 == kvikio_fetch.OPEN_FILES  # 60 KB each: far below the bytes

    bound = 1 << 20
    monkeypatch.setattr(kvikio_fetch, "SLOW_BYTES_IN_FLIGHT", bound)
    run = 100_000
    shard = os.urandom(40 * run)
    (root / "shard").write_bytes(shard)
    fake = fake_kvikio()
    source = kvikio_fetch.KvikioFileSource(root)
    source.slow_storage = True
    runs = [ByteRequest("shard", k * run, run) for k in range(40)]
    got = source.fetch(runs + [ByteRequest(k) for k in list(blobs)[:30]])
    assert [bytes(v) for v in got[:40]] == [shard[k * run : (k + 1) * run] for k in range(40)]
    assert [bytes(v) for v in got[40:]] == list(blobs.values())[:30]
    assert bound < fake.most_pending_bytes <= bound + run
    assert fake.open_now == 0 and all(h.closed for h in fake.handles)


def test_kvikio_reads_the_file_version_the_fetch_opened(fake_kvikio, files):
    """kvikio opens a file twice (with and without O_DIRECT): given the fetch's own open
    handle, both reach that version of the file, whatever replaces the path meanwhile."""
    fake = fake_kvikio()
    root, blobs = files
    descriptors = len(os.listdir("/proc/self/fd"))
    got = kvikio_fetch.KvikioFileSource(root).fetch([ByteRequest(k) for k in blobs])
    assert [bytes(v) for v in got] == list(blobs.values())
    assert fake.handles and all(h.given.startswith("/proc/self/fd/") for h in fake.handles)
    assert len(os.listdir("/proc/self/fd")) == descriptors  # every handle closed with kvikio's


def test_a_failed_read_names_its_file_after_every_read_finished(fake_kvikio, files):
    fake = fake_kvikio(fail_on="c/17")
    root, blobs = files
    descriptors = len(os.listdir("/proc/self/fd"))
    with pytest.raises(OSError, match="c/17") as info:
        kvikio_fetch.KvikioFileSource(root).fetch([ByteRequest(k) for k in blobs])
    assert "EOF" in str(info.value)
    # nothing kvikio was given is still writing into the caller's buffers, no file is open
    assert all(f.done() for f in fake.futures)
    assert fake.open_now == 0
    assert len(os.listdir("/proc/self/fd")) == descriptors


def test_our_descriptors_are_closed_when_kvikio_fails_to_close(fake_kvikio, files, monkeypatch):
    fake = fake_kvikio()
    root, blobs = files
    descriptors = len(os.listdir("/proc/self/fd"))
    original = fake.module.CuFile.close

    def failing_close(handle):
        original(handle)
        raise RuntimeError("kvikio could not close")

    monkeypatch.setattr(fake.module.CuFile, "close", failing_close)
    with contextlib.suppress(Exception):
        kvikio_fetch.KvikioFileSource(root).fetch([ByteRequest(k) for k in blobs])
    assert len(os.listdir("/proc/self/fd")) == descriptors


def test_a_failed_run_of_a_shard_read_in_groups_closes_it(fake_kvikio, files, monkeypatch):
    monkeypatch.setattr(kvikio_fetch, "SLOW_BYTES_IN_FLIGHT", 1 << 20)
    root, blobs = files
    (root / "shard").write_bytes(bytes(4_000_000))
    fake = fake_kvikio(fail_on="shard")
    source = kvikio_fetch.KvikioFileSource(root)
    source.slow_storage = True
    runs = [ByteRequest("shard", k * 100_000, 100_000) for k in range(40)]
    with pytest.raises(OSError, match="shard"):
        source.fetch([ByteRequest(k) for k in list(blobs)[:5]] + runs)
    assert all(f.done() for f in fake.futures)
    assert fake.open_now == 0


def test_pool_sized_unless_the_user_chose(fake_kvikio, tmp_path, monkeypatch):
    fake = fake_kvikio()
    kvikio_fetch.KvikioFileSource(tmp_path)
    assert fake.threads == kvikio_fetch.KVIKIO_THREADS
    fake = fake_kvikio()
    monkeypatch.setenv("KVIKIO_NTHREADS", "3")
    fake.threads = 3
    kvikio_fetch.KvikioFileSource(tmp_path)
    assert fake.threads == 3


def test_slow_storage_is_measured(fake_kvikio, files, monkeypatch):
    """A fetch slower per read than the page cache switches to many reads in flight; every
    REPROBE-th fetch measures again with few."""
    fake_kvikio()
    root, blobs = files
    requests = [ByteRequest(k) for k in blobs] * 2  # enough bytes (8 MiB) to measure
    assert 2 * sum(len(b) for b in blobs.values()) >= 8 << 20
    source = kvikio_fetch.KvikioFileSource(root)
    monkeypatch.setattr(kvikio_fetch, "SLOW_THREAD_RATE", float("inf"))  # nothing is fast
    monkeypatch.setattr(kvikio_fetch, "time", _Clock(seconds_per_call=1.0))
    source.fetch(requests)
    assert source.slow_storage
    monkeypatch.setattr(kvikio_fetch, "SLOW_THREAD_RATE", 0.0)  # everything is fast
    for _ in range(kvikio_fetch.REPROBE):
        source.fetch(requests)
    assert not source.slow_storage


def test_slow_storage_found_mid_fetch_widens_that_fetch(fake_kvikio, files, monkeypatch):
    """A cold read's first fetch is often its largest: once PROBE_BYTES came in slowly, the
    rest of the same fetch already goes with many reads in flight."""
    fake = fake_kvikio()
    root, blobs = files
    requests = [ByteRequest(k) for k in blobs] * 4
    assert sum(len(blobs[r.key]) for r in requests) >= 2 * kvikio_fetch.PROBE_BYTES
    monkeypatch.setattr(kvikio_fetch, "SLOW_THREAD_RATE", float("inf"))
    source = kvikio_fetch.KvikioFileSource(root)
    got = source.fetch(requests)
    assert source.slow_storage
    assert fake.most_open > kvikio_fetch.WARM_READS + 1
    assert [bytes(v) for v in got] == [blobs[r.key] for r in requests]
    assert fake.open_now == 0


class _Clock:
    """A stand-in for the time module whose clock advances a fixed step per reading."""

    def __init__(self, seconds_per_call: float):
        self.now = 0.0
        self.step = seconds_per_call

    def perf_counter(self) -> float:
        self.now += self.step
        return self.now


def test_confirmed_slow_storage_looks_up_the_files_ahead_from_many_threads(
    fake_kvikio, files, monkeypatch
):
    """On slow storage the opening thread would wait for each file's directory and inode in
    turn behind the reads in flight. Once a whole fetch came in slowly, a fetch has every
    file looked up ahead, and a re-probing fetch that finds the storage slow the files it
    has not opened yet. A fetch judged slow by its first PROBE_BYTES alone (a busy page
    cache) looks nothing up: that costs the thread driving the GPU its share of the GIL."""
    fake_kvikio()
    root, blobs = files
    requests = [ByteRequest(k) for k in blobs] * 4
    warmed: list[list[str]] = []
    original = LocalFileSource.warm_metadata

    def spy(self, keys):
        warmed.append(list(keys))
        futures = original(self, keys)
        assert all(f.result() is not None for f in futures)  # every file found
        return futures

    monkeypatch.setattr(LocalFileSource, "warm_metadata", spy)
    monkeypatch.setattr(kvikio_fetch, "CONFIRM_BYTES", 1 << 20)
    monkeypatch.setattr(kvikio_fetch, "SLOW_THREAD_RATE", 0.0)  # everything is fast
    monkeypatch.setattr(kvikio_fetch, "CONFIRMED_SLOW_RATE", 0.0)
    source = kvikio_fetch.KvikioFileSource(root)
    source.fetch(requests)  # the page cache
    assert warmed == [] and not source.slow_storage

    monkeypatch.setattr(kvikio_fetch, "SLOW_THREAD_RATE", float("inf"))  # probes say slow
    for _ in range(3):  # ... but whole fetches are fast: a busy page cache
        source.fetch(requests)
    assert source.slow_storage and not source.slow_confirmed
    assert warmed == []

    monkeypatch.setattr(kvikio_fetch, "CONFIRMED_SLOW_RATE", float("inf"))  # storage
    source._fetches = kvikio_fetch.REPROBE - 1  # the next fetch probes again
    source.fetch(requests)  # the first slow whole fetch confirms it ...
    assert source.slow_confirmed
    # ... and, measuring slow all along, looked the files it had not opened up a window at
    # a time, in order, to the last
    assert warmed and all(0 < len(w) <= kvikio_fetch.LOOK_AHEAD_FILES for w in warmed)
    ahead = [k for w in warmed for k in w]
    assert ahead == list(blobs)[-len(ahead) :] and len(ahead) < len(blobs)
    warmed.clear()
    source.fetch(requests)  # known slow: every file of the fetch
    assert warmed == [list(blobs)]

    warmed.clear()
    source._fetches = kvikio_fetch.REPROBE - 1  # the next fetch probes again
    source.fetch(requests)  # found slow after PROBE_BYTES: the files not opened yet
    assert len(warmed) == 1 and 0 < len(warmed[0]) < len(blobs)
    assert warmed[0] == list(blobs)[-len(warmed[0]) :]

    monkeypatch.setattr(kvikio_fetch, "CONFIRMED_SLOW_RATE", 0.0)  # the cache warmed up
    source.fetch(requests)
    assert not source.slow_confirmed
    warmed.clear()
    source.fetch(requests)
    assert warmed == []


def test_warm_metadata_skips_missing_files(tmp_path):
    (tmp_path / "a").write_bytes(b"x" * 10)
    futures = LocalFileSource(tmp_path).warm_metadata(["a", "missing/b"])
    assert [f.result() is not None for f in futures] == [True, False]
    assert futures[0].result().st_size == 10


@pytest.mark.parametrize("confirmed", [False, True])
def test_direct_reads_only_on_storage_confirmed_slow(fake_kvikio, files, monkeypatch, confirmed):
    """A fetch of ranges (a shard's runs) on storage confirmed slow reads with kvikio's direct
    reads on, and turns them back off once its last read is done; storage only judged slow,
    a probing fetch and whole files keep buffered reads. (Read-ahead off: see the next test.)"""
    fake = fake_kvikio()
    root, blobs = files
    source = kvikio_fetch.KvikioFileSource(root, read_ahead_bytes=0)
    source.slow_storage = True
    source.slow_confirmed = confirmed
    run = 100_000
    shard = os.urandom(40 * run)
    (root / "shard").write_bytes(shard)
    runs = [ByteRequest("shard", k * run, run) for k in range(40)]
    got = source.fetch(runs)
    assert [bytes(v) for v in got] == [shard[k * run : (k + 1) * run] for k in range(40)]
    assert fake.direct_reads == (len(runs) if confirmed else 0)
    assert fake.direct is False
    fake.direct_reads = 0
    # whole chunk files stay buffered (readahead serves them better)
    got = source.fetch([ByteRequest(k) for k in blobs])
    assert [bytes(v) for v in got] == list(blobs.values())
    assert fake.direct_reads == 0
    source._fetches = kvikio_fetch.REPROBE - 1  # the next fetch probes the storage again
    source.slow_confirmed = confirmed
    source.fetch(runs)
    assert fake.direct_reads == 0


def test_ranges_stay_buffered_where_a_reader_advises_them_ahead(fake_kvikio, files, monkeypatch):
    """Bytes a reader advised ahead are in the page cache, which O_DIRECT would skip: with
    read-ahead on, storage confirmed slow reads a shard's runs buffered, and only then does
    the source ask readers for hints."""
    fake = fake_kvikio()
    root, _ = files
    source = kvikio_fetch.KvikioFileSource(root, read_ahead_bytes=1 << 20)
    source.slow_storage = True
    assert not source.reads_ahead()  # judged slow by a probe only
    source.slow_confirmed = True
    assert source.reads_ahead()
    shard = os.urandom(8 * 100_000)
    (root / "shard").write_bytes(shard)
    runs = [ByteRequest("shard", k * 100_000, 100_000) for k in range(8)]
    got = source.fetch(runs)
    assert b"".join(bytes(v) for v in got) == shard
    assert fake.direct_reads == 0


def test_direct_reads_stay_on_while_another_fetch_uses_them(fake_kvikio, monkeypatch):
    fake = fake_kvikio()
    with kvikio_fetch._direct_reads():
        with kvikio_fetch._direct_reads():
            assert fake.direct is True
        assert fake.direct is True
    assert fake.direct is False


def test_a_fetch_judged_slow_stops_looking_ahead_once_it_comes_in_fast(
    fake_kvikio, files, monkeypatch
):
    """A probe can misjudge a busy page cache as slow: the fetch then looks up one window of
    files ahead, and no more once the fetch as a whole measures faster than storage."""
    fake_kvikio()
    root, blobs = files
    windows: list[list[str]] = []

    def spy(self, keys):
        windows.append(list(keys))
        monkeypatch.setattr(kvikio_fetch, "CONFIRMED_SLOW_RATE", 0.0)  # now it comes in fast
        return []

    monkeypatch.setattr(LocalFileSource, "warm_metadata", spy)
    monkeypatch.setattr(kvikio_fetch, "SLOW_THREAD_RATE", float("inf"))  # the probe says slow
    monkeypatch.setattr(kvikio_fetch, "CONFIRMED_SLOW_RATE", float("inf"))
    source = kvikio_fetch.KvikioFileSource(root)
    got = source.fetch([ByteRequest(k) for k in blobs] * 4)
    assert [bytes(v) for v in got] == list(blobs.values()) * 4
    assert len(windows) == 1 and len(windows[0]) == kvikio_fetch.LOOK_AHEAD_FILES
    assert source.slow_storage and not source.slow_confirmed


def test_a_fetch_of_shard_runs_judged_slow_looks_nothing_up_ahead(fake_kvikio, files, monkeypatch):
    """The look-ahead is for many small files; a fetch of ranges (a shard's runs) reads as
    before until the storage is confirmed slow."""
    fake_kvikio()
    root, blobs = files
    windows: list[list[str]] = []
    monkeypatch.setattr(LocalFileSource, "warm_metadata", lambda self, keys: windows.append(keys))
    monkeypatch.setattr(kvikio_fetch, "SLOW_THREAD_RATE", float("inf"))  # the probe says slow
    monkeypatch.setattr(kvikio_fetch, "CONFIRMED_SLOW_RATE", float("inf"))
    run = 100_000
    shards = {f"shard{k}": os.urandom(20 * run) for k in range(8)}
    for name, data in shards.items():
        (root / name).write_bytes(data)
    runs = [ByteRequest(name, i * run, run) for name in shards for i in range(20)]
    source = kvikio_fetch.KvikioFileSource(root)
    got = source.fetch(runs)
    assert [bytes(v) for v in got] == [shards[r.key][r.offset : r.offset + run] for r in runs]
    assert source.slow_storage and windows == []
