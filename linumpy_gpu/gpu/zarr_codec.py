"""``NvcompZstdCodec`` and ``NvcompBloscCodec``: zarr's ``zstd`` and ``blosc`` codecs,
decoded on the GPU in batches (zstd also encoded there).

Drop-ins for :class:`zarr.codecs.ZstdCodec` and :class:`zarr.codecs.BloscCodec`: same JSON,
same validation (inherited), output readable by any zstd / Blosc. Blosc frames decode
through :mod:`linumpy_gpu.gpu.nvcomp.streams` (LZ4 and zstd inner codecs on nvCOMP, others
on the CPU Blosc) and encode with the CPU Blosc. Batches
arrive through zarr's batched ``decode``/``encode`` (set ``codec_pipeline.batch_size`` large,
as :func:`gpu_zarr_context` does); the synchronous ``_decode_sync``/``_encode_sync`` used by
zarr 3.3+'s ``FusedCodecPipeline`` run on the GPU too, one chunk at a time, never silently
on the CPU. GPU work runs in a worker thread (``asyncio.to_thread``), where it is queued on
that thread's CUDA stream and waited for through the stream; zarr's event loop never blocks.

nvCOMP exposes no compression level: ``level`` is recorded in the metadata and used by CPU
writers, the GPU encoder uses nvCOMP's own (about zstd level 1-3 in ratio).

Decoded sizes come from the chunk spec (``prod(shape) * itemsize``), so the codec must
directly follow the array-to-bytes codec, as every common writer does.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Iterable
from typing import Any

import numpy as np
from zarr.codecs import BloscCodec, ZstdCodec

from linumpy_gpu.codecs import ByteCodec, blosc, decode_chain, lz4
from linumpy_gpu.errors import ChunkDecodeError, CodecError
from linumpy_gpu.gpu.deps import require_gpu
from linumpy_gpu.gpu.nvcomp import streams
from linumpy_gpu.gpu.nvcomp.zstd import SLOT_ALIGN, codec_for_current_device, round_up
from linumpy_gpu.gpu.staging import download_spans

QUALNAME = "linumpy_gpu.gpu.zarr_codec.NvcompZstdCodec"
BLOSC_QUALNAME = "linumpy_gpu.gpu.zarr_codec.NvcompBloscCodec"
# stored bytes decoded per nvCOMP call when frames come from host memory: within the
# pinned budget a codec's packing buffer may grow to (pinned.DEFAULT_BUDGET)
HOST_PIECE_BYTES = 64 << 20
# codecs decode_frames takes (numcodecs / zarr ids)
GPU_CODECS = ("zstd", "blosc", "lz4")


def _is_device(a: Any) -> bool:
    return hasattr(a, "__cuda_array_interface__")


def _on_device(buffer_class: Any) -> bool:
    return buffer_class.__module__.rsplit(".", 1)[-1] == "gpu"


def spec_nbytes(spec: Any) -> int:
    """Decoded bytes of one chunk of zarr's chunk ``spec``."""
    dtype = spec.dtype.to_native_dtype() if hasattr(spec.dtype, "to_native_dtype") else spec.dtype
    return math.prod(spec.shape) * np.dtype(dtype).itemsize


def decode_frames(frames: list[Any], nbytes: int, what: str, codec_id: str = "zstd") -> list[Any]:
    """Decode chunks of codec ``codec_id`` (one of :data:`GPU_CODECS`; device or host arrays)
    of ``nbytes`` each to 1-D uint8 cupy arrays; damaged chunks raise
    :class:`ChunkDecodeError`."""
    codec = codec_for_current_device()
    if codec_id == "zstd" and all(_is_device(f) for f in frames):
        pieces = [(0, codec.decode_device(frames, nbytes))]
    else:
        pieces = []
        for start, stop in _host_pieces([len(f) for f in frames]):
            host = [f.get() if _is_device(f) else np.asarray(f) for f in frames[start:stop]]
            if codec_id == "zstd":
                pieces.append((start, codec.decode_host(host, nbytes)))
            else:
                pieces.append((start, _decode_streams(codec, host, nbytes, codec_id)))
    failures = {start + i: reason for start, b in pieces for i, reason in b.failures.items()}
    if failures:
        i, reason = min(failures.items())
        err = ChunkDecodeError(what, f"chunk {i} of a {len(frames)}-chunk zarr batch", reason)
        if len(failures) > 1:
            err.add_note(f"{len(failures)} damaged chunks in this batch")
        raise err
    return [b.slot(i) for _, b in pieces for i in range(len(b.ptrs))]


def _host_pieces(sizes: list[int]) -> list[tuple[int, int]]:
    """Consecutive runs of frames of at most HOST_PIECE_BYTES stored bytes each (one frame
    at least): each run is packed into the codec's reusable pinned buffer and copied to the
    device in one transfer, where a whole zarr batch (often over a gigabyte) would be
    packed into fresh pageable memory every time."""
    pieces, start, total = [], 0, 0
    for i, size in enumerate(sizes):
        if i > start and total + size > HOST_PIECE_BYTES:
            pieces.append((start, i))
            start, total = i, 0
        total += size
    if start < len(sizes):
        pieces.append((start, len(sizes)))
    return pieces


def _decode_streams(codec: Any, host: list[Any], nbytes: int, codec_id: str) -> Any:
    if codec_id == "lz4":
        layout = lz4.stream_layout(host, nbytes)
    else:
        layout = blosc.stream_layout(host, nbytes, streams.GPU_INNER)
    chain = [ByteCodec(codec_id)]

    def on_cpu(frames: list[bytes]) -> list[Any]:
        out: list[Any] = []
        for frame in frames:
            try:
                out.append(decode_chain(frame, chain, nbytes))
            except CodecError as exc:
                out.append(str(exc))
        return out

    return streams.decode_frames(codec, host, nbytes, layout, on_cpu)


def encode_arrays(arrays: list[Any], checksum: bool) -> list[bytes]:
    """Compress equally sized 1-D uint8 device arrays into zstd frames."""
    import cupy

    nbytes = int(arrays[0].size)
    stride = round_up(max(nbytes, 1), SLOT_ALIGN)
    packed = cupy.empty(max(1, stride * len(arrays)), dtype=np.uint8)
    for i, a in enumerate(arrays):
        packed[i * stride : i * stride + nbytes] = a
    codec = codec_for_current_device()
    frames = codec.encode(packed, nbytes, len(arrays), stride, checksum)
    views, _ = download_spans(frames.addresses, frames.sizes, codec.stream, room=frames.room)
    frames.finish(views)
    return [bytes(v) for v in views]


class _GpuDecode:
    """zarr's batched, single and synchronous decode entry points, all on the GPU."""

    codec_id = "zstd"

    def _decode_batch(self, items: list[tuple[Any, Any]]) -> list[Any]:
        # a codec made where no GPU is (zarr makes codecs as it reads metadata) says what
        # is missing when it is first used, not with an import error from inside zarr
        require_gpu()
        out: list[Any] = [None] * len(items)
        groups: dict[int, list[int]] = {}
        for i, (buf, spec) in enumerate(items):
            if buf is not None:
                groups.setdefault(spec_nbytes(spec), []).append(i)
        for nbytes, idx in groups.items():
            frames = [items[i][0].as_array_like() for i in idx]
            flat = [f.reshape(-1).view(np.uint8) for f in frames]
            decoded = decode_frames(flat, nbytes, self.codec_id, self.codec_id)
            for i, d in zip(idx, decoded, strict=True):
                proto = items[i][1].prototype.buffer
                out[i] = proto.from_array_like(d if _on_device(proto) else d.get())
        return out

    async def decode(self, chunks_and_specs: Iterable[tuple[Any, Any]]) -> Iterable[Any]:
        items = list(chunks_and_specs)
        return await asyncio.to_thread(self._decode_batch, items)

    async def _decode_single(self, chunk_bytes: Any, chunk_spec: Any) -> Any:
        return (await asyncio.to_thread(self._decode_batch, [(chunk_bytes, chunk_spec)]))[0]

    def _decode_sync(self, chunk_bytes: Any, chunk_spec: Any) -> Any:
        return self._decode_batch([(chunk_bytes, chunk_spec)])[0]


class NvcompBloscCodec(_GpuDecode, BloscCodec):
    """zarr's blosc codec with nvCOMP batched decode on the current cupy device (encode:
    the CPU Blosc)."""

    codec_id = "blosc"


class NvcompZstdCodec(_GpuDecode, ZstdCodec):
    """zarr's zstd codec with nvCOMP batched decode/encode on the current cupy device."""

    def _encode_batch(self, items: list[tuple[Any, Any]]) -> list[Any]:
        require_gpu()
        import cupy

        out: list[Any] = [None] * len(items)
        groups: dict[int, list[int]] = {}
        for i, (buf, _spec) in enumerate(items):
            if buf is not None:
                groups.setdefault(len(buf), []).append(i)
        for _, idx in groups.items():
            arrays = [
                cupy.asarray(items[i][0].as_array_like()).reshape(-1).view(np.uint8) for i in idx
            ]
            frames = encode_arrays(arrays, self.checksum)
            for i, frame in zip(idx, frames, strict=True):
                out[i] = items[i][1].prototype.buffer.from_bytes(frame)
        return out

    async def encode(self, chunks_and_specs: Iterable[tuple[Any, Any]]) -> Iterable[Any]:
        items = list(chunks_and_specs)
        return await asyncio.to_thread(self._encode_batch, items)

    async def _encode_single(self, chunk_bytes: Any, chunk_spec: Any) -> Any:
        return (await asyncio.to_thread(self._encode_batch, [(chunk_bytes, chunk_spec)]))[0]

    def _encode_sync(self, chunk_bytes: Any, chunk_spec: Any) -> Any:
        return self._encode_batch([(chunk_bytes, chunk_spec)])[0]


_registered = False


def register_nvcomp_zstd() -> bool:
    """Register :class:`NvcompZstdCodec` and :class:`NvcompBloscCodec` under zarr's ``zstd``
    and ``blosc`` codec ids (idempotent).

    Returns True when registered; False where the GPU stack (cupy, nvCOMP, a CUDA device)
    is missing, in which case nothing is registered and zarr's CPU zstd codec keeps
    answering. Registering makes the class known to zarr; zarr uses it where its config
    names them (:func:`gpu_zstd_config`, or :func:`~linumpy_gpu.gpu_zarr_context`)."""
    global _registered
    if _registered:
        return True
    from linumpy_gpu.gpu.deps import missing_pieces

    if missing_pieces():
        return False
    from zarr.registry import register_codec

    register_codec("zstd", NvcompZstdCodec, qualname=QUALNAME)
    register_codec("blosc", NvcompBloscCodec, qualname=BLOSC_QUALNAME)
    _registered = True
    return True


def gpu_zstd_config(batch_size: int = 1024, concurrency: int = 64) -> dict[str, Any]:
    """The zarr config that :func:`~linumpy_gpu.gpu_zarr_context` applies: GPU buffers,
    ``zstd`` and ``blosc`` through :class:`NvcompZstdCodec` and :class:`NvcompBloscCodec`,
    and a codec pipeline batch (``batch_size``
    chunks) and async concurrency large enough for a batched codec to see many chunks at
    once. Use it with ``zarr.config.set(...)`` after :func:`register_nvcomp_zstd`.

    Raises :class:`~linumpy_gpu.GpuUnavailableError` naming what is missing where the GPU
    stack is not there: the config names codecs and buffers that only it provides, and
    zarr would refuse every read under it."""
    if not _registered:
        require_gpu()
    return {
        "buffer": "zarr.buffer.gpu.Buffer",
        "ndbuffer": "zarr.buffer.gpu.NDBuffer",
        "codecs.zstd": QUALNAME,
        "codecs.blosc": BLOSC_QUALNAME,
        "codec_pipeline.batch_size": int(batch_size),
        "async.concurrency": int(concurrency),
    }
