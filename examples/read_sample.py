"""Write a sample OME-Zarr pyramid, open it on the GPU when one is usable, read tiles.

python examples/read_sample.py [path]
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import linumpy_gpu as lg
from linumpy_gpu.sample import write_sample


def main(path: Path) -> None:
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
    lazy = level.to_dask()
    print("dask max:", int(lazy.max().compute()))
    print("voxel size:", dict(zip(img.axis_names, img.scale(0), strict=True)), img.axes[0].unit)


if __name__ == "__main__":
    if len(sys.argv) > 1:
        main(Path(sys.argv[1]))
    else:
        with tempfile.TemporaryDirectory() as tmp:
            main(Path(tmp) / "sample.ome.zarr")
