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


def frame_sizes(data: Any) -> list[int | None]:
    """The decoded size each frame of ``data`` declares (None for a frame that declares
    none), walking every frame to its end: zstd data may be several frames back to back,
    and skippable frames (which decode to nothing) count as 0. Raises :class:`CodecError`
    where the frames do not walk to the end of the data."""
    return [declared for _, _, declared in _frames(data)]


def _frames(data: Any) -> list[tuple[int, int, int | None]]:
    """(start, end, declared size) of each frame of ``data``, as :func:`frame_sizes` walks
    them; a skippable frame's end is its start (it holds nothing to decode)."""
    view = memoryview(data).cast("B")
    frames: list[tuple[int, int, int | None]] = []
    pos = 0
    while pos < len(view):
        if len(view) - pos < 8 and not frames:
            raise CodecError("zstd: shorter than a frame header")
        magic = int.from_bytes(view[pos : pos + 4], "little")
        if magic & 0xFFFFFFF0 == 0x184D2A50:  # a skippable frame: a length, then that many bytes
            length = int.from_bytes(view[pos + 4 : pos + 8], "little")
            frames.append((pos, pos, 0))
            pos += 8 + length
            continue
        end, declared = _frame(view, pos)
        frames.append((pos, end, declared))
        pos = end
    if pos != len(view) or not frames:
        raise CodecError("zstd: the frames do not end where the data ends")
    return frames


def _frame(view: memoryview, pos: int) -> tuple[int, int | None]:
    """(end, declared size or None) of the zstd frame starting at ``pos``."""
    if bytes(view[pos : pos + 4]) != MAGIC or len(view) < pos + 6:
        raise CodecError("zstd: not a zstd frame")
    descriptor = view[pos + 4]
    single_segment, dict_flag = (descriptor >> 5) & 1, descriptor & 3
    has_checksum = (descriptor >> 2) & 1
    start = pos + 5 + (0 if single_segment else 1) + (0, 1, 2, 4)[dict_flag]
    width = ((1 if single_segment else 0), 2, 4, 8)[descriptor >> 6]
    if len(view) < start + width:
        raise CodecError("zstd: the frame header is truncated")
    declared = None
    if width:
        declared = int.from_bytes(view[start : start + width], "little")
        declared += 256 if width == 2 else 0
    at = start + width
    while True:
        if at + 3 > len(view):
            raise CodecError("zstd: a block header is truncated")
        header = int.from_bytes(view[at : at + 3], "little")
        at += 3
        last, kind, size = header & 1, (header >> 1) & 3, header >> 3
        if kind == 3 or size > BLOCK_MAX:
            raise CodecError("zstd: a block header is damaged")
        at += 1 if kind == 1 else size
        if last:
            break
    at += 4 if has_checksum else 0
    if at > len(view):
        raise CodecError("zstd: the frame is truncated")
    return at, declared


def most_output(frame: Any) -> int | None:
    """For a frame without a declared size: the most bytes it can decode to (its raw and
    RLE blocks' sizes, and a block's largest output for each compressed block), or None
    where the frame's block headers do not walk to its end."""
    view = memoryview(frame).cast("B")
    if len(view) < 6 or bytes(view[:4]) != MAGIC:
        return None
    descriptor = view[4]
    single_segment, dict_flag = (descriptor >> 5) & 1, descriptor & 3
    pos = 5 + (0 if single_segment else 1) + (0, 1, 2, 4)[dict_flag]
    pos += ((1 if single_segment else 0), 2, 4, 8)[descriptor >> 6]
    most = 0
    while pos + 3 <= len(view):
        header = int.from_bytes(view[pos : pos + 3], "little")
        pos += 3
        last, kind, size = header & 1, (header >> 1) & 3, header >> 3
        if kind == 3 or size > BLOCK_MAX:
            return None
        pos += 1 if kind == 1 else size
        most += BLOCK_MAX if kind == 2 else size
        if last:
            return most if pos <= len(view) else None
    return None


def decode(data: Any, limit: int) -> Any:
    """Decode zstd data (one frame, or several back to back) of at most ``limit`` bytes
    with numcodecs' zstd, bounded by the sizes the frames declare, or by what their blocks
    can produce where they declare none."""
    import numcodecs

    frames = _frames(data)
    sizes = [declared for _, _, declared in frames]
    if all(n is not None for n in sizes):
        total = sum(n or 0 for n in sizes)
        if total > limit:
            raise CodecError(
                f"zstd: the frames declare {total} bytes, more than the {limit} it holds"
            )
        out = np.empty(total, dtype=np.uint8)
        if total:
            try:
                numcodecs.Zstd().decode(data, out=out)
            except Exception as exc:  # numcodecs raises RuntimeError/ValueError with zstd's reason
                raise CodecError(f"zstd (CPU): {type(exc).__name__}: {_first_line(exc)}") from exc
        return out
    if len(frames) != 1:
        # frames decoded one by one, each within what the limit leaves (streaming writers
        # give several frames without sizes)
        view = memoryview(data).cast("B")
        parts = []
        left = limit
        for start, end, declared in frames:
            if end > start:
                part = _decode_frame(view[start:end], declared, left)
                left -= part.size
                parts.append(part)
        return np.concatenate(parts) if parts else np.empty(0, dtype=np.uint8)
    most = most_output(data)
    if most is None:
        raise CodecError("zstd: not a zstd frame, or its block headers are damaged")
    # decoded into a buffer of the bound: of what its blocks can produce where that is
    # within the limit, else of the limit, which such a frame must then fill exactly (a
    # small frame of many blocks must not make a read allocate gigabytes)
    out = np.empty(min(most, limit), dtype=np.uint8)
    try:
        if most <= limit:
            return numcodecs.Zstd().decode(data)
        numcodecs.Zstd().decode(data, out=out)
    except Exception as exc:  # numcodecs raises RuntimeError/ValueError with zstd's reason
        raise CodecError(f"zstd (CPU): {type(exc).__name__}: {_first_line(exc)}") from exc
    return out


# What a frame of several without a declared size may decode to beyond what the chunk has
# left: its size is known only once decoded, so this much more memory may be used first.
_UNSIZED_SLACK = 64 << 20


def _decode_frame(frame: memoryview, declared: int | None, left: int) -> np.ndarray:
    """One frame of several: at most ``left`` bytes, its own size unknown beforehand where
    it declares none (bounded then by what its blocks can produce)."""
    import numcodecs

    bound = declared if declared is not None else most_output(frame)
    if bound is None:
        raise CodecError("zstd: not a zstd frame, or its block headers are damaged")
    if bound > left + (0 if declared is not None else _UNSIZED_SLACK):
        raise CodecError(f"zstd: a frame can decode to {bound} bytes, more than the {left} left")
    try:
        part = np.frombuffer(numcodecs.Zstd().decode(frame), dtype=np.uint8)
    except Exception as exc:  # numcodecs raises RuntimeError/ValueError with zstd's reason
        raise CodecError(f"zstd (CPU): {type(exc).__name__}: {_first_line(exc)}") from exc
    if part.size > left:
        raise CodecError(f"zstd: the frames decode to more than the {left} bytes left")
    return part


def decode_into(frame: Any, out: np.ndarray) -> str | None:
    """Decode zstd data into ``out`` (uint8, exactly the expected size) on the CPU.

    Returns None, or why the data does not decode to exactly ``out.size`` bytes."""
    import numcodecs

    if content_size(frame) != out.size:  # not the common case of one frame of this size
        try:
            sizes = frame_sizes(frame)
        except CodecError as exc:
            return str(exc)
        if all(n is not None for n in sizes):
            total = sum(n or 0 for n in sizes)
            if total != out.size:
                return f"the zstd frame declares {total} bytes, expected {out.size}"
        else:
            try:
                decoded = np.frombuffer(decode(frame, out.size), dtype=np.uint8)
            except CodecError as exc:
                return str(exc)
            if decoded.size != out.size:
                return f"zstd (CPU) decoded {decoded.size} bytes, expected {out.size}"
            out[...] = decoded
            return None
    try:
        numcodecs.Zstd().decode(frame, out=out)
    except Exception as exc:  # numcodecs raises RuntimeError/ValueError with zstd's reason
        return f"zstd (CPU): {type(exc).__name__}: {_first_line(exc)}"
    return None


def _first_line(exc: BaseException) -> str:
    text = str(exc)
    return text.splitlines()[0] if text else ""
