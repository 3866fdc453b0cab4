"""Small helpers shared by the image modules: store paths, region slices, byte counts."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from linumpy_gpu.errors import IncompleteStoreError, InvalidMetadataError
from linumpy_gpu.io.files import INCOMPLETE_MARKER
from linumpy_gpu.io.stores import translated_errors


def join(*parts: str) -> str:
    """Store path parts joined with ``/``."""
    return "/".join(p.rstrip("/") for p in parts if p)


def format_bytes(n: float) -> str:
    """``n`` bytes as a short text (``12.0 MiB``)."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


def dtype_text(level: Any) -> str:
    """The level's dtype for summaries, with its stored byte order where that is not this
    machine's (reads return native order)."""
    stored = level.stored_dtype
    if stored.isnative or stored.itemsize == 1:
        return str(level.dtype)
    order = "big" if stored.byteorder == ">" else "little"
    return f"{level.dtype} (stored {order}-endian)"


def refuse_unfinished(attrs: Mapping[str, Any], where: str) -> None:
    """Refuse a group a linumpy_gpu write marked as in progress (interrupted before its
    metadata was written, or while the store it replaces was being deleted): its chunks
    may be missing and would read as the fill value."""
    mark = attrs.get(INCOMPLETE_MARKER)
    if isinstance(mark, dict) and mark.get("write_in_progress"):
        raise IncompleteStoreError(
            where,
            "attributes",
            "a finished write (a linumpy_gpu write of this store was "
            "interrupted before its metadata was written; rewrite it with overwrite=True)",
        )


def child_group(group: Any, path: str, where: str) -> Any | None:
    """The zarr group at ``path`` below ``group`` (``where``: its location, for messages),
    or None where nothing is there; metadata zarr refuses and an array in its place are
    :class:`InvalidMetadataError`."""
    with translated_errors(where, metadata=True):
        try:
            child = group[path]
        except KeyError:
            return None
    if not hasattr(child, "attrs") or hasattr(child, "dtype"):
        raise InvalidMetadataError(where, "path", "a zarr group", "an array")
    return child
