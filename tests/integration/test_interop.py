"""Stores written by other tools read back pixel-equal to zarr-python, metadata as the file says."""

from __future__ import annotations

import numpy as np
import pytest
import zarr

import linumpy_gpu as lg
from linumpy_gpu.backends.cpu import CpuBackend
from linumpy_gpu.engine import ChunkedArrayReader
from tests.helpers.writers import (
    ZARR_VARIANTS,
    ngff_attrs,
    volume,
    write_ome_zarr_py,
    write_tensorstore,
    write_zarr_variant,
)

REGIONS = [
    (),
    (slice(3, 20), slice(5, 33, 3), slice(None, None, -2)),
    (5, Ellipsis, slice(-9, None)),
    (slice(None, None, 7), 0, 40),
    (slice(20, 1, -3), slice(10, 11), slice(0, 41, 40)),
]


@pytest.mark.parametrize("variant", sorted(ZARR_VARIANTS))
@pytest.mark.parametrize("dtype", ["u2", "f4"])
def test_zarr_python_variants(tmp_path, variant, dtype):
    data = volume(dtype=dtype)
    arr = write_zarr_variant(tmp_path / "a.zarr", variant, data)
    reader = ChunkedArrayReader(arr, CpuBackend())
    assert reader.layout.delegate_reason is None, reader.layout.delegate_reason
    full = arr[...]  # zarr-python's read; numpy applies steps zarr does not support (negative)
    for region in REGIONS:
        expected = full[region]
        got = reader.read(region)
        assert got.dtype == expected.dtype.newbyteorder("=")
        np.testing.assert_array_equal(got, expected, err_msg=f"{variant} {region}")


@pytest.mark.parametrize("dtype", ["i1", "u1", "i8", "u8", "f8", "bool", "c8"])
def test_dtypes(tmp_path, dtype):
    data = volume(dtype=dtype) if dtype != "c8" else (volume(dtype="f4") + 1j).astype("c8")
    arr = write_zarr_variant(tmp_path / "a.zarr", "v3-zstd", data, fill_value=0)
    np.testing.assert_array_equal(ChunkedArrayReader(arr, CpuBackend()).read(()), arr[...])


def test_nan_fill_value(tmp_path):
    data = volume(dtype="f4")
    arr = write_zarr_variant(
        tmp_path / "a.zarr", "v3-sharded-zstd", data, fill_value=np.nan, missing_fraction=0.5
    )
    got = ChunkedArrayReader(arr, CpuBackend()).read(())
    np.testing.assert_array_equal(got, arr[...])
    assert np.isnan(got).any()


@pytest.mark.parametrize("sharded", [False, True])
def test_tensorstore_zarr3(tmp_path, sharded):
    pytest.importorskip("tensorstore")
    data = volume()
    arr = write_tensorstore(tmp_path / "ts.zarr", data, sharded)
    reader = ChunkedArrayReader(arr, CpuBackend())
    assert (reader.layout.shard_shape is not None) == sharded
    for region in REGIONS:
        np.testing.assert_array_equal(reader.read(region), data[region])


@pytest.mark.parametrize("version", ["0.4", "0.5"])
def test_ome_zarr_py_writer(tmp_path, version):
    pytest.importorskip("ome_zarr")
    data = volume(shape=(2, 12, 40, 36))
    path = write_ome_zarr_py(tmp_path / "img.zarr", data, version)
    attrs = ngff_attrs(path)
    img = lg.open_ome_zarr(path)
    assert img.version == version
    ms = attrs["multiscales"][0]
    assert img.axis_names == tuple(a["name"] for a in ms["axes"])
    assert [a.type for a in img.axes] == [a.get("type") for a in ms["axes"]]
    assert len(img) == len(ms["datasets"])
    for i, ds in enumerate(ms["datasets"]):
        by_type = {t["type"]: t for t in ds["coordinateTransformations"]}
        assert img.scale(i) == tuple(by_type["scale"]["scale"])
        if "translation" in by_type:
            assert img.translation(i) == tuple(by_type["translation"]["translation"])
        expected = zarr.open_array(str(path / ds["path"]), mode="r")[...]
        np.testing.assert_array_equal(img[i].read(), expected)
    np.testing.assert_array_equal(img[0].read(), data)
    assert [c.label for c in img.channels] == ["nuclei", "membrane"]
    assert [c.color for c in img.channels] == ["0000FF", "FF8000"]
    assert img.channels[0].window == {"start": 10.0, "end": 900.0, "min": 0.0, "max": 4095.0}
    assert [c.active for c in img.channels] == [True, False]
    assert list(img.labels) == ["cells"]
    cells = img.labels["cells"]
    assert cells.image_label is not None
    colors = {c.label_value: c.rgba for c in cells.image_label.colors}
    assert colors == {1: (255, 0, 0, 255), 2: (0, 255, 0, 128)}
    assert cells.image_label.properties[0]["class"] == "nucleus"
    np.testing.assert_array_equal(cells[0].read(), (data[0] % 5).astype("u4"))


@pytest.mark.parametrize(
    ("version", "shards"), [("0.4", None), ("0.5", None), ("0.5", (8, 32, 32))]
)
def test_tensorstore_reads_what_we_write(tmp_path, version, shards):
    ts = pytest.importorskip("tensorstore")
    data = volume()
    img = lg.write_ome_zarr(
        tmp_path / "ours.zarr", data, chunks=(4, 16, 16), shards=shards, version=version, levels=2
    )
    driver = "zarr" if version == "0.4" else "zarr3"
    for level in range(2):
        spec = {
            "driver": driver,
            "kvstore": {"driver": "file", "path": str(tmp_path / "ours.zarr" / str(level))},
        }
        theirs = ts.open(spec, open=True).result().read().result()
        np.testing.assert_array_equal(theirs, img[level].read())


def test_zarr_v2_zstd_chunks_carry_checksums_without_saying_so(tmp_path):
    """zarr v2 metadata with a zstd "checksum" member is refused by tensorstore and zarrs:
    it is left out, while every frame still carries a content checksum."""
    img = lg.write_ome_zarr(tmp_path / "v2.zarr", volume(), version="0.4", levels=1)
    compressor = zarr.open_array(str(tmp_path / "v2.zarr" / "0"), mode="r").metadata.compressor
    assert compressor.get_config() in (
        {"id": "zstd", "level": 3},
        {"id": "zstd", "level": 3, "checksum": False},
    )
    assert "checksum" not in (tmp_path / "v2.zarr" / "0" / ".zarray").read_text()
    frames = [p for p in (tmp_path / "v2.zarr" / "0").iterdir() if not p.name.startswith(".")]
    assert frames
    for frame in frames:
        header = frame.read_bytes()[:5]
        assert header[:4] == b"\x28\xb5\x2f\xfd" and header[4] & 0x04  # Content_Checksum_flag
    writable = lg.open_ome_zarr(tmp_path / "v2.zarr", mode="r+")
    writable[0][0:2] = np.zeros((2, *img[0].shape[1:]), dtype=img[0].dtype)  # a region write
    reopened = lg.open_ome_zarr(tmp_path / "v2.zarr")
    for frame in frames:
        assert frame.read_bytes()[4] & 0x04
    assert not reopened[0][0:2].any()
    with pytest.raises(lg.WriteError, match="checksum=False"):
        lg.write_ome_zarr(tmp_path / "nock.zarr", volume(), version="0.4", checksum=False)
