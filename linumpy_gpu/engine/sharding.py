"""Shard indexes of zarr v3 sharded arrays: fetch, verify, parse, look up."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .codecs import ChecksumMismatch, crc32c_strip
from .layout import ShardIndexFormat

MISSING = np.uint64(2**64 - 1)


class ShardIndexError(ValueError):
    pass


def parse_index(data: memoryview | None, fmt: ShardIndexFormat) -> np.ndarray | None:
    """(inner-grid shape + (2,)) array of (offset, nbytes); None for a missing shard."""
    if data is None:
        return None
    if len(data) != fmt.nbytes:
        raise ShardIndexError(f"shard index is {len(data)} bytes, expected {fmt.nbytes}")
    if fmt.crc32c:
        try:
            data = crc32c_strip(data)
        except ChecksumMismatch as exc:
            raise ShardIndexError(f"shard index {exc}") from None
    dtype = np.dtype("<u8" if fmt.little_endian else ">u8")
    return np.frombuffer(data, dtype=dtype).astype(np.uint64).reshape(fmt.inner_per_shard + (2,))


def index_request_args(fmt: ShardIndexFormat) -> dict[str, int]:
    """ByteRequest keyword arguments that fetch a shard's index."""
    if fmt.location == "end":
        return {"suffix": fmt.nbytes}
    return {"offset": 0, "length": fmt.nbytes}


def inner_entry(
    index: np.ndarray | None, coords: Sequence[int], fmt: ShardIndexFormat
) -> tuple[int, int] | None:
    """(offset, nbytes) of the inner chunk at array-grid ``coords``, None if absent."""
    if index is None:
        return None
    local = tuple(c % n for c, n in zip(coords, fmt.inner_per_shard, strict=True))
    offset, nbytes = index[local]
    if offset == MISSING and nbytes == MISSING:
        return None
    return int(offset), int(nbytes)


def shard_coords(coords: Sequence[int], fmt: ShardIndexFormat) -> tuple[int, ...]:
    return tuple(c // n for c, n in zip(coords, fmt.inner_per_shard, strict=True))
