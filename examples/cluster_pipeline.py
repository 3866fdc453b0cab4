"""A reconstruction-style pipeline on a dask cluster: read level 0, filter, write a pyramid.

    python examples/cluster_pipeline.py [--workers N] [--cpu] [--keep DIR]

With a GPU, dask-cuda and the GPU extra installed it runs on a ``LocalCUDACluster`` (one
worker per GPU; blocks are cupy arrays on the workers' GPUs, filtered with
``cupyx.scipy.ndimage``, compressed with nvCOMP). Otherwise, or with ``--cpu``, it runs on a
``distributed.LocalCluster`` of worker processes with numpy and ``scipy.ndimage``. Either way
every step happens on the workers: they read their blocks from the input store, filter
them (with a margin from the neighbouring blocks), and write the output's shards and its
pyramid; this process only builds the graph and writes the metadata.

See docs/cluster.md for the same on a SLURM cluster.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

import linumpy_gpu as lg
from linumpy_gpu.sample import sample_volume

SIGMA = 1.5  # voxels: the smoothing of the "reconstruction" step
DEPTH = 6  # voxels each block borrows from its neighbours (4 sigma, rounded up)


def gpu_cluster_possible() -> bool:
    """Whether a LocalCUDACluster can run here: dask-cuda and a usable GPU stack."""
    try:
        import dask_cuda  # noqa: F401

        from linumpy_gpu.gpu import require_gpu

        require_gpu()
        return True
    except Exception:
        return False


def start_cluster(gpu: bool, workers: int | None) -> Any:
    """A local cluster: one worker per GPU, or ``workers`` single-threaded processes."""
    if gpu:
        from dask_cuda import LocalCUDACluster

        return LocalCUDACluster(n_workers=workers, dashboard_address=None)
    from distributed import LocalCluster

    return LocalCluster(
        n_workers=2 if workers is None else workers,
        threads_per_worker=1,
        processes=True,
        dashboard_address=None,
    )


def smooth(block: Any) -> Any:
    """The filter, on whatever device the block lives: cupyx on the GPU, scipy on the CPU."""
    if hasattr(block, "__cuda_array_interface__"):
        from cupyx.scipy import ndimage
    else:
        from scipy import ndimage
    return ndimage.gaussian_filter(block, sigma=SIGMA, mode="nearest", truncate=4.0)


def make_input(path: Path) -> None:
    """The input: a sample volume in 32x64x64 chunks inside 64x128x128 shards, 2 levels."""
    lg.write_ome_zarr(
        path,
        sample_volume((128, 256, 256)),
        axes="zyx",
        units=("micrometer",) * 3,
        scale=(3.5, 1.5, 1.5),
        chunks=(32, 64, 64),
        shards=(64, 128, 128),
        levels=2,
        overwrite=True,
        device="cpu",
    )


def run(folder: Path, gpu: bool, workers: int | None) -> None:
    from distributed import Client

    source, target = folder / "raw.ome.zarr", folder / "smoothed.ome.zarr"
    make_input(source)
    device = "gpu" if gpu else "cpu"
    t0 = time.perf_counter()
    with start_cluster(gpu, workers) as cluster, Client(cluster) as client:
        print(f"cluster: {len(client.scheduler_info()['workers'])} worker(s) on the {device}")
        img = lg.open_ome_zarr(source, device=device)
        raw = img.to_dask(0)  # one shard per block; cupy blocks on the workers' GPUs
        smoothed = raw.map_overlap(smooth, depth=DEPTH, boundary="nearest", dtype=raw.dtype)
        out = lg.write_ome_zarr(
            target,
            smoothed,  # block boundaries on the shards: each shard is written by one task
            axes=img.axis_names,
            units=[a.unit for a in img.axes],
            scale=img.scale(0),
            chunks=img[0].chunks,
            shards=img[0].shards,
            levels=3,
            overwrite=True,
        )
        print(f"pipeline on the cluster: {time.perf_counter() - t0:.1f} s")
    print(out)
    check(source, target)


def check(source: Path, target: Path) -> None:
    """The cluster's output equals the same filter applied to the whole volume here."""
    from scipy import ndimage

    raw = np.asarray(lg.open_ome_zarr(source)[0][...])
    expected = ndimage.gaussian_filter(raw, sigma=SIGMA, mode="nearest", truncate=4.0)
    got = np.asarray(lg.open_ome_zarr(target)[0][...])
    # the GPU filter may round a few voxels the other way
    worst = int(np.abs(got.astype(np.int32) - expected.astype(np.int32)).max())
    assert worst <= 1, f"the cluster's result differs from the whole-volume filter by {worst}"
    print(f"checked: equal to the whole-volume filter (largest difference {worst})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workers", type=_positive, help="workers (default: one per GPU, or 2)")
    ap.add_argument("--cpu", action="store_true", help="a CPU cluster even where a GPU is")
    ap.add_argument("--keep", type=Path, help="write the stores here instead of a temp folder")
    args = ap.parse_args()
    gpu = not args.cpu and gpu_cluster_possible()
    if args.keep:
        args.keep.mkdir(parents=True, exist_ok=True)
        run(args.keep, gpu, args.workers)
        return
    with tempfile.TemporaryDirectory() as tmp:
        run(Path(tmp), gpu, args.workers)


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"needs at least 1 worker, got {value}")
    return value


if __name__ == "__main__":
    main()
