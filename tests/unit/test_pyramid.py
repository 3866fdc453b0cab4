"""Downsampling for pyramids: means over partial edge blocks, the mode for labels; the\nstorage units a pyramid update writes, counted ahead for its progress bar."""

from __future__ import annotations

import numpy as np
import pytest
import zarr

from linumpy_gpu.backends import CpuBackend
from linumpy_gpu.engine.pyramid import (
    downsample,
    pyramid_factors,
    units_updated,
    update_level,
    write_coarser_levels,
)
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


@pytest.mark.parametrize("dtype", ["u1", "i1", "u2", "i2"])
@pytest.mark.parametrize("factors", [(2, 2, 2), (1, 2, 2), (4, 1, 2), (1, 1, 1)])
def test_integer_mean_is_the_rounded_float_mean(dtype, factors):
    """8- and 16-bit means come from integer sums: the same values as the float32 mean
    rounded half to even, including exact halves and the ends of the type's range."""
    info = np.iinfo(dtype)
    rng = np.random.default_rng(1)
    a = rng.integers(info.min, info.max, size=(8, 12, 16), endpoint=True).astype(dtype)
    a[0, :2, :2] = info.max
    a[1, :2, :2] = info.min
    a[2, 0, :2] = [1, 2]  # a block whose mean ends in exactly one half
    expected = np.rint(
        a.reshape(
            8 // factors[0], factors[0], 12 // factors[1], factors[1], 16 // factors[2], factors[2]
        )
        .astype("f4")
        .mean(axis=(1, 3, 5))
    ).astype(dtype)
    got = downsample(a, factors, "mean")
    assert got.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(got, expected)


def _exact_block_means(a: np.ndarray, factors: tuple[int, ...]) -> np.ndarray:
    """Block means in Python integers, rounded half to even (the reference)."""
    out_shape = tuple(-(-n // f) for n, f in zip(a.shape, factors, strict=True))
    out = np.empty(out_shape, dtype=a.dtype)
    for index in np.ndindex(*out_shape):
        block = a[tuple(slice(i * f, (i + 1) * f) for i, f in zip(index, factors, strict=True))]
        total, count = sum(int(v) for v in block.flat), block.size
        quotient, rest = divmod(total, count)
        if 2 * rest > count or (2 * rest == count and quotient % 2):
            quotient += 1
        out[index] = quotient
    return out


@pytest.mark.parametrize("dtype", ["u1", "i2", "u4", "i4", "u8", "i8"])
@pytest.mark.parametrize("shape", [(4, 6, 8), (5, 7, 5)])
def test_integer_means_are_exact_at_the_ends_of_the_range(dtype, shape):
    """Blocks of the largest and smallest values keep them (no wrap to 0 or to the other
    end), values beyond 2**53 keep their low bits, and exact halves round to even, with
    whole and partial edge blocks."""
    info = np.iinfo(dtype)
    rng = np.random.default_rng(3)
    a = rng.integers(info.min, info.max, size=shape, endpoint=True, dtype=dtype)
    a[:2, :2, :2] = info.max
    a[2:4, :2, 2:4] = info.min
    a[:2, 2:4, :2] = info.max - 1
    a[2:4, 2:4, 2:4] = [[[info.max, info.max - 1], [info.max, info.max]]] * 2
    got = downsample(a, (2, 2, 2), "mean")
    assert got.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(got, _exact_block_means(a, (2, 2, 2)))
    assert got[0, 0, 0] == info.max and got[1, 0, 1] == info.min


@pytest.mark.parametrize("dtype", ["f2", "f4", "f8"])
@pytest.mark.parametrize("shape", [(4, 4), (5, 3)])
def test_float_means_near_the_largest_value_stay_finite(dtype, shape):
    """Sums of values near the dtype's largest overflow where their means do not: the
    means come out finite and equal the values; real infinities stay infinite."""
    big = np.finfo(dtype).max * 0.9
    a = np.full(shape, big, dtype=dtype)
    a[0, 0] = np.inf
    got = downsample(a, (2, 2), "mean")
    assert got.dtype == np.dtype(dtype)
    assert np.isinf(got[0, 0])
    np.testing.assert_array_equal(got.ravel()[1:], np.full(got.size - 1, a[1, 1]))


@pytest.mark.parametrize("dtype", ["f2", "f4", "f8"])
def test_gaussian_levels_near_the_largest_value_stay_finite(dtype):
    """The filter adds the two values at each distance before weighting them: near the
    dtype's largest value that sum overflows, but the level must not."""
    a = np.full((6, 8), np.finfo(dtype).max * 0.9, dtype=dtype)
    got = downsample(a, (2, 2), "gaussian")
    assert got.dtype == np.dtype(dtype)
    np.testing.assert_allclose(got.astype("f8"), a[::2, ::2].astype("f8"), rtol=1e-3)


@pytest.mark.parametrize("method", ["mean", "gaussian"])
def test_float64_levels_of_opposite_extremes_stay_finite(method):
    """Planes of +max and -max: partial sums overflow to +inf and -inf, which meet as
    NaN; every level value must still be the finite one (0 for the means)."""
    big = np.finfo("f8").max
    a = np.full((8, 8, 8), big)
    a[::2] = -big
    got = downsample(a, (2, 2, 2), method)
    assert np.isfinite(got).all()
    if method == "mean":
        np.testing.assert_array_equal(got, 0.0)


@pytest.mark.parametrize("factor", [2, 4])
def test_gaussian_of_the_largest_value_is_the_largest_value(factor):
    big = np.finfo("f8").max
    got = downsample(np.full((8, 8, 8), big), (factor,) * 3, "gaussian")
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, big, rtol=1e-12)


@pytest.mark.parametrize("dtype", ["f4", "f8"])
def test_gaussian_levels_keep_infinite_values_infinite(dtype):
    """Infinities smooth to infinities (as scipy's filter gives them), never to the
    largest finite value."""
    a = np.ones((16, 16), dtype=dtype)
    a[3, 5], a[10, 12] = np.inf, -np.inf
    got = downsample(a, (2, 2), "gaussian")
    assert np.isposinf(got).any() and np.isneginf(got).any()
    assert not np.isnan(got).any()
    assert np.abs(got[np.isfinite(got)]).max() < 2  # the ones, smoothed


def test_values_that_are_not_finite_stay_so():
    a = np.ones((4, 4))
    a[0, 0], a[2, 2] = np.nan, np.inf
    got = downsample(a, (2, 2), "mean")
    assert np.isnan(got[0, 0]) and np.isinf(got[1, 1]) and got[0, 1] == 1.0


def test_large_mean_downsample_in_slabs_equals_the_whole():
    """Inputs large enough to be reduced in slabs on several threads give the values the
    whole-array reduction gives."""
    rng = np.random.default_rng(2)
    a = rng.integers(0, 65535, size=(96, 256, 256), endpoint=True).astype("u2")
    expected = np.rint(a.reshape(48, 2, 128, 2, 128, 2).astype("f4").mean(axis=(1, 3, 5)))
    np.testing.assert_array_equal(downsample(a, (2, 2, 2), "mean"), expected.astype("u2"))


@pytest.mark.parametrize("factors", [(3,), (2, 3), (3, 4), (1, 3, 2)])
def test_mode_of_every_block_edge_blocks_included(factors):
    """Each block's most frequent value (ties: the smallest), edge blocks counting only the
    elements they have."""
    rng = np.random.default_rng(sum(factors))
    shape = tuple(f * 3 + 1 + i for i, f in enumerate(factors))
    a = rng.integers(0, 4, shape).astype("u2")
    got = downsample(a, factors, "mode")
    assert got.shape == tuple(-(-n // f) for n, f in zip(shape, factors, strict=True))
    for index in np.ndindex(*got.shape):
        block = a[tuple(slice(i * f, (i + 1) * f) for i, f in zip(index, factors, strict=True))]
        values, counts = np.unique(block, return_counts=True)
        assert got[index] == values[np.argmax(counts)], (index, block.ravel())
    np.testing.assert_array_equal(downsample(np.array([9, 9, 9, 3, 5], "u1"), (3,), "mode"), [9, 3])


def test_mode_of_float_blocks_holding_nan():
    """NaN is one value among others: counted with its equals, never taken for a number's
    mode, and the mode where it is the most frequent."""
    a = np.array([[5, 5, 1, 2, np.nan, np.nan], [5, np.nan, 1, 1, np.nan, 3]], "f4")
    got = downsample(a, (2, 2), "mode")
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got[0, :2], [5, 1])
    assert np.isnan(got[0, 2])


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


@pytest.mark.parametrize("slab_bytes", [512 << 20, 4 * 50 * 30])
def test_gaussian_levels_in_slabs_equal_the_whole_level(tmp_path, slab_bytes):
    """Slabs read the filter's reach beyond their edges: no seams where they meet."""
    source = zarr.create_array(tmp_path / "0", shape=(31, 50, 30), chunks=(8, 16, 16), dtype="u2")
    rng = np.random.default_rng(4)
    source[:] = rng.integers(0, 60000, size=source.shape, dtype="u2")
    coarse = zarr.create_array(tmp_path / "1", shape=(16, 25, 15), chunks=(6, 8, 8), dtype="u2")
    writer = ChunkedArrayWriter(coarse, CpuBackend(), locking=False)
    update_level(source, writer, (2, 2, 2), "gaussian", CpuBackend(), None, None, slab_bytes)
    np.testing.assert_array_equal(coarse[:], downsample(source[:], (2, 2, 2), "gaussian"))


def _level_writers(tmp_path, shapes, dtype, chunks):
    root = zarr.open_group(str(tmp_path / "levels.zarr"), mode="w")
    arrays = [
        root.create_array(
            str(i),
            shape=shape,
            dtype=dtype,
            chunks=tuple(min(c, n) for c, n in zip(chunks, shape, strict=True)),
        )
        for i, shape in enumerate(shapes)
    ]
    return arrays, [ChunkedArrayWriter(a, CpuBackend(), locking=False) for a in arrays]


@pytest.mark.parametrize("method", ["mean", "nearest", "mode"])
@pytest.mark.parametrize(
    ("shape", "chunks", "axis_types"),
    [
        ((37, 30, 21), (4, 8, 8), ("space",) * 3),  # odd everywhere
        ((3, 40, 18, 16), (1, 8, 8, 8), ("channel", "space", "space", "space")),
        ((64, 20), (8, 8), ("space", "space")),
    ],
)
def test_levels_written_piece_by_piece_equal_levels_reduced_whole(
    tmp_path, method, shape, chunks, axis_types
):
    data = np.random.default_rng(4).integers(0, 9 if method == "mode" else 60000, shape)
    data = data.astype("u2")
    factors = pyramid_factors(shape, axis_types, 4)
    whole = [data]
    for f in factors:
        whole.append(downsample(whole[-1], f, method))
    arrays, writers = _level_writers(tmp_path, [w.shape for w in whole], data.dtype, chunks)
    # a small flush size: many writes per level, each covering whole rows of chunks
    write_coarser_levels(data, writers[1:], factors, method, flush_bytes=1 << 10)
    for array, expected in zip(arrays[1:], whole[1:], strict=True):
        np.testing.assert_array_equal(array[...], expected)


def test_levels_written_piece_by_piece_hold_far_less_than_a_level(tmp_path):
    """The coarser levels of a deep volume are never held whole: the memory allocated
    above the input stays below the size of level 1 alone."""
    import tracemalloc

    shape = (512, 64, 64)
    data = np.random.default_rng(5).integers(0, 60000, shape).astype("u2")
    factors = pyramid_factors(shape, ("space",) * 3, 4)
    shapes = [shape]
    for f in factors:
        shapes.append(tuple(-(-n // k) for n, k in zip(shapes[-1], f, strict=True)))
    arrays, writers = _level_writers(tmp_path, shapes, data.dtype, (8, 32, 32))
    tracemalloc.start()
    try:
        write_coarser_levels(data, writers[1:], factors, "mean", flush_bytes=16 << 10)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    level1 = data.nbytes // 8
    assert peak < level1 // 2, f"{peak} B held, level 1 is {level1} B"
    np.testing.assert_array_equal(arrays[1][...], downsample(data, factors[0], "mean"))


def test_piece_by_piece_needs_a_block_local_method(tmp_path):
    from linumpy_gpu.errors import InvalidArgumentError

    with pytest.raises(InvalidArgumentError, match="gaussian"):
        write_coarser_levels(np.zeros((4, 4), "u2"), [], [(2, 2)], "gaussian", 1 << 20)


@pytest.mark.parametrize("dtype", [">f8", ">f4", ">i8", ">u2"])
@pytest.mark.parametrize("method", ["mean", "gaussian", "mode", "nearest"])
def test_big_endian_input_reduces_as_native(dtype, method):
    a = np.arange(8 * 8 * 8).reshape(8, 8, 8).astype(dtype)
    native = a.astype(np.dtype(dtype).newbyteorder("="))
    got = downsample(a, (2, 2, 2), method)
    np.testing.assert_array_equal(got, downsample(native, (2, 2, 2), method))
