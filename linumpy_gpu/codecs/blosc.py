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

from collections.abc import Callable
from typing import Any

import numpy as np

from linumpy_gpu.codecs.layout import (
    BITUNSHUFFLE,
    COPY,
    UNSHUFFLE,
    FrameBytes,
    FrameGroup,
    StreamLayout,
    one_stream_group,
    refuse,
)
from linumpy_gpu.errors import CodecError

HEADER_BYTES = 16
_SHUFFLE_NAMES = {0: "noshuffle", 1: "shuffle", 2: "bitshuffle", -1: "auto"}

FORMAT_VERSION = 2  # c-blosc 1.x
INNER_FORMAT_VERSION = 1  # of every inner codec c-blosc 1.x writes
RESERVED_FLAG = 0x08  # c-blosc refuses frames with it set ("flags from the future")
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
    given this layout reads and writes only inside the frames and the chunks.

    Frames are parsed together: their headers at once, then each group of frames that
    share flags, type size and block size (all frames of a chunk grid, as a rule) at once."""
    data = FrameBytes(frames)
    elsewhere: dict[int, str] = {}
    rows, size = np.arange(len(frames)), data.size
    keep = refuse(
        elsewhere,
        rows,
        size < HEADER_BYTES,
        lambda r: f"blosc: {size[r]} bytes, shorter than its 16-byte header",
    )
    rows, size = rows[keep], size[keep]
    head = data.read(rows, np.broadcast_to(np.arange(HEADER_BYTES), (rows.size, HEADER_BYTES)))
    head = head.astype(np.int64)
    version, inner_version, flags, typesize = head[:, 0], head[:, 1], head[:, 2], head[:, 3]
    declared, blocksize, cbytes = (head[:, k : k + 4] @ _LE32 for k in (4, 8, 12))
    # what c-blosc refuses, refused here too: the GPU must not decode what the CPU codec
    # calls damaged (refused frames go to the CPU codec, which says why)
    checks: list[tuple[np.ndarray, Callable[[int], str]]] = [
        (version != FORMAT_VERSION, lambda r: f"blosc: format version {version[r]}"),
        (
            inner_version != INNER_FORMAT_VERSION,
            lambda r: f"blosc: inner codec format version {inner_version[r]}",
        ),
        ((flags & RESERVED_FLAG) != 0, lambda r: f"blosc: unknown flags {flags[r]:#04x}"),
        (
            blocksize > nbytes,
            lambda r: f"blosc: blocks of {blocksize[r]} bytes in a chunk of {nbytes}",
        ),
        (
            declared != nbytes,
            lambda r: f"blosc: the header declares {declared[r]} bytes, the chunk holds {nbytes}",
        ),
        (
            cbytes != size,
            lambda r: f"blosc: the header says {cbytes[r]} stored bytes, the chunk has {size[r]}",
        ),
        (
            (typesize < 1) | (blocksize < 1) | (nbytes < 1),
            lambda r: f"blosc: typesize {typesize[r]}, blocksize {blocksize[r]}",
        ),
    ]
    bad = np.zeros(rows.size, dtype=bool)
    for mask, reason in checks:
        bad |= ~refuse(elsewhere, rows, mask & ~bad, reason)
    rows, flags, typesize, blocksize, cbytes = (
        a[~bad] for a in (rows, flags, typesize, blocksize, cbytes)
    )
    kinds, kind_of = np.unique(
        np.stack([flags, typesize, blocksize], axis=1), axis=0, return_inverse=True
    )
    groups = []
    for k, (f, t, b) in enumerate(kinds.tolist()):
        mine = kind_of.reshape(-1) == k
        group = _group_layout(data, rows[mine], cbytes[mine], (f, t, b), nbytes, codecs, elsewhere)
        if group is not None:
            groups.append(group)
    return StreamLayout.of_groups(groups, elsewhere)


_LE32 = np.array([1, 1 << 8, 1 << 16, 1 << 24], dtype=np.int64)


def _group_layout(
    data: FrameBytes,
    rows: np.ndarray,
    cbytes: np.ndarray,
    kind: tuple[int, int, int],
    nbytes: int,
    codecs: tuple[str, ...],
    elsewhere: dict[int, str],
) -> FrameGroup | None:
    """The streams and blocks of frames ``rows``, which share flags, type size and block
    size (``kind``) and whose headers are checked; frames found damaged go to
    ``elsewhere``."""
    flags, typesize, blocksize = kind
    name = INNER_CODECS.get(flags >> 5, f"codec {flags >> 5}")
    if flags & MEMCPYED:
        keep = refuse(
            elsewhere,
            rows,
            cbytes != nbytes + HEADER_BYTES,
            lambda r: f"blosc: stored as is in {cbytes[r]} bytes, but holds {nbytes}",
        )
        return one_stream_group(
            rows[keep], HEADER_BYTES, np.full(int(keep.sum()), nbytes), nbytes, True, name
        )
    n_blocks = -(-nbytes // blocksize)
    table_end = HEADER_BYTES + 4 * n_blocks
    split_all = (
        not flags & DONT_SPLIT
        and typesize <= MAX_SPLITS
        and blocksize // typesize >= MIN_SPLIT_BYTES
    )
    everyone = np.ones(rows.size, dtype=bool)
    if name not in codecs:
        refuse(elsewhere, rows, everyone, lambda r: f"blosc: inner codec {name}")
        return None
    if split_all and blocksize % typesize:
        refuse(
            elsewhere,
            rows,
            everyone,
            lambda r: f"blosc: blocks of {blocksize} bytes split in {typesize} streams",
        )
        return None
    keep = refuse(
        elsewhere,
        rows,
        cbytes < table_end,
        lambda r: f"blosc: {n_blocks} block offsets do not fit in {cbytes[r]} bytes",
    )
    rows, cbytes = rows[keep], cbytes[keep]
    if not rows.size:
        return None  # every frame refused: nothing per block to lay out
    sizes = np.full(n_blocks, blocksize, dtype=np.int64)
    if nbytes % blocksize:
        sizes[-1] = nbytes % blocksize  # c-blosc never splits this last, shorter block
    splits = np.full(n_blocks, typesize if split_all else 1, dtype=np.int64)
    splits[sizes != blocksize] = 1
    pos = data.le32(rows, HEADER_BYTES + 4 * np.arange(n_blocks, dtype=np.int64)[None, :])
    starts = np.zeros((rows.size, n_blocks, int(np.max(splits))), dtype=np.int64)
    stored = np.zeros_like(starts)
    bad = np.zeros(rows.size, dtype=bool)
    limit = cbytes[:, None]
    for j in range(int(np.max(splits))):  # stream j of every block of every frame at once
        cols = np.flatnonzero(splits > j)
        at = pos[:, cols]
        outside = ((at < table_end) | (at > limit - 4)).any(axis=1) & ~bad
        bad |= ~refuse(
            elsewhere, rows, outside, lambda r: "blosc: a stream starts outside the frame"
        )
        at = np.where(bad[:, None], 0, at)  # a refused frame's reads stay at its header
        size = data.le32(rows, at)
        past = (size > limit - at - 4).any(axis=1) & ~bad
        bad |= ~refuse(
            elsewhere, rows, past, lambda r: "blosc: a stream runs past the end of the frame"
        )
        size = np.where(bad[:, None], 0, size)
        starts[:, cols, j] = at + 4
        stored[:, cols, j] = size
        pos[:, cols] = at + 4 + size
    streams = np.flatnonzero((np.arange(starts.shape[2]) < splits[:, None]).reshape(-1))
    decoded = np.repeat(sizes // splits, splits)[None, :]
    stored = stored.reshape(rows.size, -1)[~bad][:, streams]
    modes = np.full(n_blocks, _block_mode(flags, typesize, blocksize), dtype=np.int64)
    modes[-1] = _block_mode(flags, typesize, int(sizes[-1]))
    return FrameGroup(
        frames=rows[~bad],
        start=starts.reshape(rows.size, -1)[~bad][:, streams],
        stored=stored,
        decoded=decoded,
        raw=stored == decoded,
        codec=name,
        block_first=np.cumsum(splits) - splits,
        block_split=splits > 1,
        block_offset=np.arange(n_blocks, dtype=np.int64) * blocksize,
        block_size=sizes,
        block_typesize=np.full(n_blocks, typesize, dtype=np.int64),
        block_mode=modes,
    )
