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
