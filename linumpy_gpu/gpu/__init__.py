"""Everything CUDA: nvCOMP codecs, the GPU backend, gpu_zarr_context, the GDS store.

Nothing here is imported by ``import linumpy_gpu``; attributes load on first access.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "info": ".report",
    "NvcompZstdCodec": ".zstd_codec",
    "gpu_zarr_context": ".context",
    "GDSStore": ".gds_store",
    "GpuBackend": ".backend",
    "require_gpu": ".deps",
    "missing_pieces": ".deps",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = sorted(_LAZY)
