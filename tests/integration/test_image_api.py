"""The user-facing objects: levels, indexing, out=, repr, dask, device selection, errors."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import zarr

import linumpy_gpu as lg
from linumpy_gpu.sample import write_sample
from tests.conftest import gpu_available, to_numpy
from tests.helpers.terminal import stderr_on_terminal


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    path = tmp_path_factory.mktemp("img") / "sample.ome.zarr"
    write_sample(path)
    return path


def test_level_properties_and_repr(sample):
    img = lg.open_ome_zarr(sample)
    assert len(img) == 3 and img.version == "0.5" and img.name == "sample-oct"
    lv = img[0]
    z = zarr.open_array(str(sample / "0"), mode="r")
    assert lv.shape == z.shape and lv.dtype == z.dtype and lv.chunks == z.chunks
    assert lv.shards is None and lv.nbytes == z.nbytes
    assert lv.codecs == ("zstd(level=3, checksum=True)",)
    assert img.scale(1) == (7.0, 3.0, 3.0)
    assert img.translation(1)[1] == pytest.approx(100.75)
    text = repr(img)
    for expected in (
        "NGFF 0.5",
        "(96, 256, 256)",
        "(32, 64, 64)",
        "uint16",
        "zstd",
        "12.0 MiB",
        "(3.5, 1.5, 1.5)",
    ):
        assert expected in text
    assert "Level 0" in repr(lv)


def test_indexing_forms(sample, device, xp):
    img = lg.open_ome_zarr(sample, device=device)
    full = zarr.open_array(str(sample / "0"), mode="r")[...]
    for index in [
        5,
        -1,
        (slice(None), 3),
        (..., slice(10, 200, 7)),
        (slice(-5, None), Ellipsis, -2),
        (slice(90, 10, -11), slice(None), slice(None, None, -1)),
    ]:
        got = img[0][index]
        assert isinstance(got, xp.ndarray)
        np.testing.assert_array_equal(to_numpy(got), full[index])
    np.testing.assert_array_equal(np.asarray(img[1]), zarr.open_array(str(sample / "1"))[...])
    np.testing.assert_array_equal(to_numpy(img[0].read((slice(0, 4),))), full[:4])


@pytest.mark.parametrize(
    "index",
    [(0, 0, 0, 0), 500, -97, np.array([1, 2]), [1, 2], None, slice(0, 2, 0), 1.5, (..., ...)],
)
def test_bad_indices_raise_selection_error(sample, index):
    img = lg.open_ome_zarr(sample)
    with pytest.raises(lg.SelectionError):
        img[0][index]


def test_out_validation(sample):
    img = lg.open_ome_zarr(sample)
    with pytest.raises(lg.OutputMismatchError, match="shape"):
        img[0].read((slice(0, 2),), out=np.empty((3, 256, 256), dtype="u2"))
    with pytest.raises(lg.OutputMismatchError, match="dtype"):
        img[0].read((slice(0, 2),), out=np.empty((2, 256, 256), dtype="f4"))
    ro = np.empty((2, 256, 256), dtype="u2")
    ro.flags.writeable = False
    with pytest.raises(lg.OutputMismatchError, match="read-only"):
        img[0].read((slice(0, 2),), out=ro)


def test_to_dask_equals_direct_read(sample):
    img = lg.open_ome_zarr(sample)
    d = img[0].to_dask()
    assert d.chunksize == img[0].chunks
    sub = d[10:50, ::3, 100:]
    np.testing.assert_array_equal(sub.compute(), img[0][10:50, ::3, 100:])
    assert float(d.mean().compute()) == pytest.approx(float(img[0][:].mean()))


def test_to_dask_of_a_level_with_more_blocks_than_fit_in_memory_says_so(tmp_path):
    """A level whose metadata claims a shape of 2**40 per axis: a typed error (as read()
    gives), not dask's bare MemoryError while it lists the blocks."""
    import json

    lg.write_ome_zarr(tmp_path / "i.zarr", np.zeros((8, 16, 16), "u2"), levels=1)
    meta = json.loads((tmp_path / "i.zarr" / "0" / "zarr.json").read_text())
    meta["shape"] = [2**40] * 3
    (tmp_path / "i.zarr" / "0" / "zarr.json").write_text(json.dumps(meta))
    level = lg.open_ome_zarr(tmp_path / "i.zarr")[0]
    with pytest.raises(lg.HostMemoryError, match="larger chunks"):
        level.to_dask()


def test_progress_bar_read(sample, capsys):
    img = lg.open_ome_zarr(sample)
    np.testing.assert_array_equal(img[0].read(progress=True), img[0][:])


def _read_write_and_update(src, dst):
    """One of each call that can show a bar, with progress left to the setting."""
    img = lg.open_ome_zarr(src)
    full = img[0].read()
    tiles = img[0].read_regions([(slice(0, 32),) * 3, (slice(16, 48),) * 3])
    out = lg.write_ome_zarr(dst, full[:40], axes="zyx", levels=2, device="cpu")
    writable = lg.open_ome_zarr(dst, mode="r+")
    writable.update_pyramid((slice(0, 8),))
    return full, tiles, out


def test_progress_setting_is_quiet_off_a_terminal(sample, tmp_path, capfd):
    with lg.config.set(progress=True):
        full, tiles, _ = _read_write_and_update(sample, tmp_path / "out.ome.zarr")
    np.testing.assert_array_equal(tiles[1], full[16:48, 16:48, 16:48])
    captured = capfd.readouterr()
    assert captured.err == "" and captured.out == ""


def test_progress_setting_draws_bars_on_a_terminal(sample, tmp_path, monkeypatch):
    terminal = stderr_on_terminal(monkeypatch)
    with lg.config.set(progress=True):
        _read_write_and_update(sample, tmp_path / "out.ome.zarr")
    shown = terminal.getvalue()
    assert shown.count("reading sample-oct [0]") >= 2  # read and read_regions
    assert "writing out.ome.zarr" in shown
    # the pyramid update's bar ends full: its total counts what it writes
    assert any("updating" in part and "100%" in part for part in shown.split("\r"))


def test_progress_false_draws_nothing_even_on_a_terminal(sample, tmp_path, monkeypatch):
    terminal = stderr_on_terminal(monkeypatch)
    with lg.config.set(progress=True):
        img = lg.open_ome_zarr(sample)
        img[0].read(progress=False)
        img[0].read_regions([(slice(0, 8),) * 3], progress=False)
        dst = tmp_path / "o.zarr"
        lg.write_ome_zarr(dst, np.zeros((8, 8), "u1"), levels=2, device="cpu", progress=False)
        lg.open_ome_zarr(dst, mode="r+").update_pyramid(progress=False)
    assert terminal.getvalue() == ""


def test_missing_path_and_non_ome(tmp_path):
    with pytest.raises(lg.StoreNotFoundError):
        lg.open_ome_zarr(tmp_path / "nope.zarr")
    zarr.open_group(str(tmp_path / "plain.zarr"), mode="w")
    with pytest.raises(lg.NotOmeZarrError):
        lg.open_ome_zarr(tmp_path / "plain.zarr")


def test_bad_device_name(sample):
    with pytest.raises(ValueError, match="device"):
        lg.open_ome_zarr(sample, device="tpu")


@pytest.mark.skipif(gpu_available(), reason="checks the behaviour where no GPU stack is present")
def test_gpu_entry_point_without_gpu_names_what_is_missing(sample):
    with pytest.raises(lg.GpuUnavailableError) as info:
        lg.open_ome_zarr_gpu(sample)
    assert "cupy" in str(info.value) and 'pip install -e ".[cu13]"' in str(info.value)
    with pytest.warns(lg.DeviceFallbackWarning):
        img = lg.open_ome_zarr(sample, device="auto")
    assert img.device == "cpu" and isinstance(img[0][0], np.ndarray)


@pytest.mark.skipif(gpu_available(), reason="checks the behaviour where no GPU stack is present")
def test_gpu_objects_without_gpu_name_what_is_missing(sample):
    """The GPU module's objects say what is missing, as its functions do."""
    import importlib.util

    import linumpy_gpu.gpu as gpu

    with pytest.raises(lg.GpuUnavailableError, match="cupy"):
        lg.open_ome_zarr(sample, device=gpu.GpuBackend(memory="tight"))
    with pytest.raises(lg.GpuUnavailableError, match="cupy"):
        gpu.info()
    assert gpu.register_nvcomp_zstd() is False
    with pytest.raises(lg.GpuUnavailableError, match="cupy"):
        gpu.gpu_zstd_config()  # zarr would refuse every read under it
    if importlib.util.find_spec("kvikio") is None:
        with pytest.raises(lg.MissingDependencyError, match="kvikio"):
            gpu.GDSStore(sample)


@pytest.mark.skipif(gpu_available(), reason="checks the behaviour where no GPU stack is present")
@pytest.mark.parametrize("codec", ["NvcompZstdCodec", "NvcompBloscCodec"])
def test_gpu_codecs_used_without_gpu_name_what_is_missing(tmp_path, codec):
    """zarr makes codecs as it reads metadata, so the GPU codecs can be made anywhere; their
    first encode or decode says what is missing, not an import error from inside zarr."""
    import linumpy_gpu.gpu as gpu

    data = np.arange(100, dtype="u2").reshape(10, 10)
    path = str(tmp_path / "a.zarr")
    made = getattr(gpu, codec)()
    if codec == "NvcompZstdCodec":
        array = zarr.create_array(
            path, shape=(10, 10), chunks=(5, 5), dtype="u2", compressors=[made]
        )
        with pytest.raises(lg.GpuUnavailableError, match="cupy"):
            array[...] = data
    zarr.create_array(path, data=data, chunks=(5, 5), overwrite=True)
    chunk = zarr.open_array(path).store  # decode one stored chunk through the GPU codec
    from zarr.core.array_spec import ArrayConfig, ArraySpec
    from zarr.core.buffer import default_buffer_prototype
    from zarr.core.sync import sync

    raw = sync(chunk.get("c/0/0", default_buffer_prototype()))
    spec = ArraySpec(
        shape=(5, 5),
        dtype=zarr.open_array(path).metadata.data_type,
        fill_value=0,
        config=ArrayConfig.from_dict({}),
        prototype=default_buffer_prototype(),
    )
    with pytest.raises(lg.GpuUnavailableError, match="cupy"):
        sync(made.decode([(raw, spec)]))


def test_import_does_not_import_gpu_libraries():
    code = (
        "import sys, linumpy_gpu, linumpy_gpu.gpu; "
        "bad = [m for m in ('cupy', 'kvikio', 'nvidia.nvcomp') if m in sys.modules]; "
        "assert not bad, bad; print('ok')"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "ok"


def test_label_and_image_label_round_trip_via_zarr(tmp_path):
    # a 0.5 image with a labels group written with plain zarr-python
    root = zarr.open_group(str(tmp_path / "l.zarr"), mode="w", zarr_format=3)
    root.create_array("0", data=np.arange(64, dtype="u2").reshape(8, 8), chunks=(4, 4))
    axes = [{"name": "y", "type": "space"}, {"name": "x", "type": "space"}]
    ds = [{"path": "0", "coordinateTransformations": [{"type": "scale", "scale": [1, 1]}]}]
    root.attrs["ome"] = {"version": "0.5", "multiscales": [{"axes": axes, "datasets": ds}]}
    labels = root.create_group("labels")
    labels.attrs["ome"] = {"version": "0.5", "labels": ["seg"]}
    seg = labels.create_group("seg")
    seg.create_array("0", data=(np.arange(64) % 3).astype("u1").reshape(8, 8), chunks=(8, 8))
    seg.attrs["ome"] = {
        "version": "0.5",
        "multiscales": [{"axes": axes, "datasets": ds}],
        "image-label": {
            "colors": [{"label-value": 2, "rgba": [1, 2, 3, 4]}],
            "source": {"image": "../../"},
        },
    }
    img = lg.open_ome_zarr(tmp_path / "l.zarr")
    assert list(img.labels) == ["seg"]
    seg_img = img.labels["seg"]
    assert seg_img.image_label.colors[0].rgba == (1, 2, 3, 4)
    assert seg_img.image_label.source_image == "../../"
    np.testing.assert_array_equal(seg_img[0][:], (np.arange(64) % 3).reshape(8, 8))
    with pytest.raises(KeyError, match="seg"):
        img.labels["other"]


def test_read_regions_wants_a_list_of_regions(sample):
    level = lg.open_ome_zarr(sample)[0]
    for bad in [(slice(0, 2), slice(0, 3)), None, 5]:
        with pytest.raises(lg.InvalidArgumentError, match="list of regions"):
            level.read_regions(bad)
    for zero in ((8, 0, 8), 0):
        with pytest.raises(lg.InvalidArgumentError, match="chunks .* must be at least 1"):
            level.to_dask(chunks=zero)
    n = level.shape[0]
    for bad in [(-2, 5, 5), {0: -3}, ((n - 0.5, 0.5),) + tuple((m,) for m in level.shape[1:])]:
        with pytest.raises(lg.InvalidArgumentError, match="chunks"):
            level.to_dask(chunks=bad)


def test_read_regions_equals_separate_reads(sample, device):
    img = lg.open_ome_zarr(sample, device=device)
    full = zarr.open_array(str(sample / "0"), mode="r")[...]
    regions = [
        (slice(0, 40), slice(10, 100), slice(0, 64)),
        (slice(20, 60), slice(50, 140), slice(30, 90)),
        (5, slice(None), slice(None, None, 3)),
        (slice(90, 10, -7), 0),
    ]
    for got, region in zip(img[0].read_regions(regions), regions, strict=True):
        np.testing.assert_array_equal(to_numpy(got), full[region])


def _tiny_image(group, data, name="img"):
    group.create_array("0", data=data, chunks=(4, 5))
    axes = [
        {"name": "y", "type": "space", "unit": "micrometer"},
        {"name": "x", "type": "space", "unit": "micrometer"},
    ]
    ds = [{"path": "0", "coordinateTransformations": [{"type": "scale", "scale": [0.5, 0.25]}]}]
    group.attrs["ome"] = {
        "version": "0.5",
        "multiscales": [{"axes": axes, "datasets": ds, "name": name}],
    }


def test_bioformats2raw_layout_series(tmp_path):
    root = zarr.open_group(str(tmp_path / "bf.zarr"), mode="w", zarr_format=3)
    root.attrs["ome"] = {"version": "0.5", "bioformats2raw.layout": 3}
    ome = root.create_group("OME")
    ome.attrs["ome"] = {"version": "0.5", "series": ["0", "1"]}
    first, second = (
        np.arange(60, dtype="u2").reshape(6, 10),
        np.arange(60, 120, dtype="u2").reshape(6, 10),
    )
    _tiny_image(root.create_group("0"), first, "first")
    _tiny_image(root.create_group("1"), second, "second")
    series = lg.open_ome_zarr(tmp_path / "bf.zarr")
    assert isinstance(series, lg.SeriesCollection) and len(series) == 2
    assert series[1].name == "second" and series[1].scale(0) == (0.5, 0.25)
    np.testing.assert_array_equal(series[0][0][...], first)
    np.testing.assert_array_equal(series[1][0][2:5, ::3], second[2:5, ::3])


def test_any_zarr_store_is_read_through_zarrs_async_api():
    """A store that is not a local directory goes through zarr's store API (here memory)."""
    from linumpy_gpu.io.sources import ZarrStoreSource

    store = zarr.storage.MemoryStore()
    root = zarr.open_group(store=store, mode="w", zarr_format=3)
    data = (np.arange(24 * 30) % 97).astype("u2").reshape(24, 30)
    arr = root.create_array("0", shape=data.shape, dtype="u2", chunks=(4, 5), shards=(8, 10))
    arr[...] = data
    axes = [{"name": "y", "type": "space"}, {"name": "x", "type": "space"}]
    ds = [{"path": "0", "coordinateTransformations": [{"type": "scale", "scale": [1, 1]}]}]
    root.attrs["ome"] = {"version": "0.5", "multiscales": [{"axes": axes, "datasets": ds}]}
    img = lg.open_ome_zarr(store)
    assert isinstance(img[0]._reader.source, ZarrStoreSource)
    np.testing.assert_array_equal(img[0][...], data)
    np.testing.assert_array_equal(img[0][3:20:2, ::-4], data[3:20:2, ::-4])


def test_damaged_chunk_on_the_cpu_raises_or_fills(tmp_path):
    data = (np.arange(16 * 64 * 64) % 500).astype("u2").reshape(16, 64, 64)
    lg.write_ome_zarr(tmp_path / "d.zarr", data, axes="zyx", chunks=(8, 64, 64), device="cpu")
    chunk = tmp_path / "d.zarr" / "0" / "c" / "1" / "0" / "0"
    raw = bytearray(chunk.read_bytes())
    raw[len(raw) // 2] ^= 0x5A  # payload byte: the zstd content checksum catches it
    chunk.write_bytes(bytes(raw))
    img = lg.open_ome_zarr(tmp_path / "d.zarr")
    with pytest.raises(lg.ChunkDecodeError) as info:
        img[0][...]
    assert info.value.key.endswith("c/1/0/0") and "0" in info.value.array
    with pytest.warns(lg.DamagedChunkWarning, match="c/1/0/0"):
        got = img[0].read(on_damaged="fill")
    np.testing.assert_array_equal(got[:8], data[:8])  # the undamaged chunk is not lost
    assert (got[8:] == 0).all()
    np.testing.assert_array_equal(img[0][:8], data[:8])


def test_legacy_levels_take_their_scale_from_their_shape(tmp_path):
    """NGFF 0.1-0.3 levels carry no transformations: their voxel size follows from their
    shape, as viewers place them (and validate and convert see the same)."""
    root = zarr.open_group(str(tmp_path / "v03.zarr"), mode="w", zarr_format=2)
    root.create_array("0", shape=(2, 64, 63), dtype="u1", chunks=(1, 32, 32))[...] = 1
    root.create_array("1", shape=(2, 32, 32), dtype="u1", chunks=(1, 32, 32))[...] = 1
    root.create_array("2", shape=(2, 16, 16), dtype="u1", chunks=(1, 16, 16))[...] = 1
    root.attrs["multiscales"] = [
        {"version": "0.3", "axes": ["c", "y", "x"], "datasets": [{"path": p} for p in "012"]}
    ]
    img = lg.open_ome_zarr(tmp_path / "v03.zarr")
    assert [img.scale(i) for i in range(3)] == [(1, 1, 1), (1, 2, 2), (1, 4, 4)]
    assert img.translation(2) == (0, 0, 0)
    from linumpy_gpu.cli import main

    assert main(["validate", str(tmp_path / "v03.zarr")]) == 0


def test_dimension_names_that_are_not_the_axes_are_reported(tmp_path):
    root = zarr.open_group(str(tmp_path / "d.zarr"), mode="w", zarr_format=3)
    root.create_array("0", shape=(8, 16), dtype="u1", chunks=(8, 8), dimension_names=["x", "y"])
    axes = [{"name": "y", "type": "space"}, {"name": "x", "type": "space"}]
    ds = [{"path": "0", "coordinateTransformations": [{"type": "scale", "scale": [1, 1]}]}]
    root.attrs["ome"] = {"version": "0.5", "multiscales": [{"axes": axes, "datasets": ds}]}
    with pytest.warns(lg.MetadataWarning, match="dimension_names"):
        img = lg.open_ome_zarr(tmp_path / "d.zarr")
    assert img.axis_names == ("y", "x")
    from linumpy_gpu.cli import main

    assert main(["validate", str(tmp_path / "d.zarr")]) == 1


@pytest.mark.parametrize(("method", "shift"), [("mean", 0.5), ("nearest", 0.0), ("gaussian", 0.0)])
def test_level_translations_place_each_method_s_samples(tmp_path, method, shift):
    """A level's translation is where its values come from: a block's centre for a mean,
    the block's first voxel for nearest and gaussian sampling."""
    data = np.broadcast_to(np.arange(16, dtype="f4"), (4, 16, 16)).copy()  # value = x
    img = lg.write_ome_zarr(tmp_path / "t.zarr", data, levels=2, method=method, device="cpu")
    assert img.translation(1)[2] == pytest.approx(shift)
    assert img[1][0, 0, 1:4].tolist() == pytest.approx(
        [img.translation(1)[2] + img.scale(1)[2] * k for k in range(1, 4)]
    )


def test_codecs_of_levels_zarr_python_decodes_are_all_named(tmp_path):
    """Nested sharding (read through zarr-python) lists every codec, inner ones too."""
    from zarr.codecs import BytesCodec, GzipCodec, ShardingCodec

    root = zarr.open_group(tmp_path / "n.zarr", mode="w", zarr_format=3)
    inner = ShardingCodec(chunk_shape=(2, 2, 2), codecs=[BytesCodec(), GzipCodec()])
    root.create_array(
        "0",
        shape=(8, 8, 8),
        dtype="u2",
        chunks=(8, 8, 8),
        serializer=ShardingCodec(chunk_shape=(4, 4, 4), codecs=[inner]),
        compressors=None,
    )
    axes = [{"name": n, "type": "space"} for n in "zyx"]
    datasets = [{"path": "0", "coordinateTransformations": [{"type": "scale", "scale": [1] * 3}]}]
    root.attrs.put(
        {"ome": {"version": "0.5", "multiscales": [{"axes": axes, "datasets": datasets}]}}
    )
    codecs = lg.open_ome_zarr(tmp_path / "n.zarr")[0].codecs
    assert codecs == ("sharding(chunks=(4, 4, 4): sharding(chunks=(2, 2, 2): GzipCodec))",)


def test_settings_given_at_open_reach_label_images_and_plate_fields(tmp_path):
    image = tmp_path / "img.zarr"
    lg.write_ome_zarr(image, np.zeros((8, 16, 16), np.uint16), levels=1)
    lg.write_labels(image, "cells", np.zeros((8, 16, 16), np.uint8))
    img = lg.open_ome_zarr(image, settings={"io_threads": 3})
    assert img.labels["cells"][0]._reader.settings.io_threads == 3
    with lg.config.set(io_threads=5):
        opened_in_block = lg.open_ome_zarr(image)
    assert opened_in_block.labels["cells"][0]._reader.settings.io_threads == 5

    root = zarr.open_group(str(tmp_path / "plate.zarr"), mode="w", zarr_format=3)
    plate = {
        "rows": [{"name": "A"}],
        "columns": [{"name": "1"}],
        "wells": [{"path": "A/1", "rowIndex": 0, "columnIndex": 0}],
    }
    root.attrs.put({"ome": {"version": "0.5", "plate": plate}})
    well = root.create_group("A/1")
    well.attrs.put({"ome": {"version": "0.5", "well": {"images": [{"path": "0"}]}}})
    lg.write_ome_zarr(tmp_path / "plate.zarr" / "A" / "1" / "0", np.zeros((4, 8, 8), np.uint8))
    opened = lg.open_ome_zarr(tmp_path / "plate.zarr", settings={"io_threads": 3})
    assert opened.image("A", "1")[0]._reader.settings.io_threads == 3


def test_a_settings_block_around_opening_a_label_image_reaches_its_reads(tmp_path):
    image = tmp_path / "img.zarr"
    lg.write_ome_zarr(image, np.zeros((8, 16, 16), np.uint16), levels=1)
    lg.write_labels(image, "cells", np.zeros((8, 16, 16), np.uint8))
    img = lg.open_ome_zarr(image, settings={"io_threads": 3})
    with lg.config.set(io_threads=4, progress=True):
        cells = img.labels["cells"]
    assert (cells[0]._reader.settings.io_threads, cells[0]._reader.settings.progress) == (4, True)


def test_a_label_image_opened_in_a_settings_block_does_not_keep_them_after_it(tmp_path):
    image = tmp_path / "img.zarr"
    lg.write_ome_zarr(image, np.zeros((8, 16, 16), np.uint16), levels=1)
    lg.write_labels(image, "cells", np.zeros((8, 16, 16), np.uint8))
    img = lg.open_ome_zarr(image, settings={"io_threads": 3})
    with lg.config.set(io_threads=4):
        assert img.labels["cells"][0]._reader.settings.io_threads == 4
    assert img.labels["cells"][0]._reader.settings.io_threads == 3
