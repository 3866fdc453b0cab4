"""Writing a dask array on a ``dask.distributed`` (or dask-cuda) cluster: the workers write.

The zarr arrays of every level are created first, here; then

1. level 0: the dask array is aligned to the storage unit (shard, or chunk when unsharded),
   so that each unit lies in exactly one block, and one task per block writes its units;
2. each coarser level: one task per group of whole units of that level reads the region
   of the finer level under it (written in step 1 or the step before), downsamples it and
   writes the units; levels follow one another, each a ``dask.compute``;
3. the metadata is written once, at the end, by the caller.

Tasks carry picklable descriptions of their arrays (see :mod:`linumpy_gpu.image.dask`) and
open them on the worker, once per process. Every unit file is written atomically (a
temporary name, then a rename), so a task that dies half way leaves whole old or whole new
units, and dask's retry of the task writes the same units again.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import math
import os
import sys
import threading
import uuid
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

from linumpy_gpu import config
from linumpy_gpu.backends import Backend
from linumpy_gpu.engine.pyramid import downsample, halo
from linumpy_gpu.engine.writer import ChunkedArrayWriter
from linumpy_gpu.errors import WriteError, portable
from linumpy_gpu.image.dask import (
    ArraySource,
    cached_reader,
    device_kind,
    grouped_block,
    open_array,
    store_spec,
)
from linumpy_gpu.io.files import destination_of, remove_stale_partials

# Decoded bytes of the finer level one pyramid task reads (its output is a fraction of it),
# per device kind: GPU reads have a fixed cost that only large reads hide.
PYRAMID_TASK_BYTES = {"cpu": 256 << 20, "gpu": 1 << 30}
# A storage unit larger than this fraction of a worker's memory limit is refused.
UNIT_MEMORY_FRACTION = 0.25

# GPU writes in one worker process take turns (nvCOMP state is per device, not per thread).
_gpu_write_lock = threading.Lock()


def cluster_client(data: Any) -> Any:
    """The ``dask.distributed`` client that would compute ``data``, or None (no
    ``distributed`` imported, no client, or a scheduler that is not a cluster)."""
    if "distributed" not in sys.modules:
        return None  # nobody imported distributed: there is no client
    try:
        from distributed import Client, get_client
    except ImportError:
        return None
    with contextlib.suppress(ValueError):
        return get_client()
    from dask.base import get_scheduler

    scheduler = get_scheduler(collections=[data])
    owner = getattr(scheduler, "__self__", scheduler)
    return owner if isinstance(owner, Client) else None


def write_distributed(
    arrays: list[Any],
    data: Any,
    factors: list[tuple[int, ...]],
    method: str,
    backend: Backend,
    bar: Any,
    written: list[str],
    client: Any,
) -> bool:
    """Write every level of the dask array ``data`` into ``arrays`` (created, empty) on
    ``client``'s workers. Returns False, having done nothing, when the workers cannot reach
    the store (an in-memory store): the caller then writes from this process."""
    spec = store_spec(arrays[0].store)
    if not spec.shared:
        return False
    session = uuid.uuid4().hex
    settings = dataclasses.asdict(config.get())
    targets = [
        ArraySource(spec, a.store_path.path, device_kind(backend), settings, session)
        for a in arrays
    ]
    units = [tuple(a.shards or a.chunks) for a in arrays]
    _check_unit_memory(client, units[0], arrays[0].dtype.itemsize, destination_of(targets[0].where))
    aligned = align_to_units(data, units[0], destination_of(targets[0].where))
    done = _compute(_level0_tasks(aligned, targets[0]), client)
    _progress(bar, done)
    written.append("0")
    for i, f in enumerate(factors):
        shape = tuple(arrays[i + 1].shape)
        done = _compute(
            _pyramid_tasks(targets[i], targets[i + 1], shape, units[i + 1], f, method, arrays),
            client,
        )
        _progress(bar, done)
        written.append(str(i + 1))
    if spec.kind == "local":
        remove_partial_files(spec.where)
    return True


def align_to_units(data: Any, unit: Sequence[int], where: str) -> Any:
    """``data`` with every block boundary on a multiple of ``unit`` (so each storage unit
    lies in one block); rechunked, with a :class:`dask.array.PerformanceWarning`, when it
    is not already."""
    aligned = all(
        all(b % u == 0 for b in itertools.accumulate(c[:-1]))
        for c, u in zip(data.chunks, unit, strict=True)
    )
    if aligned:
        return data
    target = tuple(
        max(u, (max(c) // u) * u) if n else 1
        for c, u, n in zip(data.chunks, unit, data.shape, strict=True)
    )
    from dask.array.core import PerformanceWarning

    warnings.warn(
        f"writing '{where}': the dask array's chunks {data.chunksize} do not fall on the "
        f"storage units {tuple(unit)}; rechunking to {target} so that each unit is written "
        "by one task (chunk the array as multiples of the units to avoid this)",
        PerformanceWarning,
        stacklevel=5,
    )
    return data.rechunk(target)


def _check_unit_memory(client: Any, unit: Sequence[int], itemsize: int, where: str) -> None:
    """Refuse storage units a worker cannot hold a few of (a task holds its block, the
    encoded units and the write's buffers at once)."""
    try:
        try:
            info = client.scheduler_info(n_workers=-1)
        except TypeError:  # older distributed: no n_workers
            info = client.scheduler_info()
        workers = list(info["workers"].values())
    except Exception:  # no answer: nothing to check against
        return
    limits = [int(w.get("memory_limit") or 0) for w in workers]
    limits = [m for m in limits if m > 0]
    if not limits:
        return
    nbytes = math.prod(unit) * itemsize
    if nbytes > UNIT_MEMORY_FRACTION * min(limits):
        raise WriteError(
            f"writing '{where}': one storage unit {tuple(unit)} holds {nbytes / 2**30:.2f} GiB, "
            f"more than {UNIT_MEMORY_FRACTION:.0%} of a worker's memory limit "
            f"({min(limits) / 2**30:.2f} GiB); each unit is written by one task: choose "
            "smaller shards or give the workers more memory"
        )


def _level0_tasks(aligned: Any, target: ArraySource) -> Any:
    """One task per block of ``aligned``: write it into ``target`` at its place."""
    import dask.array as da
    from dask.base import tokenize
    from dask.highlevelgraph import HighLevelGraph

    name = f"linumpy-write-0-{tokenize(aligned.name, target.session)}"
    offsets = [[0, *itertools.accumulate(c)] for c in aligned.chunks]
    layer: dict[Any, Any] = {}
    for index in itertools.product(*(range(n) for n in aligned.numblocks)):
        starts = tuple(offsets[a][i] for a, i in enumerate(index))
        declared = tuple(aligned.chunks[a][i] for a, i in enumerate(index))
        layer[(name, *index)] = (write_block, target, (aligned.name, *index), starts, declared)
    graph = HighLevelGraph.from_collections(name, layer, dependencies=[aligned])
    chunks = tuple((1,) * n for n in aligned.numblocks)
    return da.Array(graph, name, chunks, meta=np.empty((0,) * aligned.ndim, dtype=np.int64))


def _pyramid_tasks(
    source: ArraySource,
    target: ArraySource,
    shape: tuple[int, ...],
    unit: tuple[int, ...],
    factors: tuple[int, ...],
    method: str,
    arrays: list[Any],
) -> Any:
    """One task per group of whole units of the coarser level ``target``."""
    import dask.array as da
    from dask.base import tokenize

    itemsize = arrays[0].dtype.itemsize
    per_task = max(1, PYRAMID_TASK_BYTES[target.device] // max(1, math.prod(factors)))
    block = grouped_block(shape, unit, itemsize, per_task)
    name = f"linumpy-write-{target.path}-{tokenize(target.session, target.path)}"
    grid = [range(0, n, b) for n, b in zip(shape, block, strict=True)]
    layer: dict[Any, Any] = {}
    for index, starts in zip(
        itertools.product(*(range(len(g)) for g in grid)), itertools.product(*grid), strict=True
    ):
        stops = tuple(min(s + b, n) for s, b, n in zip(starts, block, shape, strict=True))
        layer[(name, *index)] = (
            downsample_block,
            source,
            target,
            tuple(factors),
            method,
            tuple(starts),
            stops,
        )
    chunks = tuple((1,) * len(g) for g in grid)
    return da.Array(layer, name, chunks, meta=np.empty((0,) * len(shape), dtype=np.int64))


def _compute(tasks: Any, client: Any) -> int:
    import dask

    (counts,) = dask.compute(tasks, scheduler=client)
    return int(np.asarray(counts).sum())


def _progress(bar: Any, n: int) -> None:
    if bar is not None:
        bar.update(n)


# -- tasks (run on the workers) -----------------------------------------------------------------


def _writer(target: ArraySource) -> ChunkedArrayWriter:
    array, backend = open_array(target, writable=True)
    # each unit is written by one task: no locks between writers
    return ChunkedArrayWriter(array, backend, name=target.where, locking=False)


def _units_in(starts: Sequence[int], shape: Sequence[int], writer: ChunkedArrayWriter) -> int:
    unit = writer.layout.shard_shape or writer.layout.chunk_shape
    return math.prod(-(-(a + n) // u) - a // u for a, n, u in zip(starts, shape, unit, strict=True))


def _write(target: ArraySource, region: tuple[slice, ...], block: Any) -> int:
    if target.store.kind == "local" and not os.path.isdir(target.store.where):
        # the client gave up on this write and removed the folder it was built in: a task
        # still queued must not create it again
        raise WriteError(
            f"'{destination_of(target.where)}': the write was abandoned; nothing written"
        )
    writer = _writer(target)
    starts = [r.start for r in region]
    shape = [r.stop - r.start for r in region]
    lock = _gpu_write_lock if target.device == "gpu" else contextlib.nullcontext()
    with config.set(target.settings), lock:
        writer.write(region, block)
    return _units_in(starts, shape, writer)


def check_block_shape(block: Any, declared: tuple[int, ...], index: Any) -> None:
    """A computed dask block must have the shape its array declares for it: a block that
    came out smaller (a map_blocks that trims) would leave part of the level unwritten."""
    if tuple(block.shape) != tuple(declared):
        raise WriteError(
            f"dask block {tuple(index)} computed to shape {tuple(block.shape)}, but the array "
            f"declares {tuple(declared)} for it (a map_blocks whose output shape differs "
            "from its chunks?); fix the chunks the dask array declares"
        )


@portable
def write_block(
    target: ArraySource, block: Any, starts: tuple[int, ...], declared: tuple[int, ...]
) -> np.ndarray:
    """A dask task: write ``block`` (numpy or cupy, of the ``declared`` shape) into
    ``target`` at ``starts``; the number of storage units written, as a one-element array."""
    check_block_shape(block, declared, starts)
    region = tuple(slice(a, a + n) for a, n in zip(starts, declared, strict=True))
    n = _write(target, region, block)
    return np.full((1,) * len(starts), n, dtype=np.int64)


@portable
def downsample_block(
    source: ArraySource,
    target: ArraySource,
    factors: tuple[int, ...],
    method: str,
    starts: tuple[int, ...],
    stops: tuple[int, ...],
) -> np.ndarray:
    """A dask task: the region ``starts:stops`` of the coarser level ``target``, computed
    from the finer level ``source`` (with a margin for "gaussian", so blocks equal what a
    downsampling of the whole level gives) and written."""
    reader = cached_reader(source)
    full = reader.layout.shape
    reach = halo(factors, method)
    lo = [max(0, a * f - h) for a, f, h in zip(starts, factors, reach, strict=True)]
    hi = [min(n, b * f + h) for b, f, h, n in zip(stops, factors, reach, full, strict=True)]
    with config.set(source.settings):
        finer = reader.read(tuple(slice(a, b) for a, b in zip(lo, hi, strict=True)))
    reduced = downsample(finer, factors, method)
    keep = tuple(
        slice((a * f - low) // f, (a * f - low) // f + (b - a))
        for a, b, f, low in zip(starts, stops, factors, lo, strict=True)
    )
    region = tuple(slice(a, b) for a, b in zip(starts, stops, strict=True))
    n = _write(target, region, reduced[keep])
    return np.full((1,) * len(starts), n, dtype=np.int64)


def remove_partial_files(root: str) -> None:
    """Remove the temporary files that workers killed mid-write left in the store being
    built at ``root`` (their retries wrote the units again, whole)."""
    for folder, _, _ in os.walk(root):
        remove_stale_partials(folder, any_process=True)
