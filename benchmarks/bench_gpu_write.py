"""Write the DESIGN.md volume as NGFF 0.5 with a 4-level pyramid: from cupy on the GPU vs
zarr-python's CPU write of the same numpy data (pyramid made on the CPU). A benchmark.

    python benchmarks/bench_gpu_write.py --dir /tmp/bench [--shape 2048,1024,1024] [--json out]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import time

import numpy as np
import zarr
from zarr.codecs import ZstdCodec


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default="/tmp/linumpy-bench")
    ap.add_argument("--shape", default="2048,1024,1024")
    ap.add_argument("--json")
    ap.add_argument(
        "--batches-mib", default="", help="also time ours with these write batch sizes (MiB)"
    )
    args = ap.parse_args()
    import cupy

    import linumpy_gpu as lg
    from linumpy_gpu.pyramid import downsample, pyramid_factors

    shape = tuple(int(x) for x in args.shape.split(","))
    rng = cupy.random.default_rng(0)
    z = cupy.arange(shape[0], dtype=cupy.float32)[:, None, None]
    gpu = (2000 + 500 * cupy.sin(z / 37) + rng.integers(0, 256, shape, dtype=cupy.uint16)).astype(
        cupy.uint16
    )
    host = gpu.get()
    nbytes = host.nbytes
    os.makedirs(args.dir, exist_ok=True)
    out_gpu, out_cpu = os.path.join(args.dir, "w-gpu.zarr"), os.path.join(args.dir, "w-cpu.zarr")

    def ours():
        lg.write_ome_zarr(
            out_gpu,
            gpu,
            axes="zyx",
            chunks=(128, 128, 128),
            levels=4,
            overwrite=True,
            checksum=False,
        )

    def zarr_cpu():
        shutil.rmtree(out_cpu, ignore_errors=True)
        root = zarr.open_group(out_cpu, mode="w", zarr_format=3)
        level = host
        factors = pyramid_factors(shape, ["space"] * 3, 4)
        for i in range(4):
            if i:
                level = downsample(level, factors[i - 1], "mean")
            arr = root.create_array(
                str(i),
                shape=level.shape,
                dtype=level.dtype,
                chunks=(128, 128, 128),
                compressors=[ZstdCodec(level=3)],
            )
            arr[...] = level

    from linumpy_gpu.engine import writer as writer_module

    def ours_with(batch_mib):
        def run():
            default = writer_module.WRITE_BATCH_BYTES
            writer_module.WRITE_BATCH_BYTES = batch_mib << 20
            try:
                ours()
            finally:
                writer_module.WRITE_BATCH_BYTES = default

        return run

    profile = _instrument()
    rows, profiles = {}, {}
    variants = [
        (f"linumpy_gpu from cupy, {int(m)} MiB batches", ours_with(int(m)))
        for m in args.batches_mib.split(",")
        if m
    ]
    for name, fn in [
        ("zarr-python CPU write (numpy, CPU pyramid)", zarr_cpu),
        ("linumpy_gpu write_ome_zarr from cupy", ours),
        *variants,
    ]:
        for key in profile:
            profile[key] = 0.0
        cupy.cuda.Device().synchronize()
        t0 = time.perf_counter()
        fn()
        cupy.cuda.Device().synchronize()
        rows[name] = time.perf_counter() - t0
        profiles[name] = dict(profile)
    for i in range(4):
        a = zarr.open_array(os.path.join(out_gpu, str(i)), mode="r")[...]
        b = zarr.open_array(os.path.join(out_cpu, str(i)), mode="r")[...]
        assert np.array_equal(a, b), f"level {i} differs"
    base = rows["zarr-python CPU write (numpy, CPU pyramid)"]
    print(f"write {shape} uint16 ({nbytes / 1e9:.2f} GB) + 3 pyramid levels, NGFF 0.5, zstd")
    print("| writer | seconds | GB/s (level 0 bytes) | x zarr-python |\n|---|---|---|---|")
    for name, t in rows.items():
        print(f"| {name} | {t:.2f} | {nbytes / t / 1e9:.2f} | {base / t:.1f} |")
    print(
        "linumpy_gpu write, seconds by stage (pyramid includes the GPU downsampling, gather "
        "the chunk copies, encode nvCOMP and the device-to-host copy, files the "
        "temporary-file writes and renames, overlapped with the next batch's encode):"
    )
    for name, stages in profiles.items():
        if name.startswith("linumpy_gpu"):
            print(f"  {name}: " + ", ".join(f"{k}={v:.2f}" for k, v in stages.items()))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"shape": shape, "seconds": rows, "profiles": profiles}, f, indent=2)


def _instrument() -> dict[str, float]:
    """Time the write stages by wrapping them (in this benchmark process only)."""
    import cupy

    import linumpy_gpu.write as write_module
    from linumpy_gpu.engine import writer as writer_module
    from linumpy_gpu.gpu import backend as backend_module

    profile = {"pyramid": 0.0, "gather": 0.0, "encode": 0.0, "files": 0.0}

    def timed(owner, name, key, sync_gpu=False):
        original = getattr(owner, name)

        def wrapper(*a, **k):
            t0 = time.perf_counter()
            out = original(*a, **k)
            if sync_gpu:
                cupy.cuda.Device().synchronize()
            profile[key] += time.perf_counter() - t0
            return out

        setattr(owner, name, wrapper)

    timed(write_module, "downsample", "pyramid", sync_gpu=True)
    timed(backend_module.GpuBackend, "gather_chunks", "gather", sync_gpu=True)
    timed(backend_module.GpuBackend, "encode_zstd", "encode")
    timed(writer_module.ChunkedArrayWriter, "_put_all", "files")
    return profile


if __name__ == "__main__":
    main()
