"""Reads never hang, never allocate what a damaged header claims, never return silent wrong
data, and every failure a user can cause is one of linumpy_gpu's errors naming the path or
key, with the original failure kept as ``__cause__``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tracemalloc
import warnings
import zlib

import numcodecs
import numpy as np
import pytest
import zarr
from zarr.codecs import BloscCodec, GzipCodec

import linumpy_gpu as lg
from tests.conftest import to_numpy
from tests.helpers.safety import small_store, snapshot, volume


@pytest.fixture
def store(tmp_path):
    path = tmp_path / "r.ome.zarr"
    small_store(path, levels=2)
    return path


def _v2_store(path, compressor, data=None, filters=None):
    """A plain zarr v2 array of 16x32x32 uint16 in 8x16x16 chunks, inside an NGFF 0.4 image."""
    data = volume() if data is None else data
    root = zarr.open_group(path, mode="w", zarr_format=2)
    arr = root.create_array(
        "0",
        shape=data.shape,
        chunks=(8, 16, 16),
        dtype=data.dtype,
        compressors=compressor,
        filters=filters,
    )
    arr[...] = data
    root.attrs.put(
        {
            "multiscales": [
                {
                    "version": "0.4",
                    "axes": [{"name": a, "type": "space"} for a in "zyx"],
                    "datasets": [
                        {
                            "path": "0",
                            "coordinateTransformations": [{"type": "scale", "scale": [1, 1, 1]}],
                        }
                    ],
                }
            ]
        }
    )
    return path / "0"


# -- decompression bombs on the CPU path --------------------------------------------------


def _bomb_zstd(raw_chunk: bytes) -> bytes:
    frame = bytearray(numcodecs.Zstd().encode(raw_chunk))
    # rewrite the declared content size (8-byte field) to 64 GiB
    frame[4] = (frame[4] & 0x3F) | 0xC0 | 0x20
    return bytes(frame[:5]) + (64 << 30).to_bytes(8, "little") + bytes(frame[5 + 4 :])


def _bomb_blosc(raw_chunk: bytes) -> bytes:
    frame = bytearray(numcodecs.Blosc("lz4").encode(raw_chunk))
    frame[4:8] = (1 << 31).to_bytes(4, "little")
    return bytes(frame)


def _bomb_lz4(raw_chunk: bytes) -> bytes:
    return (1 << 31).to_bytes(4, "little") + bytes(numcodecs.LZ4().encode(raw_chunk)[4:])


def _bomb_gzip(raw_chunk: bytes) -> bytes:
    return numcodecs.GZip().encode(b"\x00" * (256 << 20))  # 256 MiB of zeros, a few hundred KiB


def _bomb_zlib(raw_chunk: bytes) -> bytes:
    return zlib.compress(b"\x00" * (256 << 20))


BOMBS = {
    "zstd": (numcodecs.Zstd(), _bomb_zstd),
    "blosc": (numcodecs.Blosc("lz4"), _bomb_blosc),
    "lz4": (numcodecs.LZ4(), _bomb_lz4),
    "gzip": (numcodecs.GZip(), _bomb_gzip),
    "zlib": (numcodecs.Zlib(), _bomb_zlib),
}


@pytest.mark.parametrize("codec", sorted(BOMBS))
def test_decompression_bombs_are_refused_before_allocating(tmp_path, codec):
    compressor, make_bomb = BOMBS[codec]
    array_dir = _v2_store(tmp_path / "bomb.zarr", compressor)
    chunk_file = array_dir / "0.0.0"
    raw = volume()[0:8, 0:16, 0:16].tobytes()
    chunk_file.write_bytes(make_bomb(raw))
    img = lg.open_ome_zarr(tmp_path / "bomb.zarr")
    tracemalloc.start()
    try:
        with pytest.raises(lg.ChunkDecodeError) as info:
            img[0][...]
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert info.value.key.endswith("0.0.0")
    assert peak < 64 << 20, f"the read allocated {peak >> 20} MiB for a {len(raw)}-byte chunk"


# -- special files ------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["fifo", "folder", "device"])
def test_a_special_file_where_a_chunk_should_be_is_a_typed_error(store, kind, device):
    chunk = store / "0" / "c" / "1" / "0" / "0"
    chunk.unlink()
    if kind == "fifo":
        os.mkfifo(chunk)
    elif kind == "folder":
        chunk.mkdir()
    else:
        chunk.symlink_to("/dev/zero")
    with pytest.raises(lg.StoreError, match="not a regular file") as info:
        lg.open_ome_zarr(store, device=device)[0][...]
    assert str(chunk) in str(info.value)


def test_a_link_to_a_missing_file_where_a_chunk_should_be_is_a_typed_error(store, device):
    """A dangling link (a git-annex or DataLad store whose content was not fetched) is a
    stored chunk whose bytes are missing, not a chunk never written: never the fill value."""
    chunk = store / "0" / "c" / "1" / "0" / "0"
    chunk.unlink()
    chunk.symlink_to("../../../.git/annex/objects/XX/SHA256E-s1234--deadbeef")
    with pytest.raises(lg.StoreError, match="does not exist") as info:
        lg.open_ome_zarr(store, device=device)[0][...]
    assert str(chunk) in str(info.value)


def test_a_special_file_in_a_shard_store_is_a_typed_error(tmp_path, device):
    path = tmp_path / "s.zarr"
    small_store(path, chunks=(4, 8, 8), shards=(8, 16, 16))
    shard = path / "0" / "c" / "0" / "0" / "0"
    shard.unlink()
    os.mkfifo(shard)
    with pytest.raises(lg.StoreError, match="not a regular file"):
        lg.open_ome_zarr(path, device=device)[0][...]


# -- one error hierarchy ------------------------------------------------------------------


def _corrupt_level_metadata(path):
    (path / "0" / "zarr.json").write_text("{not json")


def _level_metadata_wrong_shape(path):
    meta = json.loads((path / "0" / "zarr.json").read_text())
    meta["shape"] = "big"
    (path / "0" / "zarr.json").write_text(json.dumps(meta))


def _level_metadata_unknown_codec(path):
    meta = json.loads((path / "0" / "zarr.json").read_text())
    meta["codecs"].append({"name": "no-such-codec"})
    (path / "0" / "zarr.json").write_text(json.dumps(meta))


def _group_metadata_is_a_folder(path):
    (path / "zarr.json").unlink()
    (path / "zarr.json").mkdir()


def _deep_attributes(path):
    deep = "[" * 200000 + "]" * 200000
    (path / "zarr.json").write_text(
        '{"zarr_format": 3, "node_type": "group", "attributes": ' + deep + "}"
    )


def _group_metadata_is_a_list(path):
    (path / "zarr.json").write_text("[1, 2, 3]")


def _level_missing(path):
    import shutil

    shutil.rmtree(path / "1")


def _level_is_a_group(path):
    import shutil

    shutil.rmtree(path / "1")
    zarr.open_group(path / "1", mode="w", zarr_format=3)


def _edit_level_metadata(path, edit):
    meta = json.loads((path / "0" / "zarr.json").read_text())
    edit(meta)
    (path / "0" / "zarr.json").write_text(json.dumps(meta))


def _storage_transformer(path):
    _edit_level_metadata(path, lambda m: m.__setitem__("storage_transformers", [{"name": "x"}]))


def _chunk_side_zero(path):
    _edit_level_metadata(
        path, lambda m: m["chunk_grid"]["configuration"].__setitem__("chunk_shape", [0, 4, 4])
    )


def _fill_value_out_of_range(path):
    _edit_level_metadata(path, lambda m: m.__setitem__("fill_value", 70000))


BROKEN_STORES = {
    "level metadata not JSON": (_corrupt_level_metadata, lg.InvalidMetadataError),
    "level metadata wrong type": (_level_metadata_wrong_shape, lg.InvalidMetadataError),
    "level unknown codec": (_level_metadata_unknown_codec, lg.InvalidMetadataError),
    "group metadata is a folder": (_group_metadata_is_a_folder, lg.StoreError),
    "attributes nested too deep": (_deep_attributes, lg.InvalidMetadataError),
    "group metadata a JSON list": (_group_metadata_is_a_list, lg.InvalidMetadataError),
    "level missing": (_level_missing, lg.InvalidMetadataError),
    "level is a group": (_level_is_a_group, lg.InvalidMetadataError),
    "unknown storage transformer": (_storage_transformer, lg.InvalidMetadataError),
    "fill value out of the dtype's range": (_fill_value_out_of_range, lg.InvalidMetadataError),
}


@pytest.mark.parametrize("case", sorted(BROKEN_STORES))
def test_broken_stores_raise_typed_errors_naming_the_path(store, case):
    damage, error = BROKEN_STORES[case]
    damage(store)
    with pytest.raises(error) as info:
        lg.open_ome_zarr(store)
    assert str(store) in str(info.value)


def test_a_chunk_side_of_0_is_a_typed_error(store):
    """zarr 3.1 keeps the 0 (refused here as metadata); zarr 3.4 reads it as 1 with a
    warning, and then the chunks on disk do not fit it: either way a typed error."""
    _chunk_side_zero(store)
    with warnings.catch_warnings(), pytest.raises(lg.LinumpyGpuError) as info:
        warnings.simplefilter("ignore")
        lg.open_ome_zarr(store)[0][...]
    assert isinstance(info.value, lg.InvalidMetadataError | lg.ChunkDecodeError)


def test_a_read_larger_than_host_memory_is_a_typed_error(store):
    _edit_level_metadata(store, lambda m: m.__setitem__("shape", [2**40, 32, 32]))
    with pytest.raises(lg.HostMemoryError, match="to_dask"):
        lg.open_ome_zarr(store, device="cpu")[0][...]


def test_reads_beyond_the_memory_available_are_refused_before_allocating(store, monkeypatch):
    """The system hands out memory it has not got and kills the process once it is
    touched: reads (a region set too, whose outputs are made before any is read) larger
    than the memory available are refused up front."""
    from linumpy_gpu.backends import base

    level = lg.open_ome_zarr(store, device="cpu")[0]
    monkeypatch.setattr(base, "available_host_memory", lambda: level.nbytes // 2)
    with pytest.raises(lg.HostMemoryError, match="memory available"):
        level[...]
    half = (slice(0, level.shape[0] // 2 + 1),)
    with pytest.raises(lg.HostMemoryError, match="memory available"):
        level.read_regions([half, half])
    np.testing.assert_array_equal(level[0:2], volume()[0:2])  # what fits still reads


def test_permission_denied_on_a_chunk(store, monkeypatch):
    real_open = os.open
    target = str(store / "0" / "c" / "1")

    def deny(path, *args, **kwargs):
        if str(path).startswith(target):
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", deny)
    with pytest.raises(lg.StorePermissionError, match="permission denied") as info:
        lg.open_ome_zarr(store)[0][...]
    assert isinstance(info.value, PermissionError)
    assert isinstance(info.value.__cause__, PermissionError)


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their permissions")
def test_permission_denied_by_file_modes(store):
    (store / "0" / "c" / "1" / "0" / "0").chmod(0)
    with pytest.raises(lg.StorePermissionError):
        lg.open_ome_zarr(store)[0][...]


LOOKUPS = {
    "level index too large": lambda img: img[3],
    "level index too negative": lambda img: img[-3],
    "level name unknown": lambda img: img["nope"],
    "level of wrong type": lambda img: img[1.0],
    "scale of a missing level": lambda img: img.scale(7),
    "translation of a missing name": lambda img: img.translation("x"),
    "missing label": lambda img: img.labels["cells"],
    "dask of a missing level": lambda img: img.to_dask(5),
}


@pytest.mark.parametrize("case", sorted(LOOKUPS))
def test_missing_members_raise_not_found_errors_listing_what_exists(store, case):
    img = lg.open_ome_zarr(store)
    with pytest.raises(lg.NotFoundError) as info:
        LOOKUPS[case](img)
    assert isinstance(info.value, KeyError) and isinstance(info.value, IndexError)
    assert str(store) in str(info.value)
    assert str(info.value) == info.value.args[0]  # not KeyError's quoted repr


def test_levels_by_name_and_negative_index(store):
    img = lg.open_ome_zarr(store)
    assert img["1"] is img[1] is img[-1]
    assert img.scale("1") == img.scale(1) == (2.0, 2.0, 2.0)
    assert "cells" not in img.labels


ARGUMENTS = {
    "device tpu": lambda p: lg.open_ome_zarr(p, device="tpu"),
    "device negative": lambda p: lg.open_ome_zarr(p, device=-1),
    "device bool": lambda p: lg.open_ome_zarr(p, device=True),
    "device cuda:x": lambda p: lg.open_ome_zarr(p, device="cuda:x"),
    "on_damaged": lambda p: lg.open_ome_zarr(p)[0].read(on_damaged="ignore"),
    "path of wrong type": lambda p: lg.open_ome_zarr(3.5),
    "storage options on a path object": lambda p: lg.open_ome_zarr(
        zarr.storage.LocalStore(p), storage_options={"anon": True}
    ),
}


@pytest.mark.parametrize("case", sorted(ARGUMENTS))
def test_bad_arguments_raise_invalid_argument_errors(store, case):
    with pytest.raises(lg.InvalidArgumentError) as info:
        ARGUMENTS[case](store)
    assert isinstance(info.value, ValueError)


def test_zarr_groups_and_stores_are_accepted(store):
    by_group = lg.open_ome_zarr(zarr.open_group(store, mode="r"))
    by_store = lg.open_ome_zarr(zarr.storage.LocalStore(store, read_only=True))
    np.testing.assert_array_equal(by_group[0][...], volume())
    np.testing.assert_array_equal(by_store[0][...], volume())
    assert by_group.path == str(store)


def test_a_writable_zarr_group_opened_read_only_refuses_writes(store):
    """mode="r" holds for a zarr.Group too, whatever mode the group was opened in."""
    group = zarr.open_group(store, mode="r+")
    img = lg.open_ome_zarr(group, mode="r")
    with pytest.raises(lg.StorePermissionError):
        img[0][0, 0, 0] = 1
    with pytest.raises(lg.StorePermissionError):
        img.update_pyramid()
    np.testing.assert_array_equal(lg.open_ome_zarr(store)[0][...], volume())
    lg.open_ome_zarr(group, mode="r+")[0][0, 0, 0] = 7
    assert lg.open_ome_zarr(store)[0][0, 0, 0] == 7


def test_a_zarr_array_is_not_an_image(store):
    with pytest.raises(lg.NotOmeZarrError, match="array"):
        lg.open_ome_zarr(zarr.open_array(store / "0", mode="r"))


def test_missing_paths_and_plain_folders(tmp_path):
    with pytest.raises(lg.StoreNotFoundError) as info:
        lg.open_ome_zarr(tmp_path / "nothing.zarr")
    assert isinstance(info.value, FileNotFoundError)
    (tmp_path / "plain").mkdir()
    with pytest.raises(lg.StoreNotFoundError, match="no zarr group"):
        lg.open_ome_zarr(tmp_path / "plain")
    (tmp_path / "file.zarr").write_text("x")
    with pytest.raises(lg.StoreError, match="is a file"):
        lg.open_ome_zarr(tmp_path / "file.zarr")


def test_selection_errors_stay_short(store):
    mask = np.ones((16, 32, 32), bool)
    with pytest.raises(lg.SelectionError) as info:
        lg.open_ome_zarr(store)[0][mask]
    assert len(str(info.value)) < 300


def test_a_store_removed_after_opening_says_so(store):
    import shutil

    level = lg.open_ome_zarr(store)[0]
    shutil.rmtree(store)
    with pytest.raises(lg.StoreError, match="was removed or replaced since it was opened"):
        level[...]


@pytest.mark.parametrize("step", [2**63, -(2**63), 10**30, 2**63 - 1])
def test_steps_beyond_64_bits_select_as_numpy_does(store, step):
    level = lg.open_ome_zarr(store)[0]
    np.testing.assert_array_equal(level[:, ::step], volume()[:, ::step])


# -- warnings point at the caller ---------------------------------------------------------


def test_warnings_point_at_the_callers_line(store, tmp_path):
    # a damaged chunk read with on_damaged="fill" warns
    chunk = store / "0" / "c" / "1" / "0" / "0"
    chunk.write_bytes(b"garbage")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        lg.open_ome_zarr(store)[0].read(on_damaged="fill")
    damaged = [w for w in caught if issubclass(w.category, lg.DamagedChunkWarning)]
    assert damaged and damaged[0].filename == __file__
    # a metadata warning (a unit NGFF does not know) at open
    meta = json.loads((store / "zarr.json").read_text())
    meta["attributes"]["ome"]["multiscales"][0]["axes"][0]["unit"] = "parsecs"
    (store / "zarr.json").write_text(json.dumps(meta))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        lg.open_ome_zarr(store)
    metadata = [w for w in caught if issubclass(w.category, lg.MetadataWarning)]
    assert metadata and all(w.filename == __file__ for w in metadata)


# -- bioformats2raw in NGFF 0.5 --------------------------------------------------------------


@pytest.mark.parametrize("listed", [True, False])
def test_bioformats2raw_series_in_ngff_05(tmp_path, listed):
    root_path = tmp_path / "b2r.ome.zarr"
    root = zarr.open_group(root_path, mode="w", zarr_format=3)
    root.attrs.put({"ome": {"version": "0.5", "bioformats2raw.layout": 3}})
    for i in range(2):
        small_store(root_path / str(i), volume(seed=i))
    if listed:
        ome = zarr.open_group(root_path / "OME", mode="w", zarr_format=3)
        ome.attrs.put({"ome": {"version": "0.5", "series": ["1", "0"]}})
    series = lg.open_ome_zarr(root_path)
    assert isinstance(series, lg.SeriesCollection)
    assert series.series_paths == (["1", "0"] if listed else ["0", "1"])
    first = 1 if listed else 0
    np.testing.assert_array_equal(series[0][0][...], volume(seed=first))
    with pytest.raises(lg.NotFoundError):
        series[2]


# -- torn reads ---------------------------------------------------------------------------

_ALTERNATING_WRITER = """
import sys, numpy as np, linumpy_gpu as lg
img = lg.open_ome_zarr(sys.argv[1], mode="r+")
shape = img[0].shape
print("ready", flush=True)
k = 0
while True:
    img[0][...] = np.full(shape, 1000 + (k % 2), "u2")
    k += 1
"""


@pytest.mark.parametrize("layout", ["chunks", "shards"])
def test_reads_during_rewrites_see_whole_old_or_new_units(tmp_path, layout, device):
    path = tmp_path / "torn.ome.zarr"
    kwargs = {"chunks": (4, 8, 8)}
    if layout == "shards":
        kwargs["shards"] = (8, 16, 16)
    small_store(path, np.full((16, 32, 32), 1000, "u2"), **kwargs)
    unit = kwargs.get("shards", kwargs["chunks"])
    proc = subprocess.Popen(
        [sys.executable, "-c", _ALTERNATING_WRITER, str(path)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout.readline().strip() == "ready"
        img = lg.open_ome_zarr(path, device=device)
        for _ in range(300):
            data = to_numpy(img[0][...])
            for index in np.ndindex(*(n // u for n, u in zip(data.shape, unit, strict=True))):
                part = data[
                    tuple(slice(i * u, (i + 1) * u) for i, u in zip(index, unit, strict=True))
                ]
                values = np.unique(part)
                assert len(values) == 1 and values[0] in (1000, 1001), (index, values)
    finally:
        proc.kill()
        proc.wait()


# -- damaged bytes on our own writes --------------------------------------------------------


@pytest.mark.parametrize("damage", ["index", "truncated", "empty", "entry"])
def test_a_damaged_shard_is_named_or_filled_and_the_others_read(tmp_path, device, damage):
    """Damage to a shard as a whole (its index fails its checksum, the file is cut short
    or empty, an index entry points past any file): ChunkDecodeError naming the shard, or
    with on_damaged="fill" its chunks filled, a warning, and every other shard as stored."""
    path = tmp_path / "s.ome.zarr"
    data = volume((16, 32, 32))
    small_store(path, data, chunks=(4, 8, 8), shards=(8, 16, 16), levels=1)
    shard = path / "0" / "c" / "1" / "0" / "1"
    good = shard.read_bytes()
    index_bytes = 2 * 2 * 2 * 16 + 4  # 8 inner chunks: (offset, nbytes) each, then crc32c
    if damage == "index":
        shard.write_bytes(good[:-5] + bytes([good[-5] ^ 0xFF]) + good[-4:])
    elif damage == "truncated":
        shard.write_bytes(good[len(good) // 2 :])
    elif damage == "empty":
        shard.write_bytes(b"")
    else:
        import google_crc32c

        index = np.frombuffer(good[-index_bytes:-4], "<u8").copy()
        index[2 * 6] = 1 << 63  # the offset of inner chunk 6: (1, 1, 0) in C order
        raw = index.tobytes()
        shard.write_bytes(
            good[:-index_bytes] + raw + google_crc32c.value(raw).to_bytes(4, "little")
        )
    level = lg.open_ome_zarr(path, device=device)[0]
    with pytest.raises(lg.ChunkDecodeError) as info:
        level[...]
    assert "c/1/0/1" in info.value.key
    with pytest.warns(lg.DamagedChunkWarning, match="c/1/0/1"):
        got = to_numpy(level.read(on_damaged="fill"))
    expected = data.copy()
    if damage == "entry":
        expected[12:16, 8:16, 16:24] = 0
    else:
        expected[8:16, 0:16, 16:32] = 0
    np.testing.assert_array_equal(got, expected)


def test_every_damaged_chunk_is_detected_or_harmless(tmp_path, device):
    """Flip each byte position class of a zstd+checksum chunk: the read is exact or raises
    ChunkDecodeError naming the chunk, never silently different."""
    path = tmp_path / "d.ome.zarr"
    small_store(path)
    chunk = path / "0" / "c" / "1" / "0" / "0"
    good = chunk.read_bytes()
    rng = np.random.default_rng(1)
    for position in sorted(set(rng.integers(0, len(good), 120).tolist()) | {0, 4, len(good) - 1}):
        for flip in (0x01, 0x80, 0xFF):
            bad = bytearray(good)
            bad[position] ^= flip
            chunk.write_bytes(bytes(bad))
            try:
                data = to_numpy(lg.open_ome_zarr(path, device=device)[0][...])
            except lg.ChunkDecodeError as exc:
                assert exc.key.endswith("c/1/0/0")
                continue
            np.testing.assert_array_equal(data, volume())
    for size in (0, 1, 4, 12, len(good) // 2, len(good) - 1):
        chunk.write_bytes(good[:size])
        with pytest.raises(lg.ChunkDecodeError):
            lg.open_ome_zarr(path, device=device)[0][...]


def test_arrays_zarr_python_decodes_are_read_into_the_output(tmp_path):
    """No second copy of the result: zarr-python decodes straight into the output."""
    data = np.random.default_rng(3).integers(0, 4000, (64, 256, 256)).astype("u2")
    _v2_store(tmp_path / "f.zarr", numcodecs.Zstd(), data, filters=[numcodecs.Delta("u2")])
    level = lg.open_ome_zarr(tmp_path / "f.zarr", device="cpu")[0]
    assert level._reader.layout.delegate_reason is not None
    out = np.empty((64, 256, 256), "u2")
    tracemalloc.start()
    try:
        level.read(out=out)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    np.testing.assert_array_equal(out, data)
    assert peak < data.nbytes, peak  # a second copy would be one result more
    strided = np.zeros((64, 256, 512), "u2")[:, :, ::2]
    level.read(out=strided)
    np.testing.assert_array_equal(strided, data)


@pytest.mark.parametrize(
    "compressor",
    [numcodecs.Zstd(), None, numcodecs.GZip(), numcodecs.BZ2()],
    ids=["zstd", "none", "gzip", "bz2"],
)
def test_damaged_chunks_of_arrays_zarr_python_decodes_are_named(tmp_path, compressor):
    """Arrays the engine hands to zarr-python (here: v2 filters) report a damaged chunk as
    the engine does: a ChunkDecodeError naming it, or the fill value and a warning."""
    data = volume()
    level = _v2_store(tmp_path / "f.zarr", compressor, data, filters=[numcodecs.Delta("u2")])
    (level / "1.0.1").write_bytes(b"\x00damaged\xff" * 3)
    image = lg.open_ome_zarr(tmp_path / "f.zarr", device="cpu")
    assert image[0]._reader.layout.delegate_reason is not None
    with pytest.raises(lg.ChunkDecodeError) as info:
        image[0][...]
    assert info.value.key == "1.0.1"
    with pytest.warns(lg.DamagedChunkWarning, match="1.0.1"):
        got = image[0].read(on_damaged="fill")
    expected = data.copy()
    expected[8:16, 0:16, 16:32] = 0
    np.testing.assert_array_equal(got, expected)
    np.testing.assert_array_equal(image[0][0:8], data[0:8])  # the other chunks read as before


@pytest.mark.parametrize(
    "compressor",
    [BloscCodec(cname="lz4", shuffle="shuffle"), GzipCodec(level=5)],
    ids=["blosc", "gzip"],
)
def test_truncated_chunks_of_other_codecs_are_detected(tmp_path, compressor):
    path = tmp_path / "o.zarr"
    root = zarr.open_group(path, mode="w", zarr_format=3)
    arr = root.create_array(
        "0", shape=(16, 32, 32), chunks=(8, 16, 16), dtype="u2", compressors=[compressor]
    )
    arr[...] = volume()
    root.attrs.put(
        {
            "ome": {
                "version": "0.5",
                "multiscales": [
                    {
                        "axes": [{"name": a, "type": "space"} for a in "zyx"],
                        "datasets": [
                            {
                                "path": "0",
                                "coordinateTransformations": [
                                    {"type": "scale", "scale": [1, 1, 1]}
                                ],
                            }
                        ],
                    }
                ],
            }
        }
    )
    chunk = path / "0" / "c" / "1" / "0" / "0"
    good = chunk.read_bytes()
    for size in (0, 3, 15, len(good) // 2, len(good) - 1):
        chunk.write_bytes(good[:size])
        with pytest.raises(lg.ChunkDecodeError):
            lg.open_ome_zarr(path)[0][...]
    assert snapshot(path)  # the store itself is still there


def _read_in_child(path, queue):
    level = lg.open_ome_zarr(path)[0]
    queue.put(float(level[...].astype("f8").sum()))


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_child_forked_after_reads_reads_too(tmp_path):
    """multiprocessing's 'fork' (the default on Linux before Python 3.14) copies the
    parent's thread pools without their threads: the child must make its own."""
    import multiprocessing

    path = tmp_path / "f.ome.zarr"
    small_store(path)
    expected = float(lg.open_ome_zarr(path)[0][...].astype("f8").sum())  # pools started
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_read_in_child, args=(str(path), queue))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # fork with threads running
        child.start()
    child.join(600)  # a guard against the hang this test is about, not a speed limit
    assert child.exitcode == 0
    assert queue.get(timeout=60) == expected


def _plate(path):
    """A one-well NGFF 0.5 plate written by ome-zarr-py: its well group at A/1."""
    from ome_zarr.format import FormatV05
    from ome_zarr.writer import write_image, write_plate_metadata, write_well_metadata

    group = zarr.open_group(str(path), mode="w", zarr_format=3)
    write_plate_metadata(group, ["A"], ["1"], ["A/1"], fmt=FormatV05())
    well = group.require_group("A").require_group("1")
    write_well_metadata(well, [{"path": "0"}], fmt=FormatV05())
    write_image(
        volume((8, 8)), well.require_group("0"), axes="yx", fmt=FormatV05(), scale_factors=()
    )
    return path


@pytest.mark.parametrize("damage", ["{not json", "[1]", '{"zarr_format": 7, "node_type": "group"}'])
def test_damaged_groups_between_an_image_and_its_parts_are_typed_errors(tmp_path, damage):
    """The labels group, a label image, a plate's well and a bioformats2raw collection's
    OME group: metadata zarr refuses there is an InvalidMetadataError naming the node."""
    pytest.importorskip("ome_zarr", reason="ome-zarr-py writes the plate")
    image = tmp_path / "img.ome.zarr"
    small_store(image, levels=1)
    lg.write_labels(image, "cells", np.zeros((16, 32, 32), np.uint8))
    (image / "labels" / "cells" / "zarr.json").write_text(damage)
    with pytest.raises(lg.InvalidMetadataError, match="labels/cells"):
        lg.open_ome_zarr(image).labels["cells"]
    (image / "labels" / "zarr.json").write_text(damage)
    with pytest.raises(lg.InvalidMetadataError, match="labels"):
        _ = lg.open_ome_zarr(image).labels

    plate = _plate(tmp_path / "plate.zarr")
    (plate / "A" / "1" / "zarr.json").write_text(damage)
    with pytest.raises(lg.InvalidMetadataError, match="A/1"):
        lg.open_ome_zarr(plate)["A/1"]

    collection = tmp_path / "b2r.zarr"
    root = zarr.open_group(str(collection), mode="w", zarr_format=3)
    root.attrs["ome"] = {"version": "0.5", "bioformats2raw.layout": 3}
    small_store(collection / "0", levels=1)
    (collection / "OME").mkdir()
    (collection / "OME" / "zarr.json").write_text(damage)
    with pytest.raises(lg.InvalidMetadataError, match="OME"):
        lg.open_ome_zarr(collection)


def test_a_labels_node_that_is_an_array_holds_no_label_images(tmp_path):
    image = tmp_path / "img.ome.zarr"
    small_store(image, levels=1)
    zarr.create_array(str(image / "labels"), shape=(2,), dtype="u1").attrs["labels"] = ["c"]
    with pytest.warns(lg.MetadataWarning, match="an array, not a labels group"):
        labels = lg.open_ome_zarr(image).labels
    assert labels.names == ()
    with pytest.raises(lg.NotFoundError):
        labels["c"]
