"""Stores written by other tools (zarr-python, ome-zarr, tensorstore), for interop tests."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numcodecs
import numpy as np
import zarr
from zarr.codecs import BloscCodec, BytesCodec, Crc32cCodec, GzipCodec, TransposeCodec, ZstdCodec

with warnings.catch_warnings():  # "not in the zarr v3 specification": the point here
    warnings.simplefilter("ignore")
    from zarr.codecs.numcodecs import CRC32C as NumcodecsCRC32C

    # numcodecs' checksum before the bytes (zarr's own crc32c codec puts it after them)
    CRC32C_FIRST = NumcodecsCRC32C(location="start")


def volume(shape=(23, 37, 41), dtype="u2", seed=0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        return rng.normal(100, 20, shape).astype(dtype)
    if dtype.kind == "b":
        return rng.random(shape) > 0.5
    info = np.iinfo(dtype)
    base = rng.integers(0, min(info.max, 4000), size=shape)
    return (base + np.arange(shape[-1]) % 7).astype(dtype)


# name -> create_array keyword arguments (zarr-python writer)
ZARR_VARIANTS = {
    "v3-zstd": dict(zarr_format=3, compressors=[ZstdCodec(level=3)]),
    "v3-zstd-checksum": dict(zarr_format=3, compressors=[ZstdCodec(level=-5, checksum=True)]),
    "v3-gzip": dict(zarr_format=3, compressors=[GzipCodec(level=5)]),
    "v3-blosc-lz4-shuffle": dict(
        zarr_format=3, compressors=[BloscCodec(cname="lz4", shuffle="shuffle")]
    ),
    "v3-blosc-zstd-bitshuffle": dict(
        zarr_format=3, compressors=[BloscCodec(cname="zstd", shuffle="bitshuffle")]
    ),
    "v3-raw-bigendian": dict(zarr_format=3, compressors=None, serializer=BytesCodec(endian="big")),
    "v3-transpose-crc32c": dict(
        zarr_format=3,
        filters=[TransposeCodec(order=(2, 0, 1))],
        compressors=[ZstdCodec(level=1), Crc32cCodec()],
    ),
    "v3-zstd-crc32c-first": dict(
        zarr_format=3,
        compressors=[ZstdCodec(level=3), CRC32C_FIRST],
    ),
    "v3-sharded-zstd": dict(zarr_format=3, shards=(16, 20, 14), compressors=[ZstdCodec(level=3)]),
    "v3-sharded-blosc-crc": dict(
        zarr_format=3,
        shards=(8, 20, 21),
        compressors=[BloscCodec(cname="lz4", shuffle="bitshuffle"), Crc32cCodec()],
    ),
    "v2-zstd-dot": dict(
        zarr_format=2,
        compressors=numcodecs.Zstd(level=3),
        chunk_key_encoding={"name": "v2", "separator": "."},
    ),
    "v2-zstd-slash": dict(
        zarr_format=2,
        compressors=numcodecs.Zstd(level=22),
        chunk_key_encoding={"name": "v2", "separator": "/"},
    ),
    "v2-blosc-lz4-shuffle": dict(zarr_format=2, compressors=numcodecs.Blosc("lz4", shuffle=1)),
    "v2-blosc-zstd-bitshuffle": dict(zarr_format=2, compressors=numcodecs.Blosc("zstd", shuffle=2)),
    "v2-gzip-fortran-bigendian": dict(zarr_format=2, compressors=numcodecs.GZip(5), order="F"),
    "v2-gzip-fortran": dict(zarr_format=2, compressors=numcodecs.GZip(5), order="F"),
    "v2-zlib": dict(zarr_format=2, compressors=numcodecs.Zlib(3)),
    "v2-lz4": dict(zarr_format=2, compressors=numcodecs.LZ4()),
    "v2-uncompressed": dict(zarr_format=2, compressors=None),
    "v2-crc32c-first": dict(zarr_format=2, compressors=numcodecs.CRC32C(location="start")),
}


def write_zarr_variant(
    path: Path,
    name: str,
    data: np.ndarray,
    chunks=(8, 10, 7),
    missing_fraction: float = 0.2,
    fill_value=7,
) -> zarr.Array:
    kwargs = dict(ZARR_VARIANTS[name])
    dtype = data.dtype
    if name.endswith("bigendian") and kwargs.get("zarr_format") == 2:
        dtype = dtype.newbyteorder(">")
    arr = zarr.create_array(
        str(path),
        shape=data.shape,
        chunks=chunks,
        dtype=dtype,
        fill_value=fill_value,
        overwrite=True,
        **kwargs,
    )
    arr[...] = data
    _drop_some_chunks(path, missing_fraction)
    return zarr.open_array(str(path), mode="r")


def _drop_some_chunks(path: Path, fraction: float) -> None:
    """Delete a deterministic subset of stored chunk objects: reads must use the fill value."""
    files = sorted(
        p for p in path.rglob("*") if p.is_file() and not p.name.startswith((".z", "zarr.json"))
    )
    rng = np.random.default_rng(1)
    for p in files:
        if rng.random() < fraction:
            p.unlink()


def write_ome_zarr_py(path: Path, data: np.ndarray, version: str):
    """An image (and a label image) written by ome-zarr-py."""
    from ome_zarr.format import FormatV04, FormatV05
    from ome_zarr.io import parse_url
    from ome_zarr.writer import write_image, write_labels

    fmt = FormatV04() if version == "0.4" else FormatV05()
    store = parse_url(str(path), mode="w", fmt=fmt).store
    root = zarr.group(store=store, zarr_format=2 if version == "0.4" else 3, overwrite=True)
    write_image(
        image=data, group=root, axes="czyx", fmt=fmt, storage_options=dict(chunks=(1, 8, 16, 16))
    )
    omero = {
        "channels": [
            {
                "label": "nuclei",
                "color": "0000FF",
                "active": True,
                "window": {"start": 10, "end": 900, "min": 0, "max": 4095},
            },
            {
                "label": "membrane",
                "color": "FF8000",
                "active": False,
                "window": {"start": 0, "end": 400, "min": 0, "max": 4095},
            },
        ]
    }
    if version == "0.5":
        attrs = dict(root.attrs)
        attrs["ome"] = {**attrs["ome"], "omero": omero}
        root.attrs.update(attrs)
    else:
        root.attrs["omero"] = omero
    labels = (data[0] % 5).astype("u4")
    write_labels(
        labels,
        root,
        name="cells",
        axes="zyx",
        fmt=fmt,
        label_metadata={
            "colors": [
                {"label-value": 1, "rgba": [255, 0, 0, 255]},
                {"label-value": 2, "rgba": [0, 255, 0, 128]},
            ],
            "properties": [{"label-value": 1, "class": "nucleus"}],
        },
    )
    return path


def write_tensorstore(path: Path, data: np.ndarray, sharded: bool):
    import tensorstore as ts

    codecs = [
        {"name": "bytes", "configuration": {"endian": "little"}},
        {"name": "zstd", "configuration": {"level": 5}},
    ]
    if sharded:
        chunk_shape, codecs = (
            [16, 20, 14],
            [
                {
                    "name": "sharding_indexed",
                    "configuration": {
                        "chunk_shape": [8, 10, 7],
                        "codecs": codecs,
                        "index_codecs": [
                            {"name": "bytes", "configuration": {"endian": "little"}},
                            {"name": "crc32c"},
                        ],
                        "index_location": "end",
                    },
                }
            ],
        )
    else:
        chunk_shape = [8, 10, 7]
    spec = {
        "driver": "zarr3",
        "kvstore": {"driver": "file", "path": str(path)},
        "metadata": {
            "shape": list(data.shape),
            "data_type": str(data.dtype) if data.dtype != np.uint16 else "uint16",
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": chunk_shape}},
            "codecs": codecs,
            "fill_value": 3,
        },
        "create": True,
        "delete_existing": True,
    }
    store = ts.open(spec).result()
    store[:, :, :] = data
    return zarr.open_array(str(path), mode="r")


def ngff_attrs(path: Path) -> dict:
    """The OME block of a group as the file says it (0.4 .zattrs or 0.5 zarr.json)."""
    if (path / "zarr.json").exists():
        return json.loads((path / "zarr.json").read_text())["attributes"]["ome"]
    return json.loads((path / ".zattrs").read_text())
