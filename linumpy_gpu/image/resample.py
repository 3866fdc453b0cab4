"""Resampling a level on a regular grid of its image's coordinate system, for levels that
NGFF 0.6 places with an affine transformation or a rotation (any transformation with a
matrix): ``cupyx.scipy.ndimage.affine_transform`` on the GPU, scipy's on the CPU."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from linumpy_gpu import ngff
from linumpy_gpu.core.selection import normalize_selection
from linumpy_gpu.core.types import NDArray
from linumpy_gpu.errors import InvalidArgumentError, UnsupportedTransformationError

if TYPE_CHECKING:
    from linumpy_gpu.image.level import Level

# A grid this many times larger than the level is almost always a spacing in the wrong unit.
MAX_GROWTH = 16


@dataclass(frozen=True)
class Resampled:
    """A resampled volume: ``data[k]`` is the value at ``origin + k * spacing`` (per axis)
    in the image's coordinate system; points outside the level are 0."""

    data: NDArray
    origin: tuple[float, ...]
    spacing: tuple[float, ...]


def resample_level(
    level: Level, spacing: Sequence[float] | None, *, order: int = 1, region: Any = None
) -> Resampled:
    """See :meth:`linumpy_gpu.Level.resample`."""
    ndim = level.ndim
    transformation = level.transform()
    matrix = ngff.to_matrix(transformation, ndim)
    if matrix is None:
        raise UnsupportedTransformationError(
            f"'{level.image.path}' level {level.index} is placed by a "
            f"{_field_type(transformation)} transformation, which linumpy_gpu does not "
            "resample; read the level and its field (level.transform()) and apply it yourself"
        )
    if not isinstance(order, int) or isinstance(order, bool) or not 0 <= order <= 5:
        raise InvalidArgumentError(f"order must be a spline order from 0 to 5, got {order!r}")
    sel = normalize_selection(() if region is None else region, level.shape)
    if any(a.step != 1 or a.reversed or a.dropped for a in sel.axes):
        raise InvalidArgumentError("resample takes a region of step-1 slices only")
    start = np.array([a.start for a in sel.axes], dtype=np.float64)
    local = matrix.copy()
    local[:ndim, ndim] = matrix[:ndim, :ndim] @ start + matrix[:ndim, ndim]
    # the voxel's extent along each output axis: where the transformation swaps or rotates
    # axes, not the scale of the input axis of the same number
    voxel = tuple(float(v) for v in np.linalg.norm(matrix[:ndim, :ndim], axis=1))
    if spacing is None:
        spacing = voxel
    try:
        step = np.asarray([float(s) for s in spacing], dtype=np.float64)
    except (TypeError, ValueError):
        step = np.empty(0)
    if step.shape != (ndim,) or not np.all(np.isfinite(step)) or np.any(step <= 0):
        raise InvalidArgumentError(f"spacing must be {ndim} positive numbers, got {spacing!r}")
    counts = [a.count for a in sel.axes]
    if not all(counts):
        raise InvalidArgumentError(f"resample of an empty region (of shape {tuple(counts)})")
    corners = np.array(
        [[*c, 1.0] for c in itertools.product(*((0, n - 1) for n in counts))], dtype=np.float64
    )
    points = corners @ local.T
    low, high = points[:, :ndim].min(axis=0), points[:, :ndim].max(axis=0)
    shape = tuple(int(math.floor(e + 1e-9)) + 1 for e in (high - low) / step)
    if math.prod(shape) > MAX_GROWTH * math.prod(counts):
        raise InvalidArgumentError(
            f"a grid of {shape} for a level region of {tuple(counts)}: the spacing "
            f"{tuple(step)} is much finer than the level's voxels {voxel}; pass a coarser spacing"
        )
    try:
        inverse = np.linalg.inv(local)
    except np.linalg.LinAlgError as exc:
        raise UnsupportedTransformationError(
            f"'{level.image.path}' level {level.index}: its transformation has no inverse"
        ) from exc
    # output index k -> point low + k * spacing -> input index (inverse of the level's map)
    along = inverse[:ndim, :ndim] @ np.diag(step)
    offset = inverse[:ndim, :ndim] @ low + inverse[:ndim, ndim]
    data = level.read(tuple(slice(a.start, a.start + a.count) for a in sel.axes))
    xp, ndimage = _modules(data)

    def transform(values: Any) -> Any:
        return ndimage.affine_transform(
            values,
            xp.asarray(along),
            offset=xp.asarray(offset),
            output_shape=shape,
            order=order,
            mode="constant",
            cval=0.0,
        )

    if data.dtype.kind in "iu" and data.dtype.itemsize >= 4 and not order:
        out = _move_in_16_bit_parts(data, transform, xp)
    elif data.dtype.kind in "iu" and data.dtype.itemsize == 8:
        out = _interpolate_wide_integers(data, transform, xp)
    elif order and data.dtype.kind in "biu" or data.dtype == np.float16:
        # the filters compute in a float that holds every value of the dtype exactly
        exact = np.float32 if data.dtype.itemsize <= 2 else np.float64
        out = transform(data.astype(exact))
        if data.dtype.kind in "biu":
            info = np.iinfo(data.dtype) if data.dtype.kind in "iu" else None
            out = xp.rint(out)
            if info is not None:
                out = xp.clip(out, info.min, info.max)
        out = out.astype(data.dtype)
    else:
        out = transform(data)
    return Resampled(out, tuple(float(v) for v in low), tuple(float(v) for v in step))


def _move_in_16_bit_parts(data: Any, transform: Any, xp: Any) -> Any:
    """Nearest neighbours of 32- and 64-bit integers, exact: the filters may carry values
    in a float32 (cupyx does), which holds 16-bit parts exactly but not whole values, so
    each 16-bit part of the values moves on its own and the parts are joined again."""
    width = data.dtype.itemsize * 8
    unsigned = data.view(f"u{data.dtype.itemsize}")
    out = transform((unsigned & 0xFFFF).astype(np.uint16)).astype(unsigned.dtype)
    for shift in range(16, width, 16):
        part = ((unsigned >> shift) & 0xFFFF).astype(np.uint16)
        out |= transform(part).astype(unsigned.dtype) << shift
    return out.view(data.dtype)


def _interpolate_wide_integers(data: Any, transform: Any, xp: Any) -> Any:
    """64-bit integers interpolated in float64, which holds them exactly up to 2**53;
    larger values are refused rather than rounded."""
    largest = max(abs(int(data.min())), abs(int(data.max())))
    if largest > 2**53:
        raise InvalidArgumentError(
            f"{data.dtype} values up to {largest} are beyond what interpolation keeps "
            "exactly (2**53); resample with order=0 (nearest neighbour)"
        )
    out = xp.rint(transform(data.astype(np.float64)))
    info = np.iinfo(data.dtype)
    return xp.clip(out, float(info.min), float(info.max)).astype(data.dtype)


def _modules(data: Any) -> tuple[Any, Any]:
    if isinstance(data, np.ndarray):
        from scipy import ndimage

        return np, ndimage
    import cupy
    from cupyx.scipy import ndimage as gpu_ndimage

    return cupy, gpu_ndimage


def _field_type(t: ngff.Transformation) -> str:
    """The type of the first field (displacements, coordinates) inside ``t``."""
    if isinstance(t, ngff.Displacements | ngff.Coordinates):
        return t.type
    inner: list[ngff.Transformation] = []
    if isinstance(t, ngff.TransformSequence):
        inner = list(t.transformations)
    elif isinstance(t, ngff.ByDimension):
        inner = [item.transformation for item in t.transformations]
    elif isinstance(t, ngff.Bijection):
        inner = [t.forward]
    for part in inner:
        found = _field_type(part)
        if found in ("displacements", "coordinates"):
            return found
    return t.type or type(t).__name__
