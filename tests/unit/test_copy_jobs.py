"""The unit strided copy jobs are copied in, and the rewrite into it (emulated on bytes)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from linumpy_gpu.core.plan import chunk_plan
from linumpy_gpu.core.selection import normalize_selection
from linumpy_gpu.gpu.copy_jobs import (
    JOB_COLUMNS,
    SHAPE,
    SOURCE_STRIDES,
    TARGET_STRIDES,
    in_units,
    place_jobs,
    widest_unit,
)


def job(src: int, dst: int, shape, src_strides, dst_strides) -> np.ndarray:
    row = np.zeros(JOB_COLUMNS, dtype=np.int64)
    ndim = len(shape)
    row[0], row[1] = src, dst
    row[SHAPE : SHAPE + ndim] = shape
    row[SOURCE_STRIDES : SOURCE_STRIDES + ndim] = src_strides
    row[TARGET_STRIDES : TARGET_STRIDES + ndim] = dst_strides
    return row


def run(memory: np.ndarray, jobs: np.ndarray, ndim: int, unit: int) -> np.ndarray:
    """What the kernel does, element by element, on a byte array (addresses are offsets)."""
    out = memory.copy()
    for row in jobs:
        shape = row[SHAPE : SHAPE + ndim]
        for idx in itertools.product(*(range(int(n)) for n in shape)):
            idx = np.asarray(idx, dtype=np.int64)
            s = int(row[0] + (idx * row[SOURCE_STRIDES : SOURCE_STRIDES + ndim]).sum() * unit)
            d = int(row[1] + (idx * row[TARGET_STRIDES : TARGET_STRIDES + ndim]).sum() * unit)
            out[d : d + unit] = memory[s : s + unit]
    return out


# chunk (2, 3, 16) uint16, C order, into an output (4, 5, 40) uint16 at a given x offset
CHUNK = (2, 3, 16)
CHUNK_STRIDES = (48, 16, 1)
OUT_STRIDES = (200, 40, 1)
OUT_BASE = 4096


@pytest.mark.parametrize(
    ("x_offset", "expected"), [(0, 16), (8, 16), (4, 8), (2, 4), (1, 2), (3, 2)]
)
def test_contiguous_rows_copy_in_the_widest_unit_their_alignment_allows(x_offset, expected):
    jobs = np.stack(
        [
            job(0, OUT_BASE + 2 * x_offset, CHUNK, CHUNK_STRIDES, OUT_STRIDES),
            job(256, OUT_BASE + 2 * (x_offset + 400), CHUNK, CHUNK_STRIDES, OUT_STRIDES),
        ]
    )
    assert widest_unit(jobs, 3, 2) == expected
    memory = np.random.default_rng(0).integers(0, 256, 8192, dtype=np.uint8)
    wide = in_units(jobs, 3, 2, expected)
    np.testing.assert_array_equal(run(memory, wide, 3, expected), run(memory, jobs, 3, 2))


def test_reversed_outer_axes_still_copy_wide():
    # the output's first axis reversed: its stride is negative, a multiple of 16 bytes
    jobs = job(0, OUT_BASE + 3 * 400, CHUNK, CHUNK_STRIDES, (-200, 40, 1))[None]
    assert widest_unit(jobs, 3, 2) == 16
    memory = np.random.default_rng(1).integers(0, 256, 8192, dtype=np.uint8)
    np.testing.assert_array_equal(
        run(memory, in_units(jobs, 3, 2, 16), 3, 16), run(memory, jobs, 3, 2)
    )


@pytest.mark.parametrize("inner_strides", [(2, 1), (1, 2), (1, -1)])
def test_strided_or_reversed_rows_copy_element_by_element(inner_strides):
    s, d = inner_strides
    jobs = job(64, OUT_BASE + 64, (4, 8), (16 * s, s), (80, d))[None]
    assert widest_unit(jobs, 2, 2) == 2
    assert in_units(jobs, 2, 2, 2) is jobs


def test_one_unaligned_job_keeps_the_whole_launch_narrow():
    aligned = job(0, OUT_BASE, CHUNK, CHUNK_STRIDES, OUT_STRIDES)
    shifted = job(256, OUT_BASE + 802, CHUNK, CHUNK_STRIDES, OUT_STRIDES)
    assert widest_unit(np.stack([aligned, shifted]), 3, 2) == 2
    assert widest_unit(np.stack([aligned, aligned]), 3, 2) == 16


def test_wide_items_stay_their_own_width_or_wider():
    # float64 rows of 3 elements (24 bytes): 8-byte units, never narrower than an item
    jobs = job(0, 1024, (4, 3), (3, 1), (6, 1))[None]
    assert widest_unit(jobs, 2, 8) == 8
    jobs = job(0, 1024, (4, 4), (4, 1), (8, 1))[None]
    assert widest_unit(jobs, 2, 8) == 16


@pytest.mark.parametrize("seed", range(12))
def test_jobs_from_a_plan_place_every_chunk_as_numpy_indexing_does(seed):
    """The GPU's placing jobs come straight from the plan's rows: run on bytes (as the
    kernel would, in the unit it would pick), they give what indexing the array gives,
    with strided, reversed and dropped axes."""
    rng = np.random.default_rng(seed)
    shape = tuple(int(n) for n in rng.integers(3, 9, 3))
    chunks = tuple(int(c) for c in rng.integers(2, 5, 3))
    data = rng.integers(0, 60000, shape, dtype=np.uint16)
    index = []
    for n in shape:
        if rng.random() < 0.15:
            index.append(int(rng.integers(0, n)))
        else:
            step = int(rng.choice([1, 1, 2, 3, -1, -2]))
            index.append(slice(int(rng.integers(0, n)), None, step))
    sel = normalize_selection(tuple(index), shape)
    plan = chunk_plan(sel, shape, chunks)
    chunk_bytes = int(np.prod(chunks)) * 2
    padded = np.zeros([-(-n // c) * c for n, c in zip(shape, chunks, strict=True)], np.uint16)
    padded[tuple(slice(0, n) for n in shape)] = data
    out_base = len(plan) * chunk_bytes
    memory = np.zeros(out_base + int(np.prod(sel.full_shape)) * 2, dtype=np.uint8)
    for k, coords in enumerate(plan.coord_tuples()):
        block = padded[
            tuple(slice(c * n, (c + 1) * n) for c, n in zip(coords, chunks, strict=True))
        ]
        memory[k * chunk_bytes : (k + 1) * chunk_bytes] = block.reshape(-1).view(np.uint8)
    out_strides = np.cumprod((1, *sel.full_shape[:0:-1]))[::-1]
    jobs = place_jobs(
        plan,
        np.arange(len(plan), dtype=np.int64) * chunk_bytes,
        out_base,
        (chunks[1] * chunks[2], chunks[2], 1),
        out_strides,
        2,
    )
    unit = widest_unit(jobs, 3, 2)
    placed = run(memory, in_units(jobs, 3, 2, unit), 3, unit)[out_base:]
    work = placed.view(np.uint16).reshape(sel.full_shape)
    np.testing.assert_array_equal(sel.result_view(work), data[tuple(index)])
