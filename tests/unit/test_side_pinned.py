"""Host buffers beside the staging ring: pinned while all of them fit one budget."""

from __future__ import annotations

import numpy as np
import pytest

from linumpy_gpu.gpu.pinned import MIN_BYTES, GrowingHostBuffer, SidePinnedBudget

MiB = 1 << 20


def fake_pinned(allocations: list[int]):
    def alloc(nbytes: int) -> bytearray:
        allocations.append(nbytes)
        return bytearray(nbytes)

    return alloc


def test_buffers_grow_by_doubling_and_are_reused():
    # a budget of exactly the largest buffer: growing reserves only the difference, so the
    # bytes held never pass what the buffer holds at the end
    budget, made = SidePinnedBudget(6 * MiB), []
    buffer = GrowingHostBuffer(budget, fake_pinned(made))
    first = buffer.get(100)
    assert buffer.is_pinned and first.size == MIN_BYTES
    assert buffer.get(MIN_BYTES) is first  # no new allocation while it fits
    assert buffer.get(3 * MiB).size == 3 * MiB  # more than double: what was asked
    assert buffer.get(4 * MiB).size == 6 * MiB  # else double
    assert made == [MIN_BYTES, 3 * MiB, 6 * MiB]
    assert budget.pinned == 6 * MiB  # the old buffers were given back on growth


def test_past_the_budget_buffers_are_ordinary_memory_and_not_kept():
    budget, made = SidePinnedBudget(10 * MiB), []
    first, second = (
        GrowingHostBuffer(budget, fake_pinned(made)),
        GrowingHostBuffer(budget, fake_pinned(made)),
    )
    first.get(6 * MiB)
    view = second.get(6 * MiB)  # 4 MiB left: not pinned
    assert not second.is_pinned and view.size == 6 * MiB and isinstance(view, np.ndarray)
    assert second.capacity == 0 and budget.pinned == 6 * MiB
    assert second.get(3 * MiB).size == 3 * MiB and second.is_pinned  # 3 MiB fits
    assert second.get(5 * MiB).size == 5 * MiB and not second.is_pinned  # 6 or 5: no room
    assert second.get(2 * MiB).size == 3 * MiB and second.is_pinned  # the 3 MiB one again
    assert budget.pinned == 9 * MiB <= budget.budget


def test_a_buffer_gives_its_bytes_back_when_it_goes():
    budget = SidePinnedBudget(64 * MiB)
    buffer = GrowingHostBuffer(budget, fake_pinned([]))
    buffer.get(5 * MiB)
    assert budget.pinned == 5 * MiB
    del buffer
    assert budget.pinned == 0


def test_a_failed_pinned_allocation_gives_its_reservation_back():
    budget = SidePinnedBudget(64 * MiB)

    def refuse(nbytes: int):
        raise MemoryError("cudaHostAlloc failed")

    with pytest.raises(MemoryError):
        GrowingHostBuffer(budget, refuse).get(2 * MiB)
    assert budget.pinned == 0
