"""The writer: NGFF 0.4 and 0.5 stores that other readers read back pixel-equal."""

from __future__ import annotations

import numpy as np
import pytest
import zarr

import linumpy_gpu as lg
from linumpy_gpu.write import StoreExistsError, WriteError, write_ome_zarr
from tests.helpers.writers import ngff_attrs


@pytest.mark.parametrize(
    ("version", "shards"), [("0.4", None), ("0.5", None), ("0.5", (8, 32, 32))]
)
def test_write_read_back_with_every_reader(tmp_path, version, shards):
    data = (np.arange(20 * 50 * 60) % 3000).astype("u2").reshape(20, 50, 60)
    img = write_ome_zarr(
        tmp_path / "w.zarr",
        data,
        axes="zyx",
        scale=(2.0, 0.5, 0.5),
        chunks=(4, 16, 16),
        shards=shards,
        levels=3,
        version=version,
    )
    assert img.version == version and len(img) == 3
    np.testing.assert_array_equal(img[0][:], data)
    attrs = ngff_attrs(tmp_path / "w.zarr")
    assert [d["path"] for d in attrs["multiscales"][0]["datasets"]] == ["0", "1", "2"]
    for i, lv in enumerate(img.levels):
        expected = zarr.open_array(str(tmp_path / "w.zarr" / str(i)), mode="r")[...]
        np.testing.assert_array_equal(lv[:], expected)
    means = data.reshape(10, 2, 25, 2, 30, 2).mean(axis=(1, 3, 5))
    np.testing.assert_array_equal(img[1][:], np.rint(means).astype(data.dtype))
    assert img.scale(2) == (8.0, 2.0, 2.0)
    from ome_zarr.io import parse_url
    from ome_zarr.reader import Reader

    # ome-zarr-py's reader is what napari-ome-zarr opens stores with.
    nodes = list(Reader(parse_url(str(tmp_path / "w.zarr")))())
    assert len(nodes[0].data) == 3
    for level, array in enumerate(nodes[0].data):
        np.testing.assert_array_equal(np.asarray(array), img[level][:])
    meta = nodes[0].metadata
    assert [a["name"] for a in meta["axes"]] == ["z", "y", "x"]
    scales = [t[0]["scale"] for t in meta["coordinateTransformations"]]
    assert scales == [list(img.scale(i)) for i in range(3)]


def test_bad_input_fails_before_writing(tmp_path):
    data = np.zeros((4, 8, 8), dtype="u2")
    target = tmp_path / "x.zarr"
    for kwargs, match in [
        (dict(axes="yx"), "axes"),
        (dict(scale=(1, 1)), "scale"),
        (dict(scale=(1, -1, 1)), "positive"),
        (dict(chunks=(1, 1)), "chunks"),
        (dict(shards=(3, 8, 8), chunks=(2, 8, 8)), "multiples"),
        (dict(version="0.7"), "version"),
        (dict(method="median"), "method"),
        (dict(units=5), "units"),
        (dict(scale=np.array(1.0)), "scale"),
        (dict(axes="cyx", channels=[{"window": {"start": 0, "end": 10**400}}] * 4), "window"),
    ]:
        with pytest.raises(WriteError, match=match):
            write_ome_zarr(target, data, **kwargs)
        assert not target.exists()
    with pytest.raises(WriteError, match="dtype"):
        write_ome_zarr(target, np.zeros((4, 4), dtype="U3"))
    write_ome_zarr(target, data)
    with pytest.raises(StoreExistsError):
        write_ome_zarr(target, data)
    assert isinstance(write_ome_zarr(target, data, overwrite=True), lg.MultiscaleImage)


def test_cli_demo_runs(capsys):
    from linumpy_gpu.cli import main

    assert main(["demo", "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "equal to zarr-python's read" in out and "DIFFERENT" not in out


def test_cli_inspect_and_info(tmp_path, capsys):
    from linumpy_gpu.cli import main
    from linumpy_gpu.sample import write_sample

    write_sample(tmp_path / "s.zarr")
    assert main(["inspect", str(tmp_path / "s.zarr")]) == 0
    assert "(96, 256, 256)" in capsys.readouterr().out
    assert main(["inspect", str(tmp_path / "missing.zarr")]) == 2
    assert "no such file" in capsys.readouterr().err
    assert main(["info"]) == 0
    out = capsys.readouterr().out
    assert "linumpy-gpu" in out and "zarr" in out


@pytest.mark.parametrize(
    ("shape", "levels"), [((2, 1000, 700), 3), ((1, 256, 256), 1), ((2, 2048, 300), 4)]
)
def test_a_pyramid_by_default_down_to_a_256_tile(tmp_path, shape, levels):
    """Without ``levels``, every spatial axis is halved until the last two fit 256 x 256."""
    data = np.zeros(shape, dtype="u1")
    img = write_ome_zarr(tmp_path / "p.zarr", data, axes="zyx")
    assert len(img) == levels
    assert max(img[-1].shape[-2:]) <= 256
    if levels > 1:
        assert max(img[-2].shape[-2:]) > 256
    assert img.scale(levels - 1)[-1] == 2.0 ** (levels - 1)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (dict(properties=[1]), "dict"),
        (dict(properties="cells"), "list of dicts"),
        (dict(properties=[{"label-value": 1, "mean": float("nan")}]), "JSON"),
        (dict(properties=[{"label-value": 1, "when": object()}]), "JSON"),
        (dict(colors={1: 5}), "rgba"),
    ],
)
def test_bad_label_metadata_is_refused_before_writing(tmp_path, kwargs, match):
    img = write_ome_zarr(tmp_path / "img.zarr", np.zeros((4, 8, 8), "u2"))
    with pytest.raises(WriteError, match=match):
        lg.write_labels(img, "cells", np.zeros((4, 8, 8), "u1"), **kwargs)
    assert not (tmp_path / "img.zarr" / "labels").exists()


def _files_below(folder):
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def test_labels_are_not_written_into_an_array_named_labels(tmp_path):
    """An image whose ``labels`` is an array gets a typed error before anything is written
    (not a label image inside the array's folder)."""
    write_ome_zarr(tmp_path / "img.zarr", np.zeros((4, 8, 8), "u2"))
    zarr.open_array(str(tmp_path / "img.zarr" / "labels"), mode="w", shape=(3,), dtype="u1")
    before = _files_below(tmp_path / "img.zarr")
    with pytest.raises(lg.NotOmeZarrError, match="labels"):
        lg.write_labels(tmp_path / "img.zarr", "cells", np.zeros((4, 8, 8), "u1"))
    assert _files_below(tmp_path / "img.zarr") == before


@pytest.mark.parametrize("listing", ["cells", [1, 2], {"cells": 1}])
def test_a_labels_listing_that_is_not_a_list_of_names_is_refused(tmp_path, listing):
    img = write_ome_zarr(tmp_path / "img.zarr", np.zeros((4, 8, 8), "u2"))
    lg.write_labels(img, "cells", np.zeros((4, 8, 8), "u1"))
    group = zarr.open_group(str(tmp_path / "img.zarr" / "labels"), mode="r+")
    ome = dict(group.attrs["ome"])
    ome["labels"] = listing
    group.attrs["ome"] = ome
    before = _files_below(tmp_path / "img.zarr")
    with pytest.raises(lg.InvalidMetadataError, match="list of label image paths"):
        lg.write_labels(tmp_path / "img.zarr", "nuclei", np.zeros((4, 8, 8), "u1"))
    assert _files_below(tmp_path / "img.zarr") == before


def test_label_metadata_from_numpy_measurements_is_written_as_json_numbers(tmp_path):
    img = write_ome_zarr(tmp_path / "img.zarr", np.zeros((4, 8, 8), "u2"))
    seg = np.zeros((4, 8, 8), "u1")
    seg[1:3, 2:5, 2:5] = 1
    values, counts = np.unique(seg, return_counts=True)
    props = [
        {"label-value": v, "area": c, "mean": np.float32(0.5)}
        for v, c in zip(values, counts, strict=True)
    ]
    label = lg.write_labels(img, "cells", seg, properties=props)
    written = ngff_attrs(tmp_path / "img.zarr" / "labels" / "cells")["image-label"]["properties"]
    assert written == [
        {"label-value": 0, "area": 238, "mean": 0.5},
        {"label-value": 1, "area": 18, "mean": 0.5},
    ]
    np.testing.assert_array_equal(label[0][...], seg)
