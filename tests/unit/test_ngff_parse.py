"""NGFF metadata parsing: values, composition, errors naming the field, warnings."""

from __future__ import annotations

import pytest

from linumpy_gpu import InvalidMetadataError, MetadataWarning
from linumpy_gpu.ngff import ome_block, parse_multiscales, parse_plate, parse_well


def _ms(**over):
    ms = {
        "version": "0.4",
        "axes": [
            {"name": "c", "type": "channel"},
            {"name": "y", "type": "space", "unit": "micrometer"},
            {"name": "x", "type": "space", "unit": "micrometer"},
        ],
        "datasets": [
            {
                "path": "0",
                "coordinateTransformations": [
                    {"type": "scale", "scale": [1, 0.5, 0.25]},
                    {"type": "translation", "translation": [0, 10, 20]},
                ],
            },
            {"path": "1", "coordinateTransformations": [{"type": "scale", "scale": [1, 1.0, 0.5]}]},
        ],
    }
    ms.update(over)
    return {"multiscales": [ms]}


def test_scales_translations_and_units():
    meta = parse_multiscales(_ms(), None, "/s")
    assert meta.version == "0.4"
    assert meta.axis_names == ("c", "y", "x")
    assert [a.unit for a in meta.axes] == [None, "micrometer", "micrometer"]
    assert meta.datasets[0].scale == (1.0, 0.5, 0.25)
    assert meta.datasets[0].translation == (0.0, 10.0, 20.0)
    assert meta.datasets[1].translation == (0.0, 0.0, 0.0)


def test_multiscale_level_transform_is_composed_after_dataset_transform():
    block = _ms(
        coordinateTransformations=[
            {"type": "scale", "scale": [1, 2, 2]},
            {"type": "translation", "translation": [0, 5, 7]},
        ]
    )
    meta = parse_multiscales(block, None, "/s")
    assert meta.datasets[0].scale == (1.0, 1.0, 0.5)
    # physical = global_scale * (dataset_scale * i + dataset_translation) + global_translation
    assert meta.datasets[0].translation == (0.0, 10 * 2 + 5.0, 20 * 2 + 7.0)
    assert meta.datasets[1].scale == (1.0, 2.0, 1.0)
    assert meta.datasets[1].translation == (0.0, 5.0, 7.0)


def test_ngff_05_block_lives_under_ome():
    ms = _ms()["multiscales"][0]
    del ms["version"]
    attrs = {
        "ome": {
            "version": "0.5",
            "multiscales": [ms],
            "omero": {
                "channels": [
                    {
                        "label": "DAPI",
                        "color": "0000ff",
                        "active": True,
                        "window": {"start": 0, "end": 1000, "min": 0, "max": 65535},
                    }
                ]
            },
        }
    }
    block, version = ome_block(attrs, 3)
    meta = parse_multiscales(block, version, "/s")
    assert meta.version == "0.5"
    assert meta.channels[0].label == "DAPI"
    assert meta.channels[0].color == "0000FF"
    assert meta.channels[0].rgb == (0, 0, 255)
    assert meta.channels[0].window == {"start": 0.0, "end": 1000.0, "min": 0.0, "max": 65535.0}


@pytest.mark.parametrize(
    ("shapes", "expected"),
    [
        ([(89, 89), (45, 45), (23, 23), (12, 12), (6, 6)], [1, 2, 4, 8, 16]),  # halved up
        ([(89, 89), (44, 44), (22, 22), (11, 11), (5, 5)], [1, 2, 4, 8, 16]),  # halved down
        ([(90, 90), (30, 30), (10, 10)], [1, 3, 9]),
    ],
)
def test_version_03_scales_follow_the_pyramid_level_by_level(shapes, expected):
    """0.1-0.3 store no scales: each level's is the level before's times their ratio of
    sizes, rounded (level 0's size over the level's would give 89 / 12 -> 7)."""
    from linumpy_gpu.ngff import scales_from_shapes

    datasets = [{"path": str(i)} for i in range(len(shapes))]
    block = {"multiscales": [{"version": "0.3", "axes": ["y", "x"], "datasets": datasets}]}
    meta = scales_from_shapes(parse_multiscales(block, "0.3", "img"), shapes)
    assert [ds.scale for ds in meta.datasets] == [(float(f), float(f)) for f in expected]


def test_version_03_string_axes_and_02_implicit_axes():
    block = {
        "multiscales": [{"version": "0.3", "axes": ["z", "y", "x"], "datasets": [{"path": "0"}]}]
    }
    meta = parse_multiscales(block, None, "/s")
    assert meta.axis_names == ("z", "y", "x")
    assert meta.datasets[0].scale == (1.0, 1.0, 1.0)
    block = {"multiscales": [{"version": "0.2", "datasets": [{"path": "0"}]}]}
    assert parse_multiscales(block, None, "/s").axis_names == ("t", "c", "z", "y", "x")


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"datasets": []}, "datasets"),
        ({"axes": [{"name": "y"}, {"name": "y"}, {"name": "x"}]}, "axes"),
        (
            {
                "datasets": [
                    {"path": "0", "coordinateTransformations": [{"type": "scale", "scale": [1, 2]}]}
                ]
            },
            "scale",
        ),
        ({"datasets": [{"path": "0"}]}, "coordinateTransformations"),
        (
            {
                "datasets": [
                    {
                        "path": "0",
                        "coordinateTransformations": [{"type": "scale", "scale": [1, 0, 1]}],
                    }
                ]
            },
            "scale",
        ),
        ({"version": "9.9"}, "version"),
    ],
)
def test_invalid_multiscales_name_the_field(change, field):
    with pytest.raises(InvalidMetadataError) as info:
        parse_multiscales(_ms(**change), None, "/data/x.zarr")
    err = info.value
    assert err.store_path == "/data/x.zarr"
    assert field in err.field
    assert "/data/x.zarr" in str(err) and field in str(err)


@pytest.mark.parametrize("alias", ["0", "0/", "/0", "//0/"])
def test_two_levels_naming_one_node_are_refused(alias):
    """zarr resolves '0/' and '/0' to the node '0': a second level there would read level
    0's data under another scale."""
    transforms = [{"type": "scale", "scale": [1, 1, 1]}]
    datasets = [
        {"path": "0", "coordinateTransformations": transforms},
        {"path": alias, "coordinateTransformations": [{"type": "scale", "scale": [1, 2, 2]}]},
    ]
    with pytest.raises(InvalidMetadataError, match="no other level"):
        parse_multiscales(_ms(datasets=datasets), None, "/data/x.zarr")


def test_unknown_unit_warns():
    block = _ms(
        axes=[
            {"name": "c", "type": "channel"},
            {"name": "y", "type": "space", "unit": "furlong"},
            {"name": "x", "type": "space", "unit": "micrometer"},
        ]
    )
    with pytest.warns(MetadataWarning, match="furlong"):
        parse_multiscales(block, None, "/s")


def test_bad_channel_color():
    block = _ms()
    block["omero"] = {"channels": [{"color": "red"}]}
    with pytest.raises(InvalidMetadataError, match=r"omero.channels\[0\].color"):
        parse_multiscales(block, None, "/s")


def test_plate_and_well():
    plate = {
        "plate": {
            "name": "p",
            "rows": [{"name": "A"}, {"name": "B"}],
            "columns": [{"name": "1"}, {"name": "2"}, {"name": "3"}],
            "wells": [{"path": "B/3", "rowIndex": 1, "columnIndex": 2}],
            "acquisitions": [{"id": 0, "name": "first"}],
            "field_count": 2,
            "version": "0.4",
        }
    }
    meta = parse_plate(plate, None, "/p")
    assert meta.rows == ("A", "B") and meta.columns == ("1", "2", "3")
    assert meta.wells[0].row == "B" and meta.wells[0].column_index == 2
    assert meta.acquisitions[0].name == "first"
    plate["plate"]["wells"][0]["path"] = "C/3"
    with pytest.raises(InvalidMetadataError, match=r"plate.wells\[0\].path"):
        parse_plate(plate, None, "/p")
    well = parse_well(
        {"well": {"images": [{"path": "0", "acquisition": 0}, {"path": "1"}], "version": "0.4"}},
        None,
        "/p/B/3",
    )
    assert [f.path for f in well.images] == ["0", "1"]


@pytest.mark.parametrize("path", ["A/..", "./1", "A/."])
def test_well_paths_stay_inside_the_plate_in_every_version(path):
    """0.1-0.3 take any row and column names; '.' and '..' would leave the plate."""
    row, column = path.split("/")
    for version in ("0.2", "0.3"):
        block = {
            "plate": {
                "version": version,
                "rows": [{"name": row}],
                "columns": [{"name": column}],
                "wells": [{"path": path, "rowIndex": 0, "columnIndex": 0}],
            }
        }
        with pytest.raises(InvalidMetadataError, match="row/column"):
            parse_plate(block, version, "plate")
