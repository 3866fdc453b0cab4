"""Plan a selection into the chunks it touches and where each lands in the output."""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import Any, NamedTuple

import numpy as np

from linumpy_gpu.core.selection import AxisSelection, Selection


class ChunkTask(NamedTuple):
    """One chunk to read: its grid coordinates, the part of it wanted, and where it goes.

    ``chunk_region`` indexes the decoded chunk (steps allowed); ``out_region`` indexes the
    engine's output (contiguous slices). ``whole`` is true when every element of the chunk
    that lies inside the array is wanted, in order, with step 1.
    """

    coords: tuple[int, ...]
    chunk_region: tuple[slice, ...]
    out_region: tuple[slice, ...]
    whole: bool


_FIELDS = ("coords", "chunk_start", "chunk_step", "out_start", "out_stop", "whole")


class ChunkPlan:
    """Every chunk of a read as rows of arrays, in C order of the chunk grid.

    Row k of ``coords``, ``chunk_start``, ``chunk_step``, ``out_start`` and ``out_stop``
    (each ``(n, ndim)`` int64) and of ``whole`` (``(n,)`` bool) describe the k-th chunk:
    its grid coordinates, the first element wanted in it and the step per axis, and the
    output bounds it fills. A full level of small chunks has tens of thousands of them;
    as arrays they cost the garbage collector nothing and the GPU's copy kernel takes
    them as they are. ``plan[k]`` spells one out as a :class:`ChunkTask`; ``plan[a:b]``
    and ``plan[rows]`` are plans of those chunks.
    """

    __slots__ = _FIELDS

    def __init__(
        self,
        coords: np.ndarray,
        chunk_start: np.ndarray,
        chunk_step: np.ndarray,
        out_start: np.ndarray,
        out_stop: np.ndarray,
        whole: np.ndarray,
    ):
        self.coords = coords
        self.chunk_start = chunk_start
        self.chunk_step = chunk_step
        self.out_start = out_start
        self.out_stop = out_stop
        self.whole = whole

    @property
    def ndim(self) -> int:
        """Dimensions of the array the plan reads."""
        return self.coords.shape[1]

    def __len__(self) -> int:
        return len(self.whole)

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, int | np.integer):
            return self.task(int(key))
        return ChunkPlan(*(getattr(self, f)[key] for f in _FIELDS))

    def __iter__(self) -> Iterator[ChunkTask]:
        columns = [getattr(self, f).tolist() for f in _FIELDS]
        for coords, start, step, lo, hi, whole in zip(*columns, strict=True):
            yield _task(coords, start, step, lo, hi, whole)

    def task(self, k: int) -> ChunkTask:
        """Chunk ``k`` of the plan spelled out as a :class:`ChunkTask`."""
        return _task(*(getattr(self, f)[k].tolist() for f in _FIELDS))

    def coords_of(self, k: int) -> tuple[int, ...]:
        """Grid coordinates of chunk ``k``."""
        return tuple(self.coords[k].tolist())

    def coord_tuples(self) -> list[tuple[int, ...]]:
        """Grid coordinates of every chunk, as tuples."""
        return [tuple(c) for c in self.coords.tolist()]

    @classmethod
    def concatenate(cls, plans: Sequence[ChunkPlan], ndim: int) -> ChunkPlan:
        """One plan of the chunks of ``plans``, in order (an empty plan of ``ndim`` dimensions
        for none)."""
        if not plans:
            return _empty(ndim)
        return cls(*(np.concatenate([getattr(p, f) for p in plans]) for f in _FIELDS))


def _task(
    coords: list[int],
    start: list[int],
    step: list[int],
    lo: list[int],
    hi: list[int],
    whole: bool,
) -> ChunkTask:
    chunk_region = tuple(
        slice(a, a + (b - c - 1) * s + 1, s) for a, s, c, b in zip(start, step, lo, hi, strict=True)
    )
    out_region = tuple(slice(c, b) for c, b in zip(lo, hi, strict=True))
    return ChunkTask(tuple(coords), chunk_region, out_region, bool(whole))


def _empty(ndim: int) -> ChunkPlan:
    rows = np.empty((0, ndim), dtype=np.int64)
    return ChunkPlan(rows, rows, rows, rows, rows, np.empty(0, dtype=bool))


class _AxisChunks(NamedTuple):
    """For one axis, per touched chunk: its index, the first wanted element in it, the
    output span it fills, and whether the whole chunk is wanted."""

    chunk: np.ndarray
    local_start: np.ndarray
    out_start: np.ndarray
    out_stop: np.ndarray
    whole: np.ndarray


def _axis_chunks(sel: AxisSelection, chunk: int, size: int) -> _AxisChunks:
    # chunk by touched chunk, in Python integers: one pass per chunk the axis touches (a
    # strided selection's skipped chunks are never visited), which the plan holds anyway,
    # and no numpy call per step (small reads plan a few chunks per axis)
    start, step, count = sel.start, sel.step, sel.count
    chunks: list[int] = []
    local_starts: list[int] = []
    out_starts: list[int] = []
    out_stops: list[int] = []
    whole: list[bool] = []
    k = 0  # the first selected element not yet placed
    while k < count:
        first = start + k * step
        c = first // chunk
        lo = c * chunk
        hi = min(lo + chunk, size)
        last = min(count - 1, (hi - 1 - start) // step)  # the last selected element in it
        chunks.append(c)
        local_starts.append(first - lo)
        out_starts.append(k)
        out_stops.append(last + 1)
        whole.append(step == 1 and first == lo and start + last * step + 1 == hi)
        k = last + 1
    c_, local_start, out_start, out_stop = np.array(
        (chunks, local_starts, out_starts, out_stops), dtype=np.int64
    ).reshape(4, len(chunks))
    return _AxisChunks(c_, local_start, out_start, out_stop, np.array(whole, dtype=bool))


def chunk_plan(
    selection: Selection, shape: tuple[int, ...], chunk_shape: tuple[int, ...]
) -> ChunkPlan:
    """Every chunk the selection touches (C order of the chunk grid), computed per axis
    and broadcast over the grid."""
    per_axis = [
        _axis_chunks(sel, c, n)
        for sel, c, n in zip(selection.axes, chunk_shape, shape, strict=True)
    ]
    ndim = len(per_axis)
    counts = [len(a.chunk) for a in per_axis]
    # the five int64 columns of every chunk in one table, filled one axis at a time by
    # broadcasting that axis's values over the grid (a few numpy calls per axis, whatever
    # the number of chunks)
    table = np.empty((5, *counts, ndim), dtype=np.int64)
    whole = np.ones(counts, dtype=bool)
    for axis, (a, sel) in enumerate(zip(per_axis, selection.axes, strict=True)):
        grid = [1] * ndim
        grid[axis] = counts[axis]
        values = np.stack(
            (a.chunk, a.local_start, np.full_like(a.chunk, sel.step), a.out_start, a.out_stop)
        )
        table[..., axis] = values.reshape(5, *grid)
        whole &= a.whole.reshape(grid)
    n = math.prod(counts)
    coords, chunk_start, chunk_step, out_start, out_stop = table.reshape(5, n, ndim)
    return ChunkPlan(coords, chunk_start, chunk_step, out_start, out_stop, whole.reshape(n))
