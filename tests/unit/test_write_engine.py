"""Writer behaviour on the CPU: crash safety, labels, region writes, dask input, validation."""

from __future__ import annotations

from pathlib import Path

import dask.array as da
import numpy as np
import pytest
import zarr

import linumpy_gpu as lg
from linumpy_gpu.engine.pyramid import downsample

ROOT = Path(__file__).resolve().parents[2]


def _validate_with_ome_zarr_models(path: Path, version: str) -> None:
    group = zarr.open_group(str(path), mode="r")
    if version == "0.5":
        from ome_zarr_models.v05.image import Image
    else:
        from ome_zarr_models.v04.image import Image
    Image.from_zarr(group)  # raises on anything the NGFF schema or layout rules forbid


@pytest.mark.parametrize(
    ("version", "shards"), [("0.4", None), ("0.5", None), ("0.5", (8, 32, 32))]
)
def test_written_stores_validate_and_read_back_everywhere(tmp_path, version, shards):
    data = (np.arange(16 * 60 * 70) % 999).astype("u2").reshape(16, 60, 70)
    path = tmp_path / "img.zarr"
    lg.write_ome_zarr(
        path,
        data,
        axes="zyx",
        chunks=(4, 16, 16),
        shards=shards,
        levels=3,
        version=version,
        device="cpu",
    )
    seg = (data % 3).astype("u1")
    labels = lg.write_labels(
        path,
        "seg",
        seg,
        colors={1: (255, 0, 0, 255), 2: (0, 0, 255, 128)},
        properties=[{"label-value": 1, "class": "a"}, {"label-value": 2, "class": "b"}],
        device="cpu",
    )
    _validate_with_ome_zarr_models(path, version)
    _validate_with_ome_zarr_models(path / "labels" / "seg", version)
    img = lg.open_ome_zarr(path)
    np.testing.assert_array_equal(img[0][...], data)
    assert {c.label_value: c.rgba for c in img.labels["seg"].image_label.colors} == {
        1: (255, 0, 0, 255),
        2: (0, 0, 255, 128),
    }
    np.testing.assert_array_equal(labels[0][...], seg)
    np.testing.assert_array_equal(labels[1][...], downsample(seg, (2, 2, 2), "mode"))
    for i in range(3):
        np.testing.assert_array_equal(
            zarr.open_array(str(path / str(i)), mode="r")[...], img[i][...]
        )
    from ome_zarr.io import parse_url
    from ome_zarr.reader import Reader

    nodes = list(Reader(parse_url(str(path)))())
    np.testing.assert_array_equal(np.asarray(nodes[0].data[1]), img[1][...])


def test_labels_must_be_integers_and_match_the_image(tmp_path):
    data = np.zeros((4, 8, 8), dtype="u2")
    lg.write_ome_zarr(tmp_path / "i.zarr", data, device="cpu")
    with pytest.raises(lg.WriteError, match="integer"):
        lg.write_labels(tmp_path / "i.zarr", "x", data.astype("f4"))
    with pytest.raises(lg.WriteError, match="shape"):
        lg.write_labels(tmp_path / "i.zarr", "x", np.zeros((4, 8, 9), dtype="u2"))
    with pytest.raises(lg.WriteError, match="rgba"):
        lg.write_labels(tmp_path / "i.zarr", "x", data, colors={1: (300, 0, 0, 1)})
    assert not (tmp_path / "i.zarr" / "labels" / "x").exists()


def test_region_writes_and_pyramid_update(tmp_path):
    data = (np.arange(20 * 50 * 40) % 777).astype("u2").reshape(20, 50, 40)
    for shards in (None, (8, 32, 32)):
        path = tmp_path / f"r{shards is not None}.zarr"
        lg.write_ome_zarr(
            path, data, axes="zyx", chunks=(4, 16, 16), shards=shards, levels=3, device="cpu"
        )
        with pytest.raises(PermissionError, match="r\\+"):
            lg.open_ome_zarr(path)[0][0:4] = np.zeros((4, 50, 40), dtype="u2")
        img = lg.open_ome_zarr(path, mode="r+")
        expected = data.copy()
        img[0][4:8, 0:16, 0:16] = np.full((4, 16, 16), 1, dtype="u2")  # chunk-aligned
        expected[4:8, 0:16, 0:16] = 1
        img[0][3:13, 7:45, 5] = np.full((10, 38), 2, dtype="u2")  # unaligned: read-modify-write
        expected[3:13, 7:45, 5] = 2
        img.update_pyramid((slice(3, 13), slice(0, 45), slice(0, 16)))
        np.testing.assert_array_equal(zarr.open_array(str(path / "0"))[...], expected)
        level1 = downsample(expected, (2, 2, 2), "mean")
        np.testing.assert_array_equal(zarr.open_array(str(path / "1"))[...], level1)
        np.testing.assert_array_equal(
            zarr.open_array(str(path / "2"))[...], downsample(level1, (2, 2, 2), "mean")
        )


def test_gaussian_pyramid_update_equals_a_rewrite(tmp_path):
    """A region update recomputes the coarser elements whose filter reaches into the
    region, not only those under it: the levels equal a full rewrite of the new data."""
    rng = np.random.default_rng(0)
    data = rng.integers(0, 1000, (32, 40, 24)).astype("u2")
    options = dict(axes="zyx", chunks=(8, 8, 8), levels=3, method="gaussian", device="cpu")
    lg.write_ome_zarr(tmp_path / "updated.zarr", data, **options)
    img = lg.open_ome_zarr(tmp_path / "updated.zarr", mode="r+")
    img[0][8:16, 4:20] = np.zeros((8, 16, 24), dtype="u2")
    data[8:16, 4:20] = 0
    img.update_pyramid((slice(8, 16), slice(4, 20)))
    lg.write_ome_zarr(tmp_path / "rewritten.zarr", data, **options)
    for level in ("1", "2"):
        np.testing.assert_array_equal(
            zarr.open_array(str(tmp_path / "updated.zarr" / level))[...],
            zarr.open_array(str(tmp_path / "rewritten.zarr" / level))[...],
        )


def test_dask_input(tmp_path):
    data = (np.arange(24 * 40 * 36) % 1234).astype("u2").reshape(24, 40, 36)
    img = lg.write_ome_zarr(
        tmp_path / "d.zarr",
        da.from_array(data, chunks=(5, 17, 36)),
        axes="zyx",
        chunks=(8, 16, 16),
        levels=3,
        device="cpu",
    )
    np.testing.assert_array_equal(img[0][...], data)
    np.testing.assert_array_equal(img[1][...], downsample(data, (2, 2, 2), "mean"))
    np.testing.assert_array_equal(
        img[2][...], downsample(downsample(data, (2, 2, 2), "mean"), (2, 2, 2), "mean")
    )


class _CountingBackend(lg.backends.CpuBackend):
    """The CPU backend, counting the encoded batches it hands out and gives back."""

    def __init__(self) -> None:
        super().__init__()
        self.handed_out = 0
        self.released = 0

    def encode_regions(self, *args, **kwargs):
        encoded = super().encode_regions(*args, **kwargs)
        self.handed_out += 1

        def release() -> None:
            self.released += 1

        encoded.release = release
        return encoded


@pytest.mark.parametrize("fail_after", [None, 1, 5])
def test_every_encoded_batch_is_released_even_when_a_file_write_fails(
    tmp_path, monkeypatch, fail_after
):
    """A GPU lands a batch's compressed chunks in pinned memory that the next reads and
    writes reuse: the writer gives each batch back once written, and also when writing
    a file fails (disk full), so a failed write never keeps that memory."""
    from linumpy_gpu.engine import writer

    array = zarr.create_array(
        str(tmp_path / "a.zarr"), shape=(32, 32, 32), chunks=(8, 8, 8), dtype="u2"
    )
    backend = _CountingBackend()
    engine = writer.ChunkedArrayWriter(array, backend, batch_bytes=4 * 8 * 8 * 8 * 2)
    calls = {"n": 0}
    original = writer.ChunkedArrayWriter._put

    def put(self, key, blob, *rest):
        calls["n"] += 1
        if fail_after is not None and calls["n"] > fail_after:
            raise OSError(28, "No space left on device")
        return original(self, key, blob, *rest)

    monkeypatch.setattr(writer.ChunkedArrayWriter, "_put", put)
    data = np.arange(32**3, dtype="u2").reshape(32, 32, 32)
    if fail_after is None:
        engine.write((slice(None),) * 3, data)
        np.testing.assert_array_equal(array[...], data)
        assert backend.handed_out == 16  # 64 chunks, 4 per batch
    else:
        with pytest.raises(lg.ChunkWriteError, match="No space left"):
            engine.write((slice(None),) * 3, data)
        assert backend.handed_out >= 1
    assert backend.released == backend.handed_out


@pytest.mark.parametrize("index_crc", [True, False])
def test_shards_larger_than_a_batch_are_written_as_they_encode(tmp_path, index_crc):
    """A shard larger than the writer's batch is encoded a batch of inner chunks at a time
    and appended to its file, so a write never holds a whole shard: the files read back
    equal through zarr-python, edge shards and inner chunks past the array included, with
    or without the index checksum, and every batch's memory is given back."""
    from zarr.codecs import BytesCodec, ShardingCodec, ZstdCodec

    from linumpy_gpu.engine import writer

    index_codecs = [BytesCodec()] + ([zarr.codecs.Crc32cCodec()] if index_crc else [])
    array = zarr.create_array(
        str(tmp_path / "a.zarr"),
        shape=(20, 36, 44),
        chunks=(16, 32, 32),
        serializer=ShardingCodec(
            chunk_shape=(4, 8, 8), codecs=[BytesCodec(), ZstdCodec()], index_codecs=index_codecs
        ),
        compressors=None,
        dtype="u2",
    )
    backend = _CountingBackend()
    # three inner chunks per batch: each shard of 64 inner chunks is written in 22 parts
    engine = writer.ChunkedArrayWriter(array, backend, batch_bytes=3 * 4 * 8 * 8 * 2)
    data = (np.arange(20 * 36 * 44) % 4093).astype("u2").reshape(20, 36, 44)
    engine.write((slice(None),) * 3, data)
    np.testing.assert_array_equal(array[...], data)
    from linumpy_gpu.engine.reader import ChunkedArrayReader

    np.testing.assert_array_equal(
        ChunkedArrayReader(array, lg.backends.CpuBackend()).read((slice(None),) * 3), data
    )
    assert backend.handed_out > 8 and backend.released == backend.handed_out
    # a region inside one shard: read, modified and written back in parts
    engine.write((slice(1, 3), slice(2, 5), slice(40, 44)), np.full((2, 3, 4), 7, "u2"))
    data[1:3, 2:5, 40:44] = 7
    np.testing.assert_array_equal(array[...], data)
    files = sorted(p.name for p in (tmp_path / "a.zarr").rglob("*") if p.is_file())
    assert not [f for f in files if f.endswith(".partial")]


def test_chunks_larger_than_a_batch_are_written_whole(tmp_path):
    """An unsharded chunk larger than the writer's batch is one file, written whole."""
    from linumpy_gpu.engine import writer

    array = zarr.create_array(
        str(tmp_path / "a.zarr"), shape=(20, 36, 44), chunks=(16, 32, 32), dtype="u2"
    )
    engine = writer.ChunkedArrayWriter(array, lg.backends.CpuBackend(), batch_bytes=4096)
    data = (np.arange(20 * 36 * 44) % 4093).astype("u2").reshape(20, 36, 44)
    engine.write((slice(None),) * 3, data)
    np.testing.assert_array_equal(array[...], data)
    engine.write((slice(1, 3), slice(2, 5), slice(40, 44)), np.full((2, 3, 4), 7, "u2"))
    data[1:3, 2:5, 40:44] = 7
    np.testing.assert_array_equal(array[...], data)


def test_a_shard_written_in_parts_that_fails_leaves_the_old_file(tmp_path, monkeypatch):
    """Disk full while a shard is appended part by part: the shard's previous file stays
    as it was (the new one lives under a temporary name until it is whole), nothing
    temporary is left, the error names the shard, and every batch is given back."""
    from zarr.codecs import BytesCodec, ShardingCodec, ZstdCodec

    from linumpy_gpu.engine import writer

    array = zarr.create_array(
        str(tmp_path / "a.zarr"),
        shape=(16, 32, 32),
        chunks=(16, 32, 32),
        serializer=ShardingCodec(chunk_shape=(4, 8, 8), codecs=[BytesCodec(), ZstdCodec()]),
        compressors=None,
        dtype="u2",
    )
    old = (np.arange(16 * 32 * 32) % 777).astype("u2").reshape(16, 32, 32)
    array[...] = old
    before = {p: p.read_bytes() for p in (tmp_path / "a.zarr").rglob("c/*/*/*")}
    backend = _CountingBackend()
    engine = writer.ChunkedArrayWriter(array, backend, batch_bytes=2 * 4 * 8 * 8 * 2)
    calls = {"n": 0}

    def append(f, parts, release):
        calls["n"] += 1
        try:
            if calls["n"] > 3:
                raise OSError(28, "No space left on device")
            f.writelines(parts)
        finally:
            release()

    monkeypatch.setattr(writer, "_append_parts", append)
    with pytest.raises(lg.ChunkWriteError, match="c/0/0/0.*No space left"):
        engine.write((slice(None),) * 3, np.zeros((16, 32, 32), "u2"))
    assert backend.released == backend.handed_out >= 4
    assert {p: p.read_bytes() for p in (tmp_path / "a.zarr").rglob("c/*/*/*")} == before
    assert not list((tmp_path / "a.zarr").rglob("*.partial"))
    np.testing.assert_array_equal(array[...], old)


@pytest.mark.parametrize(
    ("target", "values", "kept"),
    [
        ("f8", np.array([2**53 + 1, 7], "i8"), False),  # rounds to 2**53
        ("f8", np.array([2**63 - 1], "i8"), False),  # rounds past int64 to 2**63
        ("f8", np.array([2**64 - 1], "u8"), False),
        ("f8", np.array([2**60, -(2**53), 3], "i8"), True),  # exact however large
        ("f4", np.array([2**24 + 1], "i4"), False),
        ("f4", np.array([2**25, -(2**24), 0], "i4"), True),
        ("f2", np.array([65519], "u4"), False),  # beyond float16's largest (65504)
        ("f2", np.array([True, False]), True),
        ("f2", np.array([np.iinfo("i4").min, 1], "i4"), False),  # -inf as float16
        ("f2", np.array([np.iinfo("i8").min], "i8"), False),
        ("f2", np.array([65504, 2048], "u2"), True),  # exact, float16's largest
        ("f4", np.array([np.iinfo("i8").min], "i8"), True),  # -2**63 is a float
        ("f4", 0, True),  # a Python int that float32 holds
        ("f4", 2**24 + 1, False),
    ],
)
@pytest.mark.filterwarnings("error::RuntimeWarning")
def test_integers_written_into_a_float_array_are_kept_exactly_or_refused(
    tmp_path, target, values, kept
):
    """numpy casts int64 to float64 as 'safe', yet rounds integers beyond 2**53: a region
    write stores integers into a float array only where each reads back as written."""
    from linumpy_gpu.engine import writer

    array = zarr.create_array(str(tmp_path / "a.zarr"), shape=(4,), chunks=(4,), dtype=target)
    engine = writer.ChunkedArrayWriter(array, lg.backends.CpuBackend())
    size = np.size(values)
    region = slice(0, size) if np.ndim(values) else slice(0, 1)
    if kept:
        engine.write(region, values if np.ndim(values) else np.asarray([values]))
        stored = array[region]
        assert [int(v) for v in stored] == [int(v) for v in np.atleast_1d(values)]
    else:
        with pytest.raises(lg.WriteError, match="would not be stored exactly"):
            engine.write(region, values if np.ndim(values) else np.asarray([values]))
        assert not array[...].any()
    if not np.ndim(values):  # the scalar form: img[0][0] = value
        if kept:
            engine.write(slice(1, 2), values)
        else:
            with pytest.raises(lg.WriteError, match="would not be stored exactly"):
                engine.write(slice(1, 2), values)


@pytest.mark.parametrize("method", ["mean", "gaussian", "nearest"])
def test_float16_images_are_written_and_converted(tmp_path, method, capsys):
    """float16 volumes (which the readers read) are written, sharded too, with pyramids
    computed as for the other floats, region writes and update_pyramid; convert copies
    them."""
    from linumpy_gpu.cli import main

    rng = np.random.default_rng(0)
    data = (rng.random((20, 40, 36)) * 60000).astype("f2")
    data[0, 0, 0] = np.nan
    path = tmp_path / "half.zarr"
    img = lg.write_ome_zarr(
        path, data, levels=3, method=method, chunks=(4, 8, 8), shards=(8, 16, 16)
    )
    assert img[0].dtype == np.float16
    np.testing.assert_array_equal(img[0][...], data)
    np.testing.assert_array_equal(
        zarr.open_array(str(path / "1"))[...], downsample(data, (2, 2, 2), method)
    )
    opened = lg.open_ome_zarr(path, mode="r+")
    opened[0][0:4, 0:8, 0:8] = np.ones((4, 8, 8), "f2")
    opened.update_pyramid((slice(0, 4),))
    data[0:4, 0:8, 0:8] = 1
    np.testing.assert_array_equal(opened[1][...], downsample(data, (2, 2, 2), method))
    assert main(["convert", str(path), str(tmp_path / "out.zarr"), "--shards", "none"]) == 0
    np.testing.assert_array_equal(lg.open_ome_zarr(tmp_path / "out.zarr")[0][...], data)
