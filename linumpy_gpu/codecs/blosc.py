"""Blosc (version 1 frames, as numcodecs and c-blosc write them): header checks, then
numcodecs' decoder.

The 16-byte header: version, versionlz, flags, typesize, then little-endian uint32s
nbytes (decoded size), blocksize and cbytes (the frame's stored size).
"""

from __future__ import annotations

from typing import Any

from linumpy_gpu.errors import CodecError

HEADER_BYTES = 16
_SHUFFLE_NAMES = {0: "noshuffle", 1: "shuffle", 2: "bitshuffle", -1: "auto"}


def header(data: Any) -> tuple[int, int, int, int, int]:
    """(flags, typesize, nbytes, blocksize, cbytes) of a Blosc frame."""
    view = memoryview(data).cast("B")
    if len(view) < HEADER_BYTES:
        raise CodecError(f"blosc: {len(view)} bytes, shorter than its 16-byte header")
    flags, typesize = view[2], view[3]
    nbytes, blocksize, cbytes = (int.from_bytes(view[k : k + 4], "little") for k in (4, 8, 12))
    return flags, typesize, nbytes, blocksize, cbytes


def decode(data: Any, limit: int) -> Any:
    """Decode with numcodecs once the header promises at most ``limit`` bytes and its
    stored size matches the bytes there are."""
    import numcodecs

    _, _, nbytes, _, cbytes = header(data)
    if nbytes > limit:
        raise CodecError(
            f"blosc: the header declares {nbytes} bytes, more than the {limit} it holds"
        )
    if cbytes != len(memoryview(data)):
        raise CodecError(f"blosc: the header says {cbytes} stored bytes, the chunk has {len(data)}")
    try:
        return numcodecs.Blosc().decode(data)
    except Exception as exc:  # numcodecs raises RuntimeError with Blosc's reason
        raise CodecError(f"blosc: {type(exc).__name__}: {exc}") from exc


def config_of_v3(codec: Any) -> dict[str, Any]:
    """cname, clevel and shuffle of zarr's v3 ``BloscCodec``, as plain values."""

    def plain(v: Any) -> Any:
        return getattr(v, "value", v)

    return {"cname": plain(codec.cname), "clevel": codec.clevel, "shuffle": plain(codec.shuffle)}


def config_of_numcodecs(config: dict[str, Any]) -> dict[str, Any]:
    """cname, clevel and shuffle (by name) of a numcodecs Blosc configuration."""
    shuffle = config.get("shuffle")
    return {
        "cname": config.get("cname"),
        "clevel": config.get("clevel"),
        "shuffle": _SHUFFLE_NAMES.get(shuffle, shuffle) if isinstance(shuffle, int) else shuffle,
    }
