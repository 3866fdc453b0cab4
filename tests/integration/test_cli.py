"""The ``linumpy-gpu`` command: validate, inspect --json, convert, bench, and one-line errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numcodecs
import numpy as np
import pytest
import zarr

import linumpy_gpu as lg
from linumpy_gpu.cli import _bench_region, _blocks, _layout, main
from tests.helpers.safety import snapshot
from tests.helpers.terminal import stderr_on_terminal


def _volume(shape=(2, 20, 70, 90), seed=0, dtype="u2") -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.integers(0, 4000, size=shape).astype(dtype)


@pytest.fixture
def image_path(tmp_path) -> Path:
    """A 0.5 image with channels, units, a translation and a label image."""
    path = tmp_path / "img.ome.zarr"
    data = _volume()
    img = lg.write_ome_zarr(
        path,
        data,
        axes="czyx",
        units=[None, "micrometer", "micrometer", "micrometer"],
        scale=(1.0, 2.0, 0.5, 0.5),
        translation=(0.0, 10.0, 20.0, 30.0),
        channels=[
            {
                "label": "dapi",
                "color": "0000FF",
                "window": {"start": 0, "end": 3000, "min": 0, "max": 65535},
            },
            {"label": "gfp", "color": "00FF00", "active": False},
        ],
        chunks=(1, 8, 32, 32),
        levels=3,
        name="cells",
    )
    lg.write_labels(img, "nuclei", (data % 4).astype("u4"), colors={1: (255, 0, 0, 255)})
    return path


def _zarr_v2_blosc(path: Path) -> Path:
    """An NGFF 0.4 image written with zarr-python alone: zarr v2, Blosc, level shapes
    rounded down (as many tools do), and a label image."""
    data = _volume((15, 41, 37), seed=3)
    root = zarr.open_group(str(path), mode="w", zarr_format=2)
    compressor = numcodecs.Blosc("lz4", clevel=5, shuffle=numcodecs.Blosc.SHUFFLE)
    datasets, level = [], data
    for i in range(3):
        arr = root.create_array(
            f"s{i}",
            shape=level.shape,
            dtype=level.dtype,
            chunks=(8, 16, 16),
            compressors=compressor,
        )
        arr[...] = level
        s = 2.0**i
        datasets.append(
            {
                "path": f"s{i}",
                "coordinateTransformations": [{"type": "scale", "scale": [1.0, 0.4 * s, 0.4 * s]}],
            }
        )
        level = level[:, : level.shape[1] // 2 * 2 : 2, : level.shape[2] // 2 * 2 : 2]
    axes = [
        {"name": "z", "type": "space", "unit": "micrometer"},
        {"name": "y", "type": "space", "unit": "micrometer"},
        {"name": "x", "type": "space", "unit": "micrometer"},
    ]
    root.attrs.put(
        {"multiscales": [{"version": "0.4", "axes": axes, "datasets": datasets, "name": "v2"}]}
    )
    labels = root.create_group("labels")
    labels.attrs.put({"labels": ["seg"]})
    seg = labels.create_group("seg")
    lab = (data % 3).astype("u2")
    seg_sets = []
    for i in range(3):  # as many levels as the image
        arr = seg.create_array(
            f"{i}", shape=lab.shape, dtype=lab.dtype, chunks=(8, 16, 16), compressors=compressor
        )
        arr[...] = lab
        s = 2.0**i
        seg_sets.append(
            {
                "path": f"{i}",
                "coordinateTransformations": [{"type": "scale", "scale": [1.0, 0.4 * s, 0.4 * s]}],
            }
        )
        lab = lab[:, : lab.shape[1] // 2 * 2 : 2, : lab.shape[2] // 2 * 2 : 2]
    seg.attrs.put(
        {
            "multiscales": [{"version": "0.4", "axes": axes, "datasets": seg_sets}],
            "image-label": {
                "version": "0.4",
                "colors": [{"label-value": 1, "rgba": [0, 0, 255, 255]}],
            },
        }
    )
    return path


def _ome_zarr_py_blosc(path: Path) -> Path:
    from ome_zarr.format import FormatV04
    from ome_zarr.io import parse_url
    from ome_zarr.writer import write_image

    fmt = FormatV04()
    store = parse_url(str(path), mode="w", fmt=fmt).store
    root = zarr.group(store=store, zarr_format=2, overwrite=True)
    write_image(
        image=_volume((2, 9, 37, 41), seed=5),
        group=root,
        axes="czyx",
        fmt=fmt,
        storage_options=dict(chunks=(1, 8, 16, 16), compressor=numcodecs.Blosc("zstd", shuffle=2)),
    )
    return path


def _assert_same_image(a: lg.MultiscaleImage, b: lg.MultiscaleImage) -> None:
    assert len(a.levels) == len(b.levels)
    for la, lb in zip(a.levels, b.levels, strict=True):
        assert la.shape == lb.shape
        np.testing.assert_array_equal(la.read(), lb.read())
        assert la.scale == pytest.approx(lb.scale)
        assert la.translation == pytest.approx(lb.translation)
    assert [(x.name, x.type, x.unit) for x in a.axes] == [(x.name, x.type, x.unit) for x in b.axes]
    assert a.channels == b.channels


# -- every command: one-line errors ----------------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["validate", "{missing}"],
        ["inspect", "{missing}"],
        ["inspect", "--json", "{missing}"],
        ["convert", "{missing}", "{tmp}/out.zarr"],
        ["bench", "{missing}"],
    ],
)
def test_typed_errors_are_one_line_and_exit_2(tmp_path, capsys, argv):
    args = [a.format(missing=tmp_path / "missing.zarr", tmp=tmp_path) for a in argv]
    assert main(args) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert all(line.startswith("linumpy-gpu: ") for line in lines)  # notes (no GPU), then
    assert [line for line in lines if "error" in line[:20]] == lines[-1:]  # one error line
    assert lines[-1].startswith("linumpy-gpu: error: ")
    assert "Traceback" not in captured.err + captured.out


def test_the_entry_point_runs_as_a_module(image_path):
    out = subprocess.run(
        [sys.executable, "-m", "linumpy_gpu", "validate", str(image_path)],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("OK: ")
    missing = subprocess.run(
        [sys.executable, "-m", "linumpy_gpu", "inspect", str(image_path / "nope")],
        capture_output=True,
        text=True,
    )
    assert missing.returncode == 2
    assert missing.stderr.startswith("linumpy-gpu: error: ") and "Traceback" not in missing.stderr


# -- validate ---------------------------------------------------------------------------------


def test_validate_a_clean_store(image_path, capsys):
    assert main(["validate", str(image_path)]) == 0
    out = capsys.readouterr().out
    assert out.strip().splitlines() == [
        f"OK: {image_path}: NGFF 0.5 image, 3 level(s), 1 label image(s); no problems found"
    ]


def test_validate_stores_of_other_writers(tmp_path, capsys):
    v2 = _zarr_v2_blosc(tmp_path / "v2.zarr")
    assert main(["validate", str(v2)]) == 0, capsys.readouterr().out
    assert capsys.readouterr().out.startswith("OK: ")
    ozp = _ome_zarr_py_blosc(tmp_path / "ozp.zarr")
    assert main(["validate", str(ozp)]) == 0
    assert capsys.readouterr().out.startswith("OK: ")


def _problems(out: str) -> list[str]:
    lines = out.strip().splitlines()
    assert lines[-1].endswith("warning(s)")  # the summary
    assert all(line.startswith(("ERROR: ", "WARNING: ")) for line in lines[:-1]), lines
    return lines[:-1]


def test_validate_a_damaged_chunk_and_a_dtype_mismatch(image_path, capsys):
    first = image_path / "1" / "c" / "0" / "0" / "0" / "0"
    first.write_bytes(b"not zstd at all")
    root = zarr.open_group(str(image_path), mode="r+")
    data = root["2"][...]
    root.create_array("2", shape=data.shape, dtype="f4", chunks=(1, 8, 32, 32), overwrite=True)
    assert main(["validate", str(image_path)]) == 1
    problems = _problems(capsys.readouterr().out)
    assert any("level 1 ('1') does not read" in p for p in problems)
    # one dtype is a SHOULD of the spec: a warning, as on opening
    assert any("different dtypes" in p and p.startswith("WARNING") for p in problems)


def test_validate_warns_of_omero_channels_that_do_not_match_the_data(tmp_path, capsys):
    path = tmp_path / "c.zarr"
    lg.write_ome_zarr(path, _volume((16, 64, 64)), axes="zyx", levels=1)
    root = zarr.open_group(str(path), mode="r+")
    ome = dict(root.attrs["ome"])
    ome["omero"] = {"channels": [{"label": "a"}, {"label": "b"}]}
    root.attrs["ome"] = ome
    assert main(["validate", str(path)]) == 0
    problems = _problems(capsys.readouterr().out)
    assert problems == [f"WARNING: {path}: omero lists 2 channel(s) for no channel axis"]


def test_validate_shapes_that_do_not_follow_the_scales(tmp_path, capsys):
    path = tmp_path / "bad.zarr"
    lg.write_ome_zarr(path, _volume((16, 64, 64)), axes="zyx", levels=2)
    root = zarr.open_group(str(path), mode="r+")
    root.create_array("1", shape=(16, 64, 64), dtype="u2", chunks=(16, 64, 64), overwrite=True)
    assert main(["validate", str(path)]) == 1
    problems = _problems(capsys.readouterr().out)
    assert any("level 1 ('1') has 16 voxels along axis 'z'" in p for p in problems), problems
    assert any("axis 'y'" in p for p in problems)
    assert not any("contradict their scales" in p for p in problems)  # once, as errors
    with pytest.warns(lg.MetadataWarning, match=r"contradict their scales: .*level 1.*more"):
        lg.open_ome_zarr(path)


def test_validate_metadata_errors_are_problems_not_crashes(tmp_path, capsys):
    path = tmp_path / "meta.zarr"
    lg.write_ome_zarr(path, _volume((8, 16, 16)), axes="zyx")
    attrs = json.loads((path / "zarr.json").read_text())
    axes = attrs["attributes"]["ome"]["multiscales"][0]["axes"]
    axes[0]["unit"] = "parsec-ish"  # not an error: NGFF recommends UDUNITS-2 units
    (path / "zarr.json").write_text(json.dumps(attrs))
    assert main(["validate", str(path)]) == 0
    problems = _problems(capsys.readouterr().out)
    assert (
        len(problems) == 1 and problems[0].startswith("WARNING: ") and "parsec-ish" in problems[0]
    )
    axes[0]["unit"], axes[1]["name"] = "micrometer", "z"
    (path / "zarr.json").write_text(json.dumps(attrs))
    assert main(["validate", str(path)]) == 1
    problems = _problems(capsys.readouterr().out)
    # ome-zarr-models' opinion and ours, both errors
    assert len(problems) == 2 and all(p.startswith("ERROR: ") and "unique" in p for p in problems)


def test_validate_cannot_open(tmp_path, capsys):
    plain = zarr.open_group(str(tmp_path / "plain.zarr"), mode="w")
    plain.attrs["hello"] = "world"
    assert main(["validate", str(tmp_path / "plain.zarr")]) == 2
    assert main(["validate", str(tmp_path / "nothing")]) == 2
    (tmp_path / "file.txt").write_text("x")
    assert main(["validate", str(tmp_path / "file.txt")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3 and all(e.startswith("linumpy-gpu: error: ") for e in err)


def test_validate_strict_fails_on_warnings(tmp_path, capsys):
    path = tmp_path / "w.zarr"
    lg.write_ome_zarr(path, _volume((8, 16, 16)), axes="zyx", version="0.4")
    attrs = json.loads((path / ".zattrs").read_text())
    del attrs["multiscales"][0]["version"]  # read by layout, with a warning
    (path / ".zattrs").write_text(json.dumps(attrs))
    assert main(["validate", str(path)]) == 0
    assert "WARNING: " in capsys.readouterr().out
    assert main(["validate", "--strict", str(path)]) == 1


def test_validate_a_plate(tmp_path, capsys):
    plate = _plate(tmp_path / "plate.zarr")
    assert main(["validate", str(plate)]) == 0, capsys.readouterr().out
    assert "plate, 2 well(s)" in capsys.readouterr().out


def test_validate_a_field_of_an_acquisition_the_plate_does_not_list(tmp_path, capsys):
    plate = _plate(tmp_path / "plate.zarr")
    root = zarr.open_group(str(plate), mode="r+")
    attrs = root.attrs.asdict()
    attrs["ome"]["plate"]["acquisitions"] = [{"id": 1}]
    root.attrs.put(attrs)
    well = zarr.open_group(str(plate / "A" / "1"), mode="r+")
    well.attrs.put(
        {"ome": {"version": "0.5", "well": {"images": [{"path": "0", "acquisition": 5}]}}}
    )
    assert main(["validate", str(plate)]) == 1
    problems = _problems(capsys.readouterr().out)
    assert any("names acquisition 5, which the plate does not list" in p for p in problems)


def test_validate_cross_checks_labels_and_level_arrays(tmp_path, capsys):
    """A label image with fewer levels than its image, and NGFF 0.5 level arrays without
    dimension_names, break the specification: errors, not warnings."""
    img = lg.write_ome_zarr(tmp_path / "i.zarr", _volume((8, 32, 32)), axes="zyx", levels=3)
    lg.write_labels(img, "cells", np.ones((8, 32, 32), "u1"))
    label = zarr.open_group(str(tmp_path / "i.zarr" / "labels" / "cells"), mode="r+")
    attrs = label.attrs.asdict()
    attrs["ome"]["multiscales"][0]["datasets"] = attrs["ome"]["multiscales"][0]["datasets"][:1]
    label.attrs.put(attrs)
    root = zarr.open_group(str(tmp_path / "i.zarr"), mode="r+")
    data = root["2"][...]
    root.create_array("2", data=data, chunks=data.shape, overwrite=True)  # no dimension_names
    assert main(["validate", str(tmp_path / "i.zarr")]) == 1
    problems = _problems(capsys.readouterr().out)
    assert any(p.startswith("ERROR") and "1 level(s), the image has 3" in p for p in problems)
    assert any(p.startswith("ERROR") and "has no dimension_names" in p for p in problems)


def _plate(path: Path) -> Path:
    root = zarr.open_group(str(path), mode="w", zarr_format=3)
    wells = [("A", "1", 0, 0), ("B", "2", 1, 1)]
    root.attrs.put(
        {
            "ome": {
                "version": "0.5",
                "plate": {
                    "name": "screen",
                    "rows": [{"name": "A"}, {"name": "B"}],
                    "columns": [{"name": "1"}, {"name": "2"}],
                    "wells": [
                        {"path": f"{r}/{c}", "rowIndex": ri, "columnIndex": ci}
                        for r, c, ri, ci in wells
                    ],
                },
            }
        }
    )
    for r, c, _, _ in wells:
        well = root.create_group(f"{r}/{c}")
        well.attrs.put({"ome": {"version": "0.5", "well": {"images": [{"path": "0"}]}}})
        lg.write_ome_zarr(path / r / c / "0", _volume((4, 16, 16)), axes="zyx")
    return path


# -- inspect ----------------------------------------------------------------------------------


def test_inspect_json_of_an_image(image_path, capsys):
    assert main(["inspect", "--json", str(image_path)]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["kind"] == "image" and info["ngff_version"] == "0.5" and info["name"] == "cells"
    assert info["dtype"] == "uint16"
    assert info["units"] == {"z": "micrometer", "y": "micrometer", "x": "micrometer"}
    assert [a["name"] for a in info["axes"]] == ["c", "z", "y", "x"]
    assert [lv["shape"] for lv in info["levels"]] == [
        [2, 20, 70, 90],
        [2, 10, 35, 45],
        [2, 5, 18, 23],
    ]
    assert info["levels"][0]["chunks"] == [1, 8, 32, 32]
    assert info["levels"][0]["shards"] is None
    assert info["levels"][0]["codecs"] == ["zstd(level=3, checksum=True)"]
    assert info["scales"][0] == [1.0, 2.0, 0.5, 0.5] and info["scales"][1] == [1.0, 4.0, 1.0, 1.0]
    assert info["translations"][0] == [0.0, 10.0, 20.0, 30.0]
    assert [c["label"] for c in info["channels"]] == ["dapi", "gfp"]
    assert info["channels"][0]["color"] == "0000FF"
    (label,) = info["labels"]
    assert label["label_name"] == "nuclei" and label["kind"] == "label image"
    assert label["dtype"] == "uint32" and label["levels"][0]["shape"] == [2, 20, 70, 90]
    assert label["image_label"]["colors"] == [{"label_value": 1, "rgba": [255, 0, 0, 255]}]


def test_inspect_json_of_a_plate_and_a_well(tmp_path, capsys):
    plate = _plate(tmp_path / "plate.zarr")
    assert main(["inspect", "--json", str(plate)]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["kind"] == "plate" and info["name"] == "screen"
    assert info["rows"] == ["A", "B"] and info["columns"] == ["1", "2"]
    assert [w["path"] for w in info["wells"]] == ["A/1", "B/2"]
    assert main(["inspect", "--json", str(plate / "A" / "1")]) == 0
    well = json.loads(capsys.readouterr().out)
    assert well["kind"] == "well" and well["fields"] == [{"path": "0", "acquisition": None}]


def test_inspect_text_of_a_plate_and_a_well_lists_their_members(tmp_path, capsys):
    plate = _plate(tmp_path / "plate.zarr")
    assert main(["inspect", str(plate)]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines == [repr(lg.open_ome_zarr(plate)), "  A/1: 1 field(s): 0", "  B/2: 1 field(s): 0"]
    assert main(["inspect", str(plate / "A" / "1")]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[1] == "  0: NGFF 0.5 image, 1 level(s)"


def test_inspect_text_is_the_repr(image_path, capsys):
    assert main(["inspect", str(image_path)]) == 0
    assert capsys.readouterr().out.strip() == repr(lg.open_ome_zarr(image_path))


# -- convert ----------------------------------------------------------------------------------


def test_convert_defaults_to_the_gpu_layout_and_carries_everything(image_path, tmp_path, capsys):
    dst = tmp_path / "out.ome.zarr"
    assert main(["convert", str(image_path), str(dst), "--device", "cpu"]) == 0
    assert "converted" in capsys.readouterr().out
    src, out = lg.open_ome_zarr(image_path), lg.open_ome_zarr(dst)
    assert out.version == "0.5" and out.name == "cells"
    _assert_same_image(src, out)
    assert out[0].chunks == (1, 20, 64, 64)  # 64^3, clipped to the shape
    assert out[0].shards == (1, 20, 128, 128)  # 256x512x512, clipped to whole chunks
    assert out[0].codecs[0] == "sharding"
    assert list(out.labels) == ["nuclei"]
    _assert_same_image(src.labels["nuclei"], out.labels["nuclei"])
    assert out.labels["nuclei"].image_label.colors == src.labels["nuclei"].image_label.colors
    assert main(["validate", str(dst)]) == 0


@pytest.mark.parametrize("source_version", ["0.4", "0.5"])
@pytest.mark.parametrize("target_version", ["0.4", "0.5"])
@pytest.mark.parametrize("pyramid", ["copy", "recompute"])
def test_convert_keeps_the_attributes_it_does_not_model(
    tmp_path, capsys, source_version, target_version, pyramid
):
    """A lab's own attributes beside the OME metadata, unknown keys of the OME block and
    of the multiscales entry (ngff-zarr's @type) are carried over as they are; a second
    multiscales entry, whose arrays are not converted, is named in a note."""
    src = tmp_path / "src.zarr"
    lg.write_ome_zarr(src, _volume((16, 32, 32)), axes="zyx", levels=2, version=source_version)
    group = zarr.open_group(str(src), mode="r+")
    attrs = dict(group.attrs)
    acquisition = {"laser_nm": 488, "objective": "20x/0.8"}
    block = attrs["ome"] if source_version == "0.5" else attrs
    entry = dict(block["multiscales"][0])
    block["multiscales"] = [{**entry, "@type": "ngff:Image", "lab": {"id": 7}}, entry]
    block["lab_block_key"] = [1, 2]
    attrs["acquisition"] = acquisition
    group.attrs.put(attrs)
    dst = tmp_path / "dst.zarr"
    argv = ["convert", str(src), str(dst), "--version", target_version]
    assert main([*argv, "--pyramid", pyramid, "--shards", "none"]) == 0
    assert "lists 2 multiscales; only the first" in capsys.readouterr().err
    out = dict(zarr.open_group(str(dst), mode="r").attrs)
    out_block = out["ome"] if target_version == "0.5" else out
    assert out["acquisition"] == acquisition
    # NGFF 0.4 keeps everything at the top level: from there, unknown keys stay at the top
    assert (out_block if source_version == "0.5" else out)["lab_block_key"] == [1, 2]
    assert out_block["multiscales"][0]["@type"] == "ngff:Image"
    assert out_block["multiscales"][0]["lab"] == {"id": 7}
    assert len(out_block["multiscales"]) == 1
    assert main(["validate", str(dst)]) == 0
    np.testing.assert_array_equal(lg.open_ome_zarr(dst)[0][...], lg.open_ome_zarr(src)[0][...])


def test_convert_refuses_more_levels_than_the_volume_reduces_to(tmp_path, capsys):
    src = tmp_path / "src.zarr"
    lg.write_ome_zarr(src, _volume((16, 16, 16)), axes="zyx", levels=2)
    assert main(["--no-progress", "convert", "--levels", "6", str(src), str(tmp_path / "d")]) == 2
    assert "reduces to (1, 1, 1) in 5 levels" in capsys.readouterr().err
    assert not (tmp_path / "d").exists()
    assert main(["--no-progress", "convert", "--levels", "5", str(src), str(tmp_path / "d")]) == 0
    shapes = [lv.shape for lv in lg.open_ome_zarr(tmp_path / "d").levels]
    assert shapes == [(16, 16, 16), (8, 8, 8), (4, 4, 4), (2, 2, 2), (1, 1, 1)]


def test_convert_a_large_volume_uses_64_cubed_chunks_in_256x512x512_shards(tmp_path):
    src = tmp_path / "big.zarr"
    lg.write_ome_zarr(src, np.zeros((300, 600, 520), "u1"), axes="zyx", chunks=(100, 200, 520))
    dst = tmp_path / "big-out.zarr"
    assert main(["convert", str(src), str(dst), "--device", "cpu", "--no-progress"]) == 0
    out = lg.open_ome_zarr(dst)
    assert out[0].chunks == (64, 64, 64) and out[0].shards == (256, 512, 512)


def test_convert_zarr_v2_blosc_from_zarr_python_reads_back_equal(tmp_path):
    src = _zarr_v2_blosc(tmp_path / "v2.zarr")
    dst = tmp_path / "v2-out.zarr"
    assert main(["convert", str(src), str(dst), "--device", "cpu"]) == 0
    a, b = lg.open_ome_zarr(src), lg.open_ome_zarr(dst)
    assert [lv.shape for lv in b] == [(15, 41, 37), (15, 20, 18), (15, 10, 9)]
    _assert_same_image(a, b)
    _assert_same_image(a.labels["seg"], b.labels["seg"])
    assert b.version == "0.5" and b[0].codecs == ("zstd(level=3, checksum=True)",)
    assert b[0].shards is None  # one chunk per shard would be: no shards


def test_convert_zarr_v2_blosc_from_ome_zarr_py_reads_back_equal(tmp_path):
    src = _ome_zarr_py_blosc(tmp_path / "ozp.zarr")
    dst = tmp_path / "ozp-out.zarr"
    assert main(["convert", str(src), str(dst), "--device", "cpu"]) == 0
    a, b = lg.open_ome_zarr(src), lg.open_ome_zarr(dst)
    assert "blosc" in a[0].codecs[0]
    _assert_same_image(a, b)
    # every level through zarr-python too
    for lv in b:
        np.testing.assert_array_equal(
            zarr.open_array(str(dst / lv.path), mode="r")[...], a[lv.index].read()
        )


def test_convert_an_ome_zarr_py_image_with_labels_without_a_channel_axis(tmp_path):
    from tests.helpers.writers import volume, write_ome_zarr_py

    src = write_ome_zarr_py(tmp_path / "ozp.zarr", np.stack([volume(), volume(seed=1)]), "0.5")
    dst = tmp_path / "o.zarr"
    assert main(["convert", str(src), str(dst), "--device", "cpu"]) == 0
    a, b = lg.open_ome_zarr(src), lg.open_ome_zarr(dst)
    _assert_same_image(a, b)
    _assert_same_image(a.labels["cells"], b.labels["cells"])
    assert b.labels["cells"].axis_names == ("z", "y", "x")
    assert main(["validate", str(dst)]) == 0


@pytest.mark.parametrize("with_colors", [False, True])
def test_convert_keeps_label_properties_whose_value_is_written_as_a_float(tmp_path, with_colors):
    src, dst = tmp_path / "src.zarr", tmp_path / "dst.zarr"
    axes = [{"name": "y", "type": "space"}, {"name": "x", "type": "space"}]
    datasets = [{"path": "0", "coordinateTransformations": [{"type": "scale", "scale": [1, 1]}]}]

    def multiscales(name):
        return [{"axes": axes, "name": name, "version": "0.4", "datasets": datasets}]

    root = zarr.open_group(str(src), mode="w", zarr_format=2)
    root.create_array("0", shape=(8, 8), dtype="uint8", chunks=(8, 8))[...] = 0
    root.attrs.put({"multiscales": multiscales("img")})
    labels = root.create_group("labels")
    labels.attrs.put({"labels": ["seg"]})
    seg = labels.create_group("seg")
    seg.create_array("0", shape=(8, 8), dtype="uint8", chunks=(8, 8))[...] = 1
    image_label = {
        "version": "0.4",
        "properties": [{"label-value": 1.0, "class": "nucleus", "area": 64}],
    }
    if with_colors:
        image_label["colors"] = [{"label-value": 1, "rgba": [255, 0, 0, 255]}]
    seg.attrs.put({"multiscales": multiscales("seg"), "image-label": image_label})
    assert main(["convert", str(src), str(dst), "--version", "0.4", "--device", "cpu"]) == 0
    out = lg.open_ome_zarr(dst).labels["seg"].image_label
    assert out.properties == ({"label-value": 1, "class": "nucleus", "area": 64},)


def test_label_properties_of_values_that_are_not_integers_are_dropped_with_a_note(capsys):
    from types import SimpleNamespace

    from linumpy_gpu.cli import _label_properties
    from linumpy_gpu.ngff import ImageLabelMeta

    meta = ImageLabelMeta("0.3", (), ({"label-value": 1.5, "a": 1}, {"label-value": 2, "a": 2}))
    assert _label_properties(SimpleNamespace(image_label=meta), "seg") == [
        {"label-value": 2, "a": 2}
    ]
    assert "not integers are not carried over" in capsys.readouterr().err


def test_convert_recompute_levels_and_layout_options(image_path, tmp_path):
    dst = tmp_path / "r.zarr"
    argv = ["convert", str(image_path), str(dst), "--device", "cpu", "--pyramid", "recompute"]
    assert main([*argv, "--levels", "2", "--chunks", "1,4,16,16", "--shards", "1,8,32,32"]) == 0
    src, out = lg.open_ome_zarr(image_path), lg.open_ome_zarr(dst)
    assert len(out.levels) == 2 and len(out.labels["nuclei"].levels) == 2
    np.testing.assert_array_equal(out[0].read(), src[0].read())
    assert out[0].chunks == (1, 4, 16, 16) and out[0].shards == (1, 8, 32, 32)
    dst2 = tmp_path / "r2.zarr"
    assert main(["convert", str(image_path), str(dst2), "--shards", "none", "--levels", "1"]) == 0
    out2 = lg.open_ome_zarr(dst2)
    assert out2[0].shards is None and len(out2.levels) == 1
    dst3 = tmp_path / "r3.zarr"
    assert main(["convert", str(image_path), str(dst3), "--version", "0.4"]) == 0
    out3 = lg.open_ome_zarr(dst3)
    assert out3.version == "0.4" and out3[0].shards is None
    assert out3.channels[1].window == {"start": 0, "end": 65535, "min": 0, "max": 65535}
    assert [(c.label, c.color) for c in out3.channels] == [(c.label, c.color) for c in src.channels]
    np.testing.assert_array_equal(out3[2].read(), src[2].read())


def test_convert_more_levels_than_the_source_computes_them(image_path, tmp_path, capsys):
    dst = tmp_path / "more.zarr"
    assert main(["convert", str(image_path), str(dst), "--levels", "4"]) == 0
    assert "computed from level 0" in capsys.readouterr().err
    assert len(lg.open_ome_zarr(dst).levels) == 4


def test_convert_to_more_levels_keeps_the_source_s_factors(tmp_path, capsys):
    """An anisotropic pyramid (z kept) stays one: the source's levels keep their shapes
    and scales, and further levels are reduced as the source's last was."""
    src = tmp_path / "src.zarr"
    data = _volume((16, 64, 64))
    lg.write_ome_zarr(src, data, axes="zyx", levels=[(1, 2, 2)], scale=(3.0, 0.5, 0.5))
    dst = tmp_path / "dst.zarr"
    assert main(["convert", str(src), str(dst), "--levels", "3", "--shards", "none"]) == 0
    assert "reduced by its last factors (1, 2, 2)" in capsys.readouterr().err
    out = lg.open_ome_zarr(dst)
    assert [lv.shape for lv in out.levels] == [(16, 64, 64), (16, 32, 32), (16, 16, 16)]
    assert [out.scale(i) for i in range(3)] == [(3.0, 0.5, 0.5), (3.0, 1.0, 1.0), (3.0, 2.0, 2.0)]


def test_convert_to_more_levels_stops_reducing_axes_at_one_voxel(tmp_path):
    src = tmp_path / "src.zarr"
    lg.write_ome_zarr(src, _volume((4, 64, 64)), axes="zyx", levels=3)  # z: 4, 2, 1
    dst = tmp_path / "dst.zarr"
    assert main(["convert", str(src), str(dst), "--levels", "5", "--shards", "none"]) == 0
    out = lg.open_ome_zarr(dst)
    assert [lv.shape for lv in out.levels][2:] == [(1, 16, 16), (1, 8, 8), (1, 4, 4)]
    assert [out.scale(i)[0] for i in range(5)] == [1.0, 2.0, 4.0, 4.0, 4.0]


def test_convert_from_06_writes_no_06_keys_into_older_versions(tmp_path):
    src = tmp_path / "src.zarr"
    lg.write_ome_zarr(src, _volume((8, 32, 32)), axes="zyx", levels=2, version="0.6")
    for version in ("0.4", "0.5"):
        dst = tmp_path / f"dst{version}.zarr"
        assert main(["convert", str(src), str(dst), "--version", version, "--shards", "none"]) == 0
        attrs = dict(zarr.open_group(str(dst), mode="r").attrs)
        entry = (attrs["ome"] if version == "0.5" else attrs)["multiscales"][0]
        assert "coordinateSystems" not in entry
        assert main(["validate", str(dst)]) == 0


def test_convert_names_the_label_levels_it_leaves_out(tmp_path, capsys):
    src = tmp_path / "src.zarr"
    lg.write_ome_zarr(src, _volume((16, 32, 32)), axes="zyx", levels=3)
    lg.write_labels(src, "cells", (_volume((16, 32, 32)) % 3).astype("u1"))
    dst = tmp_path / "dst.zarr"
    assert main(["convert", str(src), str(dst), "--levels", "2", "--shards", "none"]) == 0
    assert "label image 'cells' has 3 levels; written with the image's 2" in (
        capsys.readouterr().err
    )
    assert len(lg.open_ome_zarr(dst).labels["cells"].levels) == 2


@pytest.mark.parametrize("shape", [[16, 64, 64], [2**40, 2**40, 2**40]])
def test_convert_computes_levels_that_are_no_reductions_instead_of_copying_them(
    tmp_path, capsys, shape
):
    """A level larger than the one before (here as its metadata claims) is not copied: the
    pyramid is computed from level 0, with a note, and the result is a valid pyramid."""
    src = tmp_path / "src.zarr"
    data = _volume((16, 32, 32))
    lg.write_ome_zarr(src, data, axes="zyx", levels=2)
    meta = json.loads((src / "1" / "zarr.json").read_text())
    meta["shape"] = shape
    (src / "1" / "zarr.json").write_text(json.dumps(meta))
    dst = tmp_path / "dst.zarr"
    assert main(["convert", str(src), str(dst), "--shards", "none"]) == 0
    assert "computed from level 0" in capsys.readouterr().err
    out = lg.open_ome_zarr(dst)
    np.testing.assert_array_equal(out[0][...], data)
    assert out[1].shape == (8, 16, 16)  # as the source's scales say
    assert main(["validate", str(dst)]) == 0


def test_convert_of_an_image_without_voxels_says_so(tmp_path, capsys):
    src = tmp_path / "src.zarr"
    lg.write_ome_zarr(src, _volume((8, 32, 32)), axes="zyx", levels=1)
    meta = json.loads((src / "0" / "zarr.json").read_text())
    meta["shape"] = [0, 32, 32]
    (src / "0" / "zarr.json").write_text(json.dumps(meta))
    assert main(["convert", str(src), str(tmp_path / "dst.zarr")]) == 2
    assert "holds no voxels" in capsys.readouterr().err
    assert not (tmp_path / "dst.zarr").exists()


def test_convert_refuses_an_affine_placement_unless_asked_to_drop_it(tmp_path, capsys):
    """NGFF 0.5 holds no rotation: converting an image placed by one would put its voxels
    elsewhere while reading as exactly placed."""
    src = tmp_path / "rot.zarr"
    lg.write_ome_zarr(src, _volume((8, 32, 32)), axes="zyx", levels=1, version="0.6")
    meta = json.loads((src / "zarr.json").read_text())
    rotation = [[2, 0, 0, 10], [0, 0.4, -0.3, 0], [0, 0.3, 0.4, 0]]
    meta["attributes"]["ome"]["multiscales"][0]["datasets"][0]["coordinateTransformations"] = [
        {
            "type": "affine",
            "affine": rotation,
            "input": {"path": "0"},
            "output": {"name": "physical"},
        }
    ]
    (src / "zarr.json").write_text(json.dumps(meta))
    dst = tmp_path / "dst.zarr"
    assert main(["convert", str(src), str(dst)]) == 2
    assert "--scale-translation-only" in capsys.readouterr().err
    assert not dst.exists()
    assert main(["convert", str(src), str(dst), "--scale-translation-only"]) == 0
    assert "only the scale and translation" in capsys.readouterr().err
    np.testing.assert_array_equal(lg.open_ome_zarr(dst)[0][...], _volume((8, 32, 32)))


def test_convert_never_overwrites_without_overwrite(image_path, tmp_path, capsys):
    dst = tmp_path / "existing.zarr"
    lg.write_ome_zarr(dst, _volume((4, 8, 8)), axes="zyx")
    before = snapshot(dst)
    assert main(["convert", str(image_path), str(dst)]) == 2
    assert "--overwrite" in capsys.readouterr().err
    assert snapshot(dst) == before
    assert main(["convert", str(image_path), str(dst), "--overwrite"]) == 0
    _assert_same_image(lg.open_ome_zarr(image_path), lg.open_ome_zarr(dst))


def test_convert_refuses_to_replace_what_is_not_a_zarr_store(image_path, tmp_path, capsys):
    dst = tmp_path / "thesis"
    dst.mkdir()
    (dst / "chapter1.tex").write_text("years of work")
    before = snapshot(dst)
    assert main(["convert", str(image_path), str(dst), "--overwrite"]) == 2
    assert snapshot(dst) == before
    assert capsys.readouterr().err.startswith("linumpy-gpu: error: ")


def test_convert_to_more_levels_gives_label_images_as_many(tmp_path, capsys):
    """A label image of another shape than its image (a channel axis of 1, as ome-zarr-py
    writes them) gets the image's new levels, each reduced as the image's is."""
    src = tmp_path / "src.zarr"
    data = _volume((2, 16, 64, 64))
    img = lg.write_ome_zarr(src, data, axes="czyx", levels=2, version="0.4")
    lg.write_ome_zarr(
        src / "labels" / "cells",
        (data[:1] % 5).astype("u1"),
        axes="czyx",
        levels=2,
        version="0.4",
        _extra_block={"image-label": {"version": "0.4"}},
    )
    zarr.open_group(str(src / "labels"), mode="a", zarr_format=2).attrs.put({"labels": ["cells"]})
    assert len(img.labels["cells"].levels) == 2
    assert main(["convert", str(src), str(tmp_path / "dst.zarr"), "--levels", "4"]) == 0
    out = lg.open_ome_zarr(tmp_path / "dst.zarr")
    label = out.labels["cells"]
    assert [lv.shape[1:] for lv in label.levels] == [lv.shape[1:] for lv in out.levels]
    assert main(["validate", str(tmp_path / "dst.zarr")]) == 0, capsys.readouterr().out


def test_convert_shards_into_ngff_04_names_the_options(image_path, tmp_path, capsys):
    args = ["convert", str(image_path), str(tmp_path / "o.zarr"), "--version", "0.4"]
    assert main([*args, "--shards", "8,64,64"]) == 2
    assert "--shards needs zarr v3: --version 0.5" in capsys.readouterr().err
    assert not (tmp_path / "o.zarr").exists()


def test_convert_refuses_its_own_source(image_path, tmp_path, capsys):
    before = snapshot(image_path)
    assert main(["convert", str(image_path), str(image_path), "--overwrite"]) == 2
    assert main(["convert", str(image_path), str(image_path / "inner"), "--overwrite"]) == 2
    assert main(["convert", str(image_path), str(image_path.parent), "--overwrite"]) == 2
    assert snapshot(image_path) == before
    assert capsys.readouterr().err.count("linumpy-gpu: error: ") == 3


def test_convert_refuses_its_own_source_however_spelled(image_path, tmp_path, capsys, monkeypatch):
    """Another spelling of the source (a URL of the local file system in any case, ``~``,
    a URL with other slashes, one around the other) is the source too: refused."""
    monkeypatch.setenv("HOME", str(image_path.parent))
    before = snapshot(image_path)
    for dst in (
        f"local://{image_path}",
        f"FILE://{image_path}",
        f"file://{image_path.parent}",
        f"~/{image_path.name}",
    ):
        assert main(["convert", str(image_path), dst, "--overwrite"]) == 2
    assert main(["convert", f"~/{image_path.name}", str(image_path), "--overwrite"]) == 2
    assert snapshot(image_path) == before
    lg.write_ome_zarr("memory://bk/coll.zarr/img", _volume())
    for src, dst in (
        ("memory://bk/coll.zarr/img", "memory:///bk//coll.zarr/img/"),
        ("memory://bk/coll.zarr/img", "memory://bk/coll.zarr"),
    ):
        assert main(["convert", src, dst, "--overwrite", "--no-progress"]) == 2
    assert lg.open_ome_zarr("memory://bk/coll.zarr/img")[0][...].max() > 0
    assert capsys.readouterr().err.count("linumpy-gpu: error: ") == 7


def test_convert_to_an_upper_case_file_url_writes_that_folder(image_path, tmp_path):
    assert main(["convert", str(image_path), f"FILE://{tmp_path}/out.zarr", "--no-progress"]) == 0
    assert lg.open_ome_zarr(tmp_path / "out.zarr")[0].shape == lg.open_ome_zarr(image_path)[0].shape


def test_convert_refuses_plates(tmp_path, capsys):
    plate = _plate(tmp_path / "plate.zarr")
    assert main(["convert", str(plate), str(tmp_path / "o.zarr")]) == 2
    assert "Plate" in capsys.readouterr().err
    assert not (tmp_path / "o.zarr").exists()


def test_convert_failing_midway_leaves_nothing_behind(image_path, tmp_path, capsys, monkeypatch):
    import linumpy_gpu.cli as cli

    def boom(*args, **kwargs):
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(cli, "_copy_levels", boom)
    dst = tmp_path / "o.zarr"
    assert main(["convert", str(image_path), str(dst)]) == 2
    err = capsys.readouterr().err
    assert "disk on fire" in err and "was not changed" in err and "Traceback" not in err
    assert not dst.exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


@pytest.mark.parametrize("pyramid", ["copy", "recompute"])
def test_convert_to_an_object_store_cut_short_in_the_labels_does_not_open(
    image_path, capsys, monkeypatch, pyramid
):
    """An object store is written in place: until the labels and the lower levels are in,
    the image is marked unfinished, so a cut leaves a store that is refused, not one that
    opens as finished without them; a retry with --overwrite replaces it."""
    import linumpy_gpu.write as write

    dst = f"memory://cut-in-labels-{pyramid}/o.zarr"
    real = write.write_labels

    def boom(*args, **kwargs):
        raise OSError("connection reset")

    monkeypatch.setattr(write, "write_labels", boom)
    assert main(["convert", str(image_path), dst, "--pyramid", pyramid]) == 2
    assert "may be incomplete" in capsys.readouterr().err
    with pytest.raises(lg.IncompleteStoreError):
        lg.open_ome_zarr(dst)
    monkeypatch.setattr(write, "write_labels", real)
    assert main(["convert", str(image_path), dst, "--pyramid", pyramid, "--overwrite"]) == 0
    out, src = lg.open_ome_zarr(dst), lg.open_ome_zarr(image_path)
    assert len(out.levels) == len(src.levels) == 3
    assert list(out.labels) == ["nuclei"]
    np.testing.assert_array_equal(out.labels["nuclei"][0][...], src.labels["nuclei"][0][...])


def test_convert_to_an_object_store_never_shows_a_finished_image_before_its_labels(
    image_path, monkeypatch
):
    """The image convert writes is marked unfinished from its first metadata on: a cut at
    the first request after level 0 leaves a store that does not open."""
    import linumpy_gpu.cli as cli

    def dropped(image):
        raise ConnectionError("connection dropped")

    monkeypatch.setattr(cli, "_writable_group", dropped)
    dst = "memory://cut-after-level-0/o.zarr"
    assert main(["convert", str(image_path), dst, "--no-progress"]) == 2
    with pytest.raises(lg.IncompleteStoreError):
        lg.open_ome_zarr(dst)


def test_convert_to_an_object_store_cut_before_a_label_image_is_done_leaves_it_refused(
    image_path, monkeypatch
):
    """A label image is marked unfinished from its first metadata on, as the image is: a
    cut at the labels listing leaves a label image that, opened on its own, is refused
    rather than read as finished with fewer levels than its source."""
    from zarr.storage import FsspecStore

    set_, seen = FsspecStore.set, []

    async def cut_at_the_listing(self, key, value, *args, **kwargs):
        if key == "labels/zarr.json":
            seen.append(key)
            if len(seen) == 2:  # the listing, after the labels group was made
                raise ConnectionError("connection dropped")
        return await set_(self, key, value, *args, **kwargs)

    monkeypatch.setattr(FsspecStore, "set", cut_at_the_listing)
    dst = "memory://cut-at-the-listing/o.zarr"
    assert main(["convert", str(image_path), dst, "--no-progress"]) == 2
    for opened in (dst, f"{dst}/labels/nuclei"):
        with pytest.raises(lg.IncompleteStoreError):
            lg.open_ome_zarr(opened)


def test_convert_to_an_object_store_gives_copied_levels_the_write_id(image_path):
    """Readers on object stores see a replacement by each level's write id: copied lower
    levels carry the id of the write, as level 0 does."""
    dst = "memory://copied-levels-id/o.zarr"
    assert main(["convert", str(image_path), dst, "--no-progress"]) == 0
    group = zarr.open_group(dst, mode="r")
    ids = {group[str(i)].attrs["linumpy_gpu"]["write"] for i in range(3)}
    assert len(ids) == 1


@pytest.mark.parametrize(
    "flag, env, expected",
    [
        (["--progress"], None, True),
        (["--no-progress"], "1", False),
        ([], "1", True),
        ([], "0", False),
    ],
)
def test_convert_progress_follows_the_flag_then_the_environment(
    image_path, tmp_path, monkeypatch, flag, env, expected
):
    if env is not None:
        monkeypatch.setenv("LINUMPY_GPU_PROGRESS", env)
    terminal = stderr_on_terminal(monkeypatch)
    dst = tmp_path / "p.zarr"
    assert main([*flag, "convert", str(image_path), str(dst)]) == 0
    err = terminal.getvalue()
    assert ("writing" in err or "copying" in err) is expected


def test_progress_flag_after_the_subcommand(image_path, tmp_path, monkeypatch):
    terminal = stderr_on_terminal(monkeypatch)
    assert main(["convert", str(image_path), str(tmp_path / "p.zarr"), "--progress"]) == 0
    assert "copying" in terminal.getvalue()


def test_convert_progress_bars_name_the_destination(image_path, tmp_path, monkeypatch):
    terminal = stderr_on_terminal(monkeypatch)
    assert main(["convert", str(image_path), str(tmp_path / "p.zarr"), "--progress"]) == 0
    err = terminal.getvalue()
    # the store is built in a hidden folder beside p.zarr; the bars name p.zarr itself
    assert "writing p.zarr" in err and "copying p.zarr" in err
    assert "copying p.zarr/labels/nuclei" in err
    assert "partial" not in err


def test_convert_progress_is_quiet_off_a_terminal(image_path, tmp_path, capfd):
    dst = str(tmp_path / "p.zarr")
    assert main(["convert", str(image_path), dst, "--progress", "--device", "cpu"]) == 0
    assert capfd.readouterr().err == ""


def test_layout_defaults():
    class Axis:
        def __init__(self, name, type):
            self.name, self.type = name, type

    class Fake:
        def __init__(self, shape, axes):
            self.levels = [type("L", (), {"shape": shape})()]
            self.axes = [Axis(n, t) for n, t in axes]
            self.axis_names = tuple(n for n, _ in axes)

    zyx = [("z", "space"), ("y", "space"), ("x", "space")]
    assert _layout(Fake((1000, 2000, 3000), zyx), None, None, "0.5") == (
        (64, 64, 64),
        (256, 512, 512),
    )
    assert _layout(Fake((1000, 2000, 3000), zyx), None, None, "0.4") == ((64, 64, 64), None)
    assert _layout(Fake((10, 100, 700), zyx), None, None, "0.5") == (
        (10, 64, 64),
        (10, 128, 512),
    )
    tczyx = [("t", "time"), ("c", "channel"), *zyx]
    assert _layout(Fake((5, 3, 300, 300, 300), tczyx), None, None, "0.5") == (
        (1, 1, 64, 64, 64),
        (1, 1, 256, 320, 320),
    )
    yx = [("y", "space"), ("x", "space")]
    assert _layout(Fake((5000, 5000), yx), None, None, "0.5") == ((256, 256), (2048, 2048))
    assert _layout(Fake((100, 100), yx), (32, 32), "none", "0.5") == ((32, 32), None)


def test_blocks_cover_the_shape_once():
    shape = (37, 50, 21)
    seen = np.zeros(shape, int)
    for region in _blocks(shape, (8, 16, 16), 2):
        seen[region] += 1
        for s, u in zip(region, (8, 16, 16), strict=True):
            assert s.start % u == 0
    assert (seen == 1).all()


# -- bench ------------------------------------------------------------------------------------


def test_bench_json_with_peers(image_path, capsys):
    assert main(["bench", str(image_path), "--device", "cpu", "--peers", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["whole_level"] is True and report["nbytes"] == 2 * 20 * 70 * 90 * 2
    readers = [r["reader"] for r in report["results"]]
    assert readers[0] == "linumpy_gpu" and "zarr-python" in readers
    for r in report["results"]:
        assert len(r["times_s"]) == 3 and r["best_s"] == min(r["times_s"]) and r["gb_per_s"] > 0


def test_bench_table(image_path, capsys):
    assert main(["bench", str(image_path), "--repeat", "1"]) == 0
    out = capsys.readouterr().out
    assert "linumpy_gpu" in out and "GB/s" in out and "read the whole level" in out


def test_bench_refuses_unknown_devices(image_path, capsys):
    assert main(["bench", str(image_path), "--device", "tpu"]) == 2
    assert "cpu and/or gpu" in capsys.readouterr().err


def test_bench_region_is_bounded_and_unit_aligned():
    region = _bench_region((4096, 4096, 4096), (64, 64, 64), 2, limit=2 << 30)
    extent = [s.stop - s.start for s in region]
    assert np.prod(extent) * 2 <= 2 << 30
    assert all(e % 64 == 0 for e in extent)
    assert _bench_region((10, 10), (4, 4), 1) == (slice(0, 10), slice(0, 10))


def test_demo_inspect_info_keep_working(tmp_path, capsys):
    assert main(["demo", "--out", str(tmp_path), "--device", "cpu"]) == 0
    assert "equal to zarr-python's read" in capsys.readouterr().out
    assert main(["info"]) == 0
    assert main(["inspect", str(tmp_path / "sample.ome.zarr")]) == 0
    assert "(96, 256, 256)" in capsys.readouterr().out
    assert os.path.isdir(tmp_path / "sample.ome.zarr")


def _zyx_image(path, levels, label=None):
    """A 0.5 image written by zarr-python: ``levels`` as (array, scale) pairs."""
    root = zarr.open_group(path, mode="w", zarr_format=3)
    datasets = []
    for i, (data, scale) in enumerate(levels):
        root.create_array(str(i), data=data, chunks=data.shape, dimension_names=list("zyx"))
        datasets.append(
            {"path": str(i), "coordinateTransformations": [{"type": "scale", "scale": scale}]}
        )
    axes = [{"name": n, "type": "space"} for n in "zyx"]
    root.attrs.put(
        {"ome": {"version": "0.5", "multiscales": [{"axes": axes, "datasets": datasets}]}}
    )
    return root


def test_convert_computes_lower_levels_of_another_dtype_instead_of_casting(tmp_path, capsys):
    """A lower level cast into level 0's dtype would wrap (300.7 -> 44 in uint8)."""
    level0 = np.full((4, 8, 8), 200, "u1")
    level1 = np.full((2, 4, 4), 300.7, "f4")
    _zyx_image(tmp_path / "src.zarr", [(level0, [1, 1, 1]), (level1, [2, 2, 2])])
    dst = tmp_path / "dst.zarr"
    assert main(["convert", str(tmp_path / "src.zarr"), str(dst), "--no-progress"]) == 0
    assert "computed from level 0" in capsys.readouterr().err
    np.testing.assert_array_equal(lg.open_ome_zarr(dst)[1][...], np.full((2, 4, 4), 200, "u1"))


@pytest.mark.parametrize("pyramid", ["copy", "recompute"])
def test_convert_keeps_a_label_image_s_own_placement(tmp_path, pyramid):
    data = np.zeros((4, 8, 8), "u2")
    root = _zyx_image(tmp_path / "src.zarr", [(data, [1, 1, 1])])
    labels = root.create_group("labels")
    labels.attrs.put({"ome": {"version": "0.5", "labels": ["cells"]}})
    cells = _zyx_image(tmp_path / "src.zarr" / "labels" / "cells", [(data.astype("u1"), [2, 2, 2])])
    attrs = cells.attrs.asdict()
    attrs["ome"]["image-label"] = {"source": {"image": "../../"}}
    transforms = attrs["ome"]["multiscales"][0]["datasets"][0]["coordinateTransformations"]
    transforms.append({"type": "translation", "translation": [5, 6, 7]})
    cells.attrs.put(attrs)
    dst = tmp_path / "dst.zarr"
    args = ["convert", str(tmp_path / "src.zarr"), str(dst), "--no-progress", "--pyramid", pyramid]
    assert main(args) == 0
    label = lg.open_ome_zarr(dst).labels["cells"]
    assert label.scale(0) == (2.0, 2.0, 2.0) and label.translation(0) == (5.0, 6.0, 7.0)


def test_convert_clips_shards_as_it_clips_chunks(tmp_path):
    data = np.arange(3 * 50 * 60, dtype="u2").reshape(3, 50, 60)
    _zyx_image(tmp_path / "src.zarr", [(data, [1, 1, 1])])
    dst = tmp_path / "dst.zarr"
    args = ["convert", str(tmp_path / "src.zarr"), str(dst), "--no-progress"]
    assert main([*args, "--chunks", "7,7,7", "--shards", "14,14,14"]) == 0
    level = lg.open_ome_zarr(dst)[0]
    assert (level.chunks, level.shards) == ((3, 7, 7), (3, 14, 14))
    np.testing.assert_array_equal(level[...], data)


@pytest.mark.parametrize(
    ("channels", "options", "note"),
    [
        ([{"label": "a", "color": "FF0000"}], [], "not copied"),
        ([{"label": "a"}, {"label": "b"}], ["--version", "0.4"], "FFFFFF"),
    ],
)
def test_convert_carries_what_it_can_of_channels_other_tools_write(
    tmp_path, capsys, channels, options, note
):
    """One channel listed for two, or channels without the color NGFF 0.4 needs: the image
    converts, with a note, instead of being refused."""
    root = zarr.open_group(tmp_path / "src.zarr", mode="w", zarr_format=3)
    data = np.full((2, 4, 8, 8), 7, "u2")
    root.create_array("0", data=data, dimension_names=list("czyx"))
    axes = [{"name": "c", "type": "channel"}] + [{"name": n, "type": "space"} for n in "zyx"]
    scale = [{"type": "scale", "scale": [1, 1, 1, 1]}]
    root.attrs.put(
        {
            "ome": {
                "version": "0.5",
                "multiscales": [
                    {"axes": axes, "datasets": [{"path": "0", "coordinateTransformations": scale}]}
                ],
                "omero": {"channels": channels},
            }
        }
    )
    dst = tmp_path / "dst.zarr"
    assert main(["convert", str(tmp_path / "src.zarr"), str(dst), "--no-progress", *options]) == 0
    assert note in capsys.readouterr().err
    np.testing.assert_array_equal(lg.open_ome_zarr(dst)[0][...], data)


def test_output_into_a_closed_pipe_ends_quietly(image_path):
    """`linumpy-gpu inspect ... | head`: a reader that stops early is no error of ours."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "linumpy_gpu", "inspect", "--json", str(image_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    proc.stdout.close()  # the reader is gone before the first line
    err = proc.stderr.read().decode()
    assert proc.wait() == 141
    assert "Traceback" not in err and "BrokenPipeError" not in err


def test_convert_keeps_channels_of_any_channel_axis_and_omero_keys(tmp_path, capsys):
    """The channel axis is the axis of type 'channel', whatever its name; the omero keys
    the writer does not model (rdefs, a channel's inverted, ...) are carried over."""
    from linumpy_gpu.ngff import Axis

    src = tmp_path / "src.zarr"
    channels = [
        {"label": n, "color": c, "window": {"start": 0, "end": 900, "min": 0, "max": 4095}}
        for n, c in (("DAPI", "0000FF"), ("GFP", "00FF00"))
    ]
    lg.write_ome_zarr(
        src, _volume((2, 32, 32)), axes=[Axis("ch", "channel"), "y", "x"], channels=channels
    )
    root = zarr.open_group(str(src), mode="r+")
    attrs = root.attrs.asdict()
    attrs["ome"]["omero"]["rdefs"] = {"defaultZ": 0, "model": "color"}
    attrs["ome"]["omero"]["channels"][1].update({"inverted": True, "family": "linear"})
    root.attrs.put(attrs)
    assert main(["convert", str(src), str(tmp_path / "dst.zarr"), "--levels", "1"]) == 0
    out = lg.open_ome_zarr(tmp_path / "dst.zarr")
    assert [(a.name, a.type) for a in out.axes] == [
        ("ch", "channel"),
        ("y", "space"),
        ("x", "space"),
    ]
    assert [c.label for c in out.channels] == ["DAPI", "GFP"]
    omero = zarr.open_group(str(tmp_path / "dst.zarr"), mode="r").attrs["ome"]["omero"]
    assert omero["rdefs"] == {"defaultZ": 0, "model": "color"}
    assert omero["channels"][1]["inverted"] is True and omero["channels"][1]["family"] == "linear"
    assert "not copied" not in capsys.readouterr().err


def test_inspect_json_of_an_image_with_a_missing_label_and_nan_properties(tmp_path, capsys):
    img = lg.write_ome_zarr(tmp_path / "i.zarr", _volume((4, 16, 16)), axes="zyx", levels=1)
    lg.write_labels(img, "cells", np.ones((4, 16, 16), "u1"))
    label = zarr.open_group(str(tmp_path / "i.zarr" / "labels" / "cells"), mode="r+")
    attrs = label.attrs.asdict()
    attrs["ome"]["image-label"]["properties"] = [{"label-value": 1, "area": float("nan")}]
    label.attrs.put(attrs)
    group = zarr.open_group(str(tmp_path / "i.zarr" / "labels"), mode="r+")
    listing = group.attrs.asdict()
    listing["ome"]["labels"] = ["cells", "nuclei"]  # nuclei is listed, not there
    group.attrs.put(listing)
    assert main(["inspect", "--json", str(tmp_path / "i.zarr")]) == 0
    info = json.loads(capsys.readouterr().out, parse_constant=lambda c: pytest.fail(c))
    by_name = {entry.get("name"): entry for entry in info["labels"]}
    assert "error" in by_name["nuclei"]
    assert info["labels"][0]["image_label"]["properties"][0]["area"] == "NaN"


def test_inspect_names_the_stored_byte_order(tmp_path, capsys):
    """Reads return native byte order; inspect and the level say how the store holds it."""
    path = tmp_path / "be.zarr"
    group = zarr.open_group(str(path), mode="w", zarr_format=2)
    group.create_array("0", data=np.arange(64, dtype=">u2").reshape(4, 4, 4), chunks=(2, 4, 4))
    axes = [{"name": a, "type": "space"} for a in "zyx"]
    scale = [{"type": "scale", "scale": [1, 1, 1]}]
    group.attrs["multiscales"] = [
        {
            "version": "0.4",
            "axes": axes,
            "datasets": [{"path": "0", "coordinateTransformations": scale}],
        }
    ]
    level = lg.open_ome_zarr(path)[0]
    assert level.dtype == np.dtype("u2") and level.stored_dtype == np.dtype(">u2")
    from numcodecs.zarr3 import Delta
    from zarr.codecs import BytesCodec

    v3 = tmp_path / "v3.zarr"
    image = lg.write_ome_zarr(v3, np.arange(64, dtype="u2").reshape(4, 4, 4), levels=1)
    del image
    zarr.create_array(
        str(v3 / "0"),
        shape=(4, 4, 4),
        dtype="u2",
        chunks=(2, 4, 4),
        filters=[Delta(dtype="u2")],
        serializer=BytesCodec(endian="big"),
        overwrite=True,
    )
    assert lg.open_ome_zarr(v3)[0].stored_dtype == np.dtype(">u2")  # read by zarr-python
    assert main(["inspect", str(path)]) == 0
    assert "uint16 (stored big-endian)" in capsys.readouterr().out
    assert main(["inspect", "--json", str(path)]) == 0
    described = json.loads(capsys.readouterr().out)["levels"][0]
    assert (described["dtype"], described["stored_dtype"]) == ("uint16", ">u2")


@pytest.mark.parametrize(("dtype", "fill"), [("u2", 7), ("f4", float("nan"))])
def test_convert_keeps_the_fill_value(tmp_path, dtype, fill):
    """The fill value is what other tools take for "no data": convert keeps it."""
    src = tmp_path / "src.zarr"
    lg.write_ome_zarr(src, np.ones((8, 16, 16), dtype), levels=2, fill_value=fill)
    dst = tmp_path / "dst.zarr"
    assert main(["convert", str(src), str(dst), "--shards", "none"]) == 0
    for level in ("0", "1"):
        kept = zarr.open_array(str(dst / level), mode="r").fill_value
        assert np.array_equal(np.asarray(kept), np.asarray(fill, dtype), equal_nan=True)
    assert np.array_equal(
        lg.open_ome_zarr(dst)[0].fill_value, np.asarray(fill, dtype), equal_nan=True
    )


@pytest.mark.parametrize("fill", [1.5, 300, -1, "x", [1, 2], None])
def test_a_fill_value_the_dtype_cannot_hold_is_refused(tmp_path, fill):
    with pytest.raises(lg.WriteError, match="fill_value"):
        lg.write_ome_zarr(tmp_path / "a.zarr", np.ones((8, 16, 16), "u1"), fill_value=fill)
    assert not (tmp_path / "a.zarr").exists()


@pytest.mark.parametrize(
    ("dtype", "fill"),
    [
        ("f8", 2**53 + 1),
        ("f4", 2**24 + 1),
        ("f8", np.int64(2**62 + 1)),
        ("u8", 2**64),
        ("i8", -(2**63) - 1),
    ],
)
def test_an_integer_fill_value_a_dtype_would_round_is_refused(tmp_path, dtype, fill):
    with pytest.raises(lg.WriteError, match="cannot be stored as"):
        lg.write_ome_zarr(tmp_path / "a.zarr", np.ones((4, 8, 8), dtype), fill_value=fill)
    assert not (tmp_path / "a.zarr").exists()


@pytest.mark.parametrize(
    ("dtype", "fill"), [("f8", 2**53), ("u8", 2**64 - 1), ("i8", -(2**63)), ("f4", np.float32(0.1))]
)
def test_a_fill_value_the_dtype_holds_exactly_is_stored_as_given(tmp_path, dtype, fill):
    image = lg.write_ome_zarr(tmp_path / "a.zarr", np.ones((4, 8, 8), dtype), fill_value=fill)
    assert image[0].fill_value == fill
    assert zarr.open_array(str(tmp_path / "a.zarr" / "0"), mode="r").fill_value == fill


def test_convert_into_a_consolidated_group_lists_the_new_image_not_its_build_folder(
    image_path, tmp_path
):
    group = tmp_path / "study.zarr"
    zarr.open_group(str(group), mode="w", zarr_format=3)
    zarr.consolidate_metadata(str(group))
    assert main(["convert", str(image_path), str(group / "b"), "--device", "cpu"]) == 0
    opened = zarr.open_group(str(group), mode="r")  # trusts the consolidated copy
    assert set(opened.metadata.consolidated_metadata.metadata) == {"b"}
    assert opened["b/0"].shape == lg.open_ome_zarr(image_path)[0].shape


def test_convert_into_a_series_of_a_bioformats2raw_collection(image_path, tmp_path):
    """A series of a collection is an image of its own: converted there like anywhere."""
    root = tmp_path / "b2r.zarr"
    group = zarr.open_group(str(root), mode="w", zarr_format=3)
    group.attrs.put({"ome": {"version": "0.5", "bioformats2raw.layout": 3}})
    assert main(["convert", str(image_path), str(root / "0"), "--device", "cpu"]) == 0
    assert main(["convert", str(image_path), str(root / "0"), "--overwrite"]) == 0
    np.testing.assert_array_equal(
        lg.open_ome_zarr(root / "0")[0][...], lg.open_ome_zarr(image_path)[0][...]
    )
