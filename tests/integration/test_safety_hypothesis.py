"""Property-based faults where the input space is large: selections, metadata fields,
write arguments and damaged bytes. Every outcome is exact: the right data, or one of
linumpy_gpu's errors, and never a change to what was on disk."""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pytest
import zarr
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from zarr.codecs import BloscCodec, GzipCodec

import linumpy_gpu as lg
from tests.helpers.safety import small_store, snapshot, volume

SHAPE = (16, 32, 32)
SETTINGS = settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    root = tmp_path_factory.mktemp("hyp")
    plain = root / "plain.ome.zarr"
    sharded = root / "sharded.ome.zarr"
    small_store(plain, levels=2)
    small_store(sharded, chunks=(4, 8, 8), shards=(8, 16, 16))
    return {"plain": plain, "sharded": sharded}


# -- selections ---------------------------------------------------------------------------

_bound = st.one_of(st.none(), st.integers(-40, 40))
_slice = st.builds(slice, _bound, _bound, st.one_of(st.none(), st.integers(-5, 5)))
_item = st.one_of(st.integers(-40, 40), _slice, st.just(Ellipsis))
_index = st.one_of(_item, st.lists(_item, min_size=0, max_size=4).map(tuple))


@SETTINGS
@given(index=_index, layout=st.sampled_from(["plain", "sharded"]))
def test_any_basic_index_reads_what_numpy_reads(stores, index, layout):
    reference = volume()
    try:
        expected = reference[index]
    except (IndexError, ValueError, TypeError):
        expected = None
    level = lg.open_ome_zarr(stores[layout])[0]
    if expected is None:
        with pytest.raises(lg.LinumpyGpuError):
            level[index]
        return
    np.testing.assert_array_equal(level[index], expected)


# -- metadata fields ----------------------------------------------------------------------

_json_value = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(2**40), 2**40),
        st.floats(allow_nan=True, allow_infinity=True),
        st.text(max_size=8),
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=8,
)


def _paths(node, prefix=()):
    """Every (path, value) inside a JSON tree."""
    yield prefix, node
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _paths(v, (*prefix, i))


def _replaced(tree, path, value):
    if not path:
        return value
    tree = json.loads(json.dumps(tree))
    node = tree
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = value
    return tree


@SETTINGS
@given(data=st.data())
def test_any_damaged_metadata_field_opens_or_raises_a_typed_error(stores, data):
    source = stores["plain"]
    attrs = json.loads((source / "zarr.json").read_text())["attributes"]
    paths = [p for p, _ in _paths(attrs)]
    path = data.draw(st.sampled_from(paths))
    value = data.draw(_json_value)
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "m.ome.zarr"
        shutil.copytree(source, copy)
        meta = json.loads((copy / "zarr.json").read_text())
        meta["attributes"] = _replaced(attrs, path, value)
        (copy / "zarr.json").write_text(json.dumps(meta, allow_nan=True))
        before = snapshot(copy)
        try:
            img = lg.open_ome_zarr(copy)
        except lg.LinumpyGpuError:
            pass
        else:
            for level in img.levels:
                expected = zarr.open_array(copy / level.path, mode="r")[...]
                np.testing.assert_array_equal(level[...], expected)
        assert snapshot(copy) == before


# -- write arguments ----------------------------------------------------------------------

_numbers = st.lists(
    st.one_of(
        st.floats(allow_nan=True, allow_infinity=True), st.integers(-3, 3), st.text(max_size=2)
    ),
    min_size=0,
    max_size=4,
)


@SETTINGS
@given(
    scale=st.one_of(st.none(), _numbers),
    translation=st.one_of(st.none(), _numbers),
    chunks=st.one_of(st.none(), st.lists(st.integers(-2, 40), min_size=0, max_size=4)),
    levels=st.one_of(
        st.integers(-1, 7), st.lists(st.lists(st.integers(0, 3), max_size=4), max_size=3)
    ),
    axes=st.one_of(st.none(), st.text(alphabet="tczyxab", min_size=0, max_size=4)),
)
def test_any_write_arguments_write_an_openable_store_or_touch_nothing(
    stores, scale, translation, chunks, levels, axes
):
    with tempfile.TemporaryDirectory() as tmp:
        target = Path(tmp) / "w.ome.zarr"
        small_store(target)
        before = snapshot(target)
        try:
            img = lg.write_ome_zarr(
                target,
                volume(),
                scale=scale,
                translation=translation,
                chunks=chunks,
                levels=levels,
                axes=axes,
                overwrite=True,
                device="cpu",
            )
        except lg.LinumpyGpuError:
            assert snapshot(target) == before
            assert sorted(p.name for p in Path(tmp).iterdir()) == ["w.ome.zarr"]
            return
        again = lg.open_ome_zarr(target)
        np.testing.assert_array_equal(again[0][...], volume())
        assert len(again) == len(img)


# -- damaged bytes ------------------------------------------------------------------------


def _damage(good: bytes, kind: str, where: int, byte: int) -> bytes:
    where = where % max(1, len(good))
    if kind == "truncate":
        return good[:where]
    if kind == "flip":
        b = bytearray(good)
        b[where] ^= byte or 1
        return bytes(b)
    if kind == "zero":
        return good[:where] + b"\x00" * (len(good) - where)
    if kind == "insert":
        return good[:where] + bytes([byte]) + good[where:]
    if kind == "garbage":
        return np.random.default_rng(where).integers(0, 256, len(good), dtype=np.uint8).tobytes()
    return good + bytes([byte]) * 7  # trailing bytes


_damages = st.tuples(
    st.sampled_from(["truncate", "flip", "zero", "insert", "garbage", "trailing"]),
    st.integers(0, 1 << 20),
    st.integers(0, 255),
)


@SETTINGS
@given(damage=_damages, layout=st.sampled_from(["plain", "sharded"]))
def test_damaged_chunks_of_our_stores_read_exactly_or_raise(stores, damage, layout):
    """Our stores carry zstd content checksums (and crc32c shard indexes): damage is
    detected or harmless, never silent wrong data."""
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "d.ome.zarr"
        shutil.copytree(stores[layout], copy)
        chunk = copy / "0" / "c" / "1" / "0" / "1"
        chunk.write_bytes(_damage(chunk.read_bytes(), *damage))
        try:
            data = lg.open_ome_zarr(copy)[0][...]
        except lg.ChunkDecodeError as exc:
            assert "c/1/0/1" in exc.key
            return
        np.testing.assert_array_equal(data, volume())


@pytest.fixture(scope="module")
def other_codec_stores(tmp_path_factory):
    root = tmp_path_factory.mktemp("codecs")
    out = {}
    for name, compressor in {
        "gzip": GzipCodec(level=5),
        "blosc-lz4": BloscCodec(cname="lz4", shuffle="shuffle"),
        "blosc-zstd": BloscCodec(cname="zstd", shuffle="bitshuffle"),
    }.items():
        path = root / f"{name}.zarr"
        group = zarr.open_group(path, mode="w", zarr_format=3)
        arr = group.create_array(
            "0", shape=SHAPE, chunks=(8, 16, 16), dtype="u2", compressors=[compressor]
        )
        arr[...] = volume()
        group.attrs.put(
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
        out[name] = path
    return out


@SETTINGS
@given(damage=_damages, codec=st.sampled_from(["gzip", "blosc-lz4", "blosc-zstd"]))
def test_damaged_chunks_of_other_codecs_never_crash(other_codec_stores, damage, codec):
    """gzip carries a CRC32: damage is detected or harmless. Blosc carries no checksum, so
    a damaged payload can decode to other values, as it does with zarr-python; what we
    guarantee is a typed error or a chunk of the right size, never a crash or a hang."""
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "o.zarr"
        shutil.copytree(other_codec_stores[codec], copy)
        chunk = copy / "0" / "c" / "1" / "0" / "1"
        chunk.write_bytes(_damage(chunk.read_bytes(), *damage))
        try:
            data = lg.open_ome_zarr(copy)[0][...]
        except lg.ChunkDecodeError as exc:
            assert "c/1/0/1" in exc.key
            return
        assert data.shape == SHAPE
        if codec == "gzip":
            np.testing.assert_array_equal(data, volume())
