"""The engine's reader on arrays other tools write (zarr-python's variants, tensorstore,
every dtype, a NaN fill value): read by the engine itself, never handed to zarr-python,
and equal to zarr-python's read for every region."""

from __future__ import annotations

import numpy as np
import pytest

from linumpy_gpu.backends.cpu import CpuBackend
from linumpy_gpu.engine import ChunkedArrayReader
from tests.helpers.writers import ZARR_VARIANTS, volume, write_tensorstore, write_zarr_variant

REGIONS = [
    (),
    (slice(3, 20), slice(5, 33, 3), slice(None, None, -2)),
    (5, Ellipsis, slice(-9, None)),
    (slice(None, None, 7), 0, 40),
    (slice(20, 1, -3), slice(10, 11), slice(0, 41, 40)),
]


@pytest.mark.parametrize("variant", sorted(ZARR_VARIANTS))
@pytest.mark.parametrize("dtype", ["u2", "f4"])
def test_zarr_python_variants(tmp_path, variant, dtype):
    data = volume(dtype=dtype)
    arr = write_zarr_variant(tmp_path / "a.zarr", variant, data)
    reader = ChunkedArrayReader(arr, CpuBackend())
    assert reader.layout.delegate_reason is None, reader.layout.delegate_reason
    full = arr[...]  # zarr-python's read; numpy applies steps zarr does not support (negative)
    for region in REGIONS:
        expected = full[region]
        got = reader.read(region)
        assert got.dtype == expected.dtype.newbyteorder("=")
        np.testing.assert_array_equal(got, expected, err_msg=f"{variant} {region}")


@pytest.mark.parametrize("dtype", ["i1", "u1", "i8", "u8", "f8", "bool", "c8"])
def test_dtypes(tmp_path, dtype):
    data = volume(dtype=dtype) if dtype != "c8" else (volume(dtype="f4") + 1j).astype("c8")
    arr = write_zarr_variant(tmp_path / "a.zarr", "v3-zstd", data, fill_value=0)
    np.testing.assert_array_equal(ChunkedArrayReader(arr, CpuBackend()).read(()), arr[...])


@pytest.mark.parametrize("variant", ["v3-raw-bigendian", "v2-gzip-fortran-bigendian"])
@pytest.mark.parametrize("dtype", ["u2", "f8", "c8", "c16"])
def test_big_endian_values(tmp_path, variant, dtype):
    """Big-endian elements come back in native order; a complex number's real and
    imaginary parts are swapped each on its own, not as one element."""
    data = volume(dtype="f4")
    if dtype.startswith("c"):
        data = (data + 1j * (data + 100)).astype(dtype)
    else:
        data = data.astype(dtype)
    arr = write_zarr_variant(tmp_path / "a.zarr", variant, data, fill_value=0)
    got = ChunkedArrayReader(arr, CpuBackend()).read(())
    assert got.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(got, arr[...])
    assert (got == data).mean() > 0.5  # most chunks are present, not fill values


def test_nan_fill_value(tmp_path):
    data = volume(dtype="f4")
    arr = write_zarr_variant(
        tmp_path / "a.zarr", "v3-sharded-zstd", data, fill_value=np.nan, missing_fraction=0.5
    )
    got = ChunkedArrayReader(arr, CpuBackend()).read(())
    np.testing.assert_array_equal(got, arr[...])
    assert np.isnan(got).any()


@pytest.mark.parametrize("sharded", [False, True])
def test_tensorstore_zarr3(tmp_path, sharded):
    pytest.importorskip("tensorstore")
    data = volume()
    arr = write_tensorstore(tmp_path / "ts.zarr", data, sharded)
    reader = ChunkedArrayReader(arr, CpuBackend())
    assert (reader.layout.shard_shape is not None) == sharded
    for region in REGIONS:
        np.testing.assert_array_equal(reader.read(region), data[region])
