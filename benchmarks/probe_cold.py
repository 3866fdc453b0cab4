"""Cold-cache full-level reads against the bytes the fetch keeps in flight (a benchmark,
not a test; needs permission to drop the page cache).

    python benchmarks/probe_cold.py --dir /tmp/bench --cases design-sharded,design-128
        [--in-flight-mib 16,48,128,256] [--run-mib 2,8] [--metadata on,off] [--repeat N]
        [--fetch kvikio,pread] [--task-mib 1,4,16]
        [--opens] [--json out.json]

For each volume (made as bench_gpu_read.py makes it, reused if present), ``--repeat`` rounds
over each bound on the bytes in flight on slow storage (``kvikio_fetch.SLOW_BYTES_IN_FLIGHT``),
each length of the runs a shard's inner chunks are read in (``reader.STAGED_RUN_BYTES``),
the fetch looking files up ahead or not (``LocalFileSource.warm_metadata``), the fetch
(``LINUMPY_GPU_FETCH``) and kvikio's task size: the raw rate of
reading every file once with 32 threads, then one cold read of level 0, GB/s decoded and
the fraction of that raw rate x compression ratio, as bench_gpu_read.py reports.

``--opens``: how long opening every chunk file takes with a cold cache, one after another
(as the fetch's one submitting thread opens them) and from 32 threads (as the raw reader
does). A level of plane chunks is 2048 files in 2048 directories: if each cold open costs a
metadata read, opening them in series alone could hold the fetch to the rates run 47 saw
(planes 51-66% of the ceiling where 128^3 and 64^3 files reached 100%).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass

sys.path.insert(0, os.path.dirname(__file__))
from bench_gpu_read import CASES, drop_caches, raw_read_rate, sync  # noqa: E402
from gpu_volume import make_volume  # noqa: E402

LOOK_UP_AHEAD = None  # LocalFileSource.warm_metadata as shipped


def stored_bytes(array_path: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(array_path) for f in fs)


def open_seconds(array_path: str, threads: int) -> tuple[float, int]:
    """Seconds to open, stat and close every file under ``array_path`` with a cold cache
    (the walk itself is done before the cache is dropped), and the number of files."""
    files = [os.path.join(d, f) for d, _, fs in os.walk(array_path) for f in fs]
    drop_caches()

    def touch(p: str) -> int:
        fd = os.open(p, os.O_RDONLY)
        try:
            return os.fstat(fd).st_size
        finally:
            os.close(fd)

    t0 = time.perf_counter()
    if threads <= 1:
        for p in files:
            touch(p)
    else:
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(touch, files))
    return time.perf_counter() - t0, len(files)


@dataclass(frozen=True)
class Setting:
    source: str  # LINUMPY_GPU_FETCH: kvikio or pread
    task_mib: int  # kvikio's task size
    in_flight_mib: int  # kvikio_fetch.SLOW_BYTES_IN_FLIGHT
    run_mib: int  # reader.STAGED_RUN_BYTES
    metadata_ahead: bool  # LocalFileSource.warm_metadata as shipped, or doing nothing


def cold_read(path: str, array_path: str, nbytes: int, ratio: float, setting: Setting) -> dict:
    """The raw rate, then one cold read of level 0 with these settings: the disk's rate
    moves 10-20% between minutes, so each read is set against the raw rate just before it."""
    import kvikio.defaults

    import linumpy_gpu as lg
    from linumpy_gpu.engine import fetch, reader
    from linumpy_gpu.gpu import kvikio_fetch

    os.environ["LINUMPY_GPU_FETCH"] = setting.source
    kvikio.defaults.set("task_size", setting.task_mib << 20)
    kvikio_fetch.SLOW_BYTES_IN_FLIGHT = setting.in_flight_mib << 20
    reader.STAGED_RUN_BYTES = setting.run_mib << 20
    if setting.metadata_ahead:
        fetch.LocalFileSource.warm_metadata = LOOK_UP_AHEAD
    else:
        fetch.LocalFileSource.warm_metadata = lambda self, keys: []
    drop_caches()
    raw = raw_read_rate(array_path)
    drop_caches()
    level = lg.open_ome_zarr_gpu(path)[0]
    t0 = time.perf_counter()
    level[...]
    sync()
    rate = nbytes / (time.perf_counter() - t0)
    fetch.LocalFileSource.warm_metadata = LOOK_UP_AHEAD
    return {
        **asdict(setting),
        "gbps": rate / 1e9,
        "fraction_of_ceiling": rate / (raw * ratio),
        "raw_disk_gbps": raw / 1e9,
        "profile": dict(level._reader.last_profile),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", default="/tmp/bench")
    ap.add_argument("--cases", default="design-sharded")
    ap.add_argument("--in-flight-mib", default="16,48,128,256")
    ap.add_argument("--run-mib", default="8")
    ap.add_argument("--opens", action="store_true", help="also time cold opens (see above)")
    ap.add_argument(
        "--metadata",
        default="on",
        help="on,off: with and without the fetch looking files up ahead on slow storage",
    )
    ap.add_argument("--fetch", default="kvikio", help="kvikio,pread: LINUMPY_GPU_FETCH")
    ap.add_argument("--task-mib", default="4", help="kvikio's task size(s), MiB")
    ap.add_argument("--repeat", type=int, default=1, help="rounds over every setting")
    ap.add_argument("--json")
    args = ap.parse_args()

    global LOOK_UP_AHEAD
    import linumpy_gpu as lg
    from linumpy_gpu.engine import fetch

    LOOK_UP_AHEAD = fetch.LocalFileSource.warm_metadata
    rows = []
    for name in args.cases.split(","):
        path = os.path.join(args.dir, f"{name}.ome.zarr")
        array_path = make_volume(path, **CASES[name])
        level = lg.open_ome_zarr_gpu(path)[0]
        nbytes = level.nbytes
        ratio = nbytes / stored_bytes(array_path)
        # a whole warm read first: a process's first full read also sizes its scratch and
        # workspace (decode 1.2 s against 0.22 in run 88), which no cold setting should carry
        level[...]
        sync()
        if not drop_caches():
            sys.exit("cannot drop the page cache here: nothing to measure")
        print(f"## {name}: ratio {ratio:.2f}")
        if args.opens:
            serial, n = open_seconds(array_path, 1)
            threaded, _ = open_seconds(array_path, 32)
            rows.append(
                {"case": name, "files": n, "cold_open_serial_s": serial, "cold_open_32_s": threaded}
            )
            print(
                f"cold opens of {n} files: {serial:.3f} s in series, {threaded:.3f} s on 32 threads"
            )
        print(
            "| fetch | kvikio task MiB | in flight MiB | run MiB | metadata looked up ahead "
            "| GB/s | of ceiling | fetch s |\n|---|---|---|---|---|---|---|---|"
        )
        settings = itertools.product(
            args.fetch.split(","),
            (int(x) for x in args.task_mib.split(",")),
            (int(x) for x in args.in_flight_mib.split(",")),
            (int(x) for x in args.run_mib.split(",")),
            args.metadata.split(","),
        )
        settings = list(settings)
        for _ in range(args.repeat):
            for source, task_mib, mib, run_mib, ahead in settings:
                row = cold_read(
                    path,
                    array_path,
                    nbytes,
                    ratio,
                    Setting(source, task_mib, mib, run_mib, ahead == "on"),
                )
                row["case"] = name
                rows.append(row)
                print(
                    f"| {source} | {task_mib} | {mib} | {run_mib} | {ahead} | {row['gbps']:.2f} "
                    f"| {row['fraction_of_ceiling']:.0%} "
                    f"| {row['profile'].get('fetch', 0):.2f} |",
                    flush=True,
                )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
