"""Shard indexes looked up for a whole batch at once, and damaged index entries."""

from __future__ import annotations

import google_crc32c
import numpy as np
import pytest
import zarr

from linumpy_gpu.backends.cpu import CpuBackend
from linumpy_gpu.core.layout import ShardIndexFormat
from linumpy_gpu.engine.reader import ChunkedArrayReader
from linumpy_gpu.engine.sharding import MISSING, inner_chunks, inner_entries
from linumpy_gpu.errors import ChunkDecodeError
from tests.helpers.writers import volume, write_zarr_variant


def test_entries_of_a_batch_equal_looking_each_chunk_up():
    rng = np.random.default_rng(4)
    fmt = ShardIndexFormat("end", True, True, (2, 3, 4))
    grid = (4, 6, 8)  # 2 x 2 x 2 shards
    indexes = {}
    for shard in np.ndindex(2, 2, 2):
        if shard == (1, 0, 1):
            indexes[shard] = None  # a missing shard
            continue
        index = rng.integers(0, 1 << 40, size=(*fmt.inner_per_shard, 2), dtype=np.uint64)
        index[rng.random(fmt.inner_per_shard) < 0.2] = MISSING  # missing inner chunks
        indexes[shard] = index
    coords = np.array(list(np.ndindex(*grid)), dtype=np.int64)[rng.permutation(192)[:150]]
    chunks = inner_chunks(coords, fmt)
    entries, present = inner_entries(
        [indexes[tuple(s)] for s in chunks.shards.tolist()], chunks, fmt
    )
    for k, c in enumerate(coords.tolist()):
        shard = tuple(a // n for a, n in zip(c, fmt.inner_per_shard, strict=True))
        local = tuple(a % n for a, n in zip(c, fmt.inner_per_shard, strict=True))
        assert tuple(chunks.shards[chunks.shard_of[k]].tolist()) == shard
        assert tuple(chunks.local[k].tolist()) == local
        index = indexes[shard]
        if index is None or (index[local] == MISSING).all():
            assert not present[k]
        else:
            assert present[k] and entries[k].tolist() == index[local].tolist()


def test_an_index_entry_past_any_file_is_reported_by_chunk(tmp_path):
    data = volume(shape=(30, 41, 44))
    write_zarr_variant(tmp_path / "a.zarr", "v3-sharded-zstd", data, missing_fraction=0.0)
    shard = next(p for p in sorted((tmp_path / "a.zarr" / "c").rglob("*")) if p.is_file())
    blob = bytearray(shard.read_bytes())
    index_bytes = 16 * 8  # the index at the end: 8 inner chunks, then its crc32c
    index = np.frombuffer(bytes(blob[-index_bytes - 4 : -4]), dtype="<u8").copy()
    index[2] = np.uint64(1 << 63)  # the second inner chunk's offset
    body = index.tobytes()
    blob[-index_bytes - 4 :] = body + google_crc32c.value(body).to_bytes(4, "little")
    shard.write_bytes(bytes(blob))
    reader = ChunkedArrayReader(zarr.open_array(str(tmp_path / "a.zarr")), CpuBackend())
    with pytest.raises(ChunkDecodeError) as info:
        reader.read()
    assert "out of range" in str(info.value)
    assert "c/0/0/0 (inner chunk (0, 0, 1))" in str(info.value)
