"""The CPU zstd path that host threads use beside nvCOMP: exact sizes or a reason."""

from __future__ import annotations

import numcodecs
import numpy as np
import pytest

import linumpy_gpu as lg
from linumpy_gpu.codecs.zstd import content_size as zstd_content_size
from linumpy_gpu.codecs.zstd import decode_into as zstd_decode_into
from tests.gpu.damage_case import damage


def _raw_block_frame(payload: bytes) -> bytes:
    """A zstd frame without a content size field (as streaming writers make them)."""
    header = b"\x28\xb5\x2f\xfd" + bytes([0x00, 0x58])  # no size, window descriptor
    block = ((len(payload) << 3) | 1).to_bytes(3, "little")  # last block, raw
    return header + block + payload


@pytest.fixture
def chunk():
    rng = np.random.default_rng(3)
    raw = (rng.integers(0, 256, 16 * 64 * 64) + 2000).astype(np.uint16).view(np.uint8)
    return raw, numcodecs.Zstd(level=3).encode(raw)


def test_content_size_matches_the_header(chunk):
    raw, frame = chunk
    assert zstd_content_size(frame) == raw.size
    assert zstd_content_size(memoryview(frame)) == raw.size
    assert zstd_content_size(_raw_block_frame(b"abc")) is None
    assert zstd_content_size(b"not zstd at all") is None
    assert zstd_content_size(b"") is None


def test_decode_into_an_exact_buffer(chunk):
    raw, frame = chunk
    out = np.zeros(raw.size, dtype=np.uint8)
    assert zstd_decode_into(memoryview(frame), out) is None
    np.testing.assert_array_equal(out, raw)


def test_a_frame_without_content_size_still_checks_its_size():
    payload = bytes(range(200))
    out = np.zeros(200, dtype=np.uint8)
    assert zstd_decode_into(_raw_block_frame(payload), out) is None
    assert out.tobytes() == payload
    assert "decoded 200 bytes, expected 300" in zstd_decode_into(
        _raw_block_frame(payload), np.zeros(300, dtype=np.uint8)
    )


def test_a_small_frame_without_content_size_cannot_decode_past_the_chunk():
    """Many compressed blocks of a small frame can decode to thousands of times its size:
    the decode stops at the chunk's size instead of allocating it all."""
    from linumpy_gpu.codecs.zstd import decode

    zstandard = pytest.importorskip("zstandard")
    big = bytes(range(256)) * ((64 << 20) // 256)  # compressed blocks, not RLE ones
    frame = zstandard.ZstdCompressor(write_content_size=False).compress(big)
    assert len(frame) < (64 << 20) // 1000
    with pytest.raises(lg.CodecError):
        decode(frame, 1 << 20)
    assert bytes(decode(frame, 64 << 20)) == big  # where the chunk holds it, it decodes


@pytest.mark.parametrize(
    "case",
    [
        "truncated",
        "bad-magic",
        "block-header-byte",
        "zero-length",
        "garbage",
        "trailing-bytes",
        "wrong-content-size",
        "checksum-byte",
    ],
)
def test_damaged_frames_give_a_reason_and_leave_no_partial_claim(chunk, case):
    raw, _ = chunk
    frame = numcodecs.Zstd(level=3, checksum=True).encode(raw)
    broken = damage(frame, case, raw.size)
    out = np.zeros(raw.size, dtype=np.uint8)
    reason = zstd_decode_into(broken, out)
    assert reason, f"{case}: decoded without complaint"
    assert "zstd" in reason


def test_a_smaller_declared_frame_is_refused_not_decoded_into_the_front(chunk):
    raw, frame = chunk
    out = np.full(raw.size * 2, 0xEE, dtype=np.uint8)
    reason = zstd_decode_into(frame, out)
    assert reason == f"the zstd frame declares {raw.size} bytes, expected {raw.size * 2}"
    assert (out == 0xEE).all()


def test_frames_back_to_back_are_one_chunk(chunk):
    """zstd data may be several frames end to end (valid for every zstd decoder): the
    bounded decoders decode them whole, and refuse them when their sizes add up wrong."""
    from linumpy_gpu.codecs.zstd import decode, frame_sizes

    raw, _ = chunk
    half = raw.size // 2
    data = numcodecs.Zstd(level=3).encode(raw[:half]) + numcodecs.Zstd(level=3).encode(raw[half:])
    assert frame_sizes(data) == [half, raw.size - half]
    out = np.empty(raw.size, dtype=np.uint8)
    assert zstd_decode_into(data, out) is None
    np.testing.assert_array_equal(out, raw)
    np.testing.assert_array_equal(np.frombuffer(decode(data, raw.size), np.uint8), raw)
    short = np.full(raw.size + 1, 0xEE, dtype=np.uint8)
    assert (
        zstd_decode_into(data, short)
        == f"the zstd frame declares {raw.size} bytes, expected {raw.size + 1}"
    )
    assert (short == 0xEE).all()
    with pytest.raises(lg.CodecError, match="more than"):
        decode(data, raw.size - 1)


def test_frames_without_declared_sizes_back_to_back_are_one_chunk():
    """Streaming writers give several frames without a content size: each is decoded
    within what the chunk has left, and the chunk is refused where they hold too much."""
    from linumpy_gpu.codecs.zstd import decode, frame_sizes

    first, second = b"a" * 500, bytes(range(256)) * 2
    data = _raw_block_frame(first) + _raw_block_frame(second)
    assert frame_sizes(data) == [None, None]
    whole = first + second
    out = np.empty(len(whole), dtype=np.uint8)
    assert zstd_decode_into(data, out) is None
    assert out.tobytes() == whole
    assert bytes(decode(data, len(whole))) == whole
    with pytest.raises(lg.CodecError, match="more than"):
        decode(data, len(whole) - 1)
    assert "more than" in zstd_decode_into(data, np.empty(len(whole) - 1, dtype=np.uint8))
