"""Writes the reference image of tests/integration/test_ngff06_images.py with ngff-zarr
0.50.0 in NGFF 0.4, 0.5 and 0.6 under tests/data/ngff-zarr-0.50/img-{version}.ome.zarr.

The GPU test host has no package index and cannot carry ngff-zarr's wheels, so the stores
are committed; tests write them afresh wherever ngff-zarr is importable and check that the
committed ones read the same. Run from the repository root after changing the image:

    .venv/bin/python tests/data/make_ngff_zarr_stores.py
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
STORES = HERE / "ngff-zarr-0.50"
VERSIONS = ("0.4", "0.5", "0.6")
NGFF_ZARR_VERSION = "0.50.0"  # the committed stores come from this release

DIMS = ("z", "y", "x")
SCALE = {"z": 2.0, "y": 0.5, "x": 0.25}
TRANSLATION = {"z": 10.0, "y": 1.0, "x": -3.0}
UNITS = {"z": "micrometer", "y": "micrometer", "x": "micrometer"}


def volume(shape=(8, 24, 32), seed=0) -> np.ndarray:
    """The test image: seeded random 16-bit voxels."""
    rng = np.random.default_rng(seed)
    return rng.integers(0, 4000, size=shape).astype("u2")


def store_path(root: Path, version: str) -> Path:
    return Path(root) / f"img-{version}.ome.zarr"


def write_stores(root: Path) -> dict[str, Path]:
    """Writes the image with the installed ngff-zarr into ``root``: {version: path}."""
    import ngff_zarr as nz

    image = nz.to_ngff_image(
        volume(), dims=list(DIMS), scale=SCALE, translation=TRANSLATION, axes_units=UNITS
    )
    multiscales = nz.to_multiscales(image, scale_factors=[2], method=nz.Methods.ITKWASM_BIN_SHRINK)
    out = {}
    for version in VERSIONS:
        path = store_path(root, version)
        nz.to_ngff_zarr(str(path), multiscales, version=version)
        out[version] = path
    return out


def main() -> int:
    import ngff_zarr

    if ngff_zarr.__version__ != NGFF_ZARR_VERSION:
        print(
            f"ngff-zarr {ngff_zarr.__version__} is installed; the committed stores come from "
            f"{NGFF_ZARR_VERSION} (install it, or rename the folder and NGFF_ZARR_VERSION)",
            file=sys.stderr,
        )
        return 1
    if STORES.exists():
        shutil.rmtree(STORES)
    STORES.mkdir(parents=True)
    for version, path in write_stores(STORES).items():
        print(f"{version}: {path.relative_to(HERE.parent.parent)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
