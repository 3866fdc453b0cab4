"""Write a sample OME-Zarr pyramid, open it on the GPU when one is usable, read tiles.

python examples/read_sample.py [path]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

import linumpy_gpu as lg
from linumpy_gpu.sample import write_sample


def main(path: Path) -> None:
    if not path.exists():  # a second run reads the sample the first one kept
        write_sample(path)
    img = lg.open_ome_zarr(path, device="auto")  # GPU if usable, else CPU with a warning
    print(img)
    level = img[0]
    t0 = time.perf_counter()
    volume = level.read()
    print(
        f"full level: {type(volume).__module__}.{type(volume).__name__} {volume.shape} "
        f"in {time.perf_counter() - t0:.3f} s"
    )
    # walk the volume in 32-slice slabs, as a reconstruction pipeline would
    means = [float(level[z : z + 32].mean()) for z in range(0, level.shape[0], 32)]
    print("slab means:", np.round(means, 1))
    # many small tiles at once: every chunk they touch is fetched and decoded once, in
    # shared batches (much faster than one read per tile on the GPU)
    rng = np.random.default_rng(0)
    size = [min(32, n) for n in level.shape]
    tiles = [
        tuple(
            slice(a, a + s)
            for a, s in zip(rng.integers(0, np.subtract(level.shape, size) + 1), size, strict=True)
        )
        for _ in range(8)
    ]
    got = level.read_regions(tiles)
    same = all(bool((g == level[t]).all()) for g, t in zip(got, tiles, strict=True))
    print(f"{len(tiles)} tiles of {size} with read_regions: equal to one-by-one reads: {same}")
    lazy = level.to_dask()
    print("dask max:", int(lazy.max().compute()))
    print("voxel size:", dict(zip(img.axis_names, img.scale(0), strict=True)), img.axes[0].unit)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "path", nargs="?", type=Path, help="where the sample is kept (default: a temp folder)"
    )
    args = ap.parse_args()
    if args.path is not None:
        main(args.path)
    else:
        with tempfile.TemporaryDirectory() as tmp:
            main(Path(tmp) / "sample.ome.zarr")
