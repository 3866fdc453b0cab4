"""Full-level reads: how fast linumpy_gpu brings a whole level into numpy or cupy.

For every layout asked for (``--layouts``; ``--help`` lists them) a test volume is written
once into ``--dir``, then ``linumpy_gpu.open_ome_zarr(path, device=...)[0].read()`` reads
level 0 whole, on each ``--device``. Every read is first checked equal to zarr-python's
read of the same store, then timed ``--repeat`` times with a warm page cache; the best time
counts. GB/s are decoded bytes landing in numpy (cpu) or cupy (gpu: the device is
synchronised before the clock stops) per second. With ``--cold`` the store's files are
dropped from the page cache before each of ``--repeat`` more reads, and the cold GB/s are
reported too.

Each case runs in a fresh Python process, which also records the peak host memory (RSS)
above the result and, on the GPU, the peak device memory. Results go to ``--json``
(default ``benchmarks/results/read-<UTC time>.json``) and print as a markdown table.

With ``--workers 1,2`` each case also runs on a dask cluster of that many workers: a
``distributed.LocalCluster`` of processes on the CPU, a dask-cuda ``LocalCUDACluster`` (one
GPU per worker) on the GPU. There ``level.to_dask(chunks=--task-size)`` is persisted on
the workers (the blocks stay in the workers' memory or GPUs, nothing comes back) and timed
from the call to the last block read and the devices synchronised; the blocks are checked
equal to zarr-python's read on the workers. Each cluster row names its worker count, and
the single-process row beside it gives the cluster's overhead.

    python benchmarks/read.py --size small --device cpu
    python benchmarks/read.py --size design --device gpu --cold
    python benchmarks/read.py --quick --device cpu,gpu
    python benchmarks/read.py --size small --device cpu --workers 1,2
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import _common as common

READER = "linumpy_gpu read()"
CLUSTER_READER = "linumpy_gpu to_dask() on {n} worker(s)"


def add_options(ap: argparse.ArgumentParser) -> None:
    ap.add_argument(
        "--workers",
        help="comma list of worker counts (e.g. 1,2): also read through a dask cluster of "
        "that many workers (LocalCluster on the CPU, LocalCUDACluster on the GPU)",
    )
    ap.add_argument(
        "--task-size",
        default="auto",
        help="to_dask(chunks=...) on the cluster: 'auto' (whole storage units up to dask's "
        "array.chunk-size), a size such as 256MiB, or 'unit' (one shard or chunk per task)",
    )


def _to_host(block: Any) -> Any:
    return block.get() if hasattr(block, "__cuda_array_interface__") else block


def _sync_device() -> None:
    import cupy

    cupy.cuda.Device().synchronize()


def cluster_case(params: dict[str, Any]) -> dict[str, Any]:
    """One layout read on a cluster of ``params["workers"]`` workers, inside a worker
    process: persisted on the workers, timed, checked there against zarr-python."""
    out: dict[str, Any] = {}
    try:
        import dask.array as da
        import numpy as np
        from distributed import Client, wait

        import linumpy_gpu

        gpu = params["device"] == "gpu"
        chunks = None if params["task_size"] == "unit" else params["task_size"]
        with (
            common.start_cluster(params["device"], params["workers"]) as cluster,
            Client(cluster) as client,
        ):
            # every image stays open: each repeat's dask array has its own keys (opening
            # the image, metadata only, is not timed)
            images = [
                linumpy_gpu.open_ome_zarr(params["image_path"], device=params["device"])
                for _ in range(params["repeat"] + 1)
            ]

            def read(img: Any) -> Any:
                blocks = img.to_dask(0, chunks=chunks).persist()
                wait(blocks)
                if gpu:
                    client.run(_sync_device)
                return blocks

            first = read(images[0])  # warm-up: workers start their backends, open the store
            reference = da.from_zarr(params["array_path"], chunks=first.chunks)
            host = first.map_blocks(_to_host, meta=np.empty((0,) * first.ndim, first.dtype))
            out["equal_to_reference"] = not bool((host != reference).any().compute())
            out["extra"] = {"workers": params["workers"], "tasks": first.npartitions}
            client.cancel(first)
            del first, host
            if not out["equal_to_reference"]:
                out["error"] = "result differs from zarr-python's read; not timed"
                return out
            seconds = []
            for img in images[1:]:
                t0 = time.perf_counter()
                blocks = read(img)
                seconds.append(time.perf_counter() - t0)
                client.cancel(blocks)
                del blocks
            out["warm"] = seconds
    except Exception as exc:  # no distributed / dask-cuda, or a failed read: reported
        out["error"] = common.describe_error(exc)
    return out


def case(params: dict[str, Any]) -> dict[str, Any]:
    """One layout on one device, inside a worker process."""
    import zarr

    import linumpy_gpu

    device = common.Device(params["device"])
    try:
        level = linumpy_gpu.open_ome_zarr(params["image_path"], device=params["device"])[0]
    except Exception as exc:  # an older release or a missing GPU stack: reported, not fatal
        return {"error": common.describe_error(exc)}
    corner = (slice(0, 1),) * 3
    return common.read_case(
        read=level.read,
        warmup=lambda: level[corner],
        check=lambda got: common.equal(
            got, zarr.open_array(params["array_path"], mode="r")[...], device
        ),
        device=device,
        repeat=params["repeat"],
        cold=params["cold"],
        files=common.array_files(params["array_path"]),
    )


def main() -> None:
    args = common.parse_args("read", __doc__, add_options=add_options)
    counts = common.worker_counts(args.workers)
    run = common.Run(args, __file__)
    for name in args.layouts:
        store = run.store(name)
        for device in args.devices:
            params = {
                "image_path": store.image_path,
                "array_path": store.array_path,
                "device": device,
                "repeat": args.repeat,
                "cold": args.cold,
            }
            result = run.worker("case", params)
            extra = {"workers": 0} if counts else {}
            run.add(
                layout=name,
                device=device,
                reader=READER,
                nbytes=store.nbytes,
                result=result,
                **extra,
            )
            single = min(result.get("warm") or [0]) or None
            for n in counts:
                cluster = run.worker(
                    "cluster_case", {**params, "workers": n, "task_size": args.task_size}
                )
                best = min(cluster.get("warm") or [0]) or None
                note = ""
                if single and best:
                    note = f"{100 * (best / single - 1):+.0f}% time vs one process"
                run.add(
                    layout=name,
                    device=device,
                    reader=CLUSTER_READER.format(n=n),
                    nbytes=store.nbytes,
                    result=cluster,
                    note=note,
                    single_process_seconds=single,
                )
    run.finish()


if __name__ == "__main__":
    common.entry(main)
