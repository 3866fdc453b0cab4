"""linumpy_gpu: OME-Zarr volumes between disk and NVIDIA GPU memory, fast and safely.

Importing this package never imports cupy, nvCOMP or kvikio; GPU pieces load on first use.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any

from linumpy_gpu import config, gpu
from linumpy_gpu._version import __version__
from linumpy_gpu.errors import (
    ChunkDecodeError,
    ChunkWriteError,
    CodecError,
    ConfigError,
    ConfigWarning,
    DamagedChunkWarning,
    DeviceFallbackWarning,
    DeviceMemoryError,
    GpuUnavailableError,
    HostMemoryError,
    IncompleteStoreError,
    InvalidArgumentError,
    InvalidMetadataError,
    LevelNotFoundError,
    LinumpyGpuError,
    LinumpyGpuWarning,
    MetadataWarning,
    MissingDependencyError,
    NotFoundError,
    NotOmeZarrError,
    NvcompError,
    OutputMismatchError,
    RemoteStoreError,
    SelectionError,
    StoreError,
    StoreExistsError,
    StoreNotFoundError,
    StorePermissionError,
    UnresolvedParametersError,
    UnsupportedTransformationError,
    UnsupportedWriteError,
    WriteError,
)
from linumpy_gpu.image import (
    Labels,
    Level,
    MultiscaleImage,
    Plate,
    Scene,
    SeriesCollection,
    Well,
    open_image,
    open_ome_zarr,
)
from linumpy_gpu.write import write_labels, write_ome_zarr


def open_ome_zarr_gpu(
    path: Any, device: int = 0, **kwargs: Any
) -> MultiscaleImage | Plate | Well | SeriesCollection | Scene:
    """Open an OME-Zarr store whose reads land in cupy arrays on GPU ``device``.

    Raises :class:`GpuUnavailableError` naming whatever is missing (cupy, nvCOMP, a CUDA
    device) and the pip extra that installs it.
    """
    return open_ome_zarr(path, device=device, **kwargs)


def gpu_zarr_context(
    device: int | None = None, *, batch_size: int | None = None, concurrency: int | None = None
) -> AbstractContextManager[None]:
    """Scope in which plain zarr-python arrays return cupy, decoded by linumpy_gpu's codecs
    on GPU ``device`` (``batch_size`` chunks per nvCOMP batch, ``concurrency`` reads in
    flight; None: the defaults). See :func:`linumpy_gpu.gpu.context.gpu_zarr_context`.
    """
    from linumpy_gpu.gpu.context import gpu_zarr_context as _ctx

    given = {"batch_size": batch_size, "concurrency": concurrency}
    return _ctx(device, **{k: v for k, v in given.items() if v is not None})


__all__ = [
    "ChunkDecodeError",
    "ChunkWriteError",
    "CodecError",
    "ConfigError",
    "ConfigWarning",
    "DamagedChunkWarning",
    "DeviceFallbackWarning",
    "DeviceMemoryError",
    "HostMemoryError",
    "GpuUnavailableError",
    "IncompleteStoreError",
    "InvalidArgumentError",
    "InvalidMetadataError",
    "Labels",
    "Level",
    "LevelNotFoundError",
    "LinumpyGpuError",
    "LinumpyGpuWarning",
    "MetadataWarning",
    "MissingDependencyError",
    "MultiscaleImage",
    "NotFoundError",
    "NotOmeZarrError",
    "NvcompError",
    "OutputMismatchError",
    "Plate",
    "Scene",
    "RemoteStoreError",
    "SelectionError",
    "SeriesCollection",
    "StoreError",
    "StoreExistsError",
    "StoreNotFoundError",
    "StorePermissionError",
    "UnresolvedParametersError",
    "UnsupportedTransformationError",
    "UnsupportedWriteError",
    "Well",
    "WriteError",
    "__version__",
    "config",
    "gpu",
    "gpu_zarr_context",
    "open_image",
    "open_ome_zarr",
    "open_ome_zarr_gpu",
    "write_labels",
    "write_ome_zarr",
]
