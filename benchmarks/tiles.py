"""Random tile reads: many sub-volumes of a level, as a tiled pipeline reads them.

For every layout asked for (``--layouts``; ``--help`` lists them) a test volume is written
once into ``--dir``. Then, on each ``--device``:

* ``--tiles`` random cubes of side ``--tile`` (default 24 of 256^3) are read at once with
  ``level.read_regions(regions)``, and the same cubes one by one with ``level[region]``;
  GB/s are the tiles' decoded bytes per second, best of ``--repeat`` passes;
* a small read: ``--latency-reads`` random cubes of side ``--small-tile`` (default 64^3),
  each read and timed on its own; the median time is reported (in ms, in the note), and
  GB/s from it.

The other libraries of ``peers.py`` that are installed read the same tiles and small
cubes (on the GPU, followed by a copy to the device): zarr-python and zarrs one by one,
tensorstore one by one and all at once (every read issued as a future before the first is
waited for), as ``read_regions`` does. Every result is checked equal to zarr-python's read
of the same region before it is timed. Tiles sit at the same places in every run (a fixed
seed), so runs of different linumpy_gpu versions read the same bytes. With ``--cold`` the
store's files are dropped from the page cache before each pass (and before each of up to
10 small reads). ``--quick`` reads 4 tiles of 64^3 and 10 small reads, in four layouts.

Each case runs in a fresh Python process, which also records the peak host memory (RSS)
above the result and, on the GPU, the peak device memory. Results go to ``--json``
(default ``benchmarks/results/tiles-<UTC time>.json``) and print as a markdown table.

    python benchmarks/tiles.py --size small --device cpu
    python benchmarks/tiles.py --size design --device gpu --tiles 48 --layouts zstd-64-sharded
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable
from typing import Any

import _common as common
import numpy as np
import peers

COLD_SMALL_READS = 10
# the readers of peers.py that read a region as users call them (the two GPU zarr-python
# configurations open the array per read, a full-level pattern)
TILE_READERS = (
    peers.OURS,
    "zarr-python",
    "tensorstore",
    "zarrs",
    "zarr-python + copy",
    "tensorstore + copy",
    "zarrs + copy",
)


def add_options(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--tile", type=int, help="side of the random tiles (default: 256)")
    ap.add_argument("--tiles", type=int, help="how many random tiles (default: 24)")
    ap.add_argument(
        "--small-tile", type=int, default=64, help="side of the small reads (default: 64)"
    )
    ap.add_argument(
        "--latency-reads", type=int, help="how many small reads, each timed (default: 50)"
    )


def case(params: dict[str, Any]) -> dict[str, Any]:
    """One reader of one layout on one device, inside a worker process."""
    import zarr

    device = common.Device(params["device"])
    regions = common.regions_from_json(params["regions"])
    files = common.array_files(params["array_path"])
    ref = zarr.open_array(params["array_path"], mode="r")
    corner = (slice(0, 1),) * 3
    try:
        read_one = peers.make_reader(params["library"], params, device)
        read_many = (
            peers.make_many_reader(params["library"], params, device)
            if params["kind"] == "regions"
            else None
        )
    except Exception as exc:  # an older release or a missing GPU stack
        return {"error": common.describe_error(exc)}

    def check_each(_: Any) -> bool:
        return all(common.equal(read_one(r), ref[r], device) for r in regions)

    def all_at_once() -> Any:
        assert read_many is not None
        return read_many(regions)

    def check_all(got: Any) -> bool:
        return common.equal(list(got), [ref[r] for r in regions], device)

    def one_by_one() -> Any:
        # one tile alive at a time, as a pipeline that processes each tile in turn holds it
        last = None
        for r in regions:
            last = read_one(r)
        return last

    kind = params["kind"]
    if kind == "small":
        return small_reads(read_one, regions, device, params["cold"], files, check_each, corner)
    return common.read_case(
        read=all_at_once if kind == "regions" else one_by_one,
        warmup=lambda: read_one(corner),
        check=check_all if kind == "regions" else check_each,
        device=device,
        repeat=params["repeat"],
        cold=params["cold"],
        files=files,
    )


def small_reads(
    read_one: Callable[[tuple[slice, ...]], Any],
    regions: list[tuple[slice, ...]],
    device: common.Device,
    cold: bool,
    files: list[str],
    check: Callable[[Any], bool],
    corner: tuple[slice, ...],
) -> dict[str, Any]:
    """Each small region read and timed on its own; the median and 90th percentile."""
    out: dict[str, Any] = {}
    nbytes = int(np.prod([r.stop - r.start for r in regions[0]])) * 2
    try:
        read_one(corner)
        device.sync()
        _, memory = common.measured_call(lambda: read_one(regions[0]), device)
        out.update(memory)
        out["equal_to_reference"] = check(None)
        if not out["equal_to_reference"]:
            out["error"] = "result differs from zarr-python's read; not timed"
            return out
        out["warm"] = [common.time_calls(lambda r=r: read_one(r), device, 1)[0] for r in regions]
        if cold:
            out["cold"], left = [], []
            for r in regions[:COLD_SMALL_READS]:
                seconds, frac = common.time_cold(lambda r=r: read_one(r), device, 1, files)
                out["cold"] += seconds
                if frac is not None:
                    left.append(frac)
            out["cached_after_drop"] = max(left) if left else None
    except Exception as exc:
        out["error"] = common.describe_error(exc)
        return out
    out["summary"] = {
        mode: latency_summary(out[mode], nbytes) for mode in ("warm", "cold") if out.get(mode)
    }
    return out


def latency_summary(seconds: list[float], nbytes: int) -> dict[str, Any]:
    median = statistics.median(seconds)
    p90 = float(np.percentile(seconds, 90))
    return {
        "median_seconds": median,
        "p90_seconds": p90,
        "gbps": nbytes / median / 1e9,
        "note": f"median {1e3 * median:.2f} ms, p90 {1e3 * p90:.2f} ms over {len(seconds)} reads",
    }


def main() -> None:
    args = common.parse_args(
        "tiles",
        __doc__,
        # a smoke run keeps one layout of each kind: five worker processes per layout
        quick_layouts=["zstd-128", "zstd-64-sharded", "v2-blosc-lz4-shuffle", "v3-gzip"],
        add_options=add_options,
    )
    if args.tile is None:
        args.tile = 64 if args.quick else 256
    if args.tiles is None:
        args.tiles = 4 if args.quick else 24
    if args.latency_reads is None:
        args.latency_reads = 10 if args.quick else 50
    run = common.Run(args, __file__)
    tiles = common.random_regions(args.shape, args.tile, args.tiles, seed=0)
    small = common.random_regions(args.shape, args.small_tile, args.latency_reads, seed=1)
    tile_shape = "x".join(str(s.stop - s.start) for s in tiles[0])
    small_shape = "x".join(str(s.stop - s.start) for s in small[0])
    tiles_bytes = sum(int(np.prod([s.stop - s.start for s in r])) * 2 for r in tiles)
    small_bytes = int(np.prod([s.stop - s.start for s in small[0]])) * 2
    cases: list[tuple[str, str, str, str, list[tuple[slice, ...]]]] = []
    for device in args.devices:
        libraries = [
            name
            for name, module in peers.readers(device).items()
            if name in TILE_READERS and common.installed(module)
        ]
        for library in libraries:
            if library == peers.OURS or library.startswith("tensorstore"):
                many = "read_regions" if library == peers.OURS else "all at once (futures)"
                label = f"{library} {many}, {args.tiles} tiles {tile_shape}"
                cases.append((device, library, label, "regions", tiles))
        for library in libraries:
            label = f"{library} one by one, {args.tiles} tiles {tile_shape}"
            cases.append((device, library, label, "one", tiles))
        for library in libraries:
            cases.append((device, library, f"{library} small read {small_shape}", "small", small))
    for name in args.layouts:
        store = run.store(name)
        for device, library, reader, kind, regions in cases:
            params = {
                "image_path": store.image_path,
                "array_path": store.array_path,
                "zarr_format": store.layout.zarr_format,
                "device": device,
                "library": library,
                "kind": kind,
                "regions": common.regions_to_json(regions),
                "repeat": args.repeat,
                "cold": args.cold,
            }
            result = run.worker("case", params)
            run.add(
                layout=name,
                device=device,
                reader=reader,
                nbytes=small_bytes if kind == "small" else tiles_bytes,
                result=result,
            )
    run.finish()


if __name__ == "__main__":
    common.entry(main)
