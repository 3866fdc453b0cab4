"""dask glue: lazy arrays over pyramid levels, for data larger than memory and many workers.

dask does the scheduling (threads, processes, dask.distributed / dask-cuda clusters); each
block is one engine read, so blocks arrive as numpy or cupy like any other read.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from linumpy_gpu.core.types import NDArray

if TYPE_CHECKING:
    import dask.array

    from linumpy_gpu.image.level import Level


def level_to_dask(level: Level, chunks: Any = None) -> dask.array.Array:
    """A dask array over ``level``. ``chunks`` defaults to the shard (or chunk) shape, so
    every block is a whole number of storage units and no unit is read twice."""
    import dask.array as da

    if chunks is None:
        chunks = level.shards or level.chunks
    xp = level._reader.backend.xp
    meta = xp.empty((0,) * level.ndim, dtype=level.dtype)
    name = f"linumpy-{level.image.path}-{level.path}-{level.device}"
    return da.from_array(
        _BlockReader(level),
        chunks=chunks,
        name=name,
        meta=meta,
        asarray=False,
        fancy=False,
        lock=False,
    )


class _BlockReader:
    """What dask indexes: shape, dtype, ndim and a slicing ``__getitem__``."""

    def __init__(self, level: Level):
        self.level = level
        self.shape = level.shape
        self.dtype = level.dtype
        self.ndim = level.ndim

    def __getitem__(self, index: Any) -> NDArray:
        return self.level.read(index)
