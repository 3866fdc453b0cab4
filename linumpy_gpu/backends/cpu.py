"""The CPU backend: numpy arrays, chunks decoded and encoded by numcodecs on a thread pool
(numcodecs releases the GIL, so this scales with cores)."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np

from linumpy_gpu.backends.base import PLACED, Backend, ChunkSink, EncodedChunk, EncodedChunks
from linumpy_gpu.codecs import decode_chain, decode_chain_into, decodes_in_place
from linumpy_gpu.core.assemble import chunk_array, place
from linumpy_gpu.core.layout import ChunkFormat
from linumpy_gpu.core.plan import ChunkPlan, ChunkTask
from linumpy_gpu.errors import ChunkDecodeError, CodecError, OutputMismatchError

# Decode buffers kept between reads (see _ScratchBuffers): a 4 MiB chunk per core on
# machines of up to 16 cores.
SCRATCH_KEEP_BYTES = 64 << 20


class CpuBackend(Backend):
    """Arrays in numpy; chunks decoded and encoded with numcodecs on a thread pool."""

    name = "cpu"
    xp = np

    _pool: ThreadPoolExecutor | None = None
    _pool_lock = threading.Lock()
    threads = os.cpu_count() or 2  # of the decode pool: one per core

    @classmethod
    def pool(cls) -> ThreadPoolExecutor:
        """The process's decode thread pool (one thread per core)."""
        with cls._pool_lock:
            if cls._pool is None:
                cls._pool = ThreadPoolExecutor(cls.threads, thread_name_prefix="linumpy-decode")
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
        """Chunks decoded by the calling thread and pool threads, each taking the next
        chunk as it is free. Where ``sink`` places each chunk as it is decoded and the
        codec decodes in place, a thread decodes every chunk it takes into one buffer of
        its own: no buffer per chunk for the system to map and zero."""
        in_place = sink is not None and decodes_in_place(fmt.codecs)
        taken: list[np.ndarray] = []  # the threads' buffers, given back once all are done

        def one(i: int, scratch: list[np.ndarray]) -> Any:
            key, data = chunks[i]
            if in_place:
                assert sink is not None
                if not scratch:
                    scratch.append(_scratch.take(fmt.nbytes))
                    taken.append(scratch[0])
                why = decode_chain_into(data, fmt.codecs, scratch[0])
                if why is not None:
                    return ChunkDecodeError(array, key, why)
                sink(i, scratch[0])  # places the chunk before the buffer takes the next
                return PLACED
            try:
                raw = decode_chain(data, fmt.codecs, fmt.nbytes)
            except CodecError as exc:
                return ChunkDecodeError(array, key, str(exc))
            if sink is None:
                return np.frombuffer(raw, dtype=np.uint8)
            sink(i, np.frombuffer(raw, dtype=np.uint8))
            return PLACED

        try:
            return self.run_each(one, len(chunks))
        finally:
            _scratch.give(taken)

    def run_each(self, one: Callable[[int, list[Any]], Any], n: int) -> list[Any]:
        """``[one(i, mine) for i in range(n)]``, run by the calling thread and as many pool
        threads as help (``mine``: a list the running thread keeps from one call to the
        next). Each thread takes the next ``i`` when it is done with one: a task per
        thread rather than a future per item, and the caller works instead of waiting.
        Stops handing out items once one raises; the first error is raised once every
        thread is done. Nothing returns or raises while a helper still runs, even when
        the caller is interrupted: helpers write into memory the caller gives back."""
        results: list[Any] = [None] * n
        taken = iter(range(n))
        lock = threading.Lock()
        failed: list[BaseException] = []
        stopped = [False]

        def work() -> None:
            mine: list[Any] = []
            try:
                while True:
                    with lock:
                        i = next(taken, None) if not (failed or stopped[0]) else None
                    if i is None:
                        return
                    results[i] = one(i, mine)
            except BaseException as exc:
                with lock:
                    failed.append(exc)

        def stop() -> None:
            with lock:
                stopped[0] = True

        # the caller is one of the threads: one per core in all
        helpers = min(n, self.threads) - 1
        futures: list[Future[None]] = []
        try:
            for _ in range(helpers):
                futures.append(self.pool().submit(work))
            work()
        except BaseException:  # interrupted while handing out helpers: they take no more
            stop()
            raise
        finally:
            interrupted = _join(futures, stop)
        if interrupted is not None:
            raise interrupted
        if failed:
            raise failed[0]
        return results


def _join(futures: Sequence[Future[None]], stop: Callable[[], None]) -> BaseException | None:
    """Wait until none of ``futures`` runs (a queued one is dropped: every item is taken,
    and a caller that is itself a pool thread must not wait for a thread it holds). An
    interrupt while waiting stops the helpers taking more and is returned once they are
    done, not raised while they still write."""
    interrupted: BaseException | None = None
    for future in futures:
        if future.cancel():
            continue
        while True:
            try:
                future.result()
                break
            except BaseException as exc:  # work() keeps its own errors: an interrupt
                stop()
                interrupted = interrupted or exc
    return interrupted


class _ScratchBuffers:
    """Decode buffers (one per thread of a decode) kept for the next decode, up to
    ``keep_bytes`` in all and one per decode thread of a size: a fresh buffer per decode
    is memory the system maps and zeroes page by page, and unmaps again once it is freed,
    while every other thread waits. The size used least recently goes first when a new
    size needs the room."""

    def __init__(self, keep_bytes: int = SCRATCH_KEEP_BYTES):
        self.keep_bytes = keep_bytes
        self._free: dict[int, list[np.ndarray]] = {}  # by size, least recently used first
        self._kept = 0
        self._lock = threading.Lock()

    def take(self, nbytes: int) -> np.ndarray:
        """A uint8 buffer of ``nbytes`` (one kept, where there is one of that size)."""
        with self._lock:
            free = self._free.pop(nbytes, None)
            if free is not None:
                self._free[nbytes] = free  # used most recently now
                if free:
                    self._kept -= nbytes
                    return free.pop()
        return np.empty(nbytes, dtype=np.uint8)

    def give(self, buffers: Sequence[np.ndarray]) -> None:
        """Keep ``buffers`` for later decodes, as far as the bounds allow."""
        with self._lock:
            for buffer in buffers:
                size = buffer.size
                free = self._free.pop(size, [])
                self._free[size] = free
                if len(free) >= CpuBackend.threads or size > self.keep_bytes:
                    continue
                for other in list(self._free):
                    if self._kept + size <= self.keep_bytes:
                        break
                    if other != size:
                        self._kept -= other * len(self._free.pop(other))
                if self._kept + size <= self.keep_bytes:
                    free.append(buffer)
                    self._kept += size


_scratch = _ScratchBuffers()


def _fresh_pool_after_fork() -> None:
    # a child made by fork holds the parent's pool without its threads: it starts its own
    # (and its own buffers: the parent's lock may have been held by another thread)
    global _scratch
    CpuBackend._pool = None
    CpuBackend._pool_lock = threading.Lock()
    _scratch = _ScratchBuffers()


os.register_at_fork(after_in_child=_fresh_pool_after_fork)
