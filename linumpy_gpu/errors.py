"""Every exception and warning linumpy_gpu raises on purpose.

All errors derive from :class:`LinumpyGpuError`, so ``except linumpy_gpu.LinumpyGpuError``
catches every documented failure. Each also derives from the builtin exception that an
``except`` clause written for plain Python would expect (``ValueError``,
``FileNotFoundError``, ``PermissionError``, ...). Errors raised because something deeper
failed keep that failure as ``__cause__``.
"""

from __future__ import annotations

import functools
import os
import sys
import warnings
from collections.abc import Callable
from typing import Any, TypeVar

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
_F = TypeVar("_F", bound=Callable[..., Any])


class LinumpyGpuError(Exception):
    """Base class of every error linumpy_gpu raises on purpose."""


# -- arguments and configuration --------------------------------------------------------------


class InvalidArgumentError(LinumpyGpuError, ValueError):
    """An argument of a public function that it cannot accept (an unknown device name, an
    unknown mode, a label name that is not a plain name, ...)."""


class ConfigError(InvalidArgumentError):
    """A setting (from :func:`linumpy_gpu.config.set` or a ``LINUMPY_GPU_*`` environment
    variable) that does not parse or is out of range."""


class MissingDependencyError(LinumpyGpuError, ImportError):
    """An optional package that this call needs is not installed; the message names the pip
    extra or package that provides it."""


# -- stores -------------------------------------------------------------------------------------


class StoreError(LinumpyGpuError, OSError):
    """A store (a directory, a URL, a zarr store object) that cannot be opened or written."""


class StoreNotFoundError(StoreError, FileNotFoundError):
    """The path does not exist or holds no zarr group or array."""


class StoreExistsError(StoreError, FileExistsError):
    """The destination exists and the call was not asked to replace it."""


class StorePermissionError(StoreError, PermissionError):
    """The operating system or the store refused access (read-only store, file modes)."""


class RemoteStoreError(StoreError, ConnectionError):
    """A remote store (http, s3, gs, ...) could not be reached or refused the request; the
    message says what to check (the address, credentials, ``storage_options``)."""


# -- metadata -----------------------------------------------------------------------------------


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
        found_text = "" if found is None else f"; found {short_repr(found)}"
        super().__init__(f"{self.store_path}: invalid '{field}': expected {expected}{found_text}")

    def __reduce__(self) -> tuple[type, tuple[str, str, str, object]]:
        return type(self), (self.store_path, self.field, self.expected, self.found)


class NotOmeZarrError(InvalidMetadataError):
    """The path exists but holds no OME-Zarr image, plate, well or bioformats2raw layout."""


class IncompleteStoreError(NotOmeZarrError):
    """The store was being written by linumpy_gpu and the write did not finish."""


# -- reading ------------------------------------------------------------------------------------


class NotFoundError(LinumpyGpuError, KeyError, IndexError):
    """A member asked for by index or name that does not exist: a pyramid level, a label
    image, a well, a field or a series. The message lists the ones that do."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class LevelNotFoundError(NotFoundError):
    """A pyramid level that the image does not have."""


class SelectionError(LinumpyGpuError, IndexError):
    """An index or region that the array cannot serve (out of bounds, wrong rank, ...)."""


class OutputMismatchError(LinumpyGpuError, ValueError):
    """An ``out=`` array of the wrong shape, dtype, device or memory layout."""


class CodecError(LinumpyGpuError, ValueError):
    """Stored bytes that do not decode to the chunk they should be; the message says why.
    Raised by the codec functions of :mod:`linumpy_gpu.codecs`; reads report it as a
    :class:`ChunkDecodeError` naming the chunk."""


class UnsupportedTransformationError(LinumpyGpuError, NotImplementedError):
    """A coordinate transformation linumpy_gpu does not apply to voxels (displacement and
    coordinate fields): it is read and exposed, but not resampled; the message names its
    type."""


class UnresolvedParametersError(InvalidArgumentError):
    """A transformation's parameters live in a zarr array (its ``path``) that has not been
    loaded; ``linumpy_gpu.ngff.resolve_parameters`` loads them."""


class ChunkDecodeError(LinumpyGpuError, ValueError):
    """A stored chunk could not be decoded: damaged, truncated, of the wrong size, or not a
    regular file.

    ``array`` is the array's path, ``key`` the chunk's store key (for sharded arrays the
    shard key with the inner chunk's coordinates) and ``reason`` what was wrong.
    """

    def __init__(self, array: str, key: str, reason: str):
        self.array = array
        self.key = key
        self.reason = reason
        super().__init__(f"cannot decode chunk '{key}' of array '{array}': {reason}")

    def __reduce__(self) -> tuple[type, tuple[str, str, str]]:
        return type(self), (self.array, self.key, self.reason)


# -- writing ------------------------------------------------------------------------------------


class WriteError(LinumpyGpuError, ValueError):
    """Input that cannot be written (checked before anything touches the disk)."""


class UnsupportedWriteError(WriteError):
    """The array's codecs or layout are not ones this writer produces."""


class ChunkWriteError(StoreError):
    """Writing stored objects failed; the message names the object and how many of the
    array's objects were written before it."""


# -- GPU ----------------------------------------------------------------------------------------


class GpuUnavailableError(LinumpyGpuError, RuntimeError):
    """A GPU entry point was called where the GPU stack is missing.

    The message lists every missing piece (cupy, nvCOMP, a visible CUDA device) and the pip
    extra that installs them.
    """


class HostMemoryError(LinumpyGpuError, MemoryError):
    """A read's result does not fit the host's memory. The message says how large it is;
    read a region (``level[z0:z1]``) or use ``level.to_dask()``."""


class DeviceMemoryError(LinumpyGpuError, MemoryError):
    """A read needs more GPU memory than is free. The message says how much is needed and
    how much is free; read a region (``level[z0:z1]``) or use ``level.to_dask()``."""


class NvcompError(LinumpyGpuError, RuntimeError):
    """nvCOMP refused a call (an unusable library version, a failed compression)."""


# -- warnings -----------------------------------------------------------------------------------


class LinumpyGpuWarning(UserWarning):
    """Base class of the warnings linumpy_gpu emits."""


class MetadataWarning(LinumpyGpuWarning):
    """Metadata that is readable but not what the specification recommends."""


class ConfigWarning(LinumpyGpuWarning):
    """A ``LINUMPY_GPU_*`` environment variable that names no setting (a misspelt name)."""


class DeviceFallbackWarning(LinumpyGpuWarning):
    """``device="auto"`` found no usable GPU and reads on the CPU instead."""


class DamagedChunkWarning(LinumpyGpuWarning):
    """A read with ``on_damaged="fill"`` met damaged chunks and filled their place."""


def warn(message: str, category: type[Warning]) -> None:
    """Emit a warning attributed to the first caller outside this package, so that it
    points at the user's line whatever depth inside the library it comes from."""
    level = 2  # the caller of this function
    frame = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE_DIR):
        frame = frame.f_back  # type: ignore[assignment]
        level += 1
    warnings.warn(message, category, stacklevel=level)


def portable(task: _F) -> _F:
    """Decorate a function that runs as a task in other processes (dask workers): the
    errors it raises arrive whole. A worker's error travels pickled with its causes, and
    where one of them cannot be rebuilt (zarr's exceptions cannot), dask.distributed
    replaces the whole error with a plain ``Exception``; causes other than Python's own
    exceptions and ours are therefore kept as text."""

    @functools.wraps(task)
    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return task(*args, **kwargs)
        except LinumpyGpuError as exc:
            cause = exc.__cause__ or exc.__context__
            if cause is not None and not _travels(cause):
                exc.add_note(f"caused by {type(cause).__name__}: {cause}")
                exc.__cause__ = exc.__context__ = None
                exc.__suppress_context__ = True
            raise

    return run  # type: ignore[return-value]


def _travels(exc: BaseException | None) -> bool:
    """Whether ``exc`` and its causes are all Python's exceptions or ours."""
    while exc is not None:
        if not isinstance(exc, LinumpyGpuError) and type(exc).__module__ != "builtins":
            return False
        exc = exc.__cause__ or exc.__context__
    return True


def short_repr(value: object, limit: int = 120) -> str:
    """``repr(value)`` cut to ``limit`` characters, for quoting a user's value in a message."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


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
    "LevelNotFoundError",
    "LinumpyGpuError",
    "LinumpyGpuWarning",
    "MetadataWarning",
    "MissingDependencyError",
    "NotFoundError",
    "NotOmeZarrError",
    "NvcompError",
    "OutputMismatchError",
    "RemoteStoreError",
    "SelectionError",
    "StoreError",
    "StoreExistsError",
    "StoreNotFoundError",
    "StorePermissionError",
    "UnresolvedParametersError",
    "UnsupportedTransformationError",
    "UnsupportedWriteError",
    "WriteError",
    "warn",
]
