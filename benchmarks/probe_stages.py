"""Rates of the read pipeline's stages on their own (a benchmark, not a test).

    python benchmarks/probe_stages.py --dir /tmp/bench [--json out.json]

For a 128^3 and a 64^3 zstd volume: page-cache reads of every chunk into pinned memory with
1..64 threads, pinned host-to-device copy, nvCOMP decode (with the frame checks) by batch
size, nvCOMP scratch sizes, and the full read with its stage profile and device memory.
These are the numbers that size batches, staging and threads.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from gpu_volume import make_volume  # noqa: E402


def chunk_keys(array_path: str) -> list[str]:
    return sorted(
        os.path.relpath(os.path.join(d, f), array_path).replace(os.sep, "/")
        for d, _, fs in os.walk(array_path)
        for f in fs
        if f != "zarr.json"
    )


def probe(name: str, array_path: str, nbytes_chunk: int, batch_sizes: list[int]) -> dict:
    import cupy

    import linumpy_gpu as lg
    from linumpy_gpu.engine.fetch import ByteRequest, LocalFileSource
    from linumpy_gpu.gpu.staging import ALIGN, Arena
    from linumpy_gpu.gpu.zstd_batch import codec_for_current_device

    keys = chunk_keys(array_path)
    stored = sum(os.path.getsize(os.path.join(array_path, k)) for k in keys)
    result: dict = {"case": name, "chunks": len(keys), "stored_bytes": stored}
    arena = Arena(stored + ALIGN * len(keys) + (1 << 20))
    lock = threading.Lock()

    def reserve(n: int) -> memoryview:
        with lock:
            start = arena.used
            arena.used = -(-(start + n) // ALIGN) * ALIGN
        return arena.view[start : start + n]

    requests = [ByteRequest(k) for k in keys]
    fetch = {}
    for threads in (2, 3, 4, 6, 8, 16, 32):
        source = LocalFileSource(array_path, threads)
        best = 1e9
        for _ in range(3):
            arena.used = 0
            t0 = time.perf_counter()
            data = source.fetch(requests, reserve)
            best = min(best, time.perf_counter() - t0)
        fetch[threads] = stored / best / 1e9
    result["fetch_pinned_gbps_by_threads"] = fetch
    print(f"{name}: fetch into pinned, GB/s compressed by threads: {fetch}", flush=True)

    codec = codec_for_current_device()
    result["nvcomp_input_alignment"] = int(codec.api.decompress_alignments.input)
    result["nvcomp_output_alignment"] = int(codec.api.decompress_alignments.output)
    dev = cupy.empty(arena.used, dtype=np.uint8)
    t0 = time.perf_counter()
    for _ in range(3):
        dev.data.copy_from_host_async(
            __import__("ctypes").c_void_p(arena.base), arena.used, cupy.cuda.get_current_stream()
        )
    cupy.cuda.Device().synchronize()
    result["h2d_pinned_gbps"] = 3 * arena.used / (time.perf_counter() - t0) / 1e9
    offsets = np.array(
        [np.frombuffer(d, np.uint8).ctypes.data - arena.base for d in data], dtype=np.uint64
    )
    sizes = np.array([len(d) for d in data], dtype=np.uint64)
    decode = {}
    for m in batch_sizes:
        m = min(m, len(keys))
        temp = codec.api.decompress_temp_bytes(m, nbytes_chunk, m * nbytes_chunk, codec.stream.ptr)
        best = 1e9
        for _ in range(3):
            cupy.cuda.Device().synchronize()
            t0 = time.perf_counter()
            for first in range(0, len(keys) - m + 1, m):
                batch = codec._decode_staged(
                    dev,
                    offsets[first : first + m],
                    sizes[first : first + m],
                    nbytes_chunk,
                )
                assert not batch.failures
                del batch
            cupy.cuda.Device().synchronize()
            done = (len(keys) // m) * m
            best = min(best, (time.perf_counter() - t0) / done)
        decode[m] = {"gbps": nbytes_chunk / best / 1e9, "temp_bytes": temp}
    result["decode_by_batch"] = decode
    print(f"{name}: decode by batch size: {decode}", flush=True)

    pool = cupy.get_default_memory_pool()
    level = lg.open_ome_zarr_gpu(os.path.dirname(array_path))[0]
    level[...]
    cupy.cuda.Device().synchronize()
    for _ in range(2):
        pool.free_all_blocks()
        t0 = time.perf_counter()
        out = level[...]
        cupy.cuda.Device().synchronize()
        dt = time.perf_counter() - t0
        peak = pool.total_bytes()
        del out
    result["full_read_gbps"] = level.nbytes / dt / 1e9
    result["full_read_profile"] = dict(level._reader.last_profile)
    result["pool_after_read_over_output"] = peak / level.nbytes
    print(
        f"{name}: full read {result['full_read_gbps']:.2f} GB/s, pool {peak / level.nbytes:.2f}x "
        f"output, profile {result['full_read_profile']}",
        flush=True,
    )
    return result


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default="/tmp/linumpy-bench")
    ap.add_argument("--shape", default="1024,1024,1024")
    ap.add_argument("--json")
    args = ap.parse_args()
    shape = tuple(int(x) for x in args.shape.split(","))
    results = []
    for chunk, batches in ((128, [32, 64, 128, 256, 512]), (64, [256, 1024, 2048, 4096, 8192])):
        path = os.path.join(args.dir, f"probe-{chunk}.ome.zarr")
        t0 = time.perf_counter()
        array_path = make_volume(path, shape=shape, chunks=(chunk,) * 3)
        print(f"made {path} in {time.perf_counter() - t0:.1f} s", flush=True)
        results.append(probe(f"{chunk}^3", array_path, chunk**3 * 2, batches))
        if args.json:
            with open(args.json, "w") as f:
                json.dump(results, f, indent=2, default=str)


if __name__ == "__main__":
    main()
