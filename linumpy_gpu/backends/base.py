"""The backend interface: where arrays live and how chunks are decoded and encoded.

The read and write engines are written once against :class:`Backend`. A backend that
decodes in memory of its own (a GPU) also bounds how much of that memory a read may hold
and how its batches are staged: :class:`BatchMemory`, whose defaults are the rules for host
memory (no bounds, no staging).
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from linumpy_gpu.backends.host_staging import host_staging_pool
from linumpy_gpu.core.assemble import chunk_array, place
from linumpy_gpu.core.layout import ChunkFormat
from linumpy_gpu.core.plan import ChunkPlan
from linumpy_gpu.errors import HostMemoryError, OutputMismatchError
from linumpy_gpu.io.sources import ByteSource

# places one decoded chunk (its index in the batch, its bytes) in the read's output
ChunkSink = Callable[[int, Any], None]

EncodedChunk = tuple[str, memoryview]  # (key for messages, stored bytes)


def _nothing_to_release() -> None:
    return None


@dataclass
class EncodedChunks:
    """The stored bytes of a batch of chunks, in order, and how to give back the memory
    they lie in once they are written (a GPU lands them in pinned host memory that later
    batches reuse: after ``release()`` the frames must not be read)."""

    frames: list[bytes | memoryview]
    release: Callable[[], None] = _nothing_to_release


class _Placed:
    """Marks a chunk a backend decoded straight into its place in the output."""

    def __repr__(self) -> str:
        return "PLACED"


PLACED = _Placed()


class Backend(ABC):
    """Where arrays live (``xp``: numpy or cupy) and how chunks are decoded and encoded."""

    name: str = "abstract"
    xp: Any = None

    # -- arrays ---------------------------------------------------------------------------

    @abstractmethod
    def empty(self, shape: tuple[int, ...], dtype: np.dtype) -> Any:
        """A new uninitialised array of this backend."""

    @abstractmethod
    def owns(self, array: Any) -> bool:
        """Whether ``array`` is an array of this backend (and device)."""

    @abstractmethod
    def from_any(self, array: Any) -> Any:
        """``array`` (numpy, cupy or anything array-like) as an array of this backend."""

    def check_out(self, out: Any, shape: tuple[int, ...], dtype: np.dtype) -> None:
        """Refuse an ``out=`` array that this backend cannot read ``shape`` x ``dtype`` into."""
        if not self.owns(out):
            raise OutputMismatchError(
                f"out must be a {self.xp.__name__} array for the {self.name} backend, "
                f"got {type(out).__module__}.{type(out).__name__}"
            )
        if tuple(out.shape) != tuple(shape):
            raise OutputMismatchError(f"out has shape {tuple(out.shape)}, the read gives {shape}")
        if np.dtype(out.dtype) != dtype:
            raise OutputMismatchError(f"out has dtype {out.dtype}, the array is {dtype}")

    # -- reading --------------------------------------------------------------------------

    @abstractmethod
    def decode(
        self,
        chunks: Sequence[EncodedChunk],
        fmt: ChunkFormat,
        array: str,
        staging: Any = None,
        placement: Any = None,
        sink: ChunkSink | None = None,
    ) -> list[Any]:
        """Decode a batch: for each chunk a 1-D uint8 array of ``fmt.nbytes`` bytes,
        :data:`PLACED` where it was decoded straight into the output (``placement``) or
        handed to ``sink`` once decoded, or the :class:`~linumpy_gpu.ChunkDecodeError` that
        says why it could not be decoded (the others of the batch are still delivered).
        ``sink(i, chunk)`` places chunk ``i``; a backend that decodes chunks one by one
        calls it at once, while the chunk is still in cache, instead of holding the whole
        batch decoded."""

    def place_all(
        self,
        work: Any,
        tasks: ChunkPlan,
        raws: Sequence[Any],
        fmt: ChunkFormat,
        dtype: np.dtype,
    ) -> None:
        """Copy the wanted part of each decoded chunk (the chunks of ``tasks``, in order)
        into ``work`` (one rule for every backend; a backend may do the same copies in one
        batched kernel)."""
        for task, raw in zip(tasks, raws, strict=True):
            place(work, task.out_region, chunk_array(raw, fmt, dtype), task.chunk_region)

    def finish(self) -> None:  # noqa: B027 (a hook: backends without queued work keep it)
        """Wait until all work queued for a read is done (nothing to wait for on the CPU)."""

    def small_read_backend(
        self, fmt: ChunkFormat, n_chunks: int, out_nbytes: int
    ) -> Backend | None:
        """A backend that reads a region of ``n_chunks`` chunks of ``fmt`` (``out_nbytes``
        bytes) faster than this one, its result then copied into this one's memory
        (None: this backend reads it; a device backend hands small reads to host cores)."""
        return None

    def byte_source(self, store: Any) -> ByteSource | None:
        """A reader of ``store``'s bytes suited to this backend (None: the engine's own)."""
        return None

    def memory(self) -> BatchMemory:
        """How reads on this backend bound and stage their batches."""
        return HOST_MEMORY

    # -- writing --------------------------------------------------------------------------

    @abstractmethod
    def encode_regions(
        self,
        data: Any,
        regions: Sequence[Any],
        chunk_shape: tuple[int, ...],
        fill_value: Any,
        zstd: tuple[int, bool] | None,
    ) -> EncodedChunks:
        """The stored bytes of the chunks holding ``data[region]`` for each region (edge
        chunks padded to ``chunk_shape`` with ``fill_value``): zstd frames (``zstd`` =
        (level, checksum)) or the raw C-order bytes (``zstd`` None)."""


class BatchMemory:
    """How a read's batches are bounded and staged. The defaults are the host's bounds:
    batches of 8 MiB per core (32 to 256 MiB) and no memory bound beyond them; staging in
    ordinary memory (:class:`HostMemory` adds reused arenas). A device backend with memory
    of its own overrides these."""

    # A backend that can decode into the output's memory (in place, or using bytes not yet
    # written as scratch) gets a Placement per batch.
    borrows_output = False

    def batch_bytes(self, read_nbytes: int) -> int:
        """Most decoded bytes per batch for a read of ``read_nbytes``: two 4 MiB chunks per
        core keep every core busy, while a read holds only the stored bytes of two batches
        (one decoding, one fetched) above its output."""
        return min(256 << 20, max(32 << 20, (os.cpu_count() or 2) * (8 << 20)))

    def write_batch_bytes(self) -> int:
        """Decoded bytes a writer gathers and encodes per batch: on the host enough to keep
        every core compressing, and little enough that a write holds a bounded amount of
        memory above its input (two batches in flight)."""
        return 64 << 20

    def staging_batch_bytes(self) -> int | None:
        """Most stored bytes one batch may stage (None: no staging bound)."""
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

    def scratch_budget(
        self, out_nbytes: int, whole_level: bool = True, tight: bool = False
    ) -> int | None:
        """Most memory a read of ``out_nbytes`` may hold besides its output (None: no cap);
        ``whole_level``: the read is a full level; ``tight``: the read is done again after
        running out of memory, under the backend's tightest bound."""
        return None

    def reserve_for_read(self, out_nbytes: int, batch_bytes: int) -> None:
        """Refuse up front a read whose output and scratch cannot fit."""

    def memory_error(self, out_nbytes: int, batch_bytes: int) -> Exception:
        """The error to raise when a read ran out of memory (after freeing what it held)."""
        return HostMemoryError(
            f"not enough memory for a {out_nbytes / 2**30:.2f} GiB read: read a region "
            "(level[z0:z1]) or use level.to_dask()"
        )

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


class HostMemory(BatchMemory):
    """The host rules, with each batch's stored bytes read into reused host memory."""

    def reserve_for_read(self, out_nbytes: int, batch_bytes: int) -> None:
        # the system hands out memory it has not got (overcommit) and kills the process
        # once it is touched: a read larger than what is available is refused before
        available = available_host_memory()
        # a batch's stored bytes: at most about its decoded bytes, which the output bounds
        if available is not None and out_nbytes + min(batch_bytes, out_nbytes) > available:
            raise HostMemoryError(
                f"a {out_nbytes / 2**30:.2f} GiB read does not fit the "
                f"{available / 2**30:.2f} GiB of memory available: read a region "
                "(level[z0:z1]) or use level.to_dask()"
            )

    def acquire_staging(self, expected_bytes: int = 0) -> Any:
        return host_staging_pool().batch()

    def release_staging(self, staging: Any) -> None:
        if staging is not None:
            staging.release()


HOST_MEMORY = HostMemory()


def available_host_memory() -> int | None:
    """Bytes of memory the system can give without swapping (Linux's MemAvailable), or
    None where it does not say."""
    try:
        with open("/proc/meminfo", "rb") as f:
            for line in f:
                if line.startswith(b"MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None
