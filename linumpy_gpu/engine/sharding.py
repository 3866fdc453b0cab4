"""Shard indexes of zarr v3 sharded arrays: fetch, verify, parse, look up."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from linumpy_gpu.codecs import crc32c
from linumpy_gpu.core.layout import ShardIndexFormat
from linumpy_gpu.errors import CodecError

MISSING = np.uint64(2**64 - 1)


def parse_index(data: memoryview | None, fmt: ShardIndexFormat) -> np.ndarray | None:
    """(inner-grid shape + (2,)) array of (offset, nbytes); None for a missing shard."""
    if data is None:
        return None
    if len(data) != fmt.nbytes:
        raise CodecError(f"shard index is {len(data)} bytes, expected {fmt.nbytes}")
    if fmt.crc32c:
        try:
            data = crc32c.strip(data)
        except CodecError as exc:
            raise CodecError(f"shard index {exc}") from None
    dtype = np.dtype("<u8" if fmt.little_endian else ">u8")
    return np.frombuffer(data, dtype=dtype).astype(np.uint64).reshape(fmt.inner_per_shard + (2,))


def index_request_args(fmt: ShardIndexFormat) -> dict[str, int]:
    """ByteRequest keyword arguments that fetch a shard's index."""
    if fmt.location == "end":
        return {"suffix": fmt.nbytes}
    return {"offset": 0, "length": fmt.nbytes}


class InnerChunks(NamedTuple):
    """Where the inner chunks of a batch live: per chunk its shard (an index into
    ``shards``, the shards' grid coordinates) and its coordinates inside that shard."""

    shards: np.ndarray
    shard_of: np.ndarray
    local: np.ndarray


def inner_chunks(coords: np.ndarray, fmt: ShardIndexFormat) -> InnerChunks:
    """The shards and in-shard coordinates of chunks at array-grid ``coords`` (n, ndim)."""
    per_shard = np.asarray(fmt.inner_per_shard, dtype=np.int64)
    shard_grid, local = np.divmod(coords, per_shard)
    if not len(coords):
        return InnerChunks(shard_grid, np.empty(0, dtype=np.intp), local)
    if (shard_grid == shard_grid[0]).all():  # one shard (a small read): nothing to sort
        return InnerChunks(shard_grid[:1].copy(), np.zeros(len(coords), dtype=np.intp), local)
    grid = tuple(int(n) for n in shard_grid.max(axis=0) + 1)
    flat, shard_of = np.unique(np.ravel_multi_index(tuple(shard_grid.T), grid), return_inverse=True)
    shards = np.stack(np.unravel_index(flat, grid), axis=1).astype(np.int64)
    return InnerChunks(shards, shard_of.reshape(-1), local)


def inner_entries(
    indexes: Sequence[np.ndarray | None], chunks: InnerChunks, fmt: ShardIndexFormat
) -> tuple[np.ndarray, np.ndarray]:
    """(offset, nbytes) of every chunk of ``chunks`` (rows of an (n, 2) uint64 array) from
    its shard's index (``indexes[s]`` for ``chunks.shards[s]``, None for a missing shard),
    and which chunks are present."""
    n = len(chunks.shard_of)
    entries = np.full((n, 2), MISSING, dtype=np.uint64)
    if chunks.local.shape[1]:
        flat = np.ravel_multi_index(tuple(chunks.local.T), fmt.inner_per_shard)
    else:
        flat = np.zeros(n, dtype=np.intp)
    if len(indexes) == 1:  # one shard: every chunk is in it
        if indexes[0] is not None:
            entries[:] = indexes[0].reshape(-1, 2)[flat]
    else:
        order = np.argsort(chunks.shard_of, kind="stable")
        bounds = np.searchsorted(chunks.shard_of[order], np.arange(len(indexes) + 1))
        for s, index in enumerate(indexes):
            if index is not None:
                rows = order[bounds[s] : bounds[s + 1]]
                entries[rows] = index.reshape(-1, 2)[flat[rows]]
    present = ~((entries[:, 0] == MISSING) & (entries[:, 1] == MISSING))
    return entries, present
