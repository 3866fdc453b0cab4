"""Every argument of a write checked, and the metadata it will produce built and validated
as a reader will read it, before anything touches the disk."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from linumpy_gpu import ngff
from linumpy_gpu.engine.pyramid import METHODS, pyramid_factors
from linumpy_gpu.engine.writer import refuse_masked
from linumpy_gpu.errors import InvalidMetadataError, MetadataWarning, WriteError, warn
from linumpy_gpu.ngff import build
from linumpy_gpu.ngff.model import Axis, Channel

WRITE_VERSIONS = ("0.4", "0.5", "0.6")
# The pyramid's coarsest level fits this many voxels along its in-plane axes by default.
DEFAULT_TILE = 256
SUPPORTED_DTYPES = frozenset(
    ["b1", "i1", "i2", "i4", "i8", "u1", "u2", "u4", "u8", "f2", "f4", "f8"]
)
ZSTD_LEVELS = range(-131072, 23)


@dataclass(frozen=True)
class ImagePlan:
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
    fill_value: Any = 0  # of every level's array: what reads give for chunks never written

    @property
    def zarr_format(self) -> Literal[2, 3]:
        """The zarr format the NGFF version is stored in."""
        return zarr_format_of(self.version)


def plan_image(
    data: Any,
    *,
    axes: Sequence[str | Axis] | str | None,
    units: Sequence[str | None] | None,
    scale: Sequence[float] | None,
    translation: Sequence[float] | None,
    version: str,
    chunks: Sequence[int] | None,
    levels: int | Sequence[Sequence[int]] | None,
    method: str,
    name: str | None,
    where: str,
    channels: Sequence[Channel | dict[str, Any]] | None = None,
    shards: Sequence[int] | None = None,
    compressor: str | None = "zstd",
    compression_level: int = 3,
    checksum: bool = True,
    extra_block: dict[str, Any] | None = None,
    shapes: Sequence[Sequence[int]] | None = None,
    fill_value: Any = 0,
) -> ImagePlan:
    """Check every argument and build the metadata the write will produce (validated as a
    reader will read it), touching nothing. ``shapes``: the level shapes to write, where
    they must match another pyramid's (a label image's, its image's): each ``n / f``
    rounded up or down; by default rounded up."""
    if not all(hasattr(data, a) for a in ("shape", "dtype", "ndim")):
        raise WriteError(f"data must be a numpy, cupy or dask array, got {type(data).__name__}")
    refuse_masked(data, "data")
    ndim = int(data.ndim)
    if any(n != n for n in data.shape):  # NaN: a dask array whose chunk sizes are unknown
        raise WriteError(
            f"data of shape {tuple(data.shape)} has unknown sizes (a dask array after boolean "
            "indexing?); call data.compute_chunk_sizes() first"
        )
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
    if version not in WRITE_VERSIONS:
        raise WriteError(
            f"version must be one of {', '.join(WRITE_VERSIONS)} (0.6 is a release candidate: "
            f"written only when asked), got {version!r}"
        )
    if axes is None:
        axes = "tczyx"[5 - ndim :]
    if not isinstance(axes, str | Sequence) or not all(isinstance(a, str | Axis) for a in axes):
        raise WriteError(
            f"axes must be axis names such as 'zyx' or ['z', 'y', 'x'] (or Axis objects, "
            f"image.axes), got {axes!r}"
        )
    axis_names = [a.name if isinstance(a, Axis) else a for a in axes]
    if len(axis_names) != ndim:
        raise WriteError(f"{len(axis_names)} axes {axis_names} for {ndim}-D data of shape {shape}")
    if isinstance(axes, str) and any(n in ("T", "C", "Z", "Y", "X") for n in axis_names):
        # names given as text get NGFF types from lower-case t, c, z, y, x only (Axis
        # objects, an image's own axes, keep the names and types they have)
        raise WriteError(
            f"axis names are lower case: {''.join(n.lower() for n in axis_names)!r} "
            f"(t, c, z, y, x get their NGFF types), got {axes!r}"
        )
    if units is not None and (
        isinstance(units, str) or not isinstance(units, Sequence) or len(units) != ndim
    ):
        raise WriteError(f"units must give one unit (or None) per axis, got {units!r}")
    axis_objs = [
        # an Axis keeps its own type (a channel axis named 'ch', say); units= still wins
        Axis(given.name, given.type, made.unit if units is not None else given.unit)
        if isinstance(given, Axis)
        else made
        for given, made in zip(axes, build.make_axes(axis_names, units), strict=True)
    ]
    if units is not None:
        for axis, unit in zip(axis_objs, units, strict=True):
            if unit is not None and axis.type not in ("space", "time"):
                raise WriteError(
                    f"axis {axis.name!r} is a {axis.type or 'custom'} axis and takes no unit "
                    f"(units are for space and time axes), got {unit!r}: give None for it"
                )
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
        if zarr_format_of(version) != 3:
            raise WriteError("shards need zarr v3, i.e. version='0.5' (or '0.6')")
        shards_t = _positive_ints("shards", shards, ndim)
        if any(s % c for s, c in zip(shards_t, chunks_t, strict=True)):
            raise WriteError(
                f"shards {list(shards_t)} must be multiples of chunks {list(chunks_t)}"
            )
    chans = _channels(channels, axis_objs, shape)
    codec_kwargs = _codec_kwargs(version, compressor, compression_level, checksum)
    shapes = _level_shapes(shape, factors, shapes)
    scales, translations = _level_transforms(scale_t, translation_t, factors, method)
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
        ome, declared = ngff.ome_block(attributes, zarr_format_of(version))
        ngff.parse_multiscales(ome, declared, where)
    except InvalidMetadataError as exc:
        raise WriteError(
            f"these arguments would write metadata that does not follow NGFF {version}: "
            f"{exc.field}: expected {exc.expected}"
        ) from exc
    return ImagePlan(
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
        fill_value=_fill_value(fill_value, dtype),
    )


def _fill_value(value: Any, dtype: np.dtype) -> Any:
    """``value`` as the arrays' fill value of ``dtype``, or WriteError where that dtype
    cannot hold it exactly."""
    given = np.asarray(value)
    if isinstance(value, int) and given.dtype.kind == "O":  # an integer beyond 64 bits
        raise WriteError(f"fill_value {value!r} cannot be stored as {dtype} without changing")
    if given.ndim != 0 or given.dtype.kind not in "biuf":
        raise WriteError(f"fill_value must be one number, got {value!r}")
    with np.errstate(over="ignore", invalid="ignore"):
        stored = given.astype(dtype)
    # compared as Python numbers, which compare integers and floats exactly (numpy would
    # compare 2**53 + 1 and its float64 rounding as two equal float64s)
    same = stored.item() == given.item() or (
        dtype.kind == "f" and bool(np.isnan(given)) and bool(np.isnan(stored))
    )
    if not same:
        raise WriteError(f"fill_value {value!r} cannot be stored as {dtype} without changing")
    return stored.item()


def _numbers(label: str, values: Any, ndim: int, default: float) -> tuple[float, ...]:
    if values is None:
        return (default,) * ndim
    if (
        isinstance(values, str)
        or not isinstance(values, Sequence | np.ndarray)
        or np.ndim(values) != 1
    ):
        raise WriteError(f"{label} must be {ndim} numbers, got {values!r}")
    if len(values) != ndim:
        raise WriteError(f"{label} has {len(values)} values for {ndim}-D data")
    out = []
    for v in values:
        if isinstance(v, bool) or not isinstance(v, int | float | np.integer | np.floating):
            raise WriteError(f"{label} must be {ndim} numbers, got {list(values)}")
        if not _finite(v):
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


def default_levels(shape: Sequence[int], axis_types: Sequence[str | None]) -> int:
    """The number of levels a pyramid gets when the caller does not say: halving the
    spatial axes until the in-plane ones (the last two spatial axes) fit a tile of
    DEFAULT_TILE x DEFAULT_TILE, the size a viewer shows a whole image at."""
    spatial = [n for n, t in zip(shape, axis_types, strict=True) if t == "space"]
    largest = max(spatial[-2:], default=1)
    levels = 1
    while largest > DEFAULT_TILE:
        largest = -(-largest // 2)
        levels += 1
    return levels


def _factors(levels: Any, shape: tuple[int, ...], axes: Sequence[Any]) -> list[tuple[int, ...]]:
    ndim = len(shape)
    if levels is None:
        levels = default_levels(shape, [a.type for a in axes])
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
        reduced = [
            a.name
            for a, f in zip(axes, fs, strict=True)
            if f != 1 and a.type in ("channel", "time")
        ]
        if reduced:
            # averaging channels (or time points) together is not a pyramid of the image
            raise WriteError(
                f"level factors {tuple(fs)} reduce the channel or time axes {reduced}; use 1 there"
            )
        out.append(tuple(int(f) for f in fs))
    return out


def _channels(channels: Any, axes: Sequence[Axis], shape: tuple[int, ...]) -> list[Channel]:
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
            or not all(
                isinstance(v, int | float | np.integer | np.floating)
                and not isinstance(v, bool)
                and _finite(v)
                for v in window.values()
            )
        ):
            raise WriteError(f"channel window must be a dict of finite numbers, got {window!r}")
        label = ch.get("label")
        if label is not None and not isinstance(label, str):
            raise WriteError(f"channel label must be a string, got {label!r}")
        unwritten = sorted(set(ch) - {"label", "color", "window", "active"})
        if unwritten:
            warn(
                f"channel keys {unwritten} are not written (only label, color, window and "
                "active are)",
                MetadataWarning,
            )
        if window is not None:
            window = {k: v.item() if isinstance(v, np.generic) else v for k, v in window.items()}
        out.append(Channel(label, color.upper() if color else None, window, ch.get("active")))
    kinds = [a.type for a in axes]
    if out and "channel" in kinds:
        axis = axes[kinds.index("channel")]
        n = shape[kinds.index("channel")]
        if len(out) != n:
            raise WriteError(f"{len(out)} channels for a channel axis '{axis.name}' of length {n}")
    if len(out) > 1 and "channel" not in kinds:
        names = [a.name for a in axes]
        raise WriteError(f"{len(out)} channels for an image without a channel axis ({names})")
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
    if zarr_format_of(version) == 3:
        from zarr.codecs import ZstdCodec

        return {"compressors": [ZstdCodec(level=int(level), checksum=checksum)]}
    if not checksum:
        raise WriteError(
            "checksum=False applies to zarr v3 (NGFF 0.5 and 0.6): NGFF 0.4 (zarr v2) zstd "
            "chunks always carry a content checksum"
        )
    import numcodecs

    # Without the "checksum" member: tensorstore and zarrs refuse zarr v2 zstd metadata
    # that has one. The frames still carry content checksums (the writer adds them to
    # every zarr v2 zstd chunk), which every zstd decoder verifies.
    return {"compressors": numcodecs.Zstd(level=int(level))}


def _level_shapes(
    shape: Sequence[int],
    factors: list[tuple[int, ...]],
    given: Sequence[Sequence[int]] | None = None,
) -> list[tuple[int, ...]]:
    shapes = [tuple(int(n) for n in shape)]
    if given is not None and (
        len(given) != len(factors) + 1 or tuple(int(n) for n in given[0]) != shapes[0]
    ):
        raise WriteError(f"level shapes {[tuple(g) for g in given]} for data of shape {shape}")
    for i, f in enumerate(factors):
        finer = shapes[-1]
        if given is None:
            shapes.append(tuple(-(-n // k) for n, k in zip(finer, f, strict=True)))
            continue
        wanted = tuple(int(n) for n in given[i + 1])
        if len(wanted) != len(finer) or any(
            m < 1 or m not in (n // k, -(-n // k)) for m, n, k in zip(wanted, finer, f, strict=True)
        ):
            raise WriteError(
                f"level {i + 1} of shape {wanted} is not level {i} of shape {finer} reduced by {f}"
            )
        shapes.append(wanted)
    return shapes


def _level_transforms(
    scale: tuple[float, ...],
    translation: tuple[float, ...],
    factors: list[tuple[int, ...]],
    method: str,
) -> tuple[list[list[float]], list[list[float]]]:
    scales, translations = [list(scale)], [list(translation)]
    # a block's mean or mode sits at the block's centre, half a (new) voxel in from the
    # finer level's first voxel; "nearest" and "gaussian" sample the first voxel itself
    centred = method in ("mean", "mode")
    for f in factors:
        s, t = scales[-1], translations[-1]
        if centred:
            t = [tt + (k - 1) * ss / 2 for tt, k, ss in zip(t, f, s, strict=True)]
        translations.append(list(t))
        scales.append([ss * k for ss, k in zip(s, f, strict=True)])
    return scales, translations


def label_colors(colors: Any) -> list[dict[str, Any]]:
    """Label colours given as ``{value: (r, g, b, a)}`` or NGFF dicts, checked, as NGFF dicts."""
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
            or not isinstance(rgba, Sequence | np.ndarray)
            or len(rgba) != 4
            or not all(isinstance(v, int | np.integer) and 0 <= v <= 255 for v in rgba)
        ):
            raise WriteError(f"label color {c} needs rgba as four integers in 0..255")
        c["rgba"] = [int(v) for v in rgba] if rgba is not None else None
        c["label-value"] = int(value)
    return items


def label_properties(properties: Any) -> list[dict[str, Any]]:
    """Label properties given as NGFF dicts (one per label value), checked, with numpy
    numbers as Python numbers: what JSON can hold."""
    if properties is None:
        return []
    if isinstance(properties, str | dict) or not isinstance(properties, Sequence):
        raise WriteError(f"properties must be a list of dicts, one per label, got {properties!r}")
    out = []
    for p in properties:
        if not isinstance(p, dict) or not all(isinstance(k, str) for k in p):
            raise WriteError(f"each label's properties must be a dict with text keys, got {p!r}")
        value = p.get("label-value")
        if not isinstance(value, int | np.integer) or isinstance(value, bool):
            raise WriteError(f"label properties {p} need an integer 'label-value'")
        item = {k: v.item() if isinstance(v, np.generic) else v for k, v in p.items()}
        try:
            # strict JSON: NaN and infinity are not JSON, and viewers' parsers refuse them
            json.dumps(item, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise WriteError(
                f"label properties {p} cannot be written as JSON ({exc}); give numbers, "
                "text, lists or dicts, and None where a value is missing"
            ) from None
        out.append(item)
    return out


def _finite(v: Any) -> bool:
    try:
        return math.isfinite(float(v))
    except OverflowError:  # an int beyond float's range
        return False


def zarr_format_of(version: str) -> Literal[2, 3]:
    """The zarr format NGFF ``version`` is stored in: 2 for 0.4, 3 from 0.5 on."""
    return 2 if version == "0.4" else 3
