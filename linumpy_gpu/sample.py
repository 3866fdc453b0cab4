"""A built-in sample: a synthetic serial-OCT-like volume written as an OME-Zarr pyramid."""

from __future__ import annotations

import os
from typing import Any

import numpy as np


def sample_volume(shape: tuple[int, int, int] = (96, 256, 256), seed: int = 0) -> np.ndarray:
    """A uint16 volume with smooth tissue-like structure, tile seams and speckle noise."""
    rng = np.random.default_rng(seed)
    z, y, x = np.meshgrid(*(np.linspace(-1, 1, n, dtype=np.float32) for n in shape), indexing="ij")
    tissue = np.exp(-3 * (x**2 + (1.3 * y) ** 2 + (0.8 * z) ** 2))
    layers = 0.5 + 0.5 * np.sin(18 * np.sqrt(x**2 + y**2) + 4 * z)
    seams = 1.0 - 0.15 * (
        (np.abs(np.sin(np.pi * 4 * x)) < 0.05) | (np.abs(np.sin(np.pi * 4 * y)) < 0.05)
    )
    speckle = rng.gamma(4.0, 0.25, size=shape).astype(np.float32)
    vol = 2000 + 30000 * tissue * layers * seams * speckle
    return np.clip(vol, 0, 65535).astype(np.uint16)


def write_sample(
    path: str | os.PathLike[str], *, version: str = "0.5", overwrite: bool = False, levels: int = 3
) -> Any:
    """Write the sample as NGFF ``version`` with ``levels`` levels; returns the opened image."""
    from linumpy_gpu.write import write_ome_zarr

    return write_ome_zarr(
        path,
        sample_volume(),
        axes=("z", "y", "x"),
        units=("micrometer",) * 3,
        scale=(3.5, 1.5, 1.5),
        translation=(0.0, 100.0, 200.0),
        chunks=(32, 64, 64),
        levels=levels,
        name="sample-oct",
        version=version,
        overwrite=overwrite,
    )
