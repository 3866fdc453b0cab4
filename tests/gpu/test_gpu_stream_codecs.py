"""Blosc on the GPU: stores as zarr-python and numcodecs write them (zarr v2 and v3, inner
lz4, lz4hc and zstd, every shuffle, type sizes 1 to 8, sharded) read equal to the data with
every chunk decoded by nvCOMP; other inner codecs read equal through the CPU Blosc."""

from __future__ import annotations

import numcodecs
import numpy as np
import pytest
from zarr.codecs import BloscCodec

import linumpy_gpu as lg
from tests.helpers.zarr_images import write_image_with_zarr

pytestmark = pytest.mark.gpu

SHAPE = (40, 96, 100)


@pytest.fixture(scope="module")
def cp():
    import cupy

    return cupy


def image(dtype: str, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    ramp = np.add.outer(np.arange(SHAPE[1]), np.arange(SHAPE[2])) * 3
    data = ramp[None] + rng.integers(0, 20, SHAPE)
    return data.astype(dtype)


class CountingCpu:
    """Stands in for the GPU backend's CPU decoder and counts the chunks it decodes."""

    def __init__(self, cpu):
        self.cpu = cpu
        self.chunks = 0

    def decode(self, chunks, fmt, array, *args, **kwargs):
        self.chunks += len(chunks)
        return self.cpu.decode(chunks, fmt, array, *args, **kwargs)

    def __getattr__(self, name):
        return getattr(self.cpu, name)


def gpu_reader(path):
    from linumpy_gpu.gpu.backend import GpuBackend

    backend = GpuBackend(host_threads=0)
    backend._cpu = CountingCpu(backend._cpu)
    return lg.open_ome_zarr(path, device=backend), backend._cpu


V2 = [
    ("lz4", numcodecs.Blosc.SHUFFLE, "u2", 0),
    ("lz4", numcodecs.Blosc.NOSHUFFLE, "u2", 0),
    ("lz4hc", numcodecs.Blosc.BITSHUFFLE, "u2", 0),
    ("zstd", numcodecs.Blosc.SHUFFLE, "u2", 0),
    ("zstd", numcodecs.Blosc.BITSHUFFLE, "f4", 0),
    ("lz4", numcodecs.Blosc.SHUFFLE, "u1", 0),
    ("lz4", numcodecs.Blosc.BITSHUFFLE, "u1", 0),
    ("lz4", numcodecs.Blosc.SHUFFLE, "f8", 0),
    ("zstd", numcodecs.Blosc.SHUFFLE, "u2", 3000),  # blocks with a leftover
    ("lz4", numcodecs.Blosc.SHUFFLE, "u2", 256),  # blocks too small to split
]


@pytest.mark.parametrize(("cname", "shuffle", "dtype", "blocksize"), V2)
def test_v2_blosc_reads_on_nvcomp(tmp_path, cp, cname, shuffle, dtype, blocksize):
    data = image(dtype)
    codec = numcodecs.Blosc(cname=cname, clevel=5, shuffle=shuffle, blocksize=blocksize)
    write_image_with_zarr(
        tmp_path / "a.zarr", data, zarr_format=2, chunks=(16, 32, 64), compressors=codec
    )
    img, cpu = gpu_reader(tmp_path / "a.zarr")
    got = img[0][...]
    assert isinstance(got, cp.ndarray)
    np.testing.assert_array_equal(got.get(), data)
    np.testing.assert_array_equal(img[0][3:29, 10:90, 7:93].get(), data[3:29, 10:90, 7:93])
    assert cpu.chunks == 0  # every chunk decoded by nvCOMP


@pytest.mark.parametrize("shards", [None, (32, 64, 100)])
@pytest.mark.parametrize("shuffle", ["shuffle", "bitshuffle", "noshuffle"])
def test_v3_blosc_reads_on_nvcomp(tmp_path, cp, shards, shuffle):
    data = image("u2", seed=1)
    codec = BloscCodec(cname="zstd", clevel=3, shuffle=shuffle, typesize=2)
    write_image_with_zarr(
        tmp_path / "a.zarr",
        data,
        zarr_format=3,
        chunks=(16, 32, 50),
        shards=shards,
        compressors=codec,
    )
    img, cpu = gpu_reader(tmp_path / "a.zarr")
    np.testing.assert_array_equal(img[0][...].get(), data)
    assert cpu.chunks == 0


def test_incompressible_chunks_stored_as_they_are_read_on_the_gpu(tmp_path, cp):
    rng = np.random.default_rng(3)
    data = rng.integers(0, 2**16, SHAPE, dtype=np.uint16)
    data[:20] = image("u2")[:20]  # half the chunks compress, half are stored as they are
    codec = numcodecs.Blosc(cname="lz4", shuffle=numcodecs.Blosc.SHUFFLE)
    write_image_with_zarr(
        tmp_path / "a.zarr", data, zarr_format=2, chunks=(10, 96, 100), compressors=codec
    )
    img, cpu = gpu_reader(tmp_path / "a.zarr")
    np.testing.assert_array_equal(img[0][...].get(), data)
    assert cpu.chunks == 0


@pytest.mark.parametrize("cname", ["blosclz", "zlib"])
def test_inner_codecs_nvcomp_lacks_read_through_the_cpu_blosc(tmp_path, cp, cname):
    data = image("u2", seed=2)
    codec = numcodecs.Blosc(cname=cname, shuffle=numcodecs.Blosc.SHUFFLE)
    write_image_with_zarr(
        tmp_path / "a.zarr", data, zarr_format=2, chunks=(16, 32, 64), compressors=codec
    )
    img, cpu = gpu_reader(tmp_path / "a.zarr")
    np.testing.assert_array_equal(img[0][...].get(), data)
    assert cpu.chunks == 3 * 3 * 2


def test_a_store_mixing_inner_codecs_reads_equal(tmp_path, cp):
    """Chunks rewritten with another inner codec (as an append by another tool would)."""
    import os

    data = image("u2", seed=4)
    lz4 = numcodecs.Blosc(cname="lz4", shuffle=numcodecs.Blosc.SHUFFLE)
    write_image_with_zarr(
        tmp_path / "a.zarr", data, zarr_format=2, chunks=(16, 32, 64), compressors=lz4
    )
    for key, sl in [("0.0.0", np.s_[:16, :32, :64]), ("1.2.1", np.s_[16:32, 64:96, 64:])]:
        block = np.zeros((16, 32, 64), "u2")
        part = data[sl]
        block[: part.shape[0], : part.shape[1], : part.shape[2]] = part
        other = numcodecs.Blosc(cname="zstd" if key == "0.0.0" else "blosclz", shuffle=2)
        with open(os.path.join(tmp_path, "a.zarr", "0", key), "wb") as f:
            f.write(other.encode(block))
    img, cpu = gpu_reader(tmp_path / "a.zarr")
    np.testing.assert_array_equal(img[0][...].get(), data)
    assert cpu.chunks == 1  # the blosclz chunk


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_numcodecs_lz4_reads_on_nvcomp(tmp_path, cp, zarr_format):
    data = image("u2", seed=5)
    if zarr_format == 2:
        codec = numcodecs.LZ4()
    else:
        from numcodecs.zarr3 import LZ4

        codec = LZ4()
    write_image_with_zarr(
        tmp_path / "a.zarr", data, zarr_format=zarr_format, chunks=(16, 32, 64), compressors=codec
    )
    img, cpu = gpu_reader(tmp_path / "a.zarr")
    np.testing.assert_array_equal(img[0][...].get(), data)
    np.testing.assert_array_equal(img[0][5:7, 3:50, 60:].get(), data[5:7, 3:50, 60:])
    assert cpu.chunks == 0


def test_ome_zarr_py_blosc_image_reads_on_nvcomp(tmp_path, cp):
    """ome-zarr-py's NGFF 0.4 pyramid with the Blosc compressor labs pass it."""
    pytest.importorskip("ome_zarr")
    import zarr
    from ome_zarr.format import FormatV04
    from ome_zarr.io import parse_url
    from ome_zarr.writer import write_image

    data = image("u2", seed=6)
    fmt = FormatV04()
    store = parse_url(str(tmp_path / "a.zarr"), mode="w", fmt=fmt).store
    root = zarr.group(store=store, zarr_format=2, overwrite=True)
    codec = numcodecs.Blosc(cname="zstd", clevel=5, shuffle=numcodecs.Blosc.SHUFFLE)
    write_image(
        image=data,
        group=root,
        axes="zyx",
        fmt=fmt,
        storage_options={"chunks": (16, 32, 64), "compressor": codec},
    )
    img, cpu = gpu_reader(tmp_path / "a.zarr")
    assert len(img.levels) > 1
    for i in range(len(img.levels)):
        expected = zarr.open_array(str(tmp_path / "a.zarr" / img.levels[i].path), mode="r")[...]
        np.testing.assert_array_equal(img[i][...].get(), expected)
    assert cpu.chunks == 0


@pytest.mark.parametrize("driver", ["zarr", "zarr3", "zarr3-sharded"])
def test_tensorstore_blosc_arrays_read_on_nvcomp(tmp_path, cp, driver):
    ts = pytest.importorskip("tensorstore")
    data = image("u2", seed=7)
    path = tmp_path / "a.zarr"
    if driver == "zarr":
        metadata = {
            "shape": list(SHAPE),
            "chunks": [16, 32, 64],
            "dtype": "<u2",
            "compressor": {"id": "blosc", "cname": "lz4", "clevel": 5, "shuffle": 2},
            "fill_value": 0,
        }
    else:
        blosc = {
            "name": "blosc",
            "configuration": {"cname": "zstd", "clevel": 3, "shuffle": "shuffle", "typesize": 2},
        }
        inner = [{"name": "bytes", "configuration": {"endian": "little"}}, blosc]
        if driver == "zarr3":
            grid, codecs = [16, 32, 64], inner
        else:
            grid = [32, 64, 100]
            codecs = [
                {
                    "name": "sharding_indexed",
                    "configuration": {
                        "chunk_shape": [16, 32, 50],
                        "codecs": inner,
                        "index_codecs": [
                            {"name": "bytes", "configuration": {"endian": "little"}},
                            {"name": "crc32c"},
                        ],
                    },
                }
            ]
        metadata = {
            "shape": list(SHAPE),
            "data_type": "uint16",
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": grid}},
            "codecs": codecs,
            "fill_value": 0,
        }
    spec = {
        "driver": driver.split("-")[0],
        "kvstore": {"driver": "file", "path": str(path / "0")},
        "metadata": metadata,
        "create": True,
    }
    ts.open(spec).result()[...] = data
    _add_ome_metadata(path, zarr_format=2 if driver == "zarr" else 3)
    img, cpu = gpu_reader(path)
    np.testing.assert_array_equal(img[0][...].get(), data)
    assert cpu.chunks == 0


def _add_ome_metadata(path, zarr_format):
    import json

    axes = [{"name": n, "type": "space", "unit": "micrometer"} for n in "zyx"]
    multiscale = {
        "axes": axes,
        "datasets": [
            {"path": "0", "coordinateTransformations": [{"type": "scale", "scale": [1.0] * 3}]}
        ],
    }
    if zarr_format == 2:
        (path / ".zgroup").write_text(json.dumps({"zarr_format": 2}))
        (path / ".zattrs").write_text(
            json.dumps({"multiscales": [{"version": "0.4", **multiscale}]})
        )
    else:
        group = {
            "zarr_format": 3,
            "node_type": "group",
            "attributes": {"ome": {"version": "0.5", "multiscales": [multiscale]}},
        }
        (path / "zarr.json").write_text(json.dumps(group))
