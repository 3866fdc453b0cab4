"""The pinned staging ring's bookkeeping, on ordinary memory (no GPU needed): reads land in
arenas, every view of them is found again, the cap holds and arenas come back."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import zarr

from linumpy_gpu.backends.base import BatchMemory
from linumpy_gpu.backends.cpu import CpuBackend
from linumpy_gpu.engine.reader import ChunkedArrayReader
from linumpy_gpu.errors import ChunkDecodeError
from linumpy_gpu.gpu.staging import ALIGN, Arena, StagingPool
from linumpy_gpu.io.sources import ByteRequest, LocalFileSource
from tests.helpers.writers import volume, write_zarr_variant

MiB = 1 << 20


def host_pool(cap: int, arena: int) -> StagingPool:
    return StagingPool(cap, arena, make_arena=lambda size: Arena(size, bytearray(size)))


def test_reserve_spans_arenas_and_locates_slices():
    pool = host_pool(8 * MiB, MiB)
    batch = pool.batch()
    views = [batch.reserve(300_000) for _ in range(10)]
    assert all(v is not None for v in views)
    assert len(batch.arenas) == 4  # three 300 kB reservations fit a 1 MiB arena
    for v in views:
        arena, offset = batch.locate(v)
        assert offset % ALIGN == 0
        assert batch.locate(v[17:1000]) == (arena, offset + 17)
    assert batch.locate(memoryview(bytearray(10))) is None
    # all at once, as a decode takes a batch's frames: each view, sliced or not, in order
    frames = [v[4:] if k % 3 else v for k, v in enumerate(views)]
    arena_of, offsets = batch.locate_all(frames)
    assert list(zip(arena_of.tolist(), offsets.tolist(), strict=True)) == [
        batch.locate(f) for f in frames
    ]
    assert batch.locate_all([*frames, memoryview(bytearray(10))]) is None  # one elsewhere
    assert batch.locate_all([*frames, views[0][:0]]) is None  # an empty one: no address
    assert batch.locate_all([*frames, bytes(5)]) is None  # read-only memory elsewhere
    assert batch.locate_all([]) is None
    batch.release()
    assert len(pool._free) == 4 and pool._allocated == 4 * MiB


def test_cap_holds_and_a_batch_bigger_than_the_cap_does_not_wait(monkeypatch):
    import linumpy_gpu.gpu.staging as staging

    monkeypatch.setattr(staging, "ARENA_WAIT", 30.0)  # the release below comes well before
    pool = host_pool(2 * MiB, MiB)
    batch = pool.batch()
    assert batch.reserve(900_000) is not None
    assert batch.reserve(900_000) is not None
    assert batch.reserve(900_000) is None  # over the cap: ordinary memory from here on
    assert pool._allocated <= pool.cap
    other = pool.batch()
    released = threading.Timer(0.2, batch.release)
    released.start()
    assert other.reserve(500_000) is not None  # waits for the first batch's arenas
    released.join()


def test_arenas_taken_up_front_serve_the_reads_and_come_back_unused():
    pool = host_pool(8 * MiB, MiB)
    batch = pool.batch(expected_bytes=3 * MiB)
    assert len(batch._ahead) == 3 and pool._allocated == 3 * MiB
    views = [batch.reserve(600_000) for _ in range(2)]
    assert all(v is not None for v in views) and len(batch.arenas) == 2
    assert pool._allocated == 3 * MiB  # nothing new: the reads used arenas taken up front
    assert batch.reserve(3 * MiB) is not None  # too large for one of them: a new arena
    batch.release()
    assert pool._allocated == len(pool._free) * MiB + 2 * MiB  # the large one is 3 MiB
    assert len(pool._free) == 4
    assert pool.batch(expected_bytes=100 * MiB)._ahead.__len__() == 8  # at most the cap


def test_batches_asking_up_front_take_the_ring_in_turn_and_never_spill():
    """Several readers, each a batch that would fill most of the ring: with arenas taken up
    front they wait in turn for whole batches' worth instead of each getting part of the
    ring and reading the rest into ordinary memory."""
    pool = host_pool(4 * MiB, MiB)
    first = pool.batch(expected_bytes=3 * MiB)
    order: list[int] = []
    spilled = []

    def reader(k: int) -> None:
        batch = pool.batch(expected_bytes=3 * MiB)
        order.append(k)
        spilled.extend(batch.reserve(900_000) is None for _ in range(3))
        assert pool._allocated <= pool.cap
        batch.release()

    threads = [threading.Thread(target=reader, args=(k,)) for k in range(3)]
    for k, t in enumerate(threads):
        t.start()
        while len(pool._queue) <= k:  # each in the queue before the next starts
            threading.Event().wait(0.001)
    assert order == []  # one arena is free, not three: all of them wait
    first.release()
    for t in threads:
        t.join()
    assert order == [0, 1, 2] and not any(spilled)
    assert pool._allocated <= pool.cap and not pool._queue


def test_a_batch_waiting_up_front_gives_up_after_its_wait():
    pool = host_pool(2 * MiB, MiB)
    holder = pool.batch(expected_bytes=2 * MiB)
    assert pool.acquire_many(2, wait=0.0) == []
    assert not pool._queue
    holder.release()
    assert len(pool.acquire_many(2, wait=0.0)) == 2


def test_fetch_into_staging_reads_every_file_and_shard_range(tmp_path):
    rng = np.random.default_rng(0)
    blobs = {
        f"c/{i}": rng.integers(0, 255, size=int(rng.integers(1, 200_000))).astype("u1")
        for i in range(40)
    }
    for key, blob in blobs.items():
        path = tmp_path / key
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(blob.tobytes())
    shard = rng.integers(0, 255, size=500_000).astype("u1")
    (tmp_path / "shard").write_bytes(shard.tobytes())
    cuts = [0, 1000, 5000, 5000, 90_000, 90_123, 400_000, 500_000]
    ranged = [ByteRequest("shard", a, b - a) for a, b in zip(cuts, cuts[1:], strict=False)]
    ranged.append(ByteRequest("shard", 450_000, 10))  # overlaps another range
    requests = [ByteRequest(k) for k in blobs] + ranged + [ByteRequest("missing")]
    pool = host_pool(64 * MiB, MiB)
    batch = pool.batch()
    got = LocalFileSource(tmp_path, threads=4).fetch(requests, batch.reserve, size_hint=100_000)
    assert got[-1] is None
    for request, view in zip(requests[: len(blobs)], got, strict=False):
        assert bytes(view) == blobs[request.key].tobytes()
        assert batch.locate(view) is not None
    for request, view in zip(ranged, got[len(blobs) : -1], strict=True):
        assert bytes(view) == shard[request.offset : request.offset + request.length].tobytes()
        if len(view):
            assert batch.locate(view) is not None


class StagedCpuBackend(CpuBackend, BatchMemory):
    """The CPU decoder fed the way the GPU backend is: every batch read into staging arenas,
    inner chunks of a shard packed end to end there (``unaligned``) or one slot each."""

    def memory(self):
        return self

    def __init__(self, unaligned: bool):
        self.ring = host_pool(64 * MiB, MiB)
        self.unaligned = unaligned
        self.staged = 0
        self.decoded = 0
        self.expected: list[int] = []

    def stages_unaligned(self, fmt):
        return self.unaligned

    def acquire_staging(self, expected_bytes=0):
        self.expected.append(expected_bytes)
        return self.ring.batch(expected_bytes)

    def release_staging(self, staging):
        if staging is not None:
            staging.release()

    def decode(self, chunks, fmt, array, staging=None, placement=None, sink=None):
        self.staged += sum(staging.locate(data) is not None for _, data in chunks)
        self.decoded += len(chunks)
        return super().decode(chunks, fmt, array, staging)


@pytest.mark.parametrize("variant", ["v3-sharded-zstd", "v3-sharded-blosc-crc"])
@pytest.mark.parametrize("unaligned", [True, False])
def test_shard_runs_are_read_whole_into_staging(tmp_path, variant, unaligned):
    data = volume(shape=(30, 41, 44))
    arr = write_zarr_variant(tmp_path / "a.zarr", variant, data, missing_fraction=0.1)
    backend = StagedCpuBackend(unaligned)
    reader = ChunkedArrayReader(arr, backend)
    requests = []
    fetch = reader.source.fetch

    def counting_fetch(batch, *args, **kwargs):
        if args and args[0] is not None:  # reads into staging (not the shard indexes)
            requests.extend(batch)
        return fetch(batch, *args, **kwargs)

    reader.source.fetch = counting_fetch
    expected = np.asarray(zarr.open_array(str(tmp_path / "a.zarr"))[...])
    np.testing.assert_array_equal(reader.read(), expected)
    region = (slice(3, 25), slice(7, 40), slice(None, None, 2))
    np.testing.assert_array_equal(reader.read(region), expected[region])
    assert backend.staged == backend.decoded > 0  # every chunk decoded from staging
    assert backend.expected and all(e > 0 for e in backend.expected)  # arenas up front
    if unaligned:  # adjacent inner chunks of a shard: one read per run
        assert len(requests) < backend.decoded / 2
    else:
        assert len(requests) == backend.decoded
    assert backend.ring._allocated <= backend.ring.cap


def test_truncated_shard_is_reported_with_runs_read_whole(tmp_path):
    data = volume(shape=(30, 41, 44))
    arr = write_zarr_variant(tmp_path / "a.zarr", "v3-sharded-zstd", data, missing_fraction=0.0)
    shard = next(p for p in sorted((tmp_path / "a.zarr" / "c").rglob("*")) if p.is_file())
    blob = shard.read_bytes()
    index_bytes = 16 * 8 + 4  # the index at the end: 8 inner chunks, then its crc32c
    shard.write_bytes(blob[: (len(blob) - index_bytes) // 2] + blob[-index_bytes:])
    reader = ChunkedArrayReader(arr, StagedCpuBackend(True))
    with pytest.raises(ChunkDecodeError) as info:
        reader.read()
    assert "shorter than its index says" in str(info.value)
    assert "c/0/0/0 (inner chunk" in str(info.value)
