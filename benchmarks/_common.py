"""Shared parts of the benchmark scripts (not a script itself: run read.py, tiles.py,
write.py or peers.py).

It holds the one command line all four scripts share, the test volumes and the store
layouts they are written in, the worker processes every case runs in, timing, memory
measurement, the page-cache drop for cold reads, and the JSON and markdown output.

Only the stable public API of linumpy_gpu is used here and in the scripts, so that the
same scripts also measure older releases of the package.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import datetime
import gc
import importlib.metadata
import importlib.util
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS_DIR = os.path.join(HERE, "results")

Shape = tuple[int, ...]

SIZES: dict[str, Shape] = {
    "small": (256, 512, 512),
    "medium": (512, 1024, 1024),
    "design": (2048, 1024, 1024),
}
QUICK_SHAPE: Shape = (128, 256, 256)
DEVICES = ("cpu", "gpu")


# ---------------------------------------------------------------------------------------
# layouts


@dataclass(frozen=True)
class Layout:
    """How level 0 of a test store is laid out on disk."""

    name: str
    zarr_format: int
    chunks: Shape | None  # None: one whole plane per chunk (1 x Y x X)
    codec: str
    shards: Shape | None = None
    description: str = ""

    def chunk_shape(self, shape: Shape) -> Shape:
        if self.chunks is None:
            return (1, *shape[1:])
        return tuple(min(c, n) for c, n in zip(self.chunks, shape, strict=True))

    def shard_shape(self, shape: Shape) -> Shape | None:
        """The shard shape, shrunk for small volumes to a whole number of chunks that still
        covers the volume (a shard larger than the array only holds fill values)."""
        if self.shards is None:
            return None
        chunks = self.chunk_shape(shape)
        return tuple(
            max(c, min(s, -(-n // c) * c))
            for s, c, n in zip(self.shards, chunks, shape, strict=True)
        )

    def compressors(self) -> Any:
        """The compressor argument of zarr-python's ``create_array`` for this layout."""
        import numcodecs
        from zarr.codecs import BloscCodec, GzipCodec, ZstdCodec

        if self.codec == "zstd":
            return [ZstdCodec(level=3)]
        if self.codec == "v2-blosc-lz4-shuffle":
            return numcodecs.Blosc(cname="lz4", clevel=5, shuffle=numcodecs.Blosc.SHUFFLE)
        if self.codec == "v2-blosc-zstd":
            return numcodecs.Blosc(cname="zstd", clevel=5, shuffle=numcodecs.Blosc.SHUFFLE)
        if self.codec == "v3-blosc-zstd-bitshuffle":
            return [BloscCodec(cname="zstd", clevel=5, shuffle="bitshuffle", typesize=2)]
        if self.codec == "v3-gzip":
            return [GzipCodec(level=5)]
        raise ValueError(f"unknown codec {self.codec!r}")

    @property
    def writable(self) -> bool:
        """Whether ``write_ome_zarr`` writes this layout (NGFF 0.5, zstd)."""
        return self.codec == "zstd" and self.zarr_format == 3


LAYOUTS: dict[str, Layout] = {
    layout.name: layout
    for layout in [
        Layout("zstd-128", 3, (128, 128, 128), "zstd", description="NGFF 0.5, zstd 3, 128^3"),
        Layout("zstd-64", 3, (64, 64, 64), "zstd", description="NGFF 0.5, zstd 3, 64^3"),
        Layout("zstd-plane", 3, None, "zstd", description="NGFF 0.5, zstd 3, 1 x Y x X"),
        Layout(
            "zstd-64-sharded",
            3,
            (64, 64, 64),
            "zstd",
            shards=(256, 512, 512),
            description="NGFF 0.5, zstd 3, 64^3 chunks in 256x512x512 shards",
        ),
        Layout(
            "v2-blosc-lz4-shuffle",
            2,
            (128, 128, 128),
            "v2-blosc-lz4-shuffle",
            description="NGFF 0.4 (zarr v2), Blosc lz4 byte shuffle, 128^3",
        ),
        Layout(
            "v2-blosc-zstd",
            2,
            (128, 128, 128),
            "v2-blosc-zstd",
            description="NGFF 0.4 (zarr v2), Blosc zstd 5 byte shuffle, 128^3",
        ),
        Layout(
            "v3-blosc-zstd-bitshuffle",
            3,
            (128, 128, 128),
            "v3-blosc-zstd-bitshuffle",
            description="NGFF 0.5, Blosc zstd 5 bit shuffle, 128^3",
        ),
        Layout("v3-gzip", 3, (128, 128, 128), "v3-gzip", description="NGFF 0.5, gzip 5, 128^3"),
    ]
}


# ---------------------------------------------------------------------------------------
# command line


def parse_args(
    script: str,
    doc: str | None,
    *,
    default_layouts: Sequence[str] = tuple(LAYOUTS),
    allowed_layouts: Sequence[str] = tuple(LAYOUTS),
    quick_layouts: Sequence[str] | None = None,
    add_options: Callable[[argparse.ArgumentParser], None] | None = None,
    argv: Sequence[str] | None = None,
) -> argparse.Namespace:
    """The command line shared by every script, plus the script's own ``add_options``.

    The returned namespace has ``devices`` (list), ``shape`` (tuple), ``layouts`` (list),
    ``repeat`` (int), ``json`` (a path) and ``quick`` resolved."""
    ap = argparse.ArgumentParser(
        prog=f"python benchmarks/{script}.py",
        description=(doc or "").split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="layouts: " + ", ".join(f"{n} ({v.description})" for n, v in LAYOUTS.items()),
    )
    ap.add_argument(
        "--device",
        action="append",
        metavar="cpu|gpu",
        help="where the data lands or comes from: numpy on the CPU, cupy on the GPU; "
        "repeat the option or give a comma list (default: cpu)",
    )
    ap.add_argument(
        "--size",
        choices=sorted(SIZES),
        help="volume size (uint16): small 256x512x512, medium 512x1024x1024, "
        "design 2048x1024x1024 (default: small)",
    )
    ap.add_argument("--shape", help="explicit volume shape Z,Y,X (overrides --size)")
    ap.add_argument(
        "--layouts",
        help=f"comma list of layouts, or 'all' (default: {','.join(default_layouts)})",
    )
    ap.add_argument("--repeat", type=int, help="timed repeats; the best counts (default: 3)")
    ap.add_argument(
        "--cold",
        action="store_true",
        help="also time reads with the store's files dropped from the page cache first",
    )
    ap.add_argument(
        "--dir",
        help="scratch folder for the generated stores, reused between runs "
        "(default: a temporary folder, removed at the end)",
    )
    ap.add_argument(
        "--json",
        help=f"where the results go (default: benchmarks/results/{script}-<UTC time>.json)",
    )
    ap.add_argument(
        "--quick",
        action="store_true",
        help=f"a tiny smoke run: {'x'.join(map(str, QUICK_SHAPE))} volume, 2 repeats",
    )
    if add_options is not None:
        add_options(ap)
    args = ap.parse_args(argv)

    devices: list[str] = []
    for item in args.device or ["cpu"]:
        for d in item.split(","):
            d = d.strip().lower()
            if d not in DEVICES:
                ap.error(f"--device must be cpu or gpu, got {d!r}")
            if d not in devices:
                devices.append(d)
    args.devices = devices

    if args.shape:
        try:
            shape = tuple(int(x) for x in args.shape.split(","))
        except ValueError:
            ap.error(f"--shape must be three integers Z,Y,X, got {args.shape!r}")
        if len(shape) != 3 or min(shape) < 1:
            ap.error(f"--shape must be three positive integers Z,Y,X, got {args.shape!r}")
        args.shape = shape
    elif args.size:
        args.shape = SIZES[args.size]
    else:
        args.shape = QUICK_SHAPE if args.quick else SIZES["small"]

    if args.layouts in (None, ""):
        layouts = list(quick_layouts if args.quick and quick_layouts else default_layouts)
    elif args.layouts == "all":
        layouts = list(allowed_layouts)
    else:
        layouts = [s.strip() for s in args.layouts.split(",") if s.strip()]
    for name in layouts:
        if name not in LAYOUTS:
            ap.error(f"unknown layout {name!r}; known: {', '.join(LAYOUTS)}")
        if name not in allowed_layouts:
            ap.error(
                f"{script}.py does not use layout {name!r}; it uses {', '.join(allowed_layouts)}"
            )
    args.layouts = layouts

    if args.repeat is None:
        args.repeat = 2 if args.quick else 3
    if args.repeat < 1:
        ap.error("--repeat must be at least 1")
    if args.json is None:
        stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
        args.json = os.path.join(RESULTS_DIR, f"{script}-{stamp}.json")
    args.script = script
    return args


# ---------------------------------------------------------------------------------------
# test volumes


_PLANE_BASE: dict[tuple[int, int], np.ndarray] = {}


def _plane_base(yx: tuple[int, int]) -> np.ndarray:
    """Smooth in-plane structure (two slow waves), shared by every plane."""
    if yx not in _PLANE_BASE:
        y = np.arange(yx[0], dtype=np.float32)[:, None]
        x = np.arange(yx[1], dtype=np.float32)[None, :]
        base = 1600 + 100 * np.sin(y / 53.0) + 100 * np.cos(x / 71.0)
        _PLANE_BASE[yx] = base.astype(np.uint16)
    return _PLANE_BASE[yx]


def fill_planes(out: np.ndarray, z0: int) -> None:
    """Planes ``z0 .. z0 + len(out)`` of the test volume, written into ``out``.

    Smooth structure plus 8 bits of noise on uint16 compresses about as well as real
    microscopy (zstd level 3 about 1.5x). Each plane depends on its z alone, so every
    layout holds the same pixels and any slab can be made on its own."""
    base = _plane_base((out.shape[1], out.shape[2]))
    for i in range(out.shape[0]):
        z = z0 + i
        rng = np.random.default_rng(z)
        np.add(base, np.uint16(500 + 500 * np.sin(z / 37.0)), out=out[i])
        out[i] += rng.integers(0, 256, size=base.shape, dtype=np.uint16)


def make_volume(shape: Shape) -> np.ndarray:
    """The whole test volume in one numpy array, made plane by plane on a thread pool (no
    large temporaries, so a worker's peak memory is the volume itself)."""
    out = np.empty(shape, dtype=np.uint16)
    step = 8
    with ThreadPoolExecutor(os.cpu_count() or 1) as pool:
        list(pool.map(lambda z: fill_planes(out[z : z + step], z), range(0, shape[0], step)))
    return out


@dataclass
class Store:
    """A generated OME-Zarr store: the image folder and its level-0 array."""

    layout: Layout
    shape: Shape
    image_path: str
    array_path: str

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape)) * 2

    def files(self) -> list[str]:
        return array_files(self.array_path)

    def stored_bytes(self) -> int:
        return sum(os.path.getsize(p) for p in self.files())


def array_files(array_path: str) -> list[str]:
    """Every file of an array (chunks, shards and metadata)."""
    return [os.path.join(d, f) for d, _, fs in os.walk(array_path) for f in fs]


def ome_attributes(zarr_format: int, datasets: Sequence[str], name: str = "benchmark") -> dict:
    """NGFF multiscales attributes: 0.5 inside ``ome`` for zarr v3, 0.4 for zarr v2."""
    axes = [{"name": n, "type": "space", "unit": "micrometer"} for n in "zyx"]
    ds = [
        {
            "path": p,
            "coordinateTransformations": [{"type": "scale", "scale": [float(2**i)] * 3}],
        }
        for i, p in enumerate(datasets)
    ]
    if zarr_format == 3:
        return {
            "ome": {"version": "0.5", "multiscales": [{"name": name, "axes": axes, "datasets": ds}]}
        }
    return {"multiscales": [{"version": "0.4", "name": name, "axes": axes, "datasets": ds}]}


def make_store(directory: str, layout: Layout, shape: Shape) -> Store:
    """The test volume in ``layout`` under ``directory``, made once and reused after.

    zarr-python writes it one slab of whole planes per call, a slab as deep as a chunk or
    shard so that no chunk or shard is written by two calls, on a thread pool; the OME
    attributes go last, so a store that has them is complete and one that lacks them is
    made again."""
    import zarr

    name = f"{layout.name}-{'x'.join(map(str, shape))}.ome.zarr"
    image_path = os.path.join(directory, name)
    store = Store(layout, shape, image_path, os.path.join(image_path, "0"))
    if _is_complete(image_path, layout.zarr_format):
        return store
    shutil.rmtree(image_path, ignore_errors=True)
    chunks = layout.chunk_shape(shape)
    shards = layout.shard_shape(shape)
    root = zarr.open_group(image_path, mode="w", zarr_format=layout.zarr_format)
    extra: dict[str, Any] = {}
    if layout.zarr_format == 2:
        # NGFF 0.4 asks for '/' between chunk indices
        extra["chunk_key_encoding"] = {"name": "v2", "separator": "/"}
        extra["filters"] = None
    else:
        extra["dimension_names"] = ["z", "y", "x"]
    arr = root.create_array(
        "0",
        shape=shape,
        dtype="uint16",
        chunks=chunks,
        shards=shards,
        compressors=layout.compressors(),
        fill_value=0,
        **extra,
    )
    depth = (shards or chunks)[0]

    def write(z: int) -> None:
        slab = np.empty((min(depth, shape[0] - z), shape[1], shape[2]), dtype=np.uint16)
        fill_planes(slab, z)
        arr[z : z + len(slab)] = slab

    # a slab, and about as much again inside zarr-python while it encodes, per thread
    slab_bytes = depth * shape[1] * shape[2] * 2 * 2
    workers = max(1, min(os.cpu_count() or 1, (4 << 30) // slab_bytes))
    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(write, range(0, shape[0], depth)))
    root.attrs.update(ome_attributes(layout.zarr_format, ["0"]))
    return store


def _is_complete(image_path: str, zarr_format: int) -> bool:
    try:
        if zarr_format == 3:
            with open(os.path.join(image_path, "zarr.json")) as f:
                return "ome" in json.load(f).get("attributes", {})
        with open(os.path.join(image_path, ".zattrs")) as f:
            return "multiscales" in json.load(f)
    except (OSError, ValueError):
        return False


def random_regions(shape: Shape, size: int, count: int, seed: int) -> list[tuple[slice, ...]]:
    """``count`` cubes of side ``size`` (clipped to the volume) at random places; the same
    seed gives the same regions, so runs of different versions read the same tiles."""
    rng = np.random.default_rng(seed)
    sides = [min(size, n) for n in shape]
    out = []
    for _ in range(count):
        starts = [int(rng.integers(0, n - s + 1)) for n, s in zip(shape, sides, strict=True)]
        out.append(tuple(slice(a, a + s) for a, s in zip(starts, sides, strict=True)))
    return out


def regions_to_json(regions: Iterable[tuple[slice, ...]]) -> list[list[list[int]]]:
    return [[[s.start, s.stop] for s in r] for r in regions]


def regions_from_json(data: Iterable[Iterable[Sequence[int]]]) -> list[tuple[slice, ...]]:
    return [tuple(slice(a, b) for a, b in r) for r in data]


# ---------------------------------------------------------------------------------------
# worker side: device, memory, timing, page cache


class Device:
    """What a worker needs of the device its results land on: synchronisation, copies to
    the host for checking, and memory measurement. cupy is imported only for the GPU."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.gpu = name == "gpu"
        self.cupy: Any = None
        self._used0 = 0
        self._pool0 = 0
        self._sampler: _DeviceSampler | None = None
        if self.gpu:
            import cupy

            self.cupy = cupy
            # the CUDA context exists before any baseline is taken: it is a per-process
            # cost, not a cost of the read being measured
            cupy.zeros(1)
            self.sync()

    def sync(self) -> None:
        if self.gpu:
            self.cupy.cuda.Device().synchronize()

    def to_host(self, a: Any) -> np.ndarray:
        if self.cupy is not None and isinstance(a, self.cupy.ndarray):
            return a.get()
        return np.asarray(a)

    def asarray(self, a: Any) -> Any:
        """A host result moved to this device (what a CPU library needs to feed a GPU)."""
        return self.cupy.asarray(a) if self.gpu else a

    def used(self) -> int:
        free, total = self.cupy.cuda.runtime.memGetInfo()
        return int(total - free)

    def memory_start(self) -> None:
        if not self.gpu:
            return
        pool = self.cupy.get_default_memory_pool()
        pool.free_all_blocks()
        self.sync()
        self._used0 = self.used()
        self._pool0 = pool.total_bytes()
        self._sampler = _DeviceSampler(self)
        self._sampler.start()

    def memory_peak(self) -> int | None:
        """Device bytes above the baseline: the larger of the highest device use sampled
        during the call and cupy's pool size after it (the pool keeps freed blocks, so its
        size after the call is its high-water mark unless something emptied it)."""
        if not self.gpu:
            return None
        self.sync()
        sampled = 0
        if self._sampler is not None:
            sampled = self._sampler.stop() - self._used0
            self._sampler = None
        pool = self.cupy.get_default_memory_pool().total_bytes() - self._pool0
        return int(max(sampled, pool, self.used() - self._used0, 0))


class _DeviceSampler(threading.Thread):
    """Samples the device's used memory every millisecond while a measured call runs."""

    def __init__(self, device: Device) -> None:
        super().__init__(daemon=True)
        self.device = device
        self.peak = device.used()
        self._stop_event = threading.Event()

    def run(self) -> None:
        while not self._stop_event.is_set():
            self.peak = max(self.peak, self.device.used())
            self._stop_event.wait(0.001)

    def stop(self) -> int:
        self._stop_event.set()
        self.join()
        return self.peak


def rss_now() -> int:
    """This process's resident set size now (bytes)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return peak_rss()


def reset_peak_rss() -> bool:
    """Set this process's RSS high-water mark (VmHWM) to its current RSS, where Linux
    allows it (``/proc/self/clear_refs``, no root needed)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def peak_rss() -> int:
    """This process's highest resident set size (bytes).

    VmHWM from ``/proc/self/status`` where it exists: ``ru_maxrss`` carries over the
    parent's RSS at the fork that started this process (Linux keeps it across exec), so a
    worker started by a large parent would report the parent's size; VmHWM belongs to this
    process's own memory, and :func:`reset_peak_rss` can restart it."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)


def host_bytes(result: Any) -> int:
    """Bytes of ``result`` (an array or a list of arrays) that live in host memory."""
    if isinstance(result, list | tuple):
        return sum(host_bytes(r) for r in result)
    return int(result.nbytes) if isinstance(result, np.ndarray) else 0


def measured_call(fn: Callable[[], Any], device: Device) -> tuple[Any, dict[str, int | None]]:
    """Call ``fn`` once and return its result with the memory it took: peak host RSS above
    what the process held before, less the host bytes of the result itself, and on the GPU
    the peak device memory above what was in use before (the result included).

    Run it in a fresh worker process, after a small warm-up call (libraries loaded, device
    started). The RSS high-water mark is reset to the current RSS first; where that is not
    possible, nothing earlier in the process may have used more memory than the call."""
    gc.collect()
    reset_peak_rss()
    before = rss_now()
    device.memory_start()
    result = fn()
    device.sync()
    device_peak = device.memory_peak()
    above = peak_rss() - before - host_bytes(result)
    return result, {"peak_rss_above_output_bytes": max(0, above), "peak_device_bytes": device_peak}


def time_calls(fn: Callable[[], Any], device: Device, repeat: int) -> list[float]:
    """Seconds of ``repeat`` calls, each from a synchronised device to a synchronised device
    (GPU work that is queued but unfinished is not done)."""
    return [_one_call(fn, device) for _ in range(repeat)]


def _one_call(fn: Callable[[], Any], device: Device) -> float:
    device.sync()
    t0 = time.perf_counter()
    out = fn()
    device.sync()
    seconds = time.perf_counter() - t0
    del out
    return seconds


def time_cold(
    fn: Callable[[], Any], device: Device, repeat: int, files: Sequence[str]
) -> tuple[list[float], float | None]:
    """Seconds of ``repeat`` calls, each after dropping ``files`` from the page cache, and
    the largest fraction of their bytes still cached right after a drop."""
    times, left = [], []
    for _ in range(repeat):
        drop_from_page_cache(files)
        frac = cached_fraction(files)
        if frac is not None:
            left.append(frac)
        times.append(_one_call(fn, device))
    return times, (max(left) if left else None)


def drop_from_page_cache(files: Iterable[str]) -> None:
    """Ask the kernel to forget the cached pages of ``files`` (no root needed). Written
    pages are flushed first: the kernel only drops clean ones."""
    for path in files:
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            continue
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        except OSError:
            pass
        finally:
            os.close(fd)


def cached_fraction(files: Iterable[str]) -> float | None:
    """Fraction of the bytes of ``files`` held in the page cache (mincore on a mapping,
    which does not read the file); None where mincore is unavailable. Shows whether a drop
    worked: on tmpfs, for instance, it cannot."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        mmap_fn, mincore, munmap = libc.mmap, libc.mincore, libc.munmap
    except (OSError, AttributeError):
        return None
    mmap_fn.restype = ctypes.c_void_p
    mmap_fn.argtypes = [
        ctypes.c_void_p,
        ctypes.c_size_t,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_long,
    ]
    mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_ubyte)]
    munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    page = os.sysconf("SC_PAGE_SIZE")
    prot_read, map_shared = 1, 1
    cached = total = 0
    for path in files:
        try:
            size = os.path.getsize(path)
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            continue
        try:
            if size == 0:
                continue
            addr = mmap_fn(None, size, prot_read, map_shared, fd, 0)
            if addr is None or addr == ctypes.c_void_p(-1).value:
                return None
            pages = -(-size // page)
            vec = (ctypes.c_ubyte * pages)()
            ok = mincore(addr, size, vec) == 0
            munmap(addr, size)
            if not ok:
                return None
            cached += sum(v & 1 for v in vec) * page
            total += pages * page
        finally:
            os.close(fd)
    return cached / total if total else None


def equal(got: Any, expected: Any, device: Device) -> bool:
    """Whether ``got`` (an array or a list of arrays, numpy or cupy) equals ``expected``
    (numpy), shapes and dtypes included."""
    if isinstance(expected, list):
        return (
            isinstance(got, list | tuple)
            and len(got) == len(expected)
            and all(equal(g, e, device) for g, e in zip(got, expected, strict=True))
        )
    host = device.to_host(got)
    return (
        host.shape == expected.shape
        and host.dtype == expected.dtype
        and bool(np.array_equal(host, expected))
    )


def describe_error(exc: BaseException) -> str:
    """One line for a failed reader or writer; a keyword an older linumpy_gpu lacks reads
    as 'unsupported'."""
    text = f"{type(exc).__name__}: {exc}".replace("\n", " ")
    if isinstance(exc, TypeError) and "unexpected keyword" in str(exc):
        return f"unsupported ({text})"[:300]
    return text[:300]


def read_case(
    read: Callable[[], Any],
    warmup: Callable[[], Any] | None,
    check: Callable[[Any], bool],
    device: Device,
    repeat: int,
    cold: bool,
    files: Sequence[str],
) -> dict[str, Any]:
    """The common shape of a read case, run inside a worker: a small warm-up call (loads
    libraries, starts the device), one measured call for memory, ``check`` of its result
    against zarr-python's, then ``repeat`` warm timings and, with ``cold``, ``repeat`` cold
    ones. A result that differs is reported and not timed."""
    out: dict[str, Any] = {}
    try:
        if warmup is not None:
            warmup()
            device.sync()
        got, memory = measured_call(read, device)
        out.update(memory)
        ok = check(got)
        del got
        out["equal_to_reference"] = ok
        if not ok:
            out["error"] = "result differs from zarr-python's read; not timed"
            return out
        out["warm"] = time_calls(read, device, repeat)
        if cold:
            out["cold"], out["cached_after_drop"] = time_cold(read, device, repeat, files)
    except Exception as exc:  # a reader that cannot read this layout is reported, not fatal
        out["error"] = describe_error(exc)
    return out


# ---------------------------------------------------------------------------------------
# parent side: runs, worker processes, records, output


def installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def _dist_version(*names: str) -> str | None:
    for n in names:
        try:
            return importlib.metadata.version(n)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def gpu_check() -> str:
    """The GPU's name, or exit with a message saying what is missing. Runs in a separate
    process so that this one never imports cupy nor holds a CUDA context."""
    code = (
        "import cupy\n"
        "n = cupy.cuda.runtime.getDeviceCount()\n"
        "assert n > 0, 'no CUDA device visible'\n"
        "name = cupy.cuda.runtime.getDeviceProperties(0)['name']\n"
        "print(name.decode() if isinstance(name, bytes) else name)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    if proc.returncode != 0:
        lines = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
        reason = lines[-1] if lines else f"exit status {proc.returncode}"
        raise SystemExit(
            f"--device gpu: no usable GPU on this machine ({reason}).\n"
            "Run with --device cpu, or on a machine with an NVIDIA GPU and "
            'pip install -e ".[cu13]" (or ".[cu12]") from a clone of the repository.'
        )
    return proc.stdout.strip()


def host_info(gpu_name: str | None) -> dict[str, Any]:
    import linumpy_gpu

    versions = {
        "python": platform.python_version(),
        "linumpy_gpu": getattr(linumpy_gpu, "__version__", None),
        "zarr": _dist_version("zarr"),
        "numpy": np.__version__,
        "numcodecs": _dist_version("numcodecs"),
        "deflate": _dist_version("deflate"),
        "cupy": _dist_version("cupy-cuda13x", "cupy-cuda12x", "cupy"),
        "nvcomp": _dist_version(
            "nvidia-nvcomp-cu13",
            "nvidia-nvcomp-cu12",
            "nvidia-libnvcomp-cu13",
            "nvidia-libnvcomp-cu12",
        ),
        "kvikio": _dist_version("kvikio-cu13", "kvikio-cu12", "kvikio"),
        "tensorstore": _dist_version("tensorstore"),
        "zarrs": _dist_version("zarrs"),
        "ome-zarr": _dist_version("ome-zarr"),
        "ngff-zarr": _dist_version("ngff-zarr"),
    }
    package_dir = os.path.dirname(os.path.abspath(linumpy_gpu.__file__))
    commit = None
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        proc = subprocess.run(
            ["git", "-C", package_dir, "rev-parse", "HEAD"], capture_output=True, text=True
        )
        if proc.returncode == 0:
            commit = proc.stdout.strip()
    memory = None
    with contextlib.suppress(OSError, ValueError, IndexError), open("/proc/meminfo") as f:
        memory = int(f.readline().split()[1]) * 1024
    return {
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "memory_bytes": memory,
        "gpu": gpu_name,
        "versions": versions,
        "linumpy_gpu_path": package_dir,
        "linumpy_gpu_commit": commit,
    }


class Run:
    """One run of a script: scratch folder, stores, worker processes, records, output."""

    def __init__(
        self,
        args: argparse.Namespace,
        script_file: str,
        *,
        case_label: str = "reader",
        rss_label: str = "RSS above output",
    ) -> None:
        self.args = args
        self.labels = (case_label, rss_label)
        self.script_file = os.path.abspath(script_file)
        gpu_name = gpu_check() if "gpu" in args.devices else None
        self.host = host_info(gpu_name)
        self._own_dir = args.dir is None
        self.dir = args.dir or tempfile.mkdtemp(prefix=f"linumpy-bench-{args.script}-")
        os.makedirs(self.dir, exist_ok=True)
        self.records: list[dict[str, Any]] = []
        self.started = time.perf_counter()
        print(
            f"# {args.script}.py: shape {'x'.join(map(str, args.shape))} uint16 "
            f"({int(np.prod(args.shape)) * 2 / 1e9:.2f} GB), devices {','.join(args.devices)}, "
            f"layouts {','.join(args.layouts)}, best of {args.repeat}"
            f"{', cold too' if args.cold else ''}; linumpy_gpu "
            f"{self.host['versions']['linumpy_gpu']}; stores in {self.dir}",
            flush=True,
        )
        if self.host["versions"]["deflate"] is None:
            print(
                "# warning: the deflate package is missing: gzip and zlib decode through "
                "zlib, about 2.5x slower than with libdeflate",
                flush=True,
            )

    def store(self, layout_name: str) -> Store:
        t0 = time.perf_counter()
        store = make_store(self.dir, LAYOUTS[layout_name], self.args.shape)
        stored = store.stored_bytes()
        print(
            f"\n## {layout_name}: chunks {store.layout.chunk_shape(store.shape)}, shards "
            f"{store.layout.shard_shape(store.shape)}, compression ratio "
            f"{store.nbytes / max(stored, 1):.2f} (ready in {time.perf_counter() - t0:.1f} s)",
            flush=True,
        )
        return store

    def worker(self, func: str, params: dict[str, Any]) -> dict[str, Any]:
        """Run ``func(params)`` of the calling script in a fresh Python process (a clean
        heap and device for every case, so memory peaks belong to that case alone), and
        return what it returned, or ``{"error": ...}`` when the process failed."""
        with tempfile.TemporaryDirectory(prefix="linumpy-bench-case-") as tmp:
            spec = os.path.join(tmp, "spec.json")
            out = os.path.join(tmp, "out.json")
            with open(spec, "w") as f:
                json.dump({"func": func, "params": params, "out": out}, f)
            proc = subprocess.run(
                [sys.executable, self.script_file, "--worker", spec],
                capture_output=True,
                text=True,
            )
            if proc.returncode != 0 or not os.path.exists(out):
                lines = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
                tail = lines[-1] if lines else f"exit status {proc.returncode}"
                return {"error": f"worker failed: {tail}"[:300]}
            with open(out) as f:
                return json.load(f)

    def add(
        self,
        *,
        layout: str,
        device: str,
        reader: str,
        nbytes: int,
        result: dict[str, Any],
        note: str = "",
        **extra: Any,
    ) -> None:
        """Records for one case: a warm one and, where cold timings exist, a cold one."""
        notes = [n for n in (note, result.get("error", "")) if n]
        base = {
            "script": self.args.script,
            "layout": layout,
            "device": device,
            "reader": reader,
            "bytes": nbytes,
            "peak_rss_above_output_bytes": result.get("peak_rss_above_output_bytes"),
            "peak_device_bytes": result.get("peak_device_bytes"),
            "equal_to_reference": bool(result.get("equal_to_reference", False)),
            "checked": "equal_to_reference" in result,
            **extra,
            **result.get("extra", {}),
        }
        modes = [("warm", result.get("warm") or [])]
        if "cold" in result:
            modes.append(("cold", result["cold"]))
        for mode, seconds in modes:
            rec_notes = list(notes)
            if mode == "cold":
                frac = result.get("cached_after_drop")
                if frac is not None and frac > 0.05:
                    rec_notes.append(f"{100 * frac:.0f}% of the files stayed cached after the drop")
            # a case may summarise its timings its own way (a latency case: the median)
            summary = dict(result.get("summary", {}).get(mode, {}))
            if summary.get("note"):
                rec_notes.insert(0, summary.pop("note"))
            best = min(seconds) if seconds else None
            rec = {
                **base,
                "mode": mode,
                "seconds": seconds,
                "best_seconds": best,
                "gbps": nbytes / best / 1e9 if best else None,
                "note": "; ".join(rec_notes),
            }
            if mode == "cold":
                rec["cached_after_drop"] = result.get("cached_after_drop")
            rec.update(summary)
            self.records.append(rec)
            gb = f"{rec['gbps']:.2f} GB/s" if rec["gbps"] else "-"
            print(
                f"  {device} {reader} [{mode}]: {gb}{'  (' + rec['note'] + ')' if rec['note'] else ''}",
                flush=True,
            )
        self.save()

    def skip(self, *, layout: str, device: str, reader: str, nbytes: int, note: str) -> None:
        """A case that does not run (a peer not installed, a layout a writer lacks)."""
        self.add(layout=layout, device=device, reader=reader, nbytes=nbytes, result={}, note=note)

    def save(self) -> None:
        os.makedirs(os.path.dirname(os.path.abspath(self.args.json)), exist_ok=True)
        args = {k: v for k, v in vars(self.args).items() if not k.startswith("_")}
        doc = {"host": self.host, "args": args, "results": self.records}
        with open(self.args.json, "w") as f:
            json.dump(doc, f, indent=1, default=str)

    def finish(self, extra_tables: Sequence[str] = ()) -> None:
        self.save()
        print()
        print(markdown_table(self.records, *self.labels))
        for table in extra_tables:
            print()
            print(table)
        print(f"\nresults: {self.args.json} ({time.perf_counter() - self.started:.0f} s)")
        if self._own_dir:
            shutil.rmtree(self.dir, ignore_errors=True)


def fmt_bytes(n: float | None) -> str:
    if n is None:
        return "-"
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(n) >= size:
            return f"{n / size:.2f} {unit}" if unit == "GB" else f"{n / size:.0f} {unit}"
    return f"{n:.0f} B"


def markdown_table(
    records: Sequence[dict[str, Any]],
    case_label: str = "reader",
    rss_label: str = "RSS above output",
) -> str:
    head = (
        f"| layout | device | {case_label} | mode | GB/s | best s | {rss_label} | device peak "
        "| equal | note |\n|---|---|---|---|---|---|---|---|---|---|"
    )
    rows = [head]
    for r in records:
        gbps = f"{r['gbps']:.2f}" if r.get("gbps") else "-"
        best = f"{r['best_seconds']:.3f}" if r.get("best_seconds") else "-"
        equal_mark = "-"
        if r.get("checked"):
            equal_mark = "yes" if r.get("equal_to_reference") else "no"
        rows.append(
            f"| {r['layout']} | {r['device']} | {r['reader']} | {r['mode']} | {gbps} | {best} "
            f"| {fmt_bytes(r.get('peak_rss_above_output_bytes'))} "
            f"| {fmt_bytes(r.get('peak_device_bytes'))} | {equal_mark} | {r.get('note', '')} |"
        )
    return "\n".join(rows)


def entry(main: Callable[[], None]) -> None:
    """A script's ``__main__``: a worker when called as ``script.py --worker SPEC`` by
    :meth:`Run.worker`, else the script's ``main``."""
    if len(sys.argv) == 3 and sys.argv[1] == "--worker":
        with open(sys.argv[2]) as f:
            spec = json.load(f)
        func = getattr(sys.modules["__main__"], spec["func"])
        result = func(spec["params"])
        with open(spec["out"], "w") as f:
            json.dump(result, f, default=str)
        return
    main()


def worker_counts(text: str | None) -> list[int]:
    """The ``--workers`` list, checked."""
    if not text:
        return []
    try:
        counts = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise SystemExit(f"--workers must be a comma list of integers, got {text!r}") from None
    if not counts or min(counts) < 1:
        raise SystemExit(f"--workers must be positive integers, got {text!r}")
    return counts


def start_cluster(device: str, n: int) -> Any:
    """A local dask cluster of ``n`` worker processes: one GPU each on the GPU."""
    if device == "gpu":
        from dask_cuda import LocalCUDACluster

        return LocalCUDACluster(n_workers=n, threads_per_worker=1, dashboard_address=None)
    from distributed import LocalCluster

    threads = max(1, (os.cpu_count() or 1) // (2 * n))
    return LocalCluster(
        n_workers=n, threads_per_worker=threads, processes=True, dashboard_address=None
    )
