"""Full-level reads by other libraries, next to linumpy_gpu's, in the same run.

For every layout asked for (``--layouts``; ``--help`` lists them) a test volume is written
once into ``--dir``, then level 0 is read whole by each reader below that is installed
(one that is not is reported as "not installed"), on each ``--device``:

* cpu: linumpy_gpu (``open_ome_zarr(path, device="cpu")[0].read()``), zarr-python
  (``zarr.open_array(path)[...]``), tensorstore (``zarr3``/``zarr`` driver on the file
  kvstore), zarrs (zarr-python with ``zarrs.ZarrsCodecPipeline``);
* gpu: linumpy_gpu (``device="gpu"``), linumpy_gpu's ``gpu_zarr_context()`` (plain
  zarr-python arrays returning cupy), zarr-python with ``zarr.config.enable_gpu()``, and
  the CPU readers above followed by one copy to the GPU (``cupy.asarray``).

Every reader's result is first checked equal to zarr-python's read of the same store, then
timed ``--repeat`` times with a warm page cache; the best time counts. GB/s are decoded
bytes landing in numpy (cpu) or cupy (gpu) per second. With ``--cold`` the store's files
are dropped from the page cache before each of ``--repeat`` more reads. The summary gives,
per layout and device, linumpy_gpu's GB/s over the best other library's.

Each case runs in a fresh Python process, which also records the peak host memory (RSS)
above the result and, on the GPU, the peak device memory. Results go to ``--json``
(default ``benchmarks/results/peers-<UTC time>.json``) and print as markdown tables.

    python benchmarks/peers.py --size small --device cpu
    python benchmarks/peers.py --size design --device gpu --layouts zstd-128,zstd-64-sharded
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import _common as common

OURS = "linumpy_gpu"
CONTEXT = "linumpy_gpu gpu_zarr_context()"
# reader name: module that must be installed
CPU_READERS = {
    OURS: "linumpy_gpu",
    "zarr-python": "zarr",
    "tensorstore": "tensorstore",
    "zarrs": "zarrs",
}
GPU_READERS = {
    OURS: "linumpy_gpu",
    CONTEXT: "linumpy_gpu",
    "zarr-python enable_gpu()": "zarr",
    "zarr-python + copy": "zarr",
    "tensorstore + copy": "tensorstore",
    "zarrs + copy": "zarrs",
}


def readers(device: str) -> dict[str, str]:
    return GPU_READERS if device == "gpu" else CPU_READERS


@contextlib.contextmanager
def zarrs_pipeline() -> Iterator[None]:
    import zarr
    import zarrs  # noqa: F401  (registers the codec pipeline)

    with zarr.config.set({"codec_pipeline.path": "zarrs.ZarrsCodecPipeline"}):
        yield


def make_reader(
    name: str, params: dict[str, Any], device: common.Device
) -> Callable[[tuple[slice, ...] | None], Any]:
    """``read(region)`` for one reader; ``region=None`` reads the whole level."""
    import zarr

    array_path = params["array_path"]
    everything = ...
    base = name.removesuffix(" + copy")

    if name == OURS:
        import linumpy_gpu

        level = linumpy_gpu.open_ome_zarr(params["image_path"], device=params["device"])[0]
        return lambda region: level.read() if region is None else level[region]
    if name == CONTEXT:
        import linumpy_gpu

        def context_read(region: tuple[slice, ...] | None) -> Any:
            with linumpy_gpu.gpu_zarr_context():
                return zarr.open_array(array_path, mode="r")[region or everything]

        return context_read
    if name == "zarr-python enable_gpu()":

        def enable_gpu_read(region: tuple[slice, ...] | None) -> Any:
            with zarr.config.enable_gpu():
                return zarr.open_array(array_path, mode="r")[region or everything]

        return enable_gpu_read
    if base == "zarr-python":
        array = zarr.open_array(array_path, mode="r")
        return lambda region: device.asarray(array[region or everything])
    if base == "zarrs":
        with zarrs_pipeline():
            array = zarr.open_array(array_path, mode="r")

        def zarrs_read(region: tuple[slice, ...] | None) -> Any:
            with zarrs_pipeline():
                return device.asarray(array[region or everything])

        return zarrs_read
    if base == "tensorstore":
        store = tensorstore_array(params)
        return lambda region: device.asarray(
            (store if region is None else store[region]).read().result()
        )
    raise ValueError(f"unknown reader {name!r}")


def tensorstore_array(params: dict[str, Any]) -> Any:
    """The level opened once with tensorstore's ``zarr3`` or ``zarr`` driver."""
    import tensorstore as ts

    driver = "zarr3" if params["zarr_format"] == 3 else "zarr"
    return ts.open(
        {"driver": driver, "kvstore": {"driver": "file", "path": params["array_path"]}}
    ).result()


def make_many_reader(
    name: str, params: dict[str, Any], device: common.Device
) -> Callable[[list[tuple[slice, ...]]], list[Any]] | None:
    """``read_many(regions)`` for a reader with an API that reads many regions at once
    (linumpy_gpu's ``read_regions``, tensorstore's futures, all issued before the first is
    waited for), or None for one that reads them one by one."""
    if name == OURS:
        import linumpy_gpu

        level = linumpy_gpu.open_ome_zarr(params["image_path"], device=params["device"])[0]
        return lambda regions: list(level.read_regions(regions))
    if name.removesuffix(" + copy") == "tensorstore":
        store = tensorstore_array(params)

        def tensorstore_many(regions: list[tuple[slice, ...]]) -> list[Any]:
            futures = [store[r].read() for r in regions]
            return [device.asarray(f.result()) for f in futures]

        return tensorstore_many
    return None


def case(params: dict[str, Any]) -> dict[str, Any]:
    """One reader of one layout on one device, inside a worker process."""
    import zarr

    device = common.Device(params["device"])
    try:
        read = make_reader(params["reader"], params, device)
    except Exception as exc:  # an older release or a missing GPU stack: reported, not fatal
        return {"error": common.describe_error(exc)}
    corner = (slice(0, 1),) * 3
    return common.read_case(
        read=lambda: read(None),
        warmup=lambda: read(corner),
        check=lambda got: common.equal(
            got, zarr.open_array(params["array_path"], mode="r")[...], device
        ),
        device=device,
        repeat=params["repeat"],
        cold=params["cold"],
        files=common.array_files(params["array_path"]),
    )


def summary_table(records: list[dict[str, Any]]) -> str:
    """Per layout, device and mode: linumpy_gpu's GB/s over the best other library's."""
    rows = [
        "| layout | device | mode | linumpy_gpu GB/s | best peer | peer GB/s | ours / best peer |",
        "|---|---|---|---|---|---|---|",
    ]
    keys = dict.fromkeys((r["layout"], r["device"], r["mode"]) for r in records)
    for layout, device, mode in keys:
        group = [
            r for r in records if (r["layout"], r["device"], r["mode"]) == (layout, device, mode)
        ]
        ours = next((r["gbps"] for r in group if r["reader"] == OURS and r["gbps"]), None)
        peers = [r for r in group if not r["reader"].startswith(OURS) and r["gbps"]]
        best = max(peers, key=lambda r: r["gbps"]) if peers else None
        ours_text = f"{ours:.2f}" if ours else "-"
        peer_text = f"{best['reader']} | {best['gbps']:.2f}" if best else "- | -"
        ratio = f"{ours / best['gbps']:.2f}" if ours and best else "-"
        rows.append(f"| {layout} | {device} | {mode} | {ours_text} | {peer_text} | {ratio} |")
    return "\n".join(rows)


def main() -> None:
    args = common.parse_args("peers", __doc__)
    run = common.Run(args, __file__)
    for name in args.layouts:
        store = run.store(name)
        for device in args.devices:
            for reader, module in readers(device).items():
                if not common.installed(module):
                    run.skip(
                        layout=name,
                        device=device,
                        reader=reader,
                        nbytes=store.nbytes,
                        note="not installed",
                    )
                    continue
                params = {
                    "image_path": store.image_path,
                    "array_path": store.array_path,
                    "zarr_format": store.layout.zarr_format,
                    "device": device,
                    "reader": reader,
                    "repeat": args.repeat,
                    "cold": args.cold,
                }
                result = run.worker("case", params)
                run.add(
                    layout=name, device=device, reader=reader, nbytes=store.nbytes, result=result
                )
    run.finish([summary_table(run.records)])


if __name__ == "__main__":
    common.entry(main)
