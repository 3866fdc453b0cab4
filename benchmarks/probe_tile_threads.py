"""Tiles read one by one from several threads: where the time goes (a benchmark, not a test).

    python benchmarks/probe_tile_threads.py /tmp/bench/design-plane.ome.zarr \
        [--workers 1,8] [--tiles 24] [--json out.json]

The peer benchmark's "8 threads one by one" row read plane-chunked 256^3 tiles about 3x
slower than one thread does (0.25 against 0.72 GB/s, run 69), where 128^3 and 64^3 tiles
keep their rate. This separates the suspects: for host decode threads on (the default) and
off, and for reads queued on each thread's current stream (cupy's null stream, shared by
every thread) or on a stream of the thread's own, it times the same tiles from each worker
count and reports the tiles' rate, each read's seconds (median and max), how many chunks
went to the host threads, and the nvCOMP batch times the host decoder learned. Every tile
is checked equal to the one-thread read with the default settings before it counts.
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np


def regions(shape: tuple[int, ...], n: int, size: int, seed: int) -> list[tuple[slice, ...]]:
    rng = np.random.default_rng(seed)
    return [
        tuple(slice(a, a + size) for a in (int(rng.integers(0, s - size + 1)) for s in shape))
        for _ in range(n)
    ]


def read_all(
    level: Any, tiles: list, workers: int, own_stream: bool, profiles: list | None = None
) -> tuple[float, list, list]:
    """Reads ``tiles`` from ``workers`` threads; with one worker, each timed read's profile
    (``last_profile``: fetch, decode, place, host chunks) goes to ``profiles``."""
    import cupy

    local = threading.local()

    def read(region):
        if own_stream:
            if getattr(local, "stream", None) is None:
                local.stream = cupy.cuda.Stream(non_blocking=True)
            with local.stream:
                t0 = time.perf_counter()
                out = level[region]
                local.stream.synchronize()
        else:
            t0 = time.perf_counter()
            out = level[region]
            cupy.cuda.get_current_stream().synchronize()
        return out, time.perf_counter() - t0

    def read_profiled(region):
        out = read(region)
        profiles.append(dict(level._reader.last_profile, seconds=out[1]))
        return out

    timed = read_profiled if profiles is not None and workers == 1 else read
    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(read, tiles[:workers]))  # each thread's decoder and stream set up
        cupy.cuda.Device().synchronize()
        t0 = time.perf_counter()
        results = list(pool.map(timed, tiles))
        cupy.cuda.Device().synchronize()
        total = time.perf_counter() - t0
    return total, [r[0] for r in results], [r[1] for r in results]


STAGES = ("seconds", "total", "plan", "fetch", "wait_fetch", "decode", "place")


def stages_by_decoder(profiles: list[dict]) -> dict[str, dict[str, float]]:
    """Median seconds of each stage, for the reads decoded on host threads and for those
    nvCOMP decoded (with their count and chunks per read)."""
    groups: dict[str, list[dict]] = {}
    for p in profiles:
        groups.setdefault("host" if p.get("host_chunks") else "nvcomp", []).append(p)
    return {
        side: {
            "reads": len(group),
            "chunks": statistics.median(p.get("chunks", 0) for p in group),
            **{k: statistics.median(p.get(k, 0.0) for p in group) for k in STAGES},
        }
        for side, group in groups.items()
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("path")
    ap.add_argument("--workers", default="1,8")
    ap.add_argument("--tiles", type=int, default=24)
    ap.add_argument("--size", type=int, default=256)
    ap.add_argument("--json")
    args = ap.parse_args()

    import cupy

    import linumpy_gpu as lg
    from linumpy_gpu.gpu.backend import GpuBackend
    from linumpy_gpu.gpu.staging import staging_pool

    try:
        from linumpy_gpu.gpu.side_pinned import side_pinned_budget
    except ImportError:  # releases before the side buffers had a budget
        side_pinned_budget = None

    print(f"linumpy_gpu from {lg.__file__}", flush=True)
    level0 = lg.open_ome_zarr_gpu(args.path)[0]
    tiles = regions(level0.shape, args.tiles, args.size, seed=2)
    first_reads: list[dict] = []  # a fresh process: the host pool sets itself up here
    first_total, reference, _ = read_all(level0, tiles, 1, False, first_reads)
    reference = [r.get() for r in reference]
    print(
        f"first {len(tiles)} tiles of the process: {sum(r.nbytes for r in reference) / first_total / 1e9:.2f} GB/s; "
        "per read (host chunks, decode ms): "
        + ", ".join(f"({p.get('host_chunks', 0)}, {1e3 * p['decode']:.1f})" for p in first_reads),
        flush=True,
    )
    nbytes = sum(r.nbytes for r in reference)
    rows = []
    print("| host threads | stream | workers | GB/s | read s median | max | host chunks |")
    print("|---|---|---|---|---|---|---|")
    for host_threads in (None, 0):
        backend = GpuBackend() if host_threads is None else GpuBackend(host_threads=0)
        level = lg.open_ome_zarr(args.path, device=backend)[0]
        host = backend._host
        sent = [0]
        if host is not None:
            submit = type(host).submit

            def counted(frames, nbytes, dests, after, host=host, submit=submit, sent=sent):
                sent[0] += len(frames)
                return submit(host, frames, nbytes, dests, after)

            host.submit = counted
        for own_stream in (False, True):
            for workers in [int(w) for w in args.workers.split(",")]:
                sent[0] = 0
                profiles: list[dict] = []
                total, outs, seconds = read_all(level, tiles, workers, own_stream, profiles)
                for out, ref in zip(outs, reference, strict=True):
                    if not np.array_equal(out.get(), ref):
                        raise SystemExit("a tile read from threads differs from the reference")
                del outs
                cupy.get_default_memory_pool().free_all_blocks()
                row = {
                    "host_threads": "default" if host_threads is None else host_threads,
                    "own_stream": own_stream,
                    "workers": workers,
                    "gbps": nbytes / total / 1e9,
                    "read_seconds_median": statistics.median(seconds),
                    "read_seconds_max": max(seconds),
                    "host_chunks": sent[0],
                    "pinned_ring_bytes": staging_pool().allocated,
                    "side_pinned_peak_bytes": side_pinned_budget().peak
                    if side_pinned_budget
                    else None,
                }
                if profiles:
                    row["reads"] = profiles
                    row["stages_by_decoder"] = stages_by_decoder(profiles)
                if host is not None:
                    row["learned_nvcomp_batch_seconds"] = {
                        f"{size} B x bucket {bucket}": s
                        for (size, bucket), s in host.gpu_seconds.items()
                    }
                    row["learned_pool_seconds"] = {
                        f"{size} B x bucket {bucket}": s
                        for (size, bucket), s in host.pool_seconds.items()
                    }
                rows.append(row)
                print(
                    f"| {row['host_threads']} | {'own' if own_stream else 'null'} | {workers} | "
                    f"{row['gbps']:.2f} | {row['read_seconds_median']:.3f} | "
                    f"{row['read_seconds_max']:.3f} | {row['host_chunks']} |",
                    flush=True,
                )
    for row in rows:
        for side, stages in row.get("stages_by_decoder", {}).items():
            cells = ", ".join(f"{k} {v:.4f}" for k, v in stages.items())
            print(f"{row['host_threads']} {'own' if row['own_stream'] else 'null'} {side}: {cells}")
    if args.json:
        with open(args.json, "w") as f:
            first = {"gbps": nbytes / first_total / 1e9, "reads": first_reads}
            json.dump({"path": args.path, "first_reads": first, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
