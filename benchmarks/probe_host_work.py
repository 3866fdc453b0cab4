"""The host (Python) work of a GPU read per chunk, measured without a GPU (CPU only).

    python benchmarks/probe_host_work.py [--repeat 20] [--json out.json]

A full level of 64^3 chunks of the DESIGN.md volume (2048x1024x1024 uint16: 8192 chunks,
in 10 batches as a GPU read takes them) and the same level in 256x512x512 shards. Times,
median of ``--repeat``:

* ``plan``: the chunk plan and the output geometry of the level (``chunk_plan``,
  ``output_geometry``);
* ``placing jobs``: the copy-kernel jobs of every batch (``copy_jobs.place_jobs``, what the
  GPU backend builds before each launch), from made-up device addresses;
* ``sharded fetch``: the reader's fetch of every batch of the sharded level into staging
  (shard index lookups, runs merged, requests, each chunk's view sliced out), against a
  source that hands back zero bytes at once, so that only the host's own work is timed.

These run on the thread that drives the GPU (plan, jobs) or beside it on the fetch thread,
and take turns with it at the GIL, so they bound how fast small-chunk reads can be.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time

import numpy as np
import zarr

from linumpy_gpu.engine.backend import CpuBackend
from linumpy_gpu.engine.batching import output_geometry
from linumpy_gpu.engine.plan import chunk_plan
from linumpy_gpu.engine.reader import ChunkedArrayReader
from linumpy_gpu.engine.selection import normalize_selection
from linumpy_gpu.gpu.copy_jobs import place_jobs

SHAPE = (2048, 1024, 1024)
CHUNKS = (64, 64, 64)
SHARDS = (256, 512, 512)
BATCHES = 10
STORED_BYTES = 330_000  # a 64^3 uint16 chunk at the benchmark's compression ratio


class ZeroSource:
    """Every request answered at once with zero bytes of its length (no I/O)."""

    def __init__(self) -> None:
        self.buffer = memoryview(bytearray(64 << 20))

    def fetch(self, requests, allocate=None, size_hint=None):
        return [self.buffer[: r.length] for r in requests]


def median_ms(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(times)


def sharded_reader(root: str) -> ChunkedArrayReader:
    arr = zarr.create_array(
        os.path.join(root, "sharded.zarr"), shape=SHAPE, chunks=CHUNKS, shards=SHARDS, dtype="u2"
    )
    reader = ChunkedArrayReader(arr, CpuBackend(), source=ZeroSource())
    fmt = reader.layout.shard_index
    n_inner = fmt.n_entries
    index = np.empty((n_inner, 2), dtype=np.uint64)
    index[:, 0] = np.arange(n_inner, dtype=np.uint64) * STORED_BYTES
    index[:, 1] = STORED_BYTES
    index = index.reshape(*fmt.inner_per_shard, 2)
    reader._shard_indexes = lambda keys: dict.fromkeys(keys, index)
    return reader


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--json")
    args = ap.parse_args()
    sel = normalize_selection((), SHAPE)
    work = np.empty(SHAPE, dtype=np.uint16)
    plan = chunk_plan(sel, SHAPE, CHUNKS)
    per_batch = -(-len(plan) // BATCHES)
    batches = [plan[a : a + per_batch] for a in range(0, len(plan), per_batch)]

    def planning() -> None:
        output_geometry(chunk_plan(sel, SHAPE, CHUNKS), work, CHUNKS, 2, True)

    def jobs() -> None:
        for batch in batches:
            ptrs = np.arange(len(batch), dtype=np.int64) * (1 << 19)
            place_jobs(batch, ptrs, 1 << 40, (4096, 64, 1), (1 << 20, 1024, 1), 2)

    results = {
        "plan": median_ms(planning, args.repeat),
        "placing jobs": median_ms(jobs, args.repeat),
    }
    with tempfile.TemporaryDirectory() as root:
        reader = sharded_reader(root)

        def allocate(n: int) -> memoryview:
            return reader.source.buffer[:n]

        def fetch() -> None:
            for batch in batches:
                reader._fetch_into(batch, allocate)

        results["sharded fetch"] = median_ms(fetch, args.repeat)
    print(f"| host work, {len(plan)} chunks in {len(batches)} batches | ms (median) |")
    print("|---|---|")
    for name, ms in results.items():
        print(f"| {name} | {ms:.1f} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"chunks": len(plan), "batches": len(batches), "ms": results}, f, indent=2)


if __name__ == "__main__":
    main()
