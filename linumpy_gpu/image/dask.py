"""dask glue: lazy arrays over pyramid levels, for data larger than memory and for clusters.

dask does the scheduling (threads, processes, ``dask.distributed``, dask-cuda, dask-jobqueue);
this module only makes the tasks. The graph of :func:`level_to_dask` holds small picklable
read tasks, never the :class:`~linumpy_gpu.image.level.Level` (which holds zarr arrays,
thread pools and GPU state): where the store is (a local folder, or a URL with its fsspec
``storage_options``), the array's path in it, the block's region, the device kind ("cpu" or
"gpu") and the settings as a plain dict. Each block is one engine read of whole storage
units, so the GPU path batches.

A worker process opens each array and backend once and keeps them: a small per-process
cache keyed by store, array path, device and settings (:func:`worker_cache_info` lists it).
A GPU worker reads on its current CUDA device (dask-cuda gives each worker its own). In the
process that made the array (dask's threaded scheduler) tasks read through the level's own
reader, exactly as ``level.read`` does.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import math
import os
import threading
import uuid
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from linumpy_gpu import config
from linumpy_gpu.backends import Backend, resolve_backend
from linumpy_gpu.core.types import NDArray
from linumpy_gpu.engine import ChunkedArrayReader
from linumpy_gpu.errors import HostMemoryError, InvalidArgumentError, StoreError, portable
from linumpy_gpu.io.stores import locate, translated_errors, with_separator

if TYPE_CHECKING:
    import dask.array

    from linumpy_gpu.image.level import Level

# Arrays and backends a worker process keeps open (least recently used dropped first).
CACHE_SIZE = 32
# The least a GPU read task of chunks="auto" reads: each GPU read has a fixed cost (about
# 10 ms on an H200) that only large reads hide (1 GiB tasks: within a few percent of one
# whole-level read in one process).
GPU_AUTO_BYTES = 1 << 30


# -- where a store is, in a form that pickles ------------------------------------------------


@dataclasses.dataclass(frozen=True, eq=False)
class StoreSpec:
    """A zarr store as a worker reopens it: ``kind`` "local" (``where`` is a folder),
    "url" (``where`` is a URL, ``storage_options`` its fsspec options) or "object" (a zarr
    store object that pickles itself; reachable by other processes only if it is shared
    storage). ``key`` names the store in per-process caches."""

    kind: str
    where: str
    key: str
    storage_options: dict[str, Any] | None = None
    store: Any = None

    @property
    def shared(self) -> bool:
        """Whether worker processes reach the same data through this spec (a folder, or a
        URL other than fsspec's per-process ``memory://``)."""
        return self.kind == "local" or (
            self.kind == "url" and not self.where.startswith("memory://")
        )

    def open(self, writable: bool = False) -> Any:
        """The zarr store, opened here (read only unless ``writable``)."""
        mode = "r+" if writable else "r"
        if self.kind == "local":
            import zarr

            return zarr.storage.LocalStore(self.where, read_only=not writable)
        if self.kind == "url":
            return locate(self.where, mode=mode, storage_options=self.storage_options).store
        store = self.store
        if writable and getattr(store, "read_only", False):
            store = store.with_read_only(False)
        return store


def store_spec(store: Any) -> StoreSpec:
    """How a worker reopens ``store`` (a zarr store object)."""
    name = type(store).__name__
    root = getattr(store, "root", None)
    if root is not None and name in ("LocalStore", "GDSStore"):
        where = os.path.abspath(os.fspath(root))
        return StoreSpec("local", where, f"file://{where}")
    fs = getattr(store, "fs", None)
    if fs is not None and name == "FsspecStore":
        inner = getattr(fs, "sync_fs", None) or fs  # zarr wraps synchronous file systems
        options = {
            k: v
            for k, v in dict(getattr(inner, "storage_options", {}) or {}).items()
            if k != "asynchronous"
        }
        url = inner.unstrip_protocol(store.path)
        from dask.base import tokenize

        return StoreSpec("url", url, f"{url} {tokenize(options)}", options or None)
    return StoreSpec("object", str(store), f"object:{uuid.uuid4().hex}", store=store)


# -- a picklable read or write target ----------------------------------------------------------


@dataclasses.dataclass(frozen=True, eq=False)
class ArraySource:
    """One zarr array as tasks name it: the store, the array's path in it, the device kind
    ("cpu" or "gpu": a GPU worker uses its current CUDA device) and the settings as a dict.

    ``local`` (never pickled) is the reader of the process that made the task: tasks that
    run in that process (dask's threaded scheduler) read through it. ``session`` keeps the
    caches of different writes apart; ``version`` those of different versions of a store
    replaced at the same path (the metadata version the client's reader saw)."""

    store: StoreSpec
    path: str
    device: str
    settings: dict[str, Any]
    session: str = ""
    version: str = ""
    expect: tuple[Any, ...] | None = None  # the layout (and file) the client's reader saw
    separator: str | None = None  # a zarr v2 array's chunk key separator, as read there
    local: Any = dataclasses.field(default=None, repr=False)

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "local": None}

    @property
    def where(self) -> str:
        """The array, for messages."""
        return f"{self.store.where.rstrip('/')}/{self.path}" if self.path else self.store.where


def device_kind(backend: Backend) -> str:
    """ "cpu" or "gpu": what a worker needs to know of ``backend``."""
    return "cpu" if backend.name == "cpu" else "gpu"


# -- the per-process cache ----------------------------------------------------------------------

_cache: OrderedDict[tuple[Any, ...], Any] = OrderedDict()
_cache_info: dict[tuple[Any, ...], dict[str, Any]] = {}
_gpu_checked = False
_cache_lock = threading.RLock()  # a reader's make() opens its array through the cache


def _cached(key: tuple[Any, ...], make: Callable[[], Any], info: dict[str, Any]) -> Any:
    with _cache_lock:
        if key in _cache:
            _cache.move_to_end(key)
            return _cache[key]
        value = make()
        _cache[key] = value
        _cache_info[key] = info
        while len(_cache) > CACHE_SIZE:
            old, _ = _cache.popitem(last=False)
            _cache_info.pop(old, None)
        return value


def _fresh_cache_after_fork() -> None:
    # the parent's readers hold its pools and open files, and its lock may have been held
    global _cache_lock
    _cache.clear()
    _cache_info.clear()
    _cache_lock = threading.RLock()


os.register_at_fork(after_in_child=_fresh_cache_after_fork)


def _settings_key(settings: dict[str, Any]) -> tuple[tuple[str, Any], ...]:
    return tuple(sorted(settings.items()))


def worker_device(kind: str) -> str:
    """The device a task of ``kind`` uses in this process: "cpu", or the current CUDA
    device (``cuda:N``), which dask-cuda sets per worker from ``CUDA_VISIBLE_DEVICES``."""
    global _gpu_checked
    if kind == "cpu":
        return "cpu"
    if not _gpu_checked:  # once per process: the check looks for libraries on disk
        from linumpy_gpu.gpu.deps import require_gpu

        require_gpu()  # a GpuUnavailableError naming what is missing, not an ImportError
        _gpu_checked = True
    import cupy

    return f"cuda:{cupy.cuda.Device().id}"


def worker_backend(kind: str, settings: dict[str, Any]) -> Backend:
    """This process's backend for ``kind`` with ``settings``, made once and kept."""
    device = worker_device(kind)

    def make() -> Backend:
        with config.set(settings):
            return resolve_backend(device)

    info = {"what": "backend", "device": device, "settings": dict(settings)}
    return _cached(("backend", device, _settings_key(settings)), make, info)


def open_array(source: ArraySource, writable: bool = False) -> tuple[Any, Backend]:
    """The zarr array of ``source`` and the backend for it, opened once per process."""
    backend = worker_backend(source.device, source.settings)
    key = ("array", source.store.key, source.path, writable, source.session, source.version)

    def make() -> Any:
        import zarr

        with translated_errors(source.where, metadata=True):
            store = source.store.open(writable)
            array = zarr.open_array(store=store, path=source.path, mode="r+" if writable else "r")
            # as the client read it (an old v2 array's chunks found nested: see nested_by_spec)
            return with_separator(array, source.separator) if source.separator else array

    info = {"what": "array", "where": source.where, "writable": writable}
    return _cached(key, make, info), backend


def cached_reader(source: ArraySource) -> ChunkedArrayReader:
    """A reader of ``source``: the one of the process that made the task where this is
    that process, else one opened in this process once and kept."""
    if source.local is not None:
        return source.local
    device = worker_device(source.device)
    key = (
        "reader",
        source.store.key,
        source.path,
        device,
        _settings_key(source.settings),
        source.session,
        source.version,
    )

    def make() -> ChunkedArrayReader:
        array, backend = open_array(source)
        with config.set(source.settings), translated_errors(source.where, metadata=True):
            reader = ChunkedArrayReader(array, backend, name=source.where)
        if source.expect is not None and not same_identity(reader_identity(reader), source.expect):
            raise StoreError(
                f"'{source.where}' was replaced since it was opened (a worker finds other "
                "metadata there); open the store again"
            )
        return reader

    info = {
        "what": "reader",
        "where": source.where,
        "device": device,
        "settings": dict(source.settings),
    }
    return _cached(key, make, info)


def graph_objects(data: Any, kinds: type | tuple[type, ...]) -> list[Any]:
    """The objects of ``kinds`` that the graph of the dask array ``data`` holds, as task
    arguments or as the arrays ``dask.array.from_array`` and ``from_zarr`` wrap."""
    found: dict[int, Any] = {}
    pending = list(dict(data.__dask_graph__()).values())
    seen: set[int] = set()
    while pending:
        item = pending.pop()
        if id(item) in seen:
            continue
        seen.add(id(item))
        if isinstance(item, kinds):
            found[id(item)] = item
        elif isinstance(item, tuple | list | set | frozenset):
            pending.extend(item)
        elif isinstance(item, dict):
            pending.extend(item.values())
        else:
            # dask's task objects keep their function's arguments here
            for name in ("args", "kwargs", "value", "func"):
                inner = getattr(item, name, None)
                if (
                    isinstance(inner, (tuple, list, dict, kinds))
                    or hasattr(inner, "args")
                    or hasattr(inner, "value")
                ):
                    pending.append(inner)
            partial_args = getattr(item, "keywords", None)
            if isinstance(partial_args, dict):
                pending.extend(partial_args.values())
    return list(found.values())


def reader_identity(reader: ChunkedArrayReader) -> tuple[Any, ...]:
    """What a worker checks the array it opens against: the layout; for local files the
    metadata file's inode, size and times (the same on every node of a shared file system;
    the per-process part of the version left out); for stores that tell no versions, the
    metadata document as stored (with the id of the write that made the array, where
    linumpy_gpu wrote it)."""
    layout = reader.layout
    version = reader._metadata_version
    stable = tuple(version[:4]) if isinstance(version, tuple) and len(version) == 5 else None
    shape = (layout.shape, str(layout.dtype), layout.chunk_shape, layout.shard_shape)
    # a digest: every task of a graph carries it
    stored = reader._stored
    digest = hashlib.sha256(stored.encode()).hexdigest()[:32] if stored is not None else None
    return (*shape, stable, digest)


def same_identity(a: tuple[Any, ...], b: tuple[Any, ...]) -> bool:
    """Whether two :func:`reader_identity` values name the same array: the same layout,
    and the same metadata file or document where both sides can tell."""
    if a[:-2] != b[:-2]:
        return False
    return all(x is None or y is None or x == y for x, y in zip(a[-2:], b[-2:], strict=True))


def worker_cache_info() -> list[dict[str, Any]]:
    """What this process keeps open for dask tasks (backends, arrays, readers with their
    device and settings), oldest first. On a cluster: ``client.run(worker_cache_info)``."""
    with _cache_lock:
        return [dict(_cache_info[k]) for k in _cache if k in _cache_info]


def clear_worker_cache() -> None:
    """Forget what this process keeps open for dask tasks (``client.run`` it to make
    workers reopen stores, e.g. after the files changed under a fixed path)."""
    with _cache_lock:
        _cache.clear()
        _cache_info.clear()


# -- block shapes -------------------------------------------------------------------------------


def grouped_block(
    shape: Sequence[int], unit: Sequence[int], itemsize: int, target_bytes: int
) -> tuple[int, ...]:
    """A block shape of whole storage ``unit`` s (shards or chunks) of about
    ``target_bytes`` at most (at least one unit): grown by doubling, along the axis that
    holds the fewest units first (the last axis on ties), so blocks stay compact."""
    shape = [int(n) for n in shape]
    unit = [max(1, min(int(u), n)) if n else 1 for u, n in zip(unit, shape, strict=True)]
    block = list(unit)
    limit = [-(-n // u) * u for n, u in zip(shape, unit, strict=True)]
    while True:
        order = sorted(range(len(block)), key=lambda a: (block[a] // unit[a], -a))
        for axis in order:
            if block[axis] >= shape[axis]:
                continue
            grown = min(2 * block[axis], limit[axis])
            size = math.prod(block) // block[axis] * grown * itemsize
            if size <= target_bytes:
                block[axis] = grown
                break
        else:
            return tuple(min(b, n) if n else 1 for b, n in zip(block, shape, strict=True))


def dask_chunks(level: Level, chunks: Any) -> tuple[tuple[int, ...], ...]:
    """The dask chunks of ``level.to_dask(chunks)``: None -> one storage unit (shard or
    chunk) per block; "auto" or a size ("256MiB") -> whole storage units grouped up to
    dask's ``array.chunk-size`` (on the GPU at least :data:`GPU_AUTO_BYTES`) or that size;
    anything else as dask reads it."""
    import dask
    import dask.array as da
    from dask.utils import parse_bytes

    unit = level.shards or level.chunks
    if chunks is None:
        chunks = tuple(min(u, n) if n else 1 for u, n in zip(unit, level.shape, strict=True))
    elif isinstance(chunks, str):
        try:
            target = parse_bytes(
                dask.config.get("array.chunk-size") if chunks == "auto" else chunks
            )
        except ValueError as exc:
            raise InvalidArgumentError(
                f"chunks must be None, 'auto', a size such as '256MiB', or dask chunks; "
                f"got {chunks!r}"
            ) from exc
        if chunks == "auto" and level.device != "cpu":
            target = max(target, GPU_AUTO_BYTES)
        chunks = grouped_block(level.shape, unit, level.dtype.itemsize, target)
    try:
        blocks = da.core.normalize_chunks(chunks, level.shape, dtype=level.dtype)
    except ZeroDivisionError as exc:  # dask divides by a block size of 0
        raise InvalidArgumentError(
            f"chunks {chunks!r} for shape {level.shape}: block sizes must be at least 1"
        ) from exc
    except (ValueError, TypeError) as exc:
        raise InvalidArgumentError(f"chunks {chunks!r} for shape {level.shape}: {exc}") from exc
    # dask passes negative and fractional sizes through: blocks that do not tile the level
    # would read part of it
    if any(
        not all(isinstance(b, int | np.integer) and b >= 0 for b in axis) or sum(axis) != n
        for axis, n in zip(blocks, level.shape, strict=True)
    ):
        raise InvalidArgumentError(
            f"chunks {chunks!r} for shape {level.shape}: block sizes must be whole numbers "
            "that add up to the level's shape on each axis"
        )
    return tuple(tuple(int(b) for b in axis) for axis in blocks)


# -- reads --------------------------------------------------------------------------------------


def read_settings(level: Level) -> dict[str, Any]:
    """The settings a level's dask tasks read with: those the level was opened with, and
    over them whatever a :func:`linumpy_gpu.config.set` block around ``to_dask`` changed."""
    return dataclasses.asdict(config.layered(level._reader.settings))


def level_source(level: Level) -> ArraySource:
    """The picklable description of ``level`` that its read tasks carry."""
    settings = read_settings(level)
    reader = level._reader
    group = level.image.group
    prefix = reader.array.store_path.path
    same = settings == dataclasses.asdict(reader.settings)
    return ArraySource(
        store=store_spec(group.store),
        path=prefix,
        device=device_kind(reader.backend),
        settings=settings,
        version=repr(reader._metadata_version),
        expect=reader_identity(reader),
        separator=getattr(reader.array.metadata, "dimension_separator", None),
        local=reader if same else None,
    )


@portable
def read_block(source: ArraySource, starts: tuple[int, ...], stops: tuple[int, ...]) -> NDArray:
    """A dask task: the region ``starts:stops`` of ``source``, read with its settings."""
    reader = cached_reader(source)
    region = tuple(slice(a, b) for a, b in zip(starts, stops, strict=True))
    with config.set(source.settings):
        return reader.read(region)


def level_to_dask(level: Level, chunks: Any = None) -> dask.array.Array:
    """A dask array over ``level`` whose tasks are small picklable reads (see the module
    docs). ``chunks`` (see :func:`dask_chunks`) defaults to the shard (or chunk) shape, so
    every block is a whole number of storage units and no unit is read twice."""
    try:
        return _level_graph(level, dask_chunks(level, chunks))
    except MemoryError as exc:
        if isinstance(exc, HostMemoryError):
            raise
        raise HostMemoryError(
            f"'{level.path}' of shape {level.shape} in blocks of {chunks or 'its storage units'} "
            "makes more dask tasks than fit in memory: pass larger chunks (a size such as "
            "'1GiB'), or read a region of the level"
        ) from exc


def _level_graph(level: Level, blocks: tuple[tuple[int, ...], ...]) -> dask.array.Array:
    import dask.array as da
    from dask.base import tokenize

    source = level_source(level)
    meta = level._reader.backend.xp.empty((0,) * level.ndim, dtype=level.dtype)
    token = tokenize(
        source.store.key,
        source.path,
        source.device,
        _settings_key(source.settings),
        source.version,
        blocks,
        id(level),
        os.getpid(),
    )
    name = f"linumpy-read-{level.path}-{token}"
    offsets = [[0, *itertools.accumulate(c)] for c in blocks]
    graph: dict[Any, Any] = {}
    for index in itertools.product(*(range(len(c)) for c in blocks)):
        starts = tuple(offsets[a][i] for a, i in enumerate(index))
        stops = tuple(offsets[a][i + 1] for a, i in enumerate(index))
        graph[(name, *index)] = (read_block, source, starts, stops)
    return da.Array(graph, name, blocks, meta=meta)
