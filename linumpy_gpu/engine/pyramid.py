"""Pyramids: downsampling written once for numpy and cupy (``xp``), and recomputing a
coarser level from a finer one through the engine."""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from linumpy_gpu.engine.reader import ChunkedArrayReader
from linumpy_gpu.errors import InvalidArgumentError

METHODS = ("mean", "nearest", "mode", "gaussian")
# The methods whose levels hold only values of the finer level: for label images.
LABEL_METHODS = ("mode", "nearest")


def array_module(a: Any) -> Any:
    """numpy or cupy: the module of array ``a``."""
    if isinstance(a, np.ndarray):
        return np
    import cupy

    return cupy


def downsample(
    a: Any, factors: Sequence[int], method: str = "mean", whole_shape: Sequence[int] | None = None
) -> Any:
    """Reduce ``a`` by integer ``factors`` per axis. Partial edge blocks are reduced over
    the elements they have (no padding), so the shape is ``ceil(n / f)`` per axis.
    ``whole_shape``: where ``a`` is a piece of a larger array, that array's shape, so the
    piece is reduced as the whole would be: the same values for integer data; for float
    data the same to the last bit or two (a piece's sums may run in another order)."""
    if method not in METHODS:
        raise InvalidArgumentError(f"method must be one of {METHODS}, got {method!r}")
    xp = array_module(a)
    if not a.dtype.isnative:
        # the reductions take the arithmetic dtype from the input's: native byte order
        a = a.astype(a.dtype.newbyteorder("="))
    if method == "nearest":
        return a[tuple(slice(None, None, f) for f in factors)].copy()
    if method == "mode":
        return _mode(a, factors, xp)
    work_dtype = _float_for(a.dtype)
    shape = a.shape if whole_shape is None else whole_shape
    divides = all(n % f == 0 for n, f in zip(shape, factors, strict=True))
    blocks = divides and all(n % f == 0 for n, f in zip(a.shape, factors, strict=True))
    if method == "gaussian":
        sample = tuple(slice(None, None, f) for f in factors)
        with np.errstate(over="ignore", invalid="ignore"):  # redone below where it happens
            out = _gaussian(a.astype(work_dtype, copy=False), factors, xp)[sample]
        if a.dtype.kind == "f":
            # the filters add the two values at each distance first, which overflows near
            # the dtype's largest value (to inf, or to NaN where +inf meets -inf): there,
            # quartered (exact) the sums stay in range, with room for weights that add up
            # to a little more than one; inputs that are not finite give what they give
            bad = ~xp.isfinite(out)
            if bool(bad.any()):
                quarter = a.astype(work_dtype) * work_dtype.type(0.25)
                redone = _gaussian(quarter, factors, xp)[sample]
                # a smoothing stays within its inputs' range: the rounding of the weights
                # may not carry it past the largest value
                # (infinite inputs smooth to infinities: those stay as they are)
                top = work_dtype.type(np.finfo(work_dtype).max / 4)
                clipped = xp.where(xp.isfinite(redone), xp.clip(redone, -top, top), redone)
                redone = clipped * work_dtype.type(4)
                out = xp.where(bad, redone, out)
        return _cast_back(out, a.dtype, xp)
    if a.dtype.kind in "iu":
        if blocks and _exact_in_integers(a.dtype, factors):
            return _by_slabs(_integer_mean, a, factors, xp)
        # wider integers: exact sums in 64 bits (a float64 mean loses the low bits of
        # values beyond 2**53 and rounds the largest ones out of range)
        return _wide_integer_mean(a, factors, blocks, xp)
    if a.dtype.itemsize < 8:
        # 16- and 32-bit floats are summed in float64: exact for all but the widest spread
        # of exponents, so numpy and cupy, whose summation orders differ, give the same
        # means, and no sum overflows
        return _cast_back(_float_mean(a, factors, blocks, np.dtype(np.float64), xp), a.dtype, xp)
    with np.errstate(over="ignore", invalid="ignore"):  # caught below, not warned about
        out = _float_mean(a, factors, blocks, work_dtype, xp)
    bad = ~xp.isfinite(out)
    if bool(bad.any()):
        # sums of values near the dtype's largest overflow where their mean does not (to
        # inf, or to NaN where +inf meets -inf): there, scaled by a power of two first
        # (exact), the sums stay in range; inputs that are not finite give what they give
        scale = 2.0 ** -math.ceil(math.log2(max(2, math.prod(factors))))
        redone = _float_mean(a * a.dtype.type(scale), factors, blocks, work_dtype, xp) / scale
        out = xp.where(bad, redone, out)
    return _cast_back(out, a.dtype, xp)


def _float_mean(a: Any, factors: Sequence[int], blocks: bool, dtype: np.dtype, xp: Any) -> Any:
    """Block means in ``dtype``: one reduction where ``blocks`` (the factors divide the
    whole array and ``a``), else axis by axis over partial edge blocks."""
    if blocks:
        return _mean_blocks(a, factors, dtype)
    out = a.astype(dtype, copy=False)
    for axis, f in enumerate(factors):
        if f > 1:
            out = _mean_axis(out, axis, f, xp)
    return out


# numpy inputs larger than this are reduced in slabs on the host's cores
_PARALLEL_BYTES = 8 << 20


def _by_slabs(reduce: Any, a: Any, factors: Sequence[int], xp: Any) -> Any:
    """``reduce(a, factors)``, for a large numpy ``a`` in slabs along the first axis (whole
    blocks each) on the CPU backend's threads, which numpy's arithmetic lets run at once.
    Small slabs also stay in the cores' caches across the passes of the reduction."""
    if xp is not np or a.nbytes <= _PARALLEL_BYTES or a.shape[0] <= factors[0]:
        return reduce(a, factors)
    from linumpy_gpu.backends.cpu import CpuBackend

    plane = max(1, a.nbytes // a.shape[0])
    rows = max(factors[0], (_PARALLEL_BYTES // 8 // plane) // factors[0] * factors[0])
    slabs = [a[z : z + rows] for z in range(0, a.shape[0], rows)]
    return np.concatenate(list(CpuBackend.pool().map(lambda s: reduce(s, factors), slabs)))


def _exact_in_integers(dtype: np.dtype, factors: Sequence[int]) -> bool:
    """Whether :func:`_integer_mean` gives exactly what the float mean and ``rint`` give:
    8- and 16-bit integers (their float32 sums are exact) over blocks of a power-of-two
    size (dividing by it is exact too)."""
    count = math.prod(factors)
    return dtype.kind in "iu" and dtype.itemsize <= 2 and count & (count - 1) == 0


def _integer_mean(a: Any, factors: Sequence[int]) -> Any:
    """Block means of 8- or 16-bit integers rounded half to even, in 32-bit integer sums:
    the float mean's result several times faster (see :func:`_exact_in_integers`)."""
    count = math.prod(factors)
    if count == 1:
        return a.copy()
    wide = np.int32 if a.dtype.kind == "i" else np.uint32
    total = a
    for axis, f in enumerate(factors):
        if f == 1:
            continue
        lead = (slice(None),) * axis
        summed = total[lead + (slice(0, None, f),)].astype(wide)
        for k in range(1, f):
            summed += total[lead + (slice(k, None, f),)]
        total = summed
    quotient = total >> (count.bit_length() - 1)
    rest = total & (count - 1)
    half = count >> 1
    quotient += (rest > half) | ((rest == half) & ((quotient & 1) == 1))
    return quotient.astype(a.dtype)


def _wide_integer_mean(a: Any, factors: Sequence[int], blocks: bool, xp: Any) -> Any:
    """Block means of any integers, rounded half to even, exactly: 32-bit and narrower
    values summed in 64 bits; 64-bit values split into 32-bit halves, each half summed in
    64 bits and divided with its remainder carried, so no sum overflows."""
    wide = np.dtype(np.int64 if a.dtype.kind == "i" else np.uint64)
    counts = _block_counts(a.shape, factors, xp)
    if a.dtype.itemsize <= 4:
        quotient, rest = _divmod(_block_sums(a.astype(wide), factors, blocks, xp), counts, xp)
    else:
        high = a >> 32  # floor for negative values: a == high * 2**32 + low
        low = (a & a.dtype.type(0xFFFFFFFF)).astype(np.uint64)
        high_q, high_r = _divmod(_block_sums(high, factors, blocks, xp), counts, xp)
        low_sums = _block_sums(low, factors, blocks, xp)
        low_q, rest = _divmod(high_r.astype(np.uint64) * np.uint64(1 << 32) + low_sums, counts, xp)
        quotient = high_q * wide.type(1 << 32) + low_q.astype(wide)
    twice = rest.astype(wide) * wide.type(2)
    counts = xp.asarray(counts, dtype=wide)
    quotient += (twice > counts) | ((twice == counts) & ((quotient & 1) == 1))
    return quotient.astype(a.dtype)


def _block_sums(a: Any, factors: Sequence[int], blocks: bool, xp: Any) -> Any:
    """Per-block sums in ``a``'s dtype (partial edge blocks sum what they hold)."""
    if blocks:
        split: list[int] = []
        for n, f in zip(a.shape, factors, strict=True):
            split += [n // f, f]
        return a.reshape(split).sum(axis=tuple(range(1, 2 * a.ndim, 2)), dtype=a.dtype)
    out = a
    for axis, f in enumerate(factors):
        if f > 1:
            moved = xp.moveaxis(out, axis, -1)
            n = moved.shape[-1]
            full = (n // f) * f
            parts = []
            if full:
                head = moved[..., :full].reshape(moved.shape[:-1] + (full // f, f))
                parts.append(head.sum(axis=-1, dtype=a.dtype))
            if full < n:
                parts.append(moved[..., full:].sum(axis=-1, keepdims=True, dtype=a.dtype))
            joined = parts[0] if len(parts) == 1 else xp.concatenate(parts, axis=-1)
            out = xp.moveaxis(joined, -1, axis)
    return out


def _block_counts(shape: Sequence[int], factors: Sequence[int], xp: Any) -> Any:
    """Elements per block (an int where every block is whole, else an array of the
    reduced shape)."""
    if all(n % f == 0 for n, f in zip(shape, factors, strict=True)):
        return math.prod(factors)
    counts = xp.ones((1,) * len(shape), dtype=np.int64)
    for axis, (n, f) in enumerate(zip(shape, factors, strict=True)):
        per = [f] * (n // f) + ([n % f] if n % f else [])
        counts = counts * xp.asarray(per, dtype=np.int64).reshape(
            (1,) * axis + (len(per),) + (1,) * (len(shape) - axis - 1)
        )
    return counts


def _divmod(sums: Any, counts: Any, xp: Any) -> tuple[Any, Any]:
    """Floor quotient and remainder (0 <= remainder < count) of ``sums`` by ``counts``."""
    counts = xp.asarray(counts, dtype=sums.dtype)
    return xp.floor_divide(sums, counts), xp.remainder(sums, counts)


def _mean_blocks(a: Any, factors: Sequence[int], dtype: np.dtype) -> Any:
    """Block means in one reduction over a reshaped view (no float copy of the input);
    for shapes the factors divide."""
    split: list[int] = []
    for n, f in zip(a.shape, factors, strict=True):
        split += [n // f, f]
    return a.reshape(split).mean(axis=tuple(range(1, 2 * a.ndim, 2)), dtype=dtype)


def _mean_axis(a: Any, axis: int, f: int, xp: Any) -> Any:
    n = a.shape[axis]
    full = (n // f) * f
    parts = []
    if full:
        head = xp.moveaxis(a, axis, -1)[..., :full]
        head = head.reshape(head.shape[:-1] + (full // f, f)).mean(axis=-1)
        parts.append(xp.moveaxis(head, -1, axis))
    if full < n:
        tail = xp.moveaxis(a, axis, -1)[..., full:].mean(axis=-1, keepdims=True)
        parts.append(xp.moveaxis(tail, -1, axis))
    return parts[0] if len(parts) == 1 else xp.concatenate(parts, axis=axis)


def _mode(a: Any, factors: Sequence[int], xp: Any) -> Any:
    """Most frequent value per block (ties: the smallest), for label images. An edge
    block counts only the elements it has."""
    out_shape = tuple(-(-n // f) for n, f in zip(a.shape, factors, strict=True))
    candidates, inside = [], []
    for offset in np.ndindex(*factors):
        starts = [xp.arange(m) * f + o for m, f, o in zip(out_shape, factors, offset, strict=True)]
        # past an edge block's end the index is clamped (any element will do) and masked
        index = tuple(xp.minimum(i, n - 1) for i, n in zip(starts, a.shape, strict=True))
        candidates.append(a[xp.ix_(*index)])
        valid = xp.ones(out_shape, dtype=bool)
        for axis, (i, n) in enumerate(zip(starts, a.shape, strict=True)):
            shape = [1] * len(out_shape)
            shape[axis] = len(i)
            valid = valid & (i < n).reshape(shape)
        inside.append(valid)
    stack = xp.stack(candidates)  # (k, *out_shape)
    mask = xp.stack(inside)
    floats = stack.dtype.kind == "f"
    nan = xp.isnan(stack) if floats else None
    counts = xp.zeros(stack.shape, dtype=np.int32)
    for i in range(stack.shape[0]):
        same = stack == stack[i : i + 1]
        if nan is not None:
            same |= nan & nan[i : i + 1]  # NaN is one value among others, counted as such
        counts += (same & mask[i : i + 1]).astype(np.int32)
    counts = xp.where(mask, counts, -1)
    winners = counts == counts.max(axis=0, keepdims=True)
    if nan is not None:
        # the smallest of the most frequent values, NaN after every number
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # a block whose mode is NaN
            return xp.nanmin(xp.where(winners, stack, xp.nan), axis=0).astype(stack.dtype)
    # the smallest of the most frequent values: the others are lifted to the block's largest
    return xp.where(winners, stack, stack.max(axis=0, keepdims=True)).min(axis=0)


def _gaussian(a: Any, factors: Sequence[int], xp: Any) -> Any:
    if xp is np:
        from scipy import ndimage
    else:
        from cupyx.scipy import ndimage
    sigma = [max(0.0, (f - 1) / 2.0) for f in factors]
    return ndimage.gaussian_filter(a, sigma=sigma, mode="nearest")


def _float_for(dtype: np.dtype) -> np.dtype:
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        # float16 sums overflow at 65504: float32 holds any float16 mean's sum
        return np.dtype(np.float32) if dtype.itemsize < 4 else dtype
    if dtype.kind in "iub" and dtype.itemsize <= 2:
        return np.dtype(np.float32)
    return np.dtype(np.float64)


def _cast_back(a: Any, dtype: np.dtype, xp: Any) -> Any:
    dtype = np.dtype(dtype)
    if dtype.kind in "iub":
        a = xp.rint(a)
        info = np.iinfo(dtype) if dtype.kind != "b" else None
        if info is not None:
            a = xp.clip(a, _float_bound(info.min, a.dtype), _float_bound(info.max, a.dtype))
    return a.astype(dtype, copy=False)


def _float_bound(bound: int, dtype: np.dtype) -> float:
    """The float of ``dtype`` nearest ``bound`` on its inner side: 2**64 - 1 as a float
    rounds up to 2**64, which converts back to 0."""
    value = dtype.type(bound)
    if abs(int(value)) > abs(bound):
        value = np.nextafter(value, dtype.type(0))
    return float(value)


def pyramid_factors(
    shape: Sequence[int], axis_types: Sequence[str | None], levels: int
) -> list[tuple[int, ...]]:
    """Per-level factors relative to the previous level: 2 on spatial axes (only while the
    axis is longer than 1), 1 on channel and time axes."""
    out = []
    current = list(shape)
    for _ in range(levels - 1):
        f = tuple(
            2 if t == "space" and n > 1 else 1 for n, t in zip(current, axis_types, strict=True)
        )
        out.append(f)
        current = [-(-n // k) for n, k in zip(current, f, strict=True)]
    return out


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
    (slices in ``source`` coordinates; None = all), in slabs along the first axis.
    ``bar``: a tqdm-like bar advanced per storage unit written."""
    reader = ChunkedArrayReader(source, backend)
    reach = halo(factors, method)
    coarse = writer.layout.shape
    for src, dst in _slabs(
        source.shape, source.dtype.itemsize, factors, region, slab_bytes, coarse
    ):
        # read with the filter's reach on every side, so a slab's edges see the values
        # around them as a downsampling of the whole level does
        lo = [max(0, s.start - h) for s, h in zip(src, reach, strict=True)]
        hi = [min(n, s.stop + h) for s, h, n in zip(src, reach, source.shape, strict=True)]
        finer = reader.read(tuple(slice(a, b) for a, b in zip(lo, hi, strict=True)))
        # reduced as the whole level is (as a fresh write: integers exactly, floats to
        # the last bit or two)
        reduced = downsample(finer, factors, method, whole_shape=source.shape)
        keep = tuple(
            slice((s.start - a) // f, (s.start - a) // f + (d.stop - d.start))
            for s, d, a, f in zip(src, dst, lo, factors, strict=True)
        )
        writer.write(dst, reduced[keep], progress=bar)


def halo(factors: Sequence[int], method: str) -> list[int]:
    """Elements of the finer level beyond a region that its coarser elements depend on,
    per axis: none, except for the Gaussian filter's reach (scipy's default truncation, 4
    sigma), in whole factors so that the region's sampling grid is kept."""
    if method != "gaussian":
        return [0] * len(factors)
    out = []
    for f in factors:
        sigma = max(0.0, (f - 1) / 2.0)
        reach = int(4.0 * sigma + 0.5)
        out.append(-(-reach // f) * f if f > 1 else 0)
    return out


def affected_region(
    region: Sequence[slice], shape: Sequence[int], factors: Sequence[int], method: str
) -> tuple[slice, ...]:
    """The part of a finer level whose coarser elements change when ``region`` of it
    changes: the region, widened by the Gaussian filter's reach (see :func:`halo`)."""
    return tuple(
        slice(max(0, r.start - h), min(n, r.stop + h))
        for r, h, n in zip(region, halo(factors, method), shape, strict=True)
    )


def units_updated(
    source: Any,
    unit: Sequence[int],
    factors: Sequence[int],
    region: Any = None,
    slab_bytes: int = 512 << 20,
    coarse: Sequence[int] | None = None,
) -> int:
    """How many storage units (``unit``: the coarser level's shard or chunk shape;
    ``coarse``: its shape) :func:`update_level` writes for the same arguments: a progress
    bar's total."""
    total = 0
    slabs = _slabs(source.shape, source.dtype.itemsize, factors, region, slab_bytes, coarse)
    for _, dst in slabs:
        total += math.prod(-(-d.stop // u) - d.start // u for d, u in zip(dst, unit, strict=True))
    return total


def _slabs(
    shape: Sequence[int],
    itemsize: int,
    factors: Sequence[int],
    region: Any,
    slab_bytes: int,
    coarse: Sequence[int] | None = None,
) -> Iterator[tuple[tuple[slice, ...], tuple[slice, ...]]]:
    """(source region, coarser-level region) pairs covering ``region`` (None = all) in
    slabs along the first axis, each read of at most about ``slab_bytes``; source regions
    start on multiples of ``factors``, so each reduces to whole coarser elements. Where the
    coarser level (of shape ``coarse``) dropped a partial last block on an axis, as writers
    that round level shapes down do, its regions stop at its end."""
    if region is None:
        region = tuple(slice(0, n) for n in shape)
    lo = [r.start // f * f for r, f in zip(region, factors, strict=True)]
    hi = [min(-(-r.stop // f) * f, n) for r, f, n in zip(region, factors, shape, strict=True)]
    plane = math.prod(b - a for a, b in zip(lo[1:], hi[1:], strict=True)) * itemsize
    step = max(factors[0], (slab_bytes // max(plane, 1)) // factors[0] * factors[0])
    for z in range(lo[0], hi[0], step):
        src = (
            slice(z, min(z + step, hi[0])),
            *(slice(a, b) for a, b in zip(lo[1:], hi[1:], strict=True)),
        )
        # downsample gives ceil(n / f) elements per axis
        dst = tuple(
            slice(s.start // f, s.start // f + -(-(s.stop - s.start) // f))
            for s, f in zip(src, factors, strict=True)
        )
        if coarse is not None:
            dst = tuple(slice(d.start, min(d.stop, n)) for d, n in zip(dst, coarse, strict=True))
            if any(d.stop <= d.start for d in dst):
                continue
        yield src, dst


# Methods whose every output element depends only on its own block of input: a level can be
# computed piece by piece along the first axis and equal the whole level's result.
BLOCK_LOCAL = ("mean", "nearest", "mode")


def write_coarser_levels(
    data: Any,
    writers: Sequence[Any],
    factors: Sequence[Sequence[int]],
    method: str,
    flush_bytes: int,
    bar: Any = None,
) -> None:
    """Write the levels coarser than ``data`` (level 0) through ``writers`` (``factors``:
    from each level to the next, ``factors[0]`` from ``data`` to ``writers[0]``'s level)
    without holding any of them whole: ``data`` is reduced in pieces of about
    ``flush_bytes`` along its first reduced axis, and each level's rows are written once they fill a row of its storage
    units (and at least ``flush_bytes``, or reach the level's end). The memory held above
    ``data`` is about one such row per level, whatever the depth of the volume. Needs a
    :data:`BLOCK_LOCAL` method; ``bar``: a tqdm-like bar advanced per storage unit."""
    if method not in BLOCK_LOCAL:
        raise InvalidArgumentError(f"method must be one of {BLOCK_LOCAL}, got {method!r}")
    if not writers:
        return
    axis = next((a for a, f in enumerate(factors[0]) if f > 1), 0)
    # a piece reduces to whole rows at every level: a multiple of the product of factors
    depth = math.prod(f[axis] for f in factors)
    row_bytes = data.nbytes // max(1, data.shape[axis])
    step = max(depth, (max(1, flush_bytes // max(1, row_bytes)) // depth) * depth)
    levels = [_PendingRows(w, axis, flush_bytes) for w in writers]
    shapes = [tuple(data.shape)] + [tuple(w.layout.shape) for w in writers[:-1]]
    xp = array_module(data)
    for start in range(0, data.shape[axis], step):
        piece = data[(slice(None),) * axis + (slice(start, start + step),)]
        for level, f, shape in zip(levels, factors, shapes, strict=True):
            piece = level.crop(downsample(piece, f, method, whole_shape=shape))
            if piece.shape[axis] == 0:
                break  # past the end of a level rounded down: nothing coarser either
            level.add(piece, xp, bar)
    for level in levels:
        level.flush(bar)


class _PendingRows:
    """A level's rows along ``axis`` computed but not yet written, kept until they fill a
    row of storage units (and ``flush_bytes``), so every write covers whole units."""

    def __init__(self, writer: Any, axis: int, flush_bytes: int):
        self.writer = writer
        self.axis = axis
        layout = writer.layout
        shape = layout.shape
        unit = (layout.shard_shape or layout.chunk_shape)[axis]
        row_bytes = layout.dtype.itemsize * math.prod(shape) // max(1, shape[axis])
        rows = max(unit, -(-flush_bytes // max(1, row_bytes)) // unit * unit)
        self.rows = min(rows, shape[axis])
        self.buffer: Any = None
        self.filled = 0  # rows of the buffer in use
        self.written = 0  # rows of the level already written

    def crop(self, rows: Any) -> Any:
        """``rows`` (the next ones of the level, as downsampling gives them: ``n / f``
        rounded up) without what lies beyond the level's shape, where the level rounds
        down (a label image matching an image that a writer rounded so)."""
        shape = self.writer.layout.shape
        left = shape[self.axis] - self.written - self.filled
        keep = tuple(slice(0, left if a == self.axis else n) for a, n in enumerate(shape))
        return (
            rows[keep] if any(k.stop < m for k, m in zip(keep, rows.shape, strict=True)) else rows
        )

    def add(self, rows: Any, xp: Any, bar: Any) -> None:
        taken = 0
        n = rows.shape[self.axis]
        while taken < n:
            if self.buffer is None:
                shape = list(rows.shape)
                shape[self.axis] = self.rows
                self.buffer = xp.empty(tuple(shape), dtype=rows.dtype)
            k = min(n - taken, self.rows - self.filled)
            lead = (slice(None),) * self.axis
            self.buffer[lead + (slice(self.filled, self.filled + k),)] = rows[
                lead + (slice(taken, taken + k),)
            ]
            self.filled += k
            taken += k
            if self.filled == self.rows:
                self.flush(bar)

    def flush(self, bar: Any) -> None:
        if not self.filled:
            return
        lead = (slice(None),) * self.axis
        region = lead + (slice(self.written, self.written + self.filled),)
        self.writer.write(region, self.buffer[lead + (slice(0, self.filled),)], progress=bar)
        self.written += self.filled
        self.filled = 0
