"""The CPU backend's write seam: chunks copied out of their regions and encoded, edge
chunks padded with the fill value."""

from __future__ import annotations

import numpy as np
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
