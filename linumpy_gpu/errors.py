"""The exceptions and warnings that linumpy_gpu raises.

Everything the package raises on purpose derives from :class:`LinumpyGpuError`, so
``except linumpy_gpu.LinumpyGpuError`` catches every documented failure and nothing else.
"""

from __future__ import annotations


class LinumpyGpuError(Exception):
    """Base class of every error linumpy_gpu raises on purpose."""


class InvalidMetadataError(LinumpyGpuError, ValueError):
    """OME-NGFF or zarr metadata that does not follow the specification.

    Attributes name the store path, the offending field (a dotted path such as
    ``multiscales[0].datasets[1].coordinateTransformations``) and what was expected.
    """

    def __init__(self, store_path: str, field: str, expected: str, found: object = None):
        self.store_path = str(store_path)
        self.field = field
        self.expected = expected
        self.found = found
        found_text = "" if found is None else f"; found {found!r}"
        super().__init__(f"{self.store_path}: invalid '{field}': expected {expected}{found_text}")


class NotOmeZarrError(InvalidMetadataError):
    """The path exists but holds no OME-Zarr image, plate, well or bioformats2raw layout."""


class StoreNotFoundError(LinumpyGpuError, FileNotFoundError):
    """The path does not exist or holds no zarr group or array."""


class ChunkDecodeError(LinumpyGpuError):
    """A stored chunk could not be decoded: damaged, truncated or of the wrong size.

    ``array`` is the array's path, ``key`` the chunk's store key (for sharded arrays the
    shard key with the inner chunk's coordinates) and ``reason`` what was wrong.
    """

    def __init__(self, array: str, key: str, reason: str):
        self.array = array
        self.key = key
        self.reason = reason
        super().__init__(f"cannot decode chunk '{key}' of array '{array}': {reason}")


class GpuUnavailableError(LinumpyGpuError, RuntimeError):
    """A GPU entry point was called where the GPU stack is missing.

    The message lists every missing piece (cupy, nvCOMP, kvikio, a visible CUDA device)
    and the pip extra that installs them.
    """


class SelectionError(LinumpyGpuError, IndexError):
    """An index or region that the array cannot serve (out of bounds, wrong rank, ...)."""


class OutputMismatchError(LinumpyGpuError, ValueError):
    """An ``out=`` array of the wrong shape, dtype, device or memory layout."""


class LinumpyGpuWarning(UserWarning):
    """Base class of the warnings linumpy_gpu emits."""


class MetadataWarning(LinumpyGpuWarning):
    """Metadata that is readable but not what the specification recommends."""


class DeviceFallbackWarning(LinumpyGpuWarning):
    """``device="auto"`` found no usable GPU and reads on the CPU instead."""


class DamagedChunkWarning(LinumpyGpuWarning):
    """A read with ``on_damaged="fill"`` met damaged chunks and filled their place."""


class DeviceMemoryError(LinumpyGpuError, MemoryError):
    """A read needs more GPU memory than is free. The message says how much is needed and
    how much is free; read a region (``level[z0:z1]``) or use ``level.to_dask()``."""


class IncompleteStoreError(NotOmeZarrError):
    """The store was being written by linumpy_gpu and the write did not finish."""
