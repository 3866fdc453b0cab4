"""How many batches the read engine fetches ahead of the one it decodes: one on fast
storage (the page cache), two where the source measured slow storage (a cold disk), so
that one fetch's draining reads overlap the next one's."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
import zarr

from linumpy_gpu.engine.backend import CpuBackend
from linumpy_gpu.engine.fetch import LocalFileSource
from linumpy_gpu.engine.reader import ChunkedArrayReader

from .writers import volume, write_zarr_variant


class CountingSource:
    """A local source that says how fast its storage is and counts fetches in flight."""

    def __init__(self, root, slow_storage: bool):
        self._inner = LocalFileSource(root)
        self.slow_storage = slow_storage
        self._lock = threading.Lock()
        self.in_flight = 0
        self.most_in_flight = 0
        self.fetches = 0

    def fetch(self, requests, allocate=None, size_hint=None):
        with self._lock:
            self.in_flight += 1
            self.fetches += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            time.sleep(0.05)  # a slow disk: lets fetches submitted together overlap
            return self._inner.fetch(requests, allocate, size_hint)
        finally:
            with self._lock:
                self.in_flight -= 1


@pytest.mark.parametrize(("slow", "expected"), [(False, 1), (True, 2)])
def test_fetches_ahead_on_slow_storage_only(tmp_path, slow, expected):
    write_zarr_variant(
        tmp_path / "a.zarr", "v3-zstd", volume(shape=(32, 24, 20)), chunks=(4, 8, 10)
    )
    arr = zarr.open_array(str(tmp_path / "a.zarr"))
    source = CountingSource(tmp_path / "a.zarr", slow)
    reader = ChunkedArrayReader(arr, CpuBackend(), source=source, batch_bytes=6 * 8 * 10 * 4 * 2)
    full = arr[...]  # some chunks are missing: the fill value
    np.testing.assert_array_equal(reader.read(()), full)
    assert reader.last_profile["batches"] >= 8
    assert source.most_in_flight == expected
    np.testing.assert_array_equal(reader.read((slice(3, 29), 5)), full[3:29, 5])


def test_a_failed_read_with_fetches_ahead_leaves_nothing_running(tmp_path):
    data = volume(shape=(32, 24, 20))
    write_zarr_variant(tmp_path / "a.zarr", "v3-zstd", data, chunks=(4, 8, 10), missing_fraction=0)
    (tmp_path / "a.zarr" / "c" / "2" / "0" / "0").write_bytes(b"not zstd")
    arr = zarr.open_array(str(tmp_path / "a.zarr"))
    source = CountingSource(tmp_path / "a.zarr", True)
    reader = ChunkedArrayReader(arr, CpuBackend(), source=source, batch_bytes=6 * 8 * 10 * 4 * 2)
    with pytest.raises(Exception, match="c/2/0/0"):
        reader.read(())
    assert source.in_flight == 0
    batches = 48 // 6  # 48 chunks, 6 a batch; the damaged one is in the third batch
    assert source.fetches < batches  # stopped there, with the batches ahead collected
