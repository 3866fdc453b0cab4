"""The shared read engine (planning, fetching, decoding, assembly) and its CPU backend."""

from linumpy_gpu.backends.base import Backend, CpuBackend
from linumpy_gpu.core.layout import ArrayLayout, layout_of
from linumpy_gpu.core.selection import Selection, normalize_selection
from linumpy_gpu.engine.reader import ChunkedArrayReader

__all__ = [
    "ArrayLayout",
    "Backend",
    "ChunkedArrayReader",
    "CpuBackend",
    "Selection",
    "layout_of",
    "normalize_selection",
]
