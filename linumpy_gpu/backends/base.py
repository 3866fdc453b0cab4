"""Backends: where arrays live and how a batch of chunks is decoded.

The engine is written once against this interface. :class:`CpuBackend` keeps arrays in
numpy and decodes with numcodecs on a thread pool; ``linumpy_gpu.gpu.backend.GpuBackend``
keeps them in cupy and decodes in nvCOMP batches.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from linumpy_gpu.codecs import decode_chain
from linumpy_gpu.codecs.errors import CodecError
from linumpy_gpu.core.assemble import chunk_array, place
from linumpy_gpu.core.layout import ChunkFormat
from linumpy_gpu.core.plan import ChunkPlan
from linumpy_gpu.errors import ChunkDecodeError, OutputMismatchError
from linumpy_gpu.io.sources import ByteSource

EncodedChunk = tuple[str, memoryview]  # (key for messages, stored bytes)


class _Placed:
    """Marks a chunk a backend decoded straight into its place in the output."""

    def __repr__(self) -> str:
        return "PLACED"


PLACED = _Placed()


class Backend:
    """Interface of a backend (the CPU one is the reference implementation)."""

    name = "abstract"
    xp: Any = None

    def empty(self, shape: tuple[int, ...], dtype: np.dtype) -> Any:
        raise NotImplementedError

    def owns(self, array: Any) -> bool:
        raise NotImplementedError

    def from_host(self, array: np.ndarray) -> Any:
        raise NotImplementedError

    # A backend that can decode into the output's memory (in place, or using bytes not yet
    # written as scratch) gets a Placement per batch.
    borrows_output = False

    def batch_bytes(self, read_nbytes: int) -> int:
        """Most decoded bytes per batch for a read of ``read_nbytes``."""
        return 256 << 20

    def staging_batch_bytes(self) -> int | None:
        """Most stored bytes one batch may stage (None: no staging bound)."""
        return None

    def byte_source(self, store: Any) -> ByteSource | None:
        """A reader of ``store``'s bytes suited to this backend (None: the engine's own)."""
        return None

    def host_chunks(self, fmt: ChunkFormat, n_tasks: int) -> int:
        """Of each batch of a read of ``n_tasks`` chunks, how many (its last ones) a device
        backend decodes on host cores rather than its device decoder (0: none)."""
        return 0

    def scratch_pieces(
        self, fmt: ChunkFormat, n: int, n_direct: int, stored_fraction: float, n_host: int = 0
    ) -> tuple[int, ...]:
        """The buffers a batch of ``n`` chunks (``n_direct`` decoded in place, the last
        ``n_host`` decoded on host cores) needs besides the output, in the order the decoder
        takes them (each goes to the smallest free region that holds it)."""
        return ()

    def movable_slots(self, fmt: ChunkFormat) -> int | None:
        """Which of :meth:`scratch_pieces` holds decoded slots that the decoder can decode
        into the batch's own output bytes (``Placement.own``) and move out before placing
        them, or None."""
        return None

    def table_bytes(self, n_chunks: int) -> int:
        """Memory a batch of ``n_chunks`` holds outside the read's buffer (pointer, status and
        copy-job tables); the engine keeps it out of that buffer so the budget holds."""
        return 0

    def scratch_budget(self, out_nbytes: int, whole_level: bool = True) -> int | None:
        """Most memory a read of ``out_nbytes`` may hold besides its output (None: no cap);
        ``whole_level``: the read is a full level (device backends bound those tighter)."""
        return None

    def reserve_for_read(self, out_nbytes: int, batch_bytes: int) -> None:
        """Refuse up front a read whose output and scratch cannot fit (GPU backends)."""

    def memory_error(self, out_nbytes: int, batch_bytes: int) -> Exception:
        """The error to raise when a read ran out of memory (after freeing what it held)."""
        return MemoryError(f"not enough memory for a {out_nbytes / 2**30:.2f} GiB read")

    def stages_unaligned(self, fmt: ChunkFormat | None) -> bool:
        """Whether chunks of ``fmt`` may start anywhere in staging (else each gets its own
        aligned slot)."""
        return True

    def acquire_staging(self, expected_bytes: int = 0) -> Any:
        """A staging area the fetch stage reads one batch into (its ``reserve`` allocates),
        or None for ordinary memory; ``expected_bytes``: about how many bytes the batch will
        read (0: unknown)."""
        return None

    def release_staging(self, staging: Any) -> None:
        """Give back what :meth:`acquire_staging` returned, once its batch is decoded."""

    def decode(
        self,
        chunks: Sequence[EncodedChunk],
        fmt: ChunkFormat,
        array: str,
        staging: Any = None,
        placement: Any = None,
    ) -> list[Any]:
        """Decode a batch: for each chunk a 1-D uint8 array of ``fmt.nbytes`` bytes,
        :data:`PLACED` where it was decoded straight into the output (``placement``), or
        the :class:`ChunkDecodeError` that says why it could not be decoded (the others of
        the batch are still delivered)."""
        raise NotImplementedError

    def finish(self) -> None:
        """Wait until all work queued for a read is done (a no-op on the CPU)."""

    def place_all(
        self,
        work: Any,
        tasks: ChunkPlan,
        raws: Sequence[Any],
        fmt: ChunkFormat,
        dtype: np.dtype,
    ) -> None:
        """Copy the wanted part of each decoded chunk (the chunks of ``tasks``, in order)
        into ``work`` (one engine rule for every backend; a backend may do the same copies
        in one batched kernel)."""
        for task, raw in zip(tasks, raws, strict=True):
            place(work, task.out_region, chunk_array(raw, fmt, dtype), task.chunk_region)

    # -- writing ------------------------------------------------------------------------

    def from_any(self, array: Any) -> Any:
        """``array`` (numpy, cupy or anything array-like) as an array of this backend."""
        raise NotImplementedError

    def gather_chunks(
        self, data: Any, regions: Sequence[Any], chunk_shape: tuple[int, ...], fill_value: Any
    ) -> tuple[Any, int]:
        """Copy ``data[region]`` of each chunk into consecutive full-size chunk slots (edge
        chunks padded with ``fill_value``); returns the flat uint8 buffer and slot stride."""
        raise NotImplementedError

    def raw_chunks(self, packed: Any, nbytes: int, n: int, stride: int) -> list[bytes]:
        raise NotImplementedError

    def encode_zstd(
        self, packed: Any, nbytes: int, n: int, stride: int, level: int, checksum: bool
    ) -> list[bytes]:
        raise NotImplementedError

    def check_out(self, out: Any, shape: tuple[int, ...], dtype: np.dtype) -> None:
        if not self.owns(out):
            raise OutputMismatchError(
                f"out must be a {self.xp.__name__} array for the {self.name} backend, "
                f"got {type(out).__module__}.{type(out).__name__}"
            )
        if tuple(out.shape) != tuple(shape):
            raise OutputMismatchError(f"out has shape {tuple(out.shape)}, the read gives {shape}")
        if np.dtype(out.dtype) != dtype:
            raise OutputMismatchError(f"out has dtype {out.dtype}, the array is {dtype}")


class CpuBackend(Backend):
    name = "cpu"
    xp = np

    _pool: ThreadPoolExecutor | None = None
    _pool_lock = threading.Lock()

    @classmethod
    def pool(cls) -> ThreadPoolExecutor:
        with cls._pool_lock:
            if cls._pool is None:
                cls._pool = ThreadPoolExecutor(
                    os.cpu_count() or 2, thread_name_prefix="linumpy-decode"
                )
            return cls._pool

    def empty(self, shape, dtype):
        return np.empty(shape, dtype=dtype)

    def owns(self, array):
        return isinstance(array, np.ndarray)

    def from_host(self, array):
        return array

    def place_all(self, work, tasks, raws, fmt, dtype):
        """Chunks go to disjoint regions of ``work``: copy them on the pool (numpy drops
        the GIL while copying)."""
        if len(tasks) < 4:
            return super().place_all(work, tasks, raws, fmt, dtype)

        def one(item):
            task, raw = item
            place(work, task.out_region, chunk_array(raw, fmt, dtype), task.chunk_region)

        list(self.pool().map(one, zip(tasks, raws, strict=True)))
        return None

    def from_any(self, array):
        return array.get() if hasattr(array, "__cuda_array_interface__") else np.asarray(array)

    def gather_chunks(self, data, regions, chunk_shape, fill_value):
        packed = np.empty((len(regions), *chunk_shape), dtype=data.dtype)
        for slot, region in zip(packed, regions, strict=True):
            extent = tuple(r.stop - r.start for r in region)
            if extent != tuple(chunk_shape):
                slot[...] = fill_value
            slot[tuple(slice(0, e) for e in extent)] = data[region]
        return packed.reshape(-1).view(np.uint8), int(packed[0].nbytes) if len(regions) else 0

    def raw_chunks(self, packed, nbytes, n, stride):
        return [packed[i * stride : i * stride + nbytes].tobytes() for i in range(n)]

    def encode_zstd(self, packed, nbytes, n, stride, level, checksum):
        import numcodecs

        codec = numcodecs.Zstd(level=level, checksum=checksum)
        views = [packed[i * stride : i * stride + nbytes] for i in range(n)]
        if n <= 1:
            return [codec.encode(v) for v in views]
        return list(self.pool().map(codec.encode, views))

    def check_out(self, out, shape, dtype):
        super().check_out(out, shape, dtype)
        if not out.flags.writeable:
            raise OutputMismatchError("out is read-only")

    def decode(self, chunks, fmt, array, staging=None, placement=None):
        def one(item: EncodedChunk) -> np.ndarray | ChunkDecodeError:
            key, data = item
            try:
                raw = decode_chain(data, fmt.codecs, fmt.nbytes)
            except CodecError as exc:
                return ChunkDecodeError(array, key, str(exc))
            return np.frombuffer(raw, dtype=np.uint8)

        if len(chunks) <= 1:
            return [one(c) for c in chunks]
        return list(self.pool().map(one, chunks))
