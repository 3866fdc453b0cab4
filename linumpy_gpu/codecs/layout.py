"""How a batch of chunks splits into compressed streams and blocks built from them: what a
decoder that decodes every stream of a batch at once (nvCOMP) needs to know, read from the
chunks' own headers on the host."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from linumpy_gpu.errors import CodecError

# One chunk's streams (start, stored, decoded, raw, codec name) and blocks (first stream,
# split, offset, size, typesize, mode): the arrays of StreamLayout for one chunk.
ChunkStreams = tuple[tuple[Any, Any, Any, Any, str], tuple[Any, Any, Any, Any, Any, Any]]

# how a block's decoded streams become its bytes
COPY, UNSHUFFLE, BITUNSHUFFLE = 0, 1, 2


@dataclass
class StreamLayout:
    """The inner streams and blocks of a batch of chunks, for a decoder that decodes every
    stream at once and then builds every block at once (Blosc frames, LZ4 chunks).

    Streams (arrays indexed by stream): the frame they belong to, where their bytes start in
    it, how many bytes are stored and how many they decode to, whether they are stored as
    is, and the inner codec's name. A block (arrays indexed by block) reads its ``typesize``
    byte planes from streams ``first .. first + typesize`` when ``split``, else from one
    stream ``first`` (plane j at ``j * (size // typesize)``); it writes ``size`` bytes at
    ``offset`` in its frame's decoded chunk, as ``mode`` says (:data:`COPY`,
    :data:`UNSHUFFLE` or :data:`BITUNSHUFFLE`). Frames this layout cannot describe (another
    inner codec, a header that disagrees with the chunk) are listed in ``elsewhere`` with
    the reason, to be decoded by the CPU codec."""

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
    def of_frames(
        cls, frames: list[Any], describe: Callable[[np.ndarray], ChunkStreams]
    ) -> StreamLayout:
        """The layout of ``frames``, ``describe`` giving each one's streams and blocks (or
        raising CodecError: the frame goes to ``elsewhere``)."""
        streams: dict[str, list[Any]] = {
            k: [] for k in ("frame", "start", "stored", "decoded", "raw")
        }
        names: list[str] = []
        blocks: dict[str, list[Any]] = {
            k: [] for k in ("frame", "first", "split", "offset", "size", "typesize", "mode")
        }
        elsewhere: dict[int, str] = {}
        n_streams = 0
        for i, frame in enumerate(frames):
            try:
                own, built = describe(np.frombuffer(frame, dtype=np.uint8))
            except CodecError as exc:
                elsewhere[i] = str(exc)
                continue
            start, stored, decoded, raw, name = own
            streams["frame"].append(np.full(len(start), i, dtype=np.int64))
            for key, value in zip(("start", "stored", "decoded", "raw"), own[:4], strict=True):
                streams[key].append(value)
            names.extend([name] * len(start))
            blocks["frame"].append(np.full(len(built[0]), i, dtype=np.int64))
            blocks["first"].append(np.asarray(built[0]) + n_streams)
            for key, value in zip(
                ("split", "offset", "size", "typesize", "mode"), built[1:], strict=True
            ):
                blocks[key].append(value)
            n_streams += len(start)

        def cat(parts: list[Any], dtype: Any) -> np.ndarray:
            return np.concatenate(parts).astype(dtype) if parts else np.zeros(0, dtype=dtype)

        return cls(
            frame=cat(streams["frame"], np.int64),
            start=cat(streams["start"], np.int64),
            stored=cat(streams["stored"], np.int64),
            decoded=cat(streams["decoded"], np.int64),
            raw=cat(streams["raw"], bool),
            codec=names,
            block_frame=cat(blocks["frame"], np.int64),
            block_first=cat(blocks["first"], np.int64),
            block_split=cat(blocks["split"], bool),
            block_offset=cat(blocks["offset"], np.int64),
            block_size=cat(blocks["size"], np.int64),
            block_typesize=cat(blocks["typesize"], np.int64),
            block_mode=cat(blocks["mode"], np.int64),
            elsewhere=elsewhere,
        )
