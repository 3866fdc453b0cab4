"""Reads a backend hands to a faster one (a GPU's small reads to host cores): equal results
for every kind of region, into ``out`` too, with the reading object's settings."""

from __future__ import annotations

import numpy as np
import pytest

from linumpy_gpu import config
from linumpy_gpu.backends.cpu import CpuBackend
from linumpy_gpu.engine import ChunkedArrayReader
from tests.helpers.writers import volume, write_zarr_variant

REGIONS = [
    (slice(3, 20), slice(5, 33, 3), slice(None, None, -2)),
    (5, Ellipsis, slice(-9, None)),
    (slice(None, None, 7), 0, 40),
    (slice(20, 1, -3), slice(10, 11), slice(0, 41, 40)),
    (0, 0, 0),
]


class Counting(CpuBackend):
    """A host backend that counts the batches it decodes."""

    def __init__(self) -> None:
        self.decoded = 0

    def decode(self, chunks, *args, **kwargs):
        self.decoded += len(chunks)
        return super().decode(chunks, *args, **kwargs)


class HandsSmallReads(Counting):
    """A backend handing reads of at most ``limit`` bytes to ``other``."""

    def __init__(self, other: CpuBackend, limit: int) -> None:
        super().__init__()
        self.other, self.limit = other, limit
        self.asked: list[tuple[int, int]] = []

    def small_read_backend(self, fmt, n_chunks, out_nbytes):
        self.asked.append((n_chunks, out_nbytes))
        return self.other if out_nbytes <= self.limit else None


@pytest.fixture
def array(tmp_path):
    data = volume()
    return write_zarr_variant(tmp_path / "a.zarr", "v3-zstd", data, missing_fraction=0.0)


@pytest.mark.parametrize("region", REGIONS)
def test_handed_reads_equal_the_backends_own(array, region):
    other = Counting()
    backend = HandsSmallReads(other, limit=1 << 30)
    got = ChunkedArrayReader(array, backend).read(region)
    expected = array[...][region]
    np.testing.assert_array_equal(got, expected)
    assert got.shape == expected.shape
    assert other.decoded > 0 and backend.decoded == 0


def test_large_reads_stay_and_small_ones_go(array):
    other = Counting()
    backend = HandsSmallReads(other, limit=1000)
    reader = ChunkedArrayReader(array, backend)
    np.testing.assert_array_equal(reader.read(()), array[...])
    assert backend.decoded > 0 and other.decoded == 0
    assert "through" not in reader.last_profile
    np.testing.assert_array_equal(reader.read((1, slice(2, 9), 3)), array[1, 2:9, 3])
    assert other.decoded == 1
    assert reader.last_profile["through"] == 1.0


def test_chunks_counted_per_axis(array):
    """Chunks (8, 10, 7): z 8..17 spans 2, y 0..25 spans 3, x 6..7 spans 1 (6 chunks)."""
    backend = HandsSmallReads(Counting(), limit=0)
    reader = ChunkedArrayReader(array, backend)
    reader.read((slice(8, 17), slice(0, 25), slice(6, 7)))
    reader.read((slice(0, 23, 9), 4, slice(None, None, -1)))
    reader.read((0, 0, slice(None, None, 14)))  # x 0, 14, 28: three chunks of the five spanned
    assert backend.asked == [(6, 9 * 25 * 1 * 2), (3 * 1 * 6, 3 * 1 * 41 * 2), (3, 3 * 2)]


def test_handed_read_fills_out(array):
    backend = HandsSmallReads(Counting(), limit=1 << 30)
    out = np.zeros((5, 6), dtype=array.dtype)
    got = ChunkedArrayReader(array, backend).read((2, slice(3, 8), slice(30, 36)), out=out)
    assert got is out
    np.testing.assert_array_equal(out, array[2, 3:8, 30:36])


def test_handed_reads_keep_the_readers_settings(array):
    with config.set(io_threads=3):
        reader = ChunkedArrayReader(array, HandsSmallReads(Counting(), limit=1 << 30))
    with config.set(io_threads=5):
        reader.read((0, 0))
    assert reader._small_reader is not None
    assert reader._small_reader.settings.io_threads == 3


def test_handed_reads_use_the_source_the_reader_was_given(array):
    from linumpy_gpu.io.sources import source_for

    given = source_for(array.store, config.get())
    reader = ChunkedArrayReader(array, HandsSmallReads(Counting(), limit=1 << 30), source=given)
    np.testing.assert_array_equal(reader.read((0, 0)), array[0, 0])
    assert reader._small_reader is not None
    assert reader._small_reader.source is given


def test_a_store_replaced_before_the_first_handed_read_is_refused(tmp_path):
    """The reader handed to is made at the first small read: a store replaced after this
    reader was opened, but before that read, is refused as this reader would refuse it,
    not read as its successor."""
    import time

    from linumpy_gpu import StoreError

    data = volume()
    array = write_zarr_variant(tmp_path / "a.zarr", "v3-zstd", data, missing_fraction=0.0)
    reader = ChunkedArrayReader(array, HandsSmallReads(Counting(), limit=1 << 30))
    time.sleep(0.01)  # a later modification time for the new metadata
    write_zarr_variant(tmp_path / "a.zarr", "v3-zstd", data + 1, missing_fraction=0.0)
    with pytest.raises(StoreError, match="replaced"):
        reader.read((0, 0))
