"""Small helpers shared by the image modules: store paths, region slices, byte counts."""

from __future__ import annotations

from typing import Any


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
