"""How a batch of chunks splits into compressed streams and blocks built from them: what a
decoder that decodes every stream of a batch at once (nvCOMP) needs to know, read from the
chunks' own headers on the host, for all chunks of a batch at once."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

# how a block's decoded streams become its bytes
COPY, UNSHUFFLE, BITUNSHUFFLE = 0, 1, 2


class FrameBytes:
    """The bytes of many frames (chunks as stored), read with one numpy gather across all of
    them: a batch holds hundreds of frames, and numpy calls per frame cost more than the
    parse itself.

    The frames are seen through one read-only array spanning their addresses. Callers read
    only positions they have checked against each frame's size (:meth:`read` takes the
    rows to read and positions within each row's frame); bytes between frames are never
    read. The frames are kept alive as long as this object."""

    def __init__(self, frames: Sequence[Any]) -> None:
        self._views = [np.frombuffer(f, dtype=np.uint8) for f in frames]
        self.size = np.fromiter((v.size for v in self._views), dtype=np.int64, count=len(frames))
        address = np.fromiter(
            (v.__array_interface__["data"][0] for v in self._views),
            dtype=np.int64,
            count=len(frames),
        )
        lo = int(np.min(address[self.size > 0])) if (self.size > 0).any() else 0
        hi = int(np.max((address + self.size)[self.size > 0])) if (self.size > 0).any() else 0
        self._offset = address - lo
        self._space = np.asarray(_Span(lo, max(hi - lo, 0)))

    def read(self, rows: np.ndarray, positions: np.ndarray) -> np.ndarray:
        """Byte ``positions[r, k]`` of frame ``rows[r]`` (``positions`` shaped
        ``(len(rows), k)``); every position must lie inside its frame."""
        return self._space[self._offset[rows][:, None] + positions]

    def le32(self, rows: np.ndarray, positions: np.ndarray) -> np.ndarray:
        """The little-endian uint32 (as int64) at each of ``positions``, as in :meth:`read`."""
        b0, b1, b2, b3 = (self.read(rows, positions + k).astype(np.int64) for k in range(4))
        return b0 | (b1 << 8) | (b2 << 16) | (b3 << 24)


class _Span:
    """A read-only numpy view of ``size`` bytes at ``address`` (through the array interface,
    which makes no copy and reads nothing)."""

    def __init__(self, address: int, size: int) -> None:
        self.__array_interface__ = {
            "data": (address, True),
            "shape": (size,),
            "typestr": "|u1",
            "version": 3,
        }


@dataclass
class FrameGroup:
    """Frames of one structure: each holds the same streams and blocks, at its own
    offsets. Stream arrays are shaped ``(frames, streams)``; block arrays are shaped
    ``(blocks,)`` and hold for every frame of the group, ``block_first`` counting streams
    within the frame."""

    frames: np.ndarray
    start: np.ndarray
    stored: np.ndarray
    decoded: np.ndarray
    raw: np.ndarray
    codec: str
    block_first: np.ndarray
    block_split: np.ndarray
    block_offset: np.ndarray
    block_size: np.ndarray
    block_typesize: np.ndarray
    block_mode: np.ndarray


@dataclass
class StreamLayout:
    """The inner streams and blocks of a batch of chunks, for a decoder that decodes every
    stream at once and then builds every block at once (Blosc frames, LZ4 chunks).

    Streams (arrays indexed by stream, in frame order): the frame they belong to, where
    their bytes start in it, how many bytes are stored and how many they decode to, whether
    they are stored as is, and the inner codec's name. A block (arrays indexed by block)
    reads its ``typesize`` byte planes from streams ``first .. first + typesize`` when
    ``split``, else from one stream ``first`` (plane j at ``j * (size // typesize)``); it
    writes ``size`` bytes at ``offset`` in its frame's decoded chunk, as ``mode`` says
    (:data:`COPY`, :data:`UNSHUFFLE` or :data:`BITUNSHUFFLE`). Frames this layout cannot
    describe (another inner codec, a header that disagrees with the chunk) are listed in
    ``elsewhere`` with the reason, to be decoded by the CPU codec."""

    frame: np.ndarray
    start: np.ndarray
    stored: np.ndarray
    decoded: np.ndarray
    raw: np.ndarray
    codec: list[str]
    block_frame: np.ndarray
    block_first: np.ndarray
    block_split: np.ndarray
    block_offset: np.ndarray
    block_size: np.ndarray
    block_typesize: np.ndarray
    block_mode: np.ndarray
    elsewhere: dict[int, str] = field(default_factory=dict)

    @classmethod
    def of_groups(cls, groups: list[FrameGroup], elsewhere: dict[int, str]) -> StreamLayout:
        """The layout of a batch from its groups of like frames, streams and blocks put back
        in frame order."""
        parts: dict[str, list[np.ndarray]] = {
            k: [] for k in ("frame", "start", "stored", "decoded", "raw", "codec")
        }
        blocks: dict[str, list[np.ndarray]] = {
            k: [] for k in ("frame", "first", "split", "offset", "size", "typesize", "mode")
        }
        n_streams = 0
        for g in groups:
            m, per_frame = g.start.shape
            if m == 0:
                continue
            parts["frame"].append(np.repeat(g.frames, per_frame))
            for key in ("start", "stored", "decoded", "raw"):
                parts[key].append(np.broadcast_to(getattr(g, key), (m, per_frame)).ravel())
            parts["codec"].append(np.full(m * per_frame, g.codec, dtype=object))
            n_blocks = g.block_first.size
            blocks["frame"].append(np.repeat(g.frames, n_blocks))
            first = n_streams + per_frame * np.arange(m, dtype=np.int64)[:, None] + g.block_first
            blocks["first"].append(first.ravel())
            for key in ("split", "offset", "size", "typesize", "mode"):
                blocks[key].append(np.tile(getattr(g, "block_" + key), m))
            n_streams += m * per_frame

        def cat(values: list[np.ndarray], dtype: Any) -> np.ndarray:
            return np.concatenate(values).astype(dtype) if values else np.zeros(0, dtype=dtype)

        frame = cat(parts["frame"], np.int64)
        block_frame = cat(blocks["frame"], np.int64)
        block_first = cat(blocks["first"], np.int64)
        order = np.argsort(frame, kind="stable")
        block_order = np.argsort(block_frame, kind="stable")
        moved = np.empty_like(order)
        moved[order] = np.arange(order.size)  # where each stream goes
        codec = cat(parts["codec"], object)[order].tolist()
        return cls(
            frame=frame[order],
            start=cat(parts["start"], np.int64)[order],
            stored=cat(parts["stored"], np.int64)[order],
            decoded=cat(parts["decoded"], np.int64)[order],
            raw=cat(parts["raw"], bool)[order],
            codec=codec,
            block_frame=block_frame[block_order],
            block_first=moved[block_first][block_order] if block_first.size else block_first,
            block_split=cat(blocks["split"], bool)[block_order],
            block_offset=cat(blocks["offset"], np.int64)[block_order],
            block_size=cat(blocks["size"], np.int64)[block_order],
            block_typesize=cat(blocks["typesize"], np.int64)[block_order],
            block_mode=cat(blocks["mode"], np.int64)[block_order],
            elsewhere=elsewhere,
        )


def refuse(
    elsewhere: dict[int, str], rows: np.ndarray, mask: np.ndarray, reason: Callable[[int], str]
) -> np.ndarray:
    """Record ``reason(r)`` in ``elsewhere`` for frame ``rows[r]`` wherever ``mask[r]``
    holds; the mask of the rows kept."""
    for r in np.flatnonzero(mask):
        elsewhere[int(rows[r])] = reason(int(r))
    return ~mask


def one_stream_group(
    rows: np.ndarray, start: int, stored: np.ndarray, nbytes: int, raw: bool, codec: str
) -> FrameGroup:
    """Frames ``rows`` that each hold one stream at ``start`` (``stored`` bytes, one per
    row) decoding to the whole chunk of ``nbytes``."""
    one = np.ones(1, dtype=np.int64)
    return FrameGroup(
        frames=rows,
        start=np.full((rows.size, 1), start, dtype=np.int64),
        stored=np.asarray(stored, dtype=np.int64).reshape(-1, 1),
        decoded=np.full((1, 1), nbytes, dtype=np.int64),
        raw=np.full((1, 1), raw),
        codec=codec,
        block_first=0 * one,
        block_split=np.zeros(1, dtype=bool),
        block_offset=0 * one,
        block_size=nbytes * one,
        block_typesize=one,
        block_mode=COPY * one,
    )
