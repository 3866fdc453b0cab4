"""The bytes-to-bytes codecs of stored chunks: what each one is, and how to undo it on the
CPU without trusting the stored bytes.

Each codec has a module here (:mod:`.zstd`, :mod:`.blosc`, :mod:`.deflate`, :mod:`.lz4`,
:mod:`.crc32c`) whose ``decode(data, limit)`` refuses a chunk that would decode to more than
``limit`` bytes before allocating for it (a damaged or hostile header cannot make a read
allocate gigabytes). Codecs without a module are decoded by numcodecs, as zarr-python does,
and their output is checked once decoded. A GPU backend looks at :attr:`ByteCodec.name` to
route the codecs it decodes itself.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from linumpy_gpu.codecs import blosc, crc32c, deflate, lz4, zstd
from linumpy_gpu.errors import CodecError

__all__ = [
    "ByteCodec",
    "CodecError",
    "decode_chain",
    "decode_chain_into",
    "decodes_in_place",
    "from_numcodecs",
    "from_v3_codec",
]

# codec name -> bounded CPU decoder (data, limit, config) -> bytes-like
_BOUNDED: dict[str, Callable[[memoryview, int, dict[str, Any]], Any]] = {
    "zstd": lambda data, limit, config: zstd.decode(data, limit),
    "blosc": lambda data, limit, config: blosc.decode(data, limit),
    "gzip": lambda data, limit, config: deflate.decode(data, limit, "gzip"),
    "zlib": lambda data, limit, config: deflate.decode(data, limit, "zlib"),
    "lz4": lambda data, limit, config: lz4.decode(data, limit),
    "crc32c": lambda data, limit, config: crc32c.strip(data, config.get("location", "end")),
}


@dataclass(frozen=True)
class ByteCodec:
    """One bytes-to-bytes codec. ``name`` is 'zstd', 'blosc', 'gzip', 'zlib', 'lz4',
    'crc32c' or another numcodecs codec id; ``cpu`` is a numcodecs codec that decodes it
    (for codecs without a module here)."""

    name: str
    config: dict[str, Any] = field(default_factory=dict, compare=False)
    cpu: Any = field(default=None, compare=False, repr=False)

    def describe(self) -> str:
        """The codec and its settings, as a short text (``zstd(level=3, checksum=True)``)."""
        shown = {k: v for k, v in self.config.items() if k not in ("id", "name")}
        args = ", ".join(f"{k}={v}" for k, v in shown.items())
        return f"{self.name}({args})" if args else self.name


def decode_chain(data: Any, codecs: Sequence[ByteCodec], nbytes: int) -> memoryview:
    """Undo ``codecs`` (given in encode order) on the CPU: the ``nbytes`` decoded bytes of
    a chunk. Raises :class:`CodecError` saying why the data does not decode to exactly that
    many bytes."""
    buf: Any = memoryview(data).cast("B")
    for k, codec in enumerate(reversed(codecs)):
        last = k == len(codecs) - 1
        # only the last step's size is known; the steps before it produce at most what a
        # compressor can expand incompressible input to
        limit = nbytes if last else nbytes + nbytes // 8 + (64 << 10)
        bounded = _BOUNDED.get(codec.name)
        if bounded is not None:
            buf = bounded(buf, limit, codec.config)
        else:
            try:
                buf = codec.cpu.decode(buf)
            except Exception as exc:  # numcodecs raises RuntimeError, ValueError, ...
                raise CodecError(f"{codec.name}: {type(exc).__name__}: {_first_line(exc)}") from exc
        buf = _as_bytes_view(buf)
        if len(buf) > limit:
            raise CodecError(f"{codec.name} decoded to {len(buf)} bytes, more than {limit}")
    if len(buf) != nbytes:
        raise CodecError(f"decoded to {len(buf)} bytes, expected {nbytes}")
    return buf


# codec name -> decoder writing into a buffer of the decoded size: (data, out) -> None or why not
_INTO: dict[str, Callable[[Any, np.ndarray], str | None]] = {
    "zstd": zstd.decode_into,
    "gzip": lambda data, out: deflate.decode_into(data, out, "gzip"),
    "zlib": lambda data, out: deflate.decode_into(data, out, "zlib"),
}


def decodes_in_place(codecs: Sequence[ByteCodec]) -> bool:
    """Whether :func:`decode_chain_into` decodes ``codecs`` straight into its buffer (no
    buffer of its own and no copy)."""
    return len(codecs) == 1 and codecs[0].name in _INTO


def decode_chain_into(data: Any, codecs: Sequence[ByteCodec], out: np.ndarray) -> str | None:
    """Undo ``codecs`` on the CPU into ``out`` (uint8, exactly the decoded size): None, or
    why the data does not decode to exactly ``out.size`` bytes. A lone zstd, gzip or zlib
    codec decodes in place; other chains decode, then copy."""
    into = _INTO.get(codecs[0].name) if len(codecs) == 1 else None
    if into is not None:
        return into(data, out)
    try:
        out[...] = np.frombuffer(decode_chain(data, codecs, out.size), dtype=np.uint8)
    except CodecError as exc:
        return str(exc)
    return None


def _as_bytes_view(buf: Any) -> memoryview:
    if isinstance(buf, np.ndarray):
        flat: Any = np.ascontiguousarray(buf).view(np.uint8).reshape(-1)
        return memoryview(flat)
    return memoryview(buf).cast("B")


def _first_line(exc: BaseException) -> str:
    text = str(exc)
    return text.splitlines()[0] if text else type(exc).__name__


def from_v3_codec(codec: Any) -> ByteCodec | None:
    """Translate a zarr v3 bytes-to-bytes codec object; None if it is not one we know."""
    import numcodecs

    cls = type(codec).__name__
    if cls == "ZstdCodec":
        return ByteCodec("zstd", {"level": codec.level, "checksum": codec.checksum})
    if cls == "GzipCodec":
        return ByteCodec("gzip", {"level": codec.level})
    if cls == "BloscCodec":
        return ByteCodec("blosc", blosc.config_of_v3(codec), numcodecs.Blosc())
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
        config = blosc.config_of_numcodecs(config)
    if cid == "zstd" and not config.get("checksum", False):
        # numcodecs reports checksum=False for zarr v2 metadata that does not say; the
        # frames themselves say whether they carry one
        config = {k: v for k, v in config.items() if k != "checksum"}
    return ByteCodec(cid, config, codec)
