"""Write arrays as OME-Zarr images (NGFF 0.5 on zarr v3, or 0.4 on zarr v2) with a pyramid."""

from __future__ import annotations

import math
import os
import shutil
from collections.abc import Sequence
from typing import Any

import numpy as np

from .errors import LinumpyGpuError
from .ngff import build
from .ngff.model import Channel
from .pyramid import METHODS, array_module, downsample, pyramid_factors

SUPPORTED_DTYPES = frozenset(["b1", "i1", "i2", "i4", "i8", "u1", "u2", "u4", "u8", "f4", "f8"])


class WriteError(LinumpyGpuError, ValueError):
    """Input that cannot be written (checked before anything touches the disk)."""


class StoreExistsError(LinumpyGpuError, FileExistsError):
    """The destination exists and ``overwrite`` is False."""


def write_ome_zarr(
    path: str | os.PathLike[str],
    data: Any,
    *,
    axes: Sequence[str] | None = None,
    units: Sequence[str | None] | None = None,
    scale: Sequence[float] | None = None,
    translation: Sequence[float] | None = None,
    channels: Sequence[Channel | dict] | None = None,
    version: str = "0.5",
    chunks: Sequence[int] | None = None,
    shards: Sequence[int] | None = None,
    compressor: str | None = "zstd",
    compression_level: int = 3,
    checksum: bool = True,
    levels: int | Sequence[Sequence[int]] = 1,
    method: str = "mean",
    name: str | None = None,
    overwrite: bool = False,
    device: Any = "cpu",
) -> Any:
    """Write ``data`` (numpy or cupy, n-D) as an OME-Zarr multiscale image and open it.

    ``levels``: a number of levels (2x on spatial axes per level) or a list of per-level
    factors relative to the previous level. Every argument is checked before the first
    byte is written.
    """
    plan = _plan(
        path,
        data,
        axes,
        units,
        scale,
        translation,
        channels,
        version,
        chunks,
        shards,
        compressor,
        levels,
        method,
        overwrite,
    )
    import zarr

    target = os.path.abspath(os.fspath(path))
    if os.path.exists(target):
        shutil.rmtree(target)
    zarr_format = 3 if version == "0.5" else 2
    root = zarr.open_group(target, mode="w", zarr_format=zarr_format)
    current = data
    paths, scales, translations = [], [], []
    level_scale = list(plan["scale"])
    level_translation = list(plan["translation"])
    for i in range(plan["n_levels"]):
        if i:
            factors = plan["factors"][i - 1]
            current = downsample(current, factors, method)
            # Level i's voxel centre sits half a (new) voxel in from the previous level's.
            level_translation = [
                t + (f - 1) * s / 2
                for t, f, s in zip(level_translation, factors, level_scale, strict=True)
            ]
            level_scale = [s * f for s, f in zip(level_scale, factors, strict=True)]
        host = current if isinstance(current, np.ndarray) else current.get()
        level_chunks = tuple(min(c, n) for c, n in zip(plan["chunks"], host.shape, strict=True))
        level_shards = None
        if plan["shards"] is not None:
            level_shards = tuple(
                max(c, min(s, -(-n // c) * c))
                for s, c, n in zip(plan["shards"], level_chunks, host.shape, strict=True)
            )
        arr = root.create_array(
            str(i),
            shape=host.shape,
            dtype=host.dtype,
            chunks=level_chunks,
            shards=level_shards,
            fill_value=0,
            **_codec_kwargs(zarr_format, compressor, compression_level, checksum),
        )
        arr[...] = host
        paths.append(str(i))
        scales.append(level_scale)
        translations.append(level_translation)
    block: dict[str, Any] = {
        "multiscales": [
            build.multiscales_block(
                version=version,
                axes=plan["axes"],
                paths=paths,
                scales=scales,
                translations=translations,
                name=name,
                method=method if plan["n_levels"] > 1 else None,
            )
        ]
    }
    if plan["channels"]:
        block["omero"] = build.omero_block(plan["channels"])
    # Written last: until this lands the store does not open as an OME-Zarr image.
    root.attrs.update(build.wrap(version, block))
    from .image import open_ome_zarr

    return open_ome_zarr(target, device=device)


def _plan(
    path,
    data,
    axes,
    units,
    scale,
    translation,
    channels,
    version,
    chunks,
    shards,
    compressor,
    levels,
    method,
    overwrite,
) -> dict[str, Any]:
    try:
        array_module(data)
    except ImportError:
        raise WriteError(f"data must be a numpy or cupy array, got {type(data).__name__}") from None
    ndim = data.ndim
    dtype = np.dtype(data.dtype)
    if dtype.str[1:] not in SUPPORTED_DTYPES:
        raise WriteError(f"dtype {dtype} is not supported; use one of {sorted(SUPPORTED_DTYPES)}")
    if not 2 <= ndim <= 5:
        raise WriteError(f"OME-NGFF images have 2 to 5 dimensions, data has {ndim}")
    if version not in ("0.4", "0.5"):
        raise WriteError(f"version must be '0.4' or '0.5', got {version!r}")
    if axes is None:
        axes = "tczyx"[5 - ndim :]
    axes = list(axes)
    if len(axes) != ndim:
        raise WriteError(f"{len(axes)} axes {axes} for {ndim}-D data of shape {data.shape}")
    axis_objs = build.make_axes(axes, units)
    _check_len("scale", scale, ndim)
    _check_len("translation", translation, ndim)
    if scale is not None and any(not (s > 0 and math.isfinite(s)) for s in scale):
        raise WriteError(f"scale must be positive and finite, got {list(scale)}")
    if method not in METHODS:
        raise WriteError(f"method must be one of {METHODS}, got {method!r}")
    if compressor not in ("zstd", None):
        raise WriteError(f"compressor must be 'zstd' or None, got {compressor!r}")
    if isinstance(levels, int):
        if levels < 1:
            raise WriteError(f"levels must be >= 1, got {levels}")
        factors = pyramid_factors(data.shape, [a.type for a in axis_objs], levels)
    else:
        factors = [tuple(int(f) for f in fs) for fs in levels]
        for fs in factors:
            if len(fs) != ndim or any(f < 1 for f in fs):
                raise WriteError(f"each level's factors must be {ndim} integers >= 1, got {fs}")
    if chunks is None:
        chunks = _default_chunks(data.shape, dtype)
    _check_len("chunks", chunks, ndim)
    if any(c < 1 for c in chunks):
        raise WriteError(f"chunks must be positive, got {list(chunks)}")
    if shards is not None:
        if version != "0.5":
            raise WriteError("shards need zarr v3, i.e. version='0.5'")
        _check_len("shards", shards, ndim)
        if any(s % c for s, c in zip(shards, chunks, strict=True)):
            raise WriteError(f"shards {list(shards)} must be multiples of chunks {list(chunks)}")
    chans = []
    for ch in channels or []:
        chans.append(
            ch
            if isinstance(ch, Channel)
            else Channel(ch.get("label"), ch.get("color"), ch.get("window"), ch.get("active"))
        )
    if chans and "c" in axes and len(chans) != data.shape[axes.index("c")]:
        raise WriteError(
            f"{len(chans)} channels for a 'c' axis of length {data.shape[axes.index('c')]}"
        )
    target = os.path.abspath(os.fspath(path))
    if os.path.exists(target) and not overwrite:
        raise StoreExistsError(f"'{target}' exists; pass overwrite=True to replace it")
    return {
        "axes": axis_objs,
        "scale": tuple(float(s) for s in (scale or (1.0,) * ndim)),
        "translation": tuple(float(t) for t in (translation or (0.0,) * ndim)),
        "factors": factors,
        "n_levels": len(factors) + 1,
        "chunks": tuple(int(c) for c in chunks),
        "shards": tuple(int(s) for s in shards) if shards is not None else None,
        "channels": chans,
    }


def _check_len(name: str, value: Sequence[Any] | None, ndim: int) -> None:
    if value is not None and len(value) != ndim:
        raise WriteError(f"{name} has {len(value)} values for {ndim}-D data")


def _default_chunks(shape: Sequence[int], dtype: np.dtype) -> tuple[int, ...]:
    """About 1-4 MiB chunks: 128 along the last three axes, 1 along the others."""
    return tuple(min(n, 128) if i >= len(shape) - 3 else 1 for i, n in enumerate(shape))


def _codec_kwargs(zarr_format: int, compressor: str | None, level: int, checksum: bool) -> dict:
    if compressor is None:
        return {"compressors": None}
    if zarr_format == 3:
        from zarr.codecs import ZstdCodec

        return {"compressors": [ZstdCodec(level=level, checksum=checksum)]}
    import numcodecs

    return {"compressors": numcodecs.Zstd(level=level, checksum=checksum)}
