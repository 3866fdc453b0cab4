"""Can nvCOMP's zstd decoder read its frames, or keep its workspace, in pinned host memory?

    python benchmarks/probe_zero_copy.py [--chunks 128,128,128 1,1024,1024] [--json F]

The engine copies every batch's compressed frames from pinned staging to the device before
decoding: a copy on the critical path (about 1/53 GB/s per byte) and a device buffer that
takes about 0.65x of the batch's decoded size from the memory budget. Pinned memory is
device-accessible under unified addressing, so the copy could be skipped. This probe
decodes the same distinct frames (the benchmark's data, zstd level 3) both ways, times
copy + frame check + decode against frame check + decode from host memory, and checks every
decoded byte against the CPU's.

nvCOMP's workspace (3.05x a batch's decoded bytes, sized from sizes alone) is what bounds a
batch within the read's device-memory budget. A third way keeps it in pinned host memory
(frames copied to the device as usual): if nvCOMP decodes at a like speed, batches could be
several times larger. One line per batch size; JSON with ``--json``.
"""

from __future__ import annotations

import ctypes
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

import numcodecs
import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from gpu_volume import chunk_data, probe_main  # noqa: E402


def _frames(shape: tuple[int, ...], n: int) -> tuple[list[bytes], list[np.ndarray]]:
    codec = numcodecs.Zstd(level=3)

    def one(i: int):
        raw = chunk_data((i, 0, 0), shape)
        return codec.encode(raw), raw

    with ThreadPoolExecutor(os.cpu_count()) as pool:
        pairs = list(pool.map(one, range(n)))
    return [p[0] for p in pairs], [p[1] for p in pairs]


MODES = {  # label: (frames read from pinned host memory, workspace in pinned host memory)
    "device": (False, False),
    "host": (True, False),
    "host_workspace": (False, True),
}


def _run(b: SimpleNamespace, mode: str) -> tuple[float, float, float, bool]:
    """(copy, check, decode seconds, every byte right) of one decode of the batch ``b``."""
    from_host, host_temp = MODES[mode]
    import cupy

    from linumpy_gpu.gpu.kernels import kernel

    b.out.fill(0)
    cupy.cuda.Device().synchronize()
    t0 = time.perf_counter()
    with b.stream:
        if not from_host:
            b.comp.data.copy_from_host_async(
                ctypes.c_void_p(b.pinned.ctypes.data), b.comp_bytes, b.stream
            )
        b.stream.synchronize()
        t_copy = time.perf_counter()
        src = b.host_base if from_host else b.comp  # a raw address where a pointer goes
        kernel("zstd_frame_check")(
            ((b.n + 127) // 128,),
            (128,),
            (src, b.d_offsets, b.d_sizes, b.expect_n, np.int32(b.n), b.check_status, b.stored),
        )
        b.stream.synchronize()
        t_check = time.perf_counter()
    rc = b.api.lib.nvcompBatchedZstdDecompressAsync(
        (b.host_ptrs if from_host else b.dev_ptrs).data.ptr,
        b.d_sizes.data.ptr,
        b.expect_n.data.ptr,
        b.actual.data.ptr,
        b.n,
        b.host_temp.ctypes.data if host_temp else b.temp.data.ptr,
        b.temp_bytes,
        b.out_ptrs.data.ptr,
        b.api.dopts,
        b.statuses.data.ptr,
        b.stream.ptr,
    )
    b.stream.synchronize()
    t_end = time.perf_counter()
    ok = (
        rc == 0
        and int((b.check_status > 1).sum() + (b.check_status < 0).sum()) == 0
        and int((b.statuses != 0).sum()) == 0
        and bool((b.actual == b.nbytes).all())
        and bool((b.out == b.expected).all())
    )
    return t_copy - t0, t_check - t_copy, t_end - t_check, ok


def probe(shape: tuple[int, ...], batch_sizes: list[int], repeat: int) -> list[dict]:
    import cupy

    from linumpy_gpu.gpu.nvcomp_lib import zstd_api

    api = zstd_api()
    nbytes = int(np.prod(shape)) * 2
    frames, raws = _frames(shape, max(batch_sizes))
    offsets = np.zeros(len(frames), dtype=np.uint64)
    sizes = np.array([len(f) for f in frames], dtype=np.uint64)
    np.cumsum(sizes[:-1], out=offsets[1:])
    total = int(sizes.sum())
    pinned_mem = cupy.cuda.alloc_pinned_memory(total)
    pinned = np.frombuffer(pinned_mem, np.uint8, total)
    for f, off in zip(frames, offsets, strict=True):
        pinned[int(off) : int(off) + len(f)] = np.frombuffer(f, np.uint8)
    host_base = np.uint64(pinned.ctypes.data)
    stream = cupy.cuda.Stream(non_blocking=True)
    rows = []
    for n in batch_sizes:
        comp_bytes = int(offsets[n - 1] + sizes[n - 1])
        comp = cupy.empty(comp_bytes, dtype=np.uint8)
        out = cupy.empty((n, nbytes), dtype=np.uint8)
        out_ptrs = cupy.asarray(
            np.uint64(out.data.ptr) + np.arange(n, dtype=np.uint64) * np.uint64(nbytes)
        )
        d_sizes = cupy.asarray(sizes[:n])
        d_offsets = cupy.asarray(offsets[:n])
        expect_n = cupy.full(n, nbytes, dtype=np.uint64)
        dev_ptrs = cupy.asarray(np.uint64(comp.data.ptr) + offsets[:n])
        host_ptrs = cupy.asarray(host_base + offsets[:n])
        temp_bytes = api.decompress_temp_bytes(n, nbytes, n * nbytes, stream.ptr)
        temp = cupy.empty(max(1, temp_bytes), dtype=np.uint8)
        host_temp_mem = cupy.cuda.alloc_pinned_memory(max(1, temp_bytes))
        host_temp = np.frombuffer(host_temp_mem, np.uint8, max(1, temp_bytes))
        actual = cupy.empty(n, dtype=np.uint64)
        statuses = cupy.empty(n, dtype=np.int32)
        check_status = cupy.empty(n, dtype=np.int32)
        stored = cupy.empty(n, dtype=np.uint32)
        expected = cupy.asarray(np.stack([r.view(np.uint8).reshape(-1) for r in raws[:n]]))
        b = SimpleNamespace(
            api=api,
            n=n,
            nbytes=nbytes,
            stream=stream,
            pinned=pinned,
            host_base=host_base,
            comp=comp,
            comp_bytes=comp_bytes,
            out=out,
            out_ptrs=out_ptrs,
            d_sizes=d_sizes,
            d_offsets=d_offsets,
            expect_n=expect_n,
            dev_ptrs=dev_ptrs,
            host_ptrs=host_ptrs,
            temp=temp,
            host_temp=host_temp,
            temp_bytes=temp_bytes,
            actual=actual,
            statuses=statuses,
            check_status=check_status,
            stored=stored,
            expected=expected,
        )
        row: dict = {"chunk": list(shape), "chunk_bytes": nbytes, "n": n, "comp_bytes": comp_bytes}

        for label in MODES:
            best = None
            oks = []
            for _ in range(repeat):
                copy_s, check_s, decode_s, ok = _run(b, label)
                oks.append(ok)
                if best is None or copy_s + check_s + decode_s < sum(best):
                    best = (copy_s, check_s, decode_s)
            row[f"{label}_copy_s"], row[f"{label}_check_s"], row[f"{label}_decode_s"] = best
            row[f"{label}_total_s"] = sum(best)
            row[f"{label}_gbps"] = n * nbytes / sum(best) / 1e9
            row[f"{label}_ok"] = all(oks)
        print(
            f"{shape} n={n} ({comp_bytes / 2**20:.0f} MiB stored): "
            f"device copy {row['device_copy_s'] * 1e3:.1f} + check "
            f"{row['device_check_s'] * 1e3:.1f} + decode {row['device_decode_s'] * 1e3:.1f} ms "
            f"= {row['device_gbps']:.1f} GB/s{'' if row['device_ok'] else ' WRONG'}; "
            f"host check {row['host_check_s'] * 1e3:.1f} + decode "
            f"{row['host_decode_s'] * 1e3:.1f} ms = {row['host_gbps']:.1f} GB/s"
            f"{'' if row['host_ok'] else ' WRONG'}; workspace in host memory "
            f"({temp_bytes / 2**20:.0f} MiB): copy {row['host_workspace_copy_s'] * 1e3:.1f} + "
            f"decode {row['host_workspace_decode_s'] * 1e3:.1f} ms = "
            f"{row['host_workspace_gbps']:.1f} GB/s"
            f"{'' if row['host_workspace_ok'] else ' WRONG'}",
            flush=True,
        )
        rows.append(row)
        del comp, out, temp, host_temp, host_temp_mem, expected, b
        cupy.get_default_memory_pool().free_all_blocks()
    return rows


if __name__ == "__main__":
    probe_main(probe, ["128,128,128", "1,1024,1024"], "32,128,256")
