"""The read and write engines: one implementation for every backend.

A read goes region -> chunk plan -> batches bounded by the backend's memory -> fetched bytes
-> batched decode -> placed chunks; a write goes region -> storage units -> gathered chunks
-> batched encode -> atomic files.
"""

from linumpy_gpu.engine.reader import ChunkedArrayReader
from linumpy_gpu.engine.writer import ChunkedArrayWriter

__all__ = ["ChunkedArrayReader", "ChunkedArrayWriter"]
