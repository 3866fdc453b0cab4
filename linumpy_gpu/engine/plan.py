"""Plan a selection into the chunks it touches and where each lands in the output."""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator
from typing import NamedTuple

import numpy as np

from .selection import AxisSelection, Selection


class ChunkTask(NamedTuple):
    """One chunk to read: its grid coordinates, the part of it wanted, and where it goes.

    ``chunk_region`` indexes the decoded chunk (steps allowed); ``out_region`` indexes the
    engine's output (contiguous slices). ``whole`` is true when every element of the chunk
    that lies inside the array is wanted, in order, with step 1. (A tuple: a full level
    of small chunks plans tens of thousands, before the first byte is read.)
    """

    coords: tuple[int, ...]
    chunk_region: tuple[slice, ...]
    out_region: tuple[slice, ...]
    whole: bool


def axis_spans(sel: AxisSelection, chunk: int, size: int) -> list[tuple[int, slice, slice, bool]]:
    """For one axis: (chunk index, slice in chunk, slice in output, whole) per touched chunk."""
    if sel.count == 0:
        return []
    start, step, count = sel.start, sel.step, sel.count
    last = start + (count - 1) * step
    # every chunk from the first to the last touched, at once (an axis of plane chunks
    # has thousands); a strided selection may step over some of them
    c = np.arange(start // chunk, last // chunk + 1, dtype=np.int64)
    lo = c * chunk
    hi = np.minimum(lo + chunk, size)
    k0 = np.maximum(0, -((start - lo) // step))
    k1 = np.minimum(count - 1, (hi - 1 - start) // step)
    keep = k0 <= k1
    c, lo, hi, k0, k1 = c[keep], lo[keep], hi[keep], k0[keep], k1[keep]
    local_start = start + k0 * step - lo
    local_stop = start + k1 * step - lo + 1
    whole = (step == 1) & (local_start == 0) & (local_stop == hi - lo)
    return [
        (ci, slice(a, b, step), slice(k, m + 1), w)
        for ci, a, b, k, m, w in zip(
            c.tolist(),
            local_start.tolist(),
            local_stop.tolist(),
            k0.tolist(),
            k1.tolist(),
            whole.tolist(),
            strict=True,
        )
    ]


def plan_chunks(
    selection: Selection, shape: tuple[int, ...], chunk_shape: tuple[int, ...]
) -> Iterator[ChunkTask]:
    """Every chunk the selection touches, in C order of the chunk grid."""
    per_axis = _per_axis(selection, shape, chunk_shape)
    if not per_axis:  # a 0-d array: one chunk
        yield ChunkTask((), (), (), True)
        return
    # one product per field (C loops) rather than unzipping every combination
    coords, chunk_regions, out_regions, wholes = (
        [[span[k] for span in spans] for spans in per_axis] for k in range(4)
    )
    whole = _combined(wholes)
    yield from map(
        ChunkTask._make,
        zip(
            itertools.product(*coords),
            itertools.product(*chunk_regions),
            itertools.product(*out_regions),
            whole.ravel().tolist(),
            strict=True,
        ),
    )


class ChunkBounds(NamedTuple):
    """Where each chunk of :func:`plan_chunks` lands in the output, as arrays (n, ndim):
    ``out_start``, ``out_stop``; and per chunk ``whole``."""

    out_start: np.ndarray
    out_stop: np.ndarray
    whole: np.ndarray


def chunk_bounds(
    selection: Selection, shape: tuple[int, ...], chunk_shape: tuple[int, ...]
) -> ChunkBounds:
    """The output bounds of every chunk :func:`plan_chunks` yields, in the same order,
    computed per axis and broadcast (a full level of small chunks: thousands of chunks)."""
    per_axis = _per_axis(selection, shape, chunk_shape)
    ndim = len(per_axis)
    counts = [len(spans) for spans in per_axis]
    n = math.prod(counts)
    starts = np.empty((n, ndim), dtype=np.int64)
    stops = np.empty((n, ndim), dtype=np.int64)
    for axis, spans in enumerate(per_axis):
        grid = [1] * ndim
        grid[axis] = counts[axis]
        axis_starts = np.array([span[2].start for span in spans], dtype=np.int64)
        axis_stops = np.array([span[2].stop for span in spans], dtype=np.int64)
        starts[:, axis] = np.broadcast_to(axis_starts.reshape(grid), counts).ravel()
        stops[:, axis] = np.broadcast_to(axis_stops.reshape(grid), counts).ravel()
    whole = _combined([[span[3] for span in spans] for spans in per_axis]).ravel()
    return ChunkBounds(starts, stops, whole)


def _per_axis(
    selection: Selection, shape: tuple[int, ...], chunk_shape: tuple[int, ...]
) -> list[list[tuple[int, slice, slice, bool]]]:
    return [
        axis_spans(sel, c, n) for sel, c, n in zip(selection.axes, chunk_shape, shape, strict=True)
    ]


def _combined(flags: list[list[bool]]) -> np.ndarray:
    """Per chunk of the grid product, whether every axis' flag holds (shape: the grid)."""
    combined = np.ones([len(f) for f in flags], dtype=bool)
    for axis, axis_flags in enumerate(flags):
        grid = [1] * len(flags)
        grid[axis] = len(axis_flags)
        combined &= np.asarray(axis_flags, dtype=bool).reshape(grid)
    return combined


def count_chunks(selection: Selection, shape: tuple[int, ...], chunk_shape: tuple[int, ...]) -> int:
    n = 1
    for sel, c, size in zip(selection.axes, chunk_shape, shape, strict=True):
        n *= len(axis_spans(sel, c, size))
    return n
