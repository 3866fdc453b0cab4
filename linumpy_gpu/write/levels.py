"""Writing an image's levels into a zarr group: arrays created, level 0 written (whole, or
block by block from dask), each coarser level computed from the one before, metadata last."""

from __future__ import annotations

import math
import os
import uuid
from typing import Any

import numpy as np

from linumpy_gpu.engine.pyramid import BLOCK_LOCAL, downsample, update_level, write_coarser_levels
from linumpy_gpu.engine.writer import ChunkedArrayWriter
from linumpy_gpu.errors import LinumpyGpuError, WriteError
from linumpy_gpu.io.files import IN_PROGRESS, INCOMPLETE_MARKER, STAGING_SUFFIX, destination_of
from linumpy_gpu.io.stores import translated_errors
from linumpy_gpu.progress import progress_bar
from linumpy_gpu.write.plan import ImagePlan


def write_image(
    root: Any,
    data: Any,
    plan: ImagePlan,
    backend: Any,
    progress: bool,
    where: str,
    label: str | None = None,
    unfinished: bool = False,
) -> None:
    """Every level of ``data`` into the group ``root``, then its metadata (last: until it
    lands, the group does not open as an OME-Zarr image). ``label`` names the write on the
    progress bar (default: the last part of ``where``). ``unfinished``: the metadata keeps
    the write-in-progress mark, for a caller that writes more before it goes."""
    with translated_errors(where):
        root.attrs.put(IN_PROGRESS)
    bar = _progress_bar(progress, plan, label or os.path.basename(where))
    written: list[str] = []
    # Object stores tell readers no versions: each level carries this write's id, so a
    # reader that opened the store before it was replaced, and reads across the
    # replacement, sees its metadata change even where the layout stays the same.
    write_id = {INCOMPLETE_MARKER: {"write": uuid.uuid4().hex}}
    attributes = write_id if getattr(root.store, "root", None) is None else None
    try:
        arrays = [
            _create_level(root, i, shape, plan, attributes) for i, shape in enumerate(plan.shapes)
        ]
        is_dask = type(data).__module__.startswith("dask")
        _write_pyramid(
            arrays, data, plan.factors, plan.method, backend, bar, written, is_dask, where
        )
    except LinumpyGpuError:
        raise
    except Exception as exc:
        aside = STAGING_SUFFIX in os.fspath(getattr(root.store, "root", ""))
        outcome = (
            "Nothing replaced the destination."
            if aside  # built beside the destination, which stays as it was
            else "The destination holds an incomplete store: write it again."
        )
        raise WriteError(
            f"writing '{where}' failed ({type(exc).__name__}: {exc}); levels "
            f"{written or 'none'} were complete. {outcome}"
        ) from exc
    finally:
        if bar is not None:
            bar.close()
    with translated_errors(where):
        root.attrs.put({**plan.attributes, **(IN_PROGRESS if unfinished else {})})


def _create_level(
    root: Any,
    i: int,
    shape: tuple[int, ...],
    plan: ImagePlan,
    attributes: dict[str, Any] | None = None,
) -> Any:
    chunks = tuple(min(c, n) for c, n in zip(plan.chunks, shape, strict=True))
    shards = None
    if plan.shards is not None:
        shards = tuple(
            max(c, min(s, -(-n // c) * c))
            for s, c, n in zip(plan.shards, chunks, shape, strict=True)
        )
    extra = {"dimension_names": plan.axis_names} if plan.zarr_format == 3 else {}
    return root.create_array(
        str(i),
        shape=shape,
        dtype=plan.dtype,
        chunks=chunks,
        shards=shards,
        fill_value=plan.fill_value,
        attributes=attributes,
        **plan.codec_kwargs,
        **extra,
    )


def _write_pyramid(
    arrays: list[Any],
    data: Any,
    factors: list[tuple[int, ...]],
    method: str,
    backend: Any,
    bar: Any,
    written: list[str],
    is_dask: bool,
    where: str,
) -> None:

    writers = [
        # named as the user named the image (a URL, not the store object's repr)
        ChunkedArrayWriter(
            a, backend, name=destination_of(f"{where.rstrip('/')}/{i}"), locking=False
        )
        for i, a in enumerate(arrays)
    ]
    if is_dask:
        from linumpy_gpu.write.dask import cluster_client, write_distributed

        client = cluster_client(data)
        if client is not None and write_distributed(
            arrays, data, factors, method, backend, bar, written, client
        ):
            return
        _write_dask(writers[0], data, bar)
        written.append("0")
        for i, f in enumerate(factors):
            update_level(arrays[i], writers[i + 1], f, method, backend, bar=bar)
            written.append(str(i + 1))
        return
    current = backend.from_any(data)
    if method in BLOCK_LOCAL:
        writers[0].write((), current, progress=bar)
        written.append("0")
        flush = backend.memory().write_batch_bytes()
        write_coarser_levels(current, writers[1:], factors, method, flush, bar)
        written.extend(str(i) for i in range(1, len(writers)))
        return
    # a filter that reaches across pieces: each level whole
    for i, writer in enumerate(writers):
        if i:
            current = downsample(current, factors[i - 1], method)
            # a level rounded down (matching another pyramid) drops the partial last block
            current = current[tuple(slice(0, n) for n in writer.layout.shape)]
        writer.write((), current, progress=bar)
        written.append(str(i))


def _write_dask(writer: Any, data: Any, bar: Any) -> None:
    """Level 0 from a dask array, one storage-aligned block at a time, computed by the
    array's scheduler and written from this process (the path without a cluster, and
    for stores a cluster's workers cannot reach)."""
    unit = writer.layout.shard_shape or writer.layout.chunk_shape
    aligned = data.rechunk(
        tuple(max(u, (c[0] // u) * u) for u, c in zip(unit, data.chunks, strict=True))
    )
    from linumpy_gpu.write.dask import check_block_shape

    for index in np.ndindex(*aligned.numblocks):
        block = aligned.blocks[index].compute()
        starts = [sum(c[:k]) for c, k in zip(aligned.chunks, index, strict=True)]
        declared = tuple(c[k] for c, k in zip(aligned.chunks, index, strict=True))
        check_block_shape(block, declared, index)
        region = tuple(slice(s, s + n) for s, n in zip(starts, declared, strict=True))
        writer.write(region, block, progress=bar)


def _progress_bar(progress: bool, plan: ImagePlan, label: str) -> Any:
    unit = plan.shards or plan.chunks
    total = sum(
        math.prod(-(-n // min(c, n)) for n, c in zip(s, unit, strict=True)) for s in plan.shapes
    )
    return progress_bar(progress, f"writing {label}", total=total, unit="unit")
