"""NGFF 0.6 through the public API: stores other tools write (ngff-zarr 0.50, in 0.4, 0.5
and 0.6 for the same image) read the same data and metadata on every device; what we
write as 0.6 ngff-zarr reads back and its 0.6 schema accepts; levels placed by affine
transformations, rotations, axis permutations or fields give their matrices, resample, or
refuse as documented; scenes; labels; HCS plates."""

from __future__ import annotations

import json

import numpy as np
import pytest
import zarr

import linumpy_gpu as lg
from tests.conftest import to_numpy
from tests.data.make_ngff_zarr_stores import STORES, VERSIONS, store_path, write_stores
from tests.data.make_ngff_zarr_stores import volume as _volume


def _ngff_zarr_available() -> bool:
    try:
        import ngff_zarr  # noqa: F401
    except ImportError:
        return False
    return True


def _validate(attrs: dict, model: str) -> None:
    """Checks ``attrs`` (a group's zarr.json attributes) against ngff-zarr's bundled 0.6
    JSON schema for ``model``; raises jsonschema's ValidationError when it rejects them."""
    pytest.importorskip("ngff_zarr", reason="ngff-zarr bundles the 0.6 JSON schemas")
    from ngff_zarr.validate import validate

    validate(attrs, version="0.6", model=model)


def _attributes(group_path) -> dict:
    """The attributes a zarr v3 group's zarr.json holds, as written on disk."""
    return json.loads((group_path / "zarr.json").read_text())["attributes"]


@pytest.fixture(scope="module")
def ngff_zarr_images(tmp_path_factory):
    """The same image written by ngff-zarr 0.50 in 0.4, 0.5 and 0.6: {version: path}.

    Written afresh where ngff-zarr is importable; else the stores committed under
    tests/data (the GPU host has no package index and cannot carry ngff-zarr), which
    test_committed_ngff_zarr_stores_read_equal_to_fresh_ones keeps equal to fresh ones."""
    if _ngff_zarr_available():
        return write_stores(tmp_path_factory.mktemp("nz"))
    stores = {v: store_path(STORES, v) for v in VERSIONS}
    missing = [str(p) for p in stores.values() if not p.is_dir()]
    if missing:
        pytest.skip(f"ngff-zarr is not installed and the committed stores are missing: {missing}")
    return stores


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
    assert six.scale(0) == (2.0, 0.5, 0.25) and six.translation(0) == (10.0, 1.0, -3.0)
    matrix = six.matrix(0)
    np.testing.assert_array_equal(np.diag(matrix)[:3], [2.0, 0.5, 0.25])
    np.testing.assert_array_equal(matrix[:3, 3], [10.0, 1.0, -3.0])
    assert six["scale0/image"] is six[0]


def test_committed_ngff_zarr_stores_read_equal_to_fresh_ones(tmp_path):
    # The fixture falls back to the committed stores where ngff-zarr is absent; they must
    # hold what ngff-zarr writes today, or the GPU host would test a different image.
    pytest.importorskip("ngff_zarr", reason="ngff-zarr writes the fresh stores to compare")
    fresh = write_stores(tmp_path)
    assert sorted(fresh) == sorted(VERSIONS) == ["0.4", "0.5", "0.6"]
    for version in VERSIONS:
        committed = lg.open_ome_zarr(store_path(STORES, version), device="cpu")
        new = lg.open_ome_zarr(fresh[version], device="cpu")
        assert committed.version == new.version == version
        assert committed.axes == new.axes
        assert len(committed) == len(new) == 2
        for level in range(len(new)):
            assert committed[level].path == new[level].path
            assert committed.scale(level) == new.scale(level)
            assert committed.translation(level) == new.translation(level)
            assert committed[level].dtype == new[level].dtype
            np.testing.assert_array_equal(committed[level][...], new[level][...])
        np.testing.assert_array_equal(committed[0][...], _volume())


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
    if version == "0.6":
        import jsonschema

        attrs = _attributes(tmp_path / "ours.ome.zarr")
        assert attrs["ome"]["version"] == "0.6"
        _validate(attrs, "image")
        # The schema checks the transformations themselves: one without its output fails.
        broken = json.loads(json.dumps(attrs))
        del broken["ome"]["multiscales"][0]["datasets"][0]["coordinateTransformations"][0]["output"]
        with pytest.raises(jsonschema.ValidationError):
            _validate(broken, "image")


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


# Swaps z and y: a reflection (determinant -1), so only an affine can express it.
AXIS_SWAP = [[0, 1, 0, 0], [1, 0, 0, 0], [0, 0, 1, 0]]
# A proper rotation by 90 degrees in the z-y plane: z' = y, y' = -z.
ROTATION_ZY = [[0, 1, 0], [-1, 0, 0], [0, 0, 1]]
# Output axis i takes input axis MAP_AXIS[i]: (z, y, x) -> (x, z, y), no axis fixed.
MAP_AXIS = [2, 0, 1]


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


def _homogeneous(case: str) -> np.ndarray:
    """The 4 x 4 matrix each placement case stands for, built from its JSON parameters."""
    h = np.eye(4)
    if case == "affine-swap":
        h[:3] = AXIS_SWAP
    elif case.startswith("rotation"):
        h[:3, :3] = ROTATION_ZY
    else:
        h[:3, :3] = 0
        h[np.arange(3), MAP_AXIS] = 1
    return h


def _reference_resample(data: np.ndarray, matrix: np.ndarray, start=(0, 0, 0)):
    """Nearest-voxel resampling in numpy, independent of scipy and cupy: the region of
    ``data`` that begins at index ``start``, placed by ``matrix``, sampled at unit spacing
    on the grid spanning its corners. Returns (volume, origin)."""
    start = np.asarray(start, dtype=float)
    corners = np.array(
        [
            [a, b, c, 1.0]
            for a in (0, data.shape[0] - 1)
            for b in (0, data.shape[1] - 1)
            for c in (0, data.shape[2] - 1)
        ]
    )
    corners[:, :3] += start
    points = corners @ matrix.T
    low, high = points[:, :3].min(axis=0), points[:, :3].max(axis=0)
    shape = tuple(int(n) + 1 for n in np.round(high - low))
    grid = np.stack(np.meshgrid(*(np.arange(n) for n in shape), indexing="ij"), axis=-1)
    world = grid.reshape(-1, 3) + low
    source = (np.linalg.inv(matrix) @ np.c_[world, np.ones(len(world))].T).T[:, :3]
    index = np.rint(source - start).astype(int)
    inside = np.all((index >= 0) & (index < data.shape), axis=1)
    out = np.zeros(len(world), dtype=data.dtype)
    out[inside] = data[tuple(index[inside].T)]
    return out.reshape(shape), tuple(float(v) for v in low)


PLACEMENTS = {
    "affine-swap": ({"type": "affine", "affine": AXIS_SWAP}, None),
    "rotation-inline": ({"type": "rotation", "rotation": ROTATION_ZY}, None),
    "rotation-array": (
        {"type": "rotation", "path": "params/rotation"},
        {"params/rotation": ROTATION_ZY},
    ),
    "mapAxis": ({"type": "mapAxis", "mapAxis": MAP_AXIS}, None),
}


@pytest.mark.parametrize("case", sorted(PLACEMENTS))
def test_a_rotated_or_permuted_level_resamples_to_the_expected_volume(tmp_path, case, device):
    path = tmp_path / "placed.ome.zarr"
    transform, arrays = PLACEMENTS[case]
    data = _store_with_level_transform(path, transform, arrays)
    with pytest.warns(lg.MetadataWarning):
        img = lg.open_ome_zarr(path, device=device)
    assert not img.exact and not img[0].exact
    assert "placed by more than a scale" in repr(img)
    matrix = _homogeneous(case)
    np.testing.assert_array_equal(img.matrix(0), matrix)
    expected, origin = _reference_resample(data, matrix)
    # the reference itself, against the volume written out by hand
    by_hand = {
        "affine-swap": np.swapaxes(data, 0, 1),
        "rotation-inline": np.flip(data, 0).transpose(1, 0, 2),
        "rotation-array": np.flip(data, 0).transpose(1, 0, 2),
        "mapAxis": data.transpose(2, 0, 1),
    }[case]
    np.testing.assert_array_equal(expected, by_hand)
    for order in (0, 1):  # both land on whole voxels, so linear interpolation is exact too
        out = img[0].resample(order=order)
        assert out.origin == origin and out.spacing == (1.0, 1.0, 1.0)
        assert out.data.dtype == data.dtype
        np.testing.assert_array_equal(to_numpy(out.data), expected)
    # a region of the level: the part of the placed volume it covers
    part = img[0].resample(order=0, region=(slice(1, 3),))
    expected_part, part_origin = _reference_resample(data[1:3], matrix, start=(1, 0, 0))
    assert part.origin == part_origin
    np.testing.assert_array_equal(to_numpy(part.data), expected_part)


def _field_placement(kind: str) -> tuple[dict, dict]:
    """A level placed by a scale, then a displacement or coordinate field stored at 'field'."""
    transform = {
        "type": "sequence",
        "transformations": [
            {"type": "scale", "scale": [1, 1, 1]},
            {"type": kind, "path": "field", "interpolation": "linear"},
        ],
    }
    return transform, {"field": np.zeros((4, 6, 8, 3))}


@pytest.mark.parametrize("kind", ["displacements", "coordinates"])
def test_a_level_placed_by_a_field_refuses_to_resample_naming_its_type(tmp_path, kind):
    path = tmp_path / "field.ome.zarr"
    data = _store_with_level_transform(path, *_field_placement(kind))
    with pytest.warns(lg.MetadataWarning):
        img = lg.open_ome_zarr(path)
    assert img.matrix(0) is None
    with pytest.raises(lg.UnsupportedTransformationError, match=f"a {kind} transformation") as info:
        img[0].resample()
    assert isinstance(info.value, NotImplementedError)
    np.testing.assert_array_equal(img[0][...], data)  # the voxels still read


def test_the_default_spacing_follows_axes_a_level_swaps(tmp_path, device):
    """Scale (2, 3, 5) then mapAxis: each output axis's default spacing is the voxel's
    extent along it, so the default grid keeps every voxel."""
    path = tmp_path / "swapped.ome.zarr"
    transform = {
        "type": "sequence",
        "transformations": [
            {"type": "scale", "scale": [2, 3, 5]},
            {"type": "mapAxis", "mapAxis": MAP_AXIS},
        ],
    }
    data = _store_with_level_transform(path, transform)
    with pytest.warns(lg.MetadataWarning):
        level = lg.open_ome_zarr(path, device=device)[0]
    out = level.resample(order=0)
    assert out.spacing == (5.0, 2.0, 3.0)
    assert out.data.shape == (8, 4, 6)
    np.testing.assert_array_equal(to_numpy(out.data), data.transpose(2, 0, 1))


def test_an_affine_stored_in_an_array_of_the_wrong_shape_is_invalid(tmp_path):
    """An affine of a 3-D level must be 3 x 4; a homogeneous 4 x 4 stored at its path is
    invalid metadata (inline, the same is refused on open)."""
    path = tmp_path / "bad-affine.ome.zarr"
    homogeneous = np.vstack([np.array(AXIS_SWAP, dtype=float), [0, 0, 0, 1]])
    _store_with_level_transform(
        path, {"type": "affine", "path": "params/affine"}, {"params/affine": homogeneous}
    )
    with pytest.warns(lg.MetadataWarning):
        img = lg.open_ome_zarr(path)
    with pytest.raises(lg.InvalidMetadataError, match="3 x 4"):
        img.transform(0)


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
    for spacing in [("a", 1, 1), 1.0, (1, 1)]:
        with pytest.raises(lg.InvalidArgumentError, match="spacing"):
            level.resample(spacing=spacing)
    with pytest.raises(lg.InvalidArgumentError, match="empty region"):
        level.resample(region=(slice(3, 2),))


def test_labels_of_a_06_image(tmp_path):
    img = lg.write_ome_zarr(tmp_path / "l.ome.zarr", _volume(), version="0.6", device="cpu")
    labels = lg.write_labels(img, "cells", (_volume() % 3).astype("u1"))
    assert labels.version == "0.6"
    np.testing.assert_array_equal(labels[0][...], (_volume() % 3).astype("u1"))
    assert list(lg.open_ome_zarr(tmp_path / "l.ome.zarr").labels) == ["cells"]
    # what was written, checked last: the schema check skips where ngff-zarr is absent
    label_attrs = _attributes(tmp_path / "l.ome.zarr" / "labels" / "cells")
    assert label_attrs["ome"]["version"] == "0.6"
    assert label_attrs["ome"]["image-label"]["source"] == {"image": "../../"}
    assert _attributes(tmp_path / "l.ome.zarr" / "labels")["ome"] == {
        "version": "0.6",
        "labels": ["cells"],
    }
    _validate(label_attrs, "label")
    _validate(label_attrs, "image")  # a label image is a multiscale image as well
    _validate(_attributes(tmp_path / "l.ome.zarr"), "image")


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
    assert list(scene) == ["tile0", "tile1"] and "tile1" in scene and "tile2" not in scene
    placed = {im.path: im for im in scene.images()}
    assert sorted(placed) == ["tile0", "tile1"]
    shift = lg.ngff.to_matrix(placed["tile1"].transform, 3)
    np.testing.assert_array_equal(shift[:3, 3], [0, 0, 100])
    np.testing.assert_array_equal(scene["tile1"][0][...], _volume(seed=5))
    with pytest.raises(lg.NotFoundError, match="tile9"):
        scene["tile9"]


def _write_06_image(group: zarr.Group, seed: int) -> list[np.ndarray]:
    """A two-level 0.6 image written into ``group`` by hand: level 's1' is 's0' taken every
    second voxel in y and x. Returns the levels' data."""
    full = _volume((4, 12, 16), seed=seed)
    levels = [full, full[:, ::2, ::2]]
    for name, data in zip(("s0", "s1"), levels, strict=True):
        group.create_array(name, shape=data.shape, chunks=(2, 6, 8), dtype=data.dtype)[...] = data
    axes = [{"name": a, "type": "space", "unit": "micrometer"} for a in "zyx"]
    group.attrs.put(
        {
            "ome": {
                "version": "0.6",
                "multiscales": [
                    {
                        "name": f"field-{seed}",
                        "coordinateSystems": [{"name": "physical", "axes": axes}],
                        "datasets": [
                            {
                                "path": "s0",
                                "coordinateTransformations": [
                                    {
                                        "type": "scale",
                                        "scale": [1.0, 0.5, 0.5],
                                        "input": {"path": "s0"},
                                        "output": {"name": "physical"},
                                    }
                                ],
                            },
                            {
                                "path": "s1",
                                "coordinateTransformations": [
                                    {
                                        "type": "sequence",
                                        "transformations": [
                                            {"type": "scale", "scale": [1.0, 1.0, 1.0]},
                                            {"type": "translation", "translation": [0, 0.25, 0.25]},
                                        ],
                                        "input": {"path": "s1"},
                                        "output": {"name": "physical"},
                                    }
                                ],
                            },
                        ],
                    }
                ],
            }
        }
    )
    return levels


def _write_06_plate(path) -> dict[tuple[str, int], list[np.ndarray]]:
    """A 0.6 HCS plate written with zarr-python alone: rows A-B, columns 1-3, wells A/1 and
    B/3 with two fields each. Returns {(well path, field): levels' data}."""
    root = zarr.open_group(path, mode="w", zarr_format=3)
    wells = {"A/1": (0, 0), "B/3": (1, 2)}
    root.attrs.put(
        {
            "ome": {
                "version": "0.6",
                "plate": {
                    "name": "screen",
                    "rows": [{"name": "A"}, {"name": "B"}],
                    "columns": [{"name": "1"}, {"name": "2"}, {"name": "3"}],
                    "acquisitions": [{"id": 0, "name": "first"}],
                    "field_count": 2,
                    "wells": [
                        {"path": p, "rowIndex": r, "columnIndex": c} for p, (r, c) in wells.items()
                    ],
                },
            }
        }
    )
    data = {}
    for k, well_path in enumerate(wells):
        well = root.create_group(well_path)
        well.attrs.put(
            {
                "ome": {
                    "version": "0.6",
                    "well": {"images": [{"path": f, "acquisition": 0} for f in ("0", "1")]},
                }
            }
        )
        for field in range(2):
            data[well_path, field] = _write_06_image(well.create_group(str(field)), 10 * k + field)
    return data


def test_a_06_plate_opens_and_its_wells_read_equal_on_every_device(tmp_path, device):
    path = tmp_path / "plate.ome.zarr"
    written = _write_06_plate(path)
    plate = lg.open_ome_zarr(path, device=device)
    assert isinstance(plate, lg.Plate) and plate.name == "screen"
    assert plate.rows == ("A", "B") and plate.columns == ("1", "2", "3")
    assert [w.path for w in plate.wells] == ["A/1", "B/3"]
    assert list(plate) == ["A/1", "B/3"] and len(plate) == 2
    assert "B/3" in plate and "A/2" not in plate
    for (well_path, field), levels in written.items():
        well = plate[well_path]
        assert isinstance(well, lg.Well) and len(well) == 2
        assert [f.path for f in well.fields] == ["0", "1"]
        img = well[field]
        assert img.version == "0.6" and img.exact and img.axis_names == ("z", "y", "x")
        assert [a.unit for a in img.axes] == ["micrometer"] * 3
        assert img.scale(0) == (1.0, 0.5, 0.5) and img.translation(0) == (0.0, 0.0, 0.0)
        assert img.scale(1) == (1.0, 1.0, 1.0) and img.translation(1) == (0.0, 0.25, 0.25)
        assert len(img) == len(levels)
        for level, data in enumerate(levels):
            np.testing.assert_array_equal(to_numpy(img[level][...]), data)
        row, column = well_path.split("/")
        np.testing.assert_array_equal(
            to_numpy(plate.image(row, column, field)[0][2:4, 3:9, 5:]), levels[0][2:4, 3:9, 5:]
        )
    # a well opened on its own is the same well
    alone = lg.open_ome_zarr(path / "B" / "3", device=device)
    assert isinstance(alone, lg.Well)
    np.testing.assert_array_equal(to_numpy(alone[1][1][...]), written["B/3", 1][1])
    with pytest.raises(lg.NotFoundError, match="A/2"):
        plate["A/2"]


def test_a_06_plate_we_read_is_valid_against_the_06_schema(tmp_path):
    # The plate the test above reads is valid 0.6, so it tests 0.6 as the spec has it.
    path = tmp_path / "plate.ome.zarr"
    _write_06_plate(path)
    _validate(_attributes(path), "plate")
    for well_path in ("A/1", "B/3"):
        _validate(_attributes(path / well_path), "well")
        for field in ("0", "1"):
            _validate(_attributes(path / well_path / field), "image")


def _identity_placed(path, data) -> None:
    root = zarr.open_group(path, mode="w", zarr_format=3)
    root.create_array("0", data=data, chunks=(2, 4, 4))
    axes = [{"name": n, "type": "space"} for n in "zyx"]
    scale = [{"type": "scale", "scale": [1.0, 1.0, 1.0]}]
    datasets = [{"path": "0", "coordinateTransformations": scale}]
    root.attrs.put(
        {"ome": {"version": "0.5", "multiscales": [{"axes": axes, "datasets": datasets}]}}
    )


@pytest.mark.parametrize(
    ("dtype", "value", "order"),
    [
        ("uint32", 2**24 + 1, 1),
        ("int32", -(10**8) - 1, 1),
        ("int64", 2**40 + 1, 1),
        ("uint32", 2**32 - 3, 0),
        ("int32", -(2**31) + 5, 0),
        ("uint64", 2**63 + 12345, 0),
        ("int64", -(2**60) - 1, 0),
        ("float16", 0.1, 1),
    ],
)
def test_resampling_on_the_level_grid_keeps_every_value(tmp_path, device, dtype, value, order):
    """Values of every dtype come back unchanged where the output grid is the input's:
    wide integers are not squeezed through a float that cannot hold them."""
    data = np.full((4, 8, 8), value, dtype=dtype)
    data[1, 2, 3] = 0
    _identity_placed(tmp_path / "w.zarr", data)
    out = lg.open_ome_zarr(tmp_path / "w.zarr", device=device)[0].resample(order=order)
    assert out.data.dtype == data.dtype
    np.testing.assert_array_equal(to_numpy(out.data), data)


def test_interpolating_integers_beyond_2_53_is_refused(tmp_path):
    _identity_placed(tmp_path / "b.zarr", np.full((4, 8, 8), 2**60 + 1, dtype="int64"))
    with pytest.raises(lg.InvalidArgumentError, match="order=0"):
        lg.open_ome_zarr(tmp_path / "b.zarr")[0].resample(order=1)
