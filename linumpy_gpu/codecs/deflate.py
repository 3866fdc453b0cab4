"""gzip and zlib (Deflate with a gzip or zlib wrapper), decoded with an output bound."""

from __future__ import annotations

import zlib
from typing import Any

from linumpy_gpu.errors import CodecError

_WBITS = {"gzip": 16 + zlib.MAX_WBITS, "zlib": zlib.MAX_WBITS}


def decode(data: Any, limit: int, wrapper: str) -> bytes:
    """Decode one gzip or zlib stream (their checksums are verified by zlib) into at most
    ``limit`` bytes; more, trailing bytes or a truncated stream are errors."""
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
        rest = decode(d.unused_data, limit - len(out), wrapper)
        return out + rest
    return out
