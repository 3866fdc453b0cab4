"""A level's compressed bytes fetched with a cold page cache, without decoding: in the
batches a read makes, or as one fetch (a benchmark, not a test; needs permission to drop
the page cache).

    python benchmarks/probe_fetch_cold.py PATH [--device auto|cpu|gpu] [--batches 1,10]
        [--fetch kvikio,pread] [--repeat 2] [--json out.json]

Cold sharded levels stayed at 60-89% of the raw rate x compression ratio whatever the
bytes in flight, run length, kvikio task size or fetch (runs 49-50), while 32 threads
reading whole shard files set the ceiling. This separates the fetch from the GPU: for each
setting, the raw rate (every file of level 0 read whole once on 32 threads), then level 0's
chunks fetched through the reader's own fetch (shard indexes parsed, inner chunks merged
into runs as a GPU read merges them) in ``--batches`` contiguous groups of chunks in
C order, each fetch ending with all its reads before the next begins, as a read's fetch
stage does. If one fetch of the whole level reaches the raw rate where ten do not, the
ends of the batches (reads draining, the next batch's first files opening) are what a cold
read loses.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from bench_gpu_read import drop_caches, raw_read_rate  # noqa: E402


class BumpAllocator:
    """Views into one preallocated buffer, handed out in order (the staging ring's role)."""

    def __init__(self, nbytes: int):
        self.buffer = np.empty(nbytes, dtype=np.uint8)
        self.used = 0

    def __call__(self, nbytes: int) -> memoryview | None:
        if self.used + nbytes > len(self.buffer):
            return None  # the fetch then allocates its own
        view = memoryview(self.buffer[self.used : self.used + nbytes])
        self.used += nbytes
        return view


def stored_bytes(array_path: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(array_path) for f in fs)


def cold_fetch(path: str, device: str, fetch: str, n_batches: int) -> dict:
    import linumpy_gpu as lg
    from linumpy_gpu.engine.plan import chunk_plan
    from linumpy_gpu.engine.selection import normalize_selection

    os.environ["LINUMPY_GPU_FETCH"] = fetch
    array_path = os.path.join(path, "0")
    total = stored_bytes(array_path)
    allocate = BumpAllocator(total + (64 << 20))
    drop_caches()
    raw = raw_read_rate(array_path)
    drop_caches()
    level = lg.open_ome_zarr(path, device=device)[0]
    reader = level._reader
    tasks = chunk_plan(normalize_selection(..., level.shape), level.shape, level.chunks)
    per_batch = -(-len(tasks) // n_batches)
    t0 = time.perf_counter()
    fetched = 0
    for first in range(0, len(tasks), per_batch):
        _, data = reader._fetch_into(tasks[first : first + per_batch], allocate)
        fetched += sum(len(d) for d in data if d is not None)
    seconds = time.perf_counter() - t0
    return {
        "device": device,
        "fetch": fetch,
        "batches": n_batches,
        "chunk_bytes": fetched,
        "seconds": seconds,
        "gbps": fetched / seconds / 1e9,
        "raw_gbps": raw / 1e9,
        "fraction_of_raw": fetched / seconds / raw,
        "source": type(reader.source).__name__,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("path", help="an OME-Zarr image (level 0 is fetched)")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--batches", default="1,10")
    ap.add_argument("--fetch", default="kvikio", help="kvikio,pread: LINUMPY_GPU_FETCH")
    ap.add_argument("--repeat", type=int, default=2, help="rounds over every setting")
    ap.add_argument("--json")
    args = ap.parse_args()
    if not drop_caches():
        sys.exit("cannot drop the page cache here: nothing to measure")
    settings = list(
        itertools.product(args.fetch.split(","), (int(b) for b in args.batches.split(",")))
    )
    rows = []
    print("| source | batches | GB/s compressed | raw GB/s just before | of raw |")
    print("|---|---|---|---|---|")
    for _ in range(args.repeat):
        for fetch, n_batches in settings:
            row = cold_fetch(args.path, args.device, fetch, n_batches)
            rows.append(row)
            print(
                f"| {row['source']} | {n_batches} | {row['gbps']:.2f} | {row['raw_gbps']:.2f} "
                f"| {row['fraction_of_raw']:.0%} |",
                flush=True,
            )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
