"""The GPU backend: cupy arrays, zstd decoded in nvCOMP batches, other codecs on the CPU."""

from __future__ import annotations

import contextlib
import ctypes
import math
import threading
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from linumpy_gpu import config
from linumpy_gpu.backends.base import (
    PLACED,
    Backend,
    BatchMemory,
    ChunkSink,
    EncodedChunk,
    EncodedChunks,
)
from linumpy_gpu.backends.cpu import CpuBackend
from linumpy_gpu.codecs import blosc, crc32c, decode_chain_into, lz4, zstd
from linumpy_gpu.config import Settings
from linumpy_gpu.core.layout import ChunkFormat
from linumpy_gpu.core.plan import ChunkPlan
from linumpy_gpu.errors import ChunkDecodeError, CodecError, DeviceMemoryError, OutputMismatchError
from linumpy_gpu.gpu.copy_jobs import (
    SHAPE,
    in_units,
    jobs_from,
    place_jobs,
    widest_unit,
)
from linumpy_gpu.gpu.host_decode import DecodeInto, default_threads, host_decoder
from linumpy_gpu.gpu.kernels import kernel
from linumpy_gpu.gpu.kvikio_source import KvikioFileSource, kvikio_available
from linumpy_gpu.gpu.nvcomp import streams as stream_decoder
from linumpy_gpu.gpu.nvcomp.lib import lz4_api, zstd_api
from linumpy_gpu.gpu.nvcomp.zstd import (
    SLOT_ALIGN,
    DecodedBatch,
    DeviceSlot,
    Workspace,
    codec_for_current_device,
    round_up,
)
from linumpy_gpu.gpu.pinned import GrowingHostBuffer
from linumpy_gpu.gpu.staging import download_spans, staging_pool
from linumpy_gpu.io.sources import ByteSource

MAX_SCATTER_DIMS = 6
COPY_BLOCK = 256
MAX_COPY_BLOCKS_PER_JOB = 4096
# nvCOMP decodes each chunk serially: a batch of 500 chunks takes about as long as one of
# 30, so batches are as large as memory allows, up to this many decoded bytes.
MAX_BATCH_BYTES = 2 << 30
# Decoded bytes a GPU write encodes per batch.
WRITE_BATCH_BYTES = 768 << 20
# Reads of part of a level (tiles, read_regions) decode several times their output's bytes
# (a 256^3 tile of 128^3 chunks: 27 chunks, 3.4x) and nvCOMP is fast only with many chunks
# in flight, so they may hold more than full-level reads: by default 1/16 of the device's
# memory, at most this much, and never more than half of what is free when they start.
REGION_SCRATCH_MAX = 8 << 30
# Reads of at most this many bytes whose chunks the host cores would decode whole anyway
# go through the CPU backend and one copy to the device: the device path's staging, kvikio
# requests and events cost more than they save on a tile of a few chunks. Past about 2 MiB
# (a 100^3 uint16 cube) the device path wins again: its host threads decode into device
# memory while later chunks are still being fetched.
SMALL_READ_BYTES = 2 << 20
# Per-chunk tables a batch allocates on the device besides its buffer: frame-check metadata,
# nvCOMP's pointer/size/status arrays, checksum verdicts and copy jobs (about 260 bytes,
# each array rounded up to 512 by cupy's pool). A batch may still hold its tables while the
# next one allocates its own, so twice this per chunk, plus a floor.
TABLE_BYTES_PER_CHUNK = 512
TABLE_BYTES_FLOOR = 256 << 10

_local = threading.local()


def gpu_decodable(fmt: ChunkFormat) -> bool:
    """True when the chain is zstd (optionally followed by zarr's crc32c, the checksum
    after the bytes): decoded by nvCOMP."""
    names = [c.name for c in fmt.codecs]
    if names == ["zstd", "crc32c"]:
        return fmt.codecs[1].config.get("location", "end") == "end"
    return names == ["zstd"]


def read_scratch_budget(
    out_nbytes: int,
    free_bytes: int,
    settings: Settings,
    whole_level: bool = True,
    region_scratch: int = REGION_SCRATCH_MAX,
) -> int:
    """Device memory a read of ``out_nbytes`` may hold besides its output, with
    ``free_bytes`` free before the output is allocated.

    The tight bound is ``scratch_fraction`` of the output, at least ``scratch_floor``; a
    read of part of a level may go up to ``region_scratch`` within half of what is free.
    ``memory="auto"`` lets any read take up to half of what is free once its output is
    allocated (at most ``memory_cap``): the larger nvCOMP's batches, the faster the read,
    and the other half stays for the caller's own work. It never goes below the tight
    bound, so a read that fits tight still runs when memory is short."""
    base = max(int(settings.scratch_fraction * out_nbytes), settings.scratch_floor)
    if settings.memory == "auto":
        roomy = max(0, free_bytes - out_nbytes) // 2
        if settings.memory_cap is not None:
            roomy = min(roomy, settings.memory_cap)
        return max(base, roomy)
    if whole_level or region_scratch <= base:
        return base
    return max(base, min(region_scratch, free_bytes // 2))


def streams_on_gpu(fmt: ChunkFormat) -> bool:
    """True when the chain is Blosc or LZ4 alone: their LZ4 and zstd streams are decoded by
    nvCOMP (Blosc's other inner codecs by the CPU Blosc, chunk by chunk on all cores)."""
    return [c.name for c in fmt.codecs] in (["blosc"], ["lz4"])


class GpuBackend(Backend, BatchMemory):
    """Arrays in cupy on one GPU; zstd decoded and encoded in nvCOMP batches, Blosc (LZ4
    or zstd inside) and LZ4 decoded there too (other codecs on host cores, then copied);
    reads bounded in device memory and staged in pinned memory (this backend is its own
    :class:`BatchMemory`)."""

    name = "gpu"

    def __init__(
        self,
        ordinal: int | None = None,
        *,
        memory: str | None = None,
        memory_cap: int | None = None,
        scratch_fraction: float | None = None,
        scratch_floor: int | None = None,
        region_scratch: int | None = None,
        host_threads: int | None = None,
        settings: Settings | None = None,
    ):
        """A backend on GPU ``ordinal`` (None: cupy's current device). The keyword
        arguments replace the settings of the same names (see :mod:`linumpy_gpu.config`):
        ``memory`` (``"auto"`` or ``"tight"``) and ``memory_cap`` choose how much device
        memory a read may hold besides its output (more memory: larger nvCOMP batches,
        faster reads), ``scratch_fraction`` / ``scratch_floor`` / ``region_scratch`` the
        tight bound, and ``host_threads`` the host threads that decode small reads."""
        given = {
            "memory": memory,
            "memory_cap": memory_cap,
            "scratch_fraction": scratch_fraction,
            "scratch_floor": scratch_floor,
            "region_scratch": region_scratch,
            "host_threads": host_threads,
        }
        # checked first: a bad value is the caller's to fix on any machine
        self.settings = (settings or config.get()).replace(
            **{k: v for k, v in given.items() if v is not None}
        )
        try:
            import cupy
        except ImportError:
            from linumpy_gpu.gpu.deps import require_gpu

            require_gpu()  # names what the GPU path lacks
            raise
        self.scratch_fraction = self.settings.scratch_fraction
        self.scratch_floor = self.settings.scratch_floor
        region_scratch = self.settings.region_scratch
        threads = self.settings.host_threads
        self.host_threads = default_threads() if threads is None else threads

        self.xp = cupy
        self.device = cupy.cuda.Device(cupy.cuda.Device().id if ordinal is None else ordinal)
        self.name = f"cuda:{self.device.id}"
        if region_scratch is None:
            region_scratch = min(REGION_SCRATCH_MAX, int(self.device.mem_info[1]) // 16)
        self.region_scratch = int(region_scratch)
        self._cpu = CpuBackend()
        self._host: Any = (
            host_decoder(self.device.id, self.host_threads) if self.host_threads else None
        )

    def empty(self, shape: tuple[int, ...], dtype: np.dtype) -> Any:
        with self.device:
            return self.xp.empty(shape, dtype=dtype)

    def free_bytes(self) -> int:
        """Device memory free for a read: the device's free bytes and cupy's pool's, within
        the pool's limit where the user set one (``MemoryPool.set_limit``)."""
        pool = self.xp.get_default_memory_pool()
        with self.device:
            free = int(self.device.mem_info[0]) + int(pool.free_bytes())
            limit = int(pool.get_limit())
            if limit:
                free = min(free, max(0, limit - int(pool.used_bytes())))
            return free

    borrows_output = True

    def batch_bytes(self, read_nbytes: int) -> int:
        return MAX_BATCH_BYTES

    def write_batch_bytes(self) -> int:
        # large enough for nvCOMP to have hundreds of chunks in flight
        return WRITE_BATCH_BYTES

    def staging_batch_bytes(self) -> int:
        # Most of the ring: the next batch's reads start while this one's copy finishes.
        return self._staging().cap * 3 // 4

    def _staging(self) -> Any:
        return staging_pool(self.settings.pinned_bytes)

    def byte_source(self, store: Any) -> ByteSource | None:
        """Local files through kvikio's thread pool where kvikio is installed (else the
        engine's own reader)."""
        root = getattr(store, "root", None)
        if type(store).__name__ != "LocalStore" or root is None or not kvikio_available():
            return None
        return KvikioFileSource(root, self.settings.io_threads, self.settings.read_ahead_bytes)

    def stages_unaligned(self, fmt: ChunkFormat | None) -> bool:
        """Compressed chunks only (raw chunks are used in place, by typed loads), and for
        nvCOMP only where it takes frames at any address (zstd: alignment 1)."""
        if fmt is None or not fmt.codecs:
            return False
        return not gpu_decodable(fmt) or int(zstd_api().decompress_alignments.input) <= 1

    def host_chunks(self, fmt: ChunkFormat, n_tasks: int) -> int:
        if self._host is None or not gpu_decodable(fmt):
            return 0
        return self._host.share_of_read(fmt.nbytes, n_tasks)

    def small_read_backend(
        self, fmt: ChunkFormat, n_chunks: int, out_nbytes: int
    ) -> Backend | None:
        """The CPU backend for a small read whose chunks host cores would decode anyway: zstd
        they decode sooner than one nvCOMP batch (as :meth:`HostDecoder.share_of_read`
        answers, retiming included), or chunks nvCOMP does not decode (uncompressed, gzip,
        ...). Blosc and LZ4 stay on the device."""
        if self._host is None or out_nbytes > SMALL_READ_BYTES or streams_on_gpu(fmt):
            return None
        if not gpu_decodable(fmt):
            return self._cpu
        share = self._host.share_of_read(fmt.nbytes, n_chunks)
        if share < n_chunks:
            self._host.hold(fmt.nbytes, n_chunks, share)  # the device path's answer too
            return None
        return self._cpu

    def scratch_pieces(
        self, fmt: ChunkFormat, n: int, n_direct: int, stored_fraction: float, n_host: int = 0
    ) -> tuple[int, ...]:
        """In the order the decoder takes them: slots for the host-decoded chunks, then for
        the chunks nvCOMP decodes their compressed bytes on the device, their slots, and
        nvCOMP's workspace, as nvCOMP sizes it from the chunk sizes (about three times their
        decoded size for zstd)."""
        stride = round_up(fmt.nbytes, SLOT_ALIGN)
        if fmt.codecs and streams_on_gpu(fmt):
            # the chunks' slots where not placed directly, their stored bytes, their decoded
            # streams, and nvCOMP's workspace (LZ4's: small)
            stored = n * (
                round_up(int(fmt.nbytes * stored_fraction * 1.1), SLOT_ALIGN) + SLOT_ALIGN
            )
            temp = lz4_api().decompress_temp_bytes(n, fmt.nbytes, n * fmt.nbytes, 0)
            return (
                (n - n_direct) * stride,
                stored + (1 << 20),
                n * stride,
                round_up(temp, SLOT_ALIGN),
            )
        if not fmt.codecs or not gpu_decodable(fmt):
            return (n * stride,)
        on_gpu = max(0, n - n_host)
        # which direct chunks fall in the host's share is not known here: the device's
        direct_on_gpu = min(n_direct, on_gpu)
        host_slots = (n - on_gpu - (n_direct - direct_on_gpu)) * stride
        if not on_gpu:
            return (host_slots,)
        stored = on_gpu * (
            round_up(int(fmt.nbytes * stored_fraction * 1.1), SLOT_ALIGN) + SLOT_ALIGN
        ) + (1 << 20)
        slots = (on_gpu - direct_on_gpu) * stride
        temp = zstd_api().decompress_temp_bytes(on_gpu, fmt.nbytes, on_gpu * fmt.nbytes, 0)
        return (host_slots, stored, slots, round_up(temp, SLOT_ALIGN))

    def movable_slots(self, fmt: ChunkFormat) -> int | None:
        # nvCOMP's slots (third of scratch_pieces) decode in the batch's own output bytes
        # and move into its workspace (three times their size) once decoded
        return 2 if fmt.codecs and gpu_decodable(fmt) else None

    def table_bytes(self, n_chunks: int) -> int:
        return 2 * n_chunks * TABLE_BYTES_PER_CHUNK + TABLE_BYTES_FLOOR

    def scratch_budget(self, out_nbytes: int, whole_level: bool = True, tight: bool = False) -> int:
        """See :func:`read_scratch_budget`; ``tight`` applies the tight bound whatever the
        settings say (a read done again after running out of memory)."""
        return read_scratch_budget(
            out_nbytes,
            self.free_bytes(),
            self.settings if not tight else self.settings.replace(memory="tight"),
            whole_level,
            self.region_scratch,
        )

    def reserve_for_read(self, out_nbytes: int, batch_bytes: int) -> None:
        # refused only where the tight bound does not fit: "auto" shrinks to what is free
        need = out_nbytes + max(int(self.scratch_fraction * out_nbytes), self.scratch_floor)
        free = self.free_bytes()
        if need > free:
            raise self.memory_error(out_nbytes, batch_bytes, free)

    def memory_error(
        self, out_nbytes: int, batch_bytes: int, free: int | None = None
    ) -> DeviceMemoryError:
        self.xp.get_default_memory_pool().free_all_blocks()
        free = self.free_bytes() if free is None else free
        need = out_nbytes + max(int(self.scratch_fraction * out_nbytes), self.scratch_floor)
        return DeviceMemoryError(
            f"this read needs about {need / 2**30:.2f} GiB on {self.name} "
            f"({out_nbytes / 2**30:.2f} GiB of output + decode scratch) but "
            f"{free / 2**30:.2f} GiB is free: read a smaller region (e.g. level[z0:z1]) "
            "or use level.to_dask() to process it in blocks"
        )

    def from_any(self, array: Any) -> Any:
        with self.device:
            return self.xp.asarray(array)

    def encode_regions(
        self,
        data: Any,
        regions: Sequence[Any],
        chunk_shape: tuple[int, ...],
        fill_value: Any,
        zstd: tuple[int, bool] | None,
    ) -> EncodedChunks:
        """Gathered into full-size slots by one kernel, encoded by nvCOMP in one batch, and
        landed in the staging ring's pinned arenas (released once written)."""
        packed, stride = self.gather_chunks(data, regions, chunk_shape, fill_value)
        nbytes = math.prod(chunk_shape) * data.dtype.itemsize
        n = len(regions)
        with self.device:
            codec = codec_for_current_device()
            if zstd is None:  # raw chunks: straight from their slots
                addresses = np.uint64(packed.data.ptr) + np.arange(n, dtype=np.uint64) * np.uint64(
                    stride
                )
                codec.stream.wait_event(self.xp.cuda.get_current_stream().record())
                sizes = np.full(n, nbytes, dtype=np.int64)
                frames, staged = download_spans(addresses, sizes, codec.stream, self._staging())
            else:  # nvCOMP has no levels: the level is for CPU writers
                encoded = codec.encode(packed, nbytes, n, stride, zstd[1])
                frames, staged = download_spans(
                    encoded.addresses, encoded.sizes, codec.stream, self._staging(), encoded.room
                )
                encoded.finish(frames)
        if staged is None:
            return EncodedChunks(list(frames))
        return EncodedChunks(list(frames), staged.release)

    def gather_chunks(
        self, data: Any, regions: Sequence[Any], chunk_shape: tuple[int, ...], fill_value: Any
    ) -> tuple[Any, int]:
        """One gather kernel per batch (the scatter kernel with source and target swapped)."""
        xp = self.xp
        n = len(regions)
        itemsize = data.dtype.itemsize
        with self.device:
            packed = xp.empty((max(n, 1), *chunk_shape), dtype=data.dtype)
            if n == 0:
                return packed.reshape(-1).view(np.uint8), 0
            stride = int(packed[0].nbytes)
            full = tuple(chunk_shape)
            for i, region in enumerate(regions):
                if tuple(r.stop - r.start for r in region) != full:
                    packed[i] = fill_value
            ndim = data.ndim
            if itemsize not in (1, 2, 4, 8) or not 1 <= ndim <= MAX_SCATTER_DIMS:
                for i, region in enumerate(regions):
                    packed[i][tuple(slice(0, r.stop - r.start) for r in region)] = data[region]
                return packed.reshape(-1).view(np.uint8), stride
            src_strides = np.asarray([s // itemsize for s in data.strides], dtype=np.int64)
            starts = np.array([[r.start for r in reg] for reg in regions], dtype=np.int64)
            stops = np.array([[r.stop for r in reg] for reg in regions], dtype=np.int64)
            jobs = jobs_from(
                data.data.ptr + (starts * src_strides).sum(axis=1) * itemsize,
                packed.data.ptr + np.arange(n, dtype=np.int64) * stride,
                stops - starts,
                src_strides,
                _c_strides(list(chunk_shape)),
            )
            self._launch_copy(jobs, ndim, itemsize)
            return packed.reshape(-1).view(np.uint8), stride

    def memory(self) -> BatchMemory:
        return self

    def _launch_copy(self, jobs: np.ndarray, ndim: int, itemsize: int) -> None:
        n = len(jobs)
        unit = widest_unit(jobs, ndim, itemsize)
        jobs = in_units(jobs, ndim, itemsize, unit)
        rows = int(np.prod(jobs[:, SHAPE : SHAPE + ndim - 1], axis=1).max()) if ndim > 1 else 1
        inner = int(jobs[:, SHAPE + ndim - 1].max())
        lanes = min(COPY_BLOCK, 1 << max(0, inner - 1).bit_length())
        block = COPY_BLOCK
        grid_x = max(1, min(-(-rows // (block // lanes)), MAX_COPY_BLOCKS_PER_JOB))
        fn = kernel(f"scatter_{unit}")
        with self.device:
            d_jobs = self.xp.asarray(jobs)
            for first in range(0, n, 65535):
                count = min(65535, n - first)
                fn(
                    (grid_x, count),
                    (block,),
                    (
                        d_jobs[first : first + count],
                        np.int32(ndim),
                        np.int32(lanes.bit_length() - 1),
                    ),
                )

    def acquire_staging(self, expected_bytes: int = 0) -> Any:
        return self._staging().batch(expected_bytes)

    def release_staging(self, staging: Any) -> None:
        if staging is not None:
            staging.release()

    def place_all(
        self,
        work: Any,
        tasks: ChunkPlan,
        raws: Sequence[Any],
        fmt: ChunkFormat,
        dtype: np.dtype,
    ) -> None:
        """All chunks of a batch into ``work`` with one scatter kernel launch, its jobs
        straight from the plan's rows."""
        itemsize = np.dtype(dtype).itemsize
        ndim = work.ndim
        fast = not fmt.needs_byteswap and itemsize in (1, 2, 4, 8) and 1 <= ndim <= MAX_SCATTER_DIMS
        if not tasks:
            return None
        if not fast:
            arrays = [r.as_array() if hasattr(r, "as_array") else r for r in raws]
            return super().place_all(work, tasks, arrays, fmt, dtype)
        src_ptr = np.fromiter(
            (r.ptr if hasattr(r, "ptr") else r.data.ptr for r in raws),
            dtype=np.int64,
            count=len(raws),
        )
        out_strides = [s // itemsize for s in work.strides]
        jobs = place_jobs(
            tasks, src_ptr, work.data.ptr, _element_strides(fmt), out_strides, itemsize
        )
        self._launch_copy(jobs, ndim, itemsize)

    def owns(self, array: Any) -> bool:
        return isinstance(array, self.xp.ndarray) and array.device.id == self.device.id

    def check_out(self, out: Any, shape: tuple[int, ...], dtype: np.dtype) -> None:
        if isinstance(out, self.xp.ndarray) and out.device.id != self.device.id:
            raise OutputMismatchError(
                f"out lives on cuda:{out.device.id}, this image reads to {self.name}"
            )
        super().check_out(out, shape, dtype)

    def finish(self) -> None:
        """Reads stay queued on the current stream; nothing to wait for here."""

    def decode(
        self,
        chunks: Sequence[EncodedChunk],
        fmt: ChunkFormat,
        array: str,
        staging: Any = None,
        placement: Any = None,
        sink: ChunkSink | None = None,
    ) -> list[Any]:
        # chunks are placed by one kernel per batch (place_all), not one by one: no sink
        with self.device:
            if not fmt.codecs:  # uncompressed: straight to the device, placed from there
                batch = codec_for_current_device().upload_raw(
                    [data for _, data in chunks], fmt.nbytes, staging
                )
                return [
                    ChunkDecodeError(array, key, batch.failures[i])
                    if i in batch.failures
                    else batch.slot_ref(i)
                    for i, (key, _) in enumerate(chunks)
                ]
            if gpu_decodable(fmt):
                return self._decode_zstd(chunks, fmt, array, staging, placement)
            if streams_on_gpu(fmt):
                return self._decode_streams(chunks, fmt, array, staging, placement)
            if self._host is not None:
                return self._decode_on_host(chunks, fmt, array, staging, placement)
            decoded = self._cpu.decode(chunks, fmt, array)  # reads the staged bytes
            if staging is not None:
                staging.release()
            return self._upload_all(decoded)

    def _decode_on_host(
        self,
        chunks: Sequence[EncodedChunk],
        fmt: ChunkFormat,
        array: str,
        staging: Any,
        placement: Any,
    ) -> list[Any]:
        """Chunks of a codec nvCOMP lacks, decoded by the host pool straight into pinned
        buffers and copied to their places unit by unit, while later units decode."""
        targets, workspace = _placement_targets(placement, len(chunks))
        if targets is None:
            targets = np.zeros(len(chunks), dtype=np.uint64)
        codecs = fmt.codecs

        def decode_into(data: Any, out: np.ndarray) -> str | None:
            return decode_chain_into(data, codecs, out)

        # the workers read the staged bytes in place: the staging goes back once they are done
        try:
            submitted = self._submit_host(
                [data for _, data in chunks], fmt.nbytes, targets, workspace, None, decode_into
            )
            if submitted is None:
                return []
            batch, units = submitted
            failures = self._host.wait(units, self._stream(), learn=False)
        finally:
            if staging is not None:
                staging.release()
        return _chunk_results(chunks, array, failures, targets, batch)

    def _decode_zstd(
        self,
        chunks: Sequence[EncodedChunk],
        fmt: ChunkFormat,
        array: str,
        staging: Any,
        placement: Any,
    ) -> list[Any]:
        frames: list[Any] = []
        results: list[Any] = [None] * len(chunks)
        positions = []
        has_crc = fmt.codecs[-1].name == "crc32c"
        for i, (key, data) in enumerate(chunks):
            if has_crc:
                try:
                    stripped = crc32c.strip(data)
                except CodecError as exc:
                    results[i] = ChunkDecodeError(array, key, str(exc))
                    continue
            else:
                stripped = data
            positions.append(i)
            frames.append(stripped)
        every_target, workspace = _placement_targets(placement, len(chunks))
        targets = (
            np.zeros(len(positions), dtype=np.uint64)
            if every_target is None
            else every_target[np.asarray(positions, dtype=np.intp)]
        )
        # the batch's last chunks (as many as the plan gave the host) are decoded on host
        # cores while nvCOMP decodes the others
        host = placement.host if placement is not None and self._host is not None else 0
        split = int(np.searchsorted(np.asarray(positions, dtype=np.int64), len(chunks) - host))
        decoding = self._host.decoding() if self._host is not None else contextlib.nullcontext()
        with decoding as turn:
            on_host: Any = self._submit_host(
                frames[split:], fmt.nbytes, targets[split:], workspace, staging
            )
            batch: Any = None
            try:
                if split:
                    t0 = time.perf_counter()
                    own = None
                    if placement is not None and placement.own is not None:
                        start, stop = placement.own
                        own = (placement.buffer.data.ptr + start, stop - start, placement.buffer)
                    batch = codec_for_current_device().decode_host(
                        frames[:split],
                        fmt.nbytes,
                        staging,
                        targets[:split],
                        workspace,
                        own,
                    )
                    if self._host is not None:
                        self._host.learn_gpu(fmt.nbytes, split, time.perf_counter() - t0, turn)
                elif staging is not None:
                    staging.release()
            finally:  # the workers write into this batch's memory: never leave them running
                failures = (
                    {} if on_host is None else self._host.wait(on_host[1], self._stream(), turn)
                )
        placed = (targets != 0).tolist()
        if split:
            ptrs = batch.ptrs.tolist()
            for slot, i in enumerate(positions[:split]):
                reason = batch.failures.get(slot)
                if reason is not None:
                    results[i] = ChunkDecodeError(array, chunks[i][0], reason)
                else:
                    results[i] = PLACED if placed[slot] else DeviceSlot(batch, slot, ptrs[slot])
        for k, i in enumerate(positions[split:]):
            if k in failures:
                results[i] = ChunkDecodeError(array, chunks[i][0], failures[k])
            elif placed[split + k]:
                results[i] = PLACED
            else:
                results[i] = on_host[0].slot_ref(k)
        return results

    def _decode_streams(
        self,
        chunks: Sequence[EncodedChunk],
        fmt: ChunkFormat,
        array: str,
        staging: Any,
        placement: Any,
    ) -> list[Any]:
        targets, workspace = _placement_targets(placement, len(chunks))

        def on_cpu(frames: list[bytes]) -> list[Any]:
            decoded = self._cpu.decode([("", memoryview(f)) for f in frames], fmt, array)
            return [d.reason if isinstance(d, ChunkDecodeError) else d for d in decoded]

        frames = [data for _, data in chunks]
        if fmt.codecs[0].name == "lz4":
            layout = lz4.stream_layout(frames, fmt.nbytes)
        else:
            layout = blosc.stream_layout(frames, fmt.nbytes, stream_decoder.GPU_INNER)
        batch = stream_decoder.decode_frames(
            codec_for_current_device(),
            frames,
            fmt.nbytes,
            layout,
            on_cpu,
            staging,
            targets,
            workspace,
        )
        return _chunk_results(chunks, array, batch.failures, targets, batch)

    def _stream(self) -> Any:
        return self.xp.cuda.get_current_stream()

    def _submit_host(
        self,
        frames: list[Any],
        nbytes: int,
        targets: np.ndarray,
        workspace: Workspace,
        staging: Any,
        decode_into: DecodeInto = zstd.decode_into,
    ) -> tuple[DecodedBatch, Any] | None:
        """Start decoding ``frames`` on host threads into their targets, or into slots taken
        from ``workspace`` where the target is 0."""
        if not frames:
            return None
        if staging is not None:
            # staged bytes go back to the ring once uploaded, while the workers still read:
            # the reader fetches host chunks elsewhere; a caller that did not gets copies
            frames = [bytes(f) if staging.locate(f) is not None else f for f in frames]
        dests = targets.astype(np.uint64)
        need = np.flatnonzero(dests == 0)
        owners = []
        if need.size:
            stride = round_up(nbytes, SLOT_ALIGN)
            slots = workspace.take(int(need.size) * stride)
            owners.append(slots)
            dests[need] = np.uint64(slots.data.ptr) + np.arange(
                need.size, dtype=np.uint64
            ) * np.uint64(stride)
        # the workers copy after everything queued so far (earlier batches still reading
        # the memory these slots borrow)
        after = self._stream().record()
        units = self._host.submit(frames, nbytes, dests, after, decode_into)
        return DecodedBatch(dests, nbytes, owners=owners), units

    def _upload_all(self, decoded: list[Any]) -> list[Any]:
        """Copy CPU-decoded chunks to the GPU in one transfer (through pinned memory where
        the side budget allows)."""
        good = [d for d in decoded if isinstance(d, np.ndarray)]
        if not good:
            return decoded
        stride = round_up(max(d.size for d in good), SLOT_ALIGN)
        staging = _upload_buffer(stride * len(good))
        for k, d in enumerate(good):
            staging[k * stride : k * stride + d.size] = d
        dev = self.xp.empty(stride * len(good), dtype=np.uint8)
        stream = self.xp.cuda.get_current_stream()
        dev.data.copy_from_host_async(ctypes.c_void_p(staging.ctypes.data), dev.nbytes, stream)
        stream.synchronize()  # the buffer is reused by the next batch
        out, k = [], 0
        for d in decoded:
            if isinstance(d, np.ndarray):
                out.append(dev[k * stride : k * stride + d.size])
                k += 1
            else:
                out.append(d)
        return out


def _chunk_results(
    chunks: Sequence[EncodedChunk],
    array: str,
    failures: dict[int, str],
    targets: np.ndarray | None,
    batch: DecodedBatch,
) -> list[Any]:
    """Per chunk: its error, PLACED where it was decoded into its place, or its slot."""
    placed = [False] * len(chunks) if targets is None else (targets != 0).tolist()
    return [
        ChunkDecodeError(array, key, failures[i])
        if i in failures
        else PLACED
        if placed[i]
        else batch.slot_ref(i)
        for i, (key, _) in enumerate(chunks)
    ]


def _placement_targets(placement: Any, n: int) -> tuple[np.ndarray | None, Workspace]:
    """Per chunk the device address to decode into (0: a scratch slot), or None where the
    plan places none directly; and the workspace the plan's scratch and spare bytes give."""
    targets = None
    workspace = Workspace()
    if placement is not None and placement.buffer is not None:
        base = placement.buffer.data.ptr
        targets = np.fromiter(
            (0 if d is None else base + d for d in placement.direct), dtype=np.uint64, count=n
        )
        if placement.scratch is not None:
            start, stop = placement.scratch
            workspace.add(base + start, stop - start, placement.buffer)
    if placement is not None and placement.spare is not None:
        workspace.add(placement.spare.data.ptr, placement.spare.nbytes, placement.spare)
    return targets, workspace


def _element_strides(fmt: ChunkFormat) -> list[int]:
    """Element strides of each logical axis in a decoded chunk's memory."""
    shape = list(fmt.shape)
    if fmt.transpose is not None:
        stored = [shape[i] for i in fmt.transpose]
        c = _c_strides(stored)
        strides = [0] * len(shape)
        for pos, axis in enumerate(fmt.transpose):
            strides[axis] = c[pos]
        return strides
    if fmt.order == "F":
        return _c_strides(shape[::-1])[::-1]
    return _c_strides(shape)


def _c_strides(shape: list[int]) -> list[int]:
    strides, acc = [], 1
    for n in reversed(shape):
        strides.append(acc)
        acc *= n
    return strides[::-1]


def _upload_buffer(nbytes: int) -> np.ndarray:
    """This thread's buffer for CPU-decoded chunks on their way to the device."""
    buffer = getattr(_local, "upload", None)
    if buffer is None:
        buffer = _local.upload = GrowingHostBuffer()
    return buffer.get(nbytes)[:nbytes]
