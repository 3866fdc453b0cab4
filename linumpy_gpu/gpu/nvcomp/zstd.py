"""Batched zstd on the GPU with nvCOMP, never trusting its input.

Decode of one batch:
  1. stage the compressed frames in one device buffer (from pinned host memory: one copy);
  2. ``check_zstd_frames`` validates every frame: headers, and every block decoded without
     output (literals, sequence tables, every sequence and its offsets), sizes and end, in
     scratch carved from nvCOMP's workspace before nvCOMP needs it;
  3. only frames that pass go to ``nvcompBatchedZstdDecompressAsync``, which writes straight
     into the caller's output slots and reports a status and an actual size per frame (its
     workspace sized from the frames' sizes: sizing it from the frames themselves halves it
     but costs a synchronous pass that cannot overlap a decode, which is slower overall);
  4. frames that carry a content checksum are verified on the GPU (XXH64);
  5. anything refused or failed is decoded by the CPU zstd (numcodecs): a valid frame the GPU
     could not handle still reads correctly, a damaged one yields a reason with both verdicts.
Everything is queued on this object's CUDA stream; the caller's stream is waited for first,
so output memory recycled by cupy's pool is never written while still being read.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from linumpy_gpu.codecs import zstd as zstd_cpu
from linumpy_gpu.core.placement import SLOT_ALIGN, best_fit
from linumpy_gpu.errors import CodecError, NvcompError
from linumpy_gpu.gpu.kernels import FRAME_STATUS, check_zstd_frames, kernel
from linumpy_gpu.gpu.nvcomp.lib import BatchedApi, zstd_api
from linumpy_gpu.gpu.pinned import GrowingHostBuffer

_BLOCK = 128


def round_up(n: int, k: int) -> int:
    """``n`` rounded up to a multiple of ``k``."""
    return -(-n // k) * k


@dataclass
class DecodedBatch:
    """Decoded chunks: chunk i's ``nbytes`` bytes start at device address ``ptrs[i]`` (a
    slot of a scratch buffer, or its place in the caller's output)."""

    ptrs: np.ndarray  # uint64
    nbytes: int
    owners: list[Any] = field(default_factory=list)  # device buffers the slots live in
    failures: dict[int, str] = field(default_factory=dict)
    cpu_decoded: list[int] = field(default_factory=list)

    def slot(self, i: int) -> Any:
        """Chunk i as a 1-D uint8 cupy array (a view; keeps this batch alive)."""
        return device_view(int(self.ptrs[i]), self.nbytes, self)

    def slot_ref(self, i: int) -> DeviceSlot:
        """Chunk i without building a cupy view (cheap; the view is made on demand)."""
        return DeviceSlot(self, i, int(self.ptrs[i]))


@dataclass
class DeviceSlot:
    """A decoded chunk in a batch: its device address, and a view when needed."""

    batch: DecodedBatch
    index: int
    ptr: int

    def as_array(self) -> Any:
        """The chunk as a 1-D uint8 cupy array (a view)."""
        return self.batch.slot(self.index)


@dataclass
class CompressedFrames:
    """zstd frames an encode left on the device: frame i is ``sizes[i]`` bytes at device
    address ``addresses[i]`` (inside ``buffer``); ``checksums``: the content checksum each
    frame is to carry (None: no checksums)."""

    buffer: Any
    addresses: np.ndarray  # uint64
    sizes: np.ndarray  # int64
    checksums: np.ndarray | None

    @property
    def room(self) -> int:
        """Bytes each frame grows by once finished (its content checksum)."""
        return 0 if self.checksums is None else 4

    def finish(self, frames: Sequence[Any]) -> None:
        """Complete the host copies ``frames`` (writable, each with :attr:`room` bytes after
        its frame): flag the content checksum in each header and append it."""
        if self.checksums is None:
            return
        for frame, size, value in zip(
            frames, self.sizes.tolist(), self.checksums.tolist(), strict=True
        ):
            frame[4] |= 0x04  # Content_Checksum_flag in the frame header descriptor
            frame[size : size + 4] = value.to_bytes(4, "little")


def device_view(ptr: int, nbytes: int, owner: Any) -> Any:
    """A 1-D uint8 cupy array over ``nbytes`` of device memory at ``ptr`` owned by
    ``owner`` (kept alive by the view)."""
    import cupy

    mem = cupy.cuda.UnownedMemory(ptr, max(nbytes, 1), owner)
    return cupy.ndarray((nbytes,), dtype=np.uint8, memptr=cupy.cuda.MemoryPointer(mem, 0))


class Workspace:
    """Device memory a decode may carve its buffers from (e.g. output bytes not yet written,
    the read's own scratch buffer): each buffer goes to the smallest region that holds it,
    as the batch planner assumed; buffers that fit nowhere are allocated."""

    def __init__(self, ptr: int = 0, size: int = 0, owner: Any = None):
        self.regions: list[list[Any]] = []  # [ptr, size, owner, used]
        if owner is not None:
            self.add(ptr, size, owner)

    def add(self, ptr: int, size: int, owner: Any) -> None:
        """Lend ``size`` bytes at device address ``ptr`` (kept alive by ``owner``)."""
        self.regions.append([ptr, size, owner, 0])

    @property
    def used(self) -> int:
        """Bytes carved so far."""
        return sum(r[3] for r in self.regions)

    def _rooms(self) -> list[int]:
        return [max(0, size - round_up(used, SLOT_ALIGN)) for _, size, _, used in self.regions]

    def room(self) -> int | None:
        """The largest buffer that can still be carved, or None when nothing is lent
        (buffers are allocated as needed)."""
        if not self.regions:
            return None
        return max(self._rooms())

    def scratch(self, stream: Any, within: Any = None) -> Callable[[int, int], Any]:
        """A scratch allocator for :func:`~linumpy_gpu.gpu.kernels.check_zstd_frames`:
        ``(least, most)`` bytes carved from ``within`` (a device buffer not yet in use)
        where it holds ``least``, else from this workspace: up to half its largest room, so
        that the decode's own buffers still fit."""

        def take(least: int, most: int) -> Any:
            if within is not None and within.nbytes >= least:
                return within[: min(most, within.nbytes)]
            room = self.room()
            size = most if room is None else min(most, max(least, room // 2))
            return self.take(size, stream)

        return take

    def take(self, nbytes: int, stream: Any = None) -> Any:
        """A 1-D uint8 device array of ``nbytes`` (carved, else allocated on ``stream``)."""
        import cupy

        k = best_fit(self._rooms(), nbytes) if nbytes > 0 else None
        if k is not None:
            region = self.regions[k]
            start = round_up(region[3], SLOT_ALIGN)
            region[3] = start + nbytes
            return device_view(region[0] + start, nbytes, region[2])
        if stream is None:
            return cupy.empty(max(nbytes, 1), dtype=np.uint8)
        with stream:
            return cupy.empty(max(nbytes, 1), dtype=np.uint8)


class ZstdBatchCodec:
    """nvCOMP zstd for one device, used from one thread (nvCOMP's rule)."""

    def __init__(self) -> None:
        import cupy

        self.cupy = cupy
        self.api = zstd_api()
        self.device_id = cupy.cuda.Device().id
        self.stream = cupy.cuda.Stream(non_blocking=True)
        # bytes packed here: frames outside the staging ring, encoded chunks coming back
        self.packing = GrowingHostBuffer()

    # -- staging ------------------------------------------------------------------------

    def _upload(self, host: np.ndarray) -> Any:
        with self.stream:
            dev = self.cupy.empty(host.shape, dtype=host.dtype)
        dev.data.copy_from_host_async(ctypes.c_void_p(host.ctypes.data), host.nbytes, self.stream)
        return dev

    def _decompress(
        self, api: BatchedApi, args: np.ndarray, temp: Any, temp_bytes: int
    ) -> tuple[Any, Any]:
        """Queue ``api``'s batched decode on this stream, one chunk a column of ``args``
        (rows: input address, stored size, decoded size, output address), in ``temp_bytes``
        of workspace ``temp``; the (status, decoded size) device arrays."""
        m = int(args.shape[1])
        d_args = self._upload(args)
        with self.stream:
            actual = self.cupy.empty(m, dtype=np.uint64)
            status = self.cupy.empty(m, dtype=np.int32)
        api.decompress(
            d_args[0].data.ptr,
            d_args[1].data.ptr,
            d_args[2].data.ptr,
            actual.data.ptr,
            m,
            temp.data.ptr,
            temp_bytes,
            d_args[3].data.ptr,
            status.data.ptr,
            self.stream.ptr,
        )
        return status, actual

    # -- decode -------------------------------------------------------------------------

    def _check_frames(
        self,
        base: np.uint64,
        offsets: np.ndarray,
        sizes: np.ndarray,
        nbytes: int,
        scratch: Callable[[int, int], Any] | None = None,
    ) -> tuple[Any, Any, np.ndarray]:
        """Run ``check_zstd_frames`` over frames at ``base + offsets`` (device memory, or
        pinned host memory the device reads directly) on this stream; returns the verdicts
        and stored checksums on the device, and the verdicts on the host (waited for)."""
        cp = self.cupy
        n = len(sizes)
        meta = np.empty((3, n), dtype=np.uint64)
        meta[0], meta[1], meta[2] = offsets, sizes, nbytes
        d_meta = self._upload(meta)
        with self.stream:
            status_d = cp.empty(n, dtype=np.int32)
            stored_d = cp.empty(n, dtype=np.uint32)
            check_zstd_frames(base, d_meta[0], d_meta[1], d_meta[2], status_d, stored_d, scratch)
        return status_d, stored_d, status_d.get(stream=self.stream)

    def decode_host(
        self,
        frames: Sequence[Any],
        nbytes: int,
        staging: Any = None,
        targets: np.ndarray | None = None,
        workspace: Workspace | None = None,
        slot_region: tuple[int, int, Any] | None = None,
    ) -> DecodedBatch:
        """Decode host-resident frames (bytes / memoryviews) of ``nbytes`` each.

        Frames that sit in pinned ``staging`` (the fetch stage read them there) go to the
        device one copy per staging arena, without being packed again (a frame may be any
        view into the staged bytes, e.g. one with its checksum cut off). ``targets``: per
        frame a device address to decode into, or 0 for a scratch slot. Buffers come from
        ``workspace`` where they fit. ``slot_region`` (address, bytes, owner): memory the
        slots may decode into if they fit, but not stay in: once decoded they move into
        nvCOMP's workspace, which the batch no longer needs (the caller's output bytes that
        this batch will write)."""
        workspace = workspace or Workspace()
        comp, offsets, sizes, release = self.stage(frames, staging, workspace)
        return self._decode_staged(
            comp,
            offsets,
            sizes,
            nbytes,
            targets=targets,
            workspace=workspace,
            release=release,
            slot_region=slot_region,
        )

    def stage(
        self, frames: Sequence[Any], staging: Any, workspace: Workspace
    ) -> tuple[Any, np.ndarray, np.ndarray, Callable[[], None] | None]:
        """Copy host frames to one device buffer on this stream, after the caller's work:
        (buffer, offset of each frame in it, frame sizes, a callable giving the pinned
        staging back once the device no longer reads it, or None). Frames in ``staging``
        go one copy per arena; others are packed into this codec's pinned buffer first."""
        sizes = np.fromiter((len(f) for f in frames), dtype=np.uint64, count=len(frames))
        self.stream.wait_event(self.cupy.cuda.get_current_stream().record())
        where = staging.locate_all(frames) if staging is not None and frames else None
        if where is not None:
            arena_of, in_arena = where
            comp, starts = staging.upload(lambda n: workspace.take(n, self.stream), self.stream)
            offsets = (np.asarray(starts, dtype=np.int64)[arena_of] + in_arena).astype(np.uint64)
            return comp, offsets, sizes, staging.release
        padded = (sizes + np.uint64(SLOT_ALIGN - 1)) // np.uint64(SLOT_ALIGN)
        padded *= np.uint64(SLOT_ALIGN)
        offsets = np.zeros(len(frames), dtype=np.uint64)
        if len(frames) > 1:
            np.cumsum(padded[:-1], out=offsets[1:])
        total = int(offsets[-1] + sizes[-1]) if len(frames) else 0
        host = self.packing.get(total)
        for f, off, size in zip(frames, offsets, sizes, strict=True):
            host[int(off) : int(off) + int(size)] = np.frombuffer(f, dtype=np.uint8)
        comp = workspace.take(max(total, 1), self.stream)
        comp.data.copy_from_host_async(
            ctypes.c_void_p(host.ctypes.data), max(total, 1), self.stream
        )
        return comp, offsets, sizes, staging.release if staging is not None else None

    def upload_raw(self, frames: Sequence[Any], nbytes: int, staging: Any = None) -> DecodedBatch:
        """Uncompressed chunks: to the device (one copy per staging arena), used in place."""
        sizes = [len(f) for f in frames]
        self.stream.wait_event(self.cupy.cuda.get_current_stream().record())
        where = staging.locate_all(frames) if staging is not None and frames else None
        if where is not None:
            dev, starts = staging.upload(lambda n: Workspace().take(n, self.stream), self.stream)
            offsets = np.asarray(starts, dtype=np.int64)[where[0]] + where[1]
        else:
            host = self.packing.get(sum(sizes))
            offsets, pos = [], 0
            for f, size in zip(frames, sizes, strict=True):
                host[pos : pos + size] = np.frombuffer(f, dtype=np.uint8)
                offsets.append(pos)
                pos += size
            dev = self._upload(host[: max(pos, 1)])
            self.stream.synchronize()
            if staging is not None:
                staging.release()
        ptrs = np.uint64(dev.data.ptr) + np.asarray(offsets, dtype=np.uint64)
        batch = DecodedBatch(ptrs, nbytes, owners=[dev])
        for i, size in enumerate(sizes):
            if size != nbytes:
                batch.failures[i] = f"uncompressed chunk is {size} bytes, expected {nbytes}"
        return batch

    def decode_device(self, frames: Sequence[Any], nbytes: int) -> DecodedBatch:
        """Decode device-resident frames (1-D uint8 cupy arrays)."""
        cp = self.cupy
        align = max(8, int(self.api.decompress_alignments.input))
        sizes = np.array([f.size for f in frames], dtype=np.uint64)
        padded = [round_up(int(s), align) for s in sizes]
        offsets = (
            np.concatenate([[0], np.cumsum(padded[:-1])]).astype(np.uint64) if frames else sizes
        )
        self.stream.wait_event(cp.cuda.get_current_stream().record())
        with self.stream:
            comp = cp.empty(max(1, int(sum(padded))), dtype=np.uint8)
            for f, off, size in zip(frames, offsets, sizes, strict=True):
                comp[int(off) : int(off) + int(size)] = f
        return self._decode_staged(comp, offsets, sizes, nbytes)

    def _decode_staged(
        self, comp: Any, offsets: np.ndarray, sizes: np.ndarray, nbytes: int, **options: Any
    ) -> DecodedBatch:
        """Decode frames staged in ``comp`` (``options``: see :meth:`_decode_checked`); the
        pinned staging behind ``options["release"]`` is given back however it ends."""
        release = options.get("release")
        try:
            return self._decode_checked(comp, offsets, sizes, nbytes, **options)
        finally:
            if release is not None:
                release()  # again after a failure: releasing twice is harmless

    def _decode_checked(
        self,
        comp: Any,
        offsets: np.ndarray,
        sizes: np.ndarray,
        nbytes: int,
        targets: np.ndarray | None = None,
        workspace: Workspace | None = None,
        release: Callable[[], None] | None = None,
        slot_region: tuple[int, int, Any] | None = None,
    ) -> DecodedBatch:
        """Check, decode and verify the frames at ``comp + offsets``; ``release()`` gives
        back the pinned staging they came from once they are no longer read there."""
        cp = self.cupy
        workspace = workspace or Workspace()
        n = len(sizes)
        stride = round_up(max(nbytes, 1), SLOT_ALIGN)
        ptrs = np.zeros(n, dtype=np.uint64) if targets is None else targets.astype(np.uint64)
        need_slot = np.flatnonzero(ptrs == 0)
        batch = DecodedBatch(ptrs, nbytes, owners=[comp])
        slot_bytes = int(need_slot.size) * stride
        moving = slot_region is not None and 0 < slot_bytes <= slot_region[1]
        if slot_region is not None and moving:
            slots = device_view(slot_region[0], slot_bytes, slot_region[2])
        elif slot_bytes:
            slots = workspace.take(slot_bytes)  # current stream: placed there
            batch.owners.append(slots)
        if slot_bytes:
            ptrs[need_slot] = np.uint64(slots.data.ptr) + np.arange(
                need_slot.size, dtype=np.uint64
            ) * np.uint64(stride)
        if n == 0:
            return batch
        # nvCOMP's workspace, sized for every frame, holds the check's scratch until the
        # decode needs it
        temp_bytes = self.api.decompress_temp_bytes(n, nbytes, n * nbytes, self.stream.ptr)
        temp = workspace.take(temp_bytes, self.stream)
        # waits for the verdicts: the decode set depends on them
        status, stored, status_h = self._check_frames(
            np.uint64(comp.data.ptr), offsets, sizes, nbytes, workspace.scratch(self.stream, temp)
        )
        ok = np.flatnonzero((status_h == 0) | (status_h == 1))
        nv_status_h = np.zeros(n, dtype=np.int32)
        actual_h = np.full(n, nbytes, dtype=np.uint64)
        mismatch_h = np.zeros(n, dtype=np.int32)
        if ok.size:
            args = np.empty((4, int(ok.size)), dtype=np.uint64)
            args[0] = np.uint64(comp.data.ptr) + offsets[ok]
            args[1] = sizes[ok]
            args[2] = nbytes
            args[3] = ptrs[ok]
            if release is not None:
                release()  # the fetch stage may refill the arenas now
            nv_status, actual = self._decompress(self.api, args, temp, temp_bytes)
            if (status_h[ok] == 1).any():
                d_ptrs = self._upload(ptrs)
                with self.stream:
                    mismatch = cp.zeros(n, dtype=np.int32)
                    threads = 4 * n
                    kernel("zstd_xxh64_verify")(
                        ((threads + _BLOCK - 1) // _BLOCK,),
                        (_BLOCK,),
                        (d_ptrs, np.uint64(nbytes), status, stored, np.int32(n), mismatch),
                    )
                mismatch_h = mismatch.get(stream=self.stream)
            nv_status_h[ok] = nv_status.get(stream=self.stream)
            actual_h[ok] = actual.get(stream=self.stream)
        if moving:
            self._move_slots(batch, need_slot, slots, temp, workspace, stride)
        self.stream.synchronize()
        bad = (
            ~np.isin(status_h, (0, 1))
            | (nv_status_h != 0)
            | (actual_h != nbytes)
            | (mismatch_h != 0)
        )
        for i in np.flatnonzero(bad).tolist():
            st = int(status_h[i])
            if st not in (0, 1):
                reason = FRAME_STATUS.get(st, (f"frame check status {st}",))[0]
            elif nv_status_h[i] != 0:
                reason = f"nvCOMP reported '{self.api.status_string(int(nv_status_h[i]))}'"
            elif actual_h[i] != nbytes:
                reason = f"nvCOMP decoded {int(actual_h[i])} bytes, expected {nbytes}"
            elif mismatch_h[i]:
                reason = "zstd content checksum mismatch"
            else:
                continue
            # the frame as the GPU saw it (its pinned copy may hold the next batch by now)
            frame = comp[int(offsets[i]) : int(offsets[i] + sizes[i])].get(stream=self.stream)
            self._cpu_fallback(batch, i, frame.tobytes(), reason)
        return batch

    def _move_slots(
        self,
        batch: DecodedBatch,
        need_slot: np.ndarray,
        slots: Any,
        temp: Any,
        workspace: Workspace,
        stride: int,
    ) -> None:
        """Move decoded slots out of memory they may not stay in, into nvCOMP's workspace
        (free once the decode is done; queued after it on this stream)."""
        cp = self.cupy
        nbytes = int(slots.nbytes)
        if temp is None or temp.nbytes < nbytes:
            temp = workspace.take(nbytes, self.stream)
        cp.cuda.runtime.memcpyAsync(
            temp.data.ptr,
            slots.data.ptr,
            nbytes,
            cp.cuda.runtime.memcpyDeviceToDevice,
            self.stream.ptr,
        )
        batch.owners.append(temp)
        batch.ptrs[need_slot] = np.uint64(temp.data.ptr) + np.arange(
            need_slot.size, dtype=np.uint64
        ) * np.uint64(stride)

    def _cpu_fallback(self, batch: DecodedBatch, i: int, frame: bytes, gpu_reason: str) -> None:
        try:  # bounded: a frame the device refused may declare any size
            decoded = zstd_cpu.decode(frame, batch.nbytes)
        except CodecError as exc:
            batch.failures[i] = f"{gpu_reason}; the CPU zstd agrees: {exc}"
            return
        raw = np.frombuffer(decoded, dtype=np.uint8)
        if raw.size != batch.nbytes:
            batch.failures[i] = (
                f"{gpu_reason}; the CPU zstd decodes it to {raw.size} bytes, "
                f"expected {batch.nbytes}"
            )
            return
        batch.slot(i).set(raw)
        batch.cpu_decoded.append(i)

    # -- encode -------------------------------------------------------------------------

    def encode(
        self, data: Any, nbytes: int, n: int, stride: int, checksum: bool
    ) -> CompressedFrames:
        """Compress ``n`` chunks of ``nbytes`` at ``data.data.ptr + i * stride`` (device) into
        zstd frames readable by any zstd, left on the device for the caller to copy out
        (with ``checksum``, :meth:`CompressedFrames.finish` adds the content checksums)."""
        cp = self.cupy
        if n == 0:
            return CompressedFrames(None, np.zeros(0, np.uint64), np.zeros(0, np.int64), None)
        self.stream.wait_event(cp.cuda.get_current_stream().record())
        max_out = round_up(self.api.max_compressed_bytes(nbytes), 8)
        args = np.empty((4, n), dtype=np.uint64)
        with self.stream:
            comp = cp.empty(n * max_out, dtype=np.uint8)
        args[0] = np.uint64(data.data.ptr) + np.arange(n, dtype=np.uint64) * np.uint64(stride)
        args[1] = nbytes
        args[2] = np.uint64(comp.data.ptr) + np.arange(n, dtype=np.uint64) * np.uint64(max_out)
        d_args = self._upload(args)
        temp_bytes = self.api.compress_temp_bytes(n, nbytes, n * nbytes, self.stream.ptr)
        with self.stream:
            temp = cp.empty(max(temp_bytes, 1), dtype=np.uint8)
            comp_sizes = cp.empty(n, dtype=np.uint64)
            statuses = cp.empty(n, dtype=np.int32)
        self.api.compress(
            d_args[0].data.ptr,
            d_args[1].data.ptr,
            nbytes,
            n,
            temp.data.ptr,
            temp_bytes,
            d_args[2].data.ptr,
            comp_sizes.data.ptr,
            statuses.data.ptr,
            self.stream.ptr,
        )
        sums = None
        if checksum:
            with self.stream:
                sums_d = cp.empty(n, dtype=np.uint32)
                kernel("xxh64_low32")(
                    ((n + _BLOCK - 1) // _BLOCK,),
                    (_BLOCK,),
                    (data, np.uint64(stride), np.uint64(nbytes), np.int32(n), sums_d),
                )
            sums = sums_d.get(stream=self.stream)
        sizes_h = comp_sizes.get(stream=self.stream).astype(np.int64)
        status_h = statuses.get(stream=self.stream)
        if (status_h != 0).any():
            bad = int(np.flatnonzero(status_h)[0])
            raise NvcompError(
                f"nvCOMP zstd compression failed for chunk {bad}: "
                f"{self.api.status_string(int(status_h[bad]))}"
            )
        return CompressedFrames(comp, args[2], sizes_h, sums)


_local = threading.local()


def codec_for_current_device() -> ZstdBatchCodec:
    """The calling thread's codec for cupy's current device (created on first use)."""
    import cupy

    device = cupy.cuda.Device().id
    codecs = getattr(_local, "codecs", None)
    if codecs is None:
        codecs = _local.codecs = {}
    if device not in codecs:
        codecs[device] = ZstdBatchCodec()
    return codecs[device]
