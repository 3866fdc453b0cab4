"""Batches under memory bounds, decoding in place and borrowing unwritten output bytes.

The GPU backend decodes straight into the output where a chunk's place is contiguous and
uses output bytes that later batches will write as scratch. Here a CPU backend does the
same, and scribbles over every byte of scratch it is lent, so any overlap between a
batch's scratch and data already placed shows up as wrong pixels.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
import zarr

from linumpy_gpu.backends.base import PLACED, BatchMemory
from linumpy_gpu.backends.cpu import CpuBackend
from linumpy_gpu.core.placement import best_fit, fits
from linumpy_gpu.core.plan import chunk_plan
from linumpy_gpu.core.selection import normalize_selection
from linumpy_gpu.engine.batching import output_geometry, plan_batches
from linumpy_gpu.engine.reader import ChunkedArrayReader


class RecordingStaging:
    """Stands in for pinned staging: remembers every buffer it hands out."""

    def __init__(self):
        self.buffers: list[bytearray] = []

    def reserve(self, n):
        buf = bytearray(n)
        self.buffers.append(buf)
        return memoryview(buf)

    def holds(self, view) -> bool:
        return any(view.obj is b for b in self.buffers)


class ScribblingBackend(CpuBackend, BatchMemory):
    """Decodes on the CPU, but uses placements the way the GPU backend does, including a
    host share: the last ``host`` chunks of a batch are fetched outside staging and get
    their slots first."""

    def memory(self):
        return self

    borrows_output = True

    def __init__(
        self, budget: int, per_chunk_scratch: float = 2.0, host: int = 0, movable: bool = False
    ):
        self.budget = budget
        self.per_chunk_scratch = per_chunk_scratch
        self.host = host
        self.movable = movable
        self.lent: list[tuple[int, int]] = []
        self.in_place = 0
        self.host_decoded = 0
        self.moved = 0
        self.spares: set[int] = set()

    def movable_slots(self, fmt):
        # like nvCOMP's: slots decode in the batch's own output bytes, then move into the
        # workspace (the second piece); here only without a host share, whose slots count
        # in the same piece
        return 0 if self.movable and not self.host else None

    def batch_bytes(self, read_nbytes):
        return 1 << 40

    def staging_batch_bytes(self):
        return 1 << 40

    def acquire_staging(self, expected_bytes=0):
        return RecordingStaging()

    def host_chunks(self, fmt, n_tasks):
        return self.host

    def scratch_pieces(self, fmt, n, n_direct, stored_fraction, n_host=0):
        on_device = n - n_host
        return ((n - n_direct) * fmt.nbytes, int(on_device * fmt.nbytes * self.per_chunk_scratch))

    def scratch_budget(self, out_nbytes, whole_level=True, tight=False):
        return self.budget

    def decode(self, chunks, fmt, array, staging=None, placement=None, sink=None):
        decoded = super().decode(chunks, fmt, array, staging)
        if placement is None:
            return decoded
        host_from = len(chunks) - placement.host
        for i, (_, data) in enumerate(chunks):
            # host chunks are read after the staged bytes go to the device: never staged
            assert staging.holds(data) != (i >= host_from), (i, host_from)
        self.host_decoded += placement.host
        flat = None if placement.buffer is None else placement.buffer.reshape(-1).view(np.uint8)
        regions = []  # like the GPU's workspace: the unwritten output tail, the spare
        if placement.scratch is not None:
            start, stop = placement.scratch
            self.lent.append((start, stop))
            regions.append(flat[start:stop])
        if placement.spare is not None:
            self.spares.add(id(placement.spare))
            regions.append(placement.spare)
        n_direct = sum(d is not None for d in placement.direct)
        need = list(self.scratch_pieces(fmt, len(chunks), n_direct, 1.0, placement.host))
        if placement.wants_spare:
            assert placement.spare is not None
        own = None
        if placement.own is not None:
            assert self.movable_slots(fmt) == 0 and n_direct == 0
            start, stop = placement.own
            assert stop <= placement.buffer.nbytes and (
                placement.scratch is None or stop <= placement.scratch[0]
            )
            own = flat[start:stop]
            own[...] = 0xCD  # where the slots decode: never anyone's placed data
            need[0] = 0
        # what the plan promised: the batch's buffers fit the regions it was lent (a batch
        # of one chunk goes ahead whatever it needs: the decoder allocates the rest)
        fitted = fits(need, [r.size for r in regions])
        assert fitted or len(chunks) == 1, (need, [r.size for r in regions])
        for region in regions:
            region[...] = 0xAB  # the decoder's workspace, scribbled on
        out = []
        for raw, offset in zip(decoded, placement.direct, strict=True):
            if offset is not None and isinstance(raw, np.ndarray):
                flat[offset : offset + raw.size] = raw
                self.in_place += 1
                out.append(PLACED)
            else:
                out.append(raw)
        if own is not None:
            return self._decode_moving(out, own, regions, need[1])
        # slots for the chunks to be placed live in the lent bytes (host slots first, as the
        # GPU backend carves them), each in the smallest region that holds it
        used = [0] * len(regions)
        order = list(range(host_from, len(chunks))) + list(range(host_from))
        for k in order:
            raw = out[k]
            if isinstance(raw, np.ndarray):
                r = best_fit([reg.size - u for reg, u in zip(regions, used, strict=True)], raw.size)
                if r is None:
                    assert not fitted, "a slot did not fit the lent memory"
                    continue
                slot = regions[r][used[r] : used[r] + raw.size]
                slot[...] = raw
                out[k] = slot
                used[r] += raw.size
        return out

    def _decode_moving(self, out, own, regions, workspace_bytes):
        """Slots decoded in the batch's own output bytes, then moved into the workspace."""
        slots, at = [], 0
        for k, raw in enumerate(out):
            if isinstance(raw, np.ndarray):
                assert at + raw.size <= own.size, "the slots outgrow the batch's own bytes"
                own[at : at + raw.size] = raw
                slots.append((k, at, raw.size))
                at += raw.size
        r = best_fit([reg.size for reg in regions], workspace_bytes)
        workspace = regions[r][:workspace_bytes] if r is not None else np.empty(at, np.uint8)
        assert workspace.size >= at
        for k, offset, size in slots:
            workspace[offset : offset + size] = own[offset : offset + size]
            out[k] = workspace[offset : offset + size]
        own[...] = 0xEF  # placing may write there first: the moved slots must not care
        self.moved += len(slots)
        return out


def _array(tmp_path, shape, chunks, **kw):
    rng = np.random.default_rng(0)
    data = rng.integers(0, 60000, size=shape, dtype=np.uint16)
    arr = zarr.create_array(
        str(tmp_path / "a.zarr"), shape=shape, chunks=chunks, dtype="u2", fill_value=7, **kw
    )
    arr[...] = data
    return arr, data


@pytest.mark.parametrize(
    "shape, chunks",
    [
        ((40, 64, 48), (8, 16, 16)),  # chunks never contiguous in the output
        ((40, 64, 48), (1, 64, 48)),  # plane chunks: all decode in place
        ((37, 61, 45), (8, 16, 16)),  # partial edge chunks
        ((37, 64, 48), (4, 64, 48)),  # slabs, the last one partial
    ],
)
@pytest.mark.parametrize("budget", [0, 20_000, 200_000])
@pytest.mark.parametrize("host, movable", [(0, False), (3, False), (0, True)])
def test_borrowed_scratch_never_overwrites_placed_data(
    tmp_path, shape, chunks, budget, host, movable
):
    arr, data = _array(tmp_path, shape, chunks)
    backend = ScribblingBackend(budget, host=host, movable=movable)
    reader = ChunkedArrayReader(arr, backend)
    np.testing.assert_array_equal(reader.read(), data)
    assert reader.last_profile["batches"] > 1
    if host:
        assert 0 < backend.host_decoded == reader.last_profile["host_chunks"]
    if chunks[1:] == shape[1:]:
        assert backend.in_place > 0
    if budget < 100_000:  # a budget too small for big batches: they borrow the output
        assert backend.lent, "no batch borrowed output memory"
    if movable and chunks[1:] != shape[1:]:
        assert backend.moved > 0, "no batch decoded its slots in its own output bytes"
    region = (slice(3, 30), slice(5, 60), slice(None))
    np.testing.assert_array_equal(reader.read(region), data[region])
    out = np.empty(data[region].shape, dtype=data.dtype)
    reader.read(region, out=out)
    np.testing.assert_array_equal(out, data[region])


@pytest.mark.parametrize("host", [0, 2])
def test_missing_and_strided_reads_with_borrowed_scratch(tmp_path, host):
    arr, data = _array(tmp_path, (32, 40, 40), (4, 40, 40))
    expected = data.copy()
    expected[8:12] = 7  # a missing chunk reads as the fill value
    os.remove(tmp_path / "a.zarr" / "c" / "2" / "0" / "0")
    backend = ScribblingBackend(0, host=host)
    reader = ChunkedArrayReader(zarr.open_array(str(tmp_path / "a.zarr")), backend)
    np.testing.assert_array_equal(reader.read(), expected)
    np.testing.assert_array_equal(reader.read((slice(None, None, 3),)), expected[::3])
    np.testing.assert_array_equal(reader.read((slice(None, None, -1),)), expected[::-1])


def test_plan_batches_respects_budget_and_order():
    shape, chunks = (64, 32, 32), (4, 8, 8)
    sel = normalize_selection((), shape)
    tasks = list(chunk_plan(sel, shape, chunks))
    work = np.empty(shape, dtype=np.uint16)
    geometry = output_geometry(chunk_plan(sel, shape, chunks), work, chunks, 2, True)
    per_chunk = 4 * 8 * 8 * 2

    def need(n, n_direct):  # slots, then a workspace twice their size
        return (n * per_chunk, 2 * n * per_chunk)

    budget = 10 * 3 * per_chunk
    batches = list(plan_batches(len(tasks), lambda: 64, need, geometry, budget))
    covered = [i for first, stop, _ in batches for i in range(first, stop)]
    assert covered == list(range(len(tasks)))
    for first, stop, placement in batches:
        n = stop - first
        assert n <= 64
        rooms = []
        if placement.scratch is not None:
            start, end = placement.scratch
            assert start >= geometry.written_end[stop - 1]
            rooms.append(end - start)
        if placement.wants_spare:
            rooms.append(budget)
        assert fits(need(n, 0), rooms)
        # no larger batch would have fit what it was lent
        if stop < len(tasks) and n < 64:
            tail = geometry.nbytes - -(-int(geometry.written_end[stop]) // 256) * 256
            assert not fits(need(n + 1, 0), [max(0, tail), budget])
    # big early batches borrow the output alone; later ones add the read's own buffer, and
    # the last ones borrow what is left of the output beside it
    assert batches[0][1] - batches[0][0] == 64 and not batches[0][2].wants_spare
    assert batches[-1][2].wants_spare
    both = [p for _, _, p in batches if p.wants_spare and p.scratch is not None]
    assert both, "no batch used the output tail and the spare together"
    assert len(batches) < 2 + len(tasks) // 10  # the spare alone holds 10 chunks


def test_batches_bounded_by_count_are_of_even_size():
    def sizes(n_tasks, cap):
        return [
            stop - first for first, stop, _ in plan_batches(n_tasks, lambda: cap, None, None, None)
        ]

    assert sizes(10, 4) == [4, 3, 3]
    assert sizes(8, 4) == [4, 4]
    assert sizes(3, 4) == [3]
    assert sizes(601, 268) == [201, 200, 200]


class BudgetRecordingBackend(ScribblingBackend):
    """Remembers whether each read asked for a full level's budget or a region's, and the
    spare buffers it was given."""

    def __init__(self, budget, region_budget):
        super().__init__(budget)
        self.region_budget = region_budget
        self.asked: list[bool] = []
        self.spare_sizes: list[int] = []

    def scratch_budget(self, out_nbytes, whole_level=True, tight=False):
        self.asked.append(whole_level)
        return self.budget if whole_level else self.region_budget

    def empty(self, shape, dtype):
        if np.dtype(dtype) == np.uint8 and len(shape) == 1:
            self.spare_sizes.append(int(np.prod(shape)))
        return super().empty(shape, dtype)


def test_region_reads_get_the_region_budget_and_only_what_their_batches_need(tmp_path):
    arr, data = _array(tmp_path, (37, 61, 45), (8, 16, 16))
    per_chunk = 8 * 16 * 16 * 2
    backend = BudgetRecordingBackend(budget=20_000, region_budget=1 << 30)
    reader = ChunkedArrayReader(arr, backend)
    np.testing.assert_array_equal(reader.read(()), data)
    np.testing.assert_array_equal(
        reader.read((slice(0, 8), slice(0, 16), slice(0, 30))), data[:8, :16, :30]
    )
    tiles = [(slice(0, 8), slice(0, 16), slice(0, 16)), (slice(9, 20), slice(3, 9), slice(40, 45))]
    for got, tile in zip(reader.read_regions(tiles), tiles, strict=True):
        np.testing.assert_array_equal(got, data[tile])
    assert backend.asked == [True, False, False]
    # the region read touches 2 chunks, the tiles 1 + 2: its own buffer is sized for those
    # batches (slots and a workspace of twice their size, with a quarter to spare), not for
    # the 1 GiB it may hold
    assert backend.spare_sizes[-2:] == [2 * 3 * per_chunk * 5 // 4, 3 * 3 * per_chunk * 5 // 4]


def test_slots_decoded_in_a_batch_own_output_bytes_make_fewer_batches():
    shape, chunks = (64, 32, 32), (4, 8, 8)
    sel = normalize_selection((), shape)
    tasks = list(chunk_plan(sel, shape, chunks))
    bounds = chunk_plan(sel, shape, chunks)
    geometry = output_geometry(bounds, np.empty(shape, dtype=np.uint16), chunks, 2, True)
    per_chunk = 4 * 8 * 8 * 2

    def need(n, n_direct):  # compressed bytes, slots, a workspace three times their size
        return (n * per_chunk // 2, n * per_chunk, 3 * n * per_chunk)

    budget = 10 * per_chunk
    plain = list(plan_batches(len(tasks), lambda: 256, need, geometry, budget))
    moving = list(plan_batches(len(tasks), lambda: 256, need, geometry, budget, 1))
    assert len(moving) < len(plain)
    assert all(p.own is None for _, _, p in plain)
    # batches without slots to move (the GPU backend's host-decoded batches) list fewer
    # pieces: planned as they are
    host_only = list(
        plan_batches(len(tasks), lambda: 256, lambda n, d: (n * per_chunk,), geometry, budget, 1)
    )
    assert all(p.own is None for _, _, p in host_only)
    for first, stop, placement in moving:
        if placement.own is None:
            continue
        start, end = placement.own
        # after every byte earlier batches wrote, up to the last this batch writes, and
        # before the output bytes lent as scratch
        assert start >= (geometry.written_end[first - 1] if first else 0)
        assert end == geometry.written_end[stop - 1]
        assert end - start >= (stop - first) * per_chunk
        assert placement.scratch is None or placement.scratch[0] >= end
        rooms = [placement.scratch[1] - placement.scratch[0]] if placement.scratch else []
        rooms += [budget] if placement.wants_spare else []
        assert fits((need(stop - first, 0)[0], 0, need(stop - first, 0)[2]), rooms)


def test_best_fit_takes_the_smallest_region_that_holds_a_buffer():
    assert best_fit([100, 40, 60], 50) == 2
    assert best_fit([100, 40, 60], 40) == 1
    assert best_fit([10, 20], 30) is None
    # a workspace that does not fit after slots in one region goes to the other
    assert fits([300, 512], [1024, 512])
    assert not fits([600, 600], [1024, 100])
    assert fits([0, 256], [256])


def test_geometry_marks_only_contiguous_whole_chunks():
    shape = (6, 10, 12)
    work = np.empty(shape, dtype=np.uint16)
    for chunks, expect_direct in [((1, 10, 12), True), ((2, 10, 12), True), ((2, 5, 12), True)]:
        sel = normalize_selection((), shape)
        tasks = list(chunk_plan(sel, shape, chunks))
        geo = output_geometry(chunk_plan(sel, shape, chunks), work, chunks, 2, True)
        for task, offset in zip(tasks, geo.direct, strict=True):
            region_first = work[tuple(slice(s.start, s.start + 1) for s in task.out_region)]
            address = region_first.__array_interface__["data"][0] - work.ctypes.data
            if offset >= 0:
                assert offset == address
                assert expect_direct
    # (2, 5, 6): rows of a chunk are not adjacent in the output
    bounds = chunk_plan(normalize_selection((), shape), shape, (2, 5, 6))
    assert (output_geometry(bounds, work, (2, 5, 6), 2, True).direct < 0).all()
    # a strided output view is never borrowed
    assert output_geometry(bounds, work[:, :, ::2], (2, 5, 6), 2, True) is None


@pytest.mark.parametrize("host", [0, 2])
def test_read_regions_share_batches_and_one_spare_buffer(tmp_path, host):
    """Tiles read together go through the same pipeline as full reads: batches within the
    budget, fetched ahead, host chunks staged apart, one scratch buffer for the whole call."""
    arr, data = _array(tmp_path, (37, 61, 45), (8, 16, 16))
    backend = ScribblingBackend(20_000, host=host)
    reader = ChunkedArrayReader(arr, backend)
    rng = np.random.default_rng(3)
    regions = [tuple(slice(int(a), int(a) + 12) for a in rng.integers(0, 25, 3)) for _ in range(9)]
    regions.append((slice(None, None, -4), 7, slice(2, 40, 3)))
    got = reader.read_regions(regions)
    for result, region in zip(got, regions, strict=True):
        np.testing.assert_array_equal(result, data[region])
    assert reader.last_profile["batches"] > 1
    assert len(backend.spares) == 1
    if host:
        assert backend.host_decoded > 0


def test_a_read_starts_from_the_mean_ratio_not_the_last_batch(tmp_path):
    """The ratio learned from a read's last batch sizes its next batch (its neighbours);
    the next read's first batch, often its largest, is sized from everything read so far."""
    shape, chunks = (64, 32, 32), (4, 8, 8)
    data = np.full(shape, 5, dtype=np.uint16)  # compresses well (and is stored: not the fill)
    data[32:] = np.random.default_rng(1).integers(0, 60000, size=(32, 32, 32), dtype=np.uint16)
    arr = zarr.create_array(str(tmp_path / "a.zarr"), shape=shape, chunks=chunks, dtype="u2")
    arr[...] = data
    reader = ChunkedArrayReader(arr, ScribblingBackend(20_000))
    np.testing.assert_array_equal(reader.read(), data)
    last = reader._stored_fraction  # the random half, at the end
    mean = reader._stored_total / reader._decoded_total
    assert mean < 0.75 * last
    tasks = chunk_plan(normalize_selection((), shape), shape, chunks)
    next(reader._batches(tasks, None, data.nbytes, True))
    assert reader._stored_fraction == mean


class TableHoldingBackend(BudgetRecordingBackend):
    """Holds per-batch tables outside the read's buffer, like the GPU backend."""

    table_per_chunk = 100

    def table_bytes(self, n_chunks):
        return n_chunks * self.table_per_chunk


def test_the_read_buffer_leaves_room_for_the_batch_tables_within_the_budget(tmp_path):
    arr, data = _array(tmp_path, (64, 32, 32), (4, 8, 8))
    n_chunks = 16 * 4 * 4
    budget = 40_000
    backend = TableHoldingBackend(budget, region_budget=budget)
    reader = ChunkedArrayReader(arr, backend)
    np.testing.assert_array_equal(reader.read(()), data)
    assert reader.last_profile["batches"] > 1
    # the largest batch the plan may make is the whole read here (staging is unbounded):
    # its tables come out of the budget, and nothing more does
    assert backend.spare_sizes == [budget - n_chunks * backend.table_per_chunk]


class CrowdedBackend(ScribblingBackend):
    """A device whose roomy budget runs out of memory midway (other work took what was
    free): the read's own buffer of that size fails; the tight budget's fits."""

    def __init__(self, roomy, tight, fits=None):
        super().__init__(roomy)
        self.tight = tight
        self.fits = tight if fits is None else fits
        self.asked_tight: list[bool] = []

    def scratch_budget(self, out_nbytes, whole_level=True, tight=False):
        self.asked_tight.append(tight)
        return self.tight if tight else self.budget

    def empty(self, shape, dtype):
        if np.dtype(dtype) == np.uint8 and len(shape) == 1 and int(np.prod(shape)) > self.fits:
            raise MemoryError("out of device memory")
        return super().empty(shape, dtype)


@pytest.mark.parametrize("regions", [False, True], ids=["read", "read_regions"])
def test_a_read_that_runs_out_of_memory_midway_is_done_again_under_the_tight_bound(
    tmp_path, regions
):
    arr, data = _array(tmp_path, (37, 61, 45), (8, 16, 16))
    backend = CrowdedBackend(roomy=1 << 20, tight=40_000)
    reader = ChunkedArrayReader(arr, backend)
    if regions:
        tiles = [(slice(0, 30), slice(0, 50), slice(0, 40)), (slice(5, 9), 3, slice(None))]
        for got, tile in zip(reader.read_regions(tiles), tiles, strict=True):
            np.testing.assert_array_equal(got, data[tile])
    else:
        np.testing.assert_array_equal(reader.read(()), data)
    assert backend.asked_tight[0] is False and backend.asked_tight[-1] is True


def test_a_read_out_of_memory_under_its_tightest_bound_raises_the_backend_error(tmp_path):
    arr, _ = _array(tmp_path, (37, 61, 45), (8, 16, 16))
    # no tighter bound to fall to
    backend = CrowdedBackend(roomy=1 << 20, tight=1 << 20, fits=40_000)
    with pytest.raises(MemoryError, match="not enough memory for a"):
        ChunkedArrayReader(arr, backend).read(())
