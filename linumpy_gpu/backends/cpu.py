"""The CPU backend: numpy arrays, chunks decoded and encoded by numcodecs on a thread pool
(numcodecs releases the GIL, so this scales with cores)."""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from linumpy_gpu.backends.base import PLACED, Backend, ChunkSink, EncodedChunk, EncodedChunks
from linumpy_gpu.codecs import decode_chain
from linumpy_gpu.core.assemble import chunk_array, place
from linumpy_gpu.core.layout import ChunkFormat
from linumpy_gpu.core.plan import ChunkPlan, ChunkTask
from linumpy_gpu.errors import ChunkDecodeError, CodecError, OutputMismatchError


class CpuBackend(Backend):
    """Arrays in numpy; chunks decoded and encoded with numcodecs on a thread pool."""

    name = "cpu"
    xp = np

    _pool: ThreadPoolExecutor | None = None
    _pool_lock = threading.Lock()

    @classmethod
    def pool(cls) -> ThreadPoolExecutor:
        """The process's decode thread pool (one thread per core)."""
        with cls._pool_lock:
            if cls._pool is None:
                cls._pool = ThreadPoolExecutor(
                    os.cpu_count() or 2, thread_name_prefix="linumpy-decode"
                )
            return cls._pool

    def empty(self, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        return np.empty(shape, dtype=dtype)

    def owns(self, array: Any) -> bool:
        return isinstance(array, np.ndarray)

    def place_all(
        self,
        work: Any,
        tasks: ChunkPlan,
        raws: Sequence[Any],
        fmt: ChunkFormat,
        dtype: np.dtype,
    ) -> None:
        """Chunks go to disjoint regions of ``work``: copy them on the pool (numpy drops
        the GIL while copying)."""
        if len(tasks) < 4:
            return super().place_all(work, tasks, raws, fmt, dtype)

        def one(item: tuple[ChunkTask, Any]) -> None:
            task, raw = item
            place(work, task.out_region, chunk_array(raw, fmt, dtype), task.chunk_region)

        list(self.pool().map(one, zip(tasks, raws, strict=True)))
        return None

    def from_any(self, array: Any) -> np.ndarray:
        return array.get() if hasattr(array, "__cuda_array_interface__") else np.asarray(array)

    def encode_regions(
        self,
        data: Any,
        regions: Sequence[Any],
        chunk_shape: tuple[int, ...],
        fill_value: Any,
        zstd: tuple[int, bool] | None,
    ) -> EncodedChunks:
        """Each chunk copied out of ``data`` and encoded by one pool thread: no pass over
        the whole batch, and no more than a chunk per thread held above the frames."""
        codec = None
        if zstd is not None:
            import numcodecs

            codec = numcodecs.Zstd(level=zstd[0], checksum=zstd[1])
        full = tuple(chunk_shape)

        def one(region: Any) -> bytes:
            extent = tuple(r.stop - r.start for r in region)
            if extent == full:
                chunk = np.ascontiguousarray(data[region])
            else:
                chunk = np.full(full, fill_value, dtype=data.dtype)
                chunk[tuple(slice(0, e) for e in extent)] = data[region]
            return bytes(codec.encode(chunk)) if codec is not None else chunk.tobytes()

        if len(regions) < 2:
            return EncodedChunks([one(r) for r in regions])
        return EncodedChunks(list(self.pool().map(one, regions)))

    def check_out(self, out: Any, shape: tuple[int, ...], dtype: np.dtype) -> None:
        super().check_out(out, shape, dtype)
        if not out.flags.writeable:
            raise OutputMismatchError("out is read-only")

    def decode(
        self,
        chunks: Sequence[EncodedChunk],
        fmt: ChunkFormat,
        array: str,
        staging: Any = None,
        placement: Any = None,
        sink: ChunkSink | None = None,
    ) -> list[Any]:
        def one(i: int) -> Any:
            key, data = chunks[i]
            try:
                raw = decode_chain(data, fmt.codecs, fmt.nbytes)
            except CodecError as exc:
                return ChunkDecodeError(array, key, str(exc))
            if sink is None:
                return np.frombuffer(raw, dtype=np.uint8)
            sink(i, np.frombuffer(raw, dtype=np.uint8))
            return PLACED

        if len(chunks) <= 1:
            return [one(i) for i in range(len(chunks))]
        return list(self.pool().map(one, range(len(chunks))))


def _fresh_pool_after_fork() -> None:
    # a child made by fork holds the parent's pool without its threads: it starts its own
    CpuBackend._pool = None
    CpuBackend._pool_lock = threading.Lock()


os.register_at_fork(after_in_child=_fresh_pool_after_fork)
