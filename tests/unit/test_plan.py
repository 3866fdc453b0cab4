"""The chunk plan: every chunk a selection touches, and its bounds as arrays, agree."""

from __future__ import annotations

import gc
import itertools

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from linumpy_gpu.core.plan import ChunkPlan, chunk_plan
from linumpy_gpu.core.selection import normalize_selection


def axis_spans(sel, chunk, size):
    """One axis spelled out element by element: per touched chunk (its index, the slice of
    it wanted, the slice of the output it fills, whether the whole chunk is wanted)."""
    wanted = [sel.start + k * sel.step for k in range(sel.count)]
    spans = []
    for c, group in itertools.groupby(range(sel.count), key=lambda k: wanted[k] // chunk):
        ks = list(group)
        first = wanted[ks[0]] - c * chunk
        in_chunk = slice(first, first + (len(ks) - 1) * sel.step + 1, sel.step)
        whole = sel.step == 1 and len(ks) == min(chunk, size - c * chunk)
        spans.append((c, in_chunk, slice(ks[0], ks[-1] + 1), whole))
    return spans


def plan_chunks(sel, shape, chunk_shape):
    """The plan's rows as tasks, in C order of the chunk grid."""
    return list(chunk_plan(sel, shape, chunk_shape))


def reference_plan(sel, shape, chunk_shape):
    """The plan spelled out: the product of each axis' spans, one combination at a time."""
    per_axis = [axis_spans(a, c, n) for a, c, n in zip(sel.axes, chunk_shape, shape, strict=True)]
    for combo in itertools.product(*per_axis):
        coords, chunk_region, out_region, whole = zip(*combo, strict=True)
        yield coords, chunk_region, out_region, all(whole)


@st.composite
def selections(draw):
    ndim = draw(st.integers(1, 4))
    shape = tuple(draw(st.integers(1, 30)) for _ in range(ndim))
    chunks = tuple(draw(st.integers(1, 12)) for _ in range(ndim))
    index = []
    for n in shape:
        if draw(st.booleans()) and draw(st.booleans()):
            index.append(draw(st.integers(-n, n - 1)))
        else:
            bound = st.none() | st.integers(-n - 2, n + 2)
            step = st.none() | st.integers(1, 5) | st.integers(-5, -1)
            index.append(slice(draw(bound), draw(bound), draw(step)))
    return normalize_selection(tuple(index), shape), shape, chunks


@settings(max_examples=300, deadline=None, derandomize=True)
@given(case=selections())
def test_plan_and_bounds_agree_with_the_spelled_out_plan(case):
    sel, shape, chunks = case
    tasks = list(plan_chunks(sel, shape, chunks))
    expected = list(reference_plan(sel, shape, chunks))
    assert [tuple(t) for t in tasks] == expected
    assert all(type(t.whole) is bool for t in tasks)
    bounds = chunk_plan(sel, shape, chunks)
    assert bounds.out_start.shape == bounds.out_stop.shape == (len(tasks), len(shape))
    for k, task in enumerate(tasks):
        assert list(bounds.out_start[k]) == [s.start for s in task.out_region]
        assert list(bounds.out_stop[k]) == [s.stop for s in task.out_region]
        assert bool(bounds.whole[k]) == task.whole


def test_a_full_level_of_small_chunks():
    shape, chunks = (256, 128, 128), (16, 16, 16)
    sel = normalize_selection((), shape)
    tasks = list(plan_chunks(sel, shape, chunks))
    assert len(tasks) == 16 * 8 * 8 and all(t.whole for t in tasks)
    bounds = chunk_plan(sel, shape, chunks)
    np.testing.assert_array_equal(bounds.out_stop - bounds.out_start, np.full((1024, 3), 16))
    assert tasks[-1].coords == (15, 7, 7)


def test_zero_dimensional_and_empty_selections():
    sel = normalize_selection((), ())
    assert list(plan_chunks(sel, (), ())) == [((), (), (), True)]
    assert len(chunk_plan(sel, (), ()).whole) == 1
    empty = normalize_selection((slice(3, 3),), (10,))
    assert list(plan_chunks(empty, (10,), (4,))) == []
    assert chunk_plan(empty, (10,), (4,)).out_start.shape == (0, 1)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(
    size=st.integers(1, 60),
    chunk=st.integers(1, 13),
    bounds=st.tuples(st.integers(-70, 70), st.integers(-70, 70)),
    step=st.integers(1, 9),
)
def test_axis_spans_group_the_selected_elements_by_chunk(size, chunk, bounds, step):
    sel = normalize_selection((slice(bounds[0], bounds[1], step),), (size,)).axes[0]
    wanted = np.arange(sel.start, sel.stop, sel.step)[: sel.count]
    spans = axis_spans(sel, chunk, size)
    assert [c for c, *_ in spans] == sorted(set((wanted // chunk).tolist()))
    for c, in_chunk, in_out, whole in spans:
        mine = wanted[in_out]
        assert len(mine) and (mine // chunk == c).all()
        np.testing.assert_array_equal(np.arange(size)[c * chunk :][in_chunk], mine)
        assert whole == (step == 1 and len(mine) == min(chunk, size - c * chunk))
    assert sum(len(wanted[s[2]]) for s in spans) == sel.count


@settings(max_examples=100, deadline=None, derandomize=True)
@given(case=selections(), data=st.data())
def test_rows_of_a_plan_are_the_plan_of_those_chunks(case, data):
    sel, shape, chunks = case
    plan = chunk_plan(sel, shape, chunks)
    tasks = list(plan)
    if not tasks:
        return
    k = data.draw(st.integers(0, len(tasks) - 1))
    assert plan[k] == tasks[k] and plan.coords_of(k) == tasks[k].coords
    a, b = sorted(data.draw(st.tuples(st.integers(0, len(tasks)), st.integers(0, len(tasks)))))
    assert list(plan[a:b]) == tasks[a:b]
    rows = data.draw(st.lists(st.integers(0, len(tasks) - 1), max_size=12))
    picked = plan[np.asarray(rows, dtype=np.intp)]
    assert list(picked) == [tasks[r] for r in rows]
    joined = ChunkPlan.concatenate([plan[a:b], picked], len(shape))
    assert list(joined) == tasks[a:b] + [tasks[r] for r in rows]
    assert plan.coord_tuples() == [t.coords for t in tasks]


def test_planning_a_level_leaves_nothing_per_chunk_for_the_garbage_collector():
    """A full level of small chunks is tens of thousands of chunks; a plan of them is a
    handful of arrays, whatever the number of chunks."""
    shape, chunks = (2048, 1024, 1024), (64, 64, 64)
    sel = normalize_selection((), shape)
    gc.collect()
    gc.disable()
    try:
        before = len(gc.get_objects())
        plan = chunk_plan(sel, shape, chunks)
        after = len(gc.get_objects())
    finally:
        gc.enable()
    assert len(plan) == 8192
    assert after - before < 50
