"""Full-level GPU reads: linumpy_gpu against its peers, in one run (a benchmark, not a test).

    python benchmarks/bench_gpu_read.py --dir /tmp/bench [--cases design-128] [--json out.json]

For each case a volume is made once (NGFF 0.5, zstd level 3), every reader's result is
checked equal to zarr-python's before anything is timed, then each reader is timed
``--repeat`` times with a warm page cache; the best time counts. GB/s are decoded bytes
landing in GPU memory per second.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import zarr

sys.path.insert(0, os.path.dirname(__file__))
from gpu_volume import make_volume  # noqa: E402

CASES = {
    "design-128": dict(shape=(2048, 1024, 1024), chunks=(128, 128, 128)),
    "design-64": dict(shape=(2048, 1024, 1024), chunks=(64, 64, 64)),
    "design-plane": dict(shape=(2048, 1024, 1024), chunks=(1, 1024, 1024)),
    "design-sharded": dict(shape=(2048, 1024, 1024), chunks=(64, 64, 64), shards=(256, 512, 512)),
    "small-128": dict(shape=(256, 512, 512), chunks=(128, 128, 128)),
}


def readers(path: str, array_path: str) -> dict[str, Callable[[], Any]]:
    import cupy

    import linumpy_gpu as lg

    out: dict[str, Callable[[], Any]] = {}
    cpu_arr = zarr.open_array(array_path, mode="r")
    out["zarr-python CPU + copy"] = lambda: cupy.asarray(cpu_arr[...])
    level = lg.open_ome_zarr_gpu(path)[0]
    out["linumpy_gpu open_ome_zarr_gpu"] = lambda: level[...]

    def context_read():
        with lg.gpu_zarr_context():
            return zarr.open_array(array_path, mode="r")[...]

    out["linumpy_gpu gpu_zarr_context (plain zarr)"] = context_read
    return out


def run_case(name: str, spec: dict, base: str, repeat: int) -> list[dict]:
    import cupy

    path = os.path.join(base, f"{name}.ome.zarr")
    t0 = time.perf_counter()
    array_path = make_volume(path, **spec)
    made = time.perf_counter() - t0
    ref = zarr.open_array(array_path, mode="r")
    nbytes = ref.nbytes
    stored = sum(
        os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(array_path) for f in fs
    )
    print(
        f"\n## {name}: shape {ref.shape}, chunks {ref.chunks}, shards {ref.shards}, "
        f"{nbytes / 1e9:.2f} GB decoded, ratio {nbytes / stored:.2f} (made in {made:.1f} s)"
    )
    expected = cupy.asarray(ref[...])
    rows = []
    for reader_name, fn in readers(path, array_path).items():
        got = fn()
        cupy.cuda.Device().synchronize()
        assert got.shape == expected.shape and bool((got == expected).all()), reader_name
        del got
        times = []
        for _ in range(repeat):
            cupy.get_default_memory_pool().free_all_blocks()
            cupy.cuda.Device().synchronize()
            t0 = time.perf_counter()
            got = fn()
            cupy.cuda.Device().synchronize()
            times.append(time.perf_counter() - t0)
            del got
        best = min(times)
        rows.append(
            {
                "case": name,
                "reader": reader_name,
                "seconds": best,
                "gbps": nbytes / best / 1e9,
                "bytes": nbytes,
            }
        )
    del expected
    cupy.get_default_memory_pool().free_all_blocks()
    base_rate = rows[0]["gbps"]
    print("| reader | GB/s | x zarr-python |\n|---|---|---|")
    for r in rows:
        r["x_zarr_python"] = r["gbps"] / base_rate
        print(f"| {r['reader']} | {r['gbps']:.2f} | {r['x_zarr_python']:.1f} |")
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default="/tmp/linumpy-bench")
    ap.add_argument("--cases", default="design-128")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json")
    args = ap.parse_args()
    import cupy

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
        rows += run_case(name, CASES[name], args.dir, args.repeat)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": machine, "results": rows}, f, indent=2, default=str)
    del cupy


if __name__ == "__main__":
    main()
