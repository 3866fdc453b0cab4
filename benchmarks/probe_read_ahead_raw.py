"""Cold reads of large files in batches, with and without telling the OS what comes next.

The pattern of a sharded level's cold read without the GPU: files in groups of four (one
batch), each group read in 8 MiB pieces from 16 threads and drained before the next group
starts. Against it: whole files from 16 threads (the benchmark's raw ceiling), and the same
batches with ``posix_fadvise(WILLNEED)`` on the next group (``next``), the next two
(``next2``) or every file up front (``all``). Needs root (it drops the page cache).

    python benchmarks/probe_read_ahead_raw.py --dir /scratch/ra --files 16 --mib 96 --rounds 2
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor

from probe_read_patterns import PIECE, drop_caches, read_piece, read_whole

GROUP = 4


def whole(files: list[str]) -> int:
    with ThreadPoolExecutor(16) as pool:
        return sum(pool.map(read_whole, files))


def advise(paths: list[str]) -> None:
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_WILLNEED)
        finally:
            os.close(fd)


def batched(files: list[str], hints: str) -> int:
    size = os.path.getsize(files[0])
    groups = [files[i : i + GROUP] for i in range(0, len(files), GROUP)]
    total = 0

    with ThreadPoolExecutor(16) as pool, ThreadPoolExecutor(1) as hinter:
        if hints == "all":
            hinter.submit(advise, files)
        for g, group in enumerate(groups):
            ahead = {"next": 1, "next2": 2}.get(hints, 0)
            later = [p for grp in groups[g + 1 : g + 1 + ahead] for p in grp]
            if later:
                hinter.submit(advise, later)
            total += sum(
                pool.map(read_piece, [(p, o) for p in group for o in range(0, size, PIECE)])
            )
    return total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", required=True, help="a scratch directory on the disk to probe")
    ap.add_argument("--files", type=int, default=16)
    ap.add_argument("--mib", type=int, default=96, help="size of each file")
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    if not os.access("/proc/sys/vm/drop_caches", os.W_OK):
        sys.exit("this probe drops the page cache: run it as root")
    made_dir = not os.path.isdir(args.dir)
    os.makedirs(args.dir, exist_ok=True)
    files = [os.path.join(args.dir, f"f{i}") for i in range(args.files)]
    try:
        for path in files:
            with open(path, "wb") as f:
                f.write(os.urandom(args.mib << 20))
        patterns = {
            "whole": lambda: whole(files),
            "batched": lambda: batched(files, "none"),
            "next": lambda: batched(files, "next"),
            "next2": lambda: batched(files, "next2"),
            "all": lambda: batched(files, "all"),
        }
        for _ in range(args.rounds):
            for name, run in patterns.items():
                drop_caches()
                t0 = time.perf_counter()
                nbytes = run()
                print(f"{name:8s} {nbytes / (time.perf_counter() - t0) / 1e9:.2f} GB/s", flush=True)
    finally:
        for path in files:  # only what this probe wrote
            with contextlib.suppress(FileNotFoundError):
                os.remove(path)
        if made_dir:
            os.rmdir(args.dir)


if __name__ == "__main__":
    main()
