"""NGFF 0.6 through the public API: stores other tools write (ngff-zarr 0.50, in 0.4, 0.5
and 0.6 for the same image) read the same data and metadata on every device; what we
write as 0.6 ngff-zarr reads back; levels placed by affine transformations, rotations or
fields give their matrices, resample, or refuse as documented; scenes; labels."""

from __future__ import annotations

import json

import numpy as np
import pytest
import zarr

import linumpy_gpu as lg
from tests.conftest import to_numpy


def _volume(shape=(8, 24, 32), seed=0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.integers(0, 4000, size=shape).astype("u2")


@pytest.fixture(scope="module")
def ngff_zarr_images(tmp_path_factory):
    """The same image written by ngff-zarr in 0.4, 0.5 and 0.6: {version: path}."""
    nz = pytest.importorskip("ngff_zarr", reason="ngff-zarr writes the reference stores")
    root = tmp_path_factory.mktemp("nz")
    image = nz.to_ngff_image(
        _volume(),
        dims=["z", "y", "x"],
        scale={"z": 2.0, "y": 0.5, "x": 0.25},
        translation={"z": 10.0, "y": 1.0, "x": -3.0},
        axes_units={"z": "micrometer", "y": "micrometer", "x": "micrometer"},
    )
    multiscales = nz.to_multiscales(image, scale_factors=[2], method=nz.Methods.ITKWASM_BIN_SHRINK)
    out = {}
    for version in ("0.4", "0.5", "0.6"):
        path = root / f"img-{version}.ome.zarr"
        nz.to_ngff_zarr(str(path), multiscales, version=version)
        out[version] = path
    return out


def test_ngff_zarr_04_05_06_read_equal_on_every_device(ngff_zarr_images, device):
    images = {v: lg.open_ome_zarr(p, device=device) for v, p in ngff_zarr_images.items()}
    reference = images["0.4"]
    for version, img in images.items():
        assert img.version == version
        assert img.axes == reference.axes and img.axis_names == ("z", "y", "x")
        assert [a.unit for a in img.axes] == ["micrometer"] * 3
        assert len(img) == len(reference) == 2
        assert img.exact
        for level in range(len(img)):
            assert img.scale(level) == reference.scale(level)
            assert img.translation(level) == reference.translation(level)
            expected = zarr.open_array(ngff_zarr_images[version] / img[level].path, mode="r")[...]
            np.testing.assert_array_equal(to_numpy(img[level][...]), expected)
            np.testing.assert_array_equal(
                to_numpy(img[level][...]), to_numpy(reference[level][...])
            )
    six = images["0.6"]
    assert six.coordinate_system == "intrinsic"
    assert img.scale(0) == (2.0, 0.5, 0.25) and img.translation(0) == (10.0, 1.0, -3.0)
    matrix = six.matrix(0)
    np.testing.assert_array_equal(np.diag(matrix)[:3], [2.0, 0.5, 0.25])
    np.testing.assert_array_equal(matrix[:3, 3], [10.0, 1.0, -3.0])
    assert six["scale0/image"] is six[0]


@pytest.mark.parametrize(
    ("version", "shards"),
    [("0.4", None), ("0.5", None), ("0.5", (4, 16, 16)), ("0.6", None), ("0.6", (4, 16, 16))],
)
def test_what_we_write_ngff_zarr_reads_back(tmp_path, version, shards):
    nz = pytest.importorskip("ngff_zarr", reason="ngff-zarr reads what we write")
    data = _volume()
    kwargs = {"chunks": (4, 8, 8)}
    if shards:
        kwargs["shards"] = shards
    img = lg.write_ome_zarr(
        tmp_path / "ours.ome.zarr",
        data,
        version=version,
        axes="zyx",
        units=["micrometer"] * 3,
        scale=(2.0, 0.5, 0.5),
        translation=(1.0, -2.0, 3.0),
        levels=2,
        device="cpu",
        **kwargs,
    )
    assert img.version == version and img.exact
    theirs = nz.from_ngff_zarr(str(tmp_path / "ours.ome.zarr"))
    assert tuple(theirs.images[0].dims) == ("z", "y", "x")
    assert {theirs.images[0].axes_units[d] for d in "zyx"} == {"micrometer"}
    assert len(theirs.images) == 2
    for level, image in enumerate(theirs.images):
        np.testing.assert_array_equal(np.asarray(image.data), img[level][...])
        assert tuple(image.scale[d] for d in "zyx") == img.scale(level)
        assert tuple(image.translation[d] for d in "zyx") == img.translation(level)
    np.testing.assert_array_equal(img[0][...], data)


def _store_with_level_transform(path, transform: dict, extra_arrays=None) -> np.ndarray:
    """A one-level 0.6 image whose level is placed by ``transform`` (JSON)."""
    data = _volume((4, 6, 8), seed=3)
    root = zarr.open_group(path, mode="w", zarr_format=3)
    arr = root.create_array("0", shape=data.shape, chunks=(2, 6, 8), dtype=data.dtype)
    arr[...] = data
    for name, values in (extra_arrays or {}).items():
        root.create_array(name, data=np.asarray(values, dtype="f8"))
    axes = [{"name": a, "type": "space", "unit": "micrometer"} for a in "zyx"]
    root.attrs.put(
        {
            "ome": {
                "version": "0.6",
                "multiscales": [
                    {
                        "coordinateSystems": [{"name": "world", "axes": axes}],
                        "datasets": [
                            {
                                "path": "0",
                                "coordinateTransformations": [
                                    {
                                        **transform,
                                        "input": {"path": "0"},
                                        "output": {"name": "world"},
                                    }
                                ],
                            }
                        ],
                    }
                ],
            }
        }
    )
    return data


AXIS_SWAP = [[0, 1, 0, 0], [1, 0, 0, 0], [0, 0, 1, 0]]  # z <- y, y <- z: a rotation by 90 degrees


@pytest.mark.parametrize("stored", ["inline", "array"])
def test_a_level_placed_by_an_affine_exposes_its_matrix_and_resamples(tmp_path, stored, device):
    path = tmp_path / "affine.ome.zarr"
    matrix = [[1, 0, 0, 2], [0, 1, 0, 0], [0, 0, 1, -1]]  # a translation by whole voxels
    if stored == "inline":
        data = _store_with_level_transform(path, {"type": "affine", "affine": matrix})
    else:
        data = _store_with_level_transform(
            path, {"type": "affine", "path": "params/affine"}, {"params/affine": matrix}
        )
    with pytest.warns(lg.MetadataWarning):
        img = lg.open_ome_zarr(path, device=device)
    expected = np.eye(4)
    expected[:3] = matrix
    np.testing.assert_array_equal(img.matrix(0), expected)
    out = img[0].resample(order=0)
    assert out.origin == (2.0, 0.0, -1.0) and out.spacing == (1.0, 1.0, 1.0)
    np.testing.assert_array_equal(to_numpy(out.data), data)


def test_a_rotated_level_resamples_to_the_rotated_volume(tmp_path, device):
    path = tmp_path / "rot.ome.zarr"
    data = _store_with_level_transform(path, {"type": "affine", "affine": AXIS_SWAP})
    with pytest.warns(lg.MetadataWarning):
        img = lg.open_ome_zarr(path, device=device)
    assert not img.exact and not img[0].exact
    assert "placed by more than a scale" in repr(img)
    out = img[0].resample(order=0)
    assert out.data.shape == (6, 4, 8)
    np.testing.assert_array_equal(to_numpy(out.data), np.swapaxes(data, 0, 1))
    # a region of the level: the part of the rotated volume it covers
    part = img[0].resample(order=0, region=(slice(1, 3),))
    np.testing.assert_array_equal(to_numpy(part.data), np.swapaxes(data[1:3], 0, 1))
    assert part.origin == (0.0, 1.0, 0.0)


def test_a_level_placed_by_a_displacement_field_refuses_to_resample(tmp_path):
    path = tmp_path / "field.ome.zarr"
    _store_with_level_transform(
        path,
        {
            "type": "sequence",
            "transformations": [
                {"type": "scale", "scale": [1, 1, 1]},
                {"type": "displacements", "path": "field", "interpolation": "linear"},
            ],
        },
        {"field": np.zeros((4, 6, 8, 3))},
    )
    with pytest.warns(lg.MetadataWarning):
        img = lg.open_ome_zarr(path)
    assert img.matrix(0) is None
    with pytest.raises(lg.UnsupportedTransformationError, match="displacements") as info:
        img[0].resample()
    assert isinstance(info.value, NotImplementedError)
    np.testing.assert_array_equal(img[0][...].shape, (4, 6, 8))  # the voxels still read


def test_bad_resample_arguments(tmp_path):
    path = tmp_path / "t.ome.zarr"
    _store_with_level_transform(path, {"type": "affine", "affine": AXIS_SWAP})
    with pytest.warns(lg.MetadataWarning):
        level = lg.open_ome_zarr(path)[0]
    with pytest.raises(lg.InvalidArgumentError, match="spacing"):
        level.resample(spacing=(1, 0, 1))
    with pytest.raises(lg.InvalidArgumentError, match="coarser spacing"):
        level.resample(spacing=(0.01, 0.01, 0.01))
    with pytest.raises(lg.InvalidArgumentError, match="order"):
        level.resample(order=9)


def test_labels_of_a_06_image(tmp_path):
    img = lg.write_ome_zarr(tmp_path / "l.ome.zarr", _volume(), version="0.6", device="cpu")
    labels = lg.write_labels(img, "cells", (_volume() % 3).astype("u1"))
    assert labels.version == "0.6"
    np.testing.assert_array_equal(labels[0][...], (_volume() % 3).astype("u1"))
    assert list(lg.open_ome_zarr(tmp_path / "l.ome.zarr").labels) == ["cells"]


def test_labels_of_an_image_placed_by_an_affine_are_refused(tmp_path):
    path = tmp_path / "a.ome.zarr"
    _store_with_level_transform(path, {"type": "affine", "affine": AXIS_SWAP})
    with pytest.warns(lg.MetadataWarning):
        img = lg.open_ome_zarr(path)
    with pytest.raises(lg.WriteError, match="scale and translation"):
        lg.write_labels(img, "cells", np.zeros(img[0].shape, "u1"))
    assert not (path / "labels").exists()


def test_a_scene_lists_its_images_in_its_coordinate_system(tmp_path):
    root_path = tmp_path / "scene.ome.zarr"
    zarr.open_group(root_path, mode="w", zarr_format=3)
    for name in ("tile0", "tile1"):
        lg.write_ome_zarr(root_path / name, _volume(seed=len(name)), version="0.6", device="cpu")
    meta = json.loads((root_path / "zarr.json").read_text())
    axes = [{"name": a, "type": "space"} for a in "zyx"]
    meta["attributes"] = {
        "ome": {
            "version": "0.6",
            "scene": {
                "coordinateSystems": [{"name": "world", "axes": axes}],
                "coordinateTransformations": [
                    {
                        "type": "translation",
                        "translation": [0, 0, 100 * k],
                        "input": {"path": f"tile{k}", "name": "physical"},
                        "output": {"name": "world"},
                    }
                    for k in range(2)
                ],
            },
        }
    }
    (root_path / "zarr.json").write_text(json.dumps(meta))
    scene = lg.open_ome_zarr(root_path)
    assert isinstance(scene, lg.Scene) and len(scene) == 2
    placed = {im.path: im for im in scene.images()}
    assert sorted(placed) == ["tile0", "tile1"]
    shift = lg.ngff.to_matrix(placed["tile1"].transform, 3)
    np.testing.assert_array_equal(shift[:3, 3], [0, 0, 100])
    np.testing.assert_array_equal(scene["tile1"][0][...], _volume(seed=5))
    with pytest.raises(lg.NotFoundError, match="tile9"):
        scene["tile9"]
