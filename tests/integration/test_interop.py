"""Stores written by other tools read back pixel-equal to zarr-python, metadata as the file says."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pytest
import zarr

import linumpy_gpu as lg
from tests.helpers.writers import (
    ngff_attrs,
    volume,
    write_ome_zarr_py,
)


@pytest.mark.parametrize("version", ["0.4", "0.5"])
def test_ome_zarr_py_writer(tmp_path, version):
    pytest.importorskip("ome_zarr")
    data = volume(shape=(2, 12, 40, 36))
    path = write_ome_zarr_py(tmp_path / "img.zarr", data, version)
    attrs = ngff_attrs(path)
    img = lg.open_ome_zarr(path)
    assert img.version == version
    ms = attrs["multiscales"][0]
    assert img.axis_names == tuple(a["name"] for a in ms["axes"])
    assert [a.type for a in img.axes] == [a.get("type") for a in ms["axes"]]
    assert len(img) == len(ms["datasets"])
    for i, ds in enumerate(ms["datasets"]):
        by_type = {t["type"]: t for t in ds["coordinateTransformations"]}
        assert img.scale(i) == tuple(by_type["scale"]["scale"])
        if "translation" in by_type:
            assert img.translation(i) == tuple(by_type["translation"]["translation"])
        expected = zarr.open_array(str(path / ds["path"]), mode="r")[...]
        np.testing.assert_array_equal(img[i].read(), expected)
    np.testing.assert_array_equal(img[0].read(), data)
    assert [c.label for c in img.channels] == ["nuclei", "membrane"]
    assert [c.color for c in img.channels] == ["0000FF", "FF8000"]
    assert img.channels[0].window == {"start": 10.0, "end": 900.0, "min": 0.0, "max": 4095.0}
    assert [c.active for c in img.channels] == [True, False]
    assert list(img.labels) == ["cells"]
    cells = img.labels["cells"]
    assert cells.image_label is not None
    colors = {c.label_value: c.rgba for c in cells.image_label.colors}
    assert colors == {1: (255, 0, 0, 255), 2: (0, 255, 0, 128)}
    assert cells.image_label.properties[0]["class"] == "nucleus"
    np.testing.assert_array_equal(cells[0].read(), (data[0] % 5).astype("u4"))


@pytest.mark.parametrize(
    ("version", "shards"), [("0.4", None), ("0.5", None), ("0.5", (8, 32, 32))]
)
def test_tensorstore_reads_what_we_write(tmp_path, version, shards):
    ts = pytest.importorskip("tensorstore")
    data = volume()
    img = lg.write_ome_zarr(
        tmp_path / "ours.zarr", data, chunks=(4, 16, 16), shards=shards, version=version, levels=2
    )
    driver = "zarr" if version == "0.4" else "zarr3"
    for level in range(2):
        spec = {
            "driver": driver,
            "kvstore": {"driver": "file", "path": str(tmp_path / "ours.zarr" / str(level))},
        }
        theirs = ts.open(spec, open=True).result().read().result()
        np.testing.assert_array_equal(theirs, img[level].read())


def test_zarr_v2_zstd_chunks_carry_checksums_without_saying_so(tmp_path):
    """zarr v2 metadata with a zstd "checksum" member is refused by tensorstore and zarrs:
    it is left out, while every frame still carries a content checksum."""
    img = lg.write_ome_zarr(tmp_path / "v2.zarr", volume(), version="0.4", levels=1)
    compressor = zarr.open_array(str(tmp_path / "v2.zarr" / "0"), mode="r").metadata.compressor
    assert compressor.get_config() in (
        {"id": "zstd", "level": 3},
        {"id": "zstd", "level": 3, "checksum": False},
    )
    assert "checksum" not in (tmp_path / "v2.zarr" / "0" / ".zarray").read_text()
    frames = [p for p in (tmp_path / "v2.zarr" / "0").iterdir() if not p.name.startswith(".")]
    assert frames
    for frame in frames:
        header = frame.read_bytes()[:5]
        assert header[:4] == b"\x28\xb5\x2f\xfd" and header[4] & 0x04  # Content_Checksum_flag
    writable = lg.open_ome_zarr(tmp_path / "v2.zarr", mode="r+")
    writable[0][0:2] = np.zeros((2, *img[0].shape[1:]), dtype=img[0].dtype)  # a region write
    reopened = lg.open_ome_zarr(tmp_path / "v2.zarr")
    for frame in frames:
        assert frame.read_bytes()[4] & 0x04
    assert not reopened[0][0:2].any()
    with pytest.raises(lg.WriteError, match="checksum=False"):
        lg.write_ome_zarr(tmp_path / "nock.zarr", volume(), version="0.4", checksum=False)


@pytest.mark.parametrize("version", ["0.4", "0.5"])
def test_label_images_added_to_a_store_with_consolidated_metadata(tmp_path, version):
    """ngff-zarr consolidates its stores' metadata: a label image we add is listed there
    too (zarr-python trusts that copy), and one another tool adds without consolidating
    again is still found."""
    nz = pytest.importorskip("ngff_zarr")
    from ome_zarr.writer import write_labels as ome_zarr_write_labels

    data = (np.arange(9 * 20 * 24) % 500).astype("u2").reshape(9, 20, 24)
    path = str(tmp_path / "consolidated.ome.zarr")
    multiscales = nz.to_multiscales(nz.to_ngff_image(data, dims=["z", "y", "x"]), scale_factors=[2])
    nz.to_ngff_zarr(path, multiscales, version=version)
    seg = (data % 3).astype("u1")
    label = lg.write_labels(path, "seg", seg)
    np.testing.assert_array_equal(label[0][...], seg)
    assert "seg" in zarr.open_group(path, mode="r")["labels"].group_keys()  # consolidated view
    ome_zarr_write_labels(
        seg + 1, zarr.open_group(path, mode="r+", use_consolidated=False), name="cells", axes="zyx"
    )
    labels = lg.open_ome_zarr(path).labels
    assert sorted(labels) == ["cells", "seg"]
    np.testing.assert_array_equal(labels["cells"][0][...], seg + 1)


@pytest.mark.parametrize("version", ["0.4", "0.5"])
def test_scales_and_translations_stored_in_arrays(tmp_path, version):
    """NGFF 0.4 and 0.5 let a level's scale or translation live in a zarr array named by
    'path': read from there, as ome-zarr-models reads it."""
    zarr_format = 2 if version == "0.4" else 3
    root = zarr.open_group(str(tmp_path / "p.zarr"), mode="w", zarr_format=zarr_format)
    data = (np.arange(16 * 20) % 300).astype("u2").reshape(16, 20)
    kwargs = {"dimension_names": ["y", "x"]} if zarr_format == 3 else {}
    root.create_array("0", data=data, chunks=(8, 8), **kwargs)
    root.create_array("scale0", data=np.array([0.5, 0.25]))
    root.create_array("shift0", data=np.array([10.0, 20.0]))
    multiscale = {
        "axes": [{"name": "y", "type": "space"}, {"name": "x", "type": "space"}],
        "datasets": [
            {
                "path": "0",
                "coordinateTransformations": [
                    {"type": "scale", "path": "scale0"},
                    {"type": "translation", "path": "shift0"},
                ],
            }
        ],
    }
    if version == "0.4":
        root.attrs.put({"multiscales": [{"version": "0.4", **multiscale}]})
    else:
        root.attrs.put({"ome": {"version": "0.5", "multiscales": [multiscale]}})
    img = lg.open_ome_zarr(tmp_path / "p.zarr")
    assert img.scale(0) == (0.5, 0.25) and img.translation(0) == (10.0, 20.0)
    np.testing.assert_array_equal(img[0][...], data)


def _old_v2_image(path, data, nested: bool, version: str = "0.2", skip_first: bool = False):
    """An image as zarr 2 writers left it before ``dimension_separator`` existed: a
    ``.zarray`` without the key, chunks in nested folders (NGFF 0.2's rule) or flat."""
    import json

    import numcodecs

    (path / "0").mkdir(parents=True)
    (path / ".zgroup").write_text(json.dumps({"zarr_format": 2}))
    ms: dict = {"version": version, "datasets": [{"path": "0"}]}
    if version == "0.4":
        kinds = {"t": "time", "c": "channel"}
        ms["axes"] = [{"name": n, "type": kinds.get(n, "space")} for n in "tczyx"]
        ms["datasets"][0]["coordinateTransformations"] = [{"type": "scale", "scale": [1] * 5}]
    (path / ".zattrs").write_text(json.dumps({"multiscales": [ms]}))
    chunks = (1, 1, 2, 3, 4)  # NGFF 0.1 and 0.2 images are 5-D (tczyx)
    zarray = {
        "zarr_format": 2,
        "shape": list(data.shape),
        "chunks": list(chunks),
        "dtype": data.dtype.str,
        "compressor": {"id": "zlib", "level": 1},
        "fill_value": 0,
        "filters": None,
        "order": "C",
    }
    (path / "0" / ".zarray").write_text(json.dumps(zarray))
    for index in np.ndindex(*(-(-n // c) for n, c in zip(data.shape, chunks, strict=True))):
        if skip_first and not any(index):
            continue  # all fill values: zarr writes no chunk for it
        block = np.zeros(chunks, data.dtype)
        part = data[tuple(slice(i * c, (i + 1) * c) for i, c in zip(index, chunks, strict=True))]
        block[tuple(slice(0, n) for n in part.shape)] = part
        name = "/".join(map(str, index)) if nested else ".".join(map(str, index))
        (path / "0" / name).parent.mkdir(parents=True, exist_ok=True)
        (path / "0" / name).write_bytes(numcodecs.Zlib(1).encode(block))
    return path


def test_old_v2_images_without_a_separator_read_their_nested_chunks(tmp_path):
    data = np.arange(4 * 6 * 7, dtype="u2").reshape(1, 1, 4, 6, 7) + 1
    nested = _old_v2_image(tmp_path / "nested.zarr", data, nested=True)
    with pytest.warns(lg.MetadataWarning, match="nested folders"):
        img = lg.open_ome_zarr(nested)
    np.testing.assert_array_equal(img[0].read(), data)
    np.testing.assert_array_equal(img[0].to_dask().compute(), data)
    data[..., :2, :3, :4] = 0  # the first chunk: fill values only
    for version, skip in (("0.1", False), ("0.2", False), ("0.2", True), ("0.4", True)):
        # flat chunks, whatever the version says, the first one written or not
        flat = _old_v2_image(
            tmp_path / f"flat{version}{skip}.zarr", data, False, version, skip_first=skip
        )
        np.testing.assert_array_equal(lg.open_ome_zarr(flat)[0].read(), data)
        np.testing.assert_array_equal(lg.open_ome_zarr(flat)[0].to_dask().compute(), data)
    nested = _old_v2_image(tmp_path / "nested-sparse.zarr", data, True, skip_first=True)
    with pytest.warns(lg.MetadataWarning, match="nested folders"):
        np.testing.assert_array_equal(lg.open_ome_zarr(nested)[0].read(), data)
    # a user's dated folder among flat chunks is no nested chunk
    (flat / "0" / "2024" / "12").mkdir(parents=True)
    (flat / "0" / "2024" / "12" / "notes.txt").write_text("mine")
    np.testing.assert_array_equal(lg.open_ome_zarr(flat)[0].read(), data)
    # a user's "2.0" among nested chunks is no flat key of this 5-D array
    (nested / "0" / "2.0").write_text("mine")
    with pytest.warns(lg.MetadataWarning, match="nested folders"):
        np.testing.assert_array_equal(lg.open_ome_zarr(nested)[0].read(), data)
    # chunks as links (a git-annex checkout) are chunks
    annexed = _old_v2_image(tmp_path / "annexed.zarr", data, True)
    for chunk in [p for p in (annexed / "0").rglob("*") if p.is_file() and p.name[0] != "."]:
        target = tmp_path / "annex" / "_".join(chunk.relative_to(annexed).parts)
        target.parent.mkdir(exist_ok=True)
        chunk.rename(target)
        chunk.symlink_to(target)
    with pytest.warns(lg.MetadataWarning, match="nested folders"):
        np.testing.assert_array_equal(lg.open_ome_zarr(annexed)[0].read(), data)
    (nested / "0" / "2.0").unlink()
    # read, and replaced as the store it is (its nested chunks are its own)
    img = lg.write_ome_zarr(nested, data[0, 0], overwrite=True, levels=1)
    np.testing.assert_array_equal(img[0].read(), data[0, 0])


@pytest.mark.parametrize("skip_first", [False, True, "corners"])
def test_old_v2_images_on_an_object_store_find_their_nested_chunks(skip_first):
    import fsspec

    data = np.arange(4 * 6 * 7, dtype="u2").reshape(1, 1, 4, 6, 7) + 1
    data[..., :2, :3, :4] = 0
    fs = fsspec.filesystem("memory")
    url = f"memory://old-nested-{skip_first}/img.zarr"
    with tempfile.TemporaryDirectory() as tmp:
        local = _old_v2_image(
            Path(tmp) / "img.zarr", data, nested=True, skip_first=bool(skip_first)
        )
        if skip_first == "corners":  # the last chunk empty too: the folder is listed
            data[..., 2:, 3:, 4:] = 0
            (local / "0" / "0" / "0" / "1" / "1" / "1").unlink()
        fs.put(str(local), url.removeprefix("memory:/"), recursive=True)
    with pytest.warns(lg.MetadataWarning, match="nested folders"):
        img = lg.open_ome_zarr(url)
    np.testing.assert_array_equal(img[0].read(), data)
    img = lg.write_ome_zarr(url, data[0, 0], overwrite=True, levels=1)
    np.testing.assert_array_equal(img[0].read(), data[0, 0])


def test_a_rectilinear_chunk_grid_is_refused_by_name(tmp_path):
    try:
        with zarr.config.set({"array.rectilinear_chunks": True}):
            root = zarr.open_group(tmp_path / "r.zarr", mode="w", zarr_format=3)
            array = root.create_array("0", shape=(10, 12), dtype="u2", chunks=[[3, 7], [12]])
    except (TypeError, ValueError) as exc:
        pytest.skip(f"this zarr-python writes no rectilinear grids ({exc})")
    array[...] = 1
    root.attrs["ome"] = {
        "version": "0.5",
        "multiscales": [
            {
                "axes": [{"name": "y", "type": "space"}, {"name": "x", "type": "space"}],
                "datasets": [
                    {"path": "0", "coordinateTransformations": [{"type": "scale", "scale": [1, 1]}]}
                ],
            }
        ],
    }
    enabled = zarr.config.set({"array.rectilinear_chunks": True})
    with enabled, pytest.raises(lg.InvalidMetadataError, match="regular chunk grid"):
        lg.open_ome_zarr(tmp_path / "r.zarr")
