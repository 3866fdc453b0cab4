"""Normalise numpy-style basic indices into per-axis (start, step, count) selections."""

from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import Any

from linumpy_gpu.errors import SelectionError, short_repr


@dataclass(frozen=True)
class AxisSelection:
    """Elements ``start, start + step, ...`` (``count`` of them) of one axis, step > 0.

    ``dropped`` marks an integer index (the axis disappears from the result);
    ``reversed`` a negative step (the engine reads forwards, the result is a reversed view).
    """

    start: int
    step: int
    count: int
    dropped: bool = False
    reversed: bool = False

    @property
    def stop(self) -> int:
        """One past the last element selected."""
        return self.start + (self.count - 1) * self.step + 1 if self.count else self.start


@dataclass(frozen=True)
class Selection:
    axes: tuple[AxisSelection, ...]

    @property
    def full_shape(self) -> tuple[int, ...]:
        """Shape with dropped axes kept as length 1: the shape the engine assembles."""
        return tuple(a.count for a in self.axes)

    @property
    def shape(self) -> tuple[int, ...]:
        """Shape of the result the user sees."""
        return tuple(a.count for a in self.axes if not a.dropped)

    @property
    def size(self) -> int:
        """Elements selected."""
        n = 1
        for a in self.axes:
            n *= a.count
        return n

    def result_view(self, full: Any) -> Any:
        """From an array of ``full_shape``, the view the user asked for."""
        index = tuple(
            0 if a.dropped else slice(None, None, -1) if a.reversed else slice(None)
            for a in self.axes
        )
        # The trailing Ellipsis keeps an all-integer index a 0-d view, not a copied scalar.
        return full[index + (Ellipsis,)]

    def writable_full_view(self, out: Any) -> Any:
        """From a user ``out`` array of ``shape``, a view of ``full_shape`` in read order."""
        index = tuple(
            None if a.dropped else slice(None, None, -1) if a.reversed else slice(None)
            for a in self.axes
        )
        return out[index]


def normalize_selection(index: Any, shape: tuple[int, ...]) -> Selection:
    """Turn ``index`` (ints, slices, Ellipsis, or a tuple of them) into a :class:`Selection`.

    Raises :class:`SelectionError` for out-of-bounds integers, too many indices, and
    advanced indexing (arrays, lists, booleans, ``None``), which only numpy semantics define.
    """
    if isinstance(index, Selection):
        return index
    if not isinstance(index, tuple):
        index = (index,)
    n_ellipsis = sum(1 for i in index if i is Ellipsis)
    if n_ellipsis > 1:
        raise SelectionError("an index can only have a single ellipsis ('...')")
    explicit = len(index) - n_ellipsis
    if explicit > len(shape):
        raise SelectionError(
            f"too many indices: array is {len(shape)}-dimensional, but {explicit} were indexed"
        )
    if n_ellipsis:
        at = next(i for i, v in enumerate(index) if v is Ellipsis)
        index = index[:at] + (slice(None),) * (len(shape) - explicit) + index[at + 1 :]
    else:
        index = index + (slice(None),) * (len(shape) - explicit)
    return Selection(
        tuple(_axis(i, n, axis) for axis, (i, n) in enumerate(zip(index, shape, strict=True)))
    )


def _axis(item: Any, size: int, axis: int) -> AxisSelection:
    if isinstance(item, slice):
        for part in (item.start, item.stop, item.step):
            if part is not None and not _is_int(part):
                raise SelectionError(
                    f"slice bounds must be integers, got {short_repr(item, 60)} on axis {axis}"
                )
        if item.step == 0:
            raise SelectionError(f"slice step cannot be zero (axis {axis})")
        start, stop, step = item.indices(size)
        if abs(step) > size:
            # a step past the axis selects one element at most: kept within the axis, it
            # says the same and fits the 64-bit integers the plans are made of
            step = max(1, size) if step > 0 else -max(1, size)
        count = len(range(start, stop, step))
        if step > 0:
            return AxisSelection(start, step, count)
        first = start + (count - 1) * step if count else 0
        return AxisSelection(first, -step, count, reversed=True)
    if _is_int(item):
        i = int(item)
        if not -size <= i < size:
            raise SelectionError(f"index {i} is out of bounds for axis {axis} with size {size}")
        return AxisSelection(i % size, 1, 1, dropped=True)
    raise SelectionError(
        f"unsupported index {short_repr(item, 60)} on axis {axis}: only integers, slices and '...' "
        "(numpy basic indexing) are supported; read a region and index the result for more"
    )


def _is_int(v: Any) -> bool:
    return isinstance(v, numbers.Integral) and not isinstance(v, bool)
