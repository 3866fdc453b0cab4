"""Replay the batch planner for a full-level GPU read on the CPU (no GPU needed).

Prints the chunks per batch that ``engine.batching.plan_batches`` gives a full read of a
level, with the GPU backend's buffers per batch (compressed bytes, decoded slots, nvCOMP's
workspace) modelled from the figures measured on the H200 host: the workspace is
``--workspace`` times the decoded bytes (3.05 for nvCOMP 6.0 zstd sized from chunk sizes),
the compressed bytes 1/``--ratio`` of them. ``--spread`` also replays a planner whose
buffers, the workspace too, may spread over all free regions (an upper bound for splitting
a batch into several nvCOMP calls side by side). The fewest batches any schedule needs
within the same memory (counted back from the read's last batch) is printed beside them.

    python benchmarks/probe_batch_plan.py                       # the DESIGN.md volume, 128^3
    python benchmarks/probe_batch_plan.py --chunks 64,64,64 --spread
"""

from __future__ import annotations

import argparse

import numpy as np

from linumpy_gpu.engine import batching
from linumpy_gpu.engine.plan import chunk_plan
from linumpy_gpu.engine.selection import normalize_selection
from linumpy_gpu.gpu.backend import MAX_BATCH_BYTES, TABLE_BYTES_FLOOR, TABLE_BYTES_PER_CHUNK
from linumpy_gpu.gpu.staging import DEFAULT_CAP

STAGING_BATCH_BYTES = DEFAULT_CAP * 3 // 4  # GpuBackend.staging_batch_bytes


def replay(shape, chunks, itemsize, ratio, workspace, scratch_fraction, spread) -> list[int]:
    chunk_bytes = int(np.prod(chunks)) * itemsize
    align = batching._align

    def pieces(n: int, n_direct: int) -> tuple[int, ...]:
        stored = n * (align(int(chunk_bytes / ratio * 1.1)) + batching.SLOT_ALIGN) + (1 << 20)
        slots = (n - min(n_direct, n)) * align(chunk_bytes)
        return (0, stored, slots, align(int(workspace * n * chunk_bytes)))

    def spread_fits(sizes, rooms) -> bool:
        return sum(align(p) for p in sizes if p > 0) <= sum(rooms)

    plan = chunk_plan(normalize_selection((slice(None),) * len(shape), shape), shape, chunks)
    out = np.empty(shape, dtype=np.dtype(f"u{itemsize}"))  # never touched: geometry only
    geometry = batching.output_geometry(plan, out, chunks, itemsize, True)
    per_batch = max(
        1, min(MAX_BATCH_BYTES // chunk_bytes, int(STAGING_BATCH_BYTES * ratio) // chunk_bytes)
    )
    largest = min(per_batch, len(plan))
    budget = int(scratch_fraction * out.nbytes) - (
        2 * largest * TABLE_BYTES_PER_CHUNK + TABLE_BYTES_FLOOR
    )
    budget = min(budget, sum(pieces(largest, 0)) * 5 // 4)
    fits = batching.fits
    if spread:
        batching.fits = spread_fits
    try:
        return [
            stop - first
            for first, stop, _ in batching.plan_batches(
                len(plan), lambda: per_batch, pieces, geometry, budget, movable_slots=2
            )
        ]
    finally:
        batching.fits = fits


def fewest_batches(total: float, own: float, per_byte: float) -> int:
    """Counted back from the last batch: each holds what the read's own buffer and the
    output bytes of the batches after it can hold, ``per_byte`` per decoded byte."""
    done, n = 0.0, 0
    while done < total:
        done += min((own + done) / per_byte, total - done)
        n += 1
    return n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", default="2048,1024,1024")
    ap.add_argument("--chunks", default="128,128,128")
    ap.add_argument("--itemsize", type=int, default=2)
    ap.add_argument("--ratio", type=float, default=1.55, help="zstd compression ratio")
    ap.add_argument("--workspace", type=float, default=3.05, help="nvCOMP workspace / decoded")
    ap.add_argument("--scratch-fraction", type=float, default=0.25)
    ap.add_argument("--spread", action="store_true")
    args = ap.parse_args()
    shape = tuple(int(x) for x in args.shape.split(","))
    chunks = tuple(int(x) for x in args.chunks.split(","))
    common = (shape, chunks, args.itemsize, args.ratio, args.workspace, args.scratch_fraction)
    total = float(np.prod(shape)) * args.itemsize
    bound = fewest_batches(total, args.scratch_fraction * total, args.workspace + 1 / args.ratio)
    print(f"fewest batches within {1 + args.scratch_fraction:.2f}x (buffers fungible): {bound}")
    sizes = replay(*common, spread=False)
    print(f"planner: {len(sizes)} batches, chunks per batch {sizes}")
    if args.spread:
        sizes = replay(*common, spread=True)
        print(f"every buffer spread over the free regions: {len(sizes)} batches, {sizes}")


if __name__ == "__main__":
    main()
