"""Telling slow storage which bytes a read fetches next (posix_fadvise WILLNEED)."""

from __future__ import annotations

import os

import numpy as np
import pytest
import zarr
from zarr.codecs import ZstdCodec

from linumpy_gpu.backends.cpu import CpuBackend
from linumpy_gpu.engine.read_ahead import ReadAhead
from linumpy_gpu.engine.reader import ChunkedArrayReader
from linumpy_gpu.io.sources import ByteRequest, LocalFileSource
from tests.helpers.writers import volume

needs_fadvise = pytest.mark.skipif(
    not hasattr(os, "posix_fadvise"), reason="this platform has no posix_fadvise"
)


class AdvisedSource:
    """A source that records the hints it is given."""

    def __init__(self, slow: bool):
        self.slow = slow
        self.advised: list[list[ByteRequest]] = []

    def reads_ahead(self) -> bool:
        return self.slow

    def will_need(self, requests):
        self.advised.append(list(requests))


def chunk_requests(start: int, stop: int) -> list[ByteRequest]:
    return [ByteRequest(f"c/{i}") for i in range(start, stop)]


def test_nothing_is_advised_on_fast_storage():
    source = AdvisedSource(slow=False)
    ahead = ReadAhead(source, 100, chunk_requests, lambda: 1000.0, window=10_000)
    for end in (10, 20, 30):
        ahead.advance(end)
    assert source.advised == [] and ahead.advised_to == 0


def test_the_window_ahead_of_each_batch_is_advised_once():
    source = AdvisedSource(slow=True)
    ahead = ReadAhead(source, 100, chunk_requests, lambda: 1000.0, window=10_000)  # 10 chunks
    ahead.advance(10)  # fetching chunks [0, 10): advise [10, 20)
    assert [r.key for r in source.advised[-1]] == [f"c/{i}" for i in range(10, 20)]
    ahead.advance(12)  # only 2 more chunks would be new: less than a step, nothing
    assert len(source.advised) == 1
    ahead.advance(20)  # [20, 30): nothing advised twice, nothing skipped
    assert [r.key for r in source.advised[-1]] == [f"c/{i}" for i in range(20, 30)]
    ahead.advance(95)  # the plan's end: the last chunks, though fewer than a step
    assert [r.key for r in source.advised[-1]] == [f"c/{i}" for i in range(95, 100)]
    ahead.advance(100)
    assert len(source.advised) == 3 and ahead.hints == 3
    advised = [r.key for batch in source.advised for r in batch]
    assert len(advised) == len(set(advised))


def test_storage_found_slow_later_is_advised_from_then_on():
    source = AdvisedSource(slow=False)
    ahead = ReadAhead(source, 50, chunk_requests, lambda: 100.0, window=1_000)
    ahead.advance(10)
    source.slow = True  # a whole fetch came in slowly
    ahead.advance(20)
    assert [r.key for r in source.advised[0]] == [f"c/{i}" for i in range(20, 30)]


def test_whole_files_and_ranges_are_advised_and_a_zero_window_advises_nothing():
    def mixed(start, stop):
        return [ByteRequest("shard", 0, 10), ByteRequest("file")]

    source = AdvisedSource(slow=True)
    ReadAhead(source, 10, mixed, lambda: 1.0, window=100).advance(1)
    assert source.advised == [[ByteRequest("shard", 0, 10), ByteRequest("file")]]
    source.advised.clear()
    ReadAhead(source, 10, mixed, lambda: 1.0, window=0).advance(1)
    assert source.advised == []


def test_sources_without_hints_get_no_read_ahead():
    assert ReadAhead.for_source(object(), 10, chunk_requests, lambda: 1.0) is None


@needs_fadvise
def test_will_need_advises_each_range_and_skips_missing_files(tmp_path, monkeypatch):
    (tmp_path / "a").write_bytes(b"x" * 1000)
    (tmp_path / "b").write_bytes(b"y" * 1000)
    calls = []
    real = os.posix_fadvise

    def spy(fd, offset, length, advice):
        calls.append((os.fstat(fd).st_ino, offset, length, advice))
        return real(fd, offset, length, advice)

    monkeypatch.setattr(os, "posix_fadvise", spy)
    source = LocalFileSource(tmp_path)
    future = source.will_need(
        [
            ByteRequest("a", 100, 200),
            ByteRequest("a", 500, 10),
            ByteRequest("b"),
            ByteRequest("missing"),
            ByteRequest("b", suffix=16),  # an index: not advised
        ]
    )
    assert future.result() == 2
    ino = {k: os.stat(tmp_path / k).st_ino for k in "ab"}
    will = os.POSIX_FADV_WILLNEED
    assert calls == [(ino["a"], 100, 200, will), (ino["a"], 500, 10, will), (ino["b"], 0, 0, will)]


def test_a_local_source_reads_ahead_only_on_slow_storage(monkeypatch, tmp_path):
    source = LocalFileSource(tmp_path)
    assert not source.reads_ahead()
    source.slow_storage = True
    assert source.reads_ahead() is hasattr(os, "posix_fadvise")
    off = LocalFileSource(tmp_path, read_ahead_bytes=0)
    off.slow_storage = True
    assert not off.reads_ahead()


class RecordingLocalSource(LocalFileSource):
    """Reads like LocalFileSource; records what it is asked to advise and to fetch."""

    def __init__(self, root, slow: bool, read_ahead_bytes: int = 16_000):
        super().__init__(root, read_ahead_bytes=read_ahead_bytes)
        self.slow = slow
        self.advised: list[ByteRequest] = []
        self.fetched: list[ByteRequest] = []
        self.hints = 0

    def reads_ahead(self) -> bool:
        return self.slow

    def will_need(self, requests):
        self.advised.extend(requests)
        self.hints += 1
        return super().will_need(requests)

    def fetch(self, requests, allocate=None, size_hint=None):
        self.fetched.extend(requests)
        return super().fetch(requests, allocate, size_hint)


@pytest.mark.parametrize("sharded", [False, True])
def test_a_read_on_slow_storage_advises_the_bytes_its_later_batches_fetch(
    tmp_path, monkeypatch, sharded
):
    """Every advised range is one the read then fetches (or lies within one), none is a
    chunk the read does not touch, and the data read is the same as without hints."""
    # sources read ahead 16000 bytes: about 20 chunks
    data = volume((40, 48, 44), seed=4)
    shards = dict(shards=(8, 24, 22)) if sharded else {}
    arr = zarr.create_array(
        str(tmp_path / "a.zarr"),
        shape=data.shape,
        dtype=data.dtype,
        chunks=(4, 12, 11),
        compressors=[ZstdCodec(level=3)],
        **shards,
    )
    arr[...] = data
    region = (slice(0, 36), slice(5, 48), slice(0, 40))
    for slow in (False, True):
        source = RecordingLocalSource(tmp_path / "a.zarr", slow)
        reader = ChunkedArrayReader(arr, CpuBackend(), source=source, batch_bytes=8 * 1056)
        got = reader.read(region)
        np.testing.assert_array_equal(got, data[region])
        assert reader.last_profile["batches"] > 4
        if not slow:
            assert source.advised == []
            continue
        assert source.hints > 2, "the window did not move along the read"
        fetched = [r for r in source.fetched if r.suffix is None and r.length != 0]
        assert fetched[-1].key in {h.key for h in source.advised}  # the window reached the end
        for hint in source.advised:
            if hint.length is None:  # a whole chunk file the read fetches
                assert hint.key in {r.key for r in fetched}
            else:  # within the runs fetched from that shard
                runs = [r for r in fetched if r.key == hint.key and r.length is not None]
                start, stop = min(r.offset for r in runs), max(r.offset + r.length for r in runs)
                assert start <= hint.offset and hint.offset + hint.length <= stop
        # the first batch's chunks are fetched before storage can be judged: not advised
        first = fetched[0]
        assert all((h.key, h.offset) != (first.key, first.offset) for h in source.advised)
        assert reader.last_profile["read_ahead"] >= 0
