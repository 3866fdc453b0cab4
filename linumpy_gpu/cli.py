"""The ``linumpy-gpu`` command: demo, inspect, info."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import warnings
from typing import Any

from linumpy_gpu import __version__


def main(argv: list[str] | None = None) -> int:
    """Run the ``linumpy-gpu`` command with ``argv`` (default: the process's arguments); returns
    the exit code."""
    parser = argparse.ArgumentParser(prog="linumpy-gpu", description=__doc__)
    parser.add_argument("--version", action="version", version=f"linumpy-gpu {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="write a sample OME-Zarr pyramid, read it back, report")
    demo.add_argument(
        "--out",
        help="folder to write the sample into, as OUT/sample.ome.zarr (default: a temporary "
        "folder, removed afterwards)",
    )
    demo.add_argument("--device", default="auto", help="auto (default), gpu or cpu")
    inspect = sub.add_parser("inspect", help="print the structure of an OME-Zarr store")
    inspect.add_argument("path")
    sub.add_parser("info", help="versions, GPU, nvCOMP and GDS status")
    args = parser.parse_args(argv)
    from linumpy_gpu.errors import LinumpyGpuError

    try:
        if args.command == "demo":
            return _demo(args.out, args.device)
        if args.command == "inspect":
            return _inspect(args.path)
        return _info()
    except LinumpyGpuError as exc:
        print(f"linumpy-gpu: error: {exc}", file=sys.stderr)
        return 2


def _demo(out: str | None, device: str) -> int:
    import numpy as np
    import zarr

    from linumpy_gpu.errors import DeviceFallbackWarning, StoreExistsError
    from linumpy_gpu.image import open_image
    from linumpy_gpu.sample import write_sample

    with tempfile.TemporaryDirectory() as tmp:
        # the sample goes into a new folder of its own: files already in --out are never touched
        path = os.path.join(os.path.abspath(out) if out else tmp, "sample.ome.zarr")
        if os.path.lexists(path):
            raise StoreExistsError(
                f"'{path}' exists; remove it or give --out a folder without a sample in it"
            )
        t0 = time.perf_counter()
        write_sample(path, overwrite=False)
        print(f"wrote a sample OME-Zarr pyramid to {path} in {time.perf_counter() - t0:.2f} s")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", DeviceFallbackWarning)
            img = open_image(path, device=device)
        for w in caught:
            print(f"note: {w.message}")
        print(img)
        for level in img.levels:
            t0 = time.perf_counter()
            data = level.read()
            _sync(data)
            dt = time.perf_counter() - t0
            host = data if isinstance(data, np.ndarray) else data.get()
            reference = zarr.open_array(os.path.join(path, level.path), mode="r")[...]
            same = np.array_equal(host, reference)
            print(
                f"level {level.index}: read {level.nbytes / 2**20:.1f} MiB as "
                f"{type(data).__module__.split('.')[0]}.{type(data).__name__} on {level.device} in "
                f"{dt * 1e3:.1f} ms ({level.nbytes / dt / 1e9:.2f} GB/s); "
                f"{'equal to' if same else 'DIFFERENT FROM'} zarr-python's read"
            )
            if not same:
                return 1
        tile = img[0][10:42, 100:164, ::2]
        print(
            f"a strided tile img[0][10:42, 100:164, ::2] -> shape {tile.shape}, mean {float(tile.mean()):.1f}"
        )
        print(
            f"physical voxel size of level 0: {dict(zip(img.axis_names, img.scale(0), strict=True))} "
            f"({img.axes[0].unit}), origin {img.translation(0)}"
        )
    return 0


def _sync(data: Any) -> None:
    if not hasattr(data, "__array_interface__"):
        import cupy

        cupy.cuda.get_current_stream().synchronize()


def _inspect(path: str) -> int:
    from linumpy_gpu.image import open_ome_zarr

    print(open_ome_zarr(path))
    return 0


def _info() -> int:
    import numpy
    import zarr

    print(
        f"linumpy-gpu {__version__}; zarr {zarr.__version__}; numpy {numpy.__version__}; "
        f"python {sys.version.split()[0]}"
    )
    from linumpy_gpu import config
    from linumpy_gpu.gpu.deps import missing_pieces

    settings, sources = config.get(), config.sources()
    print("settings (change with LINUMPY_GPU_<NAME> or linumpy_gpu.config.set):")
    for name in config.names():
        print(f"  {name} = {getattr(settings, name)!r}  ({sources[name]})")
    missing = missing_pieces()
    if missing:
        print("GPU path unavailable: needs " + "; ".join(missing))
        return 0
    from linumpy_gpu.gpu.report import info

    for key, value in info().items():
        print(f"{key}: {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
