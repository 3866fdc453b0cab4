"""One damaged Blosc or LZ4 chunk, run in its own process by test_gpu_damage.py (and by
hand).

    python -m tests.gpu.stream_damage_case CODEC CASE OUT_JSON

Writes a small zarr v2 image with numcodecs' Blosc (CODEC ``lz4`` or ``zstd`` inside, byte
shuffle) or numcodecs' LZ4 (CODEC ``numcodecs-lz4``), damages chunk 1.0.0 as CASE says,
then records what numcodecs says of the damaged chunk and what a GPU read does, and proves
afterwards that the CUDA context still works.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time

import numcodecs
import numpy as np
import zarr

SHAPE, CHUNKS = (32, 64, 64), (16, 64, 64)
KEY = "1.0.0"
CASES = [
    "truncated",
    "zero-length",
    "bad-version",
    "header-flags",
    "header-nbytes",
    "first-block",
    "middle",
    "end",
    "zeros",
    "garbage",
    "stream-size-lies",
    "block-start-lies",
]
# numcodecs' LZ4 chunks: a size prefix, then one LZ4 block
LZ4_CASES = [
    "truncated",
    "zero-length",
    "header-nbytes",
    "first-block",
    "middle",
    "end",
    "zeros",
    "garbage",
]


def compressor(codec: str) -> numcodecs.abc.Codec:
    if codec == "numcodecs-lz4":
        return numcodecs.LZ4()
    return numcodecs.Blosc(cname=codec, clevel=5, shuffle=numcodecs.Blosc.SHUFFLE)


def damage_lz4(frame: bytes, case: str) -> bytes:
    b = bytearray(frame)
    if case == "header-nbytes":
        b[0:4] = (int.from_bytes(b[0:4], "little") - 2).to_bytes(4, "little")
    elif case == "first-block":
        b[4] ^= 0xFF
    elif case == "middle":
        b[len(b) // 2] ^= 0x5A
    elif case == "end":
        b[-1] ^= 0xFF
    else:
        return damage(frame, case)
    return bytes(b)


def damage(frame: bytes, case: str) -> bytes:
    rng = np.random.default_rng(7)
    b = bytearray(frame)
    n_blocks = -(-int.from_bytes(b[4:8], "little") // int.from_bytes(b[8:12], "little"))
    first = int.from_bytes(b[16:20], "little")  # the first block's first stream
    if case == "truncated":
        return bytes(b[: len(b) * 2 // 3])
    if case == "zero-length":
        return b""
    if case == "zeros":
        return bytes(len(b))
    if case == "garbage":
        return rng.integers(0, 256, len(b), dtype=np.uint8).tobytes()
    if case == "bad-version":
        b[0] = 0x7F
    elif case == "header-flags":
        b[2] ^= 0x04  # bit shuffle claimed as well
    elif case == "header-nbytes":
        b[4:8] = (int.from_bytes(b[4:8], "little") + 8).to_bytes(4, "little")
    elif case == "first-block":
        b[first + 4] ^= 0xFF  # the first token of the first stream
    elif case == "middle":
        b[16 + 4 * n_blocks + (len(b) - 16 - 4 * n_blocks) // 2] ^= 0x5A
    elif case == "end":
        b[-1] ^= 0xFF
    elif case == "stream-size-lies":
        size = int.from_bytes(b[first : first + 4], "little")
        b[first : first + 4] = (size - 3).to_bytes(4, "little")
    elif case == "block-start-lies":
        b[16:20] = (first + 1).to_bytes(4, "little")
    else:
        raise ValueError(case)
    return bytes(b)


def cpu_verdict(codec: str, data: bytes) -> tuple[str, bytes | None]:
    try:
        out = bytes(compressor(codec).decode(data))
    except Exception as exc:
        return f"error: {str(exc).splitlines()[0][:80]}", None
    return "decodes", out


def main(cname: str, case: str, out_json: str) -> None:
    import cupy

    import linumpy_gpu as lg
    from linumpy_gpu.gpu.backend import GpuBackend
    from tests.helpers.zarr_images import write_image_with_zarr

    rng = np.random.default_rng(0)
    data = (rng.integers(0, 500, SHAPE) + np.arange(SHAPE[-1])).astype("u2")
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "img.zarr")
        codec = compressor(cname)
        write_image_with_zarr(path, data, zarr_format=2, chunks=CHUNKS, compressors=codec)
        chunk_path = os.path.join(path, "0", KEY)
        with open(chunk_path, "rb") as f:
            original = f.read()
        damaged = damage_lz4(original, case) if cname == "numcodecs-lz4" else damage(original, case)
        with open(chunk_path, "wb") as f:
            f.write(damaged)
        cpu, cpu_bytes = cpu_verdict(cname, damaged)
        result = {"cname": cname, "case": case, "cpu": cpu}
        img = lg.open_ome_zarr(path, device=GpuBackend(host_threads=0))
        t0 = time.perf_counter()
        try:
            got = img[0][...]
            cupy.cuda.get_current_stream().synchronize()
            host = got.get()
            if cpu_bytes is not None and len(cpu_bytes) == data[16:].nbytes:
                same = host[16:].tobytes() == cpu_bytes
                result["gpu"] = "read, as the CPU decodes it" if same else "read, WRONG DATA"
            else:
                result["gpu"] = "read, WRONG DATA (the CPU refuses this chunk)"
        except lg.ChunkDecodeError as exc:
            result["gpu"] = f"ChunkDecodeError: {exc.reason}"
            result["names_key"] = KEY in exc.key
        result["seconds"] = round(time.perf_counter() - t0, 3)
        with lg.gpu_zarr_context():  # plain zarr-python, through our GPU codecs
            try:
                whole = zarr.open_array(os.path.join(path, "0"), mode="r")[...].get()
                same = cpu_bytes is not None and whole[16:].tobytes() == cpu_bytes
                result["zarr_context"] = (
                    "read, as the CPU decodes it" if same else "read, WRONG DATA"
                )
            except lg.ChunkDecodeError as exc:
                result["zarr_context"] = f"ChunkDecodeError: {exc.reason}"
        ok = img[0][:16].get()
        result["gpu_usable_after"] = (
            bool(np.array_equal(ok, data[:16])) and float(cupy.arange(10).sum()) == 45.0
        )
    with open(out_json, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3])
