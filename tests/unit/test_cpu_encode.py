"""The CPU backend's write seam: chunks copied out of their regions and encoded, edge
chunks padded with the fill value."""

from __future__ import annotations

import numpy as np
import pytest
from numcodecs import Zstd

from linumpy_gpu.backends import CpuBackend


def test_regions_encode_to_full_chunks_with_edges_padded():
    data = np.arange(5 * 6, dtype="u2").reshape(5, 6)
    regions = [
        (slice(0, 4), slice(0, 4)),  # a full chunk
        (slice(4, 5), slice(4, 6)),  # the corner: 1 x 2 of the data
    ]
    raw = CpuBackend().encode_regions(data, regions, (4, 4), 7, None).frames
    corner = np.full((4, 4), 7, dtype="u2")
    corner[:1, :2] = data[4:5, 4:6]
    assert raw == [data[:4, :4].tobytes(), corner.tobytes()]
    frames = CpuBackend().encode_regions(data, regions, (4, 4), 7, (3, True)).frames
    assert [bytes(Zstd().decode(f)) for f in frames] == raw


def test_many_regions_encode_in_order_on_the_pool():
    rng = np.random.default_rng(0)
    data = rng.integers(0, 1000, size=(64, 64), dtype="u2")
    regions = [(slice(z, z + 8), slice(x, x + 8)) for z in range(0, 64, 8) for x in range(0, 64, 8)]
    frames = CpuBackend().encode_regions(data, regions, (8, 8), 0, (1, False)).frames
    decoded = [np.frombuffer(Zstd().decode(f), dtype="u2").reshape(8, 8) for f in frames]
    for region, chunk in zip(regions, decoded, strict=True):
        np.testing.assert_array_equal(chunk, data[region])


def test_decodes_started_from_every_pool_thread_at_once_all_finish():
    """A read may run on a pool thread (read_regions, dask): its decode hands chunks to
    helper threads of the same pool, and must finish even when every pool thread is such
    a caller (a queued helper is dropped once the caller has taken every chunk)."""
    from linumpy_gpu.backends.cpu import CpuBackend

    backend = CpuBackend()
    pool = backend.pool()
    futures = [
        pool.submit(backend.run_each, lambda i, mine, k=k: i * k, 50)
        for k in range(backend.threads * 3)
    ]
    assert [f.result() for f in futures] == [
        [i * k for i in range(50)] for k in range(len(futures))
    ]


def test_decode_buffers_kept_between_reads_stay_bounded_and_follow_the_sizes_in_use():
    """At most the bound in all and one per decode thread of a size; a size in use takes
    the room of the one used least recently."""
    from linumpy_gpu.backends.cpu import CpuBackend, _ScratchBuffers

    mib = 1 << 20
    cache = _ScratchBuffers(keep_bytes=8 * mib)
    old = [cache.take(3 * mib) for _ in range(2)]
    cache.give(old)
    assert cache._kept == 6 * mib
    current = [cache.take(4 * mib) for _ in range(CpuBackend.threads + 1)]
    cache.give(current)
    assert cache._kept <= 8 * mib
    assert 3 * mib not in cache._free or not cache._free[3 * mib]  # made room for 4 MiB
    kept = cache._free[4 * mib]
    assert 1 <= len(kept) <= CpuBackend.threads
    last = kept[-1]
    assert cache.take(4 * mib) is last  # reused, not made again
    cache.give([cache.take(9 * mib)])  # larger than the bound: never kept
    assert 9 * mib not in cache._free or not cache._free[9 * mib]
    assert sum(size * len(bufs) for size, bufs in cache._free.items()) == cache._kept


def test_an_interrupted_decode_returns_only_once_its_helpers_are_done():
    """Helpers write into buffers the caller gives back and into the output: a caller
    interrupted while handing out work (Ctrl-C) raises only once its helpers stopped."""
    import threading
    import time

    from linumpy_gpu.backends.cpu import CpuBackend

    started, starts, ends = threading.Event(), [], []
    real_pool = CpuBackend.pool()

    class InterruptedPool:
        submitted = 0

        def submit(self, fn):
            self.submitted += 1
            if self.submitted == 2:  # the first helper is decoding: Ctrl-C arrives
                started.wait()
                raise KeyboardInterrupt
            return real_pool.submit(fn)

    backend = CpuBackend()
    backend.threads = 3
    pool = InterruptedPool()
    backend.pool = lambda: pool  # type: ignore[method-assign]

    def one(i, mine):
        starts.append(i)
        started.set()
        time.sleep(0.05)  # a chunk being decoded
        ends.append(i)
        return i

    with pytest.raises(KeyboardInterrupt):
        backend.run_each(one, 8)
    assert starts and sorted(ends) == sorted(starts)  # nothing still running
    assert len(starts) < 8  # and the helper took no more once interrupted
