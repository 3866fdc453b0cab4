"""zarr's ``crc32c`` codec: a little-endian CRC32C of the bytes, after or before them."""

from __future__ import annotations

from typing import Any

import numpy as np

from linumpy_gpu.errors import CodecError


def strip(data: Any, location: str = "end") -> memoryview:
    """Verify and remove the CRC32C that the ``crc32c`` codec adds: after the bytes (zarr,
    and numcodecs by default) or before them (numcodecs' ``location="start"``)."""
    import google_crc32c  # zarr-python's own dependency for its crc32c codec

    view = memoryview(data).cast("B")
    if len(view) < 4:
        raise CodecError("shorter than its 4-byte crc32c checksum")
    if location == "start":
        body, stored = view[4:], int.from_bytes(view[:4], "little")
    else:
        body, stored = view[:-4], int.from_bytes(view[-4:], "little")
    actual = google_crc32c.value(np.frombuffer(body, dtype=np.uint8))
    if actual != stored:
        raise CodecError(f"crc32c mismatch (stored {stored:#010x}, computed {actual:#010x})")
    return body
