"""Opening and replacing stores never loses data: opening never deletes, replacing needs
``overwrite=True`` and happens only after every check passed, URLs are never local paths,
and the demo never touches files it did not write."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr

import linumpy_gpu as lg
from linumpy_gpu.cli import main as cli_main
from tests.helpers.safety import small_store, snapshot, volume


@pytest.fixture
def store(tmp_path):
    path = tmp_path / "keep.ome.zarr"
    small_store(path, levels=2)
    return path


@pytest.mark.parametrize("mode", ["w", "w-", "a", "x", "", "rw", None, 1])
def test_opening_with_a_writing_mode_is_refused_and_deletes_nothing(store, mode):
    before = snapshot(store)
    with pytest.raises(lg.InvalidArgumentError, match="mode"):
        lg.open_ome_zarr(store, mode=mode)
    assert snapshot(store) == before


def test_opening_read_write_changes_nothing(store):
    before = snapshot(store)
    img = lg.open_ome_zarr(store, mode="r+")
    np.testing.assert_array_equal(img[0][...], volume())
    assert snapshot(store) == before


def test_existing_store_needs_overwrite(store):
    before = snapshot(store)
    with pytest.raises(lg.StoreExistsError, match="overwrite=True"):
        lg.write_ome_zarr(store, volume(seed=1), device="cpu")
    assert snapshot(store) == before


def _bad_arguments():
    v = volume()
    return {
        "compression_level": dict(data=v, compression_level=30),
        "compression_level_type": dict(data=v, compression_level=2.5),
        "checksum": dict(data=v, checksum="yes"),
        "nan_translation": dict(data=v, translation=(0.0, float("nan"), 0.0)),
        "inf_scale": dict(data=v, scale=(1.0, float("inf"), 1.0)),
        "zero_scale": dict(data=v, scale=(1.0, 0.0, 1.0)),
        "duplicate_axes": dict(data=v, axes="zzx"),
        "no_space_axes": dict(data=v, axes="abc"),
        "wrong_axis_count": dict(data=v, axes="yx"),
        "axis_order": dict(data=v, axes="xct"),
        "too_many_levels": dict(data=v, levels=30),
        "zero_levels": dict(data=v, levels=0),
        "bad_factors": dict(data=v, levels=[(2, 2)]),
        "chunks_rank": dict(data=v, chunks=(8, 8)),
        "chunks_zero": dict(data=v, chunks=(0, 8, 8)),
        "shards_not_multiple": dict(data=v, chunks=(8, 8, 8), shards=(12, 8, 8)),
        "shards_on_04": dict(data=v, version="0.4", chunks=(8, 8, 8), shards=(16, 16, 16)),
        "version": dict(data=v, version="0.7"),
        "method": dict(data=v, method="median"),
        "compressor": dict(data=v, compressor="lzma"),
        "dtype_complex": dict(data=v.astype("c8")),
        "dtype_object": dict(data=np.array([[object()] * 2] * 2)),
        "one_dimension": dict(data=np.zeros(8, dtype="u2")),
        "six_dimensions": dict(data=np.zeros((1,) * 6, dtype="u2")),
        "empty": dict(data=np.zeros((0, 4, 4), dtype="u2")),
        "channels_count": dict(data=np.zeros((3, 4, 8, 8), "u2"), channels=[{"label": "a"}]),
        "channel_color": dict(data=np.zeros((1, 4, 8, 8), "u2"), channels=[{"color": "red"}]),
        "unit_count": dict(data=v, units=["micrometer"]),
        "unit_on_a_channel_axis": dict(
            data=np.zeros((2, 4, 8, 8), "u2"), axes="czyx", units=["nanometer"] + ["micrometer"] * 3
        ),
        "upper_case_axes": dict(data=v, axes="ZYX"),
        "name_type": dict(data=v, name=5),
        "not_an_array": dict(data=[[1, 2], [3, 4]]),
        "overwrite_type": dict(data=v, overwrite="yes"),
        "device": dict(data=v, device="tpu"),
    }


BAD = _bad_arguments()


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_arguments_are_refused_before_the_old_store_is_touched(store, case):
    kwargs = dict(BAD[case])
    data = kwargs.pop("data")
    kwargs.setdefault("overwrite", True)
    kwargs.setdefault("device", "cpu")
    before = snapshot(store)
    with pytest.raises(lg.LinumpyGpuError) as info:
        lg.write_ome_zarr(store, data, **kwargs)
    assert isinstance(info.value, ValueError), type(info.value)
    assert snapshot(store) == before
    assert [p for p in os.listdir(store.parent) if p != store.name] == []


def test_big_endian_input_is_written_in_native_order(tmp_path):
    data = volume().astype(">u2")
    img = lg.write_ome_zarr(tmp_path / "be.zarr", data, version="0.4", device="cpu")
    out = img[0][...]
    assert out.dtype == np.dtype("u2")
    np.testing.assert_array_equal(out, data.astype("u2"))


def test_overwrite_replaces_only_after_the_new_store_is_complete(store, monkeypatch):
    from linumpy_gpu.engine import writer

    before = snapshot(store)
    calls = {"n": 0}
    original = writer.ChunkedArrayWriter._put

    def failing(self, key, blob, *rest):
        calls["n"] += 1
        if calls["n"] > 3:
            raise OSError(28, "No space left on device")
        return original(self, key, blob, *rest)

    monkeypatch.setattr(writer.ChunkedArrayWriter, "_put", failing)
    with pytest.raises(lg.ChunkWriteError) as info:
        lg.write_ome_zarr(store, volume(seed=5), overwrite=True, chunks=(4, 8, 8), device="cpu")
    message = str(info.value)
    assert "No space left" in message and "'0/c/" in message and "None" not in message
    assert snapshot(store) == before  # the old store, whole
    assert os.listdir(store.parent) == [store.name]  # no staging folder, no .partial files
    np.testing.assert_array_equal(lg.open_ome_zarr(store)[0][...], volume())


def test_overwrite_from_a_lazy_array_of_the_same_store(store):
    source = lg.open_ome_zarr(store)
    lazy = source[0].to_dask() * 2
    img = lg.write_ome_zarr(store, lazy, overwrite=True, chunks=(8, 16, 16), device="cpu")
    np.testing.assert_array_equal(img[0][...], volume() * 2)


@pytest.mark.parametrize("kind", ["folder", "file", "symlink"])
def test_overwrite_never_replaces_what_is_not_a_zarr_store(tmp_path, kind):
    target = tmp_path / "thesis"
    if kind == "folder":
        target.mkdir()
        (target / "chapter1.tex").write_text("weeks of work")
    elif kind == "file":
        target.write_text("weeks of work")
    else:
        (tmp_path / "real").mkdir()
        (tmp_path / "real" / "notes.txt").write_text("weeks of work")
        target.symlink_to(tmp_path / "real")
    before = snapshot(tmp_path)
    with pytest.raises(lg.StoreExistsError, match="refusing"):
        lg.write_ome_zarr(target, volume(), overwrite=True, device="cpu")
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("part", ["0", "labels", "labels/cells", "plain-array"])
def test_overwrite_never_replaces_a_part_of_another_store(tmp_path, part):
    """A level of an image, its labels group or a label image, or a zarr array is not a
    store to replace (a path completed one folder too deep)."""
    image = tmp_path / "img.zarr"
    lg.write_ome_zarr(image, volume(), levels=2, device="cpu")
    lg.write_labels(image, "cells", (volume() % 3).astype("u1"))
    if part == "plain-array":
        zarr.create_array(tmp_path / "plain-array", shape=(4,), dtype="u1")
        target = tmp_path / "plain-array"
    else:
        target = image / part
    before = snapshot(tmp_path)
    with pytest.raises(lg.StoreExistsError, match="refusing"):
        lg.write_ome_zarr(target, volume(), overwrite=True, device="cpu")
    assert snapshot(tmp_path) == before
    np.testing.assert_array_equal(lg.open_ome_zarr(image)[0][...], volume())


@pytest.mark.parametrize("part", ["0", "labels", "labels/cells", "plain-array"])
def test_overwrite_never_replaces_a_part_of_another_store_on_an_object_store(part):
    import fsspec

    root = f"memory://parts-{os.getpid()}-{part.replace('/', '-')}"
    image = f"{root}/img.zarr"
    lg.write_ome_zarr(image, volume(), levels=2, device="cpu")
    lg.write_labels(image, "cells", (volume() % 3).astype("u1"))
    zarr.create_array(f"{root}/plain-array", shape=(4,), dtype="u1", fill_value=7)
    target = f"{root}/plain-array" if part == "plain-array" else f"{image}/{part}"
    fs = fsspec.filesystem("memory")
    before = {k: fs.cat(k) for k in fs.find(root.split("://")[1])}
    with pytest.raises(lg.StoreExistsError, match="refusing"):
        lg.write_ome_zarr(target, volume(), overwrite=True, device="cpu")
    assert {k: fs.cat(k) for k in fs.find(root.split("://")[1])} == before
    fs.rm(root.split("://")[1], recursive=True)


def _place(tmp_path: Path, where: str, name: str) -> tuple[str, Any, Any]:
    """A store's root on a local disk or in fsspec's memory file system, what lists its
    contents (to compare before and after), and what removes it at the end."""
    if where == "local":
        return str(tmp_path / f"{name}.zarr"), lambda: snapshot(tmp_path), lambda: None
    import fsspec

    fs = fsspec.filesystem("memory")
    key = f"{name}-{os.getpid()}.zarr"
    return (
        f"memory://{key}",
        lambda: {k: fs.cat(k) for k in fs.find(key)},
        lambda: fs.rm(key, recursive=True),
    )


def _plate(root: str, version: str) -> None:
    """A one-row plate of two wells of two field images, as another writer lays it out."""
    group = zarr.open_group(root, mode="w", zarr_format=3 if version == "0.5" else 2)
    plate = {
        "rows": [{"name": "A"}],
        "columns": [{"name": "1"}, {"name": "2"}],
        "wells": [
            {"path": "A/1", "rowIndex": 0, "columnIndex": 0},
            {"path": "A/2", "rowIndex": 0, "columnIndex": 1},
        ],
    }
    well = {"images": [{"path": "0"}, {"path": "1"}]}
    ome = (
        (lambda kind, body: {"ome": {"version": "0.5", kind: body}})
        if version == "0.5"
        else (lambda kind, body: {kind: {**body, "version": "0.4"}})
    )
    group.attrs.update(ome("plate", plate))
    for w in ("A/1", "A/2"):
        group.require_group(w).attrs.update(ome("well", well))
        for field in "01":
            lg.write_ome_zarr(f"{root}/{w}/{field}", volume(), levels=1, version=version)


@pytest.mark.parametrize("version", ["0.4", "0.5"])
@pytest.mark.parametrize("part", ["", "A", "A/1"])
@pytest.mark.parametrize("where", ["local", "memory"])
def test_overwrite_never_replaces_a_plate_its_rows_or_wells(tmp_path, where, part, version):
    """A plate, one of its rows or one of its wells holds field images: an image written
    over it would delete them. A field image itself may be replaced by an image."""
    root, listing, remove = _place(tmp_path, where, f"plate-{version}-{part.replace('/', '-')}")
    _plate(root, version)
    before = listing()
    target = f"{root}/{part}" if part else root
    with pytest.raises(lg.StoreExistsError, match="plate"):
        lg.write_ome_zarr(target, volume(), overwrite=True, levels=1, version=version)
    assert listing() == before
    assert sorted(lg.open_ome_zarr(root)) == ["A/1", "A/2"]
    replaced = lg.write_ome_zarr(
        f"{root}/A/2/1", volume() + 1, overwrite=True, levels=1, version=version
    )
    np.testing.assert_array_equal(replaced[0][...], volume() + 1)
    well = lg.open_ome_zarr(root)["A/2"]
    np.testing.assert_array_equal(well[0][0][...], volume())
    np.testing.assert_array_equal(well[1][0][...], volume() + 1)
    remove()


@pytest.mark.parametrize("version", ["0.4", "0.5"])
def test_writes_inside_a_plate_keep_its_consolidated_metadata_true(tmp_path, version):
    """A plate whose root holds consolidated metadata (as HCS tools write it): label and
    image writes below it bring it up to date, so zarr-python's default open (which trusts
    it) sees what is on disk."""
    root = str(tmp_path / "plate.zarr")
    _plate(root, version)
    zarr.consolidate_metadata(root)
    image = lg.open_ome_zarr(root)["A/1"][0]
    lg.write_labels(image, "cells", (volume() % 3).astype("u1"))
    relabel = (volume() % 3).astype("u2") + 300
    lg.write_labels(f"{root}/A/1/0", "cells", relabel, overwrite=True)
    lg.write_ome_zarr(f"{root}/A/2/1", np.ones((8, 8, 8), "f4"), overwrite=True, version=version)
    lg.write_ome_zarr(f"{root}/A/1/5", np.ones((4, 8, 8), "u1"), version=version)  # a new field
    plate = zarr.open_group(root, mode="r")  # use_consolidated=None: trusts the root's copy
    assert plate.metadata.consolidated_metadata is not None
    label = plate["A/1/0/labels/cells/0"]
    assert label.dtype == np.uint16 and int(label[0, 0, 0]) == int(relabel[0, 0, 0])
    field = plate["A/2/1/0"]
    assert field.shape == (8, 8, 8) and field.dtype == np.float32
    assert plate["A/1/5/0"].shape == (4, 8, 8)
    assert sorted(k for k, _ in plate.members(max_depth=None)) == sorted(
        k
        for k, _ in zarr.open_group(root, mode="r", use_consolidated=False).members(max_depth=None)
    )


def test_concurrent_writes_inside_a_consolidated_plate_are_all_listed(tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    root = str(tmp_path / "plate.zarr")
    _plate(root, "0.5")
    zarr.consolidate_metadata(root)

    def write(i: int) -> None:
        lg.write_ome_zarr(f"{root}/A/{1 + i % 2}/{10 + i}", np.full((4, 8, 8), i, "u1"))

    with ThreadPoolExecutor(6) as pool:
        list(pool.map(write, range(6)))
    plate = zarr.open_group(root, mode="r")
    for i in range(6):
        assert int(plate[f"A/{1 + i % 2}/{10 + i}/0"][0, 0, 0]) == i


def test_plate_and_well_keys_of_the_wrong_kind_are_not_found_errors(tmp_path):
    """A well by its path, a field by its index or its path; anything else is a typed
    error naming what there is."""
    root = str(tmp_path / "plate.zarr")
    _plate(root, "0.5")
    plate = lg.open_ome_zarr(root)
    for key in (slice(0, 2), 0, ("A", "1"), "B/1"):
        with pytest.raises(lg.NotFoundError, match="no well"):
            plate[key]
    well = plate["A/1"]
    np.testing.assert_array_equal(well["1"][0][...], well[1][0][...])
    assert well["0"].path == well[0].path == f"{root}/A/1/0"
    for key in ("2", 2, slice(0, 1), True):
        with pytest.raises(lg.NotFoundError, match=r"no field .* at paths \['0', '1'\]"):
            well[key]


@pytest.mark.parametrize("part", ["", "OME"])
def test_overwrite_never_replaces_a_bioformats2raw_collection_or_its_metadata(tmp_path, part):
    """The collection holds its series, and its OME group the acquisition's OME-XML: an
    image written over either deletes them. A series itself may be replaced."""
    root = tmp_path / "series.zarr"
    group = zarr.open_group(str(root), mode="w", zarr_format=2)
    group.attrs["bioformats2raw.layout"] = 3
    group.require_group("OME").attrs["series"] = ["0"]
    (root / "OME" / "METADATA.ome.xml").write_text("<OME/>")
    lg.write_ome_zarr(root / "0", volume(), levels=1, version="0.4")
    before = snapshot(tmp_path)
    with pytest.raises(lg.StoreExistsError, match="bioformats2raw"):
        lg.write_ome_zarr(root / part, volume(), overwrite=True, levels=1, version="0.4")
    assert snapshot(tmp_path) == before
    lg.write_ome_zarr(root / "0", volume() + 1, overwrite=True, levels=1, version="0.4")
    assert (root / "OME" / "METADATA.ome.xml").read_text() == "<OME/>"


def test_overwrite_never_replaces_an_ngff_scene(tmp_path):
    root = tmp_path / "scene.ome.zarr"
    zarr.open_group(str(root), mode="w", zarr_format=3)
    for k in range(2):
        lg.write_ome_zarr(root / f"tile{k}", volume(), version="0.6", levels=1)
    group = zarr.open_group(str(root), mode="r+")
    axes = [{"name": a, "type": "space"} for a in "zyx"]
    placements = [
        {
            "type": "translation",
            "translation": [0, 0, 100 * k],
            "input": {"path": f"tile{k}", "name": "physical"},
            "output": {"name": "world"},
        }
        for k in range(2)
    ]
    group.attrs["ome"] = {
        "version": "0.6",
        "scene": {
            "coordinateSystems": [{"name": "world", "axes": axes}],
            "coordinateTransformations": placements,
        },
    }
    assert sorted(lg.open_ome_zarr(root)) == ["tile0", "tile1"]
    before = snapshot(tmp_path)
    with pytest.raises(lg.StoreExistsError, match="NGFF scene"):
        lg.write_ome_zarr(root, volume(), overwrite=True, levels=1)
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("where", ["local", "memory"])
def test_overwrite_never_replaces_a_group_holding_images(tmp_path, where):
    """A zarr group that is no image but holds images or arrays (a path one folder short):
    an image written over it would delete them."""
    root, listing, remove = _place(tmp_path, where, "experiment")
    group = zarr.open_group(root, mode="w", zarr_format=3)
    group.require_group("batch1")
    lg.write_ome_zarr(f"{root}/batch1/sample.ome.zarr", volume(), levels=1)
    before = listing()
    with pytest.raises(lg.StoreExistsError, match="holds the OME-Zarr data at .*sample"):
        lg.write_ome_zarr(root, volume(), overwrite=True, levels=1)
    assert listing() == before
    arrays_only = f"{root}/arrays"
    zarr.open_group(arrays_only, mode="w").create_array("raw", shape=(4,), dtype="u1")
    before = listing()
    with pytest.raises(lg.StoreExistsError, match="holds the zarr array at .*raw"):
        lg.write_ome_zarr(arrays_only, volume(), overwrite=True, levels=1)
    assert listing() == before
    empty_group = f"{root}/empty"
    zarr.open_group(empty_group, mode="w")
    img = lg.write_ome_zarr(empty_group, volume(), overwrite=True, levels=1)
    np.testing.assert_array_equal(img[0][...], volume())
    remove()


@pytest.mark.parametrize("where", ["top", "labels"])
@pytest.mark.parametrize("kind", ["file", "folder"])
def test_overwrite_never_deletes_files_beside_a_zarr_store(tmp_path, where, kind):
    """A folder of a user's files that also holds zarr metadata (a stray .zattrs), or an
    image with the user's own files put inside it: replacing it would delete them."""
    target = tmp_path / "scans"
    if where == "top":
        target.mkdir()
        (target / ".zattrs").write_text("{}")
        folder = target
    else:
        lg.write_ome_zarr(target, volume(), levels=1)
        lg.write_labels(target, "cells", (volume() % 3).astype("u1"))
        folder = target / "labels"
    if kind == "file":
        (folder / "scan_0001.tif").write_bytes(b"II*\x00weeks of work")
    else:
        (folder / "raw").mkdir()
        (folder / "raw" / "scan_0001.tif").write_bytes(b"II*\x00weeks of work")
    before = snapshot(tmp_path)
    with pytest.raises(lg.StoreExistsError, match="not part of a zarr store"):
        lg.write_ome_zarr(target, volume(), overwrite=True, levels=1)
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("content", ["{not json", '{"zarr_format": 3}', "[1, 2]"])
def test_a_level_with_damaged_metadata_is_named_not_its_chunks(tmp_path, content):
    """Replacing an image whose level metadata is damaged is refused (its chunks cannot be
    told from a user's files) with a message naming the damaged document."""
    target = tmp_path / "img.ome.zarr"
    lg.write_ome_zarr(target, volume(), levels=1)
    (target / "0" / "zarr.json").write_text(content)
    before = snapshot(tmp_path)
    with pytest.raises(lg.StoreExistsError, match="not valid zarr metadata") as info:
        lg.write_ome_zarr(target, volume(), overwrite=True, levels=1)
    assert str(target / "0" / "zarr.json") in str(info.value)
    assert snapshot(tmp_path) == before


def test_a_group_with_damaged_metadata_over_sound_nodes_is_replaced(tmp_path):
    """Only where files below a damaged document cannot be told from a user's is it named:
    a labels group whose zarr.json lost its node type, over a sound label image, is
    replaced with the image."""
    target = tmp_path / "img.ome.zarr"
    lg.write_ome_zarr(target, volume(), levels=1)
    lg.write_labels(target, "cells", (volume() % 3).astype("u1"))
    (target / "labels" / "zarr.json").write_text('{"zarr_format": 3}')
    lg.write_ome_zarr(target, volume() + 1, overwrite=True, levels=1)
    np.testing.assert_array_equal(lg.open_ome_zarr(target)[0][...], volume() + 1)


def test_a_sound_zarr_json_among_chunks_is_a_foreign_file(tmp_path):
    target = tmp_path / "img.ome.zarr"
    lg.write_ome_zarr(target, volume(), levels=1)
    stray = target / "0" / "c" / "zarr.json"
    stray.write_text('{"zarr_format": 3, "node_type": "group", "attributes": {}}')
    with pytest.raises(lg.StoreExistsError, match="not part of a zarr store"):
        lg.write_ome_zarr(target, volume(), overwrite=True, levels=1)
    assert stray.exists()


@pytest.mark.parametrize("where", ["local", "memory"])
@pytest.mark.parametrize("inside", ["image", "level"])
def test_a_new_image_inside_another_image_is_refused(tmp_path, where, inside):
    """An image written inside another (its folder, or a level's) would be deleted with
    it, and breaks it for readers: refused where it would be new, as where it exists."""
    root, listing, remove = _place(tmp_path, where, f"outer-{inside}")
    lg.write_ome_zarr(root, volume(), levels=1)
    before = listing()
    target = f"{root}/derived.ome.zarr" if inside == "image" else f"{root}/0/x/derived.ome.zarr"
    match = "inside the image" if inside == "image" else "inside the zarr array"
    with pytest.raises(lg.StoreExistsError, match=match):
        lg.write_ome_zarr(target, volume(), levels=1)
    assert listing() == before
    remove()


@pytest.mark.parametrize("where", ["local", "memory"])
def test_write_labels_never_replaces_a_group_holding_an_image(tmp_path, where):
    """A label name whose group holds another tool's image (not a label image): replacing
    it with a label image would delete that image."""
    image = str(tmp_path / "img.zarr") if where == "local" else f"memory://sets-{os.getpid()}"
    lg.write_ome_zarr(image, volume(), levels=1, device="cpu")
    lg.write_labels(image, "cells", (volume() % 3).astype("u1"))
    group = zarr.open_group(f"{image}/labels/sets", mode="w")
    run = group.create_group("run1")
    run.create_array("0", shape=(4,), dtype="u1", fill_value=3)
    with pytest.raises(lg.StoreExistsError, match="holds the zarr array"):
        lg.write_labels(image, "sets", (volume() % 5).astype("u1"), overwrite=True)
    assert zarr.open_array(f"{image}/labels/sets/run1/0", mode="r")[0] == 3


@pytest.mark.parametrize("where", ["local", "memory"])
def test_overwrite_never_deletes_an_array_that_is_not_a_level(tmp_path, where):
    """A user's array kept in an image's group, or in a label image's, is not one of its
    levels: replacing the image would delete it."""
    image = str(tmp_path / "img.zarr") if where == "local" else f"memory://extra-{os.getpid()}"
    lg.write_ome_zarr(image, volume(), levels=2, device="cpu")
    lg.write_labels(image, "cells", (volume() % 3).astype("u1"))
    zarr.open_group(image, mode="a").create_array("measurements", shape=(3,), dtype="f8")
    zarr.open_array(f"{image}/measurements", mode="r+")[:] = [1.0, 2.0, 3.0]
    with pytest.raises(lg.StoreExistsError, match="measurements', not one of its levels"):
        lg.write_ome_zarr(image, volume(seed=2), device="cpu", overwrite=True)
    assert list(zarr.open_array(f"{image}/measurements", mode="r")[:]) == [1.0, 2.0, 3.0]

    extra = zarr.open_group(f"{image}/labels/cells", mode="a").create_array(
        "extra", shape=(2,), dtype="u1", fill_value=7
    )
    assert extra[0] == 7
    with pytest.raises(lg.StoreExistsError, match="extra', not one of its levels"):
        lg.write_labels(image, "cells", (volume() % 5).astype("u1"), overwrite=True)
    assert zarr.open_array(f"{image}/labels/cells/extra", mode="r")[0] == 7


def _connection_dropped_after(n, monkeypatch):
    """Object-store deletions that fail (a dropped connection) after ``n`` objects: the
    keys deleted until then (``monkeypatch.undo()`` ends it)."""
    from zarr.storage import FsspecStore

    delete, deleted = FsspecStore.delete, []

    async def dropped(self, key):
        if len(deleted) == n:
            raise ConnectionError("connection dropped")
        deleted.append(key)
        return await delete(self, key)

    monkeypatch.setattr(FsspecStore, "delete", dropped)
    return deleted


def _failing_at_the_last_block(shape, dtype):
    """A dask volume whose last block fails to compute: a write of it is interrupted."""
    import dask.array as da

    def fail(block, block_info=None):
        if block_info[None]["chunk-location"] == (1, 1, 1):
            raise RuntimeError("connection dropped")
        return block

    return da.zeros(shape, dtype=dtype, chunks=shape[0] // 2).map_blocks(fail, dtype=dtype)


def test_what_an_interrupted_remote_write_left_is_replaced_and_nothing_else(tmp_path):
    """The levels an interrupted write left (marked unfinished, of an image or of one of
    its label images) go with a replacement; an array or image added beside them since
    blocks it, as in any image."""
    import fsspec

    url = f"memory://unfinished-{os.getpid()}.zarr"
    lg.write_ome_zarr(url, volume(), levels=2, device="cpu")
    with pytest.raises(lg.WriteError):
        lg.write_labels(url, "cells", _failing_at_the_last_block((16, 32, 32), "u1"))
    lg.write_ome_zarr(url, volume(seed=2), levels=1, device="cpu", overwrite=True)
    np.testing.assert_array_equal(lg.open_ome_zarr(url)[0][...], volume(seed=2))

    with pytest.raises(lg.WriteError):
        lg.write_ome_zarr(url, _failing_at_the_last_block((16, 32, 32), "u2"), overwrite=True)
    with pytest.raises(lg.StoreExistsError, match="lies inside the image"):
        lg.write_ome_zarr(f"{url}/other", volume(), device="cpu")
    zarr.open_group(url, mode="a").create_array("measurements", shape=(3,), dtype="f4")
    local = tmp_path / "copy.zarr"
    fsspec.filesystem("memory").get(url[len("memory:/") :], str(local), recursive=True)
    for where in (url, str(local)):
        with pytest.raises(lg.StoreExistsError, match="measurements', not one of its levels"):
            lg.write_ome_zarr(where, volume(), device="cpu", overwrite=True)
        assert "measurements" in zarr.open_group(where, mode="r")


@pytest.mark.parametrize(
    "name",
    [
        ".nfs_settings",
        "results.__lock",
        "c.results.__lock",
        "config/zarr.json",
        "zarr.json.list",  # a zarr.json holding a JSON list, beside the levels
    ],
)
@pytest.mark.parametrize("where", ["local", "memory"])
def test_user_files_named_like_what_tools_leave_block_a_replacement(tmp_path, where, name):
    """Only NFS's own names (.nfs and hex digits), tensorstore's locks beside chunks and
    metadata, and zarr documents that say they are one are passed over."""
    import fsspec

    content = b'{"compressor": "zstd"}'
    if name == "zarr.json.list":
        name, content = "notes/zarr.json", b'["my", "notes"]'
    if where == "local":
        image = str(tmp_path / "img.zarr")
        lg.write_ome_zarr(image, volume(), levels=1, device="cpu")
        (tmp_path / "img.zarr" / name).parent.mkdir(exist_ok=True)
        (tmp_path / "img.zarr" / name).write_bytes(content)
    else:
        image = f"memory://named-{os.getpid()}-{name.replace('/', '-')}.zarr"
        lg.write_ome_zarr(image, volume(), levels=1, device="cpu")
        fsspec.filesystem("memory").pipe(f"{image[len('memory:/') :]}/{name}", content)
    with pytest.raises(lg.StoreExistsError, match=name.rpartition("/")[2].replace(".", r"\.")):
        lg.write_ome_zarr(image, volume(seed=2), levels=1, device="cpu", overwrite=True)


@pytest.mark.parametrize("version", ["0.4", "0.5"])
@pytest.mark.parametrize("stop_after", [2, 5, 9])
def test_a_remote_replacement_cut_short_leaves_a_store_that_refuses_to_open(
    monkeypatch, version, stop_after
):
    """The old store's objects go one by one, chunks first, then the levels' metadata, the
    root last: a replacement interrupted among them (a dropped connection) leaves a store
    that says it is incomplete, not one whose deleted chunks read as the fill value, and
    writing again replaces it."""

    url = f"memory://cut-short-{os.getpid()}-{version}-{stop_after}.ome.zarr"
    data = volume() + 1  # no zeros: a deleted chunk would read as 0
    lg.write_ome_zarr(url, data, chunks=(8, 16, 16), levels=2, version=version, device="cpu")
    deleted = _connection_dropped_after(stop_after, monkeypatch)
    with pytest.raises(lg.RemoteStoreError):
        lg.write_ome_zarr(url, data * 2, levels=2, version=version, device="cpu", overwrite=True)
    monkeypatch.undo()
    documents = ("zarr.json", ".zarray", ".zattrs", ".zgroup")
    assert not any(key.endswith(documents) for key in deleted[:4]), deleted  # chunks first
    with pytest.raises(lg.IncompleteStoreError):
        lg.open_ome_zarr(url)
    lg.write_ome_zarr(url, data * 2, levels=2, version=version, device="cpu", overwrite=True)
    np.testing.assert_array_equal(lg.open_ome_zarr(url)[0][...], data * 2)


@pytest.mark.parametrize("version", ["0.4", "0.5"])
def test_a_handle_opened_before_a_remote_replacement_refuses_its_deleted_chunks(
    monkeypatch, version
):
    """A reader that opened a level before a replacement began (another process, say)
    and reads while the old chunks are being deleted is refused: each array is marked
    before its chunks go, and an object store's reader checks its array's metadata after
    every read. Its deleted chunks never read as the fill value."""
    url = f"memory://handle-before-{os.getpid()}-{version}.ome.zarr"
    data = volume() + 1  # no zeros: a deleted chunk would read as 0
    lg.write_ome_zarr(url, data, chunks=(8, 16, 16), levels=2, version=version, device="cpu")
    before = lg.open_ome_zarr(url)
    np.testing.assert_array_equal(before[0][...], data)
    deleted = _connection_dropped_after(3, monkeypatch)
    with pytest.raises(lg.RemoteStoreError):
        lg.write_ome_zarr(url, data * 2, levels=2, version=version, device="cpu", overwrite=True)
    monkeypatch.undo()
    assert len(deleted) == 3 and not any(k.endswith((".zarray", "zarr.json")) for k in deleted)
    for level in before.levels:
        with pytest.raises(lg.StoreError, match="being replaced"):
            level[...]


@pytest.mark.parametrize("version", ["0.4", "0.5"])
def test_a_read_across_a_remote_replacement_of_the_same_layout_is_refused(monkeypatch, version):
    """A read of several batches during which another writer replaces the store with one
    of the same shape, chunks and codecs would give some batches of each: each write's
    levels carry its own id, so the reader's check after the read sees the change."""
    from linumpy_gpu.io.sources import ZarrStoreSource

    url = f"memory://across-{os.getpid()}-{version}.ome.zarr"
    data = volume() + 1
    lg.write_ome_zarr(url, data, chunks=(8, 16, 16), levels=1, version=version, device="cpu")
    before = lg.open_ome_zarr(url)[0]
    before._reader.batch_bytes = 8 * 16 * 16 * 2  # a batch per chunk
    fetch, calls = ZarrStoreSource.fetch, []

    def replaced_after_the_first_batch(self, *args, **kwargs):
        calls.append(None)
        if len(calls) == 2:
            lg.write_ome_zarr(
                url,
                data * 2,
                chunks=(8, 16, 16),
                levels=1,
                version=version,
                device="cpu",
                overwrite=True,
            )
        return fetch(self, *args, **kwargs)

    monkeypatch.setattr(ZarrStoreSource, "fetch", replaced_after_the_first_batch)
    with pytest.raises(lg.StoreError, match="replaced"):
        before[...]
    assert len(calls) > 2  # the replacement came between batches of one read
    monkeypatch.undo()
    np.testing.assert_array_equal(lg.open_ome_zarr(url)[0][...], data * 2)


def test_a_remote_v2_store_whose_levels_have_no_attributes_is_replaced_without_leftovers():
    """Levels written without attributes (zarr-python 2, tensorstore): marking them before
    their chunks go writes a ``.zattrs`` of their own, which goes with them; nothing is
    left behind to block the next replacement."""
    import fsspec

    name = f"no-attrs-{os.getpid()}.ome.zarr"
    url, fs = f"memory://{name}", fsspec.filesystem("memory")
    data = volume() + 1
    lg.write_ome_zarr(url, data, chunks=(8, 16, 16), levels=3, version="0.4", device="cpu")
    for i in range(3):
        fs.rm(f"/{name}/{i}/.zattrs")
    lg.write_ome_zarr(url, data * 2, levels=1, version="0.4", device="cpu", overwrite=True)
    assert not [p for p in fs.find(f"/{name}") if p.startswith((f"/{name}/1/", f"/{name}/2/"))]
    lg.write_ome_zarr(url, data * 3, levels=1, version="0.4", device="cpu", overwrite=True)
    np.testing.assert_array_equal(lg.open_ome_zarr(url)[0][...], data * 3)


def test_a_marked_level_attributes_document_left_alone_is_replaced():
    """What a v2 replacement cut short between a level's two documents leaves (deleting
    its ``.zarray`` before its ``.zattrs``): the level's marked attributes, no array, under
    a marked root. A level's leftovers, not an image: the retry replaces them."""
    import fsspec

    name = f"left-attrs-{os.getpid()}.ome.zarr"
    url, fs = f"memory://{name}", fsspec.filesystem("memory")
    data = volume() + 1
    lg.write_ome_zarr(url, data, chunks=(8, 16, 16), levels=2, version="0.4", device="cpu")
    mark = {"linumpy_gpu": {"write_in_progress": True}}
    zarr.open_group(url, mode="r+").attrs.update(mark)
    for path in fs.find(f"/{name}/0"):
        fs.rm(path)
    fs.pipe(f"/{name}/0/.zattrs", json.dumps(mark).encode())
    lg.write_ome_zarr(url, data * 2, levels=2, version="0.4", device="cpu", overwrite=True)
    np.testing.assert_array_equal(lg.open_ome_zarr(url)[0][...], data * 2)


def test_dask_tasks_that_open_a_replaced_remote_store_refuse_it():
    """A task that opens the array itself (a cluster's worker; here, other settings than
    the level's) after the store was replaced with one of the same layout refuses it,
    as the level does: the write's id is part of what it checks."""
    from linumpy_gpu.image.dask import clear_worker_cache

    url = f"memory://dask-replaced-{os.getpid()}.ome.zarr"
    data = volume() + 1
    lg.write_ome_zarr(url, data, chunks=(8, 16, 16), levels=1, device="cpu")
    level = lg.open_ome_zarr(url)[0]
    with lg.config.set(io_threads=3):  # tasks then open a reader of their own
        lazy = level.to_dask()
    np.testing.assert_array_equal(lazy.compute(scheduler="synchronous"), data)
    lg.write_ome_zarr(url, data * 2, chunks=(8, 16, 16), levels=1, device="cpu", overwrite=True)
    clear_worker_cache()
    with pytest.raises(lg.StoreError, match="replaced"):
        lazy.compute(scheduler="synchronous")


def test_a_chunk_write_that_fails_on_an_object_store_names_the_url(monkeypatch):
    """The error names the level as the user named the image (its URL), not the store
    object's repr."""
    from zarr.storage import FsspecStore

    set_, chunks = FsspecStore.set, []

    async def dropped_at_the_second_chunk(self, key, value, *args, **kwargs):
        if "/c/" in key:
            chunks.append(key)
            if len(chunks) == 2:
                raise ConnectionError("connection dropped")
        return await set_(self, key, value, *args, **kwargs)

    monkeypatch.setattr(FsspecStore, "set", dropped_at_the_second_chunk)
    url = f"memory://chunk-write-name-{os.getpid()}.ome.zarr"
    with pytest.raises(lg.ChunkWriteError, match=f"^{url}/0: ") as info:
        lg.write_ome_zarr(url, volume() + 1, chunks=(8, 16, 16), levels=1, device="cpu")
    assert "FsspecStore" not in str(info.value)


def test_label_images_refuse_to_open_after_a_replacement_cut_short(monkeypatch):
    """A label image's chunks go with its image's: it is marked unfinished too, however it
    is reached (its own URL, or the image's labels)."""

    url = f"memory://labels-cut-{os.getpid()}.ome.zarr"
    lg.write_ome_zarr(url, volume(), levels=1, device="cpu")
    lg.write_labels(url, "cells", (volume() % 3 + 1).astype("u1"), chunks=(4, 8, 8))
    zarr.consolidate_metadata(url)  # readers that trust the copy must see the mark too
    deleted = _connection_dropped_after(6, monkeypatch)
    with pytest.raises(lg.RemoteStoreError):
        lg.write_ome_zarr(url, volume(seed=2), levels=1, device="cpu", overwrite=True)
    monkeypatch.undo()
    assert any("labels/cells" in key for key in deleted)
    with pytest.raises(lg.IncompleteStoreError):
        lg.open_ome_zarr(f"{url}/labels/cells")
    with pytest.raises(lg.IncompleteStoreError):
        lg.open_ome_zarr(url)


@pytest.mark.parametrize("failing", [2, 3])  # the root's mark, then its final metadata
def test_a_root_metadata_write_that_fails_is_a_typed_error(monkeypatch, failing):
    from zarr.storage import FsspecStore

    url = f"memory://root-set-{os.getpid()}-{failing}.ome.zarr"
    set_, roots = FsspecStore.set, []

    async def dropped(self, key, value, *args, **kwargs):
        if key == "zarr.json":
            roots.append(key)
            if len(roots) == failing:
                raise ConnectionError("connection dropped")
        return await set_(self, key, value, *args, **kwargs)

    monkeypatch.setattr(FsspecStore, "set", dropped)
    with pytest.raises(lg.RemoteStoreError):
        lg.write_ome_zarr(url, volume(), levels=1, device="cpu")
    monkeypatch.undo()
    with pytest.raises(lg.LinumpyGpuError):
        lg.open_ome_zarr(url)
    lg.write_ome_zarr(url, volume(), levels=1, device="cpu", overwrite=True)
    np.testing.assert_array_equal(lg.open_ome_zarr(url)[0][...], volume())


def test_a_consolidated_v2_store_cut_short_at_its_last_object_is_replaced(monkeypatch):
    """The root's consolidated copy goes before its attributes and its .zgroup: what a
    deletion cut short leaves is a plain group, which a retry replaces."""
    import fsspec

    url = f"memory://consolidated-last-{os.getpid()}.ome.zarr"
    lg.write_ome_zarr(url, volume(), levels=2, version="0.4", device="cpu")
    zarr.consolidate_metadata(url)
    objects = fsspec.filesystem("memory").find(url[len("memory:/") :])
    _connection_dropped_after(len(objects) - 1, monkeypatch)
    with pytest.raises(lg.RemoteStoreError):
        lg.write_ome_zarr(
            url, volume(seed=2), levels=2, version="0.4", device="cpu", overwrite=True
        )
    monkeypatch.undo()
    lg.write_ome_zarr(url, volume(seed=2), levels=2, version="0.4", device="cpu", overwrite=True)
    np.testing.assert_array_equal(lg.open_ome_zarr(url)[0][...], volume(seed=2))


def test_a_replacement_whose_mark_cannot_be_written_deletes_nothing(monkeypatch):
    from zarr.storage import FsspecStore

    url = f"memory://unmarked-{os.getpid()}.ome.zarr"
    lg.write_ome_zarr(url, volume(), levels=1, device="cpu")

    async def refused(self, key, value, *args, **kwargs):
        raise ConnectionError("connection dropped")

    monkeypatch.setattr(FsspecStore, "set", refused)
    with pytest.raises(lg.RemoteStoreError):
        lg.write_ome_zarr(url, volume(seed=2), levels=1, device="cpu", overwrite=True)
    monkeypatch.undo()
    np.testing.assert_array_equal(lg.open_ome_zarr(url)[0][...], volume())


def test_a_replacement_cut_short_keeps_the_level_list_for_the_next_try(monkeypatch):
    """Levels not named 0, 1, ... (ngff-zarr's scale0/image) are still known as the
    store's own when a replacement is tried again."""

    url = f"memory://named-levels-{os.getpid()}.ome.zarr"
    lg.write_ome_zarr(url, volume(), levels=1, device="cpu")
    root = zarr.open_group(url, mode="a")
    zarr.create_array(root.store, name="scale0/image", data=volume(), chunks=(8, 16, 16))
    meta = dict(root.attrs["ome"])
    meta["multiscales"][0]["datasets"][0]["path"] = "scale0/image"
    root.attrs["ome"] = meta
    del root["0"]
    _connection_dropped_after(1, monkeypatch)
    with pytest.raises(lg.RemoteStoreError):
        lg.write_ome_zarr(url, volume(seed=2), levels=1, device="cpu", overwrite=True)
    monkeypatch.undo()
    lg.write_ome_zarr(url, volume(seed=2), levels=1, device="cpu", overwrite=True)
    np.testing.assert_array_equal(lg.open_ome_zarr(url)[0][...], volume(seed=2))


@pytest.mark.parametrize("where", ["local", "memory"])
def test_a_label_image_is_still_replaced_through_write_labels(tmp_path, where):
    image = str(tmp_path / "img.zarr") if where == "local" else f"memory://relabel-{os.getpid()}"
    lg.write_ome_zarr(image, volume(), levels=2, device="cpu")
    lg.write_labels(image, "cells", (volume() % 3).astype("u1"))
    lg.write_labels(image, "cells", (volume() % 5).astype("u1"), overwrite=True)
    label = lg.open_ome_zarr(image).labels["cells"]
    np.testing.assert_array_equal(label[0][...], (volume() % 5).astype("u1"))


def test_overwrite_of_an_empty_folder_is_allowed(tmp_path):
    target = tmp_path / "empty"
    target.mkdir()
    img = lg.write_ome_zarr(target, volume(), overwrite=True, device="cpu")
    np.testing.assert_array_equal(img[0][...], volume())


def test_a_handle_to_a_replaced_store_refuses_to_read_stale_levels(store):
    old = lg.open_ome_zarr(store)
    lg.write_ome_zarr(store, volume(seed=3), overwrite=True, chunks=(8, 16, 16), device="cpu")
    with pytest.raises(lg.StoreError, match="replaced since it was opened"):
        old[1][...]  # a level the new store does not have
    np.testing.assert_array_equal(lg.open_ome_zarr(store)[0][...], volume(seed=3))


def test_killed_write_leaves_the_old_store_and_the_next_write_cleans_up(store, tmp_path):
    script = (
        "import numpy as np, linumpy_gpu as lg, sys\n"
        "data = np.random.default_rng(0).integers(0, 60000, (384, 256, 256)).astype('u2')\n"
        "print('start', flush=True)\n"
        f"lg.write_ome_zarr({str(store)!r}, data, chunks=(8, 32, 32), levels=3, overwrite=True,"
        " device='cpu')\n"
        "print('done', flush=True)\n"
    )
    before = snapshot(store)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "start"

    def writing() -> bool:
        """Whether the writer has begun writing chunks into its staging folder."""
        for p in tmp_path.iterdir():
            if p.name.endswith("linumpy-gpu-partial") and (p / "0" / "c").is_dir():
                return True
        return False

    while proc.poll() is None and not writing():
        pass
    proc.kill()
    proc.wait()
    assert proc.returncode != 0, "the writer finished before it could be killed"
    assert snapshot(store) == before
    np.testing.assert_array_equal(lg.open_ome_zarr(store)[0][...], volume())
    leftovers = [p for p in tmp_path.iterdir() if p.name.endswith("linumpy-gpu-partial")]
    assert leftovers  # a killed process cannot clean up after itself ...
    lg.write_ome_zarr(store, volume(seed=9), overwrite=True, chunks=(8, 16, 16), device="cpu")
    assert sorted(p.name for p in tmp_path.iterdir()) == [store.name]  # ... the next write does


def test_convert_builds_its_image_in_one_build_folder(store, tmp_path, monkeypatch):
    """convert builds the destination in a build folder beside it, and the image's write
    builds in place there (no build folder inside a build folder, which a killed convert
    would leave under a name no later write recognises)."""
    from linumpy_gpu.cli import main
    from linumpy_gpu.io import files

    made: list[str] = []
    mkdir = os.mkdir

    def spy(path, *args, **kwargs):
        if os.fspath(path).endswith(files.STAGING_SUFFIX):
            made.append(os.path.basename(os.fspath(path)))
        return mkdir(path, *args, **kwargs)

    monkeypatch.setattr(os, "mkdir", spy)
    assert main(["convert", str(store), str(tmp_path / "dst.zarr"), "--no-progress"]) == 0
    assert len(set(made)) == 1 and made[0].startswith(".dst.zarr.")
    np.testing.assert_array_equal(lg.open_ome_zarr(tmp_path / "dst.zarr")[0][...], volume())
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["dst.zarr", store.name])


def test_a_store_set_aside_by_a_killed_swap_is_put_back(store, tmp_path):
    """Where folders cannot be exchanged in one step, a swap parks the old store under a
    hidden name first; a writer killed right then leaves no store at the path. The next
    write of the path puts the old store back instead of removing it as a leftover."""
    from linumpy_gpu.io import files

    dead = 2**22 + 12345  # above Linux's largest process id: no such process here
    build = f".{store.name}.{files._HOST}.{dead}-0123abcd.linumpy-gpu-partial"
    store.rename(tmp_path / f"{build}.old")
    lg.write_ome_zarr(tmp_path / build, volume(seed=3), levels=1)  # the new one, complete
    with pytest.raises(lg.StoreExistsError, match="put back"):
        lg.write_ome_zarr(store, volume(seed=4), levels=1)
    assert sorted(p.name for p in tmp_path.iterdir()) == [store.name]
    np.testing.assert_array_equal(lg.open_ome_zarr(store)[0][...], volume())
    img = lg.write_ome_zarr(store, volume(seed=4), levels=1, overwrite=True)
    np.testing.assert_array_equal(img[0][...], volume(seed=4))


def test_an_interrupted_write_of_this_process_leaves_nothing_for_the_next_to_trip_on(
    store, tmp_path, monkeypatch
):
    """Interrupted (Ctrl-C in a notebook), a write removes its build folder, but zarr's
    event loop may still be writing one of its files and make the folder again: the
    process lives on, yet the next write of the path removes that leftover."""
    from linumpy_gpu.io import files

    real_mkdir = os.mkdir

    def interrupted(path, *args, **kwargs):
        real_mkdir(path, *args, **kwargs)
        if os.fspath(path).endswith(files.STAGING_SUFFIX):
            raise KeyboardInterrupt

    monkeypatch.setattr(files.os, "mkdir", interrupted)
    with pytest.raises(KeyboardInterrupt):
        lg.write_ome_zarr(store, volume(seed=2), overwrite=True, levels=1)
    monkeypatch.setattr(files.os, "mkdir", real_mkdir)
    assert sorted(p.name for p in tmp_path.iterdir()) == [store.name]
    # what zarr's loop leaves once the block has unwound: the folder, made again
    left = tmp_path / f".{store.name}.{files._HOST}.{os.getpid()}-0123abcd{files.STAGING_SUFFIX}"
    left.mkdir()
    (left / "zarr.json").write_text("{}")
    img = lg.write_ome_zarr(store, volume(seed=3), overwrite=True, levels=1)
    np.testing.assert_array_equal(img[0][...], volume(seed=3))
    assert sorted(p.name for p in tmp_path.iterdir()) == [store.name]


def test_a_replaced_store_that_cannot_be_removed_is_named_in_a_warning(store, monkeypatch):
    from linumpy_gpu.io import files

    rmtree = files.shutil.rmtree
    monkeypatch.setattr(files.shutil, "rmtree", lambda path, ignore_errors=False: None)
    with pytest.warns(lg.LinumpyGpuWarning, match="could not be removed entirely") as info:
        lg.write_ome_zarr(store, volume(seed=2), overwrite=True, levels=1)
    (left,) = [p for p in store.parent.iterdir() if p != store]
    assert str(left) in str(info[0].message)
    np.testing.assert_array_equal(lg.open_ome_zarr(store)[0][...], volume(seed=2))
    # as the warning says: the next write of the store removes what is left
    monkeypatch.setattr(files.shutil, "rmtree", rmtree)
    lg.write_ome_zarr(store, volume(seed=3), overwrite=True, levels=1)
    assert [p for p in store.parent.iterdir() if p != store] == []
    np.testing.assert_array_equal(lg.open_ome_zarr(store)[0][...], volume(seed=3))


def test_build_folders_of_other_hosts_are_left_alone(store, tmp_path):
    """On a file system several hosts share, a process id is known only on its own host:
    another host's build folder is never taken for a dead writer's and removed."""
    from linumpy_gpu.io import files

    dead = 2**22 + 12345  # above Linux's largest process id: no such process here
    other_host = f".{store.name}.h00000000.{dead}-0123abcd.linumpy-gpu-partial"
    this_host = f".{store.name}.{files._HOST}.{dead}-0123abcd.linumpy-gpu-partial"
    older_version = f".{store.name}.{dead}-0123abcd.linumpy-gpu-partial"
    for name in (other_host, this_host, older_version):
        (tmp_path / name).mkdir()
    lg.write_ome_zarr(store, volume(seed=9), overwrite=True, chunks=(8, 16, 16), device="cpu")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([store.name, other_host])


def test_a_failed_write_names_the_destination_not_the_build_folder(tmp_path, monkeypatch):
    from linumpy_gpu.io import files

    def refuse(folder, name, blob):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(files.OpenFolder, "write", refuse)
    with pytest.raises(lg.ChunkWriteError) as info:
        lg.write_ome_zarr(tmp_path / "out.zarr", volume(), device="cpu")
    assert f"{tmp_path / 'out.zarr'}/0" in str(info.value)
    assert "linumpy-gpu-partial" not in str(info.value)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes whatever the permissions")
def test_a_read_only_store_is_not_replaced(store):
    before = snapshot(store)
    os.chmod(store, 0o555)
    try:
        with pytest.raises(lg.StorePermissionError, match="read-only"):
            lg.write_ome_zarr(store, volume(seed=9), overwrite=True, device="cpu")
    finally:
        os.chmod(store, 0o755)
    assert snapshot(store) == before


# -- URLs ---------------------------------------------------------------------------------


@pytest.mark.parametrize("url", ["http://127.0.0.1:9/x.ome.zarr", "https://example.org/x.zarr"])
def test_writing_to_http_is_refused_and_creates_no_local_folder(tmp_path, monkeypatch, url):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(lg.InvalidArgumentError, match="read-only"):
        lg.write_ome_zarr(url, volume(), device="cpu")
    assert os.listdir(tmp_path) == []


def test_memory_url_round_trip():
    url = f"memory://safety-{os.getpid()}.ome.zarr"
    img = lg.write_ome_zarr(url, volume(), levels=2, device="cpu")
    assert img.path == url
    again = lg.open_ome_zarr(url)
    np.testing.assert_array_equal(again[0][...], volume())
    with pytest.raises(lg.StoreExistsError):
        lg.write_ome_zarr(url, volume(seed=2), device="cpu")
    lg.write_ome_zarr(url, volume(seed=2), overwrite=True, device="cpu")
    np.testing.assert_array_equal(lg.open_ome_zarr(url)[0][...], volume(seed=2))


def test_memory_url_with_other_objects_is_not_replaced():
    import fsspec

    url = f"memory://not-a-store-{os.getpid()}"
    fs = fsspec.filesystem("memory")
    fs.pipe(url.split("://")[1] + "/notes.txt", b"keep")
    with pytest.raises(lg.StoreExistsError, match="not a zarr store"):
        lg.write_ome_zarr(url, volume(), overwrite=True, device="cpu")
    assert fs.cat(url.split("://")[1] + "/notes.txt") == b"keep"


def test_file_url_is_a_local_path(tmp_path):
    img = lg.write_ome_zarr(f"file://{tmp_path}/f.zarr", volume(), device="cpu")
    assert img.path == str(tmp_path / "f.zarr")
    assert (tmp_path / "f.zarr" / "zarr.json").is_file()


def test_file_url_with_localhost_is_the_local_path(tmp_path):
    img = lg.write_ome_zarr(f"file://localhost{tmp_path}/f.zarr", volume(), device="cpu")
    assert img.path == str(tmp_path / "f.zarr")
    assert lg.open_ome_zarr(f"FILE://LocalHost{tmp_path}/f.zarr").path == img.path
    from linumpy_gpu.io.stores import local_path

    assert local_path("file://LOCALHOST") == "/"


def test_a_file_url_naming_another_host_is_refused_not_written_here(tmp_path, monkeypatch):
    """file://server/share/x.zarr names a file on another machine: fsspec would read it
    as ./server/share/x.zarr, a folder the user never meant."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(lg.InvalidArgumentError, match="names the host 'server'"):
        lg.write_ome_zarr("file://server/share/x.zarr", volume(), device="cpu")
    with pytest.raises(lg.InvalidArgumentError, match="names the host 'server'"):
        lg.open_ome_zarr("file://server/share/x.zarr")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("path", "meant"),
    [("s3:/bucket/x.zarr", "s3://bucket/x.zarr"), ("file:/data/x.zarr", "file:///data/x.zarr")],
)
def test_a_url_with_one_slash_is_refused_not_written_to_a_local_folder(
    tmp_path, monkeypatch, path, meant
):
    """'s3:/bucket/x' is a mistyped URL, never a local folder named 's3:'."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(lg.InvalidArgumentError, match=f"did you mean '{meant}'"):
        lg.write_ome_zarr(path, volume(), device="cpu")
    with pytest.raises(lg.InvalidArgumentError, match="one slash"):
        lg.open_ome_zarr(path)
    assert list(tmp_path.iterdir()) == []
    img = lg.write_ome_zarr(f"./{path}", volume(), device="cpu")  # a folder so named
    assert img.path == str(tmp_path / path)


def test_unreachable_url_is_a_remote_store_error():
    with pytest.raises(lg.RemoteStoreError, match="127.0.0.1:9") as info:
        lg.open_ome_zarr("http://127.0.0.1:9/x.ome.zarr")
    assert isinstance(info.value, ConnectionError)
    assert info.value.__cause__ is not None


def test_s3_without_credentials_says_how_to_read_public_data(monkeypatch):
    pytest.importorskip("s3fs")
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    with pytest.raises(lg.RemoteStoreError, match="anon"):
        lg.open_ome_zarr("s3://linumpy-gpu-no-such-bucket/x.ome.zarr")


def test_missing_fsspec_backend_names_the_package(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_gcsfs(name, *args, **kwargs):
        if name.startswith("gcsfs"):
            raise ImportError("No module named 'gcsfs'", name="gcsfs")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_gcsfs)
    with pytest.raises(lg.MissingDependencyError, match="pip install gcsfs") as info:
        lg.open_ome_zarr("gs://bucket/x.ome.zarr")
    assert isinstance(info.value, ImportError)


def test_storage_options_with_a_local_path_are_refused(tmp_path, monkeypatch):
    """Options for an object store beside a path without a scheme are a URL missing its
    s3://: nothing is written locally."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(lg.InvalidArgumentError, match="local path"):
        lg.write_ome_zarr("bucket/img.zarr", volume(), storage_options={"anon": True})
    assert list(tmp_path.iterdir()) == []


def test_a_failed_write_in_place_says_the_destination_is_incomplete():
    import dask.array as da

    url = f"memory://failed-{os.getpid()}/img.zarr"
    lg.write_ome_zarr(url, volume(), device="cpu")

    def broken(block):
        raise RuntimeError("source went away")

    data = da.from_array(volume(seed=5), chunks=8).map_blocks(broken, dtype="u2")
    with pytest.raises(lg.WriteError, match="incomplete store"):
        lg.write_ome_zarr(url, data, overwrite=True, device="cpu")
    with pytest.raises(lg.IncompleteStoreError):
        lg.open_ome_zarr(url)
    # what the interrupted write left (arrays, no image yet) is replaced by the next one
    img = lg.write_ome_zarr(url, volume(seed=6), overwrite=True, device="cpu")
    np.testing.assert_array_equal(img[0][...], volume(seed=6))


def test_storage_options_must_be_a_dict():
    with pytest.raises(lg.InvalidArgumentError, match="storage_options"):
        lg.open_ome_zarr("memory://x.zarr", storage_options="anon")


# -- the demo ---------------------------------------------------------------------------


def test_demo_out_writes_a_new_subfolder_and_never_touches_other_files(tmp_path, capsys):
    (tmp_path / "results.csv").write_text("weeks of work")
    (tmp_path / "raw").mkdir()
    (tmp_path / "raw" / "scan.bin").write_bytes(b"\x00" * 100)
    before = snapshot(tmp_path)
    assert cli_main(["demo", "--out", str(tmp_path), "--device", "cpu"]) == 0
    after = snapshot(tmp_path)
    assert {k: v for k, v in after.items() if not k.startswith("sample.ome.zarr")} == before
    assert (tmp_path / "sample.ome.zarr" / "zarr.json").is_file()
    sample = snapshot(tmp_path / "sample.ome.zarr")
    # a second run refuses rather than replacing what is there
    assert cli_main(["demo", "--out", str(tmp_path), "--device", "cpu"]) == 2
    assert "exists" in capsys.readouterr().err
    assert snapshot(tmp_path / "sample.ome.zarr") == sample


def test_demo_with_a_bad_device_writes_nothing(tmp_path, capsys):
    assert cli_main(["demo", "--out", str(tmp_path), "--device", "GPU"]) == 2
    assert "device must be" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_demo_out_of_a_missing_folder_creates_it(tmp_path):
    out = tmp_path / "new" / "folder"
    assert cli_main(["demo", "--out", str(out), "--device", "cpu"]) == 0
    assert (out / "sample.ome.zarr" / "zarr.json").is_file()


# -- label names ------------------------------------------------------------------------


BAD_LABEL_NAMES = [
    "",
    ".",
    "..",
    "a/b",
    "a\\b",
    "../escape",
    ".hidden",
    "zarr.json",
    " cells",
    "cells ",
    "0",
    "1",
    "labels",
    "nul\x00",
    "tab\there",
    "del\x7f",  # DEL and the C1 control characters are control characters too
    "nel\x85",
    "csi\x9b",
    "%41",  # over HTTP the server reads it as 'A'
    "a#b",
    "q?r",
    None,
    7,
]


@pytest.mark.parametrize("name", BAD_LABEL_NAMES)
def test_bad_label_names_are_refused_and_touch_nothing(store, name):
    img = lg.open_ome_zarr(store)
    lg.write_labels(img, "cells", np.ones(img[0].shape, dtype="u1"))
    before = snapshot(store)
    with pytest.raises(lg.InvalidArgumentError, match="label name"):
        lg.write_labels(img, name, np.zeros(img[0].shape, dtype="u1"), overwrite=True)
    assert snapshot(store) == before


def test_overwriting_one_label_touches_that_label_only(store):
    img = lg.open_ome_zarr(store)
    shape = img[0].shape
    lg.write_labels(img, "cells", np.ones(shape, dtype="u1"))
    lg.write_labels(img, "nuclei", np.full(shape, 2, dtype="u1"))
    before = snapshot(store)
    label = lg.write_labels(img, "cells", np.full(shape, 3, dtype="u1"), overwrite=True)
    after = snapshot(store)
    changed = {k for k in set(before) | set(after) if before.get(k) != after.get(k)}
    assert changed and all(
        k.startswith("labels/cells/") or k == "labels/zarr.json" for k in changed
    )
    assert (label[0][...] == 3).all()
    assert sorted(lg.open_ome_zarr(store).labels) == ["cells", "nuclei"]
    assert (lg.open_ome_zarr(store).labels["nuclei"][0][...] == 2).all()


def test_label_writes_keep_the_labels_groups_other_attributes(store):
    img = lg.open_ome_zarr(store)
    lg.write_labels(img, "cells", np.ones(img[0].shape, dtype="u1"))
    group = zarr.open_group(store / "labels", mode="r+")
    group.attrs.update({"provenance": {"by": "a user"}})
    lg.write_labels(img, "nuclei", np.ones(img[0].shape, dtype="u1"))
    attributes = dict(zarr.open_group(store / "labels", mode="r").attrs)
    assert attributes["provenance"] == {"by": "a user"}
    assert sorted(lg.open_ome_zarr(store).labels) == ["cells", "nuclei"]


def test_concurrent_label_writes_are_all_listed(store):
    """Each writer reads, extends and writes back the labels list: none loses another's
    entry, and none fails on another creating the labels group."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    names = [f"L{i}" for i in range(8)]
    start = threading.Barrier(len(names))
    shape = lg.open_ome_zarr(store)[0].shape

    def write(name: str) -> None:
        start.wait()
        lg.write_labels(store, name, np.ones(shape, dtype="u1"))

    with ThreadPoolExecutor(len(names)) as pool:
        list(pool.map(write, names))
    assert sorted(lg.open_ome_zarr(store).labels) == names


def test_label_writes_through_a_replaced_images_handle_are_refused(store, tmp_path):
    stale = lg.open_ome_zarr(store)
    lg.write_ome_zarr(store, np.zeros((8, 16, 16), dtype="u2"), overwrite=True)
    with pytest.raises(lg.StoreError, match="replaced"):
        lg.write_labels(stale, "cells", np.ones(stale[0].shape, dtype="u1"))
    assert not (store / "labels").exists()


def test_destinations_the_file_system_refuses_are_typed_errors(tmp_path, store):
    data = np.zeros((4, 8, 8), dtype="u2")
    (tmp_path / "a_file").write_text("x")
    with pytest.raises(lg.StoreError, match="a_file"):
        lg.write_ome_zarr(tmp_path / "a_file" / "x.zarr", data)
    with pytest.raises(lg.InvalidArgumentError, match="NUL"):
        lg.write_ome_zarr(str(tmp_path / "a\0b.zarr"), data)
    with pytest.raises(lg.InvalidArgumentError, match="protocol"):
        lg.write_ome_zarr("no-such-protocol://bucket/x.zarr", data)
    img = lg.open_ome_zarr(store)
    (store / "labels").write_text("not a folder")
    with pytest.raises(lg.StoreError, match="labels"):
        lg.write_labels(img, "cells", np.ones(img[0].shape, dtype="u1"))
    assert (store / "labels").read_text() == "not a folder"


def test_store_objects_a_write_cannot_use_are_refused_untouched(tmp_path):
    data = np.zeros((4, 8, 8), dtype="u2")
    read_only = zarr.storage.LocalStore(tmp_path / "ro.zarr", read_only=True)
    with pytest.raises(lg.StorePermissionError, match="read-only"):
        lg.write_ome_zarr(read_only, data)
    assert not (tmp_path / "ro.zarr").exists()
    with pytest.raises(lg.StorePermissionError, match="read-only"):
        lg.write_ome_zarr(zarr.storage.MemoryStore(read_only=True), data)
    with pytest.raises(lg.UnsupportedWriteError, match="ZipStore"):
        lg.write_ome_zarr(zarr.storage.ZipStore(tmp_path / "x.zip", mode="w"), data)
    assert not (tmp_path / "x.zip").exists()


def test_zip_stores_label_writes_and_files_that_are_not_zips(tmp_path):
    import shutil

    lg.write_ome_zarr(tmp_path / "img.zarr", np.zeros((4, 8, 8), dtype="u2"))
    shutil.make_archive(str(tmp_path / "img"), "zip", tmp_path / "img.zarr")
    before = (tmp_path / "img.zip").read_bytes()
    image = lg.open_ome_zarr(zarr.storage.ZipStore(tmp_path / "img.zip", mode="r"))
    with pytest.raises(lg.UnsupportedWriteError, match="ZipStore"):
        lg.write_labels(image, "cells", np.ones((4, 8, 8), dtype="u1"))
    assert (tmp_path / "img.zip").read_bytes() == before
    (tmp_path / "not.zip").write_text("notes")
    with pytest.raises(lg.StoreError, match="not a zip file"):
        lg.open_ome_zarr(zarr.storage.ZipStore(tmp_path / "not.zip", mode="r"))


def test_dask_input_of_unknown_size_is_a_write_error(tmp_path):
    import dask.array as da

    data = da.from_array(np.zeros((8, 8, 8), dtype="u2"), chunks=4)
    unknown = data[data[:, 0, 0] >= 0]
    with pytest.raises(lg.WriteError, match="compute_chunk_sizes"):
        lg.write_ome_zarr(tmp_path / "u.zarr", unknown)
    assert not (tmp_path / "u.zarr").exists()


def test_existing_label_needs_overwrite(store):
    img = lg.open_ome_zarr(store)
    lg.write_labels(img, "cells", np.ones(img[0].shape, dtype="u1"))
    before = snapshot(store)
    with pytest.raises(lg.StoreExistsError):
        lg.write_labels(img, "cells", np.zeros(img[0].shape, dtype="u1"))
    assert snapshot(store) == before


# -- what we write opens and validates ----------------------------------------------------

VALID_WRITES = {
    "0.5-3d": dict(shape=(12, 20, 24), kwargs=dict(levels=3)),
    "0.4-3d": dict(shape=(12, 20, 24), kwargs=dict(levels=3, version="0.4")),
    "0.5-2d": dict(shape=(40, 30), kwargs=dict(levels=2)),
    "0.4-5d": dict(shape=(2, 3, 4, 16, 16), kwargs=dict(levels=2, version="0.4")),
    "0.5-czyx-channels": dict(
        shape=(2, 4, 16, 16),
        kwargs=dict(channels=[{"label": "a", "color": "FF0000"}, {"label": "b"}]),
    ),
    "0.5-sharded": dict(shape=(16, 32, 32), kwargs=dict(chunks=(8, 8, 8), shards=(16, 16, 16))),
    "0.5-units-translation": dict(
        shape=(8, 16, 16),
        kwargs=dict(units=["nanometer"] * 3, scale=(4, 2, 2), translation=(1.5, -3, 0), levels=2),
    ),
    "0.5-uncompressed-float": dict(shape=(8, 16, 16), kwargs=dict(compressor=None), dtype="f4"),
}


@pytest.mark.parametrize("case", sorted(VALID_WRITES))
def test_what_we_write_opens_again_and_validates_with_ome_zarr_models(tmp_path, case):
    spec = VALID_WRITES[case]
    data = volume(spec["shape"], dtype=spec.get("dtype", "u2"))
    path = tmp_path / "out.zarr"
    img = lg.write_ome_zarr(path, data, device="cpu", **spec["kwargs"])
    np.testing.assert_array_equal(lg.open_ome_zarr(path)[0][...], data)
    assert img.version == spec["kwargs"].get("version", "0.5")
    group = zarr.open_group(path, mode="r")
    if img.version == "0.5":
        from ome_zarr_models.v05.image import Image
    else:
        from ome_zarr_models.v04.image import Image
    Image.from_zarr(group)  # raises on anything the spec forbids


def test_dask_blocks_smaller_than_they_declare_are_refused(tmp_path):
    import dask.array as da

    declared = da.zeros((32, 16, 16), chunks=(16, 16, 16), dtype="u2")
    trimmed = declared.map_blocks(lambda b: b[: b.shape[0] // 2], dtype="u2")
    with pytest.raises(lg.WriteError, match="declares"):
        lg.write_ome_zarr(tmp_path / "t.zarr", trimmed, chunks=(16, 16, 16))
    assert not (tmp_path / "t.zarr").exists()


def test_level_factors_on_the_channel_axis_are_refused(tmp_path):
    data = np.zeros((4, 8, 16, 16), dtype="u2")
    with pytest.raises(lg.WriteError, match="channel or time"):
        lg.write_ome_zarr(tmp_path / "c.zarr", data, axes="czyx", levels=[(2, 2, 2, 2)])
    assert not (tmp_path / "c.zarr").exists()


def test_channels_the_image_cannot_hold_and_keys_not_written(tmp_path):
    data = np.zeros((8, 16, 16), dtype="u2")
    two = [{"label": "a"}, {"label": "b"}]
    with pytest.raises(lg.WriteError, match="without a channel axis"):
        lg.write_ome_zarr(tmp_path / "n.zarr", data, axes="zyx", channels=two)
    with pytest.warns(lg.MetadataWarning, match="inverted"):
        img = lg.write_ome_zarr(
            tmp_path / "k.zarr", data, axes="zyx", channels=[{"label": "a", "inverted": True}]
        )
    assert [c.label for c in img.channels] == ["a"]


@pytest.mark.parametrize("listed", ["..", ".", "a/../b", "a//b", "/"])
def test_metadata_paths_outside_their_group_are_invalid_metadata(tmp_path, listed):
    """A labels listing or a level path that leaves its group is invalid metadata, on
    open and in ``validate``, never zarr's own error."""
    from linumpy_gpu.cli import main

    path = tmp_path / "img.zarr"
    lg.write_ome_zarr(path, volume(), device="cpu")
    labels = zarr.open_group(path / "labels", mode="w", zarr_format=3)
    labels.attrs.put({"ome": {"version": "0.5", "labels": [listed]}})
    with pytest.raises(lg.InvalidMetadataError, match="labels"):
        _ = lg.open_ome_zarr(path).labels
    assert main(["validate", str(path)]) == 1
    root = zarr.open_group(path, mode="r+")
    attrs = root.attrs.asdict()
    attrs["ome"]["multiscales"][0]["datasets"][0]["path"] = listed
    root.attrs.put(attrs)
    with pytest.raises(lg.InvalidMetadataError, match="datasets"):
        lg.open_ome_zarr(path)


def test_long_destination_names_are_written(tmp_path):
    """The hidden build folder beside the destination is named within the file system's
    limit even when the destination's own name is near it."""
    target = tmp_path / ("b" * 240 + ".zarr")
    img = lg.write_ome_zarr(target, volume(), device="cpu")
    np.testing.assert_array_equal(img[0][...], volume())
    lg.write_ome_zarr(target, volume(seed=3), device="cpu", overwrite=True)
    np.testing.assert_array_equal(lg.open_ome_zarr(target)[0][...], volume(seed=3))
    assert os.listdir(tmp_path) == [target.name]


def test_a_destination_under_a_file_is_named_in_the_error(tmp_path):
    (tmp_path / "afile").write_text("notes")
    with pytest.raises(
        lg.StoreError, match="afile/x.zarr' cannot be created .* a file, not a folder"
    ):
        lg.write_ome_zarr(tmp_path / "afile" / "x.zarr", volume(), device="cpu")
    assert (tmp_path / "afile").read_text() == "notes"


def test_dot_dot_after_a_link_means_what_the_system_means(tmp_path):
    """'link/../x' is the folder beside the link's target (as the system and zarr-python
    resolve it), not beside the link: reads and overwrites go there, nowhere else."""
    (tmp_path / "data" / "sub").mkdir(parents=True)
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "link").symlink_to(tmp_path / "data" / "sub")
    lg.write_ome_zarr(tmp_path / "work" / "store.zarr", np.full((4, 8, 8), 11, "u1"), levels=1)
    lg.write_ome_zarr(tmp_path / "data" / "store.zarr", np.full((4, 8, 8), 22, "u1"), levels=1)
    spelled = str(tmp_path / "work" / "link" / ".." / "store.zarr")
    assert int(lg.open_ome_zarr(spelled)[0][0, 0, 0]) == 22
    lg.write_ome_zarr(spelled, np.full((4, 8, 8), 99, "u1"), levels=1, overwrite=True)
    assert int(lg.open_ome_zarr(tmp_path / "data" / "store.zarr")[0][0, 0, 0]) == 99
    assert int(lg.open_ome_zarr(tmp_path / "work" / "store.zarr")[0][0, 0, 0]) == 11


def test_a_label_image_reached_through_a_linked_folder_is_not_replaced(tmp_path):
    image = tmp_path / "img.zarr"
    lg.write_ome_zarr(image, volume(), levels=1, device="cpu")
    lg.write_labels(image, "cells", np.ones(volume().shape, "u1"))
    (tmp_path / "alias").symlink_to(image / "labels")
    before = snapshot(image)
    with pytest.raises(lg.StoreExistsError, match="lies inside the image"):
        lg.write_ome_zarr(tmp_path / "alias" / "cells", volume(), overwrite=True, device="cpu")
    assert snapshot(image) == before


def test_only_a_leading_tilde_slash_is_the_home_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    (tmp_path / "work" / "~nobody").mkdir(parents=True)
    monkeypatch.chdir(tmp_path / "work")
    lg.write_ome_zarr("~/a.zarr", volume(), levels=1, device="cpu")
    assert (tmp_path / "home" / "a.zarr" / "zarr.json").is_file()
    lg.write_ome_zarr("~nobody/b.zarr", volume(), levels=1, device="cpu")
    assert (tmp_path / "work" / "~nobody" / "b.zarr" / "zarr.json").is_file()


_REPLACER = """
import sys, numpy as np, linumpy_gpu as lg
for k in range(1, 41):
    lg.write_ome_zarr(sys.argv[1], np.full((32, 64, 64), k, "u2"), chunks=(8, 16, 16),
                      levels=1, overwrite=True)
"""


def test_reads_while_another_process_replaces_the_store_are_never_mixed(tmp_path):
    """Each read is the whole old image, the whole new one, or a StoreError (open again):
    never chunks of both."""
    path = tmp_path / "replaced.ome.zarr"
    lg.write_ome_zarr(path, np.zeros((32, 64, 64), "u2"), chunks=(8, 16, 16), levels=1)
    writer = subprocess.Popen([sys.executable, "-c", _REPLACER, str(path)])
    img = lg.open_ome_zarr(path)
    try:
        while writer.poll() is None:
            try:
                values = np.unique(img[0][...])
            except lg.StoreError:
                img = lg.open_ome_zarr(path)
                continue
            assert len(values) == 1, values
    finally:
        writer.kill()
        writer.wait()


def test_a_store_that_lands_while_another_is_built_is_replaced_or_refused(tmp_path, monkeypatch):
    """Two writers of one new path: the second finds the first's store where it found
    nothing (its rename onto it fails); overwrite=True replaces it, without it the write
    is refused."""
    import shutil

    target = tmp_path / "new.zarr"
    real_lexists = os.path.lexists
    calls = {"n": 0}

    def racing(path):  # every check of this write runs before the other store lands
        if os.fspath(path) == str(target) and calls["n"] < 2:
            calls["n"] += 1
            if calls["n"] == 2:
                monkeypatch.setattr(os.path, "lexists", real_lexists)
                lg.write_ome_zarr(target, volume(seed=1), device="cpu")
                monkeypatch.setattr(os.path, "lexists", racing)
            return False
        return real_lexists(path)

    monkeypatch.setattr(os.path, "lexists", racing)
    lg.write_ome_zarr(target, volume(seed=2), overwrite=True, device="cpu")
    np.testing.assert_array_equal(lg.open_ome_zarr(target)[0][...], volume(seed=2))
    shutil.rmtree(target)
    calls["n"] = 0
    with pytest.raises(lg.StoreExistsError, match="appeared while it was being written"):
        lg.write_ome_zarr(target, volume(seed=3), device="cpu")
    np.testing.assert_array_equal(lg.open_ome_zarr(target)[0][...], volume(seed=1))
    assert [p.name for p in tmp_path.iterdir()] == ["new.zarr"]


# -- what a replacement may take with it ----------------------------------------------------


@pytest.mark.parametrize("litter", [".DS_Store", "Thumbs.db", "._0", "@eaDir", ".nfs0000abcd"])
def test_file_managers_litter_does_not_block_a_replacement(store, litter):
    where = store / "0" / litter if litter == "._0" else store / litter
    if litter == "@eaDir":
        where.mkdir()
        (where / "thumb.jpg").write_bytes(b"\xff\xd8")
    else:
        where.write_bytes(b"\x00")
    img = lg.write_ome_zarr(store, volume(seed=2), overwrite=True, levels=1)
    np.testing.assert_array_equal(img[0][...], volume(seed=2))


@pytest.mark.parametrize("content", [b'{"project": "thesis"}', b'["a", "list"]', b"notes"])
def test_a_folder_whose_zarr_json_is_a_users_file_is_not_replaced(tmp_path, content):
    target = tmp_path / "proj"
    target.mkdir()
    (target / "zarr.json").write_bytes(content)
    with pytest.raises(lg.StoreExistsError, match="zarr.json"):
        lg.write_ome_zarr(target, volume(), levels=1, overwrite=True)
    assert (target / "zarr.json").read_bytes() == content


@pytest.mark.parametrize("folder", ["._backup", ".DS_Store", ".nfs0000abcd"])
def test_a_folder_named_like_litter_is_looked_into(store, folder):
    """Names that are litter for files say nothing of a folder's contents."""
    (store / folder).mkdir()
    (store / folder / "thesis.docx").write_bytes(b"chapter 1")
    with pytest.raises(lg.StoreExistsError, match="thesis.docx"):
        lg.write_ome_zarr(store, volume(seed=2), overwrite=True, levels=1)
    assert (store / folder / "thesis.docx").read_bytes() == b"chapter 1"


@pytest.mark.parametrize(
    "left",
    [
        "zarr.0123456789abcdef0123456789abcdef.partial",
        "labels/zarr.0123456789abcdef0123456789abcdef.partial",
        "0/zarr.json.0123456789abcdef0123456789abcdef.partial",
        "0/c/1/0/1.__lock",  # tensorstore writes each key through one
        "0/c.1.0.1.__lock",  # ... beside chunks of '.'-separated keys too
        ".nfs00000000a1b2c3d4",  # NFS's name for a file deleted while open
        "0/c/7",  # an empty folder holds no one's data
    ],
)
def test_what_an_interrupted_writer_leaves_does_not_block_a_replacement(store, left):
    # zarr-python's LocalStore writes zarr.json as zarr.<uuid4 hex>.partial, then renames
    # it: a write killed between the two leaves the temporary file
    (store / left).parent.mkdir(parents=True, exist_ok=True)
    if left.endswith("/7"):
        (store / left).mkdir()
    else:
        (store / left).write_text("{")
    img = lg.write_ome_zarr(store, volume(seed=2), overwrite=True, levels=1)
    np.testing.assert_array_equal(img[0][...], volume(seed=2))


@pytest.mark.parametrize(
    "hidden",
    [
        ".git/annex/objects/precious",
        ".datalad/config",
        "analysis.partial/results.csv",  # named like a temporary file, not one of ours
        "old_runs/run1.ome.zarr",  # an image in a plain folder inside the image
        "0/notes.txt",  # inside a level's array folder, among its chunks
        "0/.git/HEAD",
        "1/c/analysis.csv",
        "0/c/0/0/0.bak",
        "0/2024",  # names like a chunk key of another encoding, or another rank
        "0/c.1.0.0",
        "0/c/0/0/9/9",
        "0/c/\uff11/\uff12/\uff13",  # digits, but not ASCII ones: no chunk key
    ],
)
def test_user_data_in_a_store_blocks_a_replacement(store, tmp_path, hidden):
    """A DataLad or git-annex dataset's own files are data, hidden or not."""
    if hidden.endswith(".ome.zarr"):
        lg.write_ome_zarr(tmp_path / "run1.ome.zarr", volume(), levels=1)
        (store / hidden).parent.mkdir()
        (tmp_path / "run1.ome.zarr").rename(store / hidden)
    else:
        (store / hidden).parent.mkdir(parents=True, exist_ok=True)
        (store / hidden).write_text("weeks of work")
    before = snapshot(store)
    with pytest.raises(lg.StoreExistsError, match="not part of a zarr store|holds the image"):
        lg.write_ome_zarr(store, volume(seed=2), overwrite=True, levels=1)
    assert snapshot(store) == before


def test_folders_without_metadata_are_walked_not_refused(tmp_path):
    """Levels at nested paths (tensorstore writes ``s0/data`` and no group at ``s0``), and
    an empty folder a failed label write left: the image is still replaced."""
    path = tmp_path / "img.zarr"
    lg.write_ome_zarr(path, volume(), levels=1)
    (path / "0").rename(tmp_path / "level")
    (path / "s0").mkdir()
    (tmp_path / "level").rename(path / "s0" / "data")
    meta = json.loads((path / "zarr.json").read_text())
    meta["attributes"]["ome"]["multiscales"][0]["datasets"][0]["path"] = "s0/data"
    (path / "zarr.json").write_text(json.dumps(meta))
    (path / "labels").mkdir()
    img = lg.write_ome_zarr(path, volume(seed=2), overwrite=True, levels=1)
    np.testing.assert_array_equal(img[0][...], volume(seed=2))


def test_an_empty_folder_with_only_litter_is_written_into(tmp_path):
    target = tmp_path / "new.zarr"
    target.mkdir()
    (target / ".DS_Store").write_bytes(b"\x00")
    img = lg.write_ome_zarr(target, volume(), overwrite=True, levels=1)
    np.testing.assert_array_equal(img[0][...], volume())


def test_a_group_holding_a_v2_array_of_metadata_alone_is_not_replaced_on_an_object_store():
    """zarr v2 arrays may hold a .zarray and no .zattrs (zarr-python 2 writes them so)."""
    import fsspec

    url = f"memory://v2-array-{os.getpid()}/g.zarr"
    group = zarr.open_group(url, mode="w", zarr_format=2)
    group.create_array("raw", shape=(4,), dtype="u1", fill_value=3)
    fs = fsspec.filesystem("memory")
    key = url.split("://")[1]
    fs.rm(f"{key}/raw/.zattrs") if fs.exists(f"{key}/raw/.zattrs") else None
    with pytest.raises(lg.StoreExistsError, match="holds the zarr array"):
        lg.write_ome_zarr(url, volume(), overwrite=True, levels=1)
    assert zarr.open_array(f"{url}/raw", mode="r")[0] == 3
    fs.rm(key, recursive=True)


def test_a_new_remote_image_is_written_where_the_keys_above_it_cannot_be_read(monkeypatch):
    """Credentials may cover only the user's own prefix of a bucket: parents whose
    metadata cannot be read hold no image to refuse for."""
    from fsspec.implementations.memory import MemoryFileSystem

    reads: list[str] = []
    original = MemoryFileSystem.cat_file

    def cat_file(self, path, *args, **kwargs):
        reads.append(path)
        if "/users/me/" not in path:
            raise PermissionError(f"AccessDenied: {path}")
        return original(self, path, *args, **kwargs)

    monkeypatch.setattr(MemoryFileSystem, "cat_file", cat_file)
    url = f"memory://bucket-{os.getpid()}/users/me/project/img.ome.zarr"
    img = lg.write_ome_zarr(url, volume(), levels=1)
    np.testing.assert_array_equal(img[0][...], volume())
    assert [r for r in reads if "/users/me/" not in r]  # they were looked at, and refused


def test_a_parked_store_that_cannot_be_put_back_is_kept(store, tmp_path, monkeypatch):
    from linumpy_gpu.io import files

    dead = 2**22 + 12345
    parked = tmp_path / f".{store.name}.{files._HOST}.{dead}-0123abcd.linumpy-gpu-partial.old"
    store.rename(parked)

    def refuse(src, dst):
        raise OSError(39, "Directory not empty")  # another store landed there meanwhile

    monkeypatch.setattr(files.os, "rename", refuse)
    assert files.remove_stale_staging(str(tmp_path), store.name) is False
    monkeypatch.undo()
    np.testing.assert_array_equal(lg.open_ome_zarr(parked)[0][...], volume())


def test_a_killed_writers_partial_files_beside_unnested_chunk_keys_are_removed(tmp_path):
    """Chunk keys without folders (zarr v2 '.' keys): the array's own folder is cleared of
    a dead writer's temporary files by the next write, as nested chunk folders are."""
    from linumpy_gpu.io import files

    path = tmp_path / "v2.zarr"
    lg.write_ome_zarr(path, volume(), levels=1, version="0.4")
    dead = 2**22 + 12345
    partial = path / "0" / f".0.0.0.{files._HOST}.{dead}-0123abcd.partial"
    partial.write_bytes(b"half a chunk")
    img = lg.open_ome_zarr(path, mode="r+")
    img[0][0:4] = np.zeros((4, *volume().shape[1:]), volume().dtype)
    assert not partial.exists()


@pytest.mark.parametrize("relative", [True, False])
def test_a_local_store_object_is_written_by_its_folder(tmp_path, monkeypatch, relative):
    """A zarr LocalStore given as the destination: a relative root is the folder it names
    when given, and a new one is written without overwrite."""
    monkeypatch.chdir(tmp_path)
    root = "img.ome.zarr" if relative else str(tmp_path / "img.ome.zarr")
    img = lg.write_ome_zarr(zarr.storage.LocalStore(root), volume(), levels=1)
    np.testing.assert_array_equal(img[0][...], volume())
    again = lg.write_ome_zarr(zarr.storage.LocalStore(root), volume(seed=2), overwrite=True)
    np.testing.assert_array_equal(again[0][...], volume(seed=2))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["img.ome.zarr"]


def test_consolidated_metadata_that_cannot_be_refreshed_warns_and_keeps_the_image(
    tmp_path, monkeypatch
):
    from linumpy_gpu.io import files

    parent = tmp_path / "group.zarr"
    zarr.open_group(parent, mode="w", zarr_format=3)
    zarr.consolidate_metadata(parent)

    def refuse(path, document):
        raise PermissionError(13, "Permission denied")  # a group the user may not write

    monkeypatch.setattr(files, "_write_document", refuse)
    with pytest.warns(lg.LinumpyGpuWarning, match="could not be brought up to date"):
        img = lg.write_ome_zarr(parent / "new", volume(), levels=1)
    np.testing.assert_array_equal(img[0][...], volume())


def test_a_label_write_never_takes_a_lock_file_it_already_holds(tmp_path, monkeypatch):
    """Where locks cover a whole file (systems without byte-range locks), taking a lock
    file's lock again while holding it waits forever: a label write into a labels group
    with consolidated metadata of its own must take each lock once at a time."""
    from linumpy_gpu.io import files

    path = tmp_path / "img.ome.zarr"
    lg.write_ome_zarr(path, volume(), levels=1)
    lg.write_labels(path, "a", (volume() % 3).astype("u1"))
    zarr.consolidate_metadata(str(path / "labels"))
    held: list[str] = []
    original = files.UnitLocks.hold

    @contextlib.contextmanager
    def hold(self, units):
        assert self.path not in held, f"{self.path} taken again while held"
        held.append(self.path)
        try:
            with original(self, units):
                yield
        finally:
            held.remove(self.path)

    monkeypatch.setattr(files.UnitLocks, "hold", hold)
    label = lg.write_labels(path, "b", (volume() % 5).astype("u1"))
    np.testing.assert_array_equal(label[0][...], (volume() % 5).astype("u1"))
    listed = zarr.open_group(str(path / "labels"), mode="r")  # its consolidated copy
    assert {"a", "b"} <= set(listed.metadata.consolidated_metadata.metadata)


def test_an_image_s_own_axes_are_written_whatever_their_case(tmp_path):
    """Axis objects keep their names and types: an image with axes named Z, Y, X (NGFF
    names are free text) is copied and labelled as it is."""
    from linumpy_gpu.ngff import Axis

    axes = [Axis("Z", "space", "micrometer"), Axis("Y", "space"), Axis("X", "space")]
    img = lg.write_ome_zarr(tmp_path / "a.zarr", volume(), axes=axes, levels=1)
    copy = lg.write_ome_zarr(tmp_path / "b.zarr", img[0].read(), axes=img.axes, levels=1)
    assert copy.axis_names == ("Z", "Y", "X")
    lg.write_labels(copy, "cells", (volume() % 3).astype("u1"))
    with pytest.raises(lg.WriteError, match="lower case"):
        lg.write_ome_zarr(tmp_path / "c.zarr", volume(), axes="ZYX")


def test_consolidated_metadata_of_an_unexpected_form_warns_and_keeps_the_image(tmp_path):
    import json

    parent = tmp_path / "group.zarr"
    zarr.open_group(parent, mode="w", zarr_format=3)
    document = json.loads((parent / "zarr.json").read_text())
    document["consolidated_metadata"] = {"kind": "inline", "metadata": None}
    (parent / "zarr.json").write_text(json.dumps(document))
    with pytest.warns(lg.LinumpyGpuWarning, match="could not be brought up to date"):
        img = lg.write_ome_zarr(parent / "new", volume(), levels=1)
    np.testing.assert_array_equal(img[0][...], volume())


def test_user_objects_in_a_store_on_an_object_store_block_a_replacement():
    """On object stores as on disks: a user's object among the store's (not metadata,
    not a chunk of an array) is not deleted by a replacement."""
    import fsspec

    url = f"memory://foreign-{os.getpid()}/img.ome.zarr"
    lg.write_ome_zarr(url, volume(), levels=1)
    fs = fsspec.filesystem("memory")
    key = url.split("://")[1]
    fs.pipe(f"{key}/notes/scan_0001.tif", b"II*\x00weeks of work")
    with pytest.raises(lg.StoreExistsError, match="not part of a zarr store"):
        lg.write_ome_zarr(url, volume(seed=2), overwrite=True, levels=1)
    assert fs.cat(f"{key}/notes/scan_0001.tif") == b"II*\x00weeks of work"
    fs.rm(f"{key}/notes", recursive=True)
    img = lg.write_ome_zarr(url, volume(seed=2), overwrite=True, levels=1)
    np.testing.assert_array_equal(img[0][...], volume(seed=2))
    fs.rm(key, recursive=True)


def test_overwriting_the_current_folder_by_dot_returns_the_new_image(tmp_path, monkeypatch):
    path = tmp_path / "img.ome.zarr"
    lg.write_ome_zarr(path, np.zeros((8, 8, 8), np.uint16), levels=1)
    monkeypatch.chdir(path)
    img = lg.write_ome_zarr(".", np.full((8, 8, 8), 5, np.uint16), levels=1, overwrite=True)
    assert (img[0][...] == 5).all()
    # the folder the process runs in is the replaced one, removed: a relative path is now
    # refused by name, not with the file system's bare error
    with pytest.raises(lg.StoreNotFoundError, match="current folder"):
        lg.open_ome_zarr("img.ome.zarr")


def test_a_write_under_way_keeps_its_build_folder_whatever_path_spelling_another_uses(
    tmp_path,
):
    """Two writes of one destination in one process, one through a link: the second's
    clean-up of stale build folders must not take the first's for a leftover."""
    from linumpy_gpu.io import files

    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    with files.built_beside(str(tmp_path / "link" / "img.zarr"), overwrite=False) as staging:
        (tmp_path / "real" / os.path.basename(staging) / "zarr.json").write_text("{}")
        files.remove_stale_staging(str(tmp_path / "real"), "img.zarr")
        assert os.path.isdir(staging)
    assert (tmp_path / "real" / "img.zarr" / "zarr.json").is_file()
