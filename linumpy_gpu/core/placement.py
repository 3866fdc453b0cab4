"""Where a batch's buffers go: the output memory a batch may use, and the first-fit rule
the batch planner and the GPU decoder share (so a batch planned to fit does fit)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

# Every buffer carved from shared memory starts on this boundary (device and pinned alike).
SLOT_ALIGN = 256


@dataclass
class Placement:
    """Output memory one batch may use: chunks that land in place, and free scratch."""

    buffer: Any  # the output (None: no output geometry)
    direct: list[int | None]  # per task of the batch
    scratch: tuple[int, int] | None  # [start, stop) bytes of ``buffer`` unused until later
    spare: Any = None  # the read's own scratch buffer (within its budget), if it needs one
    host: int = 0  # the batch's last ``host`` chunks are decoded on host cores
    wants_spare: bool = False  # planned to fit only with the read's own buffer too
    # [start, stop) bytes of ``buffer`` that this batch writes and no earlier batch did: its
    # slots may decode there, if the decoder moves them out before placing them
    own: tuple[int, int] | None = None


def best_fit(rooms: Sequence[int], nbytes: int) -> int | None:
    """Index of the smallest of ``rooms`` (free bytes per region) that holds ``nbytes``, the
    first of equals; None when none does."""
    best = None
    for k, room in enumerate(rooms):
        if nbytes <= room and (best is None or room < rooms[best]):
            best = k
    return best


def fits(pieces: Sequence[int], rooms: Sequence[int]) -> bool:
    """Whether buffers of ``pieces`` bytes, taken in this order by :func:`best_fit` and each
    aligned to ``SLOT_ALIGN``, all fit in regions of ``rooms`` free bytes."""
    left = list(rooms)
    for piece in pieces:
        if piece <= 0:
            continue
        k = best_fit(left, piece)
        if k is None:
            return False
        left[k] = max(0, left[k] - align(piece))
    return True


def align(n: int) -> int:
    """``n`` rounded up to a multiple of ``SLOT_ALIGN``."""
    return -(-n // SLOT_ALIGN) * SLOT_ALIGN
