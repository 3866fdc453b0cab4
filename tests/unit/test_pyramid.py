"""Downsampling for pyramids: means over partial edge blocks, the mode for labels; the\nstorage units a pyramid update writes, counted ahead for its progress bar."""

from __future__ import annotations

import numpy as np
import pytest
import zarr

from linumpy_gpu.backends import CpuBackend
from linumpy_gpu.engine.pyramid import downsample, units_updated, update_level
from linumpy_gpu.engine.writer import ChunkedArrayWriter


def test_mean_downsample_handles_partial_edges():
    a = np.arange(5 * 3, dtype="f4").reshape(5, 3)
    got = downsample(a, (2, 2), "mean")
    expected = np.array(
        [
            [np.mean(a[0:2, 0:2]), np.mean(a[0:2, 2:3])],
            [np.mean(a[2:4, 0:2]), np.mean(a[2:4, 2:3])],
            [np.mean(a[4:5, 0:2]), np.mean(a[4:5, 2:3])],
        ],
        dtype="f4",
    )
    np.testing.assert_allclose(got, expected)


def test_mode_downsample_for_labels():
    a = np.array([[1, 1, 2, 3], [1, 2, 3, 3], [5, 5, 0, 0], [5, 4, 0, 7]], dtype="u4")
    np.testing.assert_array_equal(downsample(a, (2, 2), "mode"), [[1, 3], [5, 0]])
    np.testing.assert_array_equal(downsample(a, (2, 2), "nearest"), [[1, 2], [5, 0]])


class _CountingBar:
    def __init__(self) -> None:
        self.n = 0

    def update(self, n: int) -> None:
        self.n += n


@pytest.mark.parametrize(
    "region, slab_bytes",
    [
        (None, 512 << 20),  # one slab
        (None, 4 * 50 * 30),  # slabs of 4 planes across units 6 deep: units written twice
        ((slice(5, 17), slice(3, 40), slice(0, 30)), 2 * 50 * 30),  # part of the level
    ],
)
def test_units_updated_counts_what_update_level_writes(tmp_path, region, slab_bytes):
    source = zarr.create_array(tmp_path / "0", shape=(31, 50, 30), chunks=(8, 16, 16), dtype="u1")
    source[:] = np.arange(source.size, dtype=np.uint64).reshape(source.shape) % 251
    coarse = zarr.create_array(tmp_path / "1", shape=(16, 25, 15), chunks=(6, 8, 8), dtype="u1")
    writer = ChunkedArrayWriter(coarse, CpuBackend(), locking=False)
    bar = _CountingBar()
    update_level(source, writer, (2, 2, 2), "mean", CpuBackend(), region, bar, slab_bytes)
    assert bar.n == units_updated(source, (6, 8, 8), (2, 2, 2), region, slab_bytes) > 0
    expected = downsample(source[:], (2, 2, 2), "mean")
    if region is None:
        np.testing.assert_array_equal(coarse[:], expected)
