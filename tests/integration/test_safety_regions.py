"""Region writes into existing levels: exact shapes, dtypes and bounds; writers that share a
chunk or shard take turns (threads and processes); a killed writer leaves every chunk old
or new; reads always see what is on disk when they start."""

from __future__ import annotations

import errno
import multiprocessing
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any

import numpy as np
import pytest
import zarr

import linumpy_gpu as lg
from tests.conftest import to_numpy
from tests.helpers.safety import small_store, snapshot, volume


@pytest.fixture(params=["chunks", "shards"])
def store(request, tmp_path):
    path = tmp_path / "regions.ome.zarr"
    kwargs = dict(levels=2)
    if request.param == "shards":
        kwargs.update(chunks=(4, 8, 8), shards=(8, 16, 16))
    small_store(path, **kwargs)
    return path


# -- shapes, dtypes, bounds ---------------------------------------------------------------

BAD_BLOCKS = {
    "same_size_other_shape": ((slice(0, 4), slice(0, 8), slice(0, 8)), np.zeros((8, 4, 8), "u2")),
    "transposed": ((slice(0, 4), slice(0, 8), slice(0, 6)), np.zeros((6, 8, 4), "u2")),
    "too_small": ((slice(0, 4), slice(0, 8), slice(0, 8)), np.zeros((4, 8, 7), "u2")),
    "extra_axis": ((slice(0, 4), slice(0, 8), slice(0, 8)), np.zeros((1, 4, 8, 8), "u2")),
    "dropped_axis_kept": ((2, slice(0, 8), slice(0, 8)), np.zeros((2, 8, 8), "u2")),
    "float_into_uint16": ((slice(0, 4),), np.full((4, 32, 32), 1.5)),
    "negative_into_uint16": ((slice(0, 4),), np.full((4, 32, 32), -1, dtype="i4")),
    "too_large_for_uint16": ((slice(0, 4),), np.full((4, 32, 32), 70000, dtype="i8")),
    "float_scalar": ((slice(0, 4),), 2.5),
    "huge_scalar": ((slice(0, 4),), 1 << 20),
    "complex": ((slice(0, 4),), np.zeros((4, 32, 32), "c8")),
}


@pytest.mark.parametrize("case", sorted(BAD_BLOCKS))
def test_bad_blocks_are_refused_and_the_store_is_unchanged(store, case):
    region, block = BAD_BLOCKS[case]
    img = lg.open_ome_zarr(store, mode="r+")
    before = snapshot(store)
    with pytest.raises(lg.WriteError):
        img[0][region] = block
    assert snapshot(store) == before


def test_float_values_beyond_a_narrower_float_level_are_refused(tmp_path):
    """float64 values that float32 cannot hold would be stored as infinities."""
    lg.write_ome_zarr(tmp_path / "f.zarr", np.zeros((4, 8, 8), "f4"), device="cpu")
    img = lg.open_ome_zarr(tmp_path / "f.zarr", mode="r+")
    with pytest.raises(lg.WriteError, match="float32"):
        img[0][0, 0, 0:2] = np.array([1e300, -1e40])
    img[0][0, 0, 0:3] = np.array([1.5, np.inf, np.nan])  # rounding and non-finite values stay
    got = img[0][0, 0, 0:3]
    assert got[0] == 1.5 and np.isinf(got[1]) and np.isnan(got[2])


def test_long_double_values_beyond_float64_are_refused(tmp_path):
    lg.write_ome_zarr(tmp_path / "d.zarr", np.zeros((4, 8, 8), "f8"), device="cpu")
    img = lg.open_ome_zarr(tmp_path / "d.zarr", mode="r+")
    big = np.array([np.longdouble(2) ** 2000, 1.0], dtype=np.longdouble)
    if np.isinf(big[0]):
        pytest.skip("this platform's long double is float64")
    with pytest.raises(lg.WriteError, match="float64"):
        img[0][0, 0, 0:2] = big
    img[0][0, 0, 0:2] = np.array([0.5, 2.0], dtype=np.longdouble)
    np.testing.assert_array_equal(img[0][0, 0, 0:2], [0.5, 2.0])


BAD_REGIONS = {
    "past_end": (slice(10, 20),),
    "start_past_end": (slice(17, 18),),
    "negative_past_start": (slice(-20, 4),),
    "second_axis_past_end": (slice(0, 4), slice(0, 40)),
    "integer_out_of_range": (16,),
    "step": (slice(0, 8, 2),),
    "reversed": (slice(None, None, -1),),
    "array_index": (np.array([0, 1]),),
    "too_many_axes": (0, 0, 0, 0),
}


@pytest.mark.parametrize("case", sorted(BAD_REGIONS))
def test_regions_outside_the_array_or_not_plain_are_refused(store, case):
    img = lg.open_ome_zarr(store, mode="r+")
    before = snapshot(store)
    with pytest.raises(lg.LinumpyGpuError) as info:
        img[0][BAD_REGIONS[case]] = 1
    assert isinstance(info.value, lg.SelectionError | lg.WriteError)
    assert snapshot(store) == before


def test_good_region_writes(store, device):
    img = lg.open_ome_zarr(store, mode="r+", device=device)
    expected = volume()
    img[0][1:5, 3:19, 2:30] = np.full((4, 16, 28), 9, "u2")
    expected[1:5, 3:19, 2:30] = 9
    img[0][7] = np.arange(32 * 32, dtype="i8").reshape(32, 32)  # int64 values that fit
    expected[7] = np.arange(32 * 32).reshape(32, 32)
    img[0][8:16, 16:32, 0:16] = 5  # a scalar fills the region
    expected[8:16, 16:32, 0:16] = 5
    img[0][-2:, -3:, :] = np.ones((2, 3, 32), "u1")  # a narrower dtype is safe
    expected[-2:, -3:, :] = 1
    np.testing.assert_array_equal(lg.open_ome_zarr(store)[0][...], expected)
    np.testing.assert_array_equal(to_numpy(img[0][...]), expected)  # the writing handle too


def test_read_only_handle_refuses_writes(store):
    img = lg.open_ome_zarr(store)
    with pytest.raises(lg.StorePermissionError, match="mode='r\\+'"):
        img[0][0:2] = 1


# -- reads reflect what is on disk --------------------------------------------------------


def test_update_pyramid_refuses_levels_made_by_a_method_it_does_not_compute(tmp_path):
    """ngff-zarr records 'itkwasm_gaussian': recomputing levels by another method would
    mix two pyramids under one description."""
    data = np.arange(8 * 16 * 16, dtype="u2").reshape(8, 16, 16)
    lg.write_ome_zarr(tmp_path / "g.zarr", data, levels=2, device="cpu")
    group = zarr.open_group(str(tmp_path / "g.zarr"), mode="r+")
    attrs = group.attrs.asdict()
    attrs["ome"]["multiscales"][0]["type"] = "itkwasm_gaussian"
    group.attrs.put(attrs)
    img = lg.open_ome_zarr(tmp_path / "g.zarr", mode="r+")
    before = img[1][...]
    img[0][0:2] = data[0:2] + 1
    for method in (None, "mean"):
        with pytest.raises(lg.InvalidArgumentError, match="itkwasm_gaussian"):
            img.update_pyramid((slice(0, 2),), method=method)
    np.testing.assert_array_equal(img[1][...], before)


def test_update_pyramid_refuses_before_changing_any_level_where_one_cannot_be_written(
    tmp_path,
):
    """Level 2 in gzip (another writer's): update_pyramid refuses before level 1 changes,
    so the pyramid is never left half updated."""
    group = zarr.open_group(str(tmp_path / "g.zarr"), mode="w", zarr_format=3)
    data = np.random.default_rng(0).integers(0, 4000, (8, 64, 64), dtype="u2")
    datasets = []
    level = data
    for i in range(3):
        codec = zarr.codecs.GzipCodec() if i == 2 else zarr.codecs.ZstdCodec()
        shift = (2.0**i - 1) / 2
        array = group.create_array(
            str(i), shape=level.shape, dtype="u2", chunks=(8, 16, 16), compressors=codec
        )
        array[...] = level
        datasets.append(
            {
                "path": str(i),
                "coordinateTransformations": [
                    {"type": "scale", "scale": [1.0, 2.0**i, 2.0**i]},
                    {"type": "translation", "translation": [0.0, shift, shift]},
                ],
            }
        )
        level = level[:, ::2, ::2]
    axes = [{"name": n, "type": "space"} for n in "zyx"]
    group.attrs["ome"] = {"version": "0.5", "multiscales": [{"axes": axes, "datasets": datasets}]}
    img = lg.open_ome_zarr(tmp_path / "g.zarr", mode="r+")
    img[0][:, 0:32, 0:32] = np.zeros((8, 32, 32), "u2")
    before = [img[1][...], img[2][...]]
    with pytest.raises(lg.UnsupportedWriteError, match="gzip"):
        img.update_pyramid((slice(None), slice(0, 32), slice(0, 32)))
    np.testing.assert_array_equal(img[1][...], before[0])
    np.testing.assert_array_equal(img[2][...], before[1])


def test_float_levels_updated_by_regions_equal_a_fresh_write(tmp_path):
    """float64 means of a level whose shape the factors do not divide: updated region by
    region, they round as the fresh write of the whole volume does, bit for bit."""
    data = np.random.default_rng(1).standard_normal((9, 8, 8)) * 300
    lg.write_ome_zarr(tmp_path / "u.zarr", np.zeros_like(data), levels=2, device="cpu")
    img = lg.open_ome_zarr(tmp_path / "u.zarr", mode="r+")
    for part in (slice(0, 4), slice(4, 9)):
        img[0][part] = data[part]
        img.update_pyramid((part,))
    fresh = lg.write_ome_zarr(tmp_path / "f.zarr", data, levels=2, device="cpu")
    np.testing.assert_array_equal(img[1][...], fresh[1][...])


def test_reads_after_region_writes_and_update_pyramid_see_the_new_data(store, device):
    img = lg.open_ome_zarr(store, mode="r+", device=device)
    reader = lg.open_ome_zarr(store, device=device)
    before1 = to_numpy(reader[1][...])  # fills every cache the reader has
    img[0][0:8] = np.full((8, 32, 32), 4000, "u2")
    expected = volume()
    expected[0:8] = 4000
    np.testing.assert_array_equal(to_numpy(reader[0][...]), expected)
    np.testing.assert_array_equal(to_numpy(img[0][...]), expected)
    img.update_pyramid((slice(0, 8),))
    level1 = to_numpy(reader[1][...])
    assert (level1[0:4] == 4000).all()
    np.testing.assert_array_equal(level1[4:], before1[4:])


def test_reads_see_a_shard_rewritten_by_another_process(store, device):
    reader = lg.open_ome_zarr(store, device=device)
    reader[0][...]
    script = (
        "import numpy as np, linumpy_gpu as lg\n"
        f"img = lg.open_ome_zarr({str(store)!r}, mode='r+')\n"
        "img[0][0:8, 0:16, 0:16] = np.full((8, 16, 16), 123, 'u2')\n"
    )
    subprocess.run([sys.executable, "-c", script], check=True)
    expected = volume()
    expected[0:8, 0:16, 0:16] = 123
    np.testing.assert_array_equal(to_numpy(reader[0][...]), expected)


def test_reads_see_a_store_rewritten_by_zarr_python_in_place(tmp_path):
    """zarr-python rewrites shards in place (not atomically): once it is done, our cached
    indexes must not be used."""
    import zarr

    path = tmp_path / "zp.ome.zarr"
    small_store(path, chunks=(4, 8, 8), shards=(8, 16, 16))
    reader = lg.open_ome_zarr(path)
    reader[0][...]
    arr = zarr.open_array(path / "0", mode="r+")
    changed = volume(seed=4)
    arr[...] = changed
    np.testing.assert_array_equal(reader[0][...], changed)


# -- concurrent writers -------------------------------------------------------------------


def _writer_process(path: str, region: tuple, value: int, repeat: int) -> None:
    img = lg.open_ome_zarr(path, mode="r+")
    shape = tuple(s.stop - s.start for s in region)
    for _ in range(repeat):
        img[0][region] = np.full(shape, value, "u2")


def _run_processes(path, regions, repeat=3):
    ctx = multiprocessing.get_context("spawn")
    procs = [
        ctx.Process(target=_writer_process, args=(str(path), r, 100 + k, repeat))
        for k, r in enumerate(regions)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    assert [p.exitcode for p in procs] == [0] * len(procs)


def _expected(regions, base):
    out = base.copy()
    for k, r in enumerate(regions):
        out[r] = 100 + k
    return out


def test_eight_processes_writing_disjoint_aligned_regions(store):
    # 8 slabs of 2 planes: aligned to neither chunks (4 or 8 planes) nor shards, so every
    # process shares a chunk or shard with a neighbour
    regions = [(slice(2 * k, 2 * k + 2), slice(0, 32), slice(0, 32)) for k in range(8)]
    _run_processes(store, regions)
    np.testing.assert_array_equal(lg.open_ome_zarr(store)[0][...], _expected(regions, volume()))


def test_eight_processes_writing_unaligned_boxes_inside_shared_chunks(store):
    regions = [
        (slice(z, z + 3), slice(y, y + 5), slice(x, x + 7))
        for z in (1, 9)
        for y in (2, 17)
        for x in (3, 19)
    ]
    _run_processes(store, regions, repeat=4)
    np.testing.assert_array_equal(lg.open_ome_zarr(store)[0][...], _expected(regions, volume()))


def test_threads_writing_unaligned_regions_of_one_handle(store):
    img = lg.open_ome_zarr(store, mode="r+")
    regions = [(slice(k, k + 1), slice(k, k + 9), slice(3, 29)) for k in range(16)]
    errors = []

    def work(k):
        try:
            for _ in range(3):
                img[0][regions[k]] = np.full((1, 9, 26), 100 + k, "u2")
        except Exception as exc:  # collected: a thread's failure must fail the test
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    np.testing.assert_array_equal(lg.open_ome_zarr(store)[0][...], _expected(regions, volume()))


def _threaded_writer_process(path: str, seed: int, units: int) -> None:
    """Three threads of one process, each writing 100 regions that span one to three
    chunks at random (every region's value is its thread's seed)."""
    img = lg.open_ome_zarr(path, mode="r+")
    failed: list[BaseException] = []

    def work(thread_seed: int) -> None:
        rng = np.random.default_rng(thread_seed)
        try:
            for _ in range(100):
                a = int(rng.integers(0, units))
                b = int(rng.integers(a + 1, min(units, a + 3) + 1))
                block = np.full((8, 8, (b - a) * 8 - 2), thread_seed, "u2")
                img[0][:, :, a * 8 + 1 : b * 8 - 1] = block
        except BaseException as exc:  # a thread's failure fails the process
            failed.append(exc)

    threads = [threading.Thread(target=work, args=(seed * 10 + k,)) for k in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if failed:
        raise failed[0]


def test_threads_of_several_processes_writing_regions_that_span_chunks(tmp_path):
    """Three processes of three threads writing regions that span chunks: every write
    lands (record locks owned by the process took such waits for deadlocks and failed
    writes with a raw OSError)."""
    path = tmp_path / "spans.ome.zarr"
    units = 6
    lg.write_ome_zarr(path, np.zeros((8, 8, units * 8), "u2"), chunks=(8, 8, 8), levels=1)
    ctx = multiprocessing.get_context("spawn")
    procs = [
        ctx.Process(target=_threaded_writer_process, args=(str(path), p + 1, units))
        for p in range(3)
    ]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join()
    assert [proc.exitcode for proc in procs] == [0, 0, 0]
    written = lg.open_ome_zarr(path)[0][...]
    seeds = {10 * p + k for p in range(1, 4) for k in range(3)}
    # each chunk's written columns hold one thread's value (no mix within a write)
    for a in range(units):
        inner = written[:, :, a * 8 + 1 : a * 8 + 7]
        assert len(np.unique(inner)) == 1 and int(inner.flat[0]) in seeds | {0}


def _voxel_writer_process(path: str, row: int, count: int) -> None:
    img = lg.open_ome_zarr(path, mode="r+")
    for k in range(count):
        img[0][row, k % 32, k // 32] = 1


def test_writers_still_exclude_each_other_after_the_store_is_replaced(tmp_path):
    """A process that wrote to a store before it was replaced locks the replacement's
    lock file, not the one replaced: its read-modify-writes of a chunk and another
    process's still exclude each other, and no update is lost."""
    path = tmp_path / "replaced.ome.zarr"
    lg.write_ome_zarr(path, np.zeros((2, 32, 32), "u1"), chunks=(2, 32, 32), levels=1)
    img = lg.open_ome_zarr(path, mode="r+")
    img[0][0, 0, 0] = 0  # this process has locked the old store's lock file
    lg.write_ome_zarr(
        path, np.zeros((2, 32, 32), "u1"), chunks=(2, 32, 32), levels=1, overwrite=True
    )
    ctx = multiprocessing.get_context("spawn")
    other = ctx.Process(target=_voxel_writer_process, args=(str(path), 1, 300))
    other.start()
    _voxel_writer_process(str(path), 0, 300)
    other.join()
    assert other.exitcode == 0
    assert int(lg.open_ome_zarr(path)[0][...].sum()) == 600


@pytest.mark.parametrize(
    ("swap_at", "before"),
    [(2, False), (2, True), (4, True)],
    ids=["between-files", "while-a-file-is-written", "at-the-last-file"],
)
def test_a_write_running_when_its_store_is_replaced_stops_and_spares_the_new_store(
    tmp_path, monkeypatch, swap_at, before
):
    """A store replaced (overwrite=True) while a region write runs, between two files or
    just as one is written (after every check the writer makes): the write fails with
    StoreError and none of it lands in the replacement."""
    from linumpy_gpu.engine import writer
    from linumpy_gpu.io import files

    path = tmp_path / "swapped.ome.zarr"
    lg.write_ome_zarr(path, np.zeros((16, 32, 32), "u2"), chunks=(4, 32, 32), levels=1)
    img = lg.open_ome_zarr(path, mode="r+")
    engine = writer.ChunkedArrayWriter(
        img[0]._reader.array, lg.backends.CpuBackend(), batch_bytes=1, name="swapped"
    )
    calls = {"n": 0, "replacing": False}
    original = files.OpenFolder.write

    def replace_store():
        calls["replacing"] = True  # the files of the replacement are not counted
        lg.write_ome_zarr(
            path, np.full((16, 32, 32), 500, "u2"), chunks=(4, 32, 32), levels=1, overwrite=True
        )
        calls["replacing"] = False

    def write_and_replace(folder, name, blob):
        if calls["replacing"]:
            return original(folder, name, blob)
        calls["n"] += 1
        if before and calls["n"] == swap_at:
            replace_store()
        original(folder, name, blob)
        if not before and calls["n"] == swap_at:
            replace_store()

    monkeypatch.setattr(files.OpenFolder, "write", write_and_replace)
    with pytest.raises(lg.StoreError, match="replaced or removed while this write ran"):
        engine.write((slice(None),) * 3, np.full((16, 32, 32), 7, "u2"))
    assert (lg.open_ome_zarr(path)[0][...] == 500).all()
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]


def test_a_writer_opened_before_its_store_was_replaced_refuses_to_write(tmp_path):
    path = tmp_path / "swapped.ome.zarr"
    lg.write_ome_zarr(path, np.zeros((16, 32, 32), "u2"), chunks=(4, 32, 32), levels=1)
    level = lg.open_ome_zarr(path, mode="r+")[0]
    lg.write_ome_zarr(
        path, np.full((16, 32, 32), 500, "u2"), chunks=(4, 32, 32), levels=1, overwrite=True
    )
    with pytest.raises(lg.StoreError, match="replaced"):
        level[0:4] = np.full((4, 32, 32), 7, "u2")
    assert (lg.open_ome_zarr(path)[0][...] == 500).all()


# -- killed writers -----------------------------------------------------------------------

_REWRITER = """
import sys, numpy as np, linumpy_gpu as lg
img = lg.open_ome_zarr(sys.argv[1], mode="r+")
shape = img[0].shape
print("ready", flush=True)
value = 1
while True:
    img[0][...] = np.full(shape, value, "u2")         # every chunk, whole
    img[0][3:13, 5:27, 1:31] = np.full((10, 22, 30), value + 1000, "u2")  # read-modify-write
    value += 1
"""


def _states_are_whole(chunk: np.ndarray, before: np.ndarray, box: np.ndarray) -> bool:
    """A chunk after a killed writer: as it was, or one pass's content (one value, with
    the read-modify-write box holding that value or the value + 1000)."""
    if np.array_equal(chunk, before):
        return True
    outside, inside = np.unique(chunk[~box]), np.unique(chunk[box])
    if not box.any():
        return len(outside) == 1
    if box.all():
        return len(inside) == 1
    return len(outside) == 1 and len(inside) == 1 and inside[0] - outside[0] in (0, 1000)


def test_a_writer_killed_at_random_moments_leaves_every_chunk_old_or_new(store):
    rng = np.random.default_rng(0)
    level = lg.open_ome_zarr(store)[0]
    shape, chunks = level.shape, level.chunks
    box = np.zeros(shape, bool)
    box[3:13, 5:27, 1:31] = True
    grid = [-(-n // c) for n, c in zip(shape, chunks, strict=True)]
    for moment in rng.uniform(0.05, 0.6, size=20):
        before = lg.open_ome_zarr(store)[0][...]
        proc = subprocess.Popen(
            [sys.executable, "-c", _REWRITER, str(store)], stdout=subprocess.PIPE, text=True
        )
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(moment)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        data = lg.open_ome_zarr(store)[0][...]  # the store always opens and reads
        for index in np.ndindex(*grid):
            part = tuple(
                slice(i * c, min((i + 1) * c, n))
                for i, c, n in zip(index, chunks, shape, strict=True)
            )
            assert _states_are_whole(data[part], before[part], box[part]), (moment, index)
    # what a killed writer leaves: at most hidden temporary files, which readers never see,
    # and which the next write of their folders removes
    assert all(p.name.startswith(".") for p in store.rglob("*.partial"))
    lg.open_ome_zarr(store, mode="r+")[0][...] = data
    assert not list(store.rglob("*.partial"))


def test_temporary_files_of_live_writers_are_left_alone(store):
    from linumpy_gpu.io import files as fileio

    folder = next(p.parent for p in store.rglob("*") if p.is_file() and p.parent.name != "0")
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        left = folder / f".x.{fileio._HOST}.{live.pid}-0123abcd.partial"
        left.write_bytes(b"in flight")
        level = lg.open_ome_zarr(store, mode="r+")[0]
        level[...] = level[...]
        assert left.exists()
    finally:
        live.kill()
        live.wait()


def test_a_failed_region_write_leaves_no_partial_files_and_names_the_key(store, monkeypatch):
    from linumpy_gpu.io import files as fileio

    img = lg.open_ome_zarr(store, mode="r+")
    before = snapshot(store)
    original = os.replace

    def failing_replace(src, dst, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(fileio.os, "replace", failing_replace)
    with pytest.raises(lg.ChunkWriteError) as info:
        img[0][0:4] = np.zeros((4, 32, 32), "u2")
    monkeypatch.setattr(fileio.os, "replace", original)
    message = str(info.value)
    assert "No space left" in message and "None" not in message
    assert "'0/c/0/" in message or "'0/c/0/0/0'" in message

    def without_locks(snap):
        return {k: v for k, v in snap.items() if not k.endswith(".linumpy-gpu.lock")}

    assert without_locks(snapshot(store)) == without_locks(before)
    assert not list(store.rglob("*.partial"))


def _ome_attrs(ndim: int = 3) -> dict:
    axes = [{"name": n, "type": "space"} for n in "zyx"[-ndim:]]
    ds = [{"path": "0", "coordinateTransformations": [{"type": "scale", "scale": [1] * ndim}]}]
    return {"ome": {"version": "0.5", "multiscales": [{"axes": axes, "datasets": ds}]}}


def test_region_writes_keep_a_shard_index_without_checksum(tmp_path):
    """Shards whose index has no crc32c (zarr-python's and tensorstore's option) are
    rewritten in that format: the shard stays readable by every reader."""
    from zarr.codecs import BytesCodec, ShardingCodec, ZstdCodec

    data = np.arange(32 * 32 * 32, dtype="u2").reshape(32, 32, 32)
    root = zarr.open_group(tmp_path / "s.zarr", mode="w", zarr_format=3)
    sharding = ShardingCodec(
        chunk_shape=(8, 8, 8), codecs=[BytesCodec(), ZstdCodec()], index_codecs=[BytesCodec()]
    )
    root.create_array(
        "0",
        shape=data.shape,
        dtype="u2",
        chunks=(16, 16, 16),
        serializer=sharding,
        compressors=None,
    )
    root["0"][...] = data
    root.attrs.put(_ome_attrs())
    img = lg.open_ome_zarr(tmp_path / "s.zarr", mode="r+")
    img[0][0:16, 0:16, 0:16] = np.full((16, 16, 16), 5, dtype="u2")
    data[0:16, 0:16, 0:16] = 5
    np.testing.assert_array_equal(zarr.open_array(tmp_path / "s.zarr" / "0", mode="r")[...], data)
    np.testing.assert_array_equal(lg.open_ome_zarr(tmp_path / "s.zarr")[0][...], data)


def test_writes_through_a_symlink_and_the_real_path_exclude_each_other(tmp_path):
    """One store reached by two paths: the unit locks are the same, no write is lost."""
    import threading

    lg.write_ome_zarr(tmp_path / "real.zarr", np.zeros((8, 16, 16), dtype="u2"), chunks=(8, 16, 16))
    os.symlink(tmp_path / "real.zarr", tmp_path / "link.zarr")
    start = threading.Barrier(2)

    def write(path, half, value):
        img = lg.open_ome_zarr(path, mode="r+")
        start.wait()
        for _ in range(10):
            img[0][:, half] = np.full((8, 8, 16), value, dtype="u2")

    threads = [
        threading.Thread(target=write, args=(tmp_path / "real.zarr", slice(0, 8), 1)),
        threading.Thread(target=write, args=(tmp_path / "link.zarr", slice(8, 16), 2)),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    got = lg.open_ome_zarr(tmp_path / "real.zarr")[0][...]
    assert (got[:, 0:8] == 1).all() and (got[:, 8:16] == 2).all()


def test_region_writes_with_an_ellipsis_meet_the_last_axes(tmp_path):
    lg.write_ome_zarr(tmp_path / "e.zarr", np.zeros((20, 21, 22), dtype="u2"))
    img = lg.open_ome_zarr(tmp_path / "e.zarr", mode="r+")
    img[0][..., 0:22] = np.ones((20, 21, 22), dtype="u2")
    assert (img[0][...] == 1).all()
    with pytest.raises(lg.SelectionError, match="reaches past"):
        img[0][..., 0:23] = np.ones((20, 21, 23), dtype="u2")


def test_update_pyramid_takes_numpy_indices_and_refuses_levels_of_other_factors(tmp_path):
    data = np.zeros((16, 16, 16), dtype="u2")
    lg.write_ome_zarr(tmp_path / "p.zarr", data, chunks=(8, 8, 8), levels=2)
    img = lg.open_ome_zarr(tmp_path / "p.zarr", mode="r+")
    img[0][-2:] = np.full((2, 16, 16), 50, dtype="u2")
    img.update_pyramid((-1,))
    assert (zarr.open_array(tmp_path / "p.zarr" / "1", mode="r")[-1] == 50).all()
    img.update_pyramid((Ellipsis, np.int64(3)))
    root = zarr.open_group(tmp_path / "q.zarr", mode="w", zarr_format=3)
    root.create_array("0", shape=(30, 30, 30), dtype="u2", chunks=(16, 16, 16))
    root.create_array("1", shape=(20, 20, 20), dtype="u2", chunks=(16, 16, 16))
    attrs = _ome_attrs()
    attrs["ome"]["multiscales"][0]["datasets"].append(
        {"path": "1", "coordinateTransformations": [{"type": "scale", "scale": [1.5] * 3}]}
    )
    root.attrs.put(attrs)
    with pytest.raises(lg.WriteError, match="whole factors"):
        lg.open_ome_zarr(tmp_path / "q.zarr", mode="r+").update_pyramid()


def test_update_pyramid_of_levels_rounded_down(tmp_path):
    """Writers such as ome-zarr-py round odd level shapes down: the update stops at the
    coarser level's end instead of refusing the region."""
    data = np.random.default_rng(0).integers(0, 1000, (9, 17, 15)).astype("u2")
    root = zarr.open_group(tmp_path / "f.zarr", mode="w", zarr_format=3)
    root.create_array("0", data=data, chunks=(8, 8, 8))
    root.create_array("1", shape=(4, 8, 7), dtype="u2", chunks=(8, 8, 8))
    attrs = _ome_attrs()
    attrs["ome"]["multiscales"][0]["datasets"].append(
        {"path": "1", "coordinateTransformations": [{"type": "scale", "scale": [2, 2, 2]}]}
    )
    root.attrs.put(attrs)
    lg.open_ome_zarr(tmp_path / "f.zarr", mode="r+").update_pyramid()
    from linumpy_gpu.engine.pyramid import downsample

    expected = downsample(data, (2, 2, 2), "mean")[:4, :8, :7]
    np.testing.assert_array_equal(zarr.open_array(tmp_path / "f.zarr" / "1")[...], expected)


def _floor_rounded_image(path, data, levels):
    """An image whose level shapes are rounded down, as ome-zarr-py writes them."""
    from linumpy_gpu.engine.pyramid import downsample

    root = zarr.open_group(path, mode="w", zarr_format=3)
    attrs = _ome_attrs()
    datasets = attrs["ome"]["multiscales"][0]["datasets"]
    level = data
    for i in range(levels):
        if i:
            finer = level.shape
            level = downsample(level, (2, 2, 2), "nearest")
            level = level[tuple(slice(0, n // 2) for n in finer)]
            datasets.append(
                {
                    "path": str(i),
                    "coordinateTransformations": [{"type": "scale", "scale": [2.0**i] * 3}],
                }
            )
        root.create_array(str(i), data=np.ascontiguousarray(level), chunks=(4, 4, 4))
    root.attrs.put(attrs)
    return [tuple(a.shape) for _, a in sorted(root.arrays())]


def test_update_pyramid_reads_the_factor_from_the_scales(tmp_path):
    """7 -> 3 -> 1 rounded down is a reduction by 2 at each level, not by 3 at the last
    (which the shapes alone would suggest)."""
    data = np.arange(7 * 7 * 7, dtype="u2").reshape(7, 7, 7)
    shapes = _floor_rounded_image(tmp_path / "s.zarr", data, 3)
    assert shapes == [(7, 7, 7), (3, 3, 3), (1, 1, 1)]
    lg.open_ome_zarr(tmp_path / "s.zarr", mode="r+").update_pyramid(method="mean")
    from linumpy_gpu.engine.pyramid import downsample

    one = downsample(data, (2, 2, 2), "mean")[:3, :3, :3]
    two = downsample(one, (2, 2, 2), "mean")[:1, :1, :1]
    np.testing.assert_array_equal(zarr.open_array(tmp_path / "s.zarr" / "2")[...], two)


@pytest.mark.parametrize("lazy", [False, True])
@pytest.mark.parametrize("method", ["nearest", "mode"])
def test_label_pyramids_match_an_image_rounded_down(tmp_path, method, lazy):
    data = np.random.default_rng(1).integers(0, 9, (9, 17, 15)).astype("u2")
    shapes = _floor_rounded_image(tmp_path / "r.zarr", data, 3)
    assert shapes == [(9, 17, 15), (4, 8, 7), (2, 4, 3)]
    labels = (data % 4).astype("u4")
    source = labels
    if lazy:
        import dask.array as da

        source = da.from_array(labels, chunks=(4, 8, 8))
    out = lg.write_labels(tmp_path / "r.zarr", "cells", source, method=method, chunks=(4, 4, 4))
    assert [level.shape for level in out.levels] == shapes
    from linumpy_gpu.engine.pyramid import downsample

    expected = labels
    for i, shape in enumerate(shapes):
        if i:
            expected = downsample(expected, (2, 2, 2), method)[tuple(slice(0, n) for n in shape)]
        np.testing.assert_array_equal(out[i][...], expected)


def test_update_pyramid_of_a_label_image_keeps_its_labels(tmp_path):
    """A label image whose metadata records no method (ome-zarr-py writes none) is
    updated with nearest sampling, never a mean, which would invent labels."""
    img = lg.write_ome_zarr(tmp_path / "i.zarr", np.zeros((8, 16, 16), "u2"), levels=2)
    labels = lg.write_labels(img, "cells", np.zeros((8, 16, 16), "u1"))
    group = zarr.open_group(tmp_path / "i.zarr" / "labels" / "cells", mode="r+")
    attrs = group.attrs.asdict()
    for multiscale in attrs["ome"]["multiscales"]:
        multiscale.pop("type", None)
    group.attrs.put(attrs)
    labels = lg.open_ome_zarr(tmp_path / "i.zarr" / "labels" / "cells", mode="r+")
    checker = np.where(np.indices((8, 16, 16)).sum(0) % 2 == 0, 1, 5).astype("u1")
    labels[0][...] = checker
    labels.update_pyramid()
    assert set(np.unique(labels[1][...]).tolist()) <= {1, 5}
    with pytest.raises(lg.InvalidArgumentError, match="label image"):
        labels.update_pyramid(method="mean")


def test_update_pyramid_refuses_a_method_other_than_the_recorded_one(tmp_path):
    """The metadata records the method and the translations it gives: another method
    would leave levels that the metadata places half a voxel wrong."""
    data = np.arange(8 * 16 * 16, dtype="u2").reshape(8, 16, 16)
    img = lg.write_ome_zarr(tmp_path / "n.zarr", data, levels=2, method="nearest")
    before = img[1][...]
    img = lg.open_ome_zarr(tmp_path / "n.zarr", mode="r+")
    img[0][...] = data + 1
    with pytest.raises(lg.InvalidArgumentError, match="records its levels as made with 'nearest'"):
        img.update_pyramid(method="mean")
    np.testing.assert_array_equal(img[1][...], before)
    img.update_pyramid(method="nearest")
    np.testing.assert_array_equal(img[1][...], (data + 1)[::2, ::2, ::2])


def _start_then_wait(started: Any, release: Any) -> None:
    started.set()
    release.wait()


def test_unit_locks_of_a_hold_end_with_it_even_when_a_child_was_forked_meanwhile(tmp_path):
    """A hold's locks belong to its open file; a child forked while it ran shares that
    file and must not keep the lock after the parent's hold ended."""
    import fcntl
    import struct

    from linumpy_gpu.io.files import LOCK_FILE, UnitLocks

    if not hasattr(fcntl, "F_OFD_SETLK"):
        pytest.skip("open-file-description locks are Linux's")
    folder = tmp_path / "array"
    folder.mkdir()
    locks = UnitLocks(str(folder))
    ctx = multiprocessing.get_context("fork")
    started, release = ctx.Event(), ctx.Event()
    with locks.hold([7]):
        child = ctx.Process(target=_start_then_wait, args=(started, release))
        child.start()
    started.wait()  # the child runs (its copies of the parent's files are closed by now)
    try:
        fd = os.open(folder / LOCK_FILE, os.O_RDWR)
        try:  # free now (a non-blocking try), though the child still runs
            flock = struct.pack("hhqqi", fcntl.F_WRLCK, os.SEEK_SET, 7, 1, 0)
            fcntl.fcntl(fd, fcntl.F_OFD_SETLK, flock)
        finally:
            os.close(fd)
        assert child.is_alive()
    finally:
        release.set()
        child.join()


def test_a_hold_on_a_removed_store_is_a_store_error_and_makes_nothing(tmp_path):
    import shutil

    from linumpy_gpu.io.files import UnitLocks

    folder = tmp_path / "img.zarr" / "0"
    folder.mkdir(parents=True)
    locks = UnitLocks(str(folder))
    shutil.rmtree(tmp_path / "img.zarr")
    with pytest.raises(lg.StoreError, match="was removed"), locks.hold([0]):
        pass
    assert not (tmp_path / "img.zarr").exists()


def test_units_are_locked_as_runs():
    from linumpy_gpu.io.files import MAX_LOCK_SPANS, _spans

    assert _spans([1, 2, 3, 7, 9, 10]) == [(1, 3), (7, 1), (9, 2)]
    scattered = list(range(0, 4 * MAX_LOCK_SPANS, 2))  # too many runs: one range
    assert _spans(scattered) == [(0, scattered[-1] + 1)]


@pytest.mark.parametrize(
    "region",
    [(slice(20, 30),), (slice(0, 40),), (slice(5, 5),), (Ellipsis, slice(-30, 2))],
)
def test_update_pyramid_refuses_a_region_outside_level_0_or_empty(tmp_path, region):
    lg.write_ome_zarr(tmp_path / "p.zarr", np.zeros((16, 16, 16), dtype="u2"), levels=2)
    img = lg.open_ome_zarr(tmp_path / "p.zarr", mode="r+")
    with pytest.raises(lg.SelectionError, match="reaches past|selects nothing"):
        img.update_pyramid(region)


def test_region_writes_check_the_block_of_an_empty_region_too(tmp_path):
    lg.write_ome_zarr(tmp_path / "e.zarr", np.zeros((4, 4, 4), np.uint16), levels=1)
    img = lg.open_ome_zarr(tmp_path / "e.zarr", mode="r+")
    with pytest.raises(lg.WriteError, match="shapes must match"):
        img[0][2:2] = np.full((5, 5), 3, np.uint16)
    with pytest.raises(lg.WriteError, match="cannot be stored as uint16"):
        img[0][2:2] = np.full((0, 4, 4), 3.5)
    img[0][2:2] = np.zeros((0, 4, 4), np.uint16)  # numpy's empty assignment
    assert (img[0][...] == 0).all()


def test_masked_arrays_are_refused_not_written_with_their_hidden_values(tmp_path):
    lg.write_ome_zarr(tmp_path / "m.zarr", np.zeros((4, 4, 4), np.uint16), levels=1)
    img = lg.open_ome_zarr(tmp_path / "m.zarr", mode="r+")
    hidden = np.ma.masked_array(np.array([[[70000, 5]]], np.int64), mask=[[[True, False]]])
    with pytest.raises(lg.WriteError, match="masked array"):
        img[0][0:1, 0:1, 0:2] = hidden
    assert (img[0][...] == 0).all()
    masked = np.ma.masked_array(np.zeros((4, 4), np.uint8), mask=np.eye(4, dtype=bool))
    with pytest.raises(lg.WriteError, match="masked array"):
        lg.write_ome_zarr(tmp_path / "n.zarr", masked)
    assert not (tmp_path / "n.zarr").exists()
    # one that masks nothing (netCDF4 reads are such) is its data
    img = lg.write_ome_zarr(tmp_path / "n.zarr", np.ma.masked_invalid(np.ones((4, 4))))
    assert (img[0][...] == 1).all()


@pytest.mark.parametrize(
    ("code", "error"),
    [(errno.EROFS, lg.StorePermissionError), (errno.ENOSPC, lg.StoreError)],
)
def test_region_writes_on_a_read_only_or_full_file_system_raise_store_errors(
    tmp_path, monkeypatch, code, error
):
    from linumpy_gpu.io import files

    lg.write_ome_zarr(tmp_path / "r.zarr", np.zeros((8, 8, 8), np.uint16), levels=2)
    img = lg.open_ome_zarr(tmp_path / "r.zarr", mode="r+")
    real_open = os.open

    def refusing_open(path, flags, *args, **kwargs):
        if str(path).endswith(files.LOCK_FILE):  # the first file a region write makes
            raise OSError(code, os.strerror(code), str(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(files.os, "open", refusing_open)
    with pytest.raises(error, match="cannot be written"):
        img[0][0:4] = np.ones((4, 8, 8), np.uint16)
    with pytest.raises(error, match="cannot be written"):
        img.update_pyramid()
