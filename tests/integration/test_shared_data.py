"""Every store under ../shared/data: valid ones read like zarr-python, invalid ones fail clearly."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
import zarr

import linumpy_gpu as lg

VALID_IMAGES = [
    "valid/image-01.zarr",
    "valid/image-02.zarr",
    "valid/image-03.zarr",
    "valid/image-04.zarr",
]
INVALID = {
    "invalid/image-01.zarr": (lg.NotOmeZarrError, "multiscales"),
    "invalid/image-02.zarr": (lg.InvalidMetadataError, "multiscales"),
    "invalid/image-03.zarr": (lg.InvalidMetadataError, "multiscales[0].datasets[0].path"),
    "invalid/image-04.zarr": (lg.InvalidMetadataError, "multiscales[0].datasets[1].path"),
}


def _examples(shared_data):
    return shared_data / "ome-zarr-examples" / "data"


def _zattrs(path):
    return json.loads((path / ".zattrs").read_text())


@pytest.mark.parametrize("name", VALID_IMAGES)
def test_valid_images_match_zarr_and_their_metadata(shared_data, name):
    path = _examples(shared_data) / name
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        img = lg.open_ome_zarr(path)
    attrs = _zattrs(path)["multiscales"][0]
    assert img.version == "0.4"
    assert [a.name for a in img.axes] == [a["name"] for a in attrs["axes"]]
    assert [a.unit for a in img.axes] == [a.get("unit") for a in attrs["axes"]]
    assert len(img.levels) == len(attrs["datasets"])
    for i, ds in enumerate(attrs["datasets"]):
        scale = next(t["scale"] for t in ds["coordinateTransformations"] if t["type"] == "scale")
        assert img.scale(i) == tuple(scale)
        expected = zarr.open_array(str(path / ds["path"]), mode="r")
        got = img[i].read()
        assert isinstance(got, np.ndarray)
        assert got.dtype == expected.dtype
        np.testing.assert_array_equal(got, expected[...])
        assert img[i].chunks == expected.chunks
        assert img[i].codecs[0].startswith("blosc(cname=lz4")
    assert list(img.labels) == []


def test_valid_image_02_has_real_chunks(shared_data):
    img = lg.open_ome_zarr(_examples(shared_data) / "valid/image-02.zarr")
    data = img[0][:]
    assert np.count_nonzero(data) > 0, "image-02 holds real Blosc-LZ4 chunks"


@pytest.mark.parametrize(("name", "expected"), INVALID.items())
def test_invalid_stores_raise_documented_error_naming_the_field(shared_data, name, expected):
    error, field = expected
    path = _examples(shared_data) / name
    with pytest.raises(error) as info:
        lg.open_ome_zarr(path)
    assert isinstance(info.value, lg.InvalidMetadataError)
    assert info.value.field == field
    assert str(path) in str(info.value)


def test_warning_store_opens_with_a_metadata_warning(shared_data):
    path = _examples(shared_data) / "warning/image-01.zarr"
    with pytest.warns(lg.MetadataWarning, match="different dtypes"):
        img = lg.open_ome_zarr(path)
    assert [str(lv.dtype) for lv in img.levels] == ["int64", "float64"]
    for lv in img.levels:
        np.testing.assert_array_equal(lv[:], zarr.open_array(str(path / lv.path), mode="r")[...])


def test_plate_layout_matches_the_file(shared_data):
    path = _examples(shared_data) / "valid/plate-01.zarr"
    attrs = _zattrs(path)["plate"]
    with pytest.warns(lg.MetadataWarning, match="rowIndex/columnIndex"):
        plate = lg.open_ome_zarr(path)
    assert isinstance(plate, lg.Plate)
    assert plate.name == attrs["name"]
    assert plate.rows == tuple(r["name"] for r in attrs["rows"])
    assert plate.columns == tuple(c["name"] for c in attrs["columns"])
    assert [w.path for w in plate.wells] == [w["path"] for w in attrs["wells"]]
    for w in plate.wells:
        assert w.path == f"{w.row}/{w.column}"
        well = plate[w.path]
        well_attrs = _zattrs(path / w.path)["well"]
        assert [f.path for f in well.fields] == [im["path"] for im in well_attrs["images"]]
        img = well.image(0)
        assert img.axis_names == ("y", "x")
        expected = zarr.open_array(str(path / w.path / "0" / "0"), mode="r")
        np.testing.assert_array_equal(img[0][:], expected[...])  # no chunks stored: fill value
    assert plate.image("B", "2")[0].shape == (1000, 1000)


@pytest.mark.parametrize(("name", "version"), [("v1", "0.1"), ("v2", "0.2")])
def test_ome_zarr_py_legacy_versions(shared_data, name, version):
    path = shared_data / "ome-zarr-py-tests" / "tests" / "data" / name
    img = lg.open_ome_zarr(path)
    assert img.version == version
    assert img.axis_names == ("t", "c", "z", "y", "x")
    expected = zarr.open_array(str(path / "0"), mode="r")[...]
    got = img[0][:]
    np.testing.assert_array_equal(got, expected)
    np.testing.assert_array_equal(img[0][0, 1, 0, 3:9:2, ::-1], expected[0, 1, 0, 3:9:2, ::-1])
