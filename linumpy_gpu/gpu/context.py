"""``gpu_zarr_context()``: plain zarr-python arrays return cupy, decoded by our GPU codecs.

Inside the context:
- zarr's buffers are GPU buffers (reads return cupy arrays);
- the ``zstd`` and ``blosc`` codecs resolve to :class:`NvcompZstdCodec` and
  :class:`NvcompBloscCodec` (batched nvCOMP);
- the codec pipeline batch size and async concurrency are raised so that a batched codec
  sees many chunks per call (zarr's default batch size is 1);
- zarr v2 arrays (whose compressor zarr wraps in ``V2Codec``) work: zstd, Blosc and LZ4 on
  the GPU, any other compressor or filter on the CPU followed by one copy, never the crash that plain
  ``zarr.config.enable_gpu()`` gives with numcodecs and cupy input.
Every setting is restored on exit, also when the block raises; contexts nest.

Codecs are chosen when an array (or its group) is *opened*: open arrays inside the context.
An array opened before entering keeps the codecs it was opened with.
"""

from __future__ import annotations

import contextlib
import math
import threading
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np

from linumpy_gpu.gpu.deps import require_gpu

DEFAULT_BATCH_SIZE = 1024
DEFAULT_CONCURRENCY = 64

_patch_lock = threading.Lock()
_patch_depth = 0
_originals: dict[str, Any] = {}


@contextlib.contextmanager
def gpu_zarr_context(
    device: int | None = None,
    *,
    batch_size: int = DEFAULT_BATCH_SIZE,
    concurrency: int = DEFAULT_CONCURRENCY,
) -> Iterator[None]:
    """Make zarr-python read (and write) through the GPU on cupy device ``device``."""
    require_gpu()
    import cupy
    import zarr

    from linumpy_gpu.gpu.zarr_codec import gpu_zstd_config, register_nvcomp_zstd

    register_nvcomp_zstd()
    settings = gpu_zstd_config(batch_size, concurrency)
    dev = cupy.cuda.Device(cupy.cuda.Device().id if device is None else device)
    with dev, zarr.config.set(settings), _v2_codecs_on_gpu():
        yield


@contextlib.contextmanager
def _v2_codecs_on_gpu() -> Iterator[None]:
    global _patch_depth
    from zarr.codecs._v2 import V2Codec

    with _patch_lock:
        if _patch_depth == 0:
            for name, replacement in _V2_PATCHES.items():
                if hasattr(V2Codec, name):  # zarr 3.1 has no *_sync methods
                    _originals[name] = (getattr(V2Codec, name), name in vars(V2Codec))
                    setattr(V2Codec, name, replacement)
        _patch_depth += 1
    try:
        yield
    finally:
        with _patch_lock:
            _patch_depth -= 1
            if _patch_depth == 0:
                for name, (original, own) in _originals.items():
                    if own:
                        setattr(V2Codec, name, original)
                    else:
                        delattr(V2Codec, name)
                _originals.clear()


def _gpu_codec(codec: Any) -> str | None:
    """The compressor's id where the GPU decodes it (no filters before it), else None."""
    from linumpy_gpu.gpu.zarr_codec import GPU_CODECS

    cid = getattr(codec.compressor, "codec_id", None)
    return cid if cid in GPU_CODECS and not codec.filters else None


def _host_buffer(chunk_bytes: Any) -> Any:
    from zarr.core.buffer import cpu

    data = chunk_bytes.as_array_like()
    return cpu.Buffer.from_array_like(data.get() if hasattr(data, "get") else data)


def _v2_array(codec: Any, raw: Any, spec: Any) -> Any:
    from zarr.registry import get_ndbuffer_class

    dtype = spec.dtype.to_native_dtype()
    chunk = raw.view(dtype).reshape(spec.shape, order=spec.order)
    return get_ndbuffer_class().from_ndarray_like(chunk)


def _nbytes(spec: Any) -> int:
    return math.prod(spec.shape) * np.dtype(spec.dtype.to_native_dtype()).itemsize


def _original(name: str) -> Any:
    return _originals[name][0]


def _v2_decode_sync(self: Any, chunk_bytes: Any, chunk_spec: Any) -> Any:
    if _gpu_codec(self):
        return _v2_decode_on_gpu(self, chunk_bytes, chunk_spec)
    with warnings.catch_warnings():  # zarr warns when it copies host arrays to the GPU
        warnings.simplefilter("ignore", UserWarning)
        return _original("_decode_sync")(self, _host_buffer(chunk_bytes), chunk_spec)


async def _v2_decode_single(self: Any, chunk_bytes: Any, chunk_spec: Any) -> Any:
    import asyncio

    if _gpu_codec(self):
        return await asyncio.to_thread(_v2_decode_on_gpu, self, chunk_bytes, chunk_spec)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return await _original("_decode_single")(self, _host_buffer(chunk_bytes), chunk_spec)


def _v2_decode_on_gpu(self: Any, chunk_bytes: Any, chunk_spec: Any) -> Any:
    from linumpy_gpu.gpu.zarr_codec import decode_frames

    cid = _gpu_codec(self)
    frame = chunk_bytes.as_array_like().reshape(-1).view(np.uint8)
    raw = decode_frames([frame], _nbytes(chunk_spec), f"zarr v2 {cid}", cid or "zstd")[0]
    return _v2_array(self, raw, chunk_spec)


async def _v2_decode_batch(self: Any, chunks_and_specs: Any) -> Any:
    """All chunks of a batch in one nvCOMP call where the GPU decodes the compressor;
    anything else per chunk."""
    import asyncio

    items = list(chunks_and_specs)
    cid = _gpu_codec(self)
    if cid is None or not items:
        return await _original("decode")(self, items)

    def run() -> list[Any]:
        from linumpy_gpu.gpu.zarr_codec import decode_frames

        present = [i for i, (b, _) in enumerate(items) if b is not None]
        out: list[Any] = [None] * len(items)
        by_size: dict[int, list[int]] = {}
        for i in present:
            by_size.setdefault(_nbytes(items[i][1]), []).append(i)
        for nbytes, idx in by_size.items():
            frames = [items[i][0].as_array_like().reshape(-1).view(np.uint8) for i in idx]
            decoded = decode_frames(frames, nbytes, f"zarr v2 {cid}", cid)
            for i, raw in zip(idx, decoded, strict=True):
                out[i] = _v2_array(self, raw, items[i][1])
        return out

    return await asyncio.to_thread(run)


def _to_host_ndbuffer(chunk_array: Any) -> Any:
    from zarr.core.buffer import cpu

    data = chunk_array.as_ndarray_like()
    return cpu.NDBuffer.from_ndarray_like(data.get() if hasattr(data, "get") else data)


def _v2_encode_sync(self: Any, chunk_array: Any, chunk_spec: Any) -> Any:
    return _original("_encode_sync")(self, _to_host_ndbuffer(chunk_array), chunk_spec)


async def _v2_encode_single(self: Any, chunk_array: Any, chunk_spec: Any) -> Any:
    return await _original("_encode_single")(self, _to_host_ndbuffer(chunk_array), chunk_spec)


_V2_PATCHES = {
    "_decode_sync": _v2_decode_sync,
    "_decode_single": _v2_decode_single,
    "decode": _v2_decode_batch,
    "_encode_sync": _v2_encode_sync,
    "_encode_single": _v2_encode_single,
}
