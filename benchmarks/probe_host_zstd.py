"""How fast host cores decode zstd chunks like the benchmark's (numcodecs, GIL released).

    python benchmarks/probe_host_zstd.py [--chunk 128,128,128] [--threads 1,2,4,8,14,16]

Prints decoded GB/s for each thread count: the rate the host threads beside nvCOMP can
reach (docs/performance.md).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import numcodecs
import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from gpu_volume import chunk_data  # noqa: E402

from linumpy_gpu.engine.codecs import zstd_decode_into  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--chunk", default="128,128,128")
    ap.add_argument("--threads", default="1,2,4,8,14,16")
    ap.add_argument("--chunks", type=int, default=128)
    ap.add_argument("--json")
    args = ap.parse_args()
    shape = tuple(int(x) for x in args.chunk.split(","))
    codec = numcodecs.Zstd(level=3)
    frames = [codec.encode(chunk_data((i, 0, 0), shape)) for i in range(16)]
    nbytes = int(np.prod(shape)) * 2
    results = {}
    for threads in (int(t) for t in args.threads.split(",")):
        outs = [np.empty(nbytes, dtype=np.uint8) for _ in range(threads)]

        def one(k: int, outs=outs, threads=threads) -> None:
            assert zstd_decode_into(frames[k % len(frames)], outs[k % threads]) is None

        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(one, range(threads)))
            t0 = time.perf_counter()
            list(pool.map(one, range(args.chunks)))
            dt = time.perf_counter() - t0
        results[threads] = args.chunks * nbytes / dt / 1e9
        print(f"{threads:3d} threads: {results[threads]:6.2f} GB/s decoded", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"chunk": shape, "gbps_by_threads": results}, f)


if __name__ == "__main__":
    main()
