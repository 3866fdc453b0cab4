"""Pyramid writes: how fast a volume becomes a multi-level OME-Zarr image on disk.

The test volume is written as an NGFF 0.5 image with a ``--levels`` pyramid (default 4,
2x mean per level), zstd level 3 without checksum, in each layout asked for (``--layouts``:
``zstd-128`` unsharded and ``zstd-64-sharded`` by default; ``zstd-64`` and ``zstd-plane``
also work), by:

* linumpy_gpu: ``write_ome_zarr(path, volume, levels=4, chunks=..., shards=...,
  device=..., overwrite=True)``, from numpy with ``--device cpu`` and from cupy with
  ``--device gpu`` (the pyramid is computed by the writer and timed);
* zarr-python and tensorstore, where installed: the pyramid is computed with numpy first
  and only the writes of the levels are timed (their time leaves out the downsampling);
* ome-zarr-py (``ome_zarr.writer.write_image``, local mean) and ngff-zarr (bin shrink),
  where installed: the library computes its pyramid and that is timed.

GB/s are level-0 input bytes per second of the whole write, best of ``--repeat``. The
output folder is removed before each write (not timed) and files are not flushed to disk:
the clock stops when the writer returns. Every written level 0 is read back with
zarr-python and checked equal to the input. ``--cold`` has no meaning for writes and is
ignored.

Each case runs in a fresh Python process, which also records the peak host memory (RSS)
above what the process held with the input already in memory (``peak_rss_above_output``
in the JSON) and, on the GPU, the peak device memory above the input. Results go to
``--json`` (default ``benchmarks/results/write-<UTC time>.json``) and print as a markdown
table.

With ``--workers 1,2`` linumpy_gpu's write also runs on a dask cluster of that many workers
(a ``distributed.LocalCluster`` of processes on the CPU, a dask-cuda ``LocalCUDACluster`` of
one GPU per worker on the GPU): the volume is made as a dask array persisted on the workers
(numpy, or cupy on their GPUs; not timed), then ``write_ome_zarr(path, volume, ...)`` is
timed while the workers write level 0 and compute and write the pyramid. Each cluster row
names its worker count; the single-process row beside it gives the cluster's overhead.

    python benchmarks/write.py --size small --device cpu
    python benchmarks/write.py --size design --device gpu --layouts zstd-128,zstd-64-sharded
    python benchmarks/write.py --size small --device cpu --no-peers --workers 1,2
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import _common as common
import numpy as np

WRITE_LAYOUTS = [n for n, layout in common.LAYOUTS.items() if layout.writable]
OURS = "linumpy_gpu write_ome_zarr"
PEERS = {
    # name: (module that must be installed, note)
    "zarr-python": ("zarr", "pyramid made with numpy first; only the level writes are timed"),
    "tensorstore": (
        "tensorstore",
        "pyramid made with numpy first; only the level writes are timed",
    ),
    "ome-zarr-py write_image": ("ome_zarr", "pyramid (local mean) computed by the library, timed"),
    "ngff-zarr": ("ngff_zarr", "pyramid (bin shrink) computed by the library, timed"),
}
ZSTD = {"name": "zstd", "configuration": {"level": 3, "checksum": False}}
BYTES = {"name": "bytes", "configuration": {"endian": "little"}}


def add_options(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--levels", type=int, default=4, help="pyramid levels (default: 4)")
    ap.add_argument(
        "--no-peers", action="store_true", help="time linumpy_gpu only (before/after runs)"
    )
    ap.add_argument(
        "--workers",
        help="comma list of worker counts (e.g. 1,2): also write from a dask cluster of that "
        "many workers (LocalCluster on the CPU, LocalCUDACluster on the GPU)",
    )


def input_blocks(
    shape: tuple[int, ...], unit: tuple[int, ...], target: int = 128 << 20
) -> tuple[int, ...]:
    """Dask blocks of whole storage units (uint16), doubled along z, then y, then x while
    they stay within ``target`` bytes."""
    block = [min(u, n) for u, n in zip(unit, shape, strict=True)]
    for axis in (0, 1, 2):
        limit = -(-shape[axis] // unit[axis]) * unit[axis]
        while block[axis] < shape[axis]:
            grown = min(2 * block[axis], limit)
            if int(np.prod(block)) // block[axis] * grown * 2 > target:
                break
            block[axis] = grown
    return tuple(min(b, n) for b, n in zip(block, shape, strict=True))


def _make_block(block: np.ndarray, gpu: bool, block_info: Any = None) -> Any:
    """A block of the test volume, made on the worker (on its GPU with ``gpu``)."""
    (z0, _), (y0, y1), (x0, x1) = block_info[None]["array-location"]
    planes = np.empty((block.shape[0], *block_info[None]["shape"][1:]), dtype=np.uint16)
    common.fill_planes(planes, z0)
    out = planes[:, y0:y1, x0:x1]
    if gpu:
        import cupy

        return cupy.asarray(out)
    return np.ascontiguousarray(out)


def _to_host(block: Any) -> Any:
    return block.get() if hasattr(block, "__cuda_array_interface__") else block


def cluster_case(params: dict[str, Any]) -> dict[str, Any]:
    """linumpy_gpu's write of one layout from a cluster of ``params["workers"]`` workers,
    inside a worker process."""
    out: dict[str, Any] = {}
    scratch = params["out"]
    warm_path, path = scratch + "-warmup.ome.zarr", scratch + ".ome.zarr"
    try:
        import dask.array as da
        from distributed import Client, wait

        import linumpy_gpu

        gpu = params["device"] == "gpu"
        shape = tuple(params["shape"])
        chunks = tuple(params["chunks"])
        shards = tuple(params["shards"]) if params["shards"] else None
        blocks = input_blocks(shape, shards or chunks)
        with (
            common.start_cluster(params["device"], params["workers"]) as cluster,
            Client(cluster),
        ):
            meta = np.empty((0, 0, 0), dtype=np.uint16)
            if gpu:
                import cupy

                meta = cupy.empty((0, 0, 0), dtype=cupy.uint16)
            volume = da.zeros(shape, dtype=np.uint16, chunks=blocks).map_blocks(
                _make_block, gpu, dtype=np.uint16, meta=meta
            )
            volume = volume.persist()
            wait(volume)

            def write(target: str, data: Any = volume) -> Any:
                return linumpy_gpu.write_ome_zarr(
                    target,
                    data,
                    axes="zyx",
                    levels=params["levels"],
                    chunks=chunks,
                    shards=shards,
                    device=params["device"],
                    overwrite=True,
                    checksum=False,
                )

            small = tuple(slice(0, min(n, 2 * b)) for n, b in zip(shape, blocks, strict=True))
            write(warm_path, volume[small])  # workers import and open their backends
            shutil.rmtree(warm_path, ignore_errors=True)
            write(path)
            host = volume.map_blocks(_to_host, meta=np.empty((0, 0, 0), dtype=np.uint16))
            written = da.from_zarr(os.path.join(path, level_paths(path)[0]), chunks=blocks)
            out["equal_to_reference"] = not bool((host != written).any().compute())
            out["extra"] = {"workers": params["workers"], "input_blocks": list(blocks)}
            if len(level_paths(path)) != params["levels"]:
                out["error"] = (
                    f"{len(level_paths(path))} levels written, {params['levels']} asked for"
                )
            if not out["equal_to_reference"]:
                out["error"] = "level 0 read back differs from the input; not timed"
                return out
            seconds = []
            for _ in range(params["repeat"]):
                shutil.rmtree(path, ignore_errors=True)
                t0 = time.perf_counter()
                write(path)
                seconds.append(time.perf_counter() - t0)
            out["warm"] = seconds
    except Exception as exc:  # no distributed / dask-cuda, or a failed write: reported
        out["error"] = common.describe_error(exc)
    finally:
        shutil.rmtree(path, ignore_errors=True)
        shutil.rmtree(warm_path, ignore_errors=True)
    return out


def level_layout(
    shape: tuple[int, ...], chunks: tuple[int, ...], shards: tuple[int, ...] | None
) -> tuple[tuple[int, ...], tuple[int, ...] | None]:
    """Chunks and shards of one level: chunks no larger than the level, shards a whole
    number of chunks no larger than needed to cover it."""
    c = tuple(min(a, n) for a, n in zip(chunks, shape, strict=True))
    if shards is None:
        return c, None
    s = tuple(max(k, min(a, -(-n // k) * k)) for a, k, n in zip(shards, c, shape, strict=True))
    return c, s


def mean_pyramid(volume: np.ndarray, levels: int) -> list[np.ndarray]:
    """2x mean per level on every axis (an odd edge is padded with its last plane),
    computed in slabs so float temporaries stay small."""
    out = [volume]
    for _ in range(1, levels):
        a = out[-1]
        half = tuple(-(-n // 2) for n in a.shape)
        b = np.empty(half, dtype=a.dtype)
        for z in range(0, a.shape[0], 64):
            slab = a[z : z + 64].astype(np.float32)
            pad = [(0, n % 2) for n in slab.shape]
            if any(p[1] for p in pad):
                slab = np.pad(slab, pad, mode="edge")
            nz, ny, nx = (n // 2 for n in slab.shape)
            mean = slab.reshape(nz, 2, ny, 2, nx, 2).mean(axis=(1, 3, 5))
            b[z // 2 : z // 2 + nz] = np.rint(mean).astype(a.dtype)
        out.append(b)
    return out


def level_paths(path: str) -> list[str]:
    """The dataset paths of the image at ``path``, from its NGFF metadata (0.4 or 0.5)."""
    import zarr

    attrs = dict(zarr.open_group(path, mode="r").attrs)
    block = attrs.get("ome", attrs)
    return [d["path"] for d in block["multiscales"][0]["datasets"]]


def writer_for(
    name: str, params: dict[str, Any], data: Any, device: common.Device
) -> tuple[Callable[[str], Any], Callable[[str], Any]]:
    """``(write, warm-up)`` for one writer; each takes the output path."""
    chunks = tuple(params["chunks"])
    shards = tuple(params["shards"]) if params["shards"] else None
    levels = params["levels"]
    small = tuple(min(n, 2 * c) for n, c in zip(data.shape, chunks, strict=True))

    if name == OURS:
        import linumpy_gpu

        def ours(path: str, volume: Any = data) -> Any:
            kwargs: dict[str, Any] = {"chunks": chunks}
            if shards is not None:
                kwargs["shards"] = shards
            return linumpy_gpu.write_ome_zarr(
                path,
                volume,
                axes="zyx",
                levels=levels,
                device=params["device"],
                overwrite=True,
                checksum=False,
                **kwargs,
            )

        return ours, lambda path: ours(path, data[tuple(slice(0, n) for n in small)].copy())

    host = device.to_host(data)
    if name in ("zarr-python", "tensorstore"):
        pyramid = mean_pyramid(host, levels)
        write = write_zarr_python if name == "zarr-python" else write_tensorstore

        def levels_write(path: str, pyr: list[np.ndarray] = pyramid) -> None:
            write(path, pyr, chunks, shards)

        tiny = mean_pyramid(host[tuple(slice(0, n) for n in small)].copy(), levels)
        return levels_write, lambda path: levels_write(path, tiny)
    if name == "ome-zarr-py write_image":

        def ome_zarr_write(path: str, volume: np.ndarray = host) -> None:
            import zarr
            from ome_zarr.scale import Methods
            from ome_zarr.writer import write_image
            from zarr.codecs import ZstdCodec

            shapes = [tuple(-(-n // 2**i) for n in volume.shape) for i in range(levels)]
            options = []
            for shape in shapes:
                c, s = level_layout(shape, chunks, shards)
                opt: dict[str, Any] = {"chunks": c, "compressor": ZstdCodec(level=3)}
                if s is not None:
                    opt["shards"] = s
                options.append(opt)
            root = zarr.open_group(path, mode="w", zarr_format=3)
            factors = [{"z": 2**i, "y": 2**i, "x": 2**i} for i in range(1, levels)]
            write_image(
                volume,
                root,
                scale_factors=factors,
                axes="zyx",
                storage_options=options,
                method=Methods.LOCAL_MEAN,
            )

        return ome_zarr_write, lambda path: ome_zarr_write(
            path, host[tuple(slice(0, n) for n in small)]
        )
    if name == "ngff-zarr":

        def ngff_zarr_write(path: str, volume: np.ndarray = host) -> None:
            import ngff_zarr
            from zarr.codecs import ZstdCodec

            image = ngff_zarr.to_ngff_image(volume, dims=["z", "y", "x"])
            multiscales = ngff_zarr.to_multiscales(
                image,
                scale_factors=[2**i for i in range(1, levels)],
                method=ngff_zarr.Methods.DASK_BIN_SHRINK,
                chunks=chunks,
            )
            kwargs: dict[str, Any] = {}
            if shards is not None:
                kwargs["chunks_per_shard"] = tuple(
                    s // c for s, c in zip(shards, chunks, strict=True)
                )
            ngff_zarr.to_ngff_zarr(
                path, multiscales, version="0.5", compressors=[ZstdCodec(level=3)], **kwargs
            )

        return ngff_zarr_write, lambda path: ngff_zarr_write(
            path, host[tuple(slice(0, n) for n in small)]
        )
    raise ValueError(f"unknown writer {name!r}")


def write_zarr_python(
    path: str, pyramid: list[np.ndarray], chunks: tuple[int, ...], shards: tuple[int, ...] | None
) -> None:
    import zarr
    from zarr.codecs import ZstdCodec

    root = zarr.open_group(path, mode="w", zarr_format=3)
    for i, level in enumerate(pyramid):
        c, s = level_layout(level.shape, chunks, shards)
        arr = root.create_array(
            str(i),
            shape=level.shape,
            dtype=level.dtype,
            chunks=c,
            shards=s,
            compressors=[ZstdCodec(level=3)],
            fill_value=0,
            dimension_names=["z", "y", "x"],
        )
        arr[...] = level
    root.attrs.update(common.ome_attributes(3, [str(i) for i in range(len(pyramid))]))


def write_tensorstore(
    path: str, pyramid: list[np.ndarray], chunks: tuple[int, ...], shards: tuple[int, ...] | None
) -> None:
    """Every level through tensorstore's zarr3 driver, all level writes in flight at once
    (tensorstore's asynchronous way); the group metadata is a small JSON file."""
    import tensorstore as ts

    pending = []
    for i, level in enumerate(pyramid):
        c, s = level_layout(level.shape, chunks, shards)
        if s is None:
            grid, codecs = c, [BYTES, ZSTD]
        else:
            inner = {
                "chunk_shape": list(c),
                "codecs": [BYTES, ZSTD],
                "index_codecs": [BYTES, {"name": "crc32c"}],
            }
            grid, codecs = s, [{"name": "sharding_indexed", "configuration": inner}]
        spec = {
            "driver": "zarr3",
            "kvstore": {"driver": "file", "path": os.path.join(path, str(i))},
            "metadata": {
                "shape": list(level.shape),
                "data_type": "uint16",
                "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": list(grid)}},
                "chunk_key_encoding": {"name": "default"},
                "codecs": codecs,
                "fill_value": 0,
                "dimension_names": ["z", "y", "x"],
            },
            "create": True,
            "delete_existing": True,
        }
        store = ts.open(spec).result()
        pending.append(store.write(level))
    for future in pending:
        future.result()
    group = {
        "zarr_format": 3,
        "node_type": "group",
        "attributes": common.ome_attributes(3, [str(i) for i in range(len(pyramid))]),
    }
    with open(os.path.join(path, "zarr.json"), "w") as f:
        json.dump(group, f)


def make_input(shape: tuple[int, ...], device: common.Device) -> Any:
    """The test volume in numpy, or in cupy made a few planes at a time (so the host never
    holds the whole volume and the host baseline stays honest)."""
    if not device.gpu:
        return common.make_volume(shape)
    out = device.cupy.empty(shape, dtype=device.cupy.uint16)
    step = 4

    def fill(z: int) -> None:
        part = np.empty((min(step, shape[0] - z), *shape[1:]), dtype=np.uint16)
        common.fill_planes(part, z)
        out[z : z + len(part)] = device.cupy.asarray(part)
        device.sync()

    # four slabs in flight at most: a few tens of MB of host memory
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(fill, range(0, shape[0], step)))
    return out


def case(params: dict[str, Any]) -> dict[str, Any]:
    """One writer of one layout on one device, inside a worker process."""
    import zarr

    device = common.Device(params["device"])
    scratch = params["out"]
    warm_path, path = scratch + "-warmup.ome.zarr", scratch + ".ome.zarr"
    out: dict[str, Any] = {}
    try:
        data = make_input(tuple(params["shape"]), device)
        write, warmup = writer_for(params["writer"], params, data, device)
        warmup(warm_path)
        shutil.rmtree(warm_path, ignore_errors=True)
        _, memory = common.measured_call(lambda: write(path), device)
        out.update(memory)
        paths = level_paths(path)
        written = zarr.open_array(os.path.join(path, paths[0]), mode="r")[...]
        out["equal_to_reference"] = common.equal(data, written, device)
        del written
        if len(paths) != params["levels"]:
            out["error"] = f"{len(paths)} levels written, {params['levels']} asked for"
        if not out["equal_to_reference"]:
            out["error"] = "level 0 read back differs from the input; not timed"
            return out
        seconds = []
        for _ in range(params["repeat"]):
            shutil.rmtree(path, ignore_errors=True)
            seconds += common.time_calls(lambda: write(path), device, 1)
        out["warm"] = seconds
    except Exception as exc:  # a writer that cannot write this layout is reported, not fatal
        out["error"] = common.describe_error(exc)
    finally:
        shutil.rmtree(path, ignore_errors=True)
        shutil.rmtree(warm_path, ignore_errors=True)
    return out


def main() -> None:
    args = common.parse_args(
        "write",
        __doc__,
        default_layouts=["zstd-128", "zstd-64-sharded"],
        allowed_layouts=WRITE_LAYOUTS,
        add_options=add_options,
    )
    if args.levels < 1:
        raise SystemExit("--levels must be at least 1")
    counts = common.worker_counts(args.workers)
    if args.cold:
        print("write.py: --cold has no meaning for writes; ignored")
    run = common.Run(args, __file__, case_label="writer", rss_label="RSS above input")
    nbytes = int(np.prod(args.shape)) * 2
    for name in args.layouts:
        layout = common.LAYOUTS[name]
        chunks = layout.chunk_shape(args.shape)
        shards = layout.shard_shape(args.shape)
        print(f"\n## {name}: chunks {chunks}, shards {shards}, {args.levels} levels", flush=True)
        writers = [(device, OURS, "") for device in args.devices]
        if not args.no_peers:
            writers += [("cpu", peer, note) for peer, (_, note) in PEERS.items()]
        for device, writer, note in writers:
            module = PEERS.get(writer, ("linumpy_gpu", ""))[0]
            if not common.installed(module):
                run.skip(
                    layout=name, device=device, reader=writer, nbytes=nbytes, note="not installed"
                )
                continue
            params = {
                "writer": writer,
                "device": device,
                "shape": list(args.shape),
                "chunks": list(chunks),
                "shards": list(shards) if shards else None,
                "levels": args.levels,
                "repeat": args.repeat,
                "out": os.path.join(run.dir, f"write-{name}-{device}"),
            }
            result = run.worker("case", params)
            extra = {"workers": 0} if counts and writer == OURS else {}
            run.add(
                layout=name,
                device=device,
                reader=writer,
                nbytes=nbytes,
                result=result,
                note=note,
                **extra,
            )
            if writer != OURS:
                continue
            single = min(result.get("warm") or [0]) or None
            for n in counts:
                cluster = run.worker(
                    "cluster_case", {**params, "workers": n, "out": f"{params['out']}-{n}w"}
                )
                best = min(cluster.get("warm") or [0]) or None
                overhead = ""
                if single and best:
                    overhead = f"{100 * (best / single - 1):+.0f}% time vs one process"
                run.add(
                    layout=name,
                    device=device,
                    reader=f"{OURS} on {n} worker(s)",
                    nbytes=nbytes,
                    result=cluster,
                    note=overhead,
                    single_process_seconds=single,
                )
    run.finish()


if __name__ == "__main__":
    common.entry(main)
