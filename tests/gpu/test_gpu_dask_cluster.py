"""Reads and writes on a dask-cuda ``LocalCUDACluster`` of one GPU worker.

Blocks are cupy arrays on the worker's GPU; the worker opens its own backend on its
current device, with the settings of the process that made the graph.
"""

from __future__ import annotations

import os

import numcodecs
import numpy as np
import pytest
import zarr

import linumpy_gpu as lg

pytestmark = pytest.mark.gpu


def volume(shape=(40, 70, 90), seed=0):
    rng = np.random.default_rng(seed)
    return (rng.integers(0, 4000, size=shape) + np.arange(shape[-1])).astype("u2")


@pytest.fixture(scope="module")
def cp():
    import cupy

    return cupy


@pytest.fixture(scope="module")
def client():
    dask_cuda = pytest.importorskip("dask_cuda", reason="dask-cuda is not installed")
    distributed = pytest.importorskip("distributed")
    with (
        dask_cuda.LocalCUDACluster(
            n_workers=1, threads_per_worker=1, dashboard_address=None
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        yield client


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    root = tmp_path_factory.mktemp("gpu-cluster-stores")
    data = volume()
    lg.write_ome_zarr(root / "plain.zarr", data, chunks=(8, 16, 32), levels=2, device="cpu")
    lg.write_ome_zarr(
        root / "sharded.zarr", data, chunks=(8, 16, 16), shards=(16, 32, 64), device="cpu"
    )
    group = zarr.open_group(root / "blosc.zarr", mode="w", zarr_format=2)
    arr = group.create_array(
        "0",
        shape=data.shape,
        dtype=data.dtype,
        chunks=(8, 32, 32),
        compressors=numcodecs.Blosc(cname="zstd", clevel=5, shuffle=numcodecs.Blosc.BITSHUFFLE),
        chunk_key_encoding={"name": "v2", "separator": "/"},
        fill_value=0,
    )
    arr[...] = data
    group.attrs["multiscales"] = [
        {
            "version": "0.4",
            "axes": [{"name": n, "type": "space"} for n in "zyx"],
            "datasets": [
                {"path": "0", "coordinateTransformations": [{"type": "scale", "scale": [1.0] * 3}]}
            ],
        }
    ]
    return data, {k: root / f"{k}.zarr" for k in ("plain", "sharded", "blosc")}


@pytest.mark.parametrize("kind", ["plain", "sharded", "blosc"])
def test_full_level_read_lands_on_the_worker_gpu(client, stores, cp, kind):
    data, paths = stores
    img = lg.open_ome_zarr(paths[kind], device="gpu")
    d = img.to_dask(0)
    assert isinstance(d._meta, cp.ndarray)
    blocks = d.persist()
    import dask

    def _where(block):  # defined here: pickled by value, the worker need not import tests
        import cupy

        return type(block).__module__.split(".")[0], cupy.cuda.Device().id, os.getpid()

    kinds = dask.compute(*[dask.delayed(_where)(b) for b in blocks.to_delayed().ravel()])
    assert {k[0] for k in kinds} == {"cupy"}
    assert {k[2] for k in kinds} != {os.getpid()}  # computed in the worker, not here
    got = blocks.compute()
    assert isinstance(got, cp.ndarray)
    np.testing.assert_array_equal(got.get(), data)


@pytest.mark.parametrize("kind", ["plain", "sharded", "blosc"])
def test_region_reads_on_the_gpu_cluster(client, stores, cp, kind):
    data, paths = stores
    d = lg.open_ome_zarr(paths[kind], device="gpu").to_dask(0, chunks="auto")
    np.testing.assert_array_equal(d[5:33, ::3, 7:61].compute().get(), data[5:33, ::3, 7:61])
    assert float(d.astype("f8").sum().compute()) == float(data.astype("f8").sum())


def test_settings_travel_to_the_gpu_worker(client, stores):
    from linumpy_gpu.image.dask import clear_worker_cache, worker_cache_info

    data, paths = stores
    img = lg.open_ome_zarr(paths["sharded"], device="gpu")
    client.run(clear_worker_cache)
    with lg.config.set(host_threads=0, scratch_floor=1 << 28):
        d = img.to_dask(0)
    np.testing.assert_array_equal(d.compute().get(), data)
    seen = [e for v in client.run(worker_cache_info).values() for e in v if e["what"] == "reader"]
    assert seen and all(e["device"].startswith("cuda:") for e in seen)
    assert all(e["settings"]["host_threads"] == 0 for e in seen)
    assert all(e["settings"]["scratch_floor"] == 1 << 28 for e in seen)


@pytest.mark.parametrize("shards", [None, (16, 32, 64)], ids=["unsharded", "sharded"])
def test_write_from_the_gpu_cluster_equals_a_local_write(client, tmp_path, cp, shards):
    import dask.array as da

    data = volume(seed=3)
    kwargs = dict(chunks=(8, 16, 32), shards=shards, levels=3)
    local = lg.write_ome_zarr(tmp_path / "local.zarr", cp.asarray(data), **kwargs)
    unit = shards or (8, 16, 32)
    lazy = da.from_array(data, chunks=tuple(2 * u for u in unit)).map_blocks(
        cp.asarray, meta=cp.empty((0, 0, 0), dtype="u2")
    )
    img = lg.write_ome_zarr(tmp_path / "cluster.zarr", lazy, **kwargs)
    assert img.device.startswith("cuda:")
    for i in range(3):
        np.testing.assert_array_equal(img[i][...].get(), local[i][...].get())


def test_read_filter_write_pipeline_on_the_gpu_cluster(client, stores, tmp_path, cp):
    from cupyx.scipy import ndimage

    data, paths = stores
    lazy = lg.open_ome_zarr(paths["sharded"], device="gpu").to_dask(0)
    smoothed = lazy.map_overlap(
        lambda b: ndimage.gaussian_filter(b, 1.0, mode="nearest"),
        depth=4,
        boundary="nearest",
        dtype=lazy.dtype,
    )
    img = lg.write_ome_zarr(
        tmp_path / "s.zarr", smoothed, chunks=(8, 16, 16), shards=(16, 32, 64), levels=2
    )
    expected = ndimage.gaussian_filter(cp.asarray(data), 1.0, mode="nearest").get()
    got = img[0][...].get()
    assert np.abs(got.astype(np.int32) - expected.astype(np.int32)).max() <= 1
