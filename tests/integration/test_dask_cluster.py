"""Reads and writes on a ``dask.distributed`` cluster of worker processes (CPU).

Two worker processes of one thread each: every task crosses a process boundary, so the
read tasks must pickle, workers open stores themselves, settings travel in the tasks, and
a write survives a worker killed in the middle of it.
"""

from __future__ import annotations

import os
import pickle
import signal
import threading
import warnings

import numcodecs
import numpy as np
import pytest
import zarr

import linumpy_gpu as lg

distributed = pytest.importorskip(
    "distributed", reason="dask.distributed is not installed (pip install distributed)"
)
da = pytest.importorskip("dask.array")


def volume(shape=(40, 70, 90), seed=0):
    rng = np.random.default_rng(seed)
    return (rng.integers(0, 4000, size=shape) + np.arange(shape[-1])).astype("u2")


@pytest.fixture(scope="module")
def client():
    with (
        distributed.LocalCluster(
            n_workers=2,
            processes=True,
            threads_per_worker=1,
            dashboard_address=None,
            worker_dashboard_address=None,
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        yield client


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    """level 0 of each kind of store, and where it is."""
    root = tmp_path_factory.mktemp("cluster-stores")
    data = volume()
    lg.write_ome_zarr(root / "plain.zarr", data, chunks=(8, 16, 32), levels=2, device="cpu")
    lg.write_ome_zarr(
        root / "sharded.zarr",
        data,
        chunks=(8, 16, 16),
        shards=(16, 32, 64),
        levels=2,
        device="cpu",
    )
    # zarr v2, Blosc, written by zarr-python (read on the CPU through numcodecs)
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
    axes = [{"name": n, "type": "space"} for n in "zyx"]
    group.attrs["multiscales"] = [
        {
            "version": "0.4",
            "axes": axes,
            "datasets": [
                {"path": "0", "coordinateTransformations": [{"type": "scale", "scale": [1.0] * 3}]}
            ],
        }
    ]
    return data, {k: root / f"{k}.zarr" for k in ("plain", "sharded", "blosc")}


STORE_KINDS = ["plain", "sharded", "blosc"]


# -- reads ----------------------------------------------------------------------------------


def test_read_tasks_pickle_without_the_level(stores):
    data, paths = stores
    img = lg.open_ome_zarr(paths["sharded"])
    d = img.to_dask(0)
    graph = dict(d.__dask_graph__())
    blob = pickle.dumps(graph)
    assert len(blob) < 4096 * len(graph)  # a store path, a region, settings: no arrays
    assert b"ChunkedArrayReader" not in blob and b"Level" not in blob
    # in this process the same graph reads through the level's own reader, as before
    np.testing.assert_array_equal(d.compute(scheduler="threads"), data)


@pytest.mark.parametrize("kind", STORE_KINDS)
def test_full_level_read_on_the_cluster(client, stores, kind):
    data, paths = stores
    img = lg.open_ome_zarr(paths[kind])
    d = img.to_dask(0)
    assert d.chunksize == (img[0].shards or img[0].chunks)
    got = client.compute(d).result()
    assert isinstance(got, np.ndarray)
    np.testing.assert_array_equal(got, data)
    np.testing.assert_array_equal(d.compute(), data)  # the default client


@pytest.mark.parametrize("kind", STORE_KINDS)
def test_region_reads_on_the_cluster(client, stores, kind):
    data, paths = stores
    img = lg.open_ome_zarr(paths[kind])
    d = img.to_dask(0)
    np.testing.assert_array_equal(d[5:33, ::3, 7:61].compute(), data[5:33, ::3, 7:61])
    np.testing.assert_array_equal(d[17].compute(), data[17])
    assert float(d.mean().compute()) == pytest.approx(float(data.mean()))
    if len(img) > 1:
        np.testing.assert_array_equal(img.to_dask(1).compute(), img[1][...])


def test_grouped_blocks_are_whole_storage_units(client, stores):
    data, paths = stores
    level = lg.open_ome_zarr(paths["plain"])[0]
    d = level.to_dask(chunks="64KiB")
    for size, unit, n in zip(d.chunksize, level.chunks, level.shape, strict=True):
        assert size % unit == 0 or size == n
    assert d.npartitions < level.to_dask().npartitions
    np.testing.assert_array_equal(d.compute(), data)
    auto = level.to_dask(chunks="auto")  # dask's array.chunk-size: this level is one block
    assert auto.npartitions == 1
    with pytest.raises(lg.InvalidArgumentError, match="chunks"):
        level.to_dask(chunks="lots")


def test_workers_open_each_store_once(client, stores):
    from linumpy_gpu.image.dask import clear_worker_cache, worker_cache_info

    client.run(clear_worker_cache)
    data, paths = stores
    d = lg.open_ome_zarr(paths["plain"]).to_dask(0)
    assert d.npartitions > 8
    for _ in range(2):
        np.testing.assert_array_equal(d.compute(), data)
    for entries in client.run(worker_cache_info).values():
        readers = [e for e in entries if e["what"] == "reader"]
        assert len(readers) <= 1  # one reader per process, whatever the number of tasks
        assert all(r["where"].endswith("plain.zarr/0") for r in readers)


def test_settings_travel_to_the_workers(client, stores):
    from linumpy_gpu.image.dask import clear_worker_cache, worker_cache_info

    data, paths = stores
    img = lg.open_ome_zarr(paths["sharded"])
    client.run(clear_worker_cache)
    with lg.config.set(io_threads=3, read_ahead_bytes=1 << 20):
        changed = img.to_dask(0)
    plain = img.to_dask(0)
    np.testing.assert_array_equal(changed.compute(), data)  # computed outside the block
    seen = [e for v in client.run(worker_cache_info).values() for e in v if e["what"] == "reader"]
    assert seen and all(e["settings"]["io_threads"] == 3 for e in seen)
    assert all(e["settings"]["read_ahead_bytes"] == 1 << 20 for e in seen)

    client.run(clear_worker_cache)
    np.testing.assert_array_equal(plain.compute(), data)
    seen = [e for v in client.run(worker_cache_info).values() for e in v if e["what"] == "reader"]
    assert seen and all(e["settings"]["io_threads"] == lg.config.get().io_threads for e in seen)

    # settings the image was opened with travel too
    opened = lg.open_ome_zarr(paths["sharded"], settings={"io_threads": 5})
    client.run(clear_worker_cache)
    np.testing.assert_array_equal(opened.to_dask(0).compute(), data)
    seen = [e for v in client.run(worker_cache_info).values() for e in v if e["what"] == "reader"]
    assert seen and all(e["settings"]["io_threads"] == 5 for e in seen)


def test_a_store_replaced_at_the_same_path_is_read_afresh(client, tmp_path):
    """Workers keep stores open between graphs; one replaced at the same path (and opened
    again here) is read anew, and the old image refuses, as it does without a cluster."""
    from linumpy_gpu.image.dask import clear_worker_cache

    path = tmp_path / "again.zarr"
    first, second = volume(seed=11), volume((24, 50, 60), seed=12)
    lg.write_ome_zarr(path, first, chunks=(8, 16, 32), device="cpu")
    old = lg.open_ome_zarr(path)
    np.testing.assert_array_equal(old.to_dask(0).compute(), first)
    lg.write_ome_zarr(path, second, chunks=(8, 16, 32), device="cpu", overwrite=True)
    np.testing.assert_array_equal(lg.open_ome_zarr(path).to_dask(0).compute(), second)
    with pytest.raises(lg.StoreError, match="replaced"):
        old.to_dask(0).compute()
    client.run(clear_worker_cache)  # workers that never saw the old store refuse it too
    with pytest.raises(lg.StoreError, match="replaced"):
        old.to_dask(0).compute()


def test_errors_on_workers_arrive_as_our_errors(client, tmp_path):
    """A worker's error whose cause is a library's exception (zarr's cannot be rebuilt
    where it is unpickled) still arrives as our typed error, the cause kept as text."""
    import shutil

    path = tmp_path / "gone.zarr"
    lg.write_ome_zarr(path, volume(), chunks=(8, 16, 32), levels=2, device="cpu")
    lazy = lg.open_ome_zarr(path)[1].to_dask()
    shutil.rmtree(path / "1")
    with pytest.raises(lg.StoreNotFoundError) as info:
        lazy.compute()
    assert any("ArrayNotFoundError" in note for note in getattr(info.value, "__notes__", []))


# -- writes ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("version", "shards"),
    [("0.5", None), ("0.5", (16, 32, 64)), ("0.4", None)],
    ids=["unsharded", "sharded", "zarr-v2"],
)
@pytest.mark.parametrize("method", ["mean", "gaussian"])
def test_write_from_the_cluster_equals_a_local_write(client, tmp_path, version, shards, method):
    from linumpy_gpu.image.dask import clear_worker_cache, worker_cache_info

    data = volume(seed=3)
    kwargs = dict(
        chunks=(8, 16, 32), shards=shards, levels=3, method=method, version=version, device="cpu"
    )
    local = lg.write_ome_zarr(tmp_path / "local.zarr", data, **kwargs)
    client.run(clear_worker_cache)
    unit = shards or (8, 16, 32)
    lazy = da.from_array(data, chunks=tuple(2 * u for u in unit))  # aligned: no rechunk
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        img = lg.write_ome_zarr(tmp_path / "cluster.zarr", lazy, **kwargs)
    assert len(img) == 3
    for i in range(3):
        assert img[i].shape == local[i].shape and img[i].shards == local[i].shards
        np.testing.assert_array_equal(img[i][...], local[i][...])
    assert img.meta == lg.open_ome_zarr(tmp_path / "local.zarr").meta
    # the workers wrote (they opened the arrays writable), into the folder built beside
    wrote = [e for v in client.run(worker_cache_info).values() for e in v if e.get("writable")]
    assert wrote and all(".linumpy-gpu-partial/" in e["where"] for e in wrote)
    assert sorted(os.listdir(tmp_path)) == ["cluster.zarr", "local.zarr"]


def test_write_rechunks_unaligned_arrays_with_a_warning(client, tmp_path):
    from dask.array.core import PerformanceWarning

    data = volume(seed=4)
    lazy = da.from_array(data, chunks=(10, 35, 45))
    with pytest.warns(PerformanceWarning, match="rechunking"):
        img = lg.write_ome_zarr(
            tmp_path / "a.zarr", lazy, chunks=(8, 16, 32), shards=(16, 32, 64), device="cpu"
        )
    np.testing.assert_array_equal(img[0][...], data)


def test_write_of_a_cluster_computation(client, tmp_path, stores):
    """The lazy pipeline of a user: read on the workers, compute, write on the workers."""
    data, paths = stores
    lazy = lg.open_ome_zarr(paths["sharded"]).to_dask(0)
    img = lg.write_ome_zarr(
        tmp_path / "twice.zarr", lazy * 2, chunks=(8, 16, 16), shards=(16, 32, 64), levels=2
    )
    np.testing.assert_array_equal(img[0][...], data * 2)


def test_write_to_a_store_workers_cannot_reach_is_written_here(client):
    data = volume(seed=6)
    img = lg.write_ome_zarr(
        "memory://cluster-test/a.zarr", da.from_array(data, chunks=(16, 32, 32)), levels=2
    )
    np.testing.assert_array_equal(img[0][...], data)


def test_object_store_reads_and_writes_on_the_cluster(client):
    """An S3 URL with storage_options: workers open it themselves, for reads and writes."""
    for module in ("moto", "s3fs", "aiohttp"):
        pytest.importorskip(module, reason=f"{module} is not installed")
    import s3fs

    from linumpy_gpu.image.dask import clear_worker_cache, worker_cache_info
    from tests.helpers.servers import moto_s3_server

    client.run(clear_worker_cache)
    data = volume(seed=9)
    with moto_s3_server() as server:
        options = server.storage_options
        s3fs.S3FileSystem(skip_instance_cache=True, **options).mkdir("cluster")
        lazy = da.from_array(data, chunks=(16, 32, 64))
        img = lg.write_ome_zarr(
            "s3://cluster/a.zarr",
            lazy,
            chunks=(8, 16, 32),
            shards=(16, 32, 64),
            levels=2,
            device="cpu",
            storage_options=options,
        )
        np.testing.assert_array_equal(img[0][...], data)
        opened = [e for v in client.run(worker_cache_info).values() for e in v]
        assert any(e.get("writable") and e["where"].startswith("s3://") for e in opened)
        back = lg.open_ome_zarr("s3://cluster/a.zarr", storage_options=options)
        d = back.to_dask(0)
        np.testing.assert_array_equal(d.compute(), data)
        np.testing.assert_array_equal(back.to_dask(1).compute(), back[1][...])
        local = lg.write_ome_zarr(
            "memory://cluster-ref.zarr", data, chunks=(8, 16, 32), levels=2, device="cpu"
        )
        np.testing.assert_array_equal(back[1][...], local[1][...])


def test_units_larger_than_worker_memory_are_refused():
    from linumpy_gpu.write.dask import _check_unit_memory

    class Small:
        def scheduler_info(self, n_workers=0):
            return {"workers": {"a": {"memory_limit": 1 << 30}, "b": {"memory_limit": 0}}}

    _check_unit_memory(Small(), (64, 64, 64), 2, "x.zarr")  # 0.5 MiB: fine
    with pytest.raises(lg.WriteError, match="memory limit"):
        _check_unit_memory(Small(), (512, 1024, 1024), 2, "x.zarr")


def test_a_worker_killed_mid_write_leaves_a_valid_store(client, tmp_path):
    """Each worker process dies (SIGKILL) after its second unit file of the write; dask
    retries the lost tasks on the restarted workers. Afterwards the destination is whole:
    the new image if the write completed, else the old one with a typed error."""
    old, new = volume(seed=7), volume(seed=8)
    target = tmp_path / "img.zarr"
    kwargs = dict(chunks=(8, 16, 16), levels=3, device="cpu")
    lg.write_ome_zarr(target, old, **kwargs)
    marker = tmp_path / "killed"

    def arm(marker=str(marker)):
        from linumpy_gpu.io.files import OpenFolder

        original = OpenFolder.write
        calls = []
        lock = threading.Lock()

        def dying(folder, name, data):
            path = f"{folder.path}/{name}"
            with lock:  # unit files are written from a thread pool: count each call once
                calls.append(path)
                n = len(calls)
            original(folder, name, data)
            if n == 2:
                with open(f"{marker}-{os.getpid()}", "w") as f:
                    f.write(path)
                os.kill(os.getpid(), signal.SIGKILL)

        OpenFolder._original_write = original
        OpenFolder.write = dying

    def disarm():
        from linumpy_gpu.io.files import OpenFolder

        original = getattr(OpenFolder, "_original_write", None)
        if original is not None:
            OpenFolder.write = original

    client.run(arm)
    try:
        lazy = da.from_array(new, chunks=(8, 70, 90))  # 5 tasks of 20 chunk files each
        try:
            img = lg.write_ome_zarr(target, lazy, overwrite=True, **kwargs)
            completed = True
        except lg.LinumpyGpuError:
            completed = False
    finally:
        client.run(disarm)
        client.wait_for_workers(2)
    killed = [p for p in os.listdir(tmp_path) if p.startswith("killed-")]
    assert killed  # at least one worker really died in the middle of the write
    expected = new if completed else old
    img = lg.open_ome_zarr(target)
    np.testing.assert_array_equal(img[0][...], expected)
    ref = lg.write_ome_zarr(tmp_path / "ref.zarr", expected, **kwargs)
    for i in range(1, 3):
        np.testing.assert_array_equal(img[i][...], ref[i][...])
    leftovers = [
        name for _, _, files in os.walk(target) for name in files if name.endswith(".partial")
    ]
    assert leftovers == []
    assert not [p for p in os.listdir(tmp_path) if p.endswith("linumpy-gpu-partial")]
    print(f"killed worker: write {'completed after retries' if completed else 'failed, typed'}")
