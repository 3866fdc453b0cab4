"""numcodecs' ``lz4`` codec: an LZ4 block after a 4-byte little-endian decoded size."""

from __future__ import annotations

from typing import Any

import numpy as np

from linumpy_gpu.codecs.layout import FrameBytes, StreamLayout, one_stream_group, refuse
from linumpy_gpu.errors import CodecError


def declared_size(data: Any) -> int | None:
    """The decoded size the 4-byte prefix declares, or None for a chunk too short to have one."""
    view = memoryview(data).cast("B")
    return int.from_bytes(view[:4], "little") if len(view) >= 4 else None


def decode(data: Any, limit: int) -> Any:
    """Decode with numcodecs once the prefix promises at most ``limit`` bytes."""
    import numcodecs

    declared = declared_size(data)
    if declared is None:
        raise CodecError("lz4: shorter than its 4-byte size prefix")
    if declared > limit:
        raise CodecError(
            f"lz4: the chunk declares {declared} bytes, more than the {limit} it holds"
        )
    try:
        return numcodecs.LZ4().decode(data)
    except Exception as exc:  # numcodecs raises RuntimeError with LZ4's reason
        raise CodecError(f"lz4: {type(exc).__name__}: {exc}") from exc


def stream_layout(frames: list[Any], nbytes: int) -> StreamLayout:
    """Each chunk one LZ4 stream after its size prefix, decoding to the chunk's ``nbytes``."""
    data = FrameBytes(frames)
    elsewhere: dict[int, str] = {}
    rows = np.arange(len(frames))
    size = data.size
    keep = refuse(
        elsewhere, rows, size < 5, lambda r: "lz4: shorter than its 4-byte size prefix and one byte"
    )
    rows, size = rows[keep], size[keep]
    declared = data.le32(rows, np.zeros((rows.size, 1), dtype=np.int64))[:, 0]
    keep = refuse(
        elsewhere,
        rows,
        declared != nbytes,
        lambda r: f"lz4: the chunk declares {declared[r]} bytes, it holds {nbytes}",
    )
    rows, size, declared = rows[keep], size[keep], declared[keep]
    keep = refuse(
        elsewhere,
        rows,
        declared < 1,  # numcodecs refuses every chunk that declares none
        lambda r: "lz4: the chunk declares 0 bytes",
    )
    rows, size = rows[keep], size[keep]
    group = one_stream_group(rows, 4, size - 4, nbytes, raw=False, codec="lz4")
    return StreamLayout.of_groups([group], elsewhere)
