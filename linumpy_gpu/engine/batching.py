"""Split a read's chunks into batches that fit its memory bounds, and say where in the
output each batch may decode.

A GPU decoder is latency bound: a batch takes about as long for 30 chunks as for 500, so
speed comes from large batches. Large batches need scratch (decoded slots, compressed
bytes, the decoder's own workspace), and a full-level read must not hold much beyond its
output. Two things reconcile the two:

* a chunk whose place in the output is one contiguous run of bytes (plane chunks of a
  full-width read) decodes straight into that place and needs no slot;
* the output bytes that later batches will write are free until then, so a batch may use
  them as scratch. Only the tail of a read, where little of the output is left unwritten,
  falls back to memory of its own, bounded by the read's budget.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .plan import ChunkTask

SLOT_ALIGN = 256


@dataclass
class OutputGeometry:
    """Where each task writes in a C-contiguous output of ``nbytes`` bytes."""

    buffer: Any
    nbytes: int
    direct: np.ndarray  # per task: byte offset of its decoded chunk in place, or -1
    written_end: np.ndarray  # per task i: end of the bytes tasks[0..i] write (running max)


@dataclass
class Placement:
    """Output memory one batch may use: chunks that land in place, and free scratch."""

    buffer: Any  # the output (None: no output geometry)
    direct: list[int | None]  # per task of the batch
    scratch: tuple[int, int] | None  # [start, stop) bytes of ``buffer`` unused until later
    spare: Any = None  # else: the read's own scratch buffer (within its budget), if any
    host: int = 0  # the batch's last ``host`` chunks are decoded on host cores


def output_geometry(
    tasks: Sequence[ChunkTask],
    work: Any,
    chunk_shape: tuple[int, ...],
    itemsize: int,
    plain_chunks: bool,
) -> OutputGeometry | None:
    """The geometry of ``tasks`` in ``work``, or None when ``work`` is not one C-contiguous
    block (then batches neither decode in place nor borrow output memory)."""
    if not tasks or not getattr(work, "flags", None) or not work.flags.c_contiguous:
        return None
    ndim = work.ndim
    strides = np.asarray(work.strides, dtype=np.int64)
    starts = np.array([[s.start for s in t.out_region] for t in tasks], dtype=np.int64)
    stops = np.array([[s.stop for s in t.out_region] for t in tasks], dtype=np.int64)
    first = (starts * strides).sum(axis=1)
    end = ((stops - 1) * strides).sum(axis=1) + itemsize
    written_end = np.maximum.accumulate(end)
    direct = np.full(len(tasks), -1, dtype=np.int64)
    if plain_chunks:
        extents = stops - starts
        chunk = np.asarray(chunk_shape, dtype=np.int64)
        whole = np.array([t.whole for t in tasks]) & (extents == chunk).all(axis=1)
        # contiguous: after the first axis longer than one, every axis spans the output
        full_axes = extents == np.asarray(work.shape, dtype=np.int64)
        ok = whole.copy()
        for axis in range(ndim):
            longer = (extents[:, :axis] > 1).any(axis=1) if axis else np.zeros(len(tasks), bool)
            ok &= ~longer | full_axes[:, axis]
        ok &= first % SLOT_ALIGN == 0
        direct[ok] = first[ok]
    return OutputGeometry(work, int(work.nbytes), direct, written_end)


def plan_batches(
    n_tasks: int,
    max_chunks: Callable[[], int],
    scratch_bytes: Callable[[int, int], int],
    geometry: OutputGeometry | None,
    budget: int | None,
) -> Iterator[tuple[int, int, Placement | None]]:
    """Yield (first, stop, placement) per batch, largest first-fit.

    ``max_chunks()`` is asked before each batch (it may learn, e.g. the compression ratio,
    from batches already read); ``scratch_bytes(n, n_direct)`` is the memory a batch of n
    chunks needs beyond the output; ``budget`` caps that memory where it cannot borrow the
    output's (None: no cap)."""
    direct_prefix = None
    if geometry is not None:
        direct_prefix = np.concatenate([[0], np.cumsum(geometry.direct >= 0)])
    i = 0
    while i < n_tasks:
        limit = max(1, min(max_chunks(), n_tasks - i))
        if budget is None and geometry is None:
            yield i, i + limit, None
            i += limit
            continue

        def n_direct(m: int, i: int = i) -> int:
            return 0 if direct_prefix is None else int(direct_prefix[i + m] - direct_prefix[i])

        def fits_budget(m: int) -> bool:
            return budget is None or scratch_bytes(m, n_direct(m)) <= budget

        def fits_output(m: int, i: int = i) -> bool:
            if geometry is None:
                return False
            free_from = _align(int(geometry.written_end[i + m - 1]))
            return scratch_bytes(m, n_direct(m)) <= geometry.nbytes - free_from

        m_out = _largest(limit, fits_output)
        m = max(m_out, _largest(limit, fits_budget), 1)
        if geometry is not None:
            use_output = m_out >= m
            free_from = _align(int(geometry.written_end[i + m - 1]))
            placement = Placement(
                geometry.buffer,
                [int(d) if d >= 0 else None for d in geometry.direct[i : i + m]],
                (free_from, geometry.nbytes) if use_output else None,
            )
        else:
            placement = Placement(None, [None] * m, None)
        yield i, i + m, placement
        i += m


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


def _align(n: int) -> int:
    return -(-n // SLOT_ALIGN) * SLOT_ALIGN
