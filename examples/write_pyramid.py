"""Reconstruct-and-save: write a volume with a pyramid and labels, patch a slab, refresh.

    python examples/write_pyramid.py [out.ome.zarr] [--overwrite]

Runs on the GPU (cupy in, nvCOMP compression) when one is usable, else on the CPU.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np

import linumpy_gpu as lg
from linumpy_gpu.sample import sample_volume


def main(path: Path, overwrite: bool = False) -> None:
    volume = sample_volume()
    try:
        from linumpy_gpu.gpu import require_gpu

        require_gpu()  # says what is missing where the GPU cannot be used
        import cupy

        volume = cupy.asarray(volume)
        device = "gpu"
    except lg.GpuUnavailableError as exc:  # no GPU stack here: same API on the CPU
        print(f"writing on the CPU: {exc}")
        device = "cpu"
    img = lg.write_ome_zarr(
        path,
        volume,
        axes="zyx",
        units=("micrometer",) * 3,
        scale=(3.5, 1.5, 1.5),
        levels=3,
        overwrite=overwrite,  # an existing store at path is replaced only when asked
        progress=True,
    )
    xp = np if device == "cpu" else cupy
    segmentation = (volume > xp.percentile(volume, 90)).astype("u1")
    lg.write_labels(img, "bright", segmentation, colors={1: (255, 64, 0, 255)})
    img = lg.open_ome_zarr(path, device=device, mode="r+")
    img[0][10:20] = xp.zeros((10, *img[0].shape[1:]), dtype="u2")  # blank a damaged slab
    img.update_pyramid((slice(10, 20),))
    print(img)
    print("labels:", list(img.labels), "level-1 slab mean:", float(img[1][5:10].mean()))


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("path", nargs="?", type=Path, help="where to write (default: a temp folder)")
    ap.add_argument("--overwrite", action="store_true", help="replace a store already there")
    args = ap.parse_args()
    if args.path is not None:
        try:
            main(args.path, args.overwrite)
        except lg.StoreExistsError as exc:  # one line, in this script's terms
            hint = "" if args.overwrite else "; run again with --overwrite to replace it"
            ap.exit(2, f"{ap.prog}: {str(exc).split(';')[0]}{hint}\n")
    else:
        with tempfile.TemporaryDirectory() as tmp:
            main(Path(tmp) / "recon.ome.zarr")
