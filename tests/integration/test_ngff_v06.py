"""NGFF 0.6 (RFC-5): coordinate systems and transformations, against stores ngff-zarr writes
and hand-written blocks; our 0.6 builder read back by ngff-zarr."""

from __future__ import annotations

import copy
import warnings

import numpy as np
import pytest
import zarr
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from linumpy_gpu import InvalidArgumentError, InvalidMetadataError, MetadataWarning, ngff
from linumpy_gpu.ngff import (
    Affine,
    Axis,
    Bijection,
    ByDimension,
    ByDimensionItem,
    Coordinates,
    CoordinateSystem,
    CoordinateSystemRef,
    Displacements,
    Identity,
    MapAxis,
    MultiscaleMeta,
    ProjectAxis,
    Rotation,
    Scale,
    SceneImage,
    TransformSequence,
    Translation,
    UnresolvedParametersError,
    affine_parts,
    build,
    inverse,
    ome_block,
    parse_image_label,
    parse_multiscales,
    parse_omero,
    parse_plate,
    parse_scene,
    parse_well,
    resolve_parameters,
    spec_version,
    to_matrix,
    validate_with_ome_zarr_models,
)
from tests.unit.test_ngff_versions import mutated

WHERE = "/data/six.zarr"
ZYX = [
    {"name": "z", "type": "space", "unit": "micrometer"},
    {"name": "y", "type": "space", "unit": "micrometer"},
    {"name": "x", "type": "space", "unit": "micrometer"},
]


def _image(
    level: dict | None = None,
    extra: list | None = None,
    systems: list | None = None,
    paths: tuple[str, ...] = ("s0",),
) -> dict:
    """A 0.6 image block: one coordinate system 'physical' (z, y, x) unless ``systems``,
    one level per path mapped by ``level`` (default a scale)."""
    datasets = []
    for i, path in enumerate(paths):
        t = copy.deepcopy(level) if level else {"type": "scale", "scale": [1.0, 2.0**i, 2.0**i]}
        t.setdefault("input", {"path": path})
        t.setdefault("output", {"name": "physical"})
        datasets.append({"path": path, "coordinateTransformations": [t]})
    ms: dict = {
        "coordinateSystems": systems or [{"name": "physical", "axes": copy.deepcopy(ZYX)}],
        "datasets": datasets,
    }
    if extra is not None:
        ms["coordinateTransformations"] = extra
    return {"version": "0.6", "multiscales": [ms]}


def _parse(block: dict) -> MultiscaleMeta:
    return parse_multiscales(block, block.get("version"), WHERE)


def _two_systems(other: str = "world", axes: list | None = None) -> list:
    return [
        {"name": "physical", "axes": copy.deepcopy(ZYX)},
        {"name": other, "axes": copy.deepcopy(axes or ZYX)},
    ]


def _link(t: dict, source: str = "physical", target: str = "world") -> dict:
    return {**t, "input": {"name": source}, "output": {"name": target}}


# -- stores written by ngff-zarr ------------------------------------------------------------------

IMAGES = {
    "zyx": dict(
        shape=(4, 16, 32),
        dims=["z", "y", "x"],
        scale={"z": 2.0, "y": 0.5, "x": 0.25},
        translation={"z": 10.0, "y": 1.0, "x": -3.0},
        units={"z": "micrometer", "y": "micrometer", "x": "micrometer"},
    ),
    "tcyx": dict(
        shape=(2, 3, 16, 16),
        dims=["t", "c", "y", "x"],
        scale={"t": 1.5, "c": 1.0, "y": 0.3, "x": 0.3},
        translation={"t": 0.0, "c": 0.0, "y": 0.0, "x": 0.0},
        units={"t": "second", "y": "nanometer", "x": "nanometer"},
    ),
}


@pytest.fixture(scope="module")
def ngff_zarr_stores(tmp_path_factory):
    """{(image, version): attributes} of stores ngff-zarr writes in 0.4, 0.5 and 0.6."""
    nz = pytest.importorskip("ngff_zarr", reason="ngff-zarr writes the reference stores")
    root = tmp_path_factory.mktemp("ngff_zarr")
    out = {}
    for name, spec in IMAGES.items():
        image = nz.to_ngff_image(
            np.zeros(spec["shape"], dtype="uint8"),
            dims=spec["dims"],
            scale=spec["scale"],
            translation=spec["translation"],
            axes_units=spec["units"],
        )
        multiscales = nz.to_multiscales(
            image, scale_factors=[2], method=nz.Methods.ITKWASM_BIN_SHRINK
        )
        for version in ("0.4", "0.5", "0.6"):
            path = root / f"{name}-{version}.zarr"
            nz.to_ngff_zarr(str(path), multiscales, version=version)
            group = zarr.open_group(str(path), mode="r")
            out[name, version] = (dict(group.attrs), group.metadata.zarr_format)
    return out


@pytest.mark.parametrize("name", sorted(IMAGES))
def test_ngff_zarr_stores_in_04_05_06_read_the_same(ngff_zarr_stores, name):
    metas = {}
    for version in ("0.4", "0.5", "0.6"):
        attrs, zarr_format = ngff_zarr_stores[name, version]
        block, declared = ome_block(attrs, zarr_format)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            metas[version] = parse_multiscales(block, declared, WHERE)
        assert metas[version].version == version
    spec = IMAGES[name]
    expected_axes = tuple(
        Axis(d, {"t": "time", "c": "channel"}.get(d, "space"), spec["units"].get(d))
        for d in spec["dims"]
    )
    scale0 = tuple(spec["scale"][d] for d in spec["dims"])
    translation0 = tuple(spec["translation"][d] for d in spec["dims"])
    for meta in metas.values():
        assert meta.axes == expected_axes
        assert [d.path for d in meta.datasets] == ["scale0/image", "scale1/image"]
        assert meta.datasets[0].scale == scale0
        assert meta.datasets[0].translation == translation0
        assert meta.exact
    for version in ("0.4", "0.5"):
        assert [(d.scale, d.translation) for d in metas[version].datasets] == [
            (d.scale, d.translation) for d in metas["0.6"].datasets
        ]
    six = metas["0.6"]
    assert six.coordinate_system == "intrinsic"
    assert six.coordinate_systems == (CoordinateSystem("intrinsic", expected_axes),)
    level = six.datasets[1].transform
    assert isinstance(level, TransformSequence)
    assert (level.name, level.input, level.output) == (
        "scale1_to_intrinsic",
        CoordinateSystemRef(path="scale1/image"),
        CoordinateSystemRef(name="intrinsic"),
    )
    assert [type(t) for t in level.transformations] == [Scale, Translation]
    ndim = len(expected_axes)
    expected = np.eye(ndim + 1)
    expected[np.arange(ndim), np.arange(ndim)] = six.datasets[1].scale
    expected[:ndim, ndim] = six.datasets[1].translation
    np.testing.assert_array_equal(to_matrix(level, ndim), expected)


@pytest.mark.parametrize("version", ["0.4", "0.5", "0.6"])
def test_what_our_builder_writes_is_read_back_by_ngff_zarr(tmp_path, version):
    nz = pytest.importorskip("ngff_zarr", reason="ngff-zarr reads what we write")
    scales = [(2.0, 0.5, 0.5), (2.0, 1.0, 1.0), (2.0, 2.0, 2.0)]
    translations = [(0.0, 0.0, 0.0), (0.0, 0.25, 0.25), (5.0, 0.75, 0.75)]
    shapes = [(4, 16, 16), (4, 8, 8), (4, 4, 4)]
    block = {
        "multiscales": [
            build.multiscales_block(
                version=version,
                axes=build.make_axes("zyx", ["micrometer", "nanometer", "nanometer"]),
                paths=["0", "1", "2"],
                scales=scales,
                translations=translations,
                name="ours",
                method="mean",
            )
        ]
    }
    attrs = build.wrap(version, block)
    zarr_format = 2 if version == "0.4" else 3
    group = zarr.open_group(str(tmp_path / "ours.zarr"), mode="w", zarr_format=zarr_format)
    group.attrs.put(attrs)
    for i, shape in enumerate(shapes):
        group.create_array(str(i), shape=shape, dtype="u2")
    if version == "0.6":
        ms = attrs["ome"]["multiscales"][0]
        assert ms["coordinateSystems"][0]["name"] == "physical"
        assert ms["datasets"][0]["coordinateTransformations"] == [
            {
                "type": "scale",
                "scale": [2.0, 0.5, 0.5],
                "input": {"path": "0"},
                "output": {"name": "physical"},
            }
        ]
        assert ms["datasets"][1]["coordinateTransformations"][0]["type"] == "sequence"
    read = nz.from_ngff_zarr(str(tmp_path / "ours.zarr"))
    assert [tuple(im.scale[d] for d in "zyx") for im in read.images] == scales
    assert [tuple(im.translation[d] for d in "zyx") for im in read.images] == translations
    assert read.images[0].axes_units == {"z": "micrometer", "y": "nanometer", "x": "nanometer"}
    meta = parse_multiscales(*ome_block(attrs, zarr_format), WHERE)
    assert [d.scale for d in meta.datasets] == scales
    assert [d.translation for d in meta.datasets] == translations
    if version == "0.6":
        pytest.importorskip("jsonschema", reason="the 0.6 JSON schema check needs jsonschema")
        from ngff_zarr.validate import validate

        validate(attrs, version="0.6")  # raises when the 0.6 schema rejects it


# -- hand-written 0.6 blocks: what each transformation parses to ----------------------------------


def test_a_level_scale_and_sequence_are_exact():
    meta = _parse(_image(paths=("s0", "s1")))
    assert meta.version == "0.6" and meta.coordinate_system == "physical"
    assert meta.axes == tuple(Axis(a["name"], "space", "micrometer") for a in ZYX)
    assert [(d.scale, d.translation, d.exact) for d in meta.datasets] == [
        ((1.0, 1.0, 1.0), (0.0, 0.0, 0.0), True),
        ((1.0, 2.0, 2.0), (0.0, 0.0, 0.0), True),
    ]
    assert meta.datasets[1].transform == Scale(
        scale=(1.0, 2.0, 2.0),
        input=CoordinateSystemRef(path="s1"),
        output=CoordinateSystemRef(name="physical"),
    )
    seq = {
        "type": "sequence",
        "name": "s0 to physical",
        "transformations": [
            {"type": "scale", "scale": [4, 3, 2]},
            {"type": "translation", "translation": [30, 20, 10]},
        ],
    }
    (ds,) = _parse(_image(seq)).datasets
    assert (ds.scale, ds.translation, ds.exact) == ((4.0, 3.0, 2.0), (30.0, 20.0, 10.0), True)
    assert ds.transform.name == "s0 to physical"
    (ds,) = _parse(_image({"type": "identity"})).datasets
    assert (ds.scale, ds.translation, ds.exact, ds.transform.type) == (
        (1.0, 1.0, 1.0),
        (0.0, 0.0, 0.0),
        True,
        "identity",
    )


def test_an_inline_affine_parses_and_gives_its_matrix():
    affine = [[3, 0.4, 0, 30], [0.3, 2, 0, 20], [0, 0, 1, 0]]
    meta = _parse(
        _image(extra=[_link({"type": "affine", "affine": affine})], systems=_two_systems())
    )
    (t,) = meta.transformations
    assert t == Affine(
        matrix=((3.0, 0.4, 0.0, 30.0), (0.3, 2.0, 0.0, 20.0), (0.0, 0.0, 1.0, 0.0)),
        input=CoordinateSystemRef(name="physical"),
        output=CoordinateSystemRef(name="world"),
    )
    np.testing.assert_array_equal(to_matrix(t, 3), np.array(affine + [[0, 0, 0, 1]], dtype=float))
    assert meta.exact  # the levels themselves are plain scales


def test_a_path_stored_affine_stays_a_path_until_resolved(tmp_path):
    meta = _parse(
        _image(
            extra=[_link({"type": "affine", "path": "coordinateTransformations/affine"})],
            systems=_two_systems(),
        )
    )
    (t,) = meta.transformations
    assert (t.matrix, t.path) == (None, "coordinateTransformations/affine")
    with pytest.raises(UnresolvedParametersError, match="resolve_parameters"):
        to_matrix(t, 3)
    assert inverse(t) is None
    group = zarr.open_group(str(tmp_path / "scene.zarr"), mode="w", zarr_format=3)
    params = np.array([[0, -1, 0, 5], [1, 0, 0, 6], [0, 0, 2, 7]], dtype="f8")
    group.create_array("coordinateTransformations/affine", data=params)
    asked = []

    def read_array(path):
        asked.append(path)
        return group[path][...]

    loaded = resolve_parameters(t, read_array, where=WHERE)
    assert asked == ["coordinateTransformations/affine"]
    assert loaded.path == t.path and loaded.input == t.input and loaded.output == t.output
    assert loaded.matrix == tuple(tuple(r) for r in params.tolist())
    np.testing.assert_array_equal(to_matrix(loaded, 3), np.vstack([params, [0, 0, 0, 1]]))
    with pytest.raises(InvalidMetadataError) as info:
        resolve_parameters(t, lambda p: np.zeros(4), where=WHERE)
    assert info.value.field == "affine.path"


def test_rotation_inline_and_from_an_array():
    rotation = [[1, 0, 0], [0, 0, -1], [0, 1, 0]]
    meta = _parse(
        _image(extra=[_link({"type": "rotation", "rotation": rotation})], systems=_two_systems())
    )
    (t,) = meta.transformations
    assert isinstance(t, Rotation) and t.matrix == tuple(
        tuple(float(v) for v in r) for r in rotation
    )
    expected = np.eye(4)
    expected[:3, :3] = rotation
    np.testing.assert_array_equal(to_matrix(t, 3), expected)
    np.testing.assert_array_equal(to_matrix(inverse(t), 3), np.linalg.inv(expected))
    stored = Rotation(path="r")
    np.testing.assert_array_equal(
        to_matrix(resolve_parameters(stored, lambda p: np.array(rotation, "f4")), 3), expected
    )
    with pytest.raises(InvalidMetadataError) as info:
        resolve_parameters(stored, lambda p: np.diag([1.0, 1.0, -1.0]), where=WHERE)
    assert info.value.field == "rotation.path"


def test_map_axis_permutes_and_inverts():
    systems = _two_systems("xyz", [ZYX[2], ZYX[1], ZYX[0]])
    meta = _parse(
        _image(
            extra=[_link({"type": "mapAxis", "mapAxis": [2, 0, 1]}, target="xyz")], systems=systems
        )
    )
    (t,) = meta.transformations
    assert t == MapAxis(
        map_axis=(2, 0, 1),
        input=CoordinateSystemRef(name="physical"),
        output=CoordinateSystemRef(name="xyz"),
    )
    point = np.array([10.0, 20.0, 30.0, 1.0])
    assert (to_matrix(t, 3) @ point).tolist() == [30.0, 10.0, 20.0, 1.0]
    back = inverse(t)
    assert back.map_axis == (1, 2, 0) and back.input == t.output and back.output == t.input
    assert (to_matrix(back, 3) @ to_matrix(t, 3) @ point).tolist() == point.tolist()


def test_displacements_and_coordinates_keep_their_path_and_have_no_matrix():
    extra = [
        _link(
            {
                "type": "displacements",
                "path": "coordinateTransformations/df",
                "interpolation": "linear",
            }
        )
    ]
    meta = _parse(_image(extra=extra, systems=_two_systems()))
    (t,) = meta.transformations
    assert t == Displacements(
        path="coordinateTransformations/df",
        interpolation="linear",
        input=CoordinateSystemRef(name="physical"),
        output=CoordinateSystemRef(name="world"),
    )
    assert to_matrix(t, 3) is None and inverse(t) is None
    meta = _parse(
        _image(extra=[_link({"type": "coordinates", "path": "cf"})], systems=_two_systems())
    )
    assert meta.transformations[0] == Coordinates(
        path="cf",
        input=CoordinateSystemRef(name="physical"),
        output=CoordinateSystemRef(name="world"),
    )
    assert to_matrix(meta.transformations[0], 3) is None


def test_by_dimension_assembles_its_parts():
    t = {
        "type": "byDimension",
        "transformations": [
            {
                "transformation": {"type": "translation", "translation": [-1.0, 5.0]},
                "inputAxes": [2, 1],
                "outputAxes": [2, 1],
            },
            {
                "transformation": {"type": "scale", "scale": [2.0]},
                "inputAxes": [0],
                "outputAxes": [0],
            },
        ],
    }
    meta = _parse(_image(extra=[_link(t)], systems=_two_systems()))
    (parsed,) = meta.transformations
    assert isinstance(parsed, ByDimension)
    assert parsed.transformations == (
        ByDimensionItem(Translation(translation=(-1.0, 5.0)), (2, 1), (2, 1)),
        ByDimensionItem(Scale(scale=(2.0,)), (0,), (0,)),
    )
    assert to_matrix(parsed, 3).tolist() == [
        [2.0, 0.0, 0.0, 0.0],
        [0.0, 1.0, 0.0, 5.0],
        [0.0, 0.0, 1.0, -1.0],
        [0.0, 0.0, 0.0, 1.0],
    ]
    # As a level's transformation it reduces to a scale and a translation.
    with pytest.warns(MetadataWarning, match="has type 'byDimension'"):
        (ds,) = _parse(_image(t)).datasets
    assert (ds.scale, ds.translation, ds.exact) == ((2.0, 1.0, 1.0), (0.0, 5.0, -1.0), True)
    legacy = copy.deepcopy(t)
    for item in legacy["transformations"]:
        item["input_axes"] = item.pop("inputAxes")
        item["output_axes"] = item.pop("outputAxes")
    assert (
        _parse(_image(extra=[_link(legacy)], systems=_two_systems())).transformations
        == meta.transformations
    )


def test_a_sequence_composes_in_order():
    t = {
        "type": "sequence",
        "transformations": [
            {"type": "translation", "translation": [0.1, 0.9, 0.0]},
            {"type": "scale", "scale": [2, 3, 1]},
            {"type": "rotation", "rotation": [[1, 0, 0], [0, 0, 1], [0, -1, 0]]},
        ],
    }
    meta = _parse(_image(extra=[_link(t)], systems=_two_systems()))
    (seq,) = meta.transformations
    assert [type(x) for x in seq.transformations] == [Translation, Scale, Rotation]
    point = np.array([1.0, 1.0, 1.0, 1.0])
    # rotation(scale(translation(p)))
    assert np.allclose(to_matrix(seq, 3) @ point, [2.2, 1.0, -5.7, 1.0])
    assert np.allclose(to_matrix(inverse(seq), 3) @ to_matrix(seq, 3), np.eye(4))


def test_projection_and_bijection():
    systems = [
        {"name": "physical", "axes": copy.deepcopy(ZYX)},
        {"name": "plane", "axes": [{"name": "c", "type": "channel"}, ZYX[1], ZYX[2]]},
    ]
    t = _link({"type": "projectAxis", "droppedInputs": [0], "createdOutputs": [0]}, target="plane")
    (p,) = _parse(_image(extra=[t], systems=systems)).transformations
    assert isinstance(p, ProjectAxis) and (p.dropped_inputs, p.created_outputs) == ((0,), (0,))
    assert (to_matrix(p, 3) @ [5.0, 6.0, 7.0, 1.0]).tolist() == [0.0, 6.0, 7.0, 1.0]
    bij = _link(
        {
            "type": "bijection",
            "forward": {"type": "coordinates", "path": "fwd"},
            "inverse": {"type": "coordinates", "path": "inv"},
        }
    )
    (b,) = _parse(_image(extra=[bij], systems=_two_systems())).transformations
    assert b == Bijection(
        forward=Coordinates(path="fwd"),
        inverse=Coordinates(path="inv"),
        input=CoordinateSystemRef(name="physical"),
        output=CoordinateSystemRef(name="world"),
    )
    assert inverse(b).forward == Coordinates(path="inv")


def test_a_level_beyond_scale_and_translation_is_read_with_a_warning_and_marked_inexact():
    rotated = {"type": "affine", "affine": [[0, 2, 0, 1], [-2, 0, 0, 2], [0, 0, 3, 4]]}
    with pytest.warns(
        MetadataWarning, match=r"datasets\[0\].coordinateTransformations\[0\] has type 'affine'"
    ):
        meta = _parse(_image(rotated))
    (ds,) = meta.datasets
    assert (ds.scale, ds.translation, ds.exact) == ((2.0, 2.0, 3.0), (1.0, 2.0, 4.0), False)
    assert not meta.exact and isinstance(ds.transform, Affine)
    sheared = {"type": "affine", "affine": [[1, 1, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0]]}
    with pytest.warns(MetadataWarning):
        (ds,) = _parse(_image(sheared)).datasets
    assert (ds.scale, ds.translation, ds.exact) == ((1.0, 1.0, 1.0), (0.0, 0.0, 0.0), False)
    warped = {
        "type": "sequence",
        "transformations": [
            {"type": "scale", "scale": [1, 2, 3]},
            {"type": "translation", "translation": [4, 5, 6]},
            {"type": "displacements", "path": "df"},
        ],
    }
    with pytest.warns(MetadataWarning):
        (ds,) = _parse(_image(warped)).datasets
    assert (ds.scale, ds.translation, ds.exact) == ((1.0, 2.0, 3.0), (4.0, 5.0, 6.0), False)
    stored = {"type": "affine", "path": "a"}
    with pytest.warns(MetadataWarning):
        (ds,) = _parse(_image(stored)).datasets
    assert (ds.scale, ds.translation, ds.exact) == ((1.0, 1.0, 1.0), (0.0, 0.0, 0.0), False)


def test_affine_parts_and_to_matrix_arguments():
    assert affine_parts(Identity(), 2) == ((1.0, 1.0), (0.0, 0.0), True)
    assert affine_parts(MapAxis(map_axis=(1, 0)), 2) == ((1.0, 1.0), (0.0, 0.0), False)
    with pytest.raises(InvalidArgumentError):
        to_matrix(Scale(scale=(1.0, 2.0)), 3)
    with pytest.raises(InvalidArgumentError):
        to_matrix(Identity(), 0)
    assert to_matrix(Affine(matrix=((1.0, 2.0, 3.0),)), 2) is None  # 2-D to 1-D


def test_a_label_image_link_and_an_unlinked_system():
    link = {
        "type": "identity",
        "input": {"name": "physical"},
        "output": {"name": "physical", "path": "labels/cells"},
    }
    meta = _parse(_image(extra=[link]))
    assert meta.transformations == (
        Identity(
            input=CoordinateSystemRef(name="physical"),
            output=CoordinateSystemRef(name="physical", path="labels/cells"),
        ),
    )
    with pytest.warns(MetadataWarning, match="'world'.*is not linked"):
        _parse(_image(systems=_two_systems()))


def test_scene_images_in_the_scene_coordinate_system():
    block = {
        "version": "0.6",
        "scene": {
            "coordinateSystems": [{"name": "world", "axes": [ZYX[1], ZYX[2]]}],
            "coordinateTransformations": [
                {
                    "type": "translation",
                    "translation": [0, 348],
                    "input": {"path": "tile_1", "name": "physical"},
                    "output": {"name": "world"},
                },
                {
                    "type": "scale",
                    "scale": [2, 4],
                    "input": {"name": "world"},
                    "output": {"path": "overview", "name": "physical"},
                },
                {
                    "type": "displacements",
                    "path": "coordinateTransformations/df",
                    "input": {"path": "tile_2", "name": "physical"},
                    "output": {"path": "tile_1", "name": "physical"},
                },
                {
                    "type": "coordinates",
                    "path": "cf",
                    "input": {"name": "world"},
                    "output": {"path": "tile_3", "name": "physical"},
                },
            ],
        },
    }
    scene = parse_scene(block, "0.6", WHERE)
    assert scene.coordinate_systems[0].name == "world"
    assert scene.reference == CoordinateSystemRef("world")
    assert scene.image_paths == ("tile_1", "overview", "tile_2", "tile_3")
    images = {im.path: im for im in ngff.scene_images(scene)}
    assert images["tile_1"] == SceneImage("tile_1", "physical", scene.transformations[0])
    # Reached through the inverse of the scale from the scene to it.
    overview = images["overview"].transform
    assert overview == Scale(
        scale=(0.5, 0.25),
        input=CoordinateSystemRef("physical", "overview"),
        output=CoordinateSystemRef("world"),
    )
    # A displacement field into tile_1, then tile_1's translation.
    chain = images["tile_2"].transform
    assert isinstance(chain, TransformSequence)
    assert [t.type for t in chain.transformations] == ["displacements", "translation"]
    # Coordinate fields have no inverse: tile_3 cannot be brought into the scene.
    assert images["tile_3"].transform is None
    into_tile_1 = {
        im.path: im.transform
        for im in ngff.scene_images(scene, CoordinateSystemRef("physical", "tile_1"))
    }
    assert isinstance(into_tile_1["tile_1"], Identity)


# -- the MUST rules of 0.6, each naming its field -------------------------------------------------

DS = "multiscales[0].datasets[0].coordinateTransformations"
MS = "multiscales[0].coordinateTransformations"


def _set_level(key, value):
    def change(block):
        block["multiscales"][0]["datasets"][0]["coordinateTransformations"][0][key] = value

    return change


def _set_ms(key, value):
    def change(block):
        block["multiscales"][0][key] = value

    return change


def _with_extra(t, systems=None):
    def change(block):
        block["multiscales"][0]["coordinateTransformations"] = [t]
        block["multiscales"][0]["coordinateSystems"] = systems or _two_systems()

    return change


def _cs(i, key, value):
    def change(block):
        block["multiscales"][0]["coordinateSystems"][i][key] = value

    return change


def _level_path_scale(block):
    level = block["multiscales"][0]["datasets"][0]["coordinateTransformations"][0]
    del level["scale"]
    level["path"] = "scale_factors"


def _second_level_to_world(block):
    block["multiscales"][0]["coordinateSystems"] = _two_systems()
    level = block["multiscales"][0]["datasets"][1]["coordinateTransformations"][0]
    level["output"] = {"name": "world"}


RULES = {
    "no coordinate systems": (_set_ms("coordinateSystems", []), "multiscales[0].coordinateSystems"),
    "coordinate system without name": (
        _cs(0, "name", ""),
        "multiscales[0].coordinateSystems[0].name",
    ),
    "coordinate system without axes": (
        _cs(0, "axes", []),
        "multiscales[0].coordinateSystems[0].axes",
    ),
    "duplicate coordinate system": (
        _set_ms("coordinateSystems", [{"name": "physical", "axes": ZYX}] * 2),
        "multiscales[0].coordinateSystems[1].name",
    ),
    "axis name empty": (
        _cs(0, "axes", [{"name": ""}, ZYX[1], ZYX[2]]),
        "multiscales[0].coordinateSystems[0].axes[0].name",
    ),
    "axis discrete not boolean": (
        _cs(0, "axes", [{**ZYX[0], "discrete": "no"}, ZYX[1], ZYX[2]]),
        "multiscales[0].coordinateSystems[0].axes[0].discrete",
    ),
    "one space axis": (
        _cs(0, "axes", [{"name": "c", "type": "channel"}, ZYX[2]]),
        "multiscales[0].coordinateSystems[0].axes",
    ),
    "space before time": (
        _cs(0, "axes", [ZYX[1], {"name": "t", "type": "time"}, ZYX[2]]),
        "multiscales[0].coordinateSystems[0].axes",
    ),
    "two transformations per level": (
        lambda b: b["multiscales"][0]["datasets"][0]["coordinateTransformations"].append(
            {
                "type": "scale",
                "scale": [1, 1, 1],
                "input": {"path": "s0"},
                "output": {"name": "physical"},
            }
        ),
        DS,
    ),
    "no transformations": (
        lambda b: b["multiscales"][0]["datasets"][0].pop("coordinateTransformations"),
        DS,
    ),
    "input a string": (_set_level("input", "s0"), f"{DS}[0].input"),
    "output a string": (_set_level("output", "physical"), f"{DS}[0].output"),
    "no input": (
        lambda b: b["multiscales"][0]["datasets"][0]["coordinateTransformations"][0].pop("input"),
        f"{DS}[0].input",
    ),
    "input named, not a path": (_set_level("input", {"name": "s0"}), f"{DS}[0].input.path"),
    "input of another path": (_set_level("input", {"path": "s1"}), f"{DS}[0].input.path"),
    "output a path": (_set_level("output", {"path": "physical"}), f"{DS}[0].output.name"),
    "output unknown": (_set_level("output", {"name": "nowhere"}), f"{DS}[0].output.name"),
    "scale length": (_set_level("scale", [1, 1]), f"{DS}[0].scale"),
    "scale zero": (_set_level("scale", [1, 0, 1]), f"{DS}[0].scale"),
    "scale at a path": (_level_path_scale, f"{DS}[0].scale"),
    "unknown type": (_set_level("type", "warp"), f"{DS}[0].type"),
    "transformation name not a string": (_set_level("name", 3), f"{DS}[0].name"),
    "levels of two systems": (
        _second_level_to_world,
        "multiscales[0].datasets[1].coordinateTransformations[0].output.name",
    ),
    "finer level after coarser": (
        lambda b: b["multiscales"][0]["datasets"][1]["coordinateTransformations"][0].update(
            scale=[1, 0.5, 0.5]
        ),
        "multiscales[0].datasets[1].coordinateTransformations",
    ),
    "empty multiscale transformations": (_set_ms("coordinateTransformations", []), MS),
    "multiscale transformation without output": (
        _with_extra({"type": "identity", "input": {"name": "physical"}}),
        f"{MS}[0].output",
    ),
    "multiscale transformation not touching the intrinsic system": (
        _with_extra(_link({"type": "identity"}, source="world", target="world")),
        f"{MS}[0]",
    ),
    "multiscale transformation to an unknown system": (
        _with_extra(_link({"type": "identity"}, target="nowhere")),
        f"{MS}[0].output.name",
    ),
    "label link by an affine": (
        _with_extra(
            {
                "type": "affine",
                "affine": [[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0]],
                "input": {"name": "physical"},
                "output": {"name": "physical", "path": "labels/a"},
            }
        ),
        f"{MS}[0].type",
    ),
    "mapAxis not a permutation": (
        _with_extra(_link({"type": "mapAxis", "mapAxis": [0, 0, 1]})),
        f"{MS}[0].mapAxis",
    ),
    "mapAxis of six": (
        _with_extra(_link({"type": "mapAxis", "mapAxis": [0, 1, 2, 3, 4, 5]})),
        f"{MS}[0].mapAxis",
    ),
    "mapAxis length": (
        _with_extra(_link({"type": "mapAxis", "mapAxis": [1, 0]})),
        f"{MS}[0].mapAxis",
    ),
    "rotation not orthonormal": (
        _with_extra(_link({"type": "rotation", "rotation": [[1, 0, 0], [0, 2, 0], [0, 0, 1]]})),
        f"{MS}[0].rotation",
    ),
    "rotation a reflection": (
        _with_extra(_link({"type": "rotation", "rotation": [[1, 0, 0], [0, 1, 0], [0, 0, -1]]})),
        f"{MS}[0].rotation",
    ),
    "rotation not square": (
        _with_extra(_link({"type": "rotation", "rotation": [[1, 0, 0], [0, 1, 0]]})),
        f"{MS}[0].rotation",
    ),
    "rotation without parameters": (_with_extra(_link({"type": "rotation"})), f"{MS}[0]"),
    "affine of the wrong width": (
        _with_extra(_link({"type": "affine", "affine": [[1, 0, 0], [0, 1, 0], [0, 0, 1]]})),
        f"{MS}[0].affine",
    ),
    "affine of the wrong height": (
        _with_extra(_link({"type": "affine", "affine": [[1, 0, 0, 0], [0, 1, 0, 0]]})),
        f"{MS}[0].affine",
    ),
    "affine ragged": (
        _with_extra(_link({"type": "affine", "affine": [[1, 0, 0, 0], [0, 1, 0], [0, 0, 1, 0]]})),
        f"{MS}[0].affine",
    ),
    "affine both inline and at a path": (
        _with_extra(_link({"type": "affine", "affine": [[1, 0, 0, 0]] * 3, "path": "a"})),
        f"{MS}[0]",
    ),
    "sequence empty": (
        _with_extra(_link({"type": "sequence", "transformations": []})),
        f"{MS}[0].transformations",
    ),
    "sequence item of the wrong length": (
        _with_extra(
            _link({"type": "sequence", "transformations": [{"type": "scale", "scale": [1, 1]}]})
        ),
        f"{MS}[0].transformations[0].scale",
    ),
    "byDimension leaves an output axis": (
        _with_extra(
            _link(
                {
                    "type": "byDimension",
                    "transformations": [
                        {
                            "transformation": {"type": "scale", "scale": [2.0]},
                            "inputAxes": [0],
                            "outputAxes": [0],
                        },
                        {
                            "transformation": {"type": "scale", "scale": [2.0]},
                            "inputAxes": [1],
                            "outputAxes": [1],
                        },
                    ],
                }
            )
        ),
        f"{MS}[0].transformations",
    ),
    "byDimension output twice": (
        _with_extra(
            _link(
                {
                    "type": "byDimension",
                    "transformations": [
                        {
                            "transformation": {"type": "scale", "scale": [2.0, 1.0]},
                            "inputAxes": [0, 1],
                            "outputAxes": [0, 1],
                        },
                        {
                            "transformation": {"type": "scale", "scale": [2.0, 1.0]},
                            "inputAxes": [1, 2],
                            "outputAxes": [1, 2],
                        },
                    ],
                }
            )
        ),
        f"{MS}[0].transformations",
    ),
    "byDimension without input axes": (
        _with_extra(
            _link(
                {
                    "type": "byDimension",
                    "transformations": [
                        {
                            "transformation": {"type": "scale", "scale": [2.0, 1, 1]},
                            "outputAxes": [0, 1, 2],
                        }
                    ],
                }
            )
        ),
        f"{MS}[0].transformations[0].inputAxes",
    ),
    "byDimension input axis out of range": (
        _with_extra(
            _link(
                {
                    "type": "byDimension",
                    "transformations": [
                        {
                            "transformation": {"type": "scale", "scale": [2.0, 1, 1]},
                            "inputAxes": [0, 1, 3],
                            "outputAxes": [0, 1, 2],
                        }
                    ],
                }
            )
        ),
        f"{MS}[0].transformations[0].inputAxes",
    ),
    "byDimension part of the wrong size": (
        _with_extra(
            _link(
                {
                    "type": "byDimension",
                    "transformations": [
                        {
                            "transformation": {"type": "scale", "scale": [2.0, 1]},
                            "inputAxes": [0, 1, 2],
                            "outputAxes": [0, 1, 2],
                        }
                    ],
                }
            )
        ),
        f"{MS}[0].transformations[0].transformation.scale",
    ),
    "projectAxis without operation": (_with_extra(_link({"type": "projectAxis"})), f"{MS}[0]"),
    "projectAxis repeats": (
        _with_extra(
            _link({"type": "projectAxis", "droppedInputs": [0, 0], "createdOutputs": [0, 1]})
        ),
        f"{MS}[0].droppedInputs",
    ),
    "projectAxis drops beyond the input": (
        _with_extra(_link({"type": "projectAxis", "droppedInputs": [3], "createdOutputs": [0]})),
        f"{MS}[0].droppedInputs",
    ),
    "projectAxis to the wrong dimensionality": (
        _with_extra(_link({"type": "projectAxis", "droppedInputs": [0]})),
        f"{MS}[0]",
    ),
    "bijection without inverse": (
        _with_extra(_link({"type": "bijection", "forward": {"type": "identity"}})),
        f"{MS}[0].inverse",
    ),
    "displacements without path": (_with_extra(_link({"type": "displacements"})), f"{MS}[0].path"),
    "interpolation not a string": (
        _with_extra(_link({"type": "displacements", "path": "d", "interpolation": 1})),
        f"{MS}[0].interpolation",
    ),
    "identity between dimensionalities": (
        _with_extra(
            _link({"type": "identity"}),
            [
                {"name": "physical", "axes": ZYX},
                {"name": "world", "axes": [ZYX[1], ZYX[2]]},
            ],
        ),
        f"{MS}[0]",
    ),
}


@pytest.mark.parametrize("rule", sorted(RULES))
def test_every_06_rule_raises_naming_its_field(rule):
    change, field = RULES[rule]
    block = _image(paths=("s0", "s1"))
    change(block)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MetadataWarning)
        with pytest.raises(InvalidMetadataError) as info:
            _parse(block)
    assert info.value.field == field
    assert info.value.store_path == WHERE


# Rules ome-zarr-models (from 1.8, which models 0.6) enforces too.
SHARED_RULES = [
    "affine of the wrong height",
    "bijection without inverse",
    "coordinate system without axes",
    "duplicate coordinate system",
    "finer level after coarser",
    "input a string",
    "input of another path",
    "levels of two systems",
    "mapAxis not a permutation",
    "multiscale transformation to an unknown system",
    "no coordinate systems",
    "output a path",
    "rotation not orthonormal",
    "scale at a path",
    "scale length",
    "sequence empty",
    "space before time",
    "two transformations per level",
]


@pytest.mark.parametrize("rule", SHARED_RULES)
def test_ome_zarr_models_finds_problems_where_we_raise(rule):
    pytest.importorskip("ome_zarr_models.v06", reason="ome-zarr-models models 0.6 from 1.8 on")
    change, _ = RULES[rule]
    block = _image(paths=("s0", "s1"))
    change(block)
    problems = validate_with_ome_zarr_models({"ome": block}, 3, WHERE)
    assert problems and all(p.startswith(f"{WHERE}: ") for p in problems)


def test_ome_zarr_models_accepts_our_06_blocks():
    pytest.importorskip("ome_zarr_models.v06", reason="ome-zarr-models models 0.6 from 1.8 on")
    block = {
        "multiscales": [
            build.multiscales_block(
                version="0.6",
                axes=build.make_axes("czyx"),
                paths=["0", "1"],
                scales=[(1, 1, 1, 1), (1, 1, 2, 2)],
                translations=[(0, 0, 0, 0), (0, 0, 0.5, 0.5)],
                name="img",
                method="mean",
            )
        ]
    }
    assert validate_with_ome_zarr_models(build.wrap("0.6", block), 3, WHERE) == []
    assert validate_with_ome_zarr_models({"ome": _image(paths=("s0", "s1"))}, 3, WHERE) == []


def test_06_display_labels_plate_and_well_rules():
    cases = [
        (
            lambda: parse_omero(
                {"channels": [{"window": {"start": 0, "end": 1, "min": 0}}]}, WHERE, "0.6"
            ),
            "omero.channels[0].window.max",
        ),
        (lambda: parse_image_label({"properties": []}, "0.6", WHERE), "image-label.properties"),
        (
            lambda: parse_well({"well": {"images": [{"path": "__x"}]}}, "0.6", WHERE),
            "well.images[0].path",
        ),
        (
            lambda: parse_well({"well": {"images": [{"path": ".."}]}}, "0.6", WHERE),
            "well.images[0].path",
        ),
        (
            lambda: parse_well({"well": {"images": [{"path": "a/b"}]}}, "0.6", WHERE),
            "well.images[0].path",
        ),
        (
            lambda: parse_plate(
                {"plate": {"rows": [], "columns": [{"name": "1"}], "wells": []}}, "0.6", WHERE
            ),
            "plate.rows",
        ),
        (
            lambda: parse_plate(
                {"plate": {"rows": [{"name": "A"}], "columns": [{"name": "1"}], "wells": []}},
                "0.6",
                WHERE,
            ),
            "plate.wells",
        ),
    ]
    for call, field in cases:
        with pytest.raises(InvalidMetadataError) as info:
            call()
        assert info.value.field == field
    well = parse_well({"well": {"images": [{"path": "fov_0.a-1"}]}}, "0.6", WHERE)
    assert [f.path for f in well.images] == ["fov_0.a-1"]


def test_scene_rules():
    good = {
        "type": "identity",
        "input": {"path": "a", "name": "physical"},
        "output": {"name": "world"},
    }
    systems = [{"name": "world", "axes": [ZYX[1], ZYX[2]]}]
    cases = [
        ({}, "scene"),
        ({"scene": {"coordinateTransformations": []}}, "scene.coordinateTransformations"),
        (
            {"scene": {"coordinateTransformations": [good]}},
            "scene.coordinateTransformations[0].output.name",
        ),
        (
            {
                "scene": {
                    "coordinateSystems": systems,
                    "coordinateTransformations": [{**good, "input": {"path": "a"}}],
                }
            },
            "scene.coordinateTransformations[0].input.name",
        ),
        (
            {
                "scene": {
                    "coordinateSystems": [
                        {"name": "w", "axes": [{"name": "c", "type": "channel"}]}
                    ],
                    "coordinateTransformations": [good],
                }
            },
            "scene.coordinateSystems[0].axes",
        ),
    ]
    for block, field in cases:
        with pytest.raises(InvalidMetadataError) as info:
            parse_scene(block, "0.6", WHERE)
        assert info.value.field == field
    with pytest.raises(InvalidMetadataError) as info:
        parse_scene({"scene": {}}, "0.5", WHERE)
    assert info.value.field == "version"


def test_pre_release_versions():
    assert spec_version("0.6rc0", WHERE) == "0.6"
    with pytest.warns(MetadataWarning, match="0.6.dev4"):
        assert spec_version("0.6.dev4", WHERE) == "0.6"
    with pytest.raises(InvalidMetadataError):
        spec_version("0.60", WHERE)
    meta = _parse({**_image(), "version": "0.6rc0"})
    assert meta.version == "0.6"


# -- never anything but InvalidMetadataError --------------------------------------------------------

RICH = _image(
    {
        "type": "sequence",
        "transformations": [
            {"type": "scale", "scale": [1, 2, 3]},
            {"type": "translation", "translation": [4, 5, 6]},
        ],
    },
    extra=[
        _link({"type": "affine", "affine": [[1, 0, 0, 1], [0, 1, 0, 2], [0, 0, 1, 3]]}),
        _link(
            {
                "type": "byDimension",
                "transformations": [
                    {
                        "transformation": {"type": "mapAxis", "mapAxis": [1, 0]},
                        "inputAxes": [1, 2],
                        "outputAxes": [1, 2],
                    },
                    {
                        "transformation": {"type": "rotation", "path": "r"},
                        "inputAxes": [0],
                        "outputAxes": [0],
                    },
                ],
            },
            source="world",
            target="physical",
        ),
        _link(
            {
                "type": "bijection",
                "forward": {"type": "displacements", "path": "d"},
                "inverse": {"type": "coordinates", "path": "c"},
            }
        ),
    ],
    systems=_two_systems(),
    paths=("s0",),
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), base=st.sampled_from(["plain", "rich"]))
def test_mutated_06_blocks_parse_or_raise_invalid_metadata_only(data, base):
    block = data.draw(mutated(RICH if base == "rich" else _image(paths=("s0", "s1"))))
    attrs = {"ome": block} if isinstance(block, dict) else {"ome": {}}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MetadataWarning)
        try:
            ome, declared = ome_block(attrs, 3)
            meta = parse_multiscales(ome, declared, WHERE)
        except InvalidMetadataError as exc:
            assert exc.store_path == WHERE and exc.field
            return
    assert isinstance(meta, MultiscaleMeta)
    ndim = len(meta.axes)
    for ds in meta.datasets:
        assert len(ds.scale) == len(ds.translation) == ndim
        try:
            matrix = to_matrix(ds.transform, ndim)
        except UnresolvedParametersError:
            continue
        assert matrix is None or matrix.shape == (ndim + 1, ndim + 1)
