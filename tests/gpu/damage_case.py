"""One damaged-chunk case, run in its own process by test_gpu_damage.py (and by hand).

    python -m tests.gpu.damage_case CASE CHECKSUM OUT_JSON

Writes a small zstd array, damages chunk c/1/0/0 as CASE says, then records what the CPU
zstd (numcodecs) says of the damaged frame and what a GPU read through the engine does,
and proves afterwards that the CUDA context still works.
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
from zarr.codecs import ZstdCodec

SHAPE, CHUNKS = (32, 64, 64), (16, 64, 64)
KEY = "c/1/0/0"


def frame_header_end(frame: bytes) -> int:
    fhd = frame[4]
    fcs_flag, single, did_flag = fhd >> 6, (fhd >> 5) & 1, fhd & 3
    pos = 5 + (0 if single else 1) + (0, 1, 2, 4)[did_flag]
    return pos + ((1 if single else 0), 2, 4, 8)[fcs_flag]


def damage(frame: bytes, case: str, expected_size: int) -> bytes:
    rng = np.random.default_rng(7)
    b = bytearray(frame)
    hdr = frame_header_end(frame)
    if case == "truncated":
        return bytes(b[: len(b) * 2 // 3])
    if case == "bad-magic":
        b[0] ^= 0xFF
    elif case == "header-byte":
        b[4] ^= 0x01  # frame header descriptor: dictionary-id flag
    elif case == "block-header-byte":
        b[hdr + 2] ^= 0x40  # high bits of the first block's size
    elif case == "payload-byte":
        b[hdr + 3 + (len(b) - hdr) // 2] ^= 0x5A
    elif case == "checksum-byte":
        b[-1] ^= 0xFF
    elif case == "last-block-byte":  # the last byte of the last block's bitstream
        b[-5 if (frame[4] >> 2) & 1 else -1] ^= 0xFF
    elif case == "zero-length":
        return b""
    elif case == "garbage":
        return rng.integers(0, 256, len(b), dtype=np.uint8).tobytes()
    elif case == "trailing-bytes":
        return bytes(b) + b"\x01\x02\x03\x04\x05\x06\x07"
    elif case == "wrong-content-size":
        pos = 5 + (0 if (b[4] >> 5) & 1 else 1)
        fcs_flag = b[4] >> 6
        size_bytes = ((1 if (b[4] >> 5) & 1 else 0), 2, 4, 8)[fcs_flag]
        declared = int.from_bytes(b[pos : pos + size_bytes], "little") + (
            256 if size_bytes == 2 else 0
        )
        value = declared // 2 - (256 if size_bytes == 2 else 0)
        b[pos : pos + size_bytes] = int(value).to_bytes(size_bytes, "little")
    else:
        raise ValueError(case)
    return bytes(b)


def cpu_verdict(data: bytes, expected: bytes) -> str:
    try:
        out = numcodecs.Zstd().decode(data)
    except Exception as exc:
        return f"error: {str(exc).splitlines()[0][:80]}"
    if len(out) != len(expected):
        return f"decodes to {len(out)} bytes (wrong size)"
    return "decodes, equal" if out == expected else "decodes, WRONG DATA"


def main(case: str, checksum: bool, out_json: str) -> None:
    import cupy

    import linumpy_gpu as lg
    from linumpy_gpu.gpu.backend import GpuBackend
    from linumpy_gpu.write import write_ome_zarr

    rng = np.random.default_rng(0)
    data = (rng.integers(0, 500, SHAPE) + np.arange(SHAPE[-1])).astype("u2")
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "img.zarr")
        write_ome_zarr(path, data, axes="zyx", chunks=CHUNKS, checksum=checksum)
        arr = zarr.open_array(os.path.join(path, "0"))
        assert isinstance(arr.metadata.codecs[1], ZstdCodec)
        chunk_path = os.path.join(path, "0", *KEY.split("/"))
        with open(chunk_path, "rb") as f:
            original = f.read()
        damaged = damage(original, case, data[16:].nbytes)
        with open(chunk_path, "wb") as f:
            f.write(damaged)
        result = {
            "case": case,
            "checksum": checksum,
            "cpu": cpu_verdict(damaged, data[16:].tobytes()),
        }
        # nvCOMP alone (no host threads): the damaged frame must reach the GPU path
        img = lg.open_ome_zarr(path, device=GpuBackend(host_threads=0))
        t0 = time.perf_counter()
        try:
            got = img[0][...]
            cupy.cuda.get_current_stream().synchronize()
            host = got.get()
            result["gpu"] = "read, equal" if np.array_equal(host, data) else "read, WRONG DATA"
        except lg.ChunkDecodeError as exc:
            result["gpu"] = f"ChunkDecodeError: {exc.reason}"
            result["names_key"] = KEY in exc.key
        result["seconds"] = round(time.perf_counter() - t0, 3)
        # The process and the GPU are still usable: the undamaged chunk reads correctly.
        ok = img[0][:16].get()
        result["gpu_usable_after"] = (
            bool(np.array_equal(ok, data[:16])) and float(cupy.arange(10).sum()) == 45.0
        )
        with lg.gpu_zarr_context():
            try:
                zarr.open_array(os.path.join(path, "0"), mode="r")[...]
                result["zarr_context"] = "read"
            except lg.ChunkDecodeError as exc:
                result["zarr_context"] = f"ChunkDecodeError: {exc.reason}"
    with open(out_json, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2] == "1", sys.argv[3])
