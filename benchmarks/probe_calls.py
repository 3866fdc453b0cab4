"""Where each batch of a full-level read spends its time, on the host and on the GPU (a
benchmark, not a test).

    python benchmarks/probe_calls.py /tmp/bench/design-128.ome.zarr [--repeat 2]
        [--exact 0 1] [--json out.json]

For one OME-Zarr image (level 0, warm page cache), per batch of the best of ``--repeat``
reads, with nvCOMP's workspace sized from chunk sizes (``--exact 0``) and from the frames
(``--exact 1``):

* host milliseconds inside each step of the batch decode (a step that waits for the GPU
  shows the wait): the copy to the device, the frame check, the workspace sizing, the
  planning of nvCOMP's parts, the moving of decoded slots, the placing into the output,
  and the small uploads and workspace carving inside them (a step nested in another
  counts in both);
* GPU milliseconds of the same steps, from CUDA events recorded around them on the stream
  they ran on, and where on the read's GPU timeline (ms from the read's start) each began.

probe_batches.py gave the batch totals (run 40: checking and sizing cost 10-19 ms a batch
against 0.4 ms for nvCOMP's sizing alone in run 17); this says which step holds the time.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from typing import Any

sys.path.insert(0, os.path.dirname(__file__))
from probe_pipeline import sync  # noqa: E402


class StepTimer:
    """Wraps methods: each call's host time, and GPU time from events on its stream, are
    added to the current batch's record under the step's name."""

    def __init__(self) -> None:
        import cupy

        self.cupy = cupy
        self.origin: Any = None
        self.batches: list[dict[str, Any]] = []
        self._events: list[tuple[dict[str, Any], str, Any, Any]] = []
        self._patched: list[tuple[Any, str, Any]] = []

    def wrap(self, owner: Any, name: str, step: str, stream_of: Callable[..., Any] | None):
        original = getattr(owner, name)
        timer = self

        def timed(*args: Any, **kwargs: Any) -> Any:
            record = timer.batches[-1] if timer.batches else None
            stream = stream_of(*args, **kwargs) if stream_of and record is not None else None
            before = timer._record(stream)
            t0 = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                if record is not None:
                    host = record.setdefault("host_ms", {})
                    host[step] = host.get(step, 0.0) + (time.perf_counter() - t0) * 1e3
                    if stream is not None:
                        timer._events.append((record, step, before, timer._record(stream)))

        setattr(owner, name, timed)
        self._patched.append((owner, name, original))

    def _record(self, stream: Any) -> Any:
        if stream is None:
            return None
        event = self.cupy.cuda.Event()
        event.record(stream)
        return event

    def start_batch(self, chunks: int) -> None:
        self.batches.append({"chunks": chunks})

    def start_read(self) -> None:
        self.origin = self._record(self.cupy.cuda.get_current_stream())
        self.batches = []
        self._events = []

    def finish(self) -> list[dict[str, Any]]:
        """GPU times, once the read is done: per step, its total ms and its first start."""
        self.cupy.cuda.Device().synchronize()
        elapsed = self.cupy.cuda.get_elapsed_time
        for record, step, before, after in self._events:
            gpu = record.setdefault("gpu_ms", {})
            gpu[step] = gpu.get(step, 0.0) + elapsed(before, after)
            start = record.setdefault("gpu_start_ms", {})
            start.setdefault(step, elapsed(self.origin, before))
        return self.batches

    def restore(self) -> None:
        for owner, name, original in reversed(self._patched):
            setattr(owner, name, original)
        self._patched = []


@contextlib.contextmanager
def timed_steps() -> Iterator[StepTimer]:
    import cupy

    from linumpy_gpu.gpu.backend import GpuBackend
    from linumpy_gpu.gpu.nvcomp_lib import ZstdApi
    from linumpy_gpu.gpu.staging import StagedBatch
    from linumpy_gpu.gpu.zstd_batch import Workspace, ZstdBatchCodec

    timer = StepTimer()

    def external(ptr: int) -> Any:
        # nvCOMP takes raw stream handles; cupy 14 deprecates wrapping one, still supported
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            return cupy.cuda.ExternalStream(ptr)

    decode_host = ZstdBatchCodec.decode_host

    def batch(codec: Any, frames: Any, *args: Any, **kwargs: Any) -> Any:
        timer.start_batch(len(frames))
        t0 = time.perf_counter()
        try:
            return decode_host(codec, frames, *args, **kwargs)
        finally:
            timer.batches[-1]["decode_host_ms"] = (time.perf_counter() - t0) * 1e3

    ZstdBatchCodec.decode_host = batch
    timer._patched.append((ZstdBatchCodec, "decode_host", decode_host))
    codec_stream = lambda codec, *a, **k: codec.stream  # noqa: E731
    timer.wrap(StagedBatch, "upload", "copy", lambda staging, factory, stream, *a, **k: stream)
    timer.wrap(ZstdBatchCodec, "check_staged", "check+size in staging", codec_stream)
    timer.wrap(ZstdBatchCodec, "_check_frames", "frame check", codec_stream)
    timer.wrap(ZstdBatchCodec, "_plan_parts", "plan parts", codec_stream)
    timer.wrap(ZstdBatchCodec, "_move_slots", "move slots", codec_stream)
    # host-only steps around them (a default read's first batch spends ~35 ms outside the
    # steps above, run 42): small uploads of pointers and sizes, workspace carving
    timer.wrap(ZstdBatchCodec, "_upload", "small uploads", None)
    timer.wrap(Workspace, "take", "workspace take", None)
    timer.wrap(
        ZstdApi, "decompress_temp_bytes_exact", "nvCOMP sizing", lambda *a, **k: external(a[-1])
    )
    timer.wrap(ZstdApi, "decompress", "nvCOMP decode", lambda *a, **k: external(a[-1]))
    timer.wrap(GpuBackend, "place_all", "place", lambda *a, **k: cupy.cuda.get_current_stream())
    try:
        yield timer
    finally:
        timer.restore()


def probe(path: str, repeat: int) -> dict[str, Any]:
    import linumpy_gpu as lg

    level = lg.open_ome_zarr_gpu(path)[0]
    level[...]  # warm: kernels, nvCOMP, the staging ring, the learned workspace share
    best: dict[str, Any] = {}
    for _ in range(repeat):
        sync()
        with timed_steps() as timer:
            timer.start_read()
            t0 = time.perf_counter()
            out = level[...]
            batches = timer.finish()
            seconds = time.perf_counter() - t0
        del out
        if not best or seconds < best["seconds"]:
            best = {
                "seconds": seconds,
                "gbps": level.nbytes / seconds / 1e9,
                "profile": dict(level._reader.last_profile),
                "batches": batches,
            }
    return best


def report(title: str, result: dict[str, Any]) -> None:
    print(f"## {title}: {result['gbps']:.2f} GB/s, {len(result['batches'])} batches")
    steps: list[str] = []
    for b in result["batches"]:
        for step in list(b.get("host_ms", {})) + list(b.get("gpu_ms", {})):
            if step not in steps:
                steps.append(step)
    print("| chunks | batch ms | " + " | ".join(f"{s} host / gpu ms (at)" for s in steps) + " |")
    for b in result["batches"]:
        cells = []
        for s in steps:
            host = b.get("host_ms", {}).get(s)
            gpu = b.get("gpu_ms", {}).get(s)
            at = b.get("gpu_start_ms", {}).get(s)
            cell = "-" if host is None else f"{host:.1f}"
            if gpu is not None:
                cell += f" / {gpu:.1f} ({at:.0f})"
            cells.append(cell)
        print(f"| {b['chunks']} | {b.get('decode_host_ms', 0):.1f} | " + " | ".join(cells) + " |")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("path", nargs="+")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--exact", nargs="*", default=["0", "1"])
    ap.add_argument("--json")
    args = ap.parse_args()
    results: dict[str, Any] = {}
    for path in args.path:
        for exact in args.exact:
            os.environ["LINUMPY_GPU_EXACT_WORKSPACE"] = exact
            key = f"{os.path.basename(path.rstrip('/'))} exact={exact}"
            results[key] = probe(path, args.repeat)
            report(key, results[key])
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
