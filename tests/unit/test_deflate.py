"""gzip and zlib chunks: libdeflate's fast path and zlib agree on every chunk, valid or
not: the same bytes, or a CodecError from both; trailing bytes, extra members, bad
checksums and truncation are never accepted by the fast path."""

from __future__ import annotations

import gzip
import zlib

import numpy as np
import pytest

from linumpy_gpu.codecs import deflate
from linumpy_gpu.errors import CodecError

RAW = (np.arange(300_000) // 7 % 251).astype(np.uint8).tobytes()
GZ = gzip.compress(RAW, compresslevel=5)
ZL = zlib.compress(RAW, 5)


def flipped(data: bytes, at: int) -> bytes:
    b = bytearray(data)
    b[at] ^= 0x40
    return bytes(b)


CASES = {
    "gzip": GZ,
    "gzip two members": gzip.compress(RAW[:1000]) + gzip.compress(RAW[1000:]),
    "gzip member repeated": GZ + GZ,
    "gzip trailing bytes": GZ + b"\x00\x01\x02",
    "gzip truncated": GZ[:-5],
    "gzip bad crc": flipped(GZ, len(GZ) - 6),
    "gzip bad size": flipped(GZ, len(GZ) - 2),
    "gzip flipped header": flipped(GZ, 3),
    "gzip flipped body": flipped(GZ, len(GZ) // 2),
    "zlib": ZL,
    "zlib trailing bytes": ZL + b"\x00",
    "zlib truncated": ZL[:-1],
    "zlib bad adler": flipped(ZL, len(ZL) - 1),
    "zlib flipped body": flipped(ZL, len(ZL) // 2),
}


def outcome(fn, data, limit, wrapper):
    try:
        return bytes(fn(data, limit, wrapper))
    except CodecError:
        return "error"


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("limit", [len(RAW), len(RAW) - 1, len(RAW) + 100])
def test_fast_path_agrees_with_zlib(name, limit):
    wrapper = name.split()[0]
    data = CASES[name]
    strict = outcome(deflate._decode_zlib, data, limit, wrapper)
    fast = deflate._decode_libdeflate(data, limit, wrapper)
    if fast is not None:  # accepted: exactly what zlib decodes
        assert bytes(fast) == strict
    assert outcome(deflate.decode, data, limit, wrapper) == strict


def test_valid_chunks_take_the_fast_path():
    assert deflate._libdeflate() is not None  # the deflate package is a dependency
    assert bytes(deflate._decode_libdeflate(GZ, len(RAW), "gzip")) == RAW
    assert bytes(deflate._decode_libdeflate(ZL, len(RAW), "zlib")) == RAW
    two = CASES["gzip two members"]
    assert bytes(deflate._decode_libdeflate(two, len(RAW), "gzip")) == RAW


def test_damage_is_refused_by_the_fast_path():
    for name in (
        "gzip member repeated",
        "gzip trailing bytes",
        "gzip truncated",
        "gzip bad crc",
        "zlib trailing bytes",
        "zlib truncated",
        "zlib bad adler",
    ):
        wrapper = name.split()[0]
        assert deflate._decode_libdeflate(CASES[name], len(RAW), wrapper) is None, name


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("size", [len(RAW), len(RAW) - 1, len(RAW) + 100])
def test_decoding_in_place_agrees_with_decode(name, size):
    """In place, a chunk decodes exactly when ``decode`` gives ``size`` bytes; otherwise a
    reason comes back and nothing is claimed about ``out``."""
    wrapper = name.split()[0]
    expected = outcome(deflate.decode, CASES[name], size, wrapper)
    out = np.full(size, 7, dtype=np.uint8)
    reason = deflate.decode_into(CASES[name], out, wrapper)
    if expected != "error" and len(expected) == size:
        assert reason is None and out.tobytes() == expected
    else:
        assert isinstance(reason, str) and reason


def test_a_chain_decodes_in_place_or_through_a_copy():
    from linumpy_gpu.codecs import ByteCodec, decode_chain_into

    out = np.zeros(len(RAW), dtype=np.uint8)
    assert decode_chain_into(GZ, [ByteCodec("gzip")], out) is None and out.tobytes() == RAW
    out[:] = 0
    assert decode_chain_into(ZL, [ByteCodec("zlib")], out) is None and out.tobytes() == RAW
    out[:] = 0
    two = gzip.compress(zlib.compress(RAW))  # a chain of two: decoded, then copied
    chain = [ByteCodec("zlib"), ByteCodec("gzip")]
    assert decode_chain_into(two, chain, out) is None and out.tobytes() == RAW
    assert decode_chain_into(GZ[:-5], [ByteCodec("gzip")], out).startswith("gzip: ")
    assert decode_chain_into(two[:-1], chain, out).startswith("gzip: ")
