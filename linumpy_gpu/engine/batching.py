"""Split a read's chunks into batches that fit its memory bounds, and say where in the
output each batch may decode.

A GPU decoder is latency bound: a batch takes about as long for 30 chunks as for 500, so
speed comes from large batches. Large batches need scratch (decoded slots, compressed
bytes, the decoder's own workspace), and a full-level read must not hold much beyond its
output. Two things reconcile the two:

* a chunk whose place in the output is one contiguous run of bytes (plane chunks of a
  full-width read) decodes straight into that place and needs no slot;
* the output bytes that later batches will write are free until then, so a batch may use
  them as scratch, together with memory of the read's own, bounded by its budget. Early
  batches of a full read find most of the output unwritten; the last ones live mostly on
  the read's own buffer.

A batch's scratch is a few separate buffers (the decoder takes them one after another);
each goes to the smallest free region that holds it (:func:`best_fit`), here when planning
and in the decoder alike, so a batch planned to fit does fit.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from linumpy_gpu.core.placement import SLOT_ALIGN, Placement, align, fits
from linumpy_gpu.core.plan import ChunkPlan


@dataclass
class OutputGeometry:
    """Where each task writes in a C-contiguous output of ``nbytes`` bytes."""

    buffer: Any
    nbytes: int
    direct: np.ndarray  # per task: byte offset of its decoded chunk in place, or -1
    written_end: np.ndarray  # per task i: end of the bytes tasks[0..i] write (running max)


def output_geometry(
    plan: ChunkPlan,
    work: Any,
    chunk_shape: tuple[int, ...],
    itemsize: int,
    plain_chunks: bool,
) -> OutputGeometry | None:
    """The geometry of the chunks of ``plan`` (:func:`~.plan.chunk_plan`) in ``work``,
    or None when ``work`` is not one C-contiguous block (then batches neither decode in
    place nor borrow output memory)."""
    n = len(plan)
    if not n or not getattr(work, "flags", None) or not work.flags.c_contiguous:
        return None
    ndim = work.ndim
    strides = np.asarray(work.strides, dtype=np.int64)
    starts, stops = plan.out_start, plan.out_stop
    first = (starts * strides).sum(axis=1)
    end = ((stops - 1) * strides).sum(axis=1) + itemsize
    written_end = np.maximum.accumulate(end)
    direct = np.full(n, -1, dtype=np.int64)
    if plain_chunks:
        extents = stops - starts
        chunk = np.asarray(chunk_shape, dtype=np.int64)
        whole = plan.whole & (extents == chunk).all(axis=1)
        # contiguous: after the first axis longer than one, every axis spans the output
        full_axes = extents == np.asarray(work.shape, dtype=np.int64)
        ok = whole.copy()
        for axis in range(ndim):
            longer = (extents[:, :axis] > 1).any(axis=1) if axis else np.zeros(n, bool)
            ok &= ~longer | full_axes[:, axis]
        ok &= first % SLOT_ALIGN == 0
        direct[ok] = first[ok]
    return OutputGeometry(work, int(work.nbytes), direct, written_end)


def plan_batches(
    n_tasks: int,
    max_chunks: Callable[[], int],
    scratch_pieces: Callable[[int, int], Sequence[int]],
    geometry: OutputGeometry | None,
    budget: int | None,
    movable_slots: int | None = None,
) -> Iterator[tuple[int, int, Placement | None]]:
    """Yield (first, stop, placement) per batch, largest first-fit.

    ``max_chunks()`` is asked before each batch (it may learn, e.g. the compression ratio,
    from batches already read); ``scratch_pieces(n, n_direct)`` are the buffers a batch of n
    chunks needs beyond the output, in the order the decoder takes them; ``budget`` is the
    size of the read's own scratch buffer, which a batch uses beside the output bytes it
    may borrow (None: no cap, buffers beyond the output are allocated as needed).

    ``movable_slots``: the index among the pieces of the decoded slots, where the decoder
    can decode them into the batch's own part of the output (``Placement.own``) and move
    them, once decoded, into a later piece that decoding no longer needs (its workspace)
    before placing them. The batch's own output bytes then hold its slots, which is worth
    about one chunk in flight per chunk of the batch. Only for batches without chunks
    decoded in place, and only where they would not fit otherwise (the move is a copy)."""
    direct_prefix = None
    if geometry is not None:
        direct_prefix = np.concatenate([[0], np.cumsum(geometry.direct >= 0)])
    i = 0
    while i < n_tasks:
        limit = max(1, min(max_chunks(), n_tasks - i))
        if geometry is None:  # nothing borrowed: memory does not shrink as batches go
            limit = _even(n_tasks - i, limit)
        if budget is None and geometry is None:
            yield i, i + limit, None
            i += limit
            continue

        def pieces(m: int, i: int = i) -> Sequence[int]:
            n_direct = 0 if direct_prefix is None else int(direct_prefix[i + m] - direct_prefix[i])
            return scratch_pieces(m, n_direct)

        def free_from(m: int, i: int = i) -> int:
            assert geometry is not None
            return align(int(geometry.written_end[i + m - 1]))

        def tail(m: int) -> list[int]:
            return [] if geometry is None else [max(0, geometry.nbytes - free_from(m))]

        def own_span(m: int, p: Sequence[int], i: int = i) -> tuple[int, int] | None:
            """The batch's own output bytes, if its slots (in pieces ``p``) can decode
            there and move."""
            if geometry is None or movable_slots is None or len(p) <= movable_slots:
                return None  # (fewer pieces: e.g. a batch decoded on host cores alone)
            assert direct_prefix is not None
            if direct_prefix[i + m] != direct_prefix[i]:
                return None
            start = align(int(geometry.written_end[i - 1])) if i else 0
            stop = int(geometry.written_end[i + m - 1])
            slots = p[movable_slots]
            if not slots or align(slots) > stop - start:
                return None
            if max(p[movable_slots + 1 :], default=0) < slots:
                return None  # nothing to move them into
            return start, stop

        def fitting(m: int, rooms: list[int]) -> tuple[bool, tuple[int, int] | None]:
            """Whether a batch of m fits ``rooms``, and the own span it needs for that."""
            p = list(pieces(m))
            if fits(p, rooms):
                return True, None
            own = own_span(m, p)
            if own is None or movable_slots is None:
                return False, None
            p[movable_slots] = 0
            return fits(p, rooms), own

        def fits_tail(m: int) -> bool:
            return geometry is not None and fitting(m, tail(m))[0]

        def fits_with_spare(m: int) -> bool:
            return budget is None or fitting(m, tail(m) + [budget])[0]

        m_tail = _largest(limit, fits_tail)
        m = max(m_tail, _largest(limit, fits_with_spare), 1)
        wants_spare = bool(budget) and m > m_tail
        direct: list[int | None] = [None] * m
        scratch = None
        own = None
        if geometry is not None:
            direct = [int(d) if d >= 0 else None for d in geometry.direct[i : i + m]]
            if free_from(m) < geometry.nbytes:
                scratch = (free_from(m), geometry.nbytes)
            rooms = tail(m) + ([budget] if wants_spare and budget is not None else [])
            ok, own = fitting(m, rooms)
            if not ok:
                own = None  # a batch of one that fits nowhere: the decoder allocates
        buffer = None if geometry is None else geometry.buffer
        yield i, i + m, Placement(buffer, direct, scratch, wants_spare=wants_spare, own=own)
        i += m


def _even(left: int, cap: int) -> int:
    """The size of the next batch when ``left`` chunks go in batches of at most ``cap``:
    as few batches as that takes, of even size (a small last batch would still cost a
    whole decoder latency; the first batch's fetch is not overlapped, so smaller is
    sooner). Not where batches borrow the output: the first ones have the most memory."""
    return -(-left // -(-left // cap))


def _largest(limit: int, ok: Callable[[int], bool]) -> int:
    """Largest m in [1, limit] with ok(m) (ok is monotone: true up to some m), or 0."""
    if ok(limit):
        return limit
    lo, hi = 0, limit  # ok(lo) holds (or lo == 0), ok(hi) fails
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if ok(mid):
            lo = mid
        else:
            hi = mid
    return lo
