"""Where a full-level read spends its time (a benchmark, not a test).

    python benchmarks/probe_pipeline.py /tmp/bench/design-64.ome.zarr [--threads 4,16]
        [--json out.json]

For one OME-Zarr image (level 0), warm page cache:
  * per fetch variant (pread threads sized per read or forced to each count; kvikio's
    pool at each count): the full read, best of 3, with its stage profile (how the fetch
    competes with the thread driving the GPU), and the fetch alone (every batch the read
    would fetch, into the pinned staging ring, nothing decoded);
  * kvikio's pool with 4-64 reads in flight on the page cache;
  * what opening a file costs (os calls; a kvikio handle), per file;
  * a cProfile of the fetch alone (the Python work per file) and of one default read (the
    calling thread: the Python work between GPU launches), top functions by own time.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import time
from collections.abc import Callable
from typing import Any


def sync() -> None:
    try:
        import cupy

        cupy.cuda.Device().synchronize()
        cupy.get_default_memory_pool().free_all_blocks()
    except Exception:  # no GPU: the CPU engine, useful to try this script anywhere
        pass


def best_read(level, repeat: int) -> tuple[float, dict]:
    best, profile = float("inf"), {}
    for _ in range(repeat):
        sync()
        t0 = time.perf_counter()
        out = level[...]
        sync()
        dt = time.perf_counter() - t0
        del out
        if dt < best:
            best, profile = dt, dict(level._reader.last_profile)
    return best, profile


def fetch_only(level) -> tuple[float, int]:
    from linumpy_gpu.engine.plan import chunk_plan
    from linumpy_gpu.engine.selection import normalize_selection

    reader = level._reader
    layout = reader.layout
    sel = normalize_selection((), layout.shape)
    tasks = chunk_plan(sel, layout.shape, layout.chunk_shape)
    nbytes = sel.size * layout.dtype.itemsize
    t0 = time.perf_counter()
    stored = 0
    for batch, placement in reader._batches(tasks, None, nbytes, True):
        fetched = reader._fetch(batch, placement)
        stored += sum(len(d) for d in fetched.data if d is not None)
        reader.backend.release_staging(fetched.staging)
        reader.backend.release_staging(fetched.host_staging)
    return time.perf_counter() - t0, stored


def sources(root: str, threads: str) -> list[tuple[str, Callable[[], Any]]]:
    """The fetch variants compared: pread threads (sized per read, or forced), kvikio's
    pool at several sizes."""
    from linumpy_gpu.engine.fetch import LocalFileSource

    variants: list[tuple[str, Callable[[], Any]]] = [
        ("pread, sized per read", lambda: LocalFileSource(root))
    ]
    counts = [int(t) for t in threads.split(",")]
    variants += [(f"pread, {n} threads", lambda n=n: LocalFileSource(root, n)) for n in counts]
    try:
        import kvikio.defaults

        from linumpy_gpu.gpu.kvikio_fetch import KvikioFileSource
    except ImportError:
        return variants

    from linumpy_gpu.gpu import kvikio_fetch

    default_reads = kvikio_fetch.WARM_READS

    def kvikio_source(n: int, reads: int = default_reads) -> Any:
        source = KvikioFileSource(root)
        kvikio.defaults.set("num_threads", n)
        kvikio_fetch.WARM_READS = reads  # read per fetch: holds until the next variant
        return source

    variants += [(f"kvikio, {n} threads", lambda n=n: kvikio_source(n)) for n in [*counts, 32]]
    variants += [
        (f"kvikio, 32 threads, {r} reads in flight", lambda r=r: kvikio_source(32, r))
        for r in (4, 16, 32, 64)
    ]
    return variants


def open_costs(root: str, keys: list[str]) -> dict[str, float]:
    """Microseconds per file to open, stat and close it: with os calls, and as a kvikio
    handle (which opens each file twice)."""
    import os

    paths = [os.path.join(root, k) for k in keys]
    costs = {}
    t0 = time.perf_counter()
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        os.fstat(fd)
        os.close(fd)
    costs["os open+fstat+close"] = (time.perf_counter() - t0) / len(paths) * 1e6
    try:
        import kvikio
    except ImportError:
        return costs
    t0 = time.perf_counter()
    for path in paths:
        handle = kvikio.CuFile(path, "r")
        os.fstat(handle.fileno())
        handle.close()
    costs["kvikio.CuFile open+fstat+close"] = (time.perf_counter() - t0) / len(paths) * 1e6
    return costs


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("path")
    ap.add_argument("--threads", default="4,16")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json")
    args = ap.parse_args()

    import linumpy_gpu as lg

    result: dict = {"path": args.path, "reads": {}}
    level = lg.open_ome_zarr(args.path, device="auto")[0]
    nbytes = level.nbytes
    level[...]  # warm: page cache, kernels, staging ring
    default_source = level._reader.source
    result["default_source"] = type(default_source).__name__
    root = level._reader.array.store.root
    for name, source in sources(root, args.threads):
        level._reader.source = source()
        seconds, profile = best_read(level, args.repeat)
        result["reads"][name] = {"gbps": nbytes / seconds / 1e9, "profile": profile}
        stages = ", ".join(
            f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}" for k, v in profile.items()
        )
        print(f"read, {name}: {nbytes / seconds / 1e9:.2f} GB/s ({stages})", flush=True)
        seconds, stored = min(fetch_only(level) for _ in range(2))
        result.setdefault("fetch_only", {})[name] = {"seconds": seconds, "stored_bytes": stored}
        print(
            f"fetch alone, {name}: {seconds:.3f} s, {stored / seconds / 1e9:.2f} GB/s compressed",
            flush=True,
        )
    level._reader.source = default_source
    import glob
    import os

    keys = [
        os.path.relpath(p, root)
        for p in glob.glob(os.path.join(root, "**", "c", "**"), recursive=True)
        if os.path.isfile(p)
    ]
    result["open_us_per_file"] = open_costs(root, keys)
    print(f"per file, {len(keys)} files: {result['open_us_per_file']}", flush=True)
    profiler = cProfile.Profile()
    profiler.enable()
    fetch_only(level)
    profiler.disable()
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(20)
    result["cprofile_fetch"] = text.getvalue()
    print("fetch alone, default source, cProfile:\n" + text.getvalue())
    profiler = cProfile.Profile()
    profiler.enable()
    best_read(level, 1)
    profiler.disable()
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(30)
    result["cprofile"] = text.getvalue()
    print(text.getvalue())
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2, default=str)


if __name__ == "__main__":
    main()
