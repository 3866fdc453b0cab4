"""The bytes-to-bytes stage of a chunk's codec chain, described backend-neutrally.

The engine needs to know *what* each stage is (so a GPU backend can swap zstd for nvCOMP)
and *how to undo it on the CPU* (numcodecs, the reference implementations zarr uses too).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass(frozen=True)
class ByteCodec:
    """One bytes-to-bytes codec. ``name`` is 'zstd', 'blosc', 'gzip', 'zlib', 'lz4',
    'crc32c' or a numcodecs codec id; ``cpu`` decodes it with numcodecs."""

    name: str
    config: dict[str, Any] = field(default_factory=dict, compare=False)
    cpu: Any = field(default=None, compare=False, repr=False)

    def describe(self) -> str:
        shown = {k: v for k, v in self.config.items() if k not in ("id", "name")}
        args = ", ".join(f"{k}={v}" for k, v in shown.items())
        return f"{self.name}({args})" if args else self.name


class ChecksumMismatch(ValueError):
    pass


def crc32c_strip(data: memoryview | bytes) -> memoryview:
    """Verify and remove the little-endian CRC32C that zarr's ``crc32c`` codec appends."""
    import google_crc32c  # zarr-python's own dependency for its crc32c codec

    view = memoryview(data)
    if len(view) < 4:
        raise ChecksumMismatch("shorter than its 4-byte crc32c checksum")
    body, stored = view[:-4], int.from_bytes(view[-4:], "little")
    actual = google_crc32c.value(np.frombuffer(body, dtype=np.uint8))
    if actual != stored:
        raise ChecksumMismatch(f"crc32c mismatch (stored {stored:#010x}, computed {actual:#010x})")
    return body


_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


def zstd_content_size(frame: memoryview | bytes) -> int | None:
    """The decoded size a zstd frame header declares, or None (no size field, or not a
    zstd frame header at all)."""
    view = memoryview(frame).cast("B")
    if len(view) < 6 or bytes(view[:4]) != _ZSTD_MAGIC:
        return None
    descriptor = view[4]
    size_flag, single_segment, dict_flag = descriptor >> 6, (descriptor >> 5) & 1, descriptor & 3
    start = 5 + (0 if single_segment else 1) + (0, 1, 2, 4)[dict_flag]
    width = ((1 if single_segment else 0), 2, 4, 8)[size_flag]
    if width == 0 or len(view) < start + width:
        return None
    value = int.from_bytes(view[start : start + width], "little")
    return value + 256 if width == 2 else value


def zstd_decode_into(frame: memoryview | bytes, out: np.ndarray, codec: Any = None) -> str | None:
    """Decode one zstd frame into ``out`` (uint8, exactly the expected size) on the CPU.

    Returns None, or why the frame does not decode to exactly ``out.size`` bytes (numcodecs
    would silently decode a smaller frame into the front of a larger buffer)."""
    import numcodecs

    codec = codec or numcodecs.Zstd()
    declared = zstd_content_size(frame)
    try:
        if declared == out.size:
            codec.decode(frame, out=out)
            return None
        if declared is not None:
            return f"the zstd frame declares {declared} bytes, expected {out.size}"
        decoded = np.frombuffer(codec.decode(frame), dtype=np.uint8)
    except Exception as exc:  # numcodecs raises RuntimeError/ValueError with zstd's reason
        return f"zstd (CPU): {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    if decoded.size != out.size:
        return f"zstd (CPU) decoded {decoded.size} bytes, expected {out.size}"
    out[...] = decoded
    return None


def cpu_decode_bytes(data: memoryview | bytes, codecs: tuple[ByteCodec, ...]) -> memoryview:
    """Undo ``codecs`` (given in encode order) on the CPU."""
    buf: Any = memoryview(data)
    for codec in reversed(codecs):
        if codec.name == "crc32c":
            buf = crc32c_strip(buf)
        else:
            buf = codec.cpu.decode(buf)
    if isinstance(buf, np.ndarray):
        return memoryview(np.ascontiguousarray(buf).view(np.uint8).reshape(-1))
    return memoryview(buf).cast("B")


def from_v3_codec(codec: Any) -> ByteCodec | None:
    """Translate a zarr v3 bytes-to-bytes codec object; None if we do not know it."""
    import numcodecs

    cls = type(codec).__name__
    if cls == "ZstdCodec":
        return ByteCodec(
            "zstd",
            {"level": codec.level, "checksum": codec.checksum},
            numcodecs.Zstd(level=codec.level),
        )
    if cls == "GzipCodec":
        return ByteCodec("gzip", {"level": codec.level}, numcodecs.GZip(level=codec.level))
    if cls == "BloscCodec":
        return ByteCodec("blosc", _blosc_config(codec), numcodecs.Blosc())
    if cls == "Crc32cCodec":
        return ByteCodec("crc32c")
    # numcodecs.zarr3 wrappers carry a numcodecs codec instance
    inner = getattr(codec, "_codec", None)
    if inner is not None and hasattr(inner, "decode"):
        return from_numcodecs(inner)
    return None


def from_numcodecs(codec: Any) -> ByteCodec:
    """Translate a numcodecs compressor (zarr v2 ``compressor``)."""
    cid = codec.codec_id
    config = codec.get_config()
    if cid == "blosc":
        config = {
            "cname": config.get("cname"),
            "clevel": config.get("clevel"),
            "shuffle": {0: "noshuffle", 1: "shuffle", 2: "bitshuffle", -1: "auto"}.get(
                config.get("shuffle"), config.get("shuffle")
            ),
        }
    return ByteCodec(cid, config, codec)


def _blosc_config(codec: Any) -> dict[str, Any]:
    def plain(v: Any) -> Any:
        return getattr(v, "value", v)

    return {"cname": plain(codec.cname), "clevel": codec.clevel, "shuffle": plain(codec.shuffle)}
