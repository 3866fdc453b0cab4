"""A numpy model of a Blosc decode driven by :func:`linumpy_gpu.codecs.blosc.stream_layout`:
the same streams, blocks and unshuffle rules the GPU kernels follow, so tests on the CPU
prove the layout and the unshuffle arithmetic against numcodecs' Blosc."""

from __future__ import annotations

from typing import Any

import numcodecs
import numpy as np

from linumpy_gpu.codecs import blosc
from linumpy_gpu.codecs.layout import COPY, UNSHUFFLE


def _inner(name: str, data: np.ndarray, size: int) -> np.ndarray:
    if name == "lz4":  # numcodecs' LZ4 is a raw block after its decoded size
        framed = size.to_bytes(4, "little") + data.tobytes()
        return np.frombuffer(numcodecs.LZ4().decode(framed), np.uint8)
    return np.frombuffer(numcodecs.Zstd().decode(data.tobytes()), np.uint8)


def decode(frames: list[Any], nbytes: int) -> tuple[list[np.ndarray | None], Any]:
    """Decode ``frames`` as the GPU does: None for the frames the layout leaves to the CPU."""
    layout = blosc.stream_layout(frames, nbytes, ("lz4", "zstd"))
    bufs = [np.frombuffer(f, np.uint8) for f in frames]
    streams = []
    for s in range(layout.start.size):
        stored = bufs[layout.frame[s]][layout.start[s] : layout.start[s] + layout.stored[s]]
        size = int(layout.decoded[s])
        streams.append(stored if layout.raw[s] else _inner(layout.codec[s], stored, size))
        assert streams[-1].size == size
    out: list[np.ndarray | None] = [
        None if i in layout.elsewhere else np.zeros(nbytes, np.uint8) for i in range(len(frames))
    ]
    for k in range(layout.block_first.size):
        first, size, ts = (
            int(v[k]) for v in (layout.block_first, layout.block_size, layout.block_typesize)
        )
        quot, mode = size // ts, layout.block_mode[k]
        body = quot * ts

        if layout.block_split[k]:
            planes = np.stack(streams[first : first + ts])  # (typesize, elements)
        else:
            planes = streams[first][:body].reshape(ts, quot)
        if mode == COPY:
            body_bytes = planes.reshape(-1)
        elif mode == UNSHUFFLE:
            body_bytes = planes.T.reshape(-1)
        else:  # each plane holds 8 rows of bits, bit i of a row for element i
            bits = np.unpackbits(planes.reshape(ts, 8, quot // 8), axis=2, bitorder="little")
            body_bytes = np.packbits(bits.transpose(2, 0, 1), axis=2, bitorder="little").reshape(-1)
        chunk = out[int(layout.block_frame[k])]
        assert chunk is not None
        dst = chunk[layout.block_offset[k] : layout.block_offset[k] + size]
        dst[:body] = body_bytes
        dst[body:] = streams[first][body:size]
    return out, layout
