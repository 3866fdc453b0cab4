"""Blosc (version 1 frames, as numcodecs and c-blosc write them): header checks, then
numcodecs' decoder; and the layout of a frame's inner streams for decoders that undo them
elsewhere (the GPU).

The 16-byte header: format version, versionlz, flags, typesize, then little-endian uint32s
nbytes (decoded size), blocksize and cbytes (the frame's stored size). Flags: bit 0 byte
shuffle, bit 1 stored uncompressed ("memcpyed"), bit 2 bit shuffle, bit 4 blocks not split,
bits 5-7 the inner codec. Unless memcpyed, an int32 start offset per block follows; a block
holds one stream, or ``typesize`` streams (one per byte of the type) when it is split, each
an int32 compressed size and that many bytes (stored as is when the size equals the
stream's decoded size). Decoded streams are concatenated, then unshuffled.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from linumpy_gpu.codecs.layout import BITUNSHUFFLE, COPY, UNSHUFFLE, StreamLayout
from linumpy_gpu.errors import CodecError

HEADER_BYTES = 16
_SHUFFLE_NAMES = {0: "noshuffle", 1: "shuffle", 2: "bitshuffle", -1: "auto"}

FORMAT_VERSION = 2  # c-blosc 1.x
BYTE_SHUFFLE, MEMCPYED, BIT_SHUFFLE, DONT_SPLIT = 0x01, 0x02, 0x04, 0x10
INNER_CODECS = {0: "blosclz", 1: "lz4", 2: "snappy", 3: "zlib", 4: "zstd"}
MAX_SPLITS = 16  # c-blosc splits blocks of types up to this size...
MIN_SPLIT_BYTES = 128  # ...whose streams hold at least this many bytes


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


def _le32(buf: np.ndarray, at: np.ndarray) -> np.ndarray:
    """Little-endian uint32s at byte positions ``at`` of ``buf`` (as int64)."""
    return (
        buf[at].astype(np.int64)
        | (buf[at + 1].astype(np.int64) << 8)
        | (buf[at + 2].astype(np.int64) << 16)
        | (buf[at + 3].astype(np.int64) << 24)
    )


def _block_mode(flags: int, typesize: int, size: int) -> int:
    """How c-blosc undoes the shuffle of a block of ``size`` bytes."""
    if flags & BYTE_SHUFFLE and typesize > 1:
        return UNSHUFFLE
    if flags & BIT_SHUFFLE and size >= typesize and (size // typesize) % 8 == 0:
        return BITUNSHUFFLE
    return COPY  # no shuffle, or a bit shuffle c-blosc skipped (a partial byte of bits)


def stream_layout(frames: list[Any], nbytes: int, codecs: tuple[str, ...]) -> StreamLayout:
    """The layout of Blosc ``frames`` (each must decode to ``nbytes``) whose inner codec is
    one of ``codecs``; every offset and size is checked against the frame, so a decoder
    given this layout reads and writes only inside the frames and the chunks."""
    return StreamLayout.of_frames(frames, lambda buf: _frame_layout(buf, nbytes, codecs))


def _frame_layout(buf: np.ndarray, nbytes: int, codecs: tuple[str, ...]) -> tuple[Any, Any]:
    """(streams, blocks) of one frame, as in :class:`StreamLayout`; CodecError when the frame
    is not one this layout can describe."""
    if buf.size < HEADER_BYTES:
        raise CodecError(f"blosc: {buf.size} bytes, shorter than its 16-byte header")
    version, flags, typesize = int(buf[0]), int(buf[2]), int(buf[3])
    declared, blocksize, cbytes = (int(_le32(buf, np.array([k]))[0]) for k in (4, 8, 12))
    name = INNER_CODECS.get(flags >> 5, f"codec {flags >> 5}")
    if version != FORMAT_VERSION:
        raise CodecError(f"blosc: format version {version}")
    if declared != nbytes:
        raise CodecError(f"blosc: the header declares {declared} bytes, the chunk holds {nbytes}")
    if cbytes != buf.size:
        raise CodecError(f"blosc: the header says {cbytes} stored bytes, the chunk has {buf.size}")
    if typesize < 1 or blocksize < 1 or nbytes < 1:
        raise CodecError(f"blosc: typesize {typesize}, blocksize {blocksize}")
    if flags & MEMCPYED:
        if cbytes != nbytes + HEADER_BYTES:
            raise CodecError(f"blosc: stored as is in {cbytes} bytes, but holds {nbytes}")
        one = np.ones(1, dtype=np.int64)
        streams = (one * HEADER_BYTES, one * nbytes, one * nbytes, np.ones(1, bool), name)
        return streams, (0 * one, np.zeros(1, bool), 0 * one, one * nbytes, one, 0 * one)
    if name not in codecs:
        raise CodecError(f"blosc: inner codec {name}")
    n_blocks = -(-nbytes // blocksize)
    table_end = HEADER_BYTES + 4 * n_blocks
    if table_end > cbytes:
        raise CodecError(f"blosc: {n_blocks} block offsets do not fit in {cbytes} bytes")
    starts = _le32(buf, HEADER_BYTES + 4 * np.arange(n_blocks, dtype=np.int64))
    sizes = np.full(n_blocks, blocksize, dtype=np.int64)
    leftover = nbytes % blocksize
    if leftover:
        sizes[-1] = leftover
    split_all = (
        not flags & DONT_SPLIT
        and typesize <= MAX_SPLITS
        and blocksize // typesize >= MIN_SPLIT_BYTES
    )
    if split_all and blocksize % typesize:
        raise CodecError(f"blosc: blocks of {blocksize} bytes split in {typesize} streams")
    regular = n_blocks - (1 if leftover else 0)
    groups = [(np.arange(regular), typesize if split_all else 1)]
    if leftover:
        groups.append((np.array([n_blocks - 1]), 1))  # c-blosc never splits the last block
    s_start, s_stored, s_decoded, s_block = [], [], [], []
    for idx, n_split in groups:
        if idx.size == 0:
            continue
        pos = starts[idx].copy()
        decoded = sizes[idx] // n_split
        starts_of = np.empty((idx.size, n_split), np.int64)
        stored_of = np.empty((idx.size, n_split), np.int64)
        for j in range(n_split):
            if (pos < table_end).any() or (pos > cbytes - 4).any():
                raise CodecError("blosc: a stream starts outside the frame")
            csize = _le32(buf, pos)
            if (csize > cbytes - pos - 4).any():
                raise CodecError("blosc: a stream runs past the end of the frame")
            starts_of[:, j] = pos + 4
            stored_of[:, j] = csize
            pos = pos + 4 + csize
        s_start.append(starts_of.ravel())
        s_stored.append(stored_of.ravel())
        s_decoded.append(np.repeat(decoded, n_split))
        s_block.append((idx, n_split))
    start = np.concatenate(s_start)
    stored = np.concatenate(s_stored)
    decoded = np.concatenate(s_decoded)
    raw = stored == decoded
    first = np.empty(n_blocks, dtype=np.int64)
    split = np.zeros(n_blocks, dtype=bool)
    k = 0
    for idx, n_split in s_block:
        first[idx] = k + np.arange(idx.size) * n_split
        split[idx] = n_split > 1
        k += idx.size * n_split
    modes = np.full(n_blocks, _block_mode(flags, typesize, blocksize), dtype=np.int64)
    modes[-1] = _block_mode(flags, typesize, int(sizes[-1]))
    blocks = (
        first,
        split,
        np.arange(n_blocks, dtype=np.int64) * blocksize,
        sizes,
        np.full(n_blocks, typesize, dtype=np.int64),
        modes,
    )
    return (start, stored, decoded, raw, name), blocks
