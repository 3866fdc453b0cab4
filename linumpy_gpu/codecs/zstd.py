"""zstd frames: the decoded size a frame declares, and bounded CPU decoding.

The GPU backend decodes zstd with nvCOMP (after its own frame check on the device); these
CPU paths serve the CPU backend, the GPU backend's host threads, and second opinions on
frames the device refused.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from linumpy_gpu.errors import CodecError

MAGIC = b"\x28\xb5\x2f\xfd"
BLOCK_MAX = 128 << 10


def content_size(frame: Any) -> int | None:
    """The decoded size a zstd frame header declares, or None (no size field, or not a
    zstd frame header at all)."""
    view = memoryview(frame).cast("B")
    if len(view) < 6 or bytes(view[:4]) != MAGIC:
        return None
    descriptor = view[4]
    size_flag, single_segment, dict_flag = descriptor >> 6, (descriptor >> 5) & 1, descriptor & 3
    start = 5 + (0 if single_segment else 1) + (0, 1, 2, 4)[dict_flag]
    width = ((1 if single_segment else 0), 2, 4, 8)[size_flag]
    if width == 0 or len(view) < start + width:
        return None
    value = int.from_bytes(view[start : start + width], "little")
    return value + 256 if width == 2 else value


def known_output(frame: Any) -> int | None:
    """For a frame without a declared size: the bytes its raw and RLE blocks produce (the
    part of its output known without decoding), or None where the frame's block headers do
    not walk to its end."""
    view = memoryview(frame).cast("B")
    if len(view) < 6 or bytes(view[:4]) != MAGIC:
        return None
    descriptor = view[4]
    single_segment, dict_flag = (descriptor >> 5) & 1, descriptor & 3
    pos = 5 + (0 if single_segment else 1) + (0, 1, 2, 4)[dict_flag]
    pos += ((1 if single_segment else 0), 2, 4, 8)[descriptor >> 6]
    known = 0
    while pos + 3 <= len(view):
        header = int.from_bytes(view[pos : pos + 3], "little")
        pos += 3
        last, kind, size = header & 1, (header >> 1) & 3, header >> 3
        if kind == 3 or size > BLOCK_MAX:
            return None
        pos += 1 if kind == 1 else size
        if kind != 2:
            known += size
        if last:
            return known if pos <= len(view) else None
    return None


def decode(data: Any, limit: int) -> Any:
    """Decode one zstd frame of at most ``limit`` bytes (numcodecs' zstd, bounded by the
    size the frame declares, or by what its blocks can produce where it declares none)."""
    import numcodecs

    declared = content_size(data)
    if declared is not None and declared > limit:
        raise CodecError(
            f"zstd: the frame declares {declared} bytes, more than the {limit} it holds"
        )
    if declared is None:
        known = known_output(data)
        if known is None:
            raise CodecError("zstd: not a zstd frame, or its block headers are damaged")
        if known > limit:
            raise CodecError(f"zstd: the frame holds more than the {limit} bytes of the chunk")
    try:
        if declared is not None:
            out = np.empty(declared, dtype=np.uint8)
            numcodecs.Zstd().decode(data, out=out)
            return out
        return numcodecs.Zstd().decode(data)
    except Exception as exc:  # numcodecs raises RuntimeError/ValueError with zstd's reason
        raise CodecError(f"zstd (CPU): {type(exc).__name__}: {_first_line(exc)}") from exc


def decode_into(frame: Any, out: np.ndarray) -> str | None:
    """Decode one zstd frame into ``out`` (uint8, exactly the expected size) on the CPU.

    Returns None, or why the frame does not decode to exactly ``out.size`` bytes."""
    import numcodecs

    declared = content_size(frame)
    if declared is not None and declared != out.size:
        return f"the zstd frame declares {declared} bytes, expected {out.size}"
    if declared == out.size:
        try:
            numcodecs.Zstd().decode(frame, out=out)
        except Exception as exc:
            return f"zstd (CPU): {type(exc).__name__}: {_first_line(exc)}"
        return None
    try:
        decoded = np.frombuffer(decode(frame, out.size), dtype=np.uint8)
    except CodecError as exc:
        return str(exc)
    if decoded.size != out.size:
        return f"zstd (CPU) decoded {decoded.size} bytes, expected {out.size}"
    out[...] = decoded
    return None


def _first_line(exc: BaseException) -> str:
    text = str(exc)
    return text.splitlines()[0] if text else ""
