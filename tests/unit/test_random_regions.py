"""Seeded random region sweeps: the engine equals zarr-python on v2, v3 and sharded arrays."""

from __future__ import annotations

import numpy as np
import pytest
import zarr
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from linumpy_gpu.backends.cpu import CpuBackend
from linumpy_gpu.engine import ChunkedArrayReader
from tests.helpers.writers import volume, write_zarr_variant

SHAPE = (23, 37, 41)


def axis_index(n: int):
    ints = st.integers(-n, n - 1)
    bound = st.none() | st.integers(-n - 3, n + 3)
    step = st.none() | st.integers(1, 9) | st.integers(-9, -1)
    slices = st.builds(slice, bound, bound, step)
    return ints | slices


region = st.tuples(*(axis_index(n) for n in SHAPE)) | st.tuples(
    axis_index(SHAPE[0]), st.just(Ellipsis)
)


@pytest.fixture(
    scope="module", params=["v2-zstd-dot", "v3-gzip", "v3-sharded-zstd", "v3-sharded-blosc-crc"]
)
def stored(request, tmp_path_factory):
    data = volume(SHAPE)
    path = tmp_path_factory.mktemp("sweep") / "a.zarr"
    arr = write_zarr_variant(path, request.param, data, missing_fraction=0.3)
    # small batches so that multi-batch prefetching is exercised on small arrays
    reader = ChunkedArrayReader(arr, CpuBackend(), batch_bytes=4096)
    return reader, arr[...]


@settings(
    max_examples=150,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(region=region)
def test_random_regions_equal_zarr(stored, region):
    reader, full = stored
    np.testing.assert_array_equal(reader.read(region), full[region])


def test_read_into_out_including_reversed_and_dropped_axes(stored):
    reader, full = stored
    region = (slice(None, None, -2), 4, slice(3, 30, 5))
    out = np.full(full[region].shape, 99, dtype=full.dtype)
    result = reader.read(region, out=out)
    assert result is out
    np.testing.assert_array_equal(out, full[region])


def test_read_regions_over_many_prefetched_batches_equal_zarr(stored):
    """Overlapping regions share chunks; small batches make the reads overlap the decodes."""
    reader, full = stored
    rng = np.random.default_rng(11)
    regions = []
    for _ in range(12):
        lo = [int(rng.integers(0, n - 4)) for n in SHAPE]
        regions.append(tuple(slice(a, a + int(rng.integers(1, 12))) for a in lo))
    regions.append((slice(None), 3, slice(None, None, -3)))
    got = reader.read_regions(regions)
    assert reader.last_profile["batches"] > 1
    for result, region in zip(got, regions, strict=True):
        np.testing.assert_array_equal(result, full[region])


def test_zero_dimensional_array(tmp_path):
    arr = zarr.create_array(tmp_path / "scalar.zarr", shape=(), dtype="f4")
    arr[...] = 3.5
    got = ChunkedArrayReader(arr, CpuBackend()).read(())
    assert got.shape == () and got == np.float32(3.5)
