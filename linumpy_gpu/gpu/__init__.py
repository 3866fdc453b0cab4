"""Everything CUDA: the GPU backend, nvCOMP's batched codecs, and zarr-python on the GPU.

The names users call (nothing here is imported by ``import linumpy_gpu``: they load on
first access, so CPU-only installs never import cupy):

- :func:`read_zarr_to_gpu`: a path in, a cupy array out;
- :func:`gpu_zarr_context`: plain zarr-python arrays return cupy, zstd, Blosc and LZ4
  decoded by nvCOMP;
- :class:`NvcompZstdCodec`, :class:`NvcompBloscCodec`, :func:`register_nvcomp_zstd`,
  :func:`gpu_zstd_config`: the zarr codecs behind it, for users who set zarr's config
  themselves;
- :class:`GDSStore`: a zarr store reading through kvikio (GPUDirect Storage where present);
- :class:`GpuBackend` (``open_ome_zarr(path, device=GpuBackend(...))``), :func:`info`.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "GDSStore": "linumpy_gpu.gpu.gds_store",
    "GpuBackend": "linumpy_gpu.gpu.backend",
    "NvcompBloscCodec": "linumpy_gpu.gpu.zarr_codec",
    "NvcompZstdCodec": "linumpy_gpu.gpu.zarr_codec",
    "gpu_zarr_context": "linumpy_gpu.gpu.context",
    "gpu_zstd_config": "linumpy_gpu.gpu.zarr_codec",
    "info": "linumpy_gpu.gpu.report",
    "missing_pieces": "linumpy_gpu.gpu.deps",
    "read_zarr_to_gpu": "linumpy_gpu.gpu.read",
    "register_nvcomp_zstd": "linumpy_gpu.gpu.zarr_codec",
    "require_gpu": "linumpy_gpu.gpu.deps",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(_LAZY)


__all__ = sorted(_LAZY)
