"""Helpers for the data-safety tests: snapshots of what is on disk, small stores."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numpy as np

import linumpy_gpu as lg


def snapshot(root: Path) -> dict[str, str]:
    """Every file under ``root`` (relative path -> sha1 of its bytes)."""
    out = {}
    for dirpath, _, files in os.walk(root):
        for name in files:
            path = Path(dirpath) / name
            out[str(path.relative_to(root))] = hashlib.sha1(path.read_bytes()).hexdigest()
    return out


def volume(shape=(16, 32, 32), seed=0, dtype="u2") -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.integers(0, 4000, size=shape).astype(dtype)


def small_store(path: Path, data: np.ndarray | None = None, **kwargs) -> lg.MultiscaleImage:
    data = volume() if data is None else data
    kwargs.setdefault("chunks", (8, 16, 16))
    kwargs.setdefault("device", "cpu")
    return lg.write_ome_zarr(path, data, **kwargs)
