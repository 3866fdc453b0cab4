"""The local fetch: long shard runs read in pieces, and more requests in flight on slow
storage."""

from __future__ import annotations

import numpy as np
import pytest
import zarr
from hypothesis import given, settings
from hypothesis import strategies as st

import linumpy_gpu.io.sources as fetch
from linumpy_gpu.io.sources import ByteRequest, LocalFileSource, merge_ranges

MiB = 1 << 20


@pytest.fixture
def shard(tmp_path):
    data = np.random.default_rng(1).integers(0, 256, 21 * MiB + 123, dtype=np.uint8)
    (tmp_path / "s").write_bytes(data.tobytes())
    return tmp_path, data.tobytes()


def _requests(size: int) -> list[ByteRequest]:
    rng = np.random.default_rng(2)
    cuts = np.sort(rng.choice(np.arange(1, size - 1), 300, replace=False))
    edges = [0, *cuts.tolist(), size]
    ranges = [(a, b - a) for a, b in zip(edges[:-1], edges[1:], strict=True)]
    del ranges[100]  # a gap: two runs
    ranges.append((size - 10, 50))  # runs past the end of the file
    ranges.append((size + 5, 10))  # starts past the end
    return [ByteRequest("s", a, n) for a, n in ranges]


@pytest.mark.parametrize("staged", [False, True])
def test_long_runs_read_in_pieces_equal_plain_slices(shard, staged, monkeypatch):
    root, blob = shard
    monkeypatch.setattr(fetch, "PIECE_BYTES", 2 * MiB)
    requests = _requests(len(blob))
    requests.insert(7, ByteRequest("missing", 0, 100))
    assert fetch._long_runs(requests)
    handed_out = []

    def allocate(n):
        buf = memoryview(bytearray(n))
        handed_out.append(buf)
        return buf

    got = LocalFileSource(root).fetch(requests, allocate if staged else None)
    for r, view in zip(requests, got, strict=True):
        if r.key == "missing":
            assert view is None
            continue
        assert bytes(view) == blob[r.offset : r.offset + r.length], r
    if staged:
        # one buffer per run (two around the gap, one for the overlapping tail request),
        # whatever the number of pieces
        assert len(handed_out) == 3


def test_slow_storage_gets_more_requests_in_flight(shard, monkeypatch):
    root, blob = shard
    source = LocalFileSource(root)
    requests = [ByteRequest("s", a, 3 * MiB) for a in range(0, 18 * MiB, 3 * MiB)]
    monkeypatch.setattr(fetch, "SLOW_THREAD_RATE", 1e30)  # nothing is fast enough
    source.fetch(requests)
    assert source.slow_storage
    used = []
    real_pool = LocalFileSource.pool
    monkeypatch.setattr(
        LocalFileSource, "pool", classmethod(lambda cls, n: used.append(n) or real_pool(n))
    )
    got = source.fetch(requests)
    assert used[-1] == fetch.DISK_THREADS
    assert b"".join(bytes(v) for v in got) == blob[: 18 * MiB]
    monkeypatch.setattr(fetch, "SLOW_THREAD_RATE", 0.0)  # the cache warmed up
    for _ in range(fetch.REPROBE):
        source.fetch(requests)
    assert not source.slow_storage
    source.fetch(requests)
    assert used[-1] < fetch.DISK_THREADS


@pytest.mark.parametrize("staged", [False, True])
def test_whole_files_many_at_once(tmp_path, staged):
    """Whole chunk files (the common case) land in the allocator's buffers, empty and
    missing files included."""
    rng = np.random.default_rng(3)
    blobs = {
        f"c/{i}": rng.integers(0, 256, int(rng.integers(0, 300_000)), np.uint8) for i in range(40)
    }
    blobs["c/0"] = np.zeros(0, np.uint8)
    (tmp_path / "c").mkdir()
    for key, blob in blobs.items():
        (tmp_path / key).write_bytes(blob.tobytes())
    handed_out = []

    def allocate(n):
        handed_out.append(memoryview(bytearray(n)))
        return handed_out[-1]

    keys = [*blobs, "c/absent", "c/0/below-a-file"]
    got = LocalFileSource(tmp_path, threads=3).fetch(
        [ByteRequest(k) for k in keys], allocate if staged else None, size_hint=150_000
    )
    for key, view in zip(keys, got, strict=True):
        if key not in blobs:
            assert view is None
            continue
        assert bytes(view) == blobs[key].tobytes()
        if staged and len(view):
            assert any(view.obj is h.obj for h in handed_out)


def test_io_threads_from_the_settings(tmp_path):
    import linumpy_gpu as lg
    from linumpy_gpu.io.sources import source_for

    store = zarr.storage.LocalStore(tmp_path)
    with lg.config.set(io_threads=5):
        assert source_for(store).threads == 5
    assert LocalFileSource(tmp_path).threads is None  # chosen per fetch
    assert LocalFileSource(tmp_path, threads=2).threads == 2


def test_merged_runs_bounded_by_length_and_keep_every_range():
    offsets = np.asarray([100 * i for i in range(10)] + [5000], dtype=np.int64)
    lengths = np.asarray([100] * 10 + [50], dtype=np.int64)
    keys = np.zeros(len(offsets), dtype=np.int64)
    runs = merge_ranges(keys, offsets, lengths, max_gap=0, max_length=350)
    assert list(zip(runs.start.tolist(), (runs.stop - runs.start).tolist(), strict=True)) == [
        (0, 300),
        (300, 300),
        (600, 300),
        (900, 100),
        (5000, 50),
    ]
    # every range lies whole inside its run
    assert (runs.start[runs.of] <= offsets).all()
    assert (offsets + lengths <= runs.stop[runs.of]).all()
    one = np.zeros(1, dtype=np.int64)
    one_long = merge_ranges(one, one, np.asarray([1000]), max_gap=0, max_length=10)
    assert (one_long.start.tolist(), one_long.stop.tolist()) == ([0], [1000])


def reference_runs(ranges, max_gap, max_length):
    """Merging spelled out one range at a time, in (key, offset) order: a range joins the
    run before it where it is of the same key, starts at most max_gap after the run's end,
    and keeps the run within max_length."""
    runs = []  # [key, start, end, members]
    for i in sorted(range(len(ranges)), key=lambda i: ranges[i][:2]):
        key, start, length = ranges[i]
        if runs:
            run = runs[-1]
            end = max(run[2], start + length)
            if run[0] == key and start <= run[2] + max_gap and end - run[1] <= max_length:
                run[2] = end
                run[3].append(i)
                continue
        runs.append([key, start, start + length, [i]])
    return runs


@settings(max_examples=200, deadline=None, derandomize=True)
@given(
    ranges=st.lists(
        st.tuples(st.integers(0, 3), st.integers(0, 400), st.integers(0, 60)), max_size=40
    ),
    max_gap=st.integers(0, 50),
    max_length=st.integers(1, 300),
)
def test_merged_runs_equal_merging_one_range_at_a_time(ranges, max_gap, max_length):
    keys, offsets, lengths = (np.asarray([r[k] for r in ranges], dtype=np.int64) for k in range(3))
    runs = merge_ranges(keys, offsets, lengths, max_gap, max_length)
    expected = reference_runs(ranges, max_gap, max_length)
    assert list(zip(runs.key.tolist(), runs.start.tolist(), runs.stop.tolist(), strict=True)) == [
        tuple(r[:3]) for r in expected
    ]
    for k, (_, _, _, members) in enumerate(expected):
        assert all(runs.of[i] == k for i in members)
