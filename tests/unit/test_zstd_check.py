"""The zstd content check (``gpu/zstd_check.py``) compiled as host C++ and held against
libzstd: every frame libzstd writes passes, and damage that libzstd refuses is refused."""

from __future__ import annotations

import ctypes
import shutil
import subprocess

import numpy as np
import pytest
from numcodecs import Zstd

from linumpy_gpu.gpu.kernels import FRAME_STATUS
from linumpy_gpu.gpu.zstd_check import DESC_BYTES, RESULT_BYTES, SOURCE, TABLE_WORDS

HARNESS = r"""
typedef unsigned long long u64;
typedef unsigned int u32;
typedef unsigned char u8;
#define LINUMPY_DEVICE static inline
#define LINUMPY_CONSTANT static const
%s
static u32 tables[%d];
extern "C" int check_frame(const u8* p, u64 size, u64 want, u32* stored) {
    return zc_frame(p, size, want, tables, stored);
}
/* the GPU's ways: walk, check every block apart (fresh tables each) or every part of
   every block apart, join */
static int split(const u8* p, u64 size, u64 want, u32* stored, int parts) {
    static ZcBlockDesc descs[4096];
    static ZcBlockResult results[4096];
    static int literals[4096 * (ZC_PARTS - 1)];
    u32 nblocks = 0;
    const u32 cap = zc_frame_blocks(p, size, want);
    if (cap > 4096) return -100;
    int status = zc_frame_walk(p, size, want, descs, cap, &nblocks, stored);
    if (status != 0 && status != 1) return status;
    for (u32 k = 0; k < nblocks; ++k) {
        for (int part = parts ? 0 : ZC_ALL_PARTS; part < (parts ? ZC_PARTS : 0); ++part) {
            for (u32 w = 0; w < sizeof(tables) / 4; ++w) tables[w] = 0xDEADBEEFu;
            zc_block_apart(descs + k, part, tables, results + k,
                           literals + k * (ZC_PARTS - 1) + (part > 0 ? part - 1 : 0));
        }
    }
    const int joined = zc_frame_join(results, parts ? literals : 0, nblocks, want);
    return joined != 0 ? joined : status;
}
extern "C" int check_frame_split(const u8* p, u64 size, u64 want, u32* stored) {
    return split(p, size, want, stored, 0);
}
extern "C" int check_frame_parts(const u8* p, u64 size, u64 want, u32* stored) {
    return split(p, size, want, stored, 1);
}
static_assert(sizeof(ZcBlockDesc) == %d, "block description");
static_assert(sizeof(ZcBlockResult) == %d, "block result");
"""


@pytest.fixture(scope="module")
def check(tmp_path_factory):
    compiler = shutil.which("g++") or shutil.which("c++")
    if compiler is None:
        pytest.skip("no C++ compiler to build the host copy of the zstd check")
    folder = tmp_path_factory.mktemp("zstd_check")
    source = folder / "check.cpp"
    source.write_text(HARNESS % (SOURCE, TABLE_WORDS, DESC_BYTES, RESULT_BYTES))
    library = folder / "check.so"
    built = subprocess.run(
        [compiler, "-O1", "-shared", "-fPIC", "-Wall", "-Werror", "-o", str(library), str(source)],
        capture_output=True,
        text=True,
    )
    assert built.returncode == 0, built.stderr
    lib = ctypes.CDLL(str(library))
    for function in (lib.check_frame, lib.check_frame_split, lib.check_frame_parts):
        function.restype = ctypes.c_int
        function.argtypes = [
            ctypes.c_char_p,
            ctypes.c_uint64,
            ctypes.c_uint64,
            ctypes.POINTER(ctypes.c_uint32),
        ]

    def run(frame: bytes, want: int, device: bool = False) -> int:
        """The frame's status (``device``: as the GPU's block-apart check gives it); the
        checks of blocks apart and of block parts apart (as the GPU runs them) must agree
        with the frame-at-once one on whether the frame passes."""
        stored = ctypes.c_uint32()
        whole = int(lib.check_frame(frame, len(frame), want, ctypes.byref(stored)))
        split = int(lib.check_frame_split(frame, len(frame), want, ctypes.byref(stored)))
        parts = int(lib.check_frame_parts(frame, len(frame), want, ctypes.byref(stored)))
        assert (whole >= 0) == (split >= 0) == (parts >= 0), (whole, split, parts)
        assert split == parts, (split, parts)
        return split if device else whole

    return run


def _samples() -> dict[str, bytes]:
    rng = np.random.default_rng(7)
    x = np.linspace(0, 40, 1 << 20)
    smooth = (1000 + 800 * np.sin(x) + rng.normal(0, 20, x.size)).astype(np.uint16)
    text = b" ".join(
        b"the quick brown fox %d jumps over %d lazy dogs" % (i, i * 7) for i in range(60000)
    )
    return {
        "one-byte": b"\x07",
        "tiny": b"abcabcabcabcabcabcabcabcab",
        "random": rng.integers(0, 256, 300_000, dtype=np.uint8).tobytes(),
        "zeros": bytes(1 << 20),
        "smooth-uint16": smooth.tobytes(),
        "text": text,
        "sparse": np.where(rng.random(1 << 20) < 0.02, 255, 0).astype(np.uint8).tobytes(),
        "image-4MiB": np.repeat(smooth, 2).tobytes(),
    }


SAMPLES = _samples()
LEVELS = [-5, -1, 1, 3, 9, 19]


@pytest.mark.parametrize("checksum", [False, True], ids=["plain", "checksum"])
@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("name", list(SAMPLES))
def test_every_valid_frame_passes(check, name, level, checksum):
    data = SAMPLES[name]
    frame = bytes(Zstd(level=level, checksum=checksum).encode(data))
    status = check(frame, len(data))
    assert status == (1 if checksum else 0), FRAME_STATUS.get(status, status)


def test_damaged_sequences_are_refused_where_libzstd_refuses(check):
    """Flip each of many bytes across a frame without a checksum: wherever libzstd fails
    (or decodes other bytes), the check must not call the frame valid unless the damage
    only changed literal values, which no decoder can notice."""
    data = SAMPLES["smooth-uint16"][:400_000]
    frame = bytearray(Zstd(level=3).encode(data))
    refused = accepted_but_libzstd_failed = 0
    for position in range(0, len(frame), max(1, len(frame) // 1500)):
        damaged = bytearray(frame)
        damaged[position] ^= 0xFF
        status = check(bytes(damaged), len(data))
        if status < 0:
            refused += 1
            continue
        try:
            bytes(Zstd().decode(bytes(damaged)))
        except Exception:
            accepted_but_libzstd_failed += 1
    assert refused > 0
    assert accepted_but_libzstd_failed == 0


@pytest.mark.parametrize("checksum", [False, True], ids=["plain", "checksum"])
def test_last_byte_of_the_last_block_is_refused(check, checksum):
    """The end of the last block's sequence bitstream: the case nvCOMP cannot survive."""
    data = SAMPLES["smooth-uint16"][:300_000]
    frame = bytearray(Zstd(level=3, checksum=checksum).encode(data))
    end = len(frame) - (4 if checksum else 0) - 1
    for flip in (0xFF, 0x01, 0x80):
        damaged = bytearray(frame)
        damaged[end] ^= flip
        assert check(bytes(damaged), len(data)) < 0


def test_truncated_frames_are_refused(check):
    data = SAMPLES["text"][:200_000]
    frame = bytes(Zstd(level=3).encode(data))
    for cut in (1, 2, 5, 17, len(frame) // 2, len(frame) - 1):
        assert check(frame[:cut], len(data)) < 0


def test_wrong_size_and_garbage_are_refused(check):
    data = SAMPLES["random"][:50_000]
    frame = bytes(Zstd(level=3).encode(data))
    assert check(frame, len(data) + 1) < 0
    rng = np.random.default_rng(3)
    for seed in range(20):
        garbage = frame[:6] + rng.integers(0, 256, 4096, dtype=np.uint8).tobytes()
        assert check(garbage, len(data)) < 0, seed


def _raw_blocks_frame(data: bytes, empty_blocks: int, window_log: int | None = None) -> bytes:
    """A frame of ``empty_blocks`` empty raw blocks, then one raw block of ``data`` (at most
    255 bytes): with its content size, or (``window_log``) with only a window size."""
    if window_log is None:
        header = bytes([0x20, len(data)])  # single segment, one-byte content size
    else:
        header = bytes([0x00, (window_log - 10) << 3])  # window descriptor, no size
    last = (len(data) << 3) | 1
    return (
        (0xFD2FB528).to_bytes(4, "little")
        + header
        + bytes(3) * empty_blocks
        + last.to_bytes(3, "little")
        + data
    )


def test_frames_of_many_tiny_blocks_go_to_the_cpu(check):
    """Each block costs device scratch: a frame whose blocks average under 1 KiB (here
    empty ones, three bytes each) is left to the CPU (status 4, which libzstd decodes);
    a few empty blocks pass on the device."""
    data = bytes(range(200))
    few = _raw_blocks_frame(data, 10)
    assert bytes(Zstd().decode(few)) == data
    assert check(few, len(data), device=True) == 0
    many = _raw_blocks_frame(data, 300_000)
    assert bytes(Zstd().decode(many)) == data
    assert check(many, len(data)) == 0  # the block-after-block check needs no scratch
    assert check(many, len(data), device=True) == 4
    assert FRAME_STATUS[4][1]  # decodable: the CPU decodes it


def test_large_windows_without_a_content_size_are_refused_as_libzstd_refuses(check):
    data = bytes(range(200))
    fits = _raw_blocks_frame(data, 0, window_log=27)
    assert bytes(Zstd().decode(fits)) == data
    assert check(fits, len(data)) == 0
    too_large = _raw_blocks_frame(data, 0, window_log=28)
    with pytest.raises(RuntimeError):
        Zstd().decode(too_large)
    assert check(too_large, len(data)) == -16
    assert check(too_large, len(data), device=True) == -16
