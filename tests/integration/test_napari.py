"""The napari reader, headless: layer data tuples checked without napari or a viewer."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import zarr

import linumpy_gpu as lg
from linumpy_gpu.napari import napari_get_reader

MANIFEST = Path(lg.__file__).parent / "napari.yaml"


def _volume(shape, seed=0, dtype="u2"):
    return np.random.default_rng(seed).integers(0, 4000, size=shape).astype(dtype)


@pytest.fixture
def image_path(tmp_path) -> Path:
    path = tmp_path / "img.ome.zarr"
    data = _volume((2, 10, 40, 48))
    img = lg.write_ome_zarr(
        path,
        data,
        axes="czyx",
        units=[None, "micrometer", "micrometer", "micrometer"],
        scale=(1.0, 3.0, 0.5, 0.25),
        translation=(0.0, 5.0, 6.0, 7.0),
        channels=[
            {
                "label": "dapi",
                "color": "0000FF",
                "window": {"start": 10, "end": 900, "min": 0, "max": 4095},
            },
            {
                "label": "gfp",
                "color": "FF8000",
                "window": {"start": 0, "end": 400, "min": 0, "max": 4095},
                "active": False,
            },
        ],
        levels=3,
        name="cells",
    )
    lg.write_labels(
        img,
        "nuclei",
        (data % 3).astype("u4"),
        colors={1: (255, 0, 0, 255), 2: (0, 255, 0, 128)},
        properties=[{"label-value": 1, "class": "bright"}, {"label-value": 2, "area": 7}],
    )
    return path


def test_image_and_label_layers(image_path):
    reader = napari_get_reader(str(image_path))
    assert callable(reader)
    layers = reader(str(image_path))
    assert [layer_type for _, _, layer_type in layers] == ["image", "labels"]
    img = lg.open_ome_zarr(image_path)

    data, meta, _ = layers[0]
    assert [d.shape for d in data] == [lv.shape for lv in img.levels]
    assert all(type(d).__module__.startswith("dask") for d in data)  # lazy
    assert all(isinstance(d._meta, np.ndarray) for d in data)  # read on the CPU
    assert meta["multiscale"] is True
    assert meta["channel_axis"] == 0
    assert meta["scale"] == [3.0, 0.5, 0.25]  # level 0, without the channel axis
    assert meta["translate"] == [5.0, 6.0, 7.0]
    assert meta["name"] == ["dapi", "gfp"]
    assert meta["contrast_limits"] == [[10.0, 900.0], [0.0, 400.0]]
    assert meta["visible"] == [True, False]
    assert meta["colormap"][0] == ("#0000FF", [[0.0, 0.0, 0.0, 1.0], [0.0, 0.0, 1.0, 1.0]])
    assert meta["axis_labels"] == ["z", "y", "x"]
    assert meta["units"] == ["micrometer"] * 3
    np.testing.assert_array_equal(data[1][:, 2:5].compute(), img[1][:, 2:5])

    labels, lmeta, _ = layers[1]
    label = img.labels["nuclei"]
    assert [d.shape for d in labels] == [lv.shape for lv in label.levels]
    assert lmeta == {
        "multiscale": True,
        "scale": [1.0, 3.0, 0.5, 0.25],
        "translate": [0.0, 5.0, 6.0, 7.0],
        "name": "nuclei",
        "axis_labels": ["c", "z", "y", "x"],
        # napari's colormap: label value -> RGBA in 0..1 (None: labels not listed)
        "colormap": {
            None: [0.5, 0.5, 0.5, 1.0],
            0: [0.0, 0.0, 0.0, 0.0],
            1: [1.0, 0.0, 0.0, 1.0],
            2: [0.0, 1.0, 0.0, 128 / 255],
        },
        # napari's features table: a row per label value, which "index" gives
        "features": {"index": [1, 2], "area": [None, 7], "class": ["bright", None]},
    }


def test_a_channel_without_a_usable_window_keeps_the_others(tmp_path):
    path = tmp_path / "w.zarr"
    window = {"min": 0, "max": 4095}
    channels = [
        {"window": {"start": 10, "end": 900, **window}},
        {"window": {"start": 5, "end": 5, **window}},
    ]
    lg.write_ome_zarr(path, _volume((2, 4, 16, 16)), axes="czyx", channels=channels)
    ((_, meta, _),) = napari_get_reader(str(path))(str(path))
    assert meta["contrast_limits"] == [[10.0, 900.0], None]


def test_an_image_without_channels(tmp_path):
    path = tmp_path / "gray.zarr"
    lg.write_ome_zarr(path, _volume((8, 32, 32)), axes="zyx", scale=(2, 1, 1), levels=2)
    ((data, meta, layer_type),) = napari_get_reader(str(path))(str(path))
    assert layer_type == "image" and len(data) == 2
    assert "channel_axis" not in meta and meta["scale"] == [2.0, 1.0, 1.0]
    assert "units" not in meta  # the store gives none
    assert meta["name"] == "gray.zarr"


def test_a_label_image_path_gives_a_labels_layer(image_path):
    path = image_path / "labels" / "nuclei"
    ((data, meta, layer_type),) = napari_get_reader([str(path)])(str(path))
    assert layer_type == "labels" and meta["name"] == "nuclei" and len(data) == 3


def test_a_bioformats2raw_collection_gives_each_series(tmp_path):
    root = zarr.open_group(str(tmp_path / "b2r.zarr"), mode="w", zarr_format=2)
    root.attrs.put({"bioformats2raw.layout": 3})
    for i in range(2):
        lg.write_ome_zarr(
            tmp_path / "b2r.zarr" / str(i), _volume((4, 16, 16)), axes="zyx", version="0.4"
        )
    layers = napari_get_reader(str(tmp_path / "b2r.zarr"))(str(tmp_path / "b2r.zarr"))
    assert [t for _, _, t in layers] == ["image", "image"]
    # a series the collection lists but that is missing is left out, with a warning
    root.attrs.put({"bioformats2raw.layout": 3})
    zarr.open_group(str(tmp_path / "b2r.zarr" / "OME"), mode="w", zarr_format=2).attrs.put(
        {"series": ["0", "5", "1"]}
    )
    reader = napari_get_reader(str(tmp_path / "b2r.zarr"))
    with pytest.warns(UserWarning, match="series 1 not shown"):
        layers = reader(str(tmp_path / "b2r.zarr"))
    assert [t for _, _, t in layers] == ["image", "image"]


def test_not_ours(tmp_path):
    plate = zarr.open_group(str(tmp_path / "plate.zarr"), mode="w", zarr_format=3)
    plate.attrs.put(
        {
            "ome": {
                "version": "0.5",
                "plate": {
                    "rows": [{"name": "A"}],
                    "columns": [{"name": "1"}],
                    "wells": [{"path": "A/1", "rowIndex": 0, "columnIndex": 0}],
                },
            }
        }
    )
    assert napari_get_reader(str(tmp_path / "plate.zarr")) is None
    assert napari_get_reader(str(tmp_path / "missing.zarr")) is None
    (tmp_path / "photo.png").write_bytes(b"\x89PNG")
    assert napari_get_reader(str(tmp_path / "photo.png")) is None
    plain = zarr.open_group(str(tmp_path / "plain.zarr"), mode="w")
    plain.attrs["x"] = 1
    assert napari_get_reader(str(tmp_path / "plain.zarr")) is None
    assert napari_get_reader([str(tmp_path / "a.zarr"), str(tmp_path / "b.zarr")]) is None


def test_the_module_does_not_import_napari():
    code = "import sys, linumpy_gpu.napari; print('napari' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_manifest_structure():
    yaml = pytest.importorskip("yaml")
    manifest = yaml.safe_load(MANIFEST.read_text())
    assert manifest["name"] == "linumpy-gpu"
    (command,) = manifest["contributions"]["commands"]
    (reader,) = manifest["contributions"]["readers"]
    assert reader["command"] == command["id"]
    assert command["python_name"] == "linumpy_gpu.napari:napari_get_reader"
    assert set(reader["filename_patterns"]) == {"*.zarr", "*.ome.zarr"}
    assert reader["accepts_directories"] is True
    pyproject = (Path(__file__).resolve().parents[2] / "pyproject.toml").read_text()
    assert '[project.entry-points."napari.manifest"]' in pyproject
    assert 'linumpy-gpu = "linumpy_gpu:napari.yaml"' in pyproject


def test_manifest_validates_with_npe2(image_path):
    npe2 = pytest.importorskip("npe2")
    from npe2.manifest.utils import import_python_name

    manifest = npe2.PluginManifest.from_file(MANIFEST)
    assert manifest.name == "linumpy-gpu"
    (reader,) = manifest.contributions.readers
    assert reader.accepts_directories and "*.ome.zarr" in reader.filename_patterns
    (command,) = manifest.contributions.commands
    get_reader = import_python_name(command.python_name)
    assert get_reader is napari_get_reader
    assert get_reader(str(image_path)) is not None
