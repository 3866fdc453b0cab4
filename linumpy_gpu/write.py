"""Write arrays as OME-Zarr images (NGFF 0.5 on zarr v3, or 0.4 on zarr v2) with a pyramid.

Every argument is checked, and the metadata the write will produce is built and validated,
before anything touches the disk. A local store is built in a hidden folder beside its
destination and swapped in once complete, so an existing store stays whole until its
replacement is, and a lazy array that reads from the store it replaces still finds its
source while it is written.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from linumpy_gpu import ngff
from linumpy_gpu.engine.pyramid import METHODS, downsample, pyramid_factors
from linumpy_gpu.errors import (
    InvalidArgumentError,
    InvalidMetadataError,
    LinumpyGpuError,
    StoreExistsError,
    WriteError,
)
from linumpy_gpu.io.files import built_beside, check_replaceable
from linumpy_gpu.io.stores import locate, translated_errors
from linumpy_gpu.ngff import build
from linumpy_gpu.ngff.model import Channel

SUPPORTED_DTYPES = frozenset(["b1", "i1", "i2", "i4", "i8", "u1", "u2", "u4", "u8", "f4", "f8"])
INCOMPLETE_MARKER = "linumpy_gpu"
ZSTD_LEVELS = range(-131072, 23)
LABEL_METHODS = ("mode", "nearest")
# Label names become folder names: plain names only.
_LABEL_NAME = re.compile(r"[^/\\\x00-\x1f]+")


@dataclass(frozen=True)
class _ImagePlan:
    """Everything a write needs, derived from the arguments and checked."""

    version: str
    dtype: np.dtype
    shapes: list[tuple[int, ...]]
    factors: list[tuple[int, ...]]
    chunks: tuple[int, ...]
    shards: tuple[int, ...] | None
    axis_names: list[str]
    codec_kwargs: dict[str, Any]
    attributes: dict[str, Any]  # the group's final attributes
    method: str

    @property
    def zarr_format(self) -> int:
        return 3 if self.version == "0.5" else 2


def write_ome_zarr(
    path: Any,
    data: Any,
    *,
    axes: Sequence[str] | str | None = None,
    units: Sequence[str | None] | None = None,
    scale: Sequence[float] | None = None,
    translation: Sequence[float] | None = None,
    channels: Sequence[Channel | dict[str, Any]] | None = None,
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
    storage_options: dict[str, Any] | None = None,
    _extra_block: dict[str, Any] | None = None,
) -> Any:
    """Write ``data`` (numpy, cupy or dask, 2- to 5-D) as an OME-Zarr multiscale image and
    return it opened.

    ``path``: a local path, an object-store URL (``s3://``, ``gs://``, ``memory://``, with
    ``storage_options`` for fsspec) or a zarr store. ``levels``: a number of levels (2x on
    spatial axes per level) or a list of per-level factors relative to the previous level.
    ``method``: "mean" (intensities; partial edge blocks averaged over what they hold),
    "gaussian", "nearest" or "mode" (labels). ``device``: where the pyramid is computed and
    chunks are compressed: "auto" (the GPU for cupy input, else the CPU), "cpu", "gpu".

    An existing store at ``path`` is replaced only with ``overwrite=True``, and only if it
    is a zarr store (or an empty folder): a local one is built beside it and swapped in when
    complete; a remote one is deleted once every check has passed, then written with its
    metadata last (an interrupted write leaves a store that refuses to open).
    """
    plan = _plan(
        data,
        axes=axes,
        units=units,
        scale=scale,
        translation=translation,
        channels=channels,
        version=version,
        chunks=chunks,
        shards=shards,
        compressor=compressor,
        compression_level=compression_level,
        checksum=checksum,
        levels=levels,
        method=method,
        name=name,
        extra_block=_extra_block,
        where=str(path),
    )
    if not isinstance(overwrite, bool):
        raise InvalidArgumentError(f"overwrite must be True or False, got {overwrite!r}")
    backend = _backend_for(data, device)
    location = locate(path, mode="w", storage_options=storage_options, must_exist=False)
    from linumpy_gpu.image import open_ome_zarr

    if location.local_root is not None:
        target = location.local_root
        _check_destination(target, overwrite)
        with built_beside(target, overwrite) as staging:
            _write_image(_local_group(staging, plan), data, plan, backend, progress, target)
        return open_ome_zarr(target, device=backend)
    root = _remote_group(location.store, "", plan, overwrite, location.where)
    _write_image(root, data, plan, backend, progress, location.where)
    if location.protocol is not None:
        return open_ome_zarr(path, device=backend, storage_options=storage_options)
    return open_ome_zarr(location.store, device=backend)


def write_labels(
    image: Any,
    name: str,
    data: Any,
    *,
    colors: dict[int, Sequence[int]] | Sequence[dict[str, Any]] | None = None,
    properties: Sequence[dict[str, Any]] | None = None,
    method: str = "mode",
    chunks: Sequence[int] | None = None,
    overwrite: bool = False,
    device: Any = "auto",
) -> Any:
    """Write a label image ``name`` under ``image`` (a path or an opened image): integer
    data of level 0's shape, a pyramid matching the image's ("mode" or "nearest"), the
    ``image-label`` metadata (``colors`` as {value: (r, g, b, a)} or NGFF dicts,
    ``properties`` as NGFF dicts) and the ``labels`` group listing. Returns the label image.

    Replacing a label image (``overwrite=True``) touches that label image only."""
    import zarr

    from linumpy_gpu.image import MultiscaleImage, open_ome_zarr

    parent = image if isinstance(image, MultiscaleImage) else open_ome_zarr(image)
    _check_label_name(name, parent)
    if not all(hasattr(data, a) for a in ("shape", "dtype", "ndim")):
        raise WriteError(
            f"label data must be a numpy, cupy or dask array, got {type(data).__name__}"
        )
    dtype = np.dtype(data.dtype)
    if dtype.kind not in "iu":
        raise WriteError(f"label images need an integer dtype, got {dtype}")
    if tuple(data.shape) != parent[0].shape:
        raise WriteError(
            f"labels of shape {tuple(data.shape)} for an image of shape {parent[0].shape}"
        )
    if method not in LABEL_METHODS:
        raise WriteError(f"label pyramids use 'mode' or 'nearest', not {method!r}")
    color_list = _label_colors(colors)
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
    factors = [
        tuple(max(1, round(a / b)) for a, b in zip(f.shape, c.shape, strict=True))
        for f, c in zip(parent.levels, parent.levels[1:], strict=False)
    ]
    plan = _plan(
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
        extra_block=label_block,
        where=f"{parent.path}/labels/{name}",
    )
    if not isinstance(overwrite, bool):
        raise InvalidArgumentError(f"overwrite must be True or False, got {overwrite!r}")
    backend = _backend_for(data, device)
    zarr_format = 3 if parent.version == "0.5" else 2
    store, prefix = parent.group.store, parent.group.path
    labels_path = f"{prefix}/labels" if prefix else "labels"
    root = getattr(store, "root", None)
    where = f"{parent.path}/labels/{name}"
    if root is not None:
        store = zarr.storage.LocalStore(root)  # writable whatever mode the image was opened in
        target = os.path.join(os.fspath(root), *labels_path.split("/"), name)
        _check_destination(target, overwrite)
        with built_beside(target, overwrite) as staging:
            _write_image(_local_group(staging, plan), data, plan, backend, False, target)
    else:
        if getattr(store, "read_only", False):
            store = store.with_read_only(False)
        label_root = _remote_group(store, f"{labels_path}/{name}", plan, overwrite, where)
        _write_image(label_root, data, plan, backend, False, where)
    with translated_errors(f"{parent.path}/labels"):
        labels_group = zarr.open_group(
            store=store, path=labels_path, mode="a", zarr_format=zarr_format
        )
        block, _ = ngff.ome_block(dict(labels_group.attrs), labels_group.metadata.zarr_format)
        names = [n for n in block.get("labels", []) if n != name] + [name]
        labels_group.attrs.put(build.wrap(parent.version, {"labels": names}))
    with translated_errors(parent.path):
        fresh = zarr.open_group(store=store, path=prefix, mode="r")
    return open_ome_zarr(fresh, device=backend).labels[name]


def _check_label_name(name: Any, parent: Any) -> None:
    """A label name is one folder name: not empty, no separators, not '.' or '..', not a
    hidden or zarr metadata name, and not the path of one of the image's levels."""
    if not isinstance(name, str) or not _LABEL_NAME.fullmatch(name or ""):
        raise InvalidArgumentError(
            f"label name must be a plain folder name (no '/', '\\\\' or control characters), "
            f"got {name!r}"
        )
    if name in (".", "..") or name.startswith(".") or name == "zarr.json" or name != name.strip():
        raise InvalidArgumentError(
            f"label name {name!r} is not allowed: it must not start with '.', be 'zarr.json' "
            "or have leading or trailing spaces"
        )
    if name in {lv.path for lv in parent.levels} or name == "labels":
        raise InvalidArgumentError(
            f"label name {name!r} is also the path of a level or group of '{parent.path}'; "
            "choose another name"
        )


def _check_destination(target: str, overwrite: bool) -> None:
    if os.path.lexists(target):
        if not overwrite:
            raise StoreExistsError(f"'{target}' exists; pass overwrite=True to replace it")
        check_replaceable(target)


def _local_group(folder: str, plan: _ImagePlan) -> Any:
    import zarr

    store = zarr.storage.LocalStore(folder)
    return zarr.open_group(store=store, mode="w", zarr_format=plan.zarr_format)


def _remote_group(store: Any, path: str, plan: _ImagePlan, overwrite: bool, where: str) -> Any:
    """The group to write into at ``path`` of a store we cannot build beside; an existing
    zarr group there is deleted (``overwrite``) only now that every check has passed."""
    import zarr

    with translated_errors(where):
        existing = _existing_node(store, path)
        if existing == "other":
            raise StoreExistsError(
                f"'{where}' holds objects that are not a zarr store; refusing to replace them"
            )
        if existing == "zarr" and not overwrite:
            raise StoreExistsError(f"'{where}' exists; pass overwrite=True to replace it")
        return zarr.open_group(store=store, path=path, mode="w", zarr_format=plan.zarr_format)


def _existing_node(store: Any, path: str) -> str | None:
    """'zarr' where zarr metadata sits at ``path``, 'other' where other objects do, else
    None."""
    from zarr.core.sync import sync

    prefix = f"{path}/" if path else ""

    async def look() -> str | None:
        for marker in ("zarr.json", ".zgroup", ".zattrs", ".zarray"):
            if await store.exists(prefix + marker):
                return "zarr"
        async for _ in store.list_dir(path):
            return "other"
        return None

    return sync(look())


def _backend_for(data: Any, device: Any) -> Any:
    from linumpy_gpu.backends import resolve_backend

    is_dask = type(data).__module__.startswith("dask")
    on_gpu = hasattr(data, "__cuda_array_interface__") or (
        is_dask and hasattr(getattr(data, "_meta", None), "__cuda_array_interface__")
    )
    if isinstance(device, str) and device == "auto":
        device = "gpu" if on_gpu else "cpu"
    return resolve_backend(device)


def _write_image(
    root: Any, data: Any, plan: _ImagePlan, backend: Any, progress: bool, where: str
) -> None:
    """Every level of ``data`` into the group ``root``, then its metadata (last: until it
    lands, the group does not open as an OME-Zarr image)."""
    root.attrs.put({INCOMPLETE_MARKER: {"write_in_progress": True}})
    bar = _progress_bar(progress, plan, os.path.basename(where))
    written: list[str] = []
    try:
        arrays = [_create_level(root, i, shape, plan) for i, shape in enumerate(plan.shapes)]
        is_dask = type(data).__module__.startswith("dask")
        _write_pyramid(arrays, data, plan.factors, plan.method, backend, bar, written, is_dask)
    except LinumpyGpuError:
        raise
    except Exception as exc:
        raise WriteError(
            f"writing '{where}' failed ({type(exc).__name__}: {exc}); levels "
            f"{written or 'none'} were complete. Nothing replaced the destination."
        ) from exc
    finally:
        if bar is not None:
            bar.close()
    root.attrs.put(plan.attributes)


def _create_level(root: Any, i: int, shape: tuple[int, ...], plan: _ImagePlan) -> Any:
    chunks = tuple(min(c, n) for c, n in zip(plan.chunks, shape, strict=True))
    shards = None
    if plan.shards is not None:
        shards = tuple(
            max(c, min(s, -(-n // c) * c))
            for s, c, n in zip(plan.shards, chunks, shape, strict=True)
        )
    extra = {"dimension_names": plan.axis_names} if plan.zarr_format == 3 else {}
    return root.create_array(
        str(i),
        shape=shape,
        dtype=plan.dtype,
        chunks=chunks,
        shards=shards,
        fill_value=0,
        **plan.codec_kwargs,
        **extra,
    )


def _label_colors(colors: Any) -> list[dict[str, Any]]:
    if colors is None:
        return []
    if isinstance(colors, dict):
        items = [{"label-value": k, "rgba": v} for k, v in colors.items()]
    elif isinstance(colors, Sequence) and not isinstance(colors, str):
        items = [dict(c) if isinstance(c, dict) else {"bad": c} for c in colors]
    else:
        raise WriteError(f"colors must be a dict {{value: (r, g, b, a)}} or a list, got {colors!r}")
    for c in items:
        value = c.get("label-value")
        if not isinstance(value, int | np.integer) or isinstance(value, bool):
            raise WriteError(f"label color {c} needs an integer 'label-value'")
        rgba = c.get("rgba")
        if rgba is not None and (
            isinstance(rgba, str)
            or len(rgba) != 4
            or not all(isinstance(v, int | np.integer) and 0 <= v <= 255 for v in rgba)
        ):
            raise WriteError(f"label color {c} needs rgba as four integers in 0..255")
        c["rgba"] = [int(v) for v in rgba] if rgba is not None else None
        c["label-value"] = int(value)
    return items


def _level_shapes(shape: Sequence[int], factors: list[tuple[int, ...]]) -> list[tuple[int, ...]]:
    shapes = [tuple(int(n) for n in shape)]
    for f in factors:
        shapes.append(tuple(-(-n // k) for n, k in zip(shapes[-1], f, strict=True)))
    return shapes


def _level_transforms(
    scale: tuple[float, ...], translation: tuple[float, ...], factors: list[tuple[int, ...]]
) -> tuple[list[list[float]], list[list[float]]]:
    scales, translations = [list(scale)], [list(translation)]
    for f in factors:
        s, t = scales[-1], translations[-1]
        # a level's voxel centre sits half a (new) voxel in from the previous level's
        translations.append([tt + (k - 1) * ss / 2 for tt, k, ss in zip(t, f, s, strict=True)])
        scales.append([ss * k for ss, k in zip(s, f, strict=True)])
    return scales, translations


def _write_pyramid(arrays, data, factors, method, backend, bar, written, is_dask) -> None:
    from linumpy_gpu.engine.writer import ChunkedArrayWriter

    writers = [
        ChunkedArrayWriter(a, backend, name=str(a.store_path), locking=False) for a in arrays
    ]
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
    from linumpy_gpu.engine.reader import ChunkedArrayReader

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


def _progress_bar(progress: bool, plan: _ImagePlan, label: str) -> Any:
    if not progress:
        return None
    from tqdm.auto import tqdm

    unit = plan.shards or plan.chunks
    total = sum(
        math.prod(-(-n // min(c, n)) for n, c in zip(s, unit, strict=True)) for s in plan.shapes
    )
    return tqdm(total=total, desc=f"writing {label}", unit="unit")


def _plan(
    data: Any,
    *,
    axes: Sequence[str] | str | None,
    units: Sequence[str | None] | None,
    scale: Sequence[float] | None,
    translation: Sequence[float] | None,
    version: str,
    chunks: Sequence[int] | None,
    levels: int | Sequence[Sequence[int]],
    method: str,
    name: str | None,
    where: str,
    channels: Sequence[Channel | dict[str, Any]] | None = None,
    shards: Sequence[int] | None = None,
    compressor: str | None = "zstd",
    compression_level: int = 3,
    checksum: bool = True,
    extra_block: dict[str, Any] | None = None,
) -> _ImagePlan:
    """Check every argument and build the metadata the write will produce (validated as a
    reader will read it), touching nothing."""
    if not all(hasattr(data, a) for a in ("shape", "dtype", "ndim")):
        raise WriteError(f"data must be a numpy, cupy or dask array, got {type(data).__name__}")
    ndim = int(data.ndim)
    shape = tuple(int(n) for n in data.shape)
    try:
        dtype = np.dtype(data.dtype)
    except TypeError as exc:
        raise WriteError(f"dtype {data.dtype!r} is not a numpy dtype") from exc
    if dtype.str[1:] not in SUPPORTED_DTYPES:
        raise WriteError(f"dtype {dtype} is not supported; use one of {sorted(SUPPORTED_DTYPES)}")
    dtype = dtype.newbyteorder("=") if dtype.byteorder not in ("=", "|") else dtype
    if not 2 <= ndim <= 5:
        raise WriteError(f"OME-NGFF images have 2 to 5 dimensions, data has {ndim}")
    if 0 in shape:
        raise WriteError(f"data of shape {shape} is empty")
    if version not in ("0.4", "0.5"):
        raise WriteError(f"version must be '0.4' or '0.5', got {version!r}")
    if axes is None:
        axes = "tczyx"[5 - ndim :]
    if not isinstance(axes, str | Sequence) or not all(isinstance(a, str) for a in axes):
        raise WriteError(f"axes must be axis names such as 'zyx' or ['z', 'y', 'x'], got {axes!r}")
    axis_names = list(axes)
    if len(axis_names) != ndim:
        raise WriteError(f"{len(axis_names)} axes {axis_names} for {ndim}-D data of shape {shape}")
    if units is not None and (isinstance(units, str) or len(units) != ndim):
        raise WriteError(f"units must give one unit (or None) per axis, got {units!r}")
    axis_objs = build.make_axes(axis_names, units)
    scale_t = _numbers("scale", scale, ndim, 1.0)
    if any(s <= 0 for s in scale_t):
        raise WriteError(f"scale must be positive and finite, got {list(scale_t)}")
    translation_t = _numbers("translation", translation, ndim, 0.0)
    if method not in METHODS:
        raise WriteError(f"method must be one of {METHODS}, got {method!r}")
    if name is not None and not isinstance(name, str):
        raise WriteError(f"name must be a string, got {name!r}")
    factors = _factors(levels, shape, axis_objs)
    if chunks is None:
        chunks = _default_chunks(shape)
    chunks_t = _positive_ints("chunks", chunks, ndim)
    shards_t = None
    if shards is not None:
        if version != "0.5":
            raise WriteError("shards need zarr v3, i.e. version='0.5'")
        shards_t = _positive_ints("shards", shards, ndim)
        if any(s % c for s, c in zip(shards_t, chunks_t, strict=True)):
            raise WriteError(
                f"shards {list(shards_t)} must be multiples of chunks {list(chunks_t)}"
            )
    chans = _channels(channels, axis_names, shape)
    codec_kwargs = _codec_kwargs(version, compressor, compression_level, checksum)
    shapes = _level_shapes(shape, factors)
    scales, translations = _level_transforms(scale_t, translation_t, factors)
    block: dict[str, Any] = {
        "multiscales": [
            build.multiscales_block(
                version=version,
                axes=axis_objs,
                paths=[str(i) for i in range(len(shapes))],
                scales=scales,
                translations=translations,
                name=name,
                method=method if len(shapes) > 1 else None,
            )
        ]
    }
    if chans:
        block["omero"] = build.omero_block(chans)
    block.update(extra_block or {})
    attributes = build.wrap(version, block)
    try:
        ome, declared = ngff.ome_block(attributes, 3 if version == "0.5" else 2)
        ngff.parse_multiscales(ome, declared, where)
    except InvalidMetadataError as exc:
        raise WriteError(
            f"these arguments would write metadata that does not follow NGFF {version}: "
            f"{exc.field}: expected {exc.expected}"
        ) from exc
    return _ImagePlan(
        version=version,
        dtype=dtype,
        shapes=shapes,
        factors=factors,
        chunks=chunks_t,
        shards=shards_t,
        axis_names=[a.name for a in axis_objs],
        codec_kwargs=codec_kwargs,
        attributes=attributes,
        method=method,
    )


def _numbers(label: str, values: Any, ndim: int, default: float) -> tuple[float, ...]:
    if values is None:
        return (default,) * ndim
    if isinstance(values, str) or not isinstance(values, Sequence | np.ndarray):
        raise WriteError(f"{label} must be {ndim} numbers, got {values!r}")
    if len(values) != ndim:
        raise WriteError(f"{label} has {len(values)} values for {ndim}-D data")
    out = []
    for v in values:
        if isinstance(v, bool) or not isinstance(v, int | float | np.integer | np.floating):
            raise WriteError(f"{label} must be {ndim} numbers, got {list(values)}")
        if not math.isfinite(float(v)):
            raise WriteError(f"{label} must be finite, got {list(values)}")
        out.append(float(v))
    return tuple(out)


def _positive_ints(label: str, values: Any, ndim: int) -> tuple[int, ...]:
    if isinstance(values, str) or not isinstance(values, Sequence | np.ndarray):
        raise WriteError(f"{label} must be {ndim} positive integers, got {values!r}")
    if len(values) != ndim:
        raise WriteError(f"{label} has {len(values)} values for {ndim}-D data")
    if not all(
        isinstance(v, int | np.integer) and not isinstance(v, bool) and v > 0 for v in values
    ):
        raise WriteError(f"{label} must be positive integers, got {list(values)}")
    return tuple(int(v) for v in values)


def _factors(levels: Any, shape: tuple[int, ...], axes: Sequence[Any]) -> list[tuple[int, ...]]:
    ndim = len(shape)
    if isinstance(levels, int | np.integer) and not isinstance(levels, bool):
        if levels < 1:
            raise WriteError(f"levels must be >= 1, got {levels}")
        factors = pyramid_factors(shape, [a.type for a in axes], int(levels))
        if any(all(f == 1 for f in fs) for fs in factors):
            most = 1 + sum(1 for fs in factors if any(f > 1 for f in fs))
            raise WriteError(
                f"levels={levels}: data of shape {shape} has at most {most} levels before its "
                "spatial axes are 1 voxel long"
            )
        return factors
    if isinstance(levels, str) or not isinstance(levels, Sequence):
        raise WriteError(f"levels must be a number or a list of per-level factors, got {levels!r}")
    out = []
    for fs in levels:
        if isinstance(fs, str) or not isinstance(fs, Sequence) or len(fs) != ndim:
            raise WriteError(f"each level's factors must be {ndim} integers >= 1, got {fs!r}")
        if not all(
            isinstance(f, int | np.integer) and not isinstance(f, bool) and f >= 1 for f in fs
        ):
            raise WriteError(f"each level's factors must be {ndim} integers >= 1, got {fs!r}")
        out.append(tuple(int(f) for f in fs))
    return out


def _channels(channels: Any, axes: list[str], shape: tuple[int, ...]) -> list[Channel]:
    if channels is None:
        return []
    if isinstance(channels, str | dict) or not isinstance(channels, Sequence):
        raise WriteError(f"channels must be a list of Channel or dicts, got {channels!r}")
    out = []
    for ch in channels:
        if isinstance(ch, Channel):
            out.append(ch)
            continue
        if not isinstance(ch, dict):
            raise WriteError(f"each channel must be a Channel or a dict, got {ch!r}")
        color = ch.get("color")
        if color is not None and not (
            isinstance(color, str) and re.fullmatch(r"[0-9A-Fa-f]{6}", color)
        ):
            raise WriteError(f"channel color must be 6 hex digits such as 'FF00FF', got {color!r}")
        window = ch.get("window")
        if window is not None and (
            not isinstance(window, dict)
            or not all(isinstance(v, int | float) and math.isfinite(v) for v in window.values())
        ):
            raise WriteError(f"channel window must be a dict of finite numbers, got {window!r}")
        label = ch.get("label")
        if label is not None and not isinstance(label, str):
            raise WriteError(f"channel label must be a string, got {label!r}")
        out.append(Channel(label, color.upper() if color else None, window, ch.get("active")))
    if out and "c" in axes and len(out) != shape[axes.index("c")]:
        raise WriteError(f"{len(out)} channels for a 'c' axis of length {shape[axes.index('c')]}")
    return out


def _default_chunks(shape: Sequence[int]) -> tuple[int, ...]:
    """About 1-4 MiB chunks: 128 along the last three axes, 1 along the others."""
    return tuple(min(n, 128) if i >= len(shape) - 3 else 1 for i, n in enumerate(shape))


def _codec_kwargs(version: str, compressor: Any, level: Any, checksum: Any) -> dict[str, Any]:
    if compressor not in ("zstd", None):
        raise WriteError(f"compressor must be 'zstd' or None, got {compressor!r}")
    if compressor is None:
        return {"compressors": None}
    if (
        isinstance(level, bool)
        or not isinstance(level, int | np.integer)
        or level not in ZSTD_LEVELS
    ):
        raise WriteError(f"compression_level must be an integer from -131072 to 22, got {level!r}")
    if not isinstance(checksum, bool):
        raise WriteError(f"checksum must be True or False, got {checksum!r}")
    if version == "0.5":
        from zarr.codecs import ZstdCodec

        return {"compressors": [ZstdCodec(level=int(level), checksum=checksum)]}
    import numcodecs

    return {"compressors": numcodecs.Zstd(level=int(level), checksum=checksum)}
