"""The Blosc stream layout the GPU decodes from: every frame numcodecs writes (inner codecs,
shuffles, type sizes, split and unsplit blocks, leftover blocks, frames and streams stored
as they are) rebuilt from it equals numcodecs' decode; damaged frames are left to the CPU
with a reason, never described with offsets outside the frame."""

from __future__ import annotations

import itertools

import numcodecs
import numpy as np
import pytest

from linumpy_gpu.codecs import blosc
from linumpy_gpu.codecs.layout import BITUNSHUFFLE, COPY, UNSHUFFLE
from tests.helpers import blosc_reference


def typed(data: np.ndarray, typesize: int) -> np.ndarray:
    """``data`` bytes as an array whose items are ``typesize`` bytes (Blosc's typesize)."""
    if typesize == 1:
        return data
    return np.frombuffer(data.tobytes(), dtype=np.dtype([("v", "u1", (typesize,))]))


def sample(n_items: int, typesize: int, kind: str, seed: int = 0) -> np.ndarray:
    """``n_items`` items of ``typesize`` bytes: a noisy ramp (compressible with a shuffle,
    as images are), random bytes, or half of each."""
    rng = np.random.default_rng(seed)
    ramp = (np.arange(n_items) // 3 + rng.integers(0, 4, n_items)).astype("<u8")
    data = ramp.view(np.uint8).reshape(n_items, 8)[:, :typesize].reshape(-1).copy()
    if kind == "random":
        return rng.integers(0, 256, data.size, dtype=np.uint8)
    if kind == "halves":  # an incompressible half: streams stored as they are beside coded ones
        data[data.size // 2 :] = rng.integers(0, 256, data.size - data.size // 2, dtype=np.uint8)
    return data


MATRIX = list(
    itertools.product(
        ["lz4", "lz4hc", "zstd"],
        [numcodecs.Blosc.NOSHUFFLE, numcodecs.Blosc.SHUFFLE, numcodecs.Blosc.BITSHUFFLE],
        [1, 2, 3, 4, 8],
        [0, 4096, 3000],
    )
)


@pytest.mark.parametrize(("cname", "shuffle", "typesize", "blocksize"), MATRIX)
def test_layout_rebuilds_what_numcodecs_decodes(cname, shuffle, typesize, blocksize):
    codec = numcodecs.Blosc(cname=cname, clevel=5, shuffle=shuffle, blocksize=blocksize)
    frames, datas = [], []
    for n_items, kind in [
        (1, "smooth"),
        (7, "smooth"),
        (5000, "smooth"),
        (70001, "halves"),
        (3000, "random"),
    ]:
        data = sample(n_items, typesize, kind, seed=n_items)
        frames.append(codec.encode(typed(data, typesize)))
        datas.append(data)
    for frame, data in zip(frames, datas, strict=True):
        out, layout = blosc_reference.decode([frame], data.size)
        assert layout.elsewhere == {}
        np.testing.assert_array_equal(out[0], data)
        assert bytes(out[0]) == bytes(numcodecs.Blosc().decode(frame))


def test_the_matrix_covers_every_layout():
    seen = set()
    for cname, shuffle, typesize, blocksize in MATRIX:
        codec = numcodecs.Blosc(cname=cname, shuffle=shuffle, blocksize=blocksize)
        for n_items, kind in [(7, "smooth"), (70001, "halves"), (3000, "random")]:
            frame = codec.encode(typed(sample(n_items, typesize, kind), typesize))
            layout = blosc.stream_layout([frame], n_items * typesize, ("lz4", "zstd"))
            seen.add(("memcpyed", bool(frame[2] & blosc.MEMCPYED)))
            seen.add(("split", bool(layout.block_split.any())))
            seen.add(("unsplit", bool((~layout.block_split).any())))
            seen.add(("raw stream in a coded frame", bool(layout.raw.any() and not frame[2] & 2)))
            seen.update(("mode", int(m)) for m in layout.block_mode)
            seen.add(("leftover", bool((layout.block_size != layout.block_size.max()).any())))
    for key in [
        ("memcpyed", True),
        ("split", True),
        ("unsplit", True),
        ("raw stream in a coded frame", True),
        ("mode", COPY),
        ("mode", UNSHUFFLE),
        ("mode", BITUNSHUFFLE),
        ("leftover", True),
    ]:
        assert key in seen, key


def test_other_inner_codecs_are_left_to_the_cpu():
    data = sample(4096, 2, "smooth")
    for cname in ("blosclz", "zlib"):
        frame = numcodecs.Blosc(cname=cname, shuffle=1).encode(typed(data, 2))
        layout = blosc.stream_layout([frame], data.size, ("lz4", "zstd"))
        assert layout.elsewhere == {0: f"blosc: inner codec {cname}"}
        assert layout.start.size == 0 and layout.block_first.size == 0


def damaged(frame: bytes, case: str) -> bytes:
    b = bytearray(frame)
    if case == "truncated":
        return bytes(b[: len(b) // 2])
    if case == "short":
        return bytes(b[:10])
    if case == "version":
        b[0] = 9
    elif case == "nbytes":
        b[4:8] = (int.from_bytes(b[4:8], "little") * 2).to_bytes(4, "little")
    elif case == "cbytes":
        b[12:16] = (len(b) + 100).to_bytes(4, "little")
    elif case == "blocksize-zero":
        b[8:12] = bytes(4)
    elif case == "block-start":
        b[16:20] = (len(b) + 5).to_bytes(4, "little")
    elif case == "stream-size":  # the first stream's size lies
        start = int.from_bytes(b[16:20], "little")
        b[start : start + 4] = (len(b)).to_bytes(4, "little")
    elif case == "typesize-zero":
        b[3] = 0
    elif case == "appended":
        b += b"\x00" * 8
    elif case == "inner-version":
        b[1] = 2
    elif case == "reserved-flag":
        b[2] |= 0x08
    elif case == "blocksize-beyond":
        b[8:12] = (int.from_bytes(b[4:8], "little") + 1).to_bytes(4, "little")
    elif case == "blocksize-one":  # a block offset table larger than the frame
        b[8:12] = (1).to_bytes(4, "little")
    return bytes(b)


@pytest.mark.parametrize(
    "case",
    [
        "truncated",
        "short",
        "version",
        "nbytes",
        "cbytes",
        "blocksize-zero",
        "block-start",
        "stream-size",
        "typesize-zero",
        "appended",
        "inner-version",
        "reserved-flag",
        "blocksize-beyond",
        "blocksize-one",
    ],
)
def test_damaged_headers_are_left_to_the_cpu_with_a_reason(case):
    """Every header c-blosc refuses is refused here too (the CPU codec then says why),
    alone in its group of frames or not, and the other frames are still laid out."""
    data = sample(70001, 8, "smooth")
    frame = numcodecs.Blosc(cname="lz4", shuffle=1, blocksize=65536).encode(data.view("u8"))
    good = blosc.stream_layout([frame], data.size, ("lz4", "zstd"))
    assert not good.elsewhere
    layout = blosc.stream_layout([frame, damaged(frame, case)], data.size, ("lz4", "zstd"))
    assert list(layout.elsewhere) == [1] and layout.elsewhere[1].startswith("blosc: ")
    # the intact frame is still described in full, and nothing points outside it
    assert set(layout.frame.tolist()) == {0}
    assert (layout.start + layout.stored <= len(frame)).all()
    assert layout.start.size == good.start.size
    if case in ("inner-version", "reserved-flag", "blocksize-beyond", "blocksize-one"):
        with pytest.raises(RuntimeError):  # c-blosc refuses these too
            numcodecs.Blosc().decode(damaged(frame, case))


def test_streams_stay_inside_their_frames():
    frames = [
        numcodecs.Blosc(cname=c, shuffle=s).encode(typed(sample(9000, 4, "halves", seed), 4))
        for seed, (c, s) in enumerate(itertools.product(["lz4", "zstd"], [0, 1, 2]))
    ]
    layout = blosc.stream_layout(frames, 4 * 9000, ("lz4", "zstd"))
    lengths = np.array([len(f) for f in frames])
    assert (layout.start >= blosc.HEADER_BYTES).all()
    assert (layout.start + layout.stored <= lengths[layout.frame]).all()
    assert (layout.block_offset + layout.block_size <= 4 * 9000).all()


def test_lz4_chunks_are_one_stream_after_their_size_prefix():
    from linumpy_gpu.codecs import lz4

    data = sample(5000, 2, "smooth")
    good = numcodecs.LZ4().encode(data)
    lying = bytearray(good)
    lying[0:4] = (data.size + 2).to_bytes(4, "little")
    layout = lz4.stream_layout([good, bytes(lying), good[:3]], data.size)
    assert list(layout.frame) == [0]
    assert (layout.start[0], layout.stored[0], layout.decoded[0]) == (4, len(good) - 4, data.size)
    assert not layout.raw.any() and layout.codec == ["lz4"]
    assert layout.block_mode.tolist() == [COPY]
    assert set(layout.elsewhere) == {1, 2}
    out = numcodecs.LZ4().decode(good[:4] + good[4:])  # the stream is the whole rest
    assert bytes(out) == data.tobytes()


def test_a_mixed_batch_is_laid_out_as_each_frame_alone():
    """Frames of different kinds (shuffles, memcpyed, damaged, another inner codec) in one
    batch get the streams and blocks each would get alone, in frame order."""
    data = sample(70001, 4, "halves")
    frames = []
    for seed, (cname, shuffle) in enumerate(itertools.product(["lz4", "zstd", "zlib"], [0, 1, 2])):
        frames.append(numcodecs.Blosc(cname=cname, shuffle=shuffle).encode(typed(data, 4)))
        if seed % 3 == 1:
            frames.append(damaged(frames[-1], "stream-size"))
    noise = sample(70001, 4, "random")  # stored as is
    frames.append(numcodecs.Blosc(cname="lz4").encode(typed(noise, 4)))
    frames.append(frames[0])
    batch = blosc.stream_layout(frames, data.size, ("lz4", "zstd"))
    alone = [blosc.stream_layout([f], data.size, ("lz4", "zstd")) for f in frames]
    assert set(batch.elsewhere) == {i for i, a in enumerate(alone) if a.elsewhere}
    assert len(batch.elsewhere) == 6  # three zlib frames and three damaged ones
    for i, a in enumerate(alone):
        mine = batch.frame == i
        assert (batch.start[mine] == a.start).all() and (batch.stored[mine] == a.stored).all()
        assert (batch.decoded[mine] == a.decoded).all() and (batch.raw[mine] == a.raw).all()
        blocks = batch.block_frame == i
        first = np.flatnonzero(mine)[0] if mine.any() else 0
        assert (batch.block_first[blocks] - first == a.block_first).all()
        for key in ("split", "offset", "size", "typesize", "mode"):
            assert (getattr(batch, "block_" + key)[blocks] == getattr(a, "block_" + key)).all()
    assert (np.diff(batch.frame) >= 0).all() and (np.diff(batch.block_frame) >= 0).all()
    assert frames[-2][2] & blosc.MEMCPYED
    decoded, _ = blosc_reference.decode(frames, data.size)
    for i, out in enumerate(decoded):
        if i not in batch.elsewhere:
            np.testing.assert_array_equal(out, noise if i == len(frames) - 2 else data)


def test_lz4_chunks_declaring_no_bytes_are_left_to_the_cpu():
    """numcodecs refuses an LZ4 chunk that declares 0 bytes: the GPU must not decode it."""
    from linumpy_gpu.codecs import lz4

    layout = lz4.stream_layout([bytes(5)], 0)
    assert layout.elsewhere == {0: "lz4: the chunk declares 0 bytes"}
    assert layout.start.size == 0
    with pytest.raises(RuntimeError):
        numcodecs.LZ4().decode(bytes(5))
