"""Type names for the public API (for type checkers; nothing here imports cupy at run time)."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeAlias

import numpy as np

if TYPE_CHECKING:
    import cupy

NDArray: TypeAlias = "np.ndarray | cupy.ndarray"
"""What a read returns: a numpy array on the CPU, a cupy array on the GPU."""
