"""Small helpers shared by the image modules: store paths, region slices, byte counts."""

from __future__ import annotations


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
