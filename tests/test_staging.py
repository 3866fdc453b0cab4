"""The pinned staging ring's bookkeeping, on ordinary memory (no GPU needed): reads land in
arenas, every view of them is found again, the cap holds and arenas come back."""

from __future__ import annotations

import threading

import numpy as np

from linumpy_gpu.engine.fetch import ByteRequest, LocalFileSource
from linumpy_gpu.gpu.staging import ALIGN, Arena, StagingPool

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
    batch.release()
    assert len(pool._free) == 4 and pool.allocated == 4 * MiB


def test_cap_holds_and_a_batch_bigger_than_the_cap_does_not_wait(monkeypatch):
    import linumpy_gpu.gpu.staging as staging

    monkeypatch.setattr(staging, "ARENA_WAIT", 30.0)  # the release below comes well before
    pool = host_pool(2 * MiB, MiB)
    batch = pool.batch()
    assert batch.reserve(900_000) is not None
    assert batch.reserve(900_000) is not None
    assert batch.reserve(900_000) is None  # over the cap: ordinary memory from here on
    assert pool.allocated <= pool.cap
    other = pool.batch()
    released = threading.Timer(0.2, batch.release)
    released.start()
    assert other.reserve(500_000) is not None  # waits for the first batch's arenas
    released.join()


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
