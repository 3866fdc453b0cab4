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
from .pyramid import METHODS, downsample, pyramid_factors

SUPPORTED_DTYPES = frozenset(["b1", "i1", "i2", "i4", "i8", "u1", "u2", "u4", "u8", "f4", "f8"])


class WriteError(LinumpyGpuError, ValueError):
    """Input that cannot be written (checked before anything touches the disk)."""


class StoreExistsError(LinumpyGpuError, FileExistsError):
    """The destination exists and ``overwrite`` is False."""


INCOMPLETE_MARKER = "linumpy_gpu"


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
    device: Any = "auto",
    progress: bool = False,
    _extra_block: dict[str, Any] | None = None,
) -> Any:
    """Write ``data`` (numpy, cupy or dask, 2- to 5-D) as an OME-Zarr multiscale image and
    return it opened.

    ``levels``: a number of levels (2x on spatial axes per level) or a list of per-level
    factors relative to the previous level. ``method``: "mean" (intensities; partial edge
    blocks averaged over what they hold), "gaussian", "nearest" or "mode" (labels).
    ``device``: where the pyramid is computed and chunks are compressed: "auto" (the GPU
    for cupy input, else the CPU), "cpu", "gpu". Every argument is checked before the first
    byte is written. Chunk files are written under temporary names and renamed; the OME
    metadata is written last, so an interrupted write leaves a store that refuses to open
    (:class:`IncompleteStoreError`) rather than one that looks complete.
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

    from .device import resolve_backend

    is_dask = type(data).__module__.startswith("dask")
    on_gpu = hasattr(data, "__cuda_array_interface__") or (
        is_dask and hasattr(getattr(data, "_meta", None), "__cuda_array_interface__")
    )
    backend = resolve_backend(
        "gpu" if device == "auto" and on_gpu else "cpu" if device == "auto" else device
    )
    target = os.path.abspath(os.fspath(path))
    if os.path.exists(target):
        shutil.rmtree(target)
    zarr_format = 3 if version == "0.5" else 2
    root = zarr.open_group(target, mode="w", zarr_format=zarr_format)
    root.attrs.put({INCOMPLETE_MARKER: {"write_in_progress": True}})
    shapes = _level_shapes(data.shape, plan["factors"])
    scales, translations = _level_transforms(plan["scale"], plan["translation"], plan["factors"])
    bar = _progress_bar(progress, shapes, plan["chunks"], name or os.path.basename(target))
    written: list[str] = []
    try:
        arrays = []
        for i, shape in enumerate(shapes):
            level_chunks = tuple(min(c, n) for c, n in zip(plan["chunks"], shape, strict=True))
            level_shards = None
            if plan["shards"] is not None:
                level_shards = tuple(
                    max(c, min(s, -(-n // c) * c))
                    for s, c, n in zip(plan["shards"], level_chunks, shape, strict=True)
                )
            arrays.append(
                root.create_array(
                    str(i),
                    shape=shape,
                    dtype=data.dtype,
                    chunks=level_chunks,
                    shards=level_shards,
                    fill_value=0,
                    **_codec_kwargs(zarr_format, compressor, compression_level, checksum),
                    # NGFF 0.5 requires the axis names on every array
                    **(
                        {"dimension_names": [a.name for a in plan["axes"]]}
                        if zarr_format == 3
                        else {}
                    ),
                )
            )
        _write_pyramid(arrays, data, plan["factors"], method, backend, bar, written, is_dask)
    except Exception as exc:
        raise WriteError(
            f"writing '{target}' failed ({type(exc).__name__}: {exc}). On disk: levels "
            f"{written or 'none'} complete, the rest partial; the store is marked incomplete "
            "and will not open. Rewrite it with overwrite=True or delete it."
        ) from exc
    finally:
        if bar is not None:
            bar.close()
    block: dict[str, Any] = {
        "multiscales": [
            build.multiscales_block(
                version=version,
                axes=plan["axes"],
                paths=[str(i) for i in range(len(shapes))],
                scales=scales,
                translations=translations,
                name=name,
                method=method if len(shapes) > 1 else None,
            )
        ]
    }
    if plan["channels"]:
        block["omero"] = build.omero_block(plan["channels"])
    block.update(_extra_block or {})
    # Written last: until this lands the store does not open as an OME-Zarr image.
    root.attrs.put(build.wrap(version, block))
    from .image import open_ome_zarr

    return open_ome_zarr(target, device=backend)


def write_labels(
    image: Any,
    name: str,
    data: Any,
    *,
    colors: dict[int, Sequence[int]] | Sequence[dict] | None = None,
    properties: Sequence[dict] | None = None,
    method: str = "mode",
    chunks: Sequence[int] | None = None,
    overwrite: bool = False,
    device: Any = "auto",
) -> Any:
    """Write a label image ``name`` under ``image`` (a path or an opened image): integer
    data of level 0's shape, a pyramid matching the image's ("mode" or "nearest"), the
    ``image-label`` metadata (``colors`` as {value: (r, g, b, a)} or NGFF dicts,
    ``properties`` as NGFF dicts) and the ``labels`` group listing. Returns the label image."""
    import zarr

    from .image import MultiscaleImage, open_ome_zarr

    parent = image if isinstance(image, MultiscaleImage) else open_ome_zarr(image)
    dtype = np.dtype(data.dtype)
    if dtype.kind not in "iu":
        raise WriteError(f"label images need an integer dtype, got {dtype}")
    if tuple(data.shape) != parent[0].shape:
        raise WriteError(
            f"labels of shape {tuple(data.shape)} for an image of shape {parent[0].shape}"
        )
    if method not in ("mode", "nearest"):
        raise WriteError(f"label pyramids use 'mode' or 'nearest', not {method!r}")
    if not name or "/" in name:
        raise WriteError(f"label name must be a plain name, got {name!r}")
    color_list = _label_colors(colors)
    target = os.path.join(parent.path, "labels", name)
    if os.path.exists(target) and not overwrite:
        raise StoreExistsError(f"'{target}' exists; pass overwrite=True to replace it")
    factors = [
        tuple(max(1, round(a / b)) for a, b in zip(f.shape, c.shape, strict=True))
        for f, c in zip(parent.levels, parent.levels[1:], strict=False)
    ]
    props = [dict(p) for p in properties or []]
    if (
        color_list
        and props
        and {c["label-value"] for c in color_list} != {p.get("label-value") for p in props}
    ):
        raise WriteError("label colors and properties must describe the same label values")
    label_block: dict[str, Any] = {"image-label": {"source": {"image": "../../"}}}
    if color_list:
        label_block["image-label"]["colors"] = color_list
    if props:
        label_block["image-label"]["properties"] = props
    if parent.version == "0.4":
        label_block["image-label"]["version"] = "0.4"
    labels_group = zarr.open_group(
        os.path.join(parent.path, "labels"),
        mode="a",
        zarr_format=3 if parent.version == "0.5" else 2,
    )
    image_label = write_ome_zarr(
        target,
        data,
        axes=parent.axis_names,
        units=[a.unit for a in parent.axes],
        scale=parent.scale(0),
        translation=parent.translation(0),
        version=parent.version,
        chunks=chunks or parent[0].chunks,
        levels=factors if factors else 1,
        method=method,
        name=name,
        overwrite=True,
        device=device,
        _extra_block=label_block,
    )
    block, _ = __import__("linumpy_gpu.ngff", fromlist=["ome_block"]).ome_block(
        dict(labels_group.attrs), labels_group.metadata.zarr_format
    )
    names = [n for n in block.get("labels", []) if n != name] + [name]
    labels_group.attrs.put(build.wrap(parent.version, {"labels": names}))
    return image_label


def _label_colors(colors: Any) -> list[dict[str, Any]]:
    if colors is None:
        return []
    items = (
        [{"label-value": k, "rgba": list(v)} for k, v in colors.items()]
        if isinstance(colors, dict)
        else [dict(c) for c in colors]
    )
    for c in items:
        rgba = c.get("rgba")
        if rgba is not None and (
            len(rgba) != 4
            or not all(isinstance(v, int | np.integer) and 0 <= v <= 255 for v in rgba)
        ):
            raise WriteError(f"label color {c} needs rgba as four integers in 0..255")
        c["rgba"] = [int(v) for v in rgba] if rgba is not None else None
        c["label-value"] = int(c["label-value"])
    return items


def _level_shapes(shape: Sequence[int], factors: list[tuple[int, ...]]) -> list[tuple[int, ...]]:
    shapes = [tuple(int(n) for n in shape)]
    for f in factors:
        shapes.append(tuple(-(-n // k) for n, k in zip(shapes[-1], f, strict=True)))
    return shapes


def _level_transforms(scale, translation, factors):
    scales, translations = [list(scale)], [list(translation)]
    for f in factors:
        s, t = scales[-1], translations[-1]
        # a level's voxel centre sits half a (new) voxel in from the previous level's
        translations.append([tt + (k - 1) * ss / 2 for tt, k, ss in zip(t, f, s, strict=True)])
        scales.append([ss * k for ss, k in zip(s, f, strict=True)])
    return scales, translations


def _write_pyramid(arrays, data, factors, method, backend, bar, written, is_dask) -> None:
    from .engine.writer import ChunkedArrayWriter

    writers = [ChunkedArrayWriter(a, backend, name=str(a.store_path)) for a in arrays]
    if is_dask:
        _write_dask(writers[0], data, bar)
        written.append("0")
        for i, f in enumerate(factors):
            update_level(arrays[i], writers[i + 1], f, method, backend, bar=bar)
            written.append(str(i + 1))
        return
    current = backend.from_any(data)
    for i, writer in enumerate(writers):
        if i:
            current = downsample(current, factors[i - 1], method)
        writer.write((), current, progress=bar)
        written.append(str(i))


def _write_dask(writer: Any, data: Any, bar: Any) -> None:
    """Level 0 from a dask array, one storage-aligned block at a time."""
    unit = writer.layout.shard_shape or writer.layout.chunk_shape
    aligned = data.rechunk(
        tuple(max(u, (c[0] // u) * u) for u, c in zip(unit, data.chunks, strict=True))
    )
    for index in np.ndindex(*aligned.numblocks):
        block = aligned.blocks[index].compute()
        starts = [sum(c[:k]) for c, k in zip(aligned.chunks, index, strict=True)]
        region = tuple(slice(s, s + n) for s, n in zip(starts, block.shape, strict=True))
        writer.write(region, block, progress=bar)


def update_level(
    source: Any,
    writer: Any,
    factors: Sequence[int],
    method: str,
    backend: Any,
    region: Any = None,
    bar: Any = None,
    slab_bytes: int = 512 << 20,
) -> None:
    """Recompute ``writer``'s level from ``source`` (the next finer level) under ``region``
    (slices in ``source`` coordinates; None = all), in slabs along the first axis."""
    from .engine.reader import ChunkedArrayReader

    reader = ChunkedArrayReader(source, backend)
    shape = tuple(source.shape)
    if region is None:
        region = tuple(slice(0, n) for n in shape)
    lo = [r.start // f * f for r, f in zip(region, factors, strict=True)]
    hi = [min(-(-r.stop // f) * f, n) for r, f, n in zip(region, factors, shape, strict=True)]
    plane = math.prod(b - a for a, b in zip(lo[1:], hi[1:], strict=True)) * source.dtype.itemsize
    step = max(factors[0], (slab_bytes // max(plane, 1)) // factors[0] * factors[0])
    for z in range(lo[0], hi[0], step):
        src = (
            slice(z, min(z + step, hi[0])),
            *(slice(a, b) for a, b in zip(lo[1:], hi[1:], strict=True)),
        )
        reduced = downsample(reader.read(src), factors, method)
        dst = tuple(
            slice(s.start // f, s.start // f + n)
            for s, f, n in zip(src, factors, reduced.shape, strict=True)
        )
        writer.write(dst, reduced, progress=bar)


def _progress_bar(progress: bool, shapes, chunks, label: str) -> Any:
    if not progress:
        return None
    from tqdm.auto import tqdm

    total = sum(
        math.prod(-(-n // min(c, n)) for n, c in zip(s, chunks, strict=True)) for s in shapes
    )
    return tqdm(total=total, desc=f"writing {label}", unit="unit")


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
    if not all(hasattr(data, a) for a in ("shape", "dtype", "ndim")):
        raise WriteError(f"data must be a numpy, cupy or dask array, got {type(data).__name__}")
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
