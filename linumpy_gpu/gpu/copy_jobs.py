"""Strided copy jobs (one per chunk: decoded chunk -> output, or output -> packed chunk),
the unit they are copied in, and how many rows a thread block copies.

A job row (int64): source address, target address, shape[6], source strides[6], target
strides[6]; strides in elements, target strides negative for reversed views. Rows that are
contiguous on both sides are copied in the widest unit (16, 8 or 4 bytes) that every row
length, stride and address of the launch is a multiple of: a 128^3 uint16 chunk is rows of
256 bytes, 16 loads of 16 bytes instead of 128 of 2.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from linumpy_gpu.core.plan import ChunkPlan

JOB_COLUMNS = 20
SHAPE, SOURCE_STRIDES, TARGET_STRIDES = 2, 8, 14
WIDE_UNITS = (16, 8, 4)


def jobs_from(
    source: np.ndarray,
    target: np.ndarray,
    shape: np.ndarray,
    source_strides: np.ndarray | Sequence[int],
    target_strides: np.ndarray | Sequence[int],
) -> np.ndarray:
    """Job rows from per-job addresses (n,), shapes (n, ndim) and element strides (n, ndim)
    or one (ndim,) for every job."""
    n, ndim = shape.shape
    jobs = np.zeros((n, JOB_COLUMNS), dtype=np.int64)
    jobs[:, 0] = source
    jobs[:, 1] = target
    jobs[:, SHAPE : SHAPE + ndim] = shape
    jobs[:, SOURCE_STRIDES : SOURCE_STRIDES + ndim] = source_strides
    jobs[:, TARGET_STRIDES : TARGET_STRIDES + ndim] = target_strides
    return jobs


def place_jobs(
    plan: ChunkPlan,
    chunk_ptrs: np.ndarray,
    out_ptr: int,
    chunk_strides: Sequence[int],
    out_strides: Sequence[int],
    itemsize: int,
) -> np.ndarray:
    """Jobs that copy the wanted part of each decoded chunk of ``plan`` (chunk k at
    address ``chunk_ptrs[k]``, laid out with ``chunk_strides``) into its place in the
    output at ``out_ptr`` (``out_strides``; strides in elements), from the plan's rows."""
    cs = np.asarray(chunk_strides, dtype=np.int64)
    ds = np.asarray(out_strides, dtype=np.int64)
    return jobs_from(
        chunk_ptrs + (plan.chunk_start * cs).sum(axis=1) * itemsize,
        out_ptr + (plan.out_start * ds).sum(axis=1) * itemsize,
        plan.out_stop - plan.out_start,
        cs * plan.chunk_step,
        ds,
    )


def widest_unit(jobs: np.ndarray, ndim: int, itemsize: int) -> int:
    """The widest unit in bytes (at least ``itemsize``) that all ``jobs`` can be copied in."""
    last = ndim - 1
    if (
        not (jobs[:, SOURCE_STRIDES + last] == 1).all()
        or not (jobs[:, TARGET_STRIDES + last] == 1).all()
    ):
        return itemsize
    multiples = np.concatenate(
        [
            jobs[:, :2],
            jobs[:, SHAPE + last : SHAPE + last + 1] * itemsize,
            jobs[:, SOURCE_STRIDES : SOURCE_STRIDES + last] * itemsize,
            jobs[:, TARGET_STRIDES : TARGET_STRIDES + last] * itemsize,
        ],
        axis=1,
    )
    for unit in WIDE_UNITS:
        if unit <= itemsize:
            break
        if not (multiples % unit).any():
            return unit
    return itemsize


def in_units(jobs: np.ndarray, ndim: int, itemsize: int, unit: int) -> np.ndarray:
    """``jobs`` rewritten to copy ``unit``-byte elements (from :func:`widest_unit`)."""
    if unit == itemsize:
        return jobs
    out = jobs.copy()
    last = ndim - 1
    out[:, SHAPE + last] = jobs[:, SHAPE + last] * itemsize // unit
    for base in (SOURCE_STRIDES, TARGET_STRIDES):
        out[:, base : base + last] = jobs[:, base : base + last] * itemsize // unit
    return out
