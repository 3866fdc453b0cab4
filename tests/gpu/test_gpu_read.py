"""GPU reads (open_ome_zarr_gpu): cupy results equal to the CPU engine and zarr-python."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import zarr

import linumpy_gpu as lg
from linumpy_gpu.engine import ChunkedArrayReader
from tests.helpers.writers import (
    ZARR_VARIANTS,
    volume,
    write_ome_zarr_py,
    write_tensorstore,
    write_zarr_variant,
)

pytestmark = pytest.mark.gpu

REGIONS = [
    (),
    (slice(3, 20), slice(5, 33, 3), slice(None, None, -2)),
    (5, Ellipsis, slice(-9, None)),
    (slice(None, None, 7), 0, 40),
]


@pytest.fixture(scope="module")
def cp():
    import cupy

    return cupy


# nvCOMP alone, and nvCOMP with host threads taking part of every batch (small test reads
# would otherwise go to the host entirely)
DECODERS = {"nvcomp": 0, "nvcomp+host": 2}


def gpu_reader(arr, host_threads: int = 0, host_chunks: int | None = 3):
    """A reader on the device path whatever the read's size (small reads are otherwise
    handed to the CPU backend: see test_small_reads_go_through_the_cpu_backend)."""
    from linumpy_gpu.gpu.backend import GpuBackend

    backend = GpuBackend(0, host_threads=host_threads)
    backend.small_read_backend = lambda fmt, n_chunks, out_nbytes: None
    if host_threads and host_chunks is not None:
        # a split of every batch: its last host_chunks chunks on host threads
        backend.host_chunks = lambda fmt, n_tasks: host_chunks
    return ChunkedArrayReader(arr, backend, batch_bytes=64 << 10)


def test_info_reports_the_stack():
    from linumpy_gpu.gpu import info

    report = info()
    for key in ("gpu", "cuda driver", "cupy", "nvcomp", "kvikio", "gds mode"):
        assert key in report, report
    assert "." in report["nvcomp"]


@pytest.mark.parametrize("decoders", sorted(DECODERS))
@pytest.mark.parametrize("variant", sorted(ZARR_VARIANTS))
def test_every_zarr_variant_on_gpu(tmp_path, cp, variant, decoders):
    data = volume()
    arr = write_zarr_variant(tmp_path / "a.zarr", variant, data)
    reader = gpu_reader(arr, DECODERS[decoders])
    full = arr[...]
    for region in REGIONS:
        got = reader.read(region)
        assert isinstance(got, cp.ndarray)
        np.testing.assert_array_equal(got.get(), full[region], err_msg=f"{variant} {region}")


def test_shared_data_on_gpu_equals_cpu(shared_data, cp):
    root = shared_data / "ome-zarr-examples" / "data" / "valid"
    for name in ["image-01.zarr", "image-02.zarr", "image-03.zarr", "image-04.zarr"]:
        gimg = lg.open_ome_zarr_gpu(root / name)
        cimg = lg.open_ome_zarr(root / name)
        assert gimg.device == "cuda:0"
        for g, c in zip(gimg.levels, cimg.levels, strict=True):
            got = g[...]
            assert isinstance(got, cp.ndarray)
            np.testing.assert_array_equal(got.get(), c[...])
    plate = lg.open_ome_zarr_gpu(root / "plate-01.zarr")
    np.testing.assert_array_equal(plate.image("A", "1")[0][:5, :5].get(), np.zeros((5, 5)))
    for name in ["v1", "v2"]:
        path = shared_data / "ome-zarr-py-tests" / "tests" / "data" / name
        np.testing.assert_array_equal(
            lg.open_ome_zarr_gpu(path)[0][...].get(), lg.open_ome_zarr(path)[0][...]
        )


@pytest.mark.parametrize("sharded", [False, True])
def test_tensorstore_on_gpu(tmp_path, cp, sharded):
    data = volume()
    arr = write_tensorstore(tmp_path / "ts.zarr", data, sharded)
    reader = gpu_reader(arr)
    for region in REGIONS:
        np.testing.assert_array_equal(reader.read(region).get(), data[region])


@pytest.mark.parametrize("version", ["0.4", "0.5"])
def test_ome_zarr_py_on_gpu(tmp_path, cp, version):
    data = volume(shape=(2, 12, 40, 36))
    path = write_ome_zarr_py(tmp_path / "img.zarr", data, version)
    img = lg.open_ome_zarr_gpu(path)
    cimg = lg.open_ome_zarr(path)
    for g, c in zip(img.levels, cimg.levels, strict=True):
        np.testing.assert_array_equal(g[...].get(), c[...])
    np.testing.assert_array_equal(img.labels["cells"][0][...].get(), (data[0] % 5).astype("u4"))


def test_written_sample_full_and_tiles(tmp_path, cp):
    from linumpy_gpu.sample import write_sample

    write_sample(tmp_path / "s.zarr")
    img = lg.open_ome_zarr_gpu(tmp_path / "s.zarr")
    ref = zarr.open_array(str(tmp_path / "s.zarr" / "0"), mode="r")[...]
    np.testing.assert_array_equal(img[0][...].get(), ref)
    np.testing.assert_array_equal(img[0][10:50, ::3, 100:200].get(), ref[10:50, ::3, 100:200])
    out = cp.zeros((40, 86, 100), dtype="u2")
    assert img[0].read((slice(10, 50), slice(None, None, 3), slice(100, 200)), out=out) is out
    np.testing.assert_array_equal(out.get(), ref[10:50, ::3, 100:200])
    with pytest.raises(lg.OutputMismatchError):
        img[0].read((slice(0, 2),), out=np.empty((2, 256, 256), dtype="u2"))
    d = img[0].to_dask()
    block = d.blocks[0, 0, 0].compute()
    assert isinstance(block, cp.ndarray)
    assert float(d.sum().compute()) == float(ref.astype(np.float64).sum())


def test_auto_device_picks_the_gpu(tmp_path):
    from linumpy_gpu.sample import write_sample

    write_sample(tmp_path / "s.zarr", levels=1)
    assert lg.open_ome_zarr(tmp_path / "s.zarr", device="auto").device == "cuda:0"


def test_threads_read_one_image_concurrently(tmp_path, cp):
    data = volume(shape=(40, 64, 64))
    arr = write_zarr_variant(tmp_path / "a.zarr", "v3-sharded-zstd", data, missing_fraction=0.1)
    reader = gpu_reader(arr, host_threads=2)  # host workers shared by every reading thread
    full = arr[...]
    errors = []

    def work(seed):
        rng = np.random.default_rng(seed)
        try:
            for _ in range(20):
                z = int(rng.integers(0, 30))
                got = reader.read((slice(z, z + 10), slice(None), slice(5, 60, 2))).get()
                np.testing.assert_array_equal(got, full[z : z + 10, :, 5:60:2])
        except Exception as exc:  # reported below, in the main thread
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(s,)) for s in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]


@pytest.mark.parametrize("decoders", sorted(DECODERS))
def test_seeded_region_sweep_with_out_and_reversed_axes(tmp_path, cp, decoders):
    """The batched scatter kernel: strided, reversed and dropped axes, with and without out=."""
    data = volume(shape=(23, 37, 41))
    for variant in ["v3-zstd", "v3-transpose-crc32c", "v2-gzip-fortran", "v3-sharded-zstd"]:
        arr = write_zarr_variant(tmp_path / f"{variant}.zarr", variant, data)
        reader = gpu_reader(arr, DECODERS[decoders])
        full = arr[...]
        rng = np.random.default_rng(3)
        for _ in range(40):
            region = []
            for n in full.shape:
                if rng.random() < 0.2:
                    region.append(int(rng.integers(-n, n)))
                else:
                    a, b = sorted(int(x) for x in rng.integers(0, n + 1, 2))
                    step = int(rng.choice([1, 2, 3, 7, -1, -2, -5]))
                    region.append(slice(a, b, step) if step > 0 else slice(b, a, step))
            region = tuple(region)
            expected = full[region]
            np.testing.assert_array_equal(reader.read(region).get(), expected, err_msg=str(region))
            out = cp.full(expected.shape, 7, dtype=full.dtype)
            reader.read(region, out=out)
            np.testing.assert_array_equal(out.get(), expected, err_msg=f"out= {region}")


def test_read_too_large_for_the_gpu_says_so_and_holds_nothing(tmp_path, cp):
    from linumpy_gpu.gpu.backend import GpuBackend

    data = volume(shape=(16, 16, 16))
    arr = write_zarr_variant(
        tmp_path / "a.zarr", "v3-zstd", data, chunks=(8, 8, 8), missing_fraction=0
    )
    backend = GpuBackend(0)
    free = backend.free_bytes()
    with pytest.raises(lg.DeviceMemoryError, match="level.to_dask"):
        backend.reserve_for_read(free + (1 << 30), 256 << 20)
    pool = cp.get_default_memory_pool()
    gpu_reader(arr).read(())  # warm: the decoder keeps its nvCOMP scratch between reads
    before = pool.used_bytes()
    np.testing.assert_array_equal(gpu_reader(arr).read(()).get(), data)
    assert pool.used_bytes() == before


def test_region_reads_may_hold_more_scratch_than_full_levels(cp):
    from linumpy_gpu.gpu.backend import GpuBackend

    backend = GpuBackend(0, memory="tight", scratch_floor=1 << 20, region_scratch=1 << 30)
    out = 64 << 20
    assert backend.scratch_budget(out) == out // 4  # a full level: a quarter of its output
    # a region: up to region_scratch, within half the free memory
    region = backend.scratch_budget(out, whole_level=False)
    assert out // 4 < region <= min(1 << 30, backend.free_bytes() // 2 + (1 << 20))
    # never less than a full level would get, whatever is free
    small = GpuBackend(0, memory="tight", scratch_floor=1 << 20, region_scratch=1 << 10)
    assert small.scratch_budget(out, whole_level=False) == out // 4
    with pytest.raises(ValueError, match="region_scratch"):
        GpuBackend(0, region_scratch=-1)


def test_pinned_staging_stays_within_its_cap(tmp_path, cp):
    from linumpy_gpu.gpu.staging import staging_pool

    data = volume(shape=(64, 64, 64))
    arr = write_zarr_variant(
        tmp_path / "a.zarr", "v3-zstd", data, chunks=(16, 16, 16), missing_fraction=0
    )
    np.testing.assert_array_equal(gpu_reader(arr).read(()).get(), data)
    pool = staging_pool(lg.config.get().pinned_bytes)
    assert 0 < pool._allocated <= pool.cap
    assert gpu_reader(arr).last_profile == {}


def test_read_regions_on_gpu(tmp_path, cp):
    data = volume(shape=(40, 64, 64))
    arr = write_zarr_variant(tmp_path / "a.zarr", "v3-sharded-zstd", data, missing_fraction=0.1)
    reader = gpu_reader(arr)
    full = arr[...]
    rng = np.random.default_rng(5)
    regions = [tuple(slice(int(a), int(a) + 12) for a in rng.integers(0, 28, 3)) for _ in range(20)]
    for got, region in zip(reader.read_regions(regions), regions, strict=True):
        np.testing.assert_array_equal(got.get(), full[region])


def _peak_read(reader, cp):
    """A warm read's result and the most memory cupy's pool grew by during it."""
    pool = cp.get_default_memory_pool()
    reader.read(())
    pool.free_all_blocks()
    before = pool.total_bytes()
    got = reader.read(())
    cp.cuda.Device().synchronize()
    return got, pool.total_bytes() - before


@pytest.mark.parametrize("host_threads", [0, 2], ids=str)
@pytest.mark.parametrize("chunks", [(32, 64, 64), (1, 256, 512)])
def test_tight_full_read_holds_at_most_a_quarter_more_than_its_output(
    tmp_path, cp, chunks, host_threads
):
    """Decoder workspace, slots and compressed bytes live in output bytes not yet written
    or within the read's budget: with memory="tight" the pool never holds more than 1.25x
    the output."""
    from linumpy_gpu.gpu.backend import GpuBackend

    data = volume(shape=(256, 256, 512))  # 64 MiB
    arr = write_zarr_variant(
        tmp_path / "a.zarr", "v3-zstd", data, chunks=chunks, missing_fraction=0
    )
    backend = GpuBackend(
        0, memory="tight", scratch_fraction=0.25, scratch_floor=0, host_threads=host_threads
    )
    reader = ChunkedArrayReader(arr, backend)
    got, peak = _peak_read(reader, cp)
    np.testing.assert_array_equal(got.get(), data)
    assert reader.last_profile["batches"] > 1
    # exactly the bound: the per-batch tables are kept out of the read's buffer
    assert peak <= 1.25 * data.nbytes, (
        f"{peak / data.nbytes:.5f}x, {peak - 1.25 * data.nbytes:.0f} B over"
    )


def test_auto_read_takes_fewer_larger_batches_within_half_of_what_is_free(tmp_path, cp):
    """memory="auto" (the default) lets a read use the free device memory: fewer, larger
    nvCOMP batches than the tight bound, and never more than half of what was free."""
    from linumpy_gpu.gpu.backend import GpuBackend

    data = volume(shape=(256, 256, 512))  # 64 MiB
    arr = write_zarr_variant(
        tmp_path / "a.zarr", "v3-zstd", data, chunks=(32, 64, 64), missing_fraction=0
    )
    tight = ChunkedArrayReader(arr, GpuBackend(0, memory="tight", scratch_floor=0, host_threads=0))
    auto_backend = GpuBackend(0, scratch_floor=0, host_threads=0)
    auto = ChunkedArrayReader(arr, auto_backend)
    assert auto_backend.settings.memory == "auto"
    got_tight, _ = _peak_read(tight, cp)
    free = auto_backend.free_bytes()
    got_auto, peak = _peak_read(auto, cp)
    np.testing.assert_array_equal(got_tight.get(), data)
    np.testing.assert_array_equal(got_auto.get(), data)
    assert auto.last_profile["batches"] < tight.last_profile["batches"]
    assert peak > 1.25 * data.nbytes  # it did take more than the tight bound
    assert peak <= data.nbytes + (free - data.nbytes) // 2


def test_auto_read_stays_within_the_memory_cap(tmp_path, cp):
    from linumpy_gpu.gpu.backend import GpuBackend

    data = volume(shape=(256, 256, 512))
    arr = write_zarr_variant(
        tmp_path / "a.zarr", "v3-zstd", data, chunks=(32, 64, 64), missing_fraction=0
    )
    cap = data.nbytes // 2
    with lg.config.set(memory_cap=cap, scratch_floor=0, host_threads=0):
        reader = ChunkedArrayReader(arr, GpuBackend(0))
    got, peak = _peak_read(reader, cp)
    np.testing.assert_array_equal(got.get(), data)
    assert peak <= data.nbytes + cap


def test_auto_read_respects_a_limit_on_cupys_pool(tmp_path, cp):
    """A user who limits cupy's pool leaves the rest of the device to other work: the read's
    free memory is what the limit leaves."""
    from linumpy_gpu.gpu.backend import GpuBackend

    backend = GpuBackend(0)
    pool = cp.get_default_memory_pool()
    limit = pool.get_limit()
    try:
        pool.set_limit(size=pool.used_bytes() + (512 << 20))
        assert backend.free_bytes() <= 512 << 20
        assert backend.scratch_budget(64 << 20) <= max(1 << 30, (512 << 20) // 2)
    finally:
        pool.set_limit(size=limit)


def test_auto_read_that_runs_out_of_memory_midway_is_done_again_tight(tmp_path, cp, monkeypatch):
    """Other work takes the memory an auto read counted on: the read's own buffer cannot be
    allocated; the read is done again under the tight bound and lands equal."""
    from linumpy_gpu.gpu.backend import GpuBackend

    data = volume(shape=(256, 256, 512))
    arr = write_zarr_variant(
        tmp_path / "a.zarr", "v3-zstd", data, chunks=(32, 64, 64), missing_fraction=0
    )
    backend = GpuBackend(0, scratch_floor=0, host_threads=0)
    tight_budget = backend.scratch_budget(data.nbytes, tight=True)
    empty = backend.empty
    refused = []

    def crowded_empty(shape, dtype):
        if len(shape) == 1 and np.dtype(dtype) == np.uint8 and shape[0] > tight_budget:
            refused.append(shape[0])
            raise cp.cuda.memory.OutOfMemoryError(shape[0], 0, 0)
        return empty(shape, dtype)

    monkeypatch.setattr(backend, "empty", crowded_empty)
    got = ChunkedArrayReader(arr, backend).read(())
    np.testing.assert_array_equal(got.get(), data)
    assert refused  # the roomy attempt was refused, the tight one went through


def test_small_reads_on_host_threads_large_ones_on_nvcomp(tmp_path, cp):
    """A read the host threads finish within one nvCOMP batch's time goes to them; a
    whole level goes to nvCOMP. Both land equal."""
    from linumpy_gpu.gpu.backend import GpuBackend

    data = volume(shape=(256, 256, 512))
    arr = write_zarr_variant(
        tmp_path / "a.zarr", "v3-zstd", data, chunks=(32, 64, 64), missing_fraction=0
    )
    backend = GpuBackend(0, host_threads=2)
    backend.small_read_backend = lambda fmt, n_chunks, out_nbytes: None  # the device path
    reader = ChunkedArrayReader(arr, backend)
    full = arr[...]
    # rates as a GPU host measures them (the test controls them)
    nbytes = 32 * 64 * 64 * 2

    def rates_as_on_the_h200_host():
        backend._host.thread_rate = 0.45e9
        backend._host.gpu_seconds.clear()
        for n in (96, 256):
            backend._host.gpu_seconds[(nbytes, n.bit_length())] = 0.035

    rates_as_on_the_h200_host()
    assert backend._host.host_seconds(nbytes, 96) < 0.035 < backend._host.host_seconds(nbytes, 256)
    np.testing.assert_array_equal(reader.read(()).get(), full)
    assert reader.last_profile["host_chunks"] == 0  # 256 chunks
    rates_as_on_the_h200_host()
    region = (slice(40, 100), slice(None, None, 3), slice(500, 3, -2))  # 3 x 4 x 8 chunks
    np.testing.assert_array_equal(reader.read(region).get(), full[region])
    assert reader.last_profile["host_chunks"] == reader.last_profile["chunks"] == 96


def test_damaged_chunks_on_host_threads_and_nvcomp_in_one_batch(tmp_path, cp):
    """A batch split between nvCOMP and host threads reports each damaged chunk with its
    key, whichever side decoded it; "fill" reads past both."""
    from tests.gpu.damage_case import damage

    data = volume(shape=(64, 32, 32))
    write_zarr_variant(
        tmp_path / "a.zarr", "v3-zstd-checksum", data, chunks=(8, 32, 32), missing_fraction=0
    )
    root = tmp_path / "a.zarr"
    for key, case in [("c/0/0/0", "truncated"), ("c/7/0/0", "checksum-byte")]:
        path = root.joinpath(*key.split("/"))
        path.write_bytes(damage(path.read_bytes(), case, 8 * 32 * 32 * 2))
    reader = gpu_reader(zarr.open_array(str(root)), host_threads=2, host_chunks=2)
    reader.batch_bytes = None
    with pytest.raises(lg.ChunkDecodeError) as info:
        reader.read(())
    keys = [info.value.key] + [n for n in getattr(info.value, "__notes__", [])]
    assert any("c/0/0/0" in k for k in keys) and any("c/7/0/0" in k for k in keys), keys
    with pytest.warns(lg.DamagedChunkWarning, match="2 damaged"):
        got = reader.read((), on_damaged="fill").get()
    assert reader.last_profile["host_chunks"] == 2
    expected = data.copy()
    expected[0:8] = 7
    expected[56:64] = 7
    np.testing.assert_array_equal(got, expected)
    # small reads go to host threads entirely (one nvCOMP batch would take longer)
    whole_host = gpu_reader(zarr.open_array(str(root)), host_threads=2, host_chunks=None)
    np.testing.assert_array_equal(whole_host.read((slice(8, 56),)).get(), data[8:56])
    assert whole_host.last_profile["host_chunks"] == whole_host.last_profile["chunks"]
    with pytest.raises(lg.ChunkDecodeError, match="c/7/0/0"):
        whole_host.read((slice(50, 64),))


@pytest.mark.parametrize("host_threads", [0, 2])
def test_damaged_gzip_chunk_names_its_key_on_the_gpu(tmp_path, cp, host_threads):
    """Chunks of codecs nvCOMP lacks decode on host threads (or, with none, on the CPU
    backend); a damaged one is a ChunkDecodeError naming it either way, and "fill" reads
    past it."""
    data = volume(shape=(32, 32, 32))
    write_zarr_variant(tmp_path / "a.zarr", "v3-gzip", data, chunks=(8, 32, 32), missing_fraction=0)
    path = tmp_path / "a.zarr" / "c" / "2" / "0" / "0"
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 2] ^= 0x5A
    path.write_bytes(bytes(raw))
    reader = gpu_reader(zarr.open_array(str(tmp_path / "a.zarr")), host_threads, None)
    with pytest.raises(lg.ChunkDecodeError, match="c/2/0/0") as info:
        reader.read(())
    assert "gzip" in info.value.reason
    with pytest.warns(lg.DamagedChunkWarning, match="1 damaged"):
        got = reader.read((), on_damaged="fill").get()
    expected = data.copy()
    expected[16:24] = 7
    np.testing.assert_array_equal(got, expected)


def test_chunks_placed_in_the_widest_unit_their_rows_allow(tmp_path, cp, monkeypatch):
    """Reads whose rows are 16-, 8-, 4-byte aligned, or not at all (strided), place their
    chunks with the matching copy kernel and give the same data; so do blocks that must
    loop over their rows (few blocks per chunk)."""
    from linumpy_gpu.gpu import backend as backend_module

    used: list[str] = []
    original = backend_module.kernel

    def spy(name):
        used.append(name)
        return original(name)

    monkeypatch.setattr(backend_module, "kernel", spy)
    data = volume(shape=(8, 24, 64))
    arr = write_zarr_variant(tmp_path / "a.zarr", "v3-zstd", data, chunks=(4, 8, 32))
    reader = gpu_reader(arr)
    full = arr[...]  # zarr-python refuses negative steps: numpy indexes the reference
    for blocks in (4096, 1):
        monkeypatch.setattr(backend_module, "MAX_COPY_BLOCKS_PER_JOB", blocks)
        for region, unit in [
            ((), 16),
            ((slice(None), slice(None), slice(4, 60)), 8),
            ((slice(1, 7), slice(3, 20), slice(2, 62)), 4),
            ((slice(None), slice(None), slice(1, 33)), 2),
            ((slice(None), slice(None), slice(None, None, 2)), 2),
            ((slice(None), slice(None, None, -1), slice(None, None, -3)), 2),
        ]:
            used.clear()
            got = reader.read(region).get()
            np.testing.assert_array_equal(got, full[region], err_msg=f"{region} {blocks}")
            assert f"scatter_{unit}" in used, (region, used)


@pytest.mark.parametrize("host_chunks", [0, 3])
def test_a_damaged_shard_index_with_chunks_placed_directly_and_on_host_threads(
    cp, tmp_path, host_chunks
):
    """A shard whose index fails its checksum, read in small nvCOMP batches with chunks
    placed straight into the output and (host_chunks) part of each batch decoded on host
    threads: its chunks named or filled, every other chunk exact, the device usable."""
    from linumpy_gpu.engine.reader import ChunkedArrayReader
    from linumpy_gpu.gpu.backend import GpuBackend
    from tests.helpers.safety import small_store, volume

    path = tmp_path / "s.ome.zarr"
    data = volume((16, 32, 32))
    small_store(path, data, chunks=(4, 8, 8), shards=(8, 16, 16), levels=1)
    shard = path / "0" / "c" / "1" / "0" / "1"
    good = shard.read_bytes()
    shard.write_bytes(good[:-5] + bytes([good[-5] ^ 0xFF]) + good[-4:])
    array = lg.open_ome_zarr(path)[0].zarr_array
    expected = data.copy()
    expected[8:16, 0:16, 16:32] = 0
    backend = GpuBackend(0, host_threads=2 if host_chunks else 0)
    if host_chunks:
        backend.host_chunks = lambda fmt, n: host_chunks  # type: ignore[method-assign]
        backend.small_read_backend = lambda fmt, n, nbytes: None  # type: ignore[method-assign]
    reader = ChunkedArrayReader(array, backend, batch_bytes=64 << 10)
    with pytest.raises(lg.ChunkDecodeError, match="c/1/0/1"):
        reader.read()
    with pytest.warns(lg.DamagedChunkWarning):
        got = reader.read(on_damaged="fill").get()
    np.testing.assert_array_equal(got, expected)
    np.testing.assert_array_equal(reader.read((slice(0, 8),)).get(), data[:8])


@pytest.mark.parametrize("variant", ["v3-zstd", "v3-gzip", "v3-sharded-zstd"])
def test_small_reads_go_through_the_cpu_backend(tmp_path, cp, variant):
    """A read of a few chunks that host cores decode anyway goes through the CPU backend
    and one copy: cupy results equal to zarr-python's for every kind of region, into
    ``out`` too; without host threads, the device path."""
    from linumpy_gpu.gpu.backend import GpuBackend

    data = volume(shape=(40, 64, 64))
    arr = write_zarr_variant(tmp_path / "a.zarr", variant, data, missing_fraction=0.2)
    reader = ChunkedArrayReader(arr, GpuBackend(0, host_threads=2))
    full = arr[...]
    for region in [*REGIONS, (slice(30, 3, -4), 7), (0, 0, 0)]:
        got = reader.read(region)
        assert isinstance(got, cp.ndarray)
        np.testing.assert_array_equal(got.get(), full[region], err_msg=str(region))
        assert reader.last_profile["through"] == 1.0
    out = cp.zeros((5, 6), dtype=arr.dtype)
    assert reader.read((2, slice(3, 8), slice(30, 36)), out=out) is out
    np.testing.assert_array_equal(out.get(), full[2, 3:8, 30:36])

    # no host threads: the device path
    device_only = ChunkedArrayReader(arr, GpuBackend(0, host_threads=0))
    np.testing.assert_array_equal(device_only.read(()).get(), full)
    assert "through" not in device_only.last_profile


def test_reads_above_the_small_read_size_stay_on_the_device(tmp_path, cp, monkeypatch):
    from linumpy_gpu.gpu import backend as backend_module
    from linumpy_gpu.gpu.backend import GpuBackend

    data = volume(shape=(40, 64, 64))
    arr = write_zarr_variant(tmp_path / "a.zarr", "v3-zstd", data, missing_fraction=0)
    monkeypatch.setattr(backend_module, "SMALL_READ_BYTES", 1000)
    reader = ChunkedArrayReader(arr, GpuBackend(0, host_threads=2))
    np.testing.assert_array_equal(reader.read(()).get(), data)
    assert "through" not in reader.last_profile
    np.testing.assert_array_equal(reader.read((1, 2)).get(), data[1, 2])  # 128 bytes
    assert reader.last_profile["through"] == 1.0

    blosc = write_zarr_variant(tmp_path / "b.zarr", "v3-blosc-lz4-shuffle", data)
    blosc_reader = ChunkedArrayReader(blosc, GpuBackend(0, host_threads=2))
    np.testing.assert_array_equal(blosc_reader.read((1, 2)).get(), blosc[1, 2])
    assert "through" not in blosc_reader.last_profile


def test_a_damaged_chunk_in_a_small_read_is_named(tmp_path, cp):
    from linumpy_gpu.gpu.backend import GpuBackend

    data = volume(shape=(32, 32, 32))
    write_zarr_variant(
        tmp_path / "a.zarr", "v3-zstd-checksum", data, chunks=(8, 32, 32), missing_fraction=0
    )
    path = tmp_path / "a.zarr" / "c" / "1" / "0" / "0"
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 2] ^= 0x5A
    path.write_bytes(bytes(raw))
    arr = zarr.open_array(str(tmp_path / "a.zarr"))
    reader = ChunkedArrayReader(arr, GpuBackend(0, host_threads=2))
    with pytest.raises(lg.ChunkDecodeError, match="c/1/0/0"):
        reader.read((slice(6, 12),))
    with pytest.warns(lg.DamagedChunkWarning, match="1 damaged"):
        got = reader.read((slice(6, 12),), on_damaged="fill").get()
    assert reader.last_profile["through"] == 1.0
    expected = data[6:12].copy()
    expected[2:] = 7
    np.testing.assert_array_equal(got, expected)


def test_zstd_frames_the_device_check_leaves_to_the_cpu(tmp_path, cp):
    """A frame of 300,000 empty blocks decodes right (on the CPU, not with device scratch
    per block); a frame with a window libzstd refuses is refused on the GPU as on the CPU."""
    from linumpy_gpu.backends.cpu import CpuBackend
    from linumpy_gpu.gpu.backend import GpuBackend
    from tests.unit.test_zstd_check import _raw_blocks_frame

    data = np.arange(400, dtype=np.uint8) % 251
    arr = zarr.create_array(
        str(tmp_path / "a.zarr"), shape=(400,), chunks=(200,), dtype="u1", fill_value=0
    )
    arr[...] = data
    chunk = tmp_path / "a.zarr" / "c"
    (chunk / "0").write_bytes(_raw_blocks_frame(data[:200].tobytes(), 300_000))
    (chunk / "1").write_bytes(_raw_blocks_frame(data[200:].tobytes(), 0, window_log=28))
    for backend in (GpuBackend(0, host_threads=0), CpuBackend()):
        reader = ChunkedArrayReader(zarr.open_array(str(tmp_path / "a.zarr")), backend)
        np.testing.assert_array_equal(cp.asnumpy(reader.read((slice(0, 200),))), data[:200])
        with pytest.raises(lg.ChunkDecodeError, match="c/1"):
            reader.read((slice(200, 400),))
