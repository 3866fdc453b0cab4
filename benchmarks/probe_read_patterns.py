"""Cold reads of one level's files in several patterns, 32 threads each (no GPU needed).

    python benchmarks/probe_read_patterns.py /scratch/bench/design-sharded.ome.zarr/0 \
        [--rounds 2] [--files-per-batch 4]

Root only: the page cache is dropped before each pattern. A sharded level fetched cold came
in at 64-75% of the rate of 32 threads reading whole files (run 56, ``probe_fetch_cold.py``),
one fetch or ten alike. The fetch reads a shard's 8 MiB runs one file after another (a batch
of the DESIGN.md sharded level touches 4 of its 32 files). This times, on the same files:

* whole files, one per thread (the raw rate the benchmarks compare against);
* 8 MiB pieces in file order, one file after another (the fetch as it is);
* 8 MiB pieces in turn across every file;
* ``--files-per-batch`` files at a time, their pieces in file order, then in turn (the
  same two orders within one batch's files);
* whole files and 8 MiB pieces file after file with ``O_DIRECT`` (no page cache, no
  readahead: each read goes to the device as submitted).
"""

from __future__ import annotations

import argparse
import mmap
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

PIECE = 8 << 20
THREADS = 32


def drop_caches() -> None:
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def read_whole(path: str) -> int:
    with open(path, "rb", buffering=0) as f:
        return len(f.read())


def read_piece(item: tuple[str, int]) -> int:
    path, offset = item
    fd = os.open(path, os.O_RDONLY)
    try:
        return len(os.pread(fd, PIECE, offset))
    finally:
        os.close(fd)


_direct_buffers = threading.local()


def read_piece_direct(item: tuple[str, int]) -> int:
    """One piece with O_DIRECT into a page-aligned buffer of this thread's (mmap is
    page-aligned; the last piece of a file comes back short, which O_DIRECT allows)."""
    path, offset = item
    buf = getattr(_direct_buffers, "buf", None)
    if buf is None:
        buf = _direct_buffers.buf = mmap.mmap(-1, PIECE)
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    try:
        return os.preadv(fd, [buf], offset)
    finally:
        os.close(fd)


def pieces(files: list[str], sizes: dict[str, int], in_turn: bool) -> list[tuple[str, int]]:
    """Every 8 MiB piece of ``files``: file after file, or the k-th piece of each in turn."""
    if not in_turn:
        return [(p, a) for p in files for a in range(0, sizes[p], PIECE)]
    most = max(-(-sizes[p] // PIECE) for p in files)
    return [(p, k * PIECE) for k in range(most) for p in files if k * PIECE < sizes[p]]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("array", help="an array's directory (e.g. level 0 of an OME-Zarr image)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--files-per-batch", type=int, default=4)
    args = ap.parse_args()
    files = sorted(
        os.path.join(d, f) for d, _, fs in os.walk(args.array) for f in fs if f != "zarr.json"
    )
    sizes = {p: os.path.getsize(p) for p in files}
    k = args.files_per_batch
    groups = [files[g : g + k] for g in range(0, len(files), k)]

    def batched(in_turn: bool) -> Callable[[ThreadPoolExecutor], int]:
        return lambda pool: sum(
            sum(pool.map(read_piece, pieces(group, sizes, in_turn))) for group in groups
        )

    patterns: dict[str, Callable[[ThreadPoolExecutor], int]] = {
        "whole files": lambda pool: sum(pool.map(read_whole, files)),
        "8 MiB pieces, file after file": lambda pool: sum(
            pool.map(read_piece, pieces(files, sizes, False))
        ),
        "8 MiB pieces, every file in turn": lambda pool: sum(
            pool.map(read_piece, pieces(files, sizes, True))
        ),
        f"{k} files at a time, file after file": batched(False),
        f"{k} files at a time, in turn": batched(True),
        "O_DIRECT 8 MiB pieces, file after file": lambda pool: sum(
            pool.map(read_piece_direct, pieces(files, sizes, False))
        ),
        f"O_DIRECT {k} files at a time, file after file": lambda pool: sum(
            sum(pool.map(read_piece_direct, pieces(group, sizes, False))) for group in groups
        ),
    }
    print(f"{len(files)} files, {sum(sizes.values()) / 1e9:.2f} GB")
    print("| round | pattern | GB/s |\n|---|---|---|")
    for rnd in range(args.rounds):
        for name, read in patterns.items():
            drop_caches()
            with ThreadPoolExecutor(THREADS) as pool:
                t0 = time.perf_counter()
                nbytes = read(pool)
                seconds = time.perf_counter() - t0
            print(f"| {rnd} | {name} | {nbytes / seconds / 1e9:.2f} |", flush=True)


if __name__ == "__main__":
    main()
