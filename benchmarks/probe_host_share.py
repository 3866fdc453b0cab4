"""Host cores beside nvCOMP in a full-level read, by share (a benchmark, not a test).

    python benchmarks/probe_host_share.py /tmp/bench/design-128.ome.zarr \
        [--threads 8,14] [--shares 0,16,32,64] [--repeat 3] [--json out.json]

nvCOMP's zstd decodes each chunk on one thread block, so a batch of 4 MiB chunks takes
about 33 ms however few it holds, and within the 1.25x memory bound a 128^3 read needs
about 10 batches. A chunk decoded on a host core costs the device only its decoded slot
(nvCOMP's costs about 4.7x), so a share of every batch on host threads both adds decode
rate and lets the memory-bound batches grow. Runs 9-10 and 18 found it neutral or worse
on an older engine; this times it again on the current one: for each host thread count
and each fixed share (chunks per batch given to the host), the full read of level 0
(warm page cache, best of ``--repeat``), its profile, and cupy's pool peak over the
output, and the time the batches waited for their host share (per read, averaged over the
repeats). Every read is checked equal to the first (share 0) before it counts.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any


def timed_reads(level: Any, repeat: int, reference: Any) -> dict[str, Any]:
    import cupy

    pool = cupy.get_default_memory_pool()
    best, profile, peak = float("inf"), {}, 0
    for _ in range(repeat):
        pool.free_all_blocks()
        cupy.cuda.Device().synchronize()
        t0 = time.perf_counter()
        out = level[...]
        cupy.cuda.Device().synchronize()
        dt = time.perf_counter() - t0
        peak = max(peak, pool.total_bytes())
        if reference is not None and not bool(cupy.array_equal(out, reference)):
            raise SystemExit("a read with host shares differs from the reference read")
        nbytes = out.nbytes
        del out
        if dt < best:
            best, profile = dt, dict(level._reader.last_profile)
    return {
        "seconds": best,
        "gbps": nbytes / best / 1e9,
        "peak_over_output": peak / nbytes,
        "profile": {k: v for k, v in profile.items() if isinstance(v, (int, float))},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("path")
    ap.add_argument("--threads", default="8,14")
    ap.add_argument("--shares", default="0,16,32,64")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json")
    args = ap.parse_args()

    import cupy

    import linumpy_gpu as lg
    from linumpy_gpu.gpu.backend import GpuBackend

    reference = lg.open_ome_zarr_gpu(args.path)[0][...]
    rows = []
    for threads in [int(t) for t in args.threads.split(",")]:
        for share in [int(s) for s in args.shares.split(",")]:
            backend = GpuBackend(host_threads=threads)
            level = lg.open_ome_zarr(args.path, device=backend)[0]
            waited = [0.0]
            if backend._host is not None:
                host = backend._host
                host.share_of_read = lambda nbytes, n, s=share: min(n, s)
                wait = type(host).wait

                def timed_wait(units, stream, host=host, wait=wait, waited=waited):
                    t0 = time.perf_counter()
                    try:
                        return wait(host, units, stream)
                    finally:
                        waited[0] += time.perf_counter() - t0

                host.wait = timed_wait
            row = {"threads": threads, "share": share, **timed_reads(level, args.repeat, reference)}
            row["host_wait_seconds_all_repeats"] = waited[0]
            rows.append(row)
            p = row["profile"]
            print(
                f"| {threads} | {share} | {row['gbps']:.2f} | {row['peak_over_output']:.4f} | "
                f"{p.get('batches', '-')} | {p.get('decode', 0):.3f} | {p.get('fetch', 0):.3f} | "
                f"{p.get('host_chunks', 0)} | {waited[0] / args.repeat:.3f} |",
                flush=True,
            )
    del reference
    cupy.get_default_memory_pool().free_all_blocks()
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"path": args.path, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
