"""The shared read engine (planning, fetching, decoding, assembly) and its CPU backend."""

from .backend import Backend, CpuBackend
from .layout import ArrayLayout, layout_of
from .reader import ChunkedArrayReader
from .selection import Selection, normalize_selection

__all__ = [
    "ArrayLayout",
    "Backend",
    "ChunkedArrayReader",
    "CpuBackend",
    "Selection",
    "layout_of",
    "normalize_selection",
]
