"""Locate and load libnvcomp (the C library shipped in the nvidia-libnvcomp wheels)."""

from __future__ import annotations

import ctypes
import glob
import importlib.util
import os
from functools import lru_cache


@lru_cache(maxsize=1)
def find_libnvcomp() -> str:
    """Path of libnvcomp.so: ``$LINUMPY_GPU_NVCOMP_LIB``, the pip wheels, then the system."""
    override = os.environ.get("LINUMPY_GPU_NVCOMP_LIB")
    if override:
        if not os.path.exists(override):
            raise FileNotFoundError(f"LINUMPY_GPU_NVCOMP_LIB={override} does not exist")
        return override
    for package in ("nvidia.libnvcomp", "nvidia.nvcomp"):
        try:
            spec = importlib.util.find_spec(package)
        except (ImportError, ValueError):
            spec = None
        for root in (spec.submodule_search_locations or []) if spec else []:
            hits = sorted(glob.glob(os.path.join(root, "**", "libnvcomp.so*"), recursive=True))
            if hits:
                return hits[-1]
    import ctypes.util

    found = ctypes.util.find_library("nvcomp")
    if found:
        return found
    raise FileNotFoundError("libnvcomp.so not found (no nvidia-libnvcomp wheel installed)")


@lru_cache(maxsize=1)
def load_libnvcomp() -> ctypes.CDLL:
    return ctypes.CDLL(find_libnvcomp())
