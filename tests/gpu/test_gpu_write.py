"""Writing from cupy: GPU pyramid and nvCOMP chunks, read back by every reader."""

from __future__ import annotations

import numcodecs
import numpy as np
import pytest
import zarr

import linumpy_gpu as lg

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def cp():
    import cupy

    return cupy


@pytest.mark.parametrize(
    ("version", "shards"), [("0.5", None), ("0.5", (16, 64, 64)), ("0.4", None)]
)
def test_cupy_write_equals_cpu_write(tmp_path, cp, version, shards):
    data = (np.arange(40 * 100 * 90) % 5000).astype("u2").reshape(40, 100, 90)
    gimg = lg.write_ome_zarr(
        tmp_path / "g.zarr",
        cp.asarray(data),
        axes="zyx",
        chunks=(8, 32, 32),
        shards=shards,
        levels=3,
        version=version,
    )
    cimg = lg.write_ome_zarr(
        tmp_path / "c.zarr",
        data,
        axes="zyx",
        chunks=(8, 32, 32),
        shards=shards,
        levels=3,
        version=version,
        device="cpu",
    )
    assert gimg.device.startswith("cuda") and cimg.device == "cpu"
    for i in range(3):
        g = zarr.open_array(str(tmp_path / "g.zarr" / str(i)), mode="r")[...]
        c = zarr.open_array(str(tmp_path / "c.zarr" / str(i)), mode="r")[...]
        np.testing.assert_array_equal(g, c)
        np.testing.assert_array_equal(gimg[i][...].get(), c)
    # frames written by nvCOMP carry the checksum and decode with the CPU zstd
    chunk = next(
        p
        for p in (tmp_path / "g.zarr" / "0").rglob("*")
        if p.is_file() and "zarr" not in p.name and not p.name.startswith(".")
    )
    if shards is None:
        raw = chunk.read_bytes()
        assert raw[4] & 0x04
        assert len(numcodecs.Zstd().decode(raw)) == 8 * 32 * 32 * 2


def test_gpu_labels_and_region_writes(tmp_path, cp):
    data = cp.asarray((np.arange(16 * 64 * 64) % 300).astype("u2").reshape(16, 64, 64))
    lg.write_ome_zarr(tmp_path / "i.zarr", data, axes="zyx", chunks=(8, 32, 32), levels=2)
    seg = (data % 4).astype("u4")
    lab = lg.write_labels(tmp_path / "i.zarr", "cells", seg, colors={1: (255, 0, 0, 255)})
    np.testing.assert_array_equal(lab[0][...].get(), seg.get())
    img = lg.open_ome_zarr(tmp_path / "i.zarr", device="gpu", mode="r+")
    img[0][2:10, 5:40, :] = cp.full((8, 35, 64), 7, dtype="u2")
    img.update_pyramid((slice(2, 10), slice(5, 40)))
    expected = data.get()
    expected[2:10, 5:40, :] = 7
    np.testing.assert_array_equal(zarr.open_array(str(tmp_path / "i.zarr" / "0"))[...], expected)
    from linumpy_gpu.engine.pyramid import downsample

    np.testing.assert_array_equal(
        zarr.open_array(str(tmp_path / "i.zarr" / "1"))[...],
        downsample(expected, (2, 2, 2), "mean"),
    )


@pytest.mark.parametrize("dtype", ["u2", "i4", "u4", "i8", "u8", "f2", "f4", "f8"])
@pytest.mark.parametrize("shape", [(8, 12, 16), (9, 7, 5)])
@pytest.mark.parametrize("method", ["mean", "gaussian"])
def test_gpu_downsampling_equals_the_cpu_one_at_the_ends_of_the_range(cp, dtype, shape, method):
    """The pyramid reduction is written once for numpy and cupy: the same values on both
    for means of integers and of 16- and 32-bit floats (summed in float64), also at the
    ends of their range; float64 means and the Gaussian filter's float sums may round
    differently (summation order), within a few units in the last place of the largest
    term; neither overflows."""
    from linumpy_gpu.engine.pyramid import downsample

    rng = np.random.default_rng(5)
    if np.dtype(dtype).kind == "f":
        a = (rng.random(shape) * np.finfo(dtype).max * 0.9).astype(dtype)
    else:
        info = np.iinfo(dtype)
        a = rng.integers(info.min, info.max, size=shape, endpoint=True, dtype=dtype)
        a[:2, :2, :2] = info.max
    expected = downsample(a, (2, 2, 2), method)
    got = downsample(cp.asarray(a), (2, 2, 2), method)
    assert got.dtype == expected.dtype
    assert bool(np.isfinite(expected).all()) and bool(cp.isfinite(got).all())
    if method == "mean" and dtype != "f8":
        np.testing.assert_array_equal(got.get(), expected)
    elif method == "mean":
        np.testing.assert_allclose(got.get(), expected, rtol=4 * np.finfo("f8").eps)
    else:  # float sums rounded, then (integers) rounded to the nearest integer
        # A weighted sum's rounding error scales with its terms, not with its result: terms
        # near the ends of the range that cancel leave a small value with the terms' error.
        tolerance = np.finfo(np.float32 if np.dtype(dtype).itemsize <= 4 else np.float64).eps
        largest_term = float(np.abs(a.astype("f8")).max())
        np.testing.assert_allclose(
            got.get().astype("f8"),
            expected.astype("f8"),
            rtol=8 * tolerance,
            atol=max(1.0, 8 * tolerance * largest_term),
        )


@pytest.mark.parametrize("method", ["mean", "gaussian"])
@pytest.mark.parametrize("factor", [2, 4])
def test_float64_levels_of_extreme_values_are_finite_on_both(cp, method, factor):
    """Near the largest float64, sums overflow to inf, and +inf meets -inf as NaN, in
    whatever order each device sums: every level value comes out finite on both."""
    from linumpy_gpu.engine.pyramid import downsample

    big = np.finfo("f8").max
    alternating = np.full((8, 8, 8), big)
    alternating[::2] = -big
    for a in (alternating, np.full((8, 8, 8), big)):
        expected = downsample(a, (factor,) * 3, method)
        got = downsample(cp.asarray(a), (factor,) * 3, method).get()
        assert np.isfinite(expected).all() and np.isfinite(got).all()
        np.testing.assert_allclose(got, expected, rtol=1e-12, atol=big * 1e-12)


def test_the_float_range_check_of_a_write_holds_no_copy_of_the_block(cp):
    """A float64 block written into float32 is checked against float32's range without a
    block-sized copy on the device."""
    from linumpy_gpu.engine.writer import check_castable

    pool = cp.get_default_memory_pool()
    block = cp.ones((128, 256, 256), dtype=cp.float64)
    pool.free_all_blocks()
    pool.set_limit(size=pool.used_bytes() + block.nbytes // 2)
    try:
        check_castable(block, np.dtype("f4"), "x")
    finally:
        pool.set_limit(size=0)


def test_spans_land_in_pinned_arenas_and_spill_past_the_cap(cp):
    """Device spans come back byte for byte, each with writable room after it: those that
    fit the ring in its pinned arenas (given back on release), the rest in ordinary memory."""
    from linumpy_gpu.gpu.staging import StagingPool, download_spans

    rng = np.random.default_rng(3)
    sizes = np.array([300_000, 5, 0, 700_000, 1_000_003, 123_457], dtype=np.int64)
    parts = [rng.integers(0, 256, int(s), dtype=np.uint8) for s in sizes]
    device = [cp.asarray(p) for p in parts]
    addresses = np.array([d.data.ptr for d in device], dtype=np.uint64)
    pool = StagingPool(cap=1 << 20, arena_bytes=1 << 20)  # room for some spans, not all
    stream = cp.cuda.Stream(non_blocking=True)
    views, staged = download_spans(addresses, sizes, stream, pool, room=4)
    assert staged is not None and staged.arenas, "nothing landed in the ring"
    assert pool._allocated <= 1 << 20
    for view, part in zip(views, parts, strict=True):
        assert len(view) == part.size + 4
        assert bytes(view[: part.size]) == part.tobytes()
        view[part.size :] = b"room"  # the room is writable
    staged.release()
    assert sum(a.size for a in pool._free) == pool._allocated  # every arena given back


def test_a_failed_landing_gives_the_arenas_back(cp, monkeypatch):
    """A copy that fails midway (here the packing kernel) leaves no arena of the ring held:
    later reads and writes would otherwise wait for arenas that never come back."""
    from linumpy_gpu.gpu import kernels
    from linumpy_gpu.gpu.staging import StagingPool, download_spans

    def broken(name):
        def launch(*args):
            raise RuntimeError(f"{name} failed")

        return launch

    monkeypatch.setattr(kernels, "kernel", broken)
    device = cp.arange(1 << 16, dtype=cp.uint8)
    pool = StagingPool(cap=4 << 20, arena_bytes=1 << 20)
    with pytest.raises(RuntimeError, match="copy_spans failed"):
        download_spans(
            np.array([device.data.ptr], dtype=np.uint64),
            np.array([device.size]),
            cp.cuda.Stream(non_blocking=True),
            pool,
        )
    assert pool._allocated > 0 and sum(a.size for a in pool._free) == pool._allocated


@pytest.mark.parametrize("compressor", [None, "zstd"])
def test_gpu_writes_larger_than_the_staging_ring_read_back(tmp_path, cp, compressor):
    """A write whose stored bytes exceed the pinned ring lands the rest in ordinary memory
    and still writes every chunk whole (raw chunks and checksummed zstd frames)."""
    data = (np.arange(64 * 128 * 128) * 7 % 65521).astype("u2").reshape(64, 128, 128)
    with lg.config.set(pinned_bytes=1 << 20):
        lg.write_ome_zarr(
            tmp_path / "w.zarr",
            cp.asarray(data),
            axes="zyx",
            chunks=(16, 64, 64),
            levels=1,
            compressor=compressor,
            checksum=True,
        )
    np.testing.assert_array_equal(zarr.open_array(tmp_path / "w.zarr" / "0", mode="r")[...], data)
