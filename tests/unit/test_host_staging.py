"""Host staging for CPU reads: batches read into arenas that later batches reuse."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import zarr

import linumpy_gpu as lg
from linumpy_gpu.backends.host_staging import HostStagingPool, host_staging_pool


def test_released_arenas_are_reused_and_views_do_not_overlap():
    pool = HostStagingPool(arena_bytes=1 << 10, keep_bytes=4 << 10)
    batch = pool.batch()
    views = [batch.reserve(n) for n in (100, 300, 700, 1 << 10)]
    for k, v in enumerate(views):
        v[:] = bytes([k + 1]) * len(v)
    for k, v in enumerate(views):  # each view still holds what was written to it
        assert bytes(v) == bytes([k + 1]) * len(v)
    arenas = list(batch._arenas)
    batch.release()
    assert pool.kept == len(arenas) << 10
    again = pool.batch()
    again.reserve(10)
    assert any(again._arenas[0] is a for a in arenas)  # a kept arena, not new memory
    again.release()


@pytest.mark.parametrize("large_first", [False, True])
def test_chunks_larger_than_an_arena_get_their_own_memory_and_are_not_kept(large_first):
    pool = HostStagingPool(arena_bytes=1 << 10, keep_bytes=4 << 10)
    batch = pool.batch()
    if large_first:
        large = batch.reserve(5000)
        small = [batch.reserve(10), batch.reserve(20)]
    else:
        small = [batch.reserve(10), batch.reserve(20)]
        large = batch.reserve(5000)
    large[:] = b"x" * 5000
    small[0][:] = b"y" * 10
    small[1][:] = b"z" * 20
    assert bytes(large) == b"x" * 5000  # no small view lies inside the large one
    assert bytes(small[0]) == b"y" * 10 and bytes(small[1]) == b"z" * 20
    batch.release()
    assert pool.kept == 1 << 10  # the standard arena only


def test_free_arenas_beyond_the_keep_bound_are_given_back():
    pool = HostStagingPool(arena_bytes=1 << 10, keep_bytes=2 << 10)
    batches = [pool.batch() for _ in range(4)]
    for b in batches:
        b.reserve(1 << 10)
    for b in batches:
        b.release()
    assert pool.kept == 2 << 10


def test_reservations_from_many_threads_never_overlap():
    pool = HostStagingPool(arena_bytes=64 << 10, keep_bytes=1 << 20)
    batch = pool.batch()
    views: list[tuple[int, memoryview]] = []
    lock = threading.Lock()

    def reserve(k: int) -> None:
        for j in range(50):
            v = batch.reserve(100 + (k * 50 + j) % 900)
            with lock:
                views.append((k * 50 + j, v))

    threads = [threading.Thread(target=reserve, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for tag, v in views:
        v[:] = tag.to_bytes(2, "little") * (len(v) // 2) + b"\0" * (len(v) % 2)
    for tag, v in views:
        assert bytes(v[:2]) == tag.to_bytes(2, "little")
        assert bytes(v[len(v) - 2 - len(v) % 2 : len(v) - len(v) % 2]) == tag.to_bytes(2, "little")
    batch.release()


def test_cpu_reads_stage_in_reused_memory_and_read_correctly(tmp_path):
    """Whole-level reads (chunked and sharded) read their stored bytes into the pool's
    arenas, batch after batch, and return the stored values."""
    data = (np.arange(64 * 96 * 80) * 13 % 65521).astype("u2").reshape(64, 96, 80)
    for shards in (None, (32, 48, 48)):
        path = tmp_path / f"s{shards is not None}.zarr"
        lg.write_ome_zarr(path, data, axes="zyx", chunks=(16, 16, 16), shards=shards, levels=1)
        with lg.config.set(progress=False):
            level = lg.open_ome_zarr(path, device="cpu")[0]
            for _ in range(3):
                np.testing.assert_array_equal(level.read(), data)
        np.testing.assert_array_equal(zarr.open_array(path / "0", mode="r")[...], data)
    assert host_staging_pool().kept > 0
