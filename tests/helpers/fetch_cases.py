"""Chunk files and byte requests that every fetch source must read alike."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

from linumpy_gpu.io.sources import ByteRequest


def write_chunk_files(root: Path, count: int, max_size: int, seed: int) -> dict[str, bytes]:
    """``count`` files of random bytes and sizes under ``root/c``, plus an empty one."""
    rng = np.random.default_rng(seed)
    blobs = {
        f"c/{i}": rng.integers(0, 256, int(rng.integers(1, max_size)), np.uint8).tobytes()
        for i in range(count)
    }
    blobs["c/empty"] = b""
    (root / "c").mkdir()
    for key, blob in blobs.items():
        (root / key).write_bytes(blob)
    return blobs


def mixed_requests(blobs: dict[str, bytes]) -> list[ByteRequest]:
    """Whole files, ranges end to end, past the end, suffixes, offsets, missing objects."""
    requests = [ByteRequest(k) for k in blobs]
    requests += [ByteRequest("c/3", 10, 1000), ByteRequest("c/3", 1010, 50)]  # end to end
    requests += [ByteRequest("c/5", len(blobs["c/5"]) - 7, 100)]  # runs past the end
    requests += [ByteRequest("c/6", suffix=16), ByteRequest("c/7", offset=5)]
    requests += [ByteRequest("c/absent"), ByteRequest("c/0/below-a-file", 0, 8)]
    return requests


def recording_allocator() -> tuple[Callable[[int], memoryview], list[memoryview]]:
    """An ``allocate`` for ``fetch`` that hands out fresh buffers and the list of them."""
    handed_out: list[memoryview] = []

    def allocate(n: int) -> memoryview:
        handed_out.append(memoryview(bytearray(n)))
        return handed_out[-1]

    return allocate, handed_out
