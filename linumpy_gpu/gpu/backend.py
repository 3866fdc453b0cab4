"""The GPU backend: cupy arrays, zstd decoded in nvCOMP batches, other codecs on the CPU."""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..engine.backend import Backend, CpuBackend, EncodedChunk
from ..engine.codecs import ChecksumMismatch, crc32c_strip
from ..engine.layout import ChunkFormat
from ..errors import ChunkDecodeError, OutputMismatchError
from .zstd_batch import SLOT_ALIGN, codec_for_current_device, round_up

_local = threading.local()


def gpu_decodable(fmt: ChunkFormat) -> bool:
    """True when the chain is zstd (optionally followed by crc32c): decoded by nvCOMP."""
    names = [c.name for c in fmt.codecs]
    return names in (["zstd"], ["zstd", "crc32c"])


class GpuBackend(Backend):
    name = "gpu"

    def __init__(self, ordinal: int | None = None):
        import cupy

        self.xp = cupy
        self.device = cupy.cuda.Device(cupy.cuda.Device().id if ordinal is None else ordinal)
        self.name = f"cuda:{self.device.id}"
        self._cpu = CpuBackend()

    def empty(self, shape, dtype):
        with self.device:
            return self.xp.empty(shape, dtype=dtype)

    def owns(self, array):
        return isinstance(array, self.xp.ndarray) and array.device.id == self.device.id

    def check_out(self, out, shape, dtype):
        if isinstance(out, self.xp.ndarray) and out.device.id != self.device.id:
            raise OutputMismatchError(
                f"out lives on cuda:{out.device.id}, this image reads to {self.name}"
            )
        super().check_out(out, shape, dtype)

    def from_host(self, array):
        with self.device:
            return self.xp.asarray(array)

    def finish(self) -> None:
        """Reads stay queued on the current stream; nothing to wait for here."""

    def decode(self, chunks: Sequence[EncodedChunk], fmt: ChunkFormat, array: str) -> list[Any]:
        with self.device:
            if gpu_decodable(fmt):
                return self._decode_zstd(chunks, fmt, array)
            return self._upload_all(self._cpu.decode(chunks, fmt, array))

    def _decode_zstd(self, chunks, fmt, array) -> list[Any]:
        frames: list[Any] = []
        results: list[Any] = [None] * len(chunks)
        positions = []
        has_crc = fmt.codecs[-1].name == "crc32c"
        for i, (key, data) in enumerate(chunks):
            if has_crc:
                try:
                    data = crc32c_strip(data)
                except ChecksumMismatch as exc:
                    results[i] = ChunkDecodeError(array, key, str(exc))
                    continue
            positions.append(i)
            frames.append(data)
        batch = codec_for_current_device().decode_host(frames, fmt.nbytes)
        for slot, i in enumerate(positions):
            reason = batch.failures.get(slot)
            results[i] = (
                ChunkDecodeError(array, chunks[i][0], reason)
                if reason is not None
                else batch.slot(slot)
            )
        return results

    def _upload_all(self, decoded: list[Any]) -> list[Any]:
        """Copy CPU-decoded chunks to the GPU in one transfer through pinned memory."""
        good = [d for d in decoded if isinstance(d, np.ndarray)]
        if not good:
            return decoded
        stride = round_up(max(d.size for d in good), SLOT_ALIGN)
        staging = _pinned(stride * len(good))
        for k, d in enumerate(good):
            staging[k * stride : k * stride + d.size] = d
        dev = self.xp.empty(stride * len(good), dtype=np.uint8)
        stream = self.xp.cuda.get_current_stream()
        dev.data.copy_from_host_async(ctypes.c_void_p(staging.ctypes.data), dev.nbytes, stream)
        stream.synchronize()  # the pinned buffer is reused by the next batch
        out, k = [], 0
        for d in decoded:
            if isinstance(d, np.ndarray):
                out.append(dev[k * stride : k * stride + d.size])
                k += 1
            else:
                out.append(d)
        return out


def _pinned(nbytes: int) -> np.ndarray:
    import cupy

    view = getattr(_local, "pinned", None)
    if view is None or view.size < nbytes:
        size = max(nbytes, 1 << 20)
        mem = cupy.cuda.alloc_pinned_memory(size)
        _local.pinned_mem = mem
        view = _local.pinned = np.frombuffer(mem, dtype=np.uint8, count=size)
    return view[:nbytes]
