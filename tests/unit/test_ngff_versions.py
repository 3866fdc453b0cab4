"""NGFF 0.1 to 0.5: one model for every version, the spec's MUST rules, ome-zarr-models kept
out of the read path and available as a second opinion."""

from __future__ import annotations

import copy
import dataclasses
import importlib.util
import json
import subprocess
import sys
import textwrap
import warnings

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from linumpy_gpu import InvalidMetadataError, MetadataWarning, NotOmeZarrError
from linumpy_gpu.ngff import (
    SUPPORTED_VERSIONS,
    Axis,
    Channel,
    CoordinateSystemRef,
    DatasetMeta,
    ImageLabelMeta,
    LabelColor,
    MultiscaleMeta,
    Scale,
    TransformSequence,
    Translation,
    build,
    kind_of,
    ome_block,
    parse_bioformats2raw,
    parse_image_label,
    parse_labels_group,
    parse_multiscales,
    parse_omero,
    parse_plate,
    parse_well,
    require_ome,
    to_matrix,
    validate_with_ome_zarr_models,
)

WHERE = "/data/img.zarr"


def _parse(attrs: dict, zarr_format: int = 2) -> MultiscaleMeta:
    block, version = ome_block(attrs, zarr_format)
    return parse_multiscales(block, version, WHERE)


def _same_but_version(meta: MultiscaleMeta) -> MultiscaleMeta:
    label = meta.image_label
    if label is not None:
        label = dataclasses.replace(label, version=None)
    return dataclasses.replace(meta, version="*", image_label=label)


# -- one image, every version -------------------------------------------------------------------

TCZYX_DATASETS = [{"path": "0"}, {"path": "1"}]


def _tczyx(version: str) -> dict:
    """A 5-D image with two levels, as each version writes it (no units, unit scales)."""
    ms: dict = {"name": "cells", "type": "mean", "metadata": {"method": "m"}}
    if version in ("0.1", "0.2"):
        ms.update(version=version, datasets=copy.deepcopy(TCZYX_DATASETS))
        return {"multiscales": [ms]}
    if version == "0.3":
        ms.update(version="0.3", axes=list("tczyx"), datasets=copy.deepcopy(TCZYX_DATASETS))
        return {"multiscales": [ms]}
    types = {"t": "time", "c": "channel"}
    ms["axes"] = [{"name": n, "type": types.get(n, "space")} for n in "tczyx"]
    ms["datasets"] = [
        {"path": d["path"], "coordinateTransformations": [{"type": "scale", "scale": [1.0] * 5}]}
        for d in TCZYX_DATASETS
    ]
    if version == "0.4":
        return {"multiscales": [{**ms, "version": "0.4"}]}
    return {"ome": {"version": "0.5", "multiscales": [ms]}}


def test_the_same_5d_image_parses_to_equal_models_in_every_legacy_and_current_version():
    metas = {
        v: _parse(_tczyx(v), 3 if v == "0.5" else 2) for v in ("0.1", "0.2", "0.3", "0.4", "0.5")
    }
    assert {v: m.version for v, m in metas.items()} == {v: v for v in metas}
    expected = MultiscaleMeta(
        version="*",
        axes=(
            Axis("t", "time"),
            Axis("c", "channel"),
            Axis("z", "space"),
            Axis("y", "space"),
            Axis("x", "space"),
        ),
        datasets=tuple(
            DatasetMeta(
                p,
                (1.0,) * 5,
                (0.0,) * 5,
                TransformSequence(
                    transformations=(Scale(scale=(1.0,) * 5), Translation(translation=(0.0,) * 5)),
                    input=CoordinateSystemRef(path=p),
                ),
                True,
            )
            for p in ("0", "1")
        ),
        name="cells",
        type="mean",
        metadata={"method": "m"},
    )
    for meta in metas.values():
        assert _same_but_version(meta) == expected


def _zyx(version: str) -> dict:
    """A 3-D image with units, scales, translations, a multiscale-level transformation,
    channels and label metadata."""
    ms = {
        "name": "nuclei",
        "axes": [
            {"name": "z", "type": "space", "unit": "micrometer"},
            {"name": "y", "type": "space", "unit": "micrometer"},
            {"name": "x", "type": "space", "unit": "nanometer"},
        ],
        "datasets": [
            {
                "path": "s0",
                "coordinateTransformations": [
                    {"type": "scale", "scale": [2.0, 0.5, 0.25]},
                    {"type": "translation", "translation": [1.0, -2.0, 3.0]},
                ],
            },
            {"path": "s1", "coordinateTransformations": [{"type": "scale", "scale": [2, 1, 0.5]}]},
        ],
        "coordinateTransformations": [
            {"type": "scale", "scale": [1.0, 2.0, 2.0]},
            {"type": "translation", "translation": [0.0, 10.0, 20.0]},
        ],
    }
    extra = {
        "omero": {
            "channels": [
                {
                    "label": "DAPI",
                    "color": "00ff00",
                    "active": True,
                    "window": {"start": 1, "end": 2, "min": 0, "max": 255},
                }
            ]
        },
        "image-label": {
            "colors": [{"label-value": 1, "rgba": [255, 0, 0, 255]}, {"label-value": 2}],
            "properties": [{"label-value": 1, "class": "a"}, {"label-value": 2}],
            "source": {"image": "../../"},
        },
    }
    if version == "0.4":
        return {"multiscales": [{**ms, "version": "0.4"}], **extra}
    return {"ome": {"version": "0.5", "multiscales": [ms], **extra}}


def test_a_full_image_in_04_and_05_gives_equal_models_with_every_value():
    m4, m5 = _parse(_zyx("0.4"), 2), _parse(_zyx("0.5"), 3)
    assert (m4.version, m5.version) == ("0.4", "0.5")
    assert m4.image_label.version == "0.4" and m5.image_label.version == "0.5"
    assert _same_but_version(m4) == _same_but_version(m5)
    assert m4.axes == (
        Axis("z", "space", "micrometer"),
        Axis("y", "space", "micrometer"),
        Axis("x", "space", "nanometer"),
    )
    # Multiscale-level transformations apply after each level's.
    assert m4.datasets[0].scale == (2.0, 1.0, 0.5)
    assert m4.datasets[0].translation == (1.0, 6.0, 26.0)
    assert m4.datasets[1].scale == (2.0, 2.0, 1.0)
    assert m4.datasets[1].translation == (0.0, 10.0, 20.0)
    assert m4.exact and m4.coordinate_systems == () and m4.transformations == ()
    assert to_matrix(m4.datasets[0].transform, 3).tolist() == [
        [2.0, 0.0, 0.0, 1.0],
        [0.0, 1.0, 0.0, 6.0],
        [0.0, 0.0, 0.5, 26.0],
        [0.0, 0.0, 0.0, 1.0],
    ]
    assert m4.channels == (
        Channel("DAPI", "00FF00", {"start": 1.0, "end": 2.0, "min": 0.0, "max": 255.0}, True),
    )
    assert m4.image_label.colors == (LabelColor(1, (255, 0, 0, 255)), LabelColor(2, None))
    assert m4.image_label.properties == ({"label-value": 1, "class": "a"}, {"label-value": 2})
    assert m4.image_label.source_image == "../../"


def test_a_missing_version_reads_by_layout_with_a_warning():
    attrs = _zyx("0.4")
    del attrs["multiscales"][0]["version"]
    with pytest.warns(MetadataWarning, match="no NGFF version is declared; read as 0.4"):
        meta = _parse(attrs)
    assert meta.version == "0.4"


def test_supported_versions_and_block_kinds():
    assert SUPPORTED_VERSIONS == ("0.1", "0.2", "0.3", "0.4", "0.5", "0.6")
    assert kind_of({"plate": {}}) == "plate"
    assert kind_of({"well": {}}) == "well"
    assert kind_of({"multiscales": []}) == "image"
    assert kind_of({"scene": {}}) == "scene"
    assert kind_of({"bioformats2raw.layout": 3}) == "bioformats2raw"
    assert kind_of({"labels": []}) == "labels"
    assert kind_of({}) is None
    with pytest.raises(NotOmeZarrError) as info:
        require_ome({"foo": 1}, WHERE)
    assert info.value.field == "multiscales"
    assert parse_bioformats2raw({"bioformats2raw.layout": 3}, WHERE) == 3
    assert parse_labels_group({"labels": ["a", "b/c"]}, WHERE) == ("a", "b/c")


# -- the MUST rules, each naming its field ----------------------------------------------------------


def _ms04(attrs: dict) -> dict:
    return attrs["multiscales"][0]


def _del(key):
    def change(ms):
        del ms[key]

    return change


def _set(key, value):
    def change(ms):
        ms[key] = value

    return change


def _axes(*spec):
    return _set("axes", [{"name": n, "type": t} for n, t in spec])


def _ds(i, transforms):
    def change(ms):
        ms["datasets"][i]["coordinateTransformations"] = transforms

    return change


def _ds_path(i, path):
    def change(ms):
        if path is None:
            del ms["datasets"][i]["path"]
        else:
            ms["datasets"][i]["path"] = path

    return change


def _axis_field(i, key, value):
    def change(ms):
        ms["axes"][i][key] = value

    return change


SCALE3 = {"type": "scale", "scale": [1.0, 1.0, 1.0]}
TRANSLATION3 = {"type": "translation", "translation": [0.0, 0.0, 0.0]}
DS0 = "multiscales[0].datasets[0].coordinateTransformations"
IMAGE_RULES = {
    "no axes": (_del("axes"), "multiscales[0].axes"),
    "one axis": (_axes(("x", "space")), "multiscales[0].axes"),
    "six axes": (
        _axes(
            ("t", "time"),
            ("c", "channel"),
            ("w", "space"),
            ("z", "space"),
            ("y", "space"),
            ("x", "space"),
        ),
        "multiscales[0].axes",
    ),
    "one space axis": (
        _axes(("c", "channel"), ("x", "space"), ("t", "time")),
        "multiscales[0].axes",
    ),
    "four space axes": (
        _axes(("w", "space"), ("z", "space"), ("y", "space"), ("x", "space")),
        "multiscales[0].axes",
    ),
    "two time axes": (
        _axes(("t", "time"), ("u", "time"), ("y", "space"), ("x", "space")),
        "multiscales[0].axes",
    ),
    "channel and custom": (
        _axes(("c", "channel"), ("a", "angle"), ("y", "space"), ("x", "space")),
        "multiscales[0].axes",
    ),
    "space before channel": (
        _axes(("y", "space"), ("c", "channel"), ("x", "space")),
        "multiscales[0].axes",
    ),
    "time after channel": (
        _axes(("c", "channel"), ("t", "time"), ("y", "space"), ("x", "space")),
        "multiscales[0].axes",
    ),
    "duplicate axis names": (
        _axes(("y", "space"), ("y", "space"), ("x", "space")),
        "multiscales[0].axes",
    ),
    "axis name not a string": (_axis_field(1, "name", 5), "multiscales[0].axes[1].name"),
    "axis type not a string": (_axis_field(1, "type", ["space"]), "multiscales[0].axes[1].type"),
    "unit not a string": (_axis_field(2, "unit", 1e-6), "multiscales[0].axes[2].unit"),
    "no datasets": (_set("datasets", []), "multiscales[0].datasets"),
    "dataset without path": (_ds_path(0, None), "multiscales[0].datasets[0].path"),
    "empty dataset path": (_ds_path(0, ""), "multiscales[0].datasets[0].path"),
    "duplicate dataset path": (_ds_path(1, "s0"), "multiscales[0].datasets[1].path"),
    "no transformations": (_ds(0, None), DS0),
    "empty transformations": (_ds(0, []), DS0),
    "translation before scale": (_ds(0, [TRANSLATION3, SCALE3]), DS0),
    "two scales": (_ds(0, [SCALE3, SCALE3]), DS0),
    "three transformations": (_ds(0, [SCALE3, TRANSLATION3, TRANSLATION3]), DS0),
    "identity": (_ds(0, [{"type": "identity"}]), f"{DS0}[0].type"),
    "unknown type": (_ds(0, [{"type": "affine", "affine": [[1]]}]), f"{DS0}[0].type"),
    "scale length": (_ds(0, [{"type": "scale", "scale": [1, 1]}]), f"{DS0}[0].scale"),
    "translation length": (
        _ds(0, [SCALE3, {"type": "translation", "translation": [0, 0]}]),
        f"{DS0}[1].translation",
    ),
    "zero scale": (_ds(0, [{"type": "scale", "scale": [1, 0, 1]}]), f"{DS0}[0].scale"),
    "negative scale": (_ds(0, [{"type": "scale", "scale": [1, -1, 1]}]), f"{DS0}[0].scale"),
    "scale not numbers": (_ds(0, [{"type": "scale", "scale": [1, "2", 1]}]), f"{DS0}[0].scale"),
    "scale stored at a path": (_ds(0, [{"type": "scale", "path": "s"}]), f"{DS0}[0]"),
    "finer level after coarser": (
        _ds(1, [{"type": "scale", "scale": [2.0, 0.25, 0.5]}]),
        "multiscales[0].datasets[1].coordinateTransformations",
    ),
    "multiscale translation alone": (
        _set("coordinateTransformations", [TRANSLATION3]),
        "multiscales[0].coordinateTransformations",
    ),
    "multiscale scale length": (
        _set("coordinateTransformations", [{"type": "scale", "scale": [1]}]),
        "multiscales[0].coordinateTransformations[0].scale",
    ),
}


@pytest.mark.parametrize("version", ["0.4", "0.5"])
@pytest.mark.parametrize("rule", sorted(IMAGE_RULES))
def test_every_image_rule_raises_naming_its_field(version, rule):
    change, field = IMAGE_RULES[rule]
    attrs = _zyx(version)
    ms = attrs["multiscales"][0] if version == "0.4" else attrs["ome"]["multiscales"][0]
    ms.pop("coordinateTransformations")
    change(ms)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MetadataWarning)
        with pytest.raises(InvalidMetadataError) as info:
            _parse(attrs, 2 if version == "0.4" else 3)
    assert info.value.field == field
    assert info.value.store_path == WHERE
    assert str(info.value).startswith(f"{WHERE}: invalid '{field}'")


@pytest.mark.parametrize(
    ("attrs", "field"),
    [
        ({"multiscales": []}, "multiscales"),
        ({"multiscales": "0"}, "multiscales"),
        (
            {"multiscales": [{"version": "9.9", "datasets": [{"path": "0"}]}]},
            "multiscales[0].version",
        ),
        ({"multiscales": [5]}, "multiscales[0]"),
        ({"ome": {"version": 5, "multiscales": [{"datasets": []}]}}, "version"),
    ],
)
def test_multiscales_and_version_rules(attrs, field):
    with pytest.raises(InvalidMetadataError) as info:
        _parse(attrs, 3 if "ome" in attrs else 2)
    assert info.value.field == field


@pytest.mark.parametrize(
    ("axes", "field"),
    [
        (None, "multiscales[0].axes"),
        (["z", "y", "q"], "multiscales[0].axes[2]"),
        (["y", "y"], "multiscales[0].axes"),
        (list("tczyxx"), "multiscales[0].axes"),
        (["x"], "multiscales[0].axes"),  # 2 to 5 axes
    ],
)
def test_version_03_axes_rules(axes, field):
    ms = {"version": "0.3", "datasets": [{"path": "0"}]}
    if axes is not None:
        ms["axes"] = axes
    with pytest.raises(InvalidMetadataError) as info:
        _parse({"multiscales": [ms]})
    assert info.value.field == field


def test_version_03_reads_dict_axes_and_warns_about_finer_levels():
    ms = {
        "version": "0.3",
        "axes": [{"name": "y", "type": "space"}, {"name": "x", "type": "space"}],
        "datasets": [
            {"path": "0", "coordinateTransformations": [{"type": "scale", "scale": [2, 2]}]},
            {"path": "1", "coordinateTransformations": [{"type": "scale", "scale": [1, 1]}]},
        ],
    }
    with pytest.warns(MetadataWarning, match="finer scale"):
        meta = _parse({"multiscales": [ms]})
    assert meta.axis_names == ("y", "x") and meta.datasets[1].scale == (1.0, 1.0)


OMERO_04 = {
    "missing color": (
        {"window": {"start": 0, "end": 1, "min": 0, "max": 1}},
        "omero.channels[0].color",
    ),
    "missing window": ({"color": "FF0000"}, "omero.channels[0].window"),
    "window without end": (
        {"color": "FF0000", "window": {"start": 0, "min": 0, "max": 1}},
        "omero.channels[0].window.end",
    ),
    "window bound a string": (
        {"color": "FF0000", "window": {"start": "0", "end": 1, "min": 0, "max": 1}},
        "omero.channels[0].window.start",
    ),
    "color not hex": (
        {"color": "red", "window": {"start": 0, "end": 1, "min": 0, "max": 1}},
        "omero.channels[0].color",
    ),
    "color a number": (
        {"color": 255, "window": {"start": 0, "end": 1, "min": 0, "max": 1}},
        "omero.channels[0].color",
    ),
    "active not a boolean": (
        {"color": "FF0000", "window": {"start": 0, "end": 1, "min": 0, "max": 1}, "active": 1},
        "omero.channels[0].active",
    ),
}


@pytest.mark.parametrize("rule", sorted(OMERO_04))
def test_omero_rules_of_04(rule):
    channel, field = OMERO_04[rule]
    with pytest.raises(InvalidMetadataError) as info:
        parse_omero({"channels": [channel]}, WHERE, "0.4")
    assert info.value.field == field


def test_omero_without_channels_and_05_optional_color_and_window():
    for version in ("0.4", "0.5"):
        with pytest.raises(InvalidMetadataError) as info:
            parse_omero({"name": "x"}, WHERE, version)
        assert info.value.field == "omero.channels"
    assert parse_omero({"channels": [{"label": "a"}]}, WHERE, "0.5") == (
        Channel("a", None, None, None),
    )
    with pytest.raises(InvalidMetadataError) as info:
        parse_omero({"channels": [{"window": {"start": 0, "end": 1}}]}, WHERE, "0.5")
    assert info.value.field == "omero.channels[0].window.min"
    # 0.1-0.3 predate the rules: what is there is read.
    assert parse_omero({"channels": [{"window": {"start": 0}}]}, WHERE, "0.3") == (
        Channel(None, None, {"start": 0.0}, None),
    )


IMAGE_LABEL_RULES = {
    "duplicate values": (
        {"colors": [{"label-value": 1}, {"label-value": 1}]},
        "image-label.colors",
    ),
    "fractional value": ({"colors": [{"label-value": 1.5}]}, "image-label.colors[0].label-value"),
    "missing value": ({"colors": [{"rgba": [0, 0, 0, 0]}]}, "image-label.colors[0].label-value"),
    "rgba out of range": (
        {"colors": [{"label-value": 1, "rgba": [0, 0, 0, 256]}]},
        "image-label.colors[0].rgba",
    ),
    "rgba of three": (
        {"colors": [{"label-value": 1, "rgba": [0, 0, 0]}]},
        "image-label.colors[0].rgba",
    ),
    "empty colors": ({"colors": []}, "image-label.colors"),
    "empty properties": ({"properties": []}, "image-label.properties"),
    "property without value": ({"properties": [{"x": 1}]}, "image-label.properties[0].label-value"),
    "source not an object": ({"source": "../../"}, "image-label.source"),
    "source image not a string": ({"source": {"image": 1}}, "image-label.source.image"),
}


@pytest.mark.parametrize("version", ["0.4", "0.5"])
@pytest.mark.parametrize("rule", sorted(IMAGE_LABEL_RULES))
def test_image_label_rules(version, rule):
    block, field = IMAGE_LABEL_RULES[rule]
    with pytest.raises(InvalidMetadataError) as info:
        parse_image_label(block, version, WHERE)
    assert info.value.field == field


def test_image_label_values_are_integers_and_properties_may_list_other_values():
    meta = parse_image_label(
        {
            "colors": [{"label-value": 3.0, "rgba": [1, 2, 3, 4]}],
            "properties": [{"label-value": 4}],
        },
        "0.4",
        WHERE,
    )
    assert meta == ImageLabelMeta("0.4", (LabelColor(3, (1, 2, 3, 4)),), ({"label-value": 4},))
    assert isinstance(meta.colors[0].label_value, int)


def test_an_integer_label_value_written_as_a_float_is_the_same_integer_in_properties():
    meta = parse_image_label(
        {
            "colors": [{"label-value": 1, "rgba": [1, 2, 3, 4]}],
            "properties": [{"label-value": 1.0, "class": "nucleus", "area": 64}],
        },
        "0.4",
        WHERE,
    )
    assert meta.properties == ({"label-value": 1, "class": "nucleus", "area": 64},)
    assert type(meta.properties[0]["label-value"]) is int


def _plate(**over):
    plate = {
        "name": "p",
        "rows": [{"name": "A"}, {"name": "B"}],
        "columns": [{"name": "1"}, {"name": "2"}],
        "wells": [
            {"path": "A/1", "rowIndex": 0, "columnIndex": 0},
            {"path": "B/2", "rowIndex": 1, "columnIndex": 1},
        ],
        "acquisitions": [{"id": 0, "name": "a", "maximumfieldcount": 2, "starttime": 1}],
        "field_count": 2,
        "version": "0.4",
    }
    plate.update(over)
    return {"plate": plate}


PLATE_RULES = {
    "row not declared": (
        {"wells": [{"path": "C/1", "rowIndex": 0, "columnIndex": 0}]},
        "plate.wells[0].path",
    ),
    "path without a slash": (
        {"wells": [{"path": "A1", "rowIndex": 0, "columnIndex": 0}]},
        "plate.wells[0].path",
    ),
    "path of three parts": (
        {"wells": [{"path": "p/A/1", "rowIndex": 0, "columnIndex": 0}]},
        "plate.wells[0].path",
    ),
    "duplicate rows": ({"rows": [{"name": "A"}, {"name": "A"}]}, "plate.rows"),
    "column not alphanumeric": ({"columns": [{"name": "1-1"}]}, "plate.columns[0].name"),
    "rows not objects": ({"rows": ["A"]}, "plate.rows"),
    "missing rowIndex": ({"wells": [{"path": "A/1", "columnIndex": 0}]}, "plate.wells[0].rowIndex"),
    "negative columnIndex": (
        {"wells": [{"path": "A/1", "rowIndex": 0, "columnIndex": -1}]},
        "plate.wells[0].columnIndex",
    ),
    "duplicate well": (
        {"wells": [{"path": "A/1", "rowIndex": 0, "columnIndex": 0}] * 2},
        "plate.wells[1].path",
    ),
    "negative acquisition id": ({"acquisitions": [{"id": -1}]}, "plate.acquisitions[0].id"),
    "duplicate acquisition ids": ({"acquisitions": [{"id": 1}, {"id": 1}]}, "plate.acquisitions"),
    "zero maximumfieldcount": (
        {"acquisitions": [{"id": 0, "maximumfieldcount": 0}]},
        "plate.acquisitions[0].maximumfieldcount",
    ),
    "negative starttime": (
        {"acquisitions": [{"id": 0, "starttime": -5}]},
        "plate.acquisitions[0].starttime",
    ),
    "zero field_count": ({"field_count": 0}, "plate.field_count"),
    "wells not a list": ({"wells": {}}, "plate.wells"),
    "unknown version": ({"version": "7"}, "plate.version"),
}


@pytest.mark.parametrize("rule", sorted(PLATE_RULES))
def test_plate_rules(rule):
    over, field = PLATE_RULES[rule]
    with pytest.raises(InvalidMetadataError) as info:
        parse_plate(_plate(**over), None, WHERE)
    assert info.value.field == field


def test_plate_values_and_index_mismatch_warns():
    meta = parse_plate(_plate(), None, WHERE)
    assert (meta.version, meta.name, meta.rows, meta.columns) == (
        "0.4",
        "p",
        ("A", "B"),
        ("1", "2"),
    )
    assert [(w.path, w.row_index, w.column_index) for w in meta.wells] == [
        ("A/1", 0, 0),
        ("B/2", 1, 1),
    ]
    assert meta.acquisitions[0].maximum_field_count == 2 and meta.field_count == 2
    swapped = _plate(wells=[{"path": "A/2", "rowIndex": 1, "columnIndex": 0}])
    with pytest.warns(MetadataWarning, match="rowIndex/columnIndex"):
        assert parse_plate(swapped, None, WHERE).wells[0].column_index == 1


WELL_RULES = {
    "no images": ({"images": []}, "well.images"),
    "path not alphanumeric": ({"images": [{"path": "f-0"}]}, "well.images[0].path"),
    "duplicate path": ({"images": [{"path": "0"}, {"path": "0"}]}, "well.images[1].path"),
    "acquisition not an integer": (
        {"images": [{"path": "0", "acquisition": "a"}]},
        "well.images[0].acquisition",
    ),
    "path not a string": ({"images": [{"path": 0}]}, "well.images[0].path"),
}


@pytest.mark.parametrize("rule", sorted(WELL_RULES))
def test_well_rules(rule):
    well, field = WELL_RULES[rule]
    with pytest.raises(InvalidMetadataError) as info:
        parse_well({"well": {**well, "version": "0.4"}}, None, WHERE)
    assert info.value.field == field


def test_bioformats2raw_and_labels_rules():
    with pytest.raises(InvalidMetadataError) as info:
        parse_bioformats2raw({"bioformats2raw.layout": 2}, WHERE)
    assert info.value.field == "bioformats2raw.layout"
    with pytest.raises(InvalidMetadataError) as info:
        parse_labels_group({"labels": ["a", 1]}, WHERE)
    assert info.value.field == "labels"


# -- ome-zarr-models, only on request ------------------------------------------------------------


def _built(version: str, **over) -> dict:
    axes = build.make_axes(["c", "z", "y", "x"])
    block = {
        "multiscales": [
            build.multiscales_block(
                version=version,
                axes=axes,
                paths=["0", "1"],
                scales=[(1, 2, 0.5, 0.5), (1, 2, 1, 1)],
                translations=[(0, 0, 0, 0), (0, 0, 0.25, 0.25)],
                name="img",
                method="mean",
            )
        ],
        "omero": build.omero_block(
            [Channel("a", "FF0000", {"start": 0, "end": 9, "min": 0, "max": 9}, True)]
        ),
        **over,
    }
    return build.wrap(version, block)


@pytest.mark.parametrize("version", ["0.4", "0.5"])
def test_what_the_builder_writes_parses_and_passes_ome_zarr_models(version):
    pytest.importorskip("ome_zarr_models")
    zarr_format = 2 if version == "0.4" else 3
    attrs = _built(version)
    meta = _parse(attrs, zarr_format)
    assert [d.scale for d in meta.datasets] == [(1.0, 2.0, 0.5, 0.5), (1.0, 2.0, 1.0, 1.0)]
    assert meta.datasets[1].translation == (0.0, 0.0, 0.25, 0.25)
    assert validate_with_ome_zarr_models(attrs, zarr_format, WHERE) == []
    label = _built(
        version, **{"image-label": {"colors": [{"label-value": 1, "rgba": [1, 2, 3, 4]}]}}
    )
    assert validate_with_ome_zarr_models(label, zarr_format, WHERE) == []
    plate = _plate()["plate"]
    plate.pop("version")
    for block in ({"labels": ["cells"]}, {"plate": plate}):
        assert validate_with_ome_zarr_models(build.wrap(version, block), zarr_format, WHERE) == []
    well = build.wrap(version, {"well": {"images": [{"path": "0"}]}})
    assert validate_with_ome_zarr_models(well, zarr_format, WHERE) == []


# Rules both we and ome-zarr-models enforce: each breaks a built block.
SHARED_RULES = [
    "one space axis",
    "duplicate axis names",
    "no datasets",
    "translation before scale",
    "two scales",
    "identity",
    "scale length",
    "finer level after coarser",
    "time after channel",
]


@pytest.mark.parametrize("version", ["0.4", "0.5"])
@pytest.mark.parametrize("rule", SHARED_RULES)
def test_invalid_blocks_give_problems_from_ome_zarr_models_and_errors_from_us(version, rule):
    pytest.importorskip("ome_zarr_models")
    change, field = IMAGE_RULES[rule]
    attrs = _zyx(version)
    ms = attrs["multiscales"][0] if version == "0.4" else attrs["ome"]["multiscales"][0]
    ms.pop("coordinateTransformations")
    change(ms)
    zarr_format = 2 if version == "0.4" else 3
    problems = validate_with_ome_zarr_models(attrs, zarr_format, WHERE)
    assert problems and all(p.startswith(f"{WHERE}: ") for p in problems)
    with pytest.raises(InvalidMetadataError) as info:
        _parse(attrs, zarr_format)
    assert info.value.field == field


def test_ome_zarr_models_reports_what_it_cannot_check(monkeypatch):
    pytest.importorskip("ome_zarr_models")
    attrs = _built("0.5")
    assert validate_with_ome_zarr_models(attrs, 2, WHERE) == [
        f"{WHERE}: zarr_format: NGFF 0.5 is stored in zarr v3, not v2"
    ]
    six = build.wrap("0.6", {"multiscales": _built("0.5")["ome"]["multiscales"]})
    six["ome"]["multiscales"][0] = build.multiscales_block(
        version="0.6",
        axes=build.make_axes("yx"),
        paths=["0"],
        scales=[(1.0, 1.0)],
        translations=[(0.0, 0.0)],
    )
    if importlib.util.find_spec("ome_zarr_models.v06") is None:  # ome-zarr-models < 1.8
        (problem,) = validate_with_ome_zarr_models(six, 3, WHERE)
        assert "has no public model for NGFF 0.6" in problem
    else:
        assert validate_with_ome_zarr_models(six, 3, WHERE) == []
    (problem,) = validate_with_ome_zarr_models(_tczyx("0.3"), 2, WHERE)
    assert "has no public model for NGFF 0.3" in problem
    assert validate_with_ome_zarr_models({}, 2, WHERE) == [
        f"{WHERE}: no OME-NGFF metadata in the attributes"
    ]
    monkeypatch.setitem(sys.modules, "ome_zarr_models", None)
    assert validate_with_ome_zarr_models(attrs, 3, WHERE) == [
        f"{WHERE}: ome-zarr-models is not installed (pip install ome-zarr-models)"
    ]


def test_the_read_path_never_imports_ome_zarr_models(tmp_path):
    attrs = {v: _tczyx(v) for v in ("0.1", "0.2", "0.3", "0.4", "0.5")}
    script = textwrap.dedent(
        f"""
        import json, sys
        import numpy as np
        import linumpy_gpu as lg
        from linumpy_gpu import ngff
        for version, attrs in json.loads({json.dumps(json.dumps(attrs))}).items():
            block, declared = ngff.ome_block(attrs, 3 if version == "0.5" else 2)
            ngff.parse_multiscales(block, declared, "x")
        img = lg.write_ome_zarr({str(tmp_path / "a.zarr")!r}, np.zeros((4, 8, 8), "u2"),
                                levels=2, device="cpu")
        img = lg.open_ome_zarr({str(tmp_path / "a.zarr")!r})
        img[1][...]
        print(sorted(m for m in sys.modules if m.startswith("ome_zarr_models")))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "[]"


# -- never anything but InvalidMetadataError --------------------------------------------------------

_json = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(2**70), 2**70),
        st.floats(allow_nan=True, allow_infinity=True),
        st.text(max_size=6),
        st.sampled_from(["space", "time", "channel", "scale", "translation", "0", "s0", "0.4"]),
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=6,
)


def _nodes(node, path=()):
    yield path, node
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _nodes(v, (*path, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _nodes(v, (*path, i))


@st.composite
def mutated(draw, base):
    tree = copy.deepcopy(base)
    for _ in range(draw(st.integers(1, 3))):
        paths = [p for p, _ in _nodes(tree)]
        path = draw(st.sampled_from(paths))
        action = draw(st.sampled_from(["replace", "delete", "duplicate"]))
        if not path:
            tree = draw(_json) if action == "replace" else tree
            continue
        parent = tree
        for part in path[:-1]:
            parent = parent[part]
        key = path[-1]
        if action == "replace":
            parent[key] = draw(_json)
        elif action == "delete":
            del parent[key]
        elif isinstance(parent, list):
            parent.insert(key, copy.deepcopy(parent[key]))
    return tree


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    data=st.data(),
    version=st.sampled_from(["0.1", "0.3", "0.4", "0.5", "zyx-0.4", "zyx-0.5"]),
)
def test_mutated_blocks_parse_or_raise_invalid_metadata_only(data, version):
    base = _zyx(version[4:]) if version.startswith("zyx") else _tczyx(version)
    attrs = data.draw(mutated(base))
    zarr_format = 3 if version.endswith("0.5") else 2
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MetadataWarning)
        try:
            block, declared = ome_block(attrs if isinstance(attrs, dict) else {}, zarr_format)
            meta = parse_multiscales(block, declared, WHERE)
        except InvalidMetadataError as exc:
            assert exc.store_path == WHERE and exc.field
            return
    assert isinstance(meta, MultiscaleMeta)
    assert all(len(d.scale) == len(meta.axes) == len(d.translation) for d in meta.datasets)
