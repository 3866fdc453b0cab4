"""gzip and zlib (Deflate with a gzip or zlib wrapper), decoded with an output bound.

libdeflate (from the ``deflate`` package) decodes a whole chunk into a buffer of the
chunk's size about twice as fast as zlib, with the GIL released; its ``_ex`` entry points
report how many input bytes each stream used, so a chunk decodes only when its streams
account for every byte. Anything it refuses is decoded again by zlib, whose message says
why the chunk is damaged.
"""

from __future__ import annotations

import ctypes
import threading
import weakref
import zlib
from functools import cache
from typing import Any

import numpy as np

from linumpy_gpu.errors import CodecError

_WBITS = {"gzip": 16 + zlib.MAX_WBITS, "zlib": zlib.MAX_WBITS}


def decode(data: Any, limit: int, wrapper: str) -> Any:
    """Decode one gzip or zlib stream (gzip: one or more members) into at most ``limit``
    bytes; more, trailing bytes, a bad checksum or a truncated stream are errors."""
    fast = _decode_libdeflate(data, limit, wrapper)
    if fast is not None:
        return fast
    return _decode_zlib(data, limit, wrapper)


def _decode_zlib(data: Any, limit: int, wrapper: str) -> bytes:
    d = zlib.decompressobj(_WBITS[wrapper])
    try:
        out = d.decompress(data, limit + 1)
    except zlib.error as exc:
        raise CodecError(f"{wrapper}: {exc}") from exc
    if len(out) > limit or d.unconsumed_tail:
        raise CodecError(f"{wrapper}: decodes to more than the {limit} bytes the chunk holds")
    if not d.eof:
        raise CodecError(f"{wrapper}: the stream is truncated")
    if d.unused_data and wrapper == "zlib":
        raise CodecError(f"{wrapper}: {len(d.unused_data)} bytes follow the stream")
    if d.unused_data:  # gzip allows several members back to back
        rest = _decode_zlib(d.unused_data, limit - len(out), wrapper)
        return out + rest
    return out


class _Libdeflate:
    """libdeflate's decompressors, one per thread (a decompressor is not thread-safe)."""

    def __init__(self, lib: ctypes.CDLL):
        self.lib = lib
        size_p = ctypes.POINTER(ctypes.c_size_t)
        lib.libdeflate_alloc_decompressor.restype = ctypes.c_void_p
        lib.libdeflate_alloc_decompressor.argtypes = []
        lib.libdeflate_free_decompressor.restype = None
        lib.libdeflate_free_decompressor.argtypes = [ctypes.c_void_p]
        self.decompress = {}
        for wrapper in ("gzip", "zlib"):
            fn = getattr(lib, f"libdeflate_{wrapper}_decompress_ex")
            fn.restype = ctypes.c_int
            fn.argtypes = [
                ctypes.c_void_p,
                ctypes.c_void_p,
                ctypes.c_size_t,
                ctypes.c_void_p,
                ctypes.c_size_t,
                size_p,
                size_p,
            ]
            self.decompress[wrapper] = fn
        self._local = threading.local()

    def decompressor(self) -> int:
        holder = getattr(self._local, "holder", None)
        if holder is None:
            holder = self._local.holder = _Decompressor(self.lib)
        return holder.ptr


class _Decompressor:
    def __init__(self, lib: ctypes.CDLL):
        self.ptr = lib.libdeflate_alloc_decompressor()
        if not self.ptr:
            raise MemoryError("libdeflate could not allocate a decompressor")
        weakref.finalize(self, lib.libdeflate_free_decompressor, self.ptr)


@cache
def _libdeflate() -> _Libdeflate | None:
    """libdeflate as the ``deflate`` package builds it in, or None where it is missing."""
    try:
        from deflate import _deflate  # type: ignore[import-untyped,unused-ignore]

        return _Libdeflate(ctypes.CDLL(_deflate.__file__))
    except (ImportError, OSError, AttributeError):
        return None


def decoder_name() -> str:
    """Which library decodes gzip and zlib chunks on the CPU: ``"libdeflate"`` (the
    ``deflate`` package, a dependency) or ``"zlib"`` where that package cannot load (about
    2.5x slower)."""
    return "libdeflate" if _libdeflate() is not None else "zlib"


def decode_into(data: Any, out: np.ndarray, wrapper: str) -> str | None:
    """Decode one gzip or zlib stream into ``out`` (uint8, exactly the decoded size):
    None, or why the data does not decode to exactly ``out.size`` bytes. Decoding in place
    spares a buffer per chunk and its copy."""
    if _libdeflate_into(data, out, wrapper) == out.size:
        return None
    try:  # zlib says why libdeflate refused, or decodes what libdeflate could not
        decoded = _decode_zlib(data, out.size, wrapper)
    except CodecError as exc:
        return str(exc)
    if len(decoded) != out.size:
        return f"decoded to {len(decoded)} bytes, expected {out.size}"
    out[...] = np.frombuffer(decoded, dtype=np.uint8)
    return None


def _decode_libdeflate(data: Any, limit: int, wrapper: str) -> memoryview | None:
    """The decoded bytes, or None where libdeflate is missing or refuses the chunk (zlib
    then decodes it, or says why not)."""
    out = np.empty(max(limit, 1), dtype=np.uint8)
    used = _libdeflate_into(data, out[:limit], wrapper)
    return None if used is None else out[:used].data


def _libdeflate_into(data: Any, out: np.ndarray, wrapper: str) -> int | None:
    """How many bytes libdeflate decoded into ``out`` (at most its size), or None where
    libdeflate is missing or refuses the chunk."""
    lib = _libdeflate()
    if lib is None:
        return None
    src = np.frombuffer(data, dtype=np.uint8)
    if src.size == 0:
        return None
    limit = out.size
    used_in, used_out = ctypes.c_size_t(0), ctypes.c_size_t(0)
    fn, d = lib.decompress[wrapper], lib.decompressor()
    in_pos = out_pos = 0
    while in_pos < src.size:
        status = fn(
            d,
            src.ctypes.data + in_pos,
            src.size - in_pos,
            out.ctypes.data + out_pos,
            limit - out_pos,
            ctypes.byref(used_in),
            ctypes.byref(used_out),
        )
        if status != 0 or used_in.value == 0:
            return None
        in_pos += used_in.value
        out_pos += used_out.value
        if wrapper == "zlib" and in_pos != src.size:
            return None  # bytes after the stream
    return out_pos
