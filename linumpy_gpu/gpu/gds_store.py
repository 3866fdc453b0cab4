"""``GDSStore``: a zarr store for local directories that reads with kvikio (GPUDirect Storage).

Reads land directly in device memory when zarr asks for GPU buffers (inside
:func:`gpu_zarr_context` or ``zarr.config.enable_gpu()``), and in host memory otherwise.
kvikio decides the transport: native GDS (storage DMA straight into GPU memory) where the
driver and filesystem support it, else its compatibility mode: parallel POSIX reads on
kvikio's thread pool into pinned bounce buffers, then copies to the device. Results are
identical either way; :func:`gds_mode` says which is in use. Writes go through kvikio as
well, to a temporary file renamed into place, so readers never see a half-written object.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
from zarr.abc.store import OffsetByteRequest, RangeByteRequest, SuffixByteRequest
from zarr.core.buffer import default_buffer_prototype
from zarr.storage import LocalStore

from linumpy_gpu.errors import MissingDependencyError, StorePermissionError
from linumpy_gpu.io.files import replacing


def gds_mode() -> str:
    """'native GDS' or 'compatibility (POSIX reads, no GDS)', as kvikio will run."""
    try:
        import kvikio.defaults
    except ImportError as exc:
        raise MissingDependencyError(
            "GDSStore reads through kvikio, which is not installed: install linumpy_gpu "
            'with the cu13 or cu12 extra (python3 -m pip install -e ".[cu13]" in its folder)'
        ) from exc

    compat = (
        kvikio.defaults.is_compat_mode_preferred()
        if hasattr(kvikio.defaults, "is_compat_mode_preferred")
        else bool(kvikio.defaults.compat_mode())
    )
    return "compatibility (POSIX reads, no GDS)" if compat else "native GDS"


def _on_device(buffer_class: Any) -> bool:
    return buffer_class.__module__.rsplit(".", 1)[-1] == "gpu"


def _resolve_range(byte_range: Any, size: int) -> tuple[int, int]:
    if byte_range is None:
        return 0, size
    if isinstance(byte_range, RangeByteRequest):
        start = min(byte_range.start, size)
        return start, max(0, min(byte_range.end, size) - start)
    if isinstance(byte_range, OffsetByteRequest):
        start = min(byte_range.offset, size)
        return start, size - start
    if isinstance(byte_range, SuffixByteRequest):
        start = max(0, size - byte_range.suffix)
        return start, size - start
    raise TypeError(f"unsupported byte range {byte_range!r}")


class GDSStore(LocalStore):
    """A :class:`zarr.storage.LocalStore` whose reads and writes go through kvikio."""

    def __init__(self, root: str | os.PathLike[str], *, read_only: bool = False):
        super().__init__(os.fspath(root), read_only=read_only)
        self.mode = gds_mode()

    def __repr__(self) -> str:
        return f"GDSStore('{self.root}', mode={self.mode!r})"

    def _path(self, key: str) -> Path:
        return Path(self.root) / key

    def get_sync(self, key: str, *, prototype: Any = None, byte_range: Any = None) -> Any:
        """The bytes of ``key`` (a range of them with ``byte_range``), read through kvikio into a
        GPU or host buffer as ``prototype`` asks; None where the key does not exist."""
        import kvikio

        prototype = prototype or default_buffer_prototype()
        path = self._path(key)
        try:
            size = os.stat(path).st_size
        except (FileNotFoundError, NotADirectoryError):
            return None
        start, length = _resolve_range(byte_range, size)
        if _on_device(prototype.buffer):
            import cupy

            buf = cupy.empty(length, dtype=np.uint8)
        else:
            buf = np.empty(length, dtype=np.uint8)
        if length:
            with kvikio.CuFile(path, "r") as f:
                got = f.read(buf, length, start)
            if got != length:
                raise OSError(f"short read of '{path}': {got} of {length} bytes")
        return prototype.buffer.from_array_like(buf)

    async def get(self, key: str, prototype: Any = None, byte_range: Any = None) -> Any:
        return await asyncio.to_thread(
            self.get_sync, key, prototype=prototype, byte_range=byte_range
        )

    async def get_partial_values(
        self, prototype: Any, key_ranges: Iterable[tuple[str, Any]]
    ) -> list[Any]:
        return list(
            await asyncio.gather(*(self.get(key, prototype, rng) for key, rng in key_ranges))
        )

    def set_sync(self, key: str, value: Any) -> None:
        """Write ``value`` to ``key`` through kvikio, under a temporary name renamed into place."""
        import kvikio

        if self.read_only:
            raise StorePermissionError(f"'{self.root}' was opened read-only")
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        data = value.as_array_like()
        with replacing(str(path)) as tmp, kvikio.CuFile(tmp, "w") as f:
            f.write(data)

    async def set(self, key: str, value: Any) -> None:
        await asyncio.to_thread(self.set_sync, key, value)
