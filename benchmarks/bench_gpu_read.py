"""GPU reads: linumpy_gpu against its peers, in one run (a benchmark, not a test).

    python benchmarks/bench_gpu_read.py --dir /tmp/bench --cases design-128,design-64 \
        [--peers all|fast|none] [--ours all|default] [--cold [--cold-repeat 3]]
        [--tiles 24] [--json out.json]

For each case a volume is made once (NGFF 0.5, zstd level 3). Every reader's result is
checked equal to zarr-python's before it is timed; each is then timed ``--repeat`` times
with a warm page cache and the best time counts. GB/s are decoded bytes landing in GPU
memory per second (host readers include their one host-to-device copy). ``--cold`` drops
the page cache (root only) before timed cold reads and measures the raw disk rate of the
same files just before each (``--cold-repeat`` pairs, the median counts). Results print as markdown and go to ``--json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import zarr

sys.path.insert(0, os.path.dirname(__file__))
from gpu_volume import make_uncompressed_copy, make_volume  # noqa: E402

CASES = {
    "design-128": dict(shape=(2048, 1024, 1024), chunks=(128, 128, 128)),
    "design-64": dict(shape=(2048, 1024, 1024), chunks=(64, 64, 64)),
    "design-plane": dict(shape=(2048, 1024, 1024), chunks=(1, 1024, 1024)),
    "design-sharded": dict(shape=(2048, 1024, 1024), chunks=(64, 64, 64), shards=(256, 512, 512)),
    "small-128": dict(shape=(256, 512, 512), chunks=(128, 128, 128)),
}


def sync() -> None:
    import cupy

    cupy.cuda.Device().synchronize()


def our_readers(path: str, array_path: str) -> dict[str, Callable[[], Any]]:
    import linumpy_gpu as lg
    from linumpy_gpu.gpu.backend import GpuBackend

    level = lg.open_ome_zarr_gpu(path)[0]
    roomy = lg.open_ome_zarr(path, device=GpuBackend(scratch_fraction=3.0))[0]

    def context_read():
        with lg.gpu_zarr_context():
            return zarr.open_array(array_path, mode="r")[...]

    return {
        "linumpy_gpu open_ome_zarr_gpu": lambda: level[...],
        "linumpy_gpu, scratch up to 3x the output": lambda: roomy[...],
        "linumpy_gpu gpu_zarr_context (plain zarr)": context_read,
    }


def peer_readers(array_path: str, raw_path: str | None, which: str) -> dict[str, Callable[[], Any]]:
    import cupy

    out: dict[str, Callable[[], Any]] = {}
    if which == "none":
        return out
    cpu_arr = zarr.open_array(array_path, mode="r")
    out["zarr-python CPU + copy"] = lambda: cupy.asarray(cpu_arr[...])
    if which == "fast":
        return out

    def enable_gpu():
        with zarr.config.enable_gpu():
            return zarr.open_array(array_path, mode="r")[...]

    out["zarr-python enable_gpu()"] = enable_gpu
    try:
        import zarrs  # noqa: F401

        def zarrs_read():
            with zarr.config.set({"codec_pipeline.path": "zarrs.ZarrsCodecPipeline"}):
                return cupy.asarray(zarr.open_array(array_path, mode="r")[...])

        out["zarrs + copy"] = zarrs_read
    except ImportError:
        pass
    try:
        import tensorstore as ts

        spec = {"driver": "zarr3", "kvstore": {"driver": "file", "path": array_path}}
        out["tensorstore + copy"] = lambda: cupy.asarray(ts.open(spec).result().read().result())
    except ImportError:
        pass
    if raw_path is not None:
        try:
            from kvikio.zarr import GDSStore as KvikioGDSStore

            def kvikio_read():
                with zarr.config.enable_gpu():
                    return zarr.open_array(KvikioGDSStore(raw_path), mode="r")[...]

            out["kvikio GDSStore (uncompressed copy)"] = kvikio_read
        except ImportError:
            pass
    return out


def time_reader(fn: Callable[[], Any], repeat: int) -> tuple[float, float]:
    """Best seconds, and peak device bytes held by cupy's pool during a read."""
    import cupy

    pool = cupy.get_default_memory_pool()
    times, peak = [], 0
    for _ in range(repeat):
        pool.free_all_blocks()
        sync()
        t0 = time.perf_counter()
        got = fn()
        sync()
        times.append(time.perf_counter() - t0)
        peak = max(peak, pool.total_bytes())
        del got
    pool.free_all_blocks()
    return min(times), peak


def drop_caches() -> bool:
    try:
        subprocess.run(["sync"], check=True)
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError:
        return False


def raw_read_rate(array_path: str) -> float:
    """Compressed bytes/s reading every chunk file once with 32 threads (cache dropped)."""
    files = [os.path.join(d, f) for d, _, fs in os.walk(array_path) for f in fs]

    def read(p):
        with open(p, "rb", buffering=0) as f:
            return len(f.read())

    t0 = time.perf_counter()
    with ThreadPoolExecutor(32) as pool:
        total = sum(pool.map(read, files))
    return total / (time.perf_counter() - t0)


def tile_rate(level: Any, n: int, size: int = 256, seed: int = 0) -> tuple[float, dict]:
    rng = np.random.default_rng(seed)
    starts = [tuple(int(rng.integers(0, s - size + 1)) for s in level.shape) for _ in range(n)]
    level[tuple(slice(a, a + size) for a in starts[0])]  # warm: shard indexes, kernels
    sync()
    t0 = time.perf_counter()
    for st in starts:
        level[tuple(slice(a, a + size) for a in st)]
    sync()
    dt = time.perf_counter() - t0
    return n * size**3 * level.dtype.itemsize / dt / 1e9, dict(level._reader.last_profile)


def tile_rate_batched(level: Any, n: int, size: int = 256, seed: int = 1) -> float:
    rng = np.random.default_rng(seed)
    regions = [
        tuple(slice(a, a + size) for a in (int(rng.integers(0, s - size + 1)) for s in level.shape))
        for _ in range(n)
    ]
    level.read_regions(regions[:2])
    sync()
    t0 = time.perf_counter()
    level.read_regions(regions)
    sync()
    return n * size**3 * level.dtype.itemsize / (time.perf_counter() - t0) / 1e9


def tile_rate_threads(level: Any, n: int, workers: int, size: int = 256, seed: int = 2) -> float:
    """Tiles read one by one, from several threads at once (a pipeline's worker pool)."""
    rng = np.random.default_rng(seed)
    regions = [
        tuple(slice(a, a + size) for a in (int(rng.integers(0, s - size + 1)) for s in level.shape))
        for _ in range(n)
    ]

    def read(region):
        level[region]
        sync()

    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(read, regions[:workers]))  # warm each thread's decoder
        t0 = time.perf_counter()
        list(pool.map(read, regions))
    return n * size**3 * level.dtype.itemsize / (time.perf_counter() - t0) / 1e9


def cold_row(name: str, path: str, array_path: str, nbytes: int, ratio: float, repeat: int) -> dict:
    """Cold reads against the raw disk rate, ``repeat`` pairs (raw, then ours, each after
    dropping the page cache): the disk's rate moves between minutes by 10-20% on the GPU
    host, so each read is set against the raw rate measured just before it, and the
    median pair counts."""
    import linumpy_gpu as lg

    pairs = []
    for _ in range(max(1, repeat)):
        drop_caches()
        raw = raw_read_rate(array_path)
        drop_caches()
        level = lg.open_ome_zarr_gpu(path)[0]
        sync()
        t0 = time.perf_counter()
        level[...]
        sync()
        cold = nbytes / (time.perf_counter() - t0)
        pairs.append((cold / (raw * ratio), cold, raw, dict(level._reader.last_profile)))
    in_order = [p[0] for p in pairs]
    pairs.sort(key=lambda p: p[0])
    fraction, cold, raw, profile = pairs[len(pairs) // 2]
    return {
        "case": name,
        "reader": "linumpy_gpu open_ome_zarr_gpu, cold cache",
        "gbps": cold / 1e9,
        "raw_disk_gbps": raw / 1e9,
        "ceiling_gbps": raw * ratio / 1e9,
        "fraction_of_ceiling": fraction,
        "fractions": [p[0] for p in pairs],
        "fractions_in_order": in_order,
        "profile": profile,
    }


def run_case(name: str, spec: dict, args: argparse.Namespace) -> list[dict]:
    import cupy

    import linumpy_gpu as lg
    from linumpy_gpu.gpu.backend import GpuBackend

    try:
        from linumpy_gpu.gpu.side_pinned import side_pinned_budget
    except ImportError:  # a release before the side budget (old-against-new runs)
        side_pinned_budget = None
    from linumpy_gpu.gpu.staging import staging_pool

    path = os.path.join(args.dir, f"{name}.ome.zarr")
    t0 = time.perf_counter()
    array_path = make_volume(path, **spec)
    raw_path = None
    if args.peers == "all" and name in args.raw_for.split(","):
        raw_path = make_uncompressed_copy(array_path, os.path.join(args.dir, f"{name}-raw.zarr"))
    made = time.perf_counter() - t0
    ref = zarr.open_array(array_path, mode="r")
    nbytes = ref.nbytes
    stored = sum(
        os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(array_path) for f in fs
    )
    ratio = nbytes / stored
    print(
        f"\n## {name}: shape {ref.shape}, chunks {ref.chunks}, shards {ref.shards}, "
        f"{nbytes / 1e9:.2f} GB decoded, zstd ratio {ratio:.2f} (made in {made:.1f} s)",
        flush=True,
    )
    rows = []
    ours = our_readers(path, array_path)
    if args.ours == "default":
        ours = {k: v for k, v in ours.items() if k == "linumpy_gpu open_ome_zarr_gpu"}
    readers = {**peer_readers(array_path, raw_path, args.peers), **ours}
    if args.cold_only:
        readers = {}
    expected = ref[...] if readers else None
    for reader_name, fn in readers.items():
        try:
            got = fn()
            sync()
            equal = got.shape == expected.shape and np.array_equal(got.get(), expected)
            del got  # nothing but the reader's own memory in the pool while timed
        except Exception as exc:  # a peer that cannot read this layout is reported, not fatal
            rows.append(
                {"case": name, "reader": reader_name, "error": f"{type(exc).__name__}: {exc}"[:200]}
            )
            continue
        if not equal:
            rows.append(
                {"case": name, "reader": reader_name, "error": "result differs from zarr-python"}
            )
            continue
        repeat = args.repeat if reader_name.startswith("linumpy") else max(1, args.repeat - 1)
        best, peak = time_reader(fn, repeat)
        row = {
            "case": name,
            "reader": reader_name,
            "seconds": best,
            "gbps": nbytes / best / 1e9,
            "peak_device_bytes": peak,
            "peak_over_output": peak / nbytes,
        }
        if reader_name == "linumpy_gpu open_ome_zarr_gpu":
            level = lg.open_ome_zarr_gpu(path)[0]
            level[...]
            sync()
            row["profile"] = dict(level._reader.last_profile)
            row["pinned_staging_bytes"] = staging_pool().allocated
            host = level._reader.backend._host
            if host is not None:
                row["host_decoder"] = {
                    "threads": host.threads,
                    "bytes_per_s_per_thread": host.thread_rate,
                    "nvcomp_batch_seconds": {
                        f"{size} B x 2^{bucket - 1}+": seconds
                        for (size, bucket), seconds in host.gpu_seconds.items()
                    },
                }
            row["pinned_cap_bytes"] = staging_pool().cap
            if side_pinned_budget is not None:
                side = side_pinned_budget()
                row["side_pinned_peak_bytes"] = side.peak  # beside the ring, whole run so far
                row["side_pinned_budget_bytes"] = side.budget
        rows.append(row)
        print(f"  {reader_name}: {row['gbps']:.2f} GB/s", flush=True)
    cupy.get_default_memory_pool().free_all_blocks()
    if args.tiles and not args.cold_only:
        level = lg.open_ome_zarr_gpu(path)[0]
        rate, profile = tile_rate(level, args.tiles)
        rows.append(
            {
                "case": name,
                "reader": f"linumpy_gpu random 256^3 tiles, one by one (x{args.tiles})",
                "gbps": rate,
                "profile": profile,
            }
        )
        gpu_only = lg.open_ome_zarr(path, device=GpuBackend(host_threads=0))[0]
        rate, _ = tile_rate(gpu_only, args.tiles)
        rows.append(
            {
                "case": name,
                "reader": f"linumpy_gpu random 256^3 tiles, one by one, nvCOMP alone (x{args.tiles})",
                "gbps": rate,
            }
        )
        rate = tile_rate_batched(level, args.tiles)
        rows.append(
            {
                "case": name,
                "reader": f"linumpy_gpu random 256^3 tiles, read_regions (x{args.tiles})",
                "gbps": rate,
            }
        )
        rate = tile_rate_threads(level, args.tiles, workers=8)
        rows.append(
            {
                "case": name,
                "reader": f"linumpy_gpu random 256^3 tiles, 8 threads one by one (x{args.tiles})",
                "gbps": rate,
            }
        )
    if args.cold_only:
        # nothing ran before: one whole warm read, checked equal to zarr-python's, compiles
        # the kernels, starts nvCOMP and fills the pinned ring and the device pool, which a
        # first read in a process pays for (the cold pairs measure the page cache alone)
        got = lg.open_ome_zarr_gpu(path)[0][...]
        sync()
        if not np.array_equal(got.get(), ref[...]):
            raise SystemExit(f"{name}: linumpy_gpu's read differs from zarr-python's")
        del got
        cupy.get_default_memory_pool().free_all_blocks()
    if (args.cold or args.cold_only) and drop_caches():
        rows.append(cold_row(name, path, array_path, nbytes, ratio, args.cold_repeat))
    base = next(
        (r["gbps"] for r in rows if r["reader"] == "zarr-python CPU + copy" and "gbps" in r), None
    )
    print("| reader | GB/s | x zarr-python | peak device / output |\n|---|---|---|---|")
    for r in rows:
        if "error" in r:
            print(f"| {r['reader']} | failed: {r['error']} | | |")
            continue
        x = f"{r['gbps'] / base:.1f}" if base else "-"
        peak = f"{r['peak_over_output']:.2f}" if "peak_over_output" in r else "-"
        print(f"| {r['reader']} | {r['gbps']:.2f} | {x} | {peak} |")
    for r in rows:
        if "profile" in r:
            print(
                f"  profile {r['reader']}: "
                + ", ".join(
                    f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}"
                    for k, v in r["profile"].items()
                )
            )
        if "ceiling_gbps" in r:
            print(
                f"  cold: raw disk {r['raw_disk_gbps']:.2f} GB/s compressed x ratio {ratio:.2f} = "
                f"ceiling {r['ceiling_gbps']:.2f} GB/s; ours {r['gbps']:.2f} "
                f"({100 * r['fraction_of_ceiling']:.0f}%; every pair, in the order run: "
                + ", ".join(f"{100 * f:.0f}%" for f in r.get("fractions_in_order", []))
                + ")"
            )
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default="/tmp/linumpy-bench")
    ap.add_argument("--cases", default="design-128")
    ap.add_argument(
        "--peers",
        choices=["all", "fast", "none"],
        default="all",
        help="fast: zarr-python alone; none: ours alone (for comparing our own settings)",
    )
    ap.add_argument(
        "--ours",
        choices=["all", "default"],
        default="all",
        help="default: open_ome_zarr_gpu alone (no 3x-scratch or gpu_zarr_context reads)",
    )
    ap.add_argument(
        "--raw-for", default="design-128", help="cases that get an uncompressed copy for kvikio"
    )
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--tiles", type=int, default=0)
    ap.add_argument("--cold", action="store_true")
    ap.add_argument(
        "--cold-repeat",
        type=int,
        default=1,
        help="cold pairs (raw read, then ours) per case; the median pair is reported",
    )
    ap.add_argument(
        "--cold-only",
        action="store_true",
        help="only the cold-cache read against the raw disk rate",
    )
    ap.add_argument("--json")
    args = ap.parse_args()
    from linumpy_gpu.gpu import info

    machine = {
        **info(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "zarr": zarr.__version__,
        "numpy": np.__version__,
    }
    print(machine)
    rows = []
    for name in args.cases.split(","):
        rows += run_case(name, CASES[name], args)
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"machine": machine, "results": rows}, f, indent=2, default=str)


if __name__ == "__main__":
    main()
