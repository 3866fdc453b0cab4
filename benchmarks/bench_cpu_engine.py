"""CPU engine vs zarr-python on a 1 GiB zstd volume (a benchmark, not a test).

    python benchmarks/bench_cpu_engine.py [--dir DIR] [--repeat 3] [--json out.json]

Writes (once) a 512x1024x1024 uint16 volume, 128^3 chunks, zstd level 3, then times
zarr-python's ``array[:]`` and ``open_ome_zarr(...)[0][:]`` (device="cpu") alternately,
after checking that both give the same pixels. Page cache is warm after the first pass.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time

import numpy as np
import zarr


def make_volume(path: str, shape=(512, 1024, 1024), chunks=(128, 128, 128)) -> None:
    from linumpy_gpu.write import write_ome_zarr

    if os.path.exists(os.path.join(path, "zarr.json")):
        return
    rng = np.random.default_rng(0)
    z = np.arange(shape[0], dtype=np.float32)[:, None, None]
    y = np.arange(shape[1], dtype=np.float32)[None, :, None]
    x = np.arange(shape[2], dtype=np.float32)[None, None, :]
    data = (2000 + 1000 * np.sin(z / 17) * np.cos(y / 29) + 8 * x % 512).astype(np.uint16)
    data += rng.integers(0, 64, size=shape, dtype=np.uint16)
    write_ome_zarr(path, data, axes="zyx", chunks=chunks, levels=1, checksum=False, overwrite=True)


def best_of(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default=os.path.join(tempfile.gettempdir(), "linumpy-bench"))
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json")
    args = ap.parse_args()
    from linumpy_gpu import open_ome_zarr

    path = os.path.join(args.dir, "cpu-1gib.ome.zarr")
    make_volume(path)
    arr = zarr.open_array(os.path.join(path, "0"), mode="r")
    level = open_ome_zarr(path, device="cpu")[0]
    assert np.array_equal(arr[...], level[...]), "engine and zarr-python differ"
    nbytes = level.nbytes
    t_zarr = best_of(lambda: arr[...], args.repeat)
    t_ours = best_of(lambda: level[...], args.repeat)
    result = {
        "machine": f"{platform.node()} {os.cpu_count()} cores, Python {platform.python_version()}, zarr {zarr.__version__}",
        "bytes": nbytes,
        "zarr_python_gbps": nbytes / t_zarr / 1e9,
        "linumpy_cpu_gbps": nbytes / t_ours / 1e9,
        "ratio": t_zarr / t_ours,
    }
    print("| reader | GB/s |\n|---|---|")
    print(f"| zarr-python `array[:]` | {result['zarr_python_gbps']:.2f} |")
    print(f"| linumpy_gpu engine, CPU | {result['linumpy_cpu_gbps']:.2f} |")
    print(f"ratio: {result['ratio']:.2f}x  ({result['machine']})")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
