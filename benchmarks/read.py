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

    python benchmarks/read.py --size small --device cpu
    python benchmarks/read.py --size design --device gpu --cold
    python benchmarks/read.py --quick --device cpu,gpu
"""

from __future__ import annotations

from typing import Any

import _common as common

READER = "linumpy_gpu read()"


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
    args = common.parse_args("read", __doc__)
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
            run.add(layout=name, device=device, reader=READER, nbytes=store.nbytes, result=result)
    run.finish()


if __name__ == "__main__":
    common.entry(main)
