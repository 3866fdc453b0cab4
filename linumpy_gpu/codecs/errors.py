"""The one failure a codec reports: the stored bytes are not a valid chunk."""

from __future__ import annotations


class CodecError(ValueError):
    """Stored bytes that do not decode to the chunk they should be; the message says why.
    The engine reports it as :class:`~linumpy_gpu.ChunkDecodeError` with the chunk's key."""
