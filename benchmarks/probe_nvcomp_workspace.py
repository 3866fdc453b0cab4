"""How much workspace nvCOMP's zstd decoder needs, and how fast it decodes with it.

    python benchmarks/probe_nvcomp_workspace.py [--chunks 128,128,128 64,64,64 1,1024,1024]

For batches of the benchmark's chunks (zstd level 3, ratio about 1.55), compares the
workspace ``nvcompBatchedZstdDecompressGetTempSize`` asks for (from sizes alone) with what
``nvcompBatchedZstdDecompressGetTempSizeSync`` asks for after reading the frames, times the
decode with each, checks every decoded chunk against the CPU's, and tries the CUDA backend
option explicitly. Prints one line per batch size and writes JSON with ``--json``.
"""

from __future__ import annotations

import ctypes
import os
import sys
import threading
import time

import numcodecs
import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from gpu_volume import chunk_data, probe_main  # noqa: E402

DISTINCT = 32  # distinct frames; larger batches reuse them (inputs may alias)


def bind_sync(api) -> None:
    fn = api.lib.nvcompBatchedZstdDecompressGetTempSizeSync
    fn.argtypes = [
        ctypes.c_void_p,
        ctypes.c_void_p,
        ctypes.c_size_t,
        ctypes.c_size_t,
        ctypes.c_void_p,
        ctypes.c_size_t,
        type(api.dopts),
        ctypes.c_void_p,
        ctypes.c_void_p,
    ]
    fn.restype = ctypes.c_int


def size_from_frames(api, ptrs: int, sizes: int, n: int, nbytes: int, stream_ptr: int):
    """(status, workspace bytes, seconds) of nvCOMP sizing the ``n`` frames whose pointers
    (device or pinned host memory) are in the device array at ``ptrs``."""
    out = ctypes.c_size_t(0)
    t0 = time.perf_counter()
    status = api.lib.nvcompBatchedZstdDecompressGetTempSizeSync(
        ptrs, sizes, n, nbytes, ctypes.byref(out), n * nbytes, api.dopts, None, stream_ptr
    )
    return int(status), int(out.value), time.perf_counter() - t0


def probe(shape: tuple[int, ...], batch_sizes: list[int], repeat: int) -> list[dict]:
    import cupy

    from linumpy_gpu.gpu.nvcomp_lib import DecompressOpts, zstd_api

    api = zstd_api()
    bind_sync(api)
    nbytes = int(np.prod(shape)) * 2
    codec = numcodecs.Zstd(level=3)
    raws = [chunk_data((i, 0, 0), shape) for i in range(DISTINCT)]
    frames = [codec.encode(r) for r in raws]
    align = 256
    offsets, pos = [], 0
    for f in frames:
        offsets.append(pos)
        pos += -(-len(f) // align) * align
    host = np.zeros(pos, dtype=np.uint8)
    for f, off in zip(frames, offsets, strict=True):
        host[off : off + len(f)] = np.frombuffer(f, np.uint8)
    comp = cupy.asarray(host)
    expected = cupy.asarray(np.stack([r.view(np.uint8).reshape(-1) for r in raws]))
    stream = cupy.cuda.Stream(non_blocking=True)
    rows = []
    for n in batch_sizes:
        idx = np.arange(n) % DISTINCT
        in_ptrs = cupy.asarray(np.uint64(comp.data.ptr) + np.asarray(offsets, np.uint64)[idx])
        in_sizes = cupy.asarray(np.asarray([len(f) for f in frames], np.uint64)[idx])
        out = cupy.empty((n, nbytes), dtype=np.uint8)
        out_ptrs = cupy.asarray(
            np.uint64(out.data.ptr) + np.arange(n, dtype=np.uint64) * np.uint64(nbytes)
        )
        out_sizes = cupy.full(n, nbytes, dtype=np.uint64)
        actual = cupy.empty(n, dtype=np.uint64)
        statuses = cupy.empty(n, dtype=np.int32)
        cupy.cuda.Device().synchronize()
        row: dict = {"chunk": list(shape), "chunk_bytes": nbytes, "n": n}
        row["temp_async"] = api.decompress_temp_bytes(n, nbytes, n * nbytes, stream.ptr)
        row["sync_status"], row["temp_sync"], row["sync_seconds"] = size_from_frames(
            api, in_ptrs.data.ptr, in_sizes.data.ptr, n, nbytes, stream.ptr
        )
        # the same sizing reading the frames straight from pinned host memory (device
        # accessible under unified addressing), as a fetch thread could before upload
        pinned_mem = cupy.cuda.alloc_pinned_memory(host.nbytes)
        pinned = np.frombuffer(pinned_mem, np.uint8, host.nbytes)
        pinned[:] = host
        host_ptrs = cupy.asarray(
            np.uint64(pinned.ctypes.data) + np.asarray(offsets, np.uint64)[idx]
        )
        pinned_status, row["temp_sync_pinned"], row["sync_pinned_seconds"] = size_from_frames(
            api, host_ptrs.data.ptr, in_sizes.data.ptr, n, nbytes, stream.ptr
        )
        row["sync_pinned_status"] = pinned_status
        # sizing one batch from pinned memory on a second thread and stream while this
        # thread decodes another: does either slow the other?
        temp = cupy.empty(max(1, row["temp_async"]), dtype=np.uint8)
        other = cupy.cuda.Stream(non_blocking=True)
        sized = {}

        def size_beside(ptrs: int, sizes: int, n: int, stream_ptr: int, sized: dict) -> None:
            with cupy.cuda.Device(0):
                _, sized["bytes"], sized["seconds"] = size_from_frames(
                    api, ptrs, sizes, n, nbytes, stream_ptr
                )

        cupy.cuda.Device().synchronize()
        t0 = time.perf_counter()
        worker = threading.Thread(
            target=size_beside,
            args=(host_ptrs.data.ptr, in_sizes.data.ptr, n, other.ptr, sized),
        )
        worker.start()
        api.lib.nvcompBatchedZstdDecompressAsync(
            in_ptrs.data.ptr,
            in_sizes.data.ptr,
            out_sizes.data.ptr,
            actual.data.ptr,
            n,
            temp.data.ptr,
            row["temp_async"],
            out_ptrs.data.ptr,
            api.dopts,
            statuses.data.ptr,
            stream.ptr,
        )
        stream.synchronize()
        row["decode_beside_sizing_seconds"] = time.perf_counter() - t0
        worker.join()
        row["sizing_beside_decode_seconds"] = sized["seconds"]
        row["both_ok"] = sized["bytes"] == row["temp_sync"] and bool(
            (out == expected[cupy.asarray(idx)]).all()
        )
        del temp, pinned, pinned_mem
        print(
            f"  pinned sizing {row['sync_pinned_seconds'] * 1e3:.1f} ms "
            f"({row['temp_sync_pinned'] / (n * nbytes):.2f}x, status {pinned_status}); decode beside "
            f"sizing {row['decode_beside_sizing_seconds'] * 1e3:.1f} ms, sizing beside decode "
            f"{sized['seconds'] * 1e3:.1f} ms, ok {row['both_ok']}",
            flush=True,
        )
        variants = [("async", row["temp_async"], api.dopts)]
        if row["sync_status"] == 0:
            variants.append(("sync", row["temp_sync"], api.dopts))
        cuda_opts = DecompressOpts()
        cuda_opts.backend = 2  # NVCOMP_DECOMPRESS_BACKEND_CUDA
        variants.append(("async_cuda_backend", row["temp_async"], cuda_opts))
        for label, temp_bytes, opts in variants:
            temp = cupy.empty(max(1, temp_bytes), dtype=np.uint8)
            times = []
            for _ in range(repeat):
                out.fill(0)
                cupy.cuda.Device().synchronize()
                t0 = time.perf_counter()
                rc = api.lib.nvcompBatchedZstdDecompressAsync(
                    in_ptrs.data.ptr,
                    in_sizes.data.ptr,
                    out_sizes.data.ptr,
                    actual.data.ptr,
                    n,
                    temp.data.ptr,
                    temp_bytes,
                    out_ptrs.data.ptr,
                    opts,
                    statuses.data.ptr,
                    stream.ptr,
                )
                stream.synchronize()
                times.append(time.perf_counter() - t0)
                if rc != 0:
                    break
            ok = (
                rc == 0
                and int((statuses != 0).sum()) == 0
                and bool((actual == nbytes).all())
                and bool((out == expected[cupy.asarray(idx)]).all())
            )
            row[f"{label}_ok"] = ok
            row[f"{label}_rc"] = int(rc)
            row[f"{label}_seconds"] = min(times)
            row[f"{label}_gbps"] = n * nbytes / min(times) / 1e9
            del temp
        print(
            f"{shape} n={n}: temp async {row['temp_async'] / (n * nbytes):.2f}x "
            f"sync {row['temp_sync'] / (n * nbytes):.2f}x (status {row['sync_status']}, "
            f"{row['sync_seconds'] * 1e3:.1f} ms); decode GB/s "
            + ", ".join(
                f"{label} {row[f'{label}_gbps']:.1f}{'' if row[f'{label}_ok'] else ' WRONG'}"
                for label, _, _ in variants
            ),
            flush=True,
        )
        rows.append(row)
        del out, in_ptrs, in_sizes, out_ptrs
        cupy.get_default_memory_pool().free_all_blocks()
    return rows


if __name__ == "__main__":
    probe_main(probe, ["128,128,128", "64,64,64", "1,1024,1024"], "16,64,128,256,512")
