"""Plan a selection into the chunks it touches and where each lands in the output."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import NamedTuple

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
    spans = []
    for c in range(start // chunk, last // chunk + 1):
        lo = c * chunk
        hi = min(lo + chunk, size)
        k0 = max(0, -(-(lo - start) // step))
        k1 = min(count - 1, (hi - 1 - start) // step)
        if k0 > k1:
            continue
        local_start = start + k0 * step - lo
        local_stop = start + k1 * step - lo + 1
        whole = step == 1 and local_start == 0 and local_stop == hi - lo
        spans.append((c, slice(local_start, local_stop, step), slice(k0, k1 + 1), whole))
    return spans


def plan_chunks(
    selection: Selection, shape: tuple[int, ...], chunk_shape: tuple[int, ...]
) -> Iterator[ChunkTask]:
    """Every chunk the selection touches, in C order of the chunk grid."""
    per_axis = [
        axis_spans(sel, c, n) for sel, c, n in zip(selection.axes, chunk_shape, shape, strict=True)
    ]
    if not per_axis:  # a 0-d array: one chunk
        yield ChunkTask((), (), (), True)
        return
    for combo in itertools.product(*per_axis):
        coords, chunk_region, out_region, whole = zip(*combo, strict=True)
        yield ChunkTask(coords, chunk_region, out_region, all(whole))


def count_chunks(selection: Selection, shape: tuple[int, ...], chunk_shape: tuple[int, ...]) -> int:
    n = 1
    for sel, c, size in zip(selection.axes, chunk_shape, shape, strict=True):
        n *= len(axis_spans(sel, c, size))
    return n
