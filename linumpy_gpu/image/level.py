"""One resolution level of an image: a lazily read n-D array."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from linumpy_gpu import ngff
from linumpy_gpu.core.types import NDArray
from linumpy_gpu.engine import ChunkedArrayReader
from linumpy_gpu.errors import InvalidArgumentError, StorePermissionError
from linumpy_gpu.image._common import format_bytes
from linumpy_gpu.progress import progress_bar

if TYPE_CHECKING:
    import dask.array
    import zarr

    from linumpy_gpu.engine import ChunkedArrayWriter
    from linumpy_gpu.image.multiscale import MultiscaleImage
    from linumpy_gpu.image.resample import Resampled


class Level:
    """One resolution level: a lazily read n-D array with numpy basic indexing."""

    def __init__(self, reader: ChunkedArrayReader, image: MultiscaleImage, index: int, path: str):
        self._reader = reader
        self.image = image
        self.index = index
        self.path = path

    # metadata -------------------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, ...]:
        """The level's shape."""
        return self._reader.layout.shape

    @property
    def dtype(self) -> np.dtype:
        """The level's dtype (native byte order: what reads return)."""
        return self._reader.layout.dtype

    @property
    def fill_value(self) -> Any:
        """The array's fill value: what reads give for chunks never written."""
        return self._reader.layout.fill_value

    @property
    def stored_dtype(self) -> np.dtype:
        """The dtype as the store holds it: byte order included (``>u2`` where the chunks
        are big-endian), where :attr:`dtype` is what reads return."""
        chunk = self._reader.layout.chunk
        if chunk is not None:
            return chunk.stored_dtype
        # chunks zarr-python decodes: zarr v2 keeps the byte order in its dtype; zarr v3 in
        # the bytes codec (inside the sharding codec, for shards)
        array = self._reader.array
        dtype = np.dtype(array.dtype)
        codecs = list(getattr(array.metadata, "codecs", ()) or ())
        while codecs:
            codec = codecs.pop(0)
            endian = getattr(codec, "endian", None)
            endian = getattr(endian, "value", endian)  # an Enum, or text in newer zarr
            if endian in ("big", "little") and dtype.itemsize > 1:
                return dtype.newbyteorder("<" if endian == "little" else ">")
            codecs[:0] = list(getattr(codec, "codecs", ()) or ())
        return dtype

    @property
    def ndim(self) -> int:
        """Dimensions of the level."""
        return len(self.shape)

    @property
    def chunks(self) -> tuple[int, ...]:
        """The chunk shape: the inner chunk for sharded arrays."""
        return self._reader.layout.chunk_shape

    @property
    def shards(self) -> tuple[int, ...] | None:
        """The shard shape of a sharded level, else None."""
        return self._reader.layout.shard_shape

    @property
    def codecs(self) -> tuple[str, ...]:
        """The codecs of a stored chunk, as short texts."""
        layout = self._reader.layout
        if layout.chunk is not None:
            return layout.codec_names
        arr = self._reader.array
        if arr.metadata.zarr_format == 3:
            return _codec_texts(arr.metadata.codecs)
        return _codec_texts((*arr.filters, *arr.compressors))

    @property
    def nbytes(self) -> int:
        """Bytes of the whole level, decoded."""
        return math.prod(self.shape) * self.dtype.itemsize

    @property
    def size(self) -> int:
        """Elements of the level."""
        return math.prod(self.shape)

    @property
    def axes(self) -> tuple[ngff.Axis, ...]:
        """The image's axes (names, types, units)."""
        return self.image.axes

    @property
    def scale(self) -> tuple[float, ...]:
        """Physical size of one voxel of this level along each axis."""
        return self.image.scale(self.index)

    @property
    def translation(self) -> tuple[float, ...]:
        """Physical position of this level's first voxel centre along each axis."""
        return self.image.translation(self.index)

    @property
    def exact(self) -> bool:
        """Whether this level is placed by a scale and a translation alone."""
        return self.image.meta.datasets[self.index].exact

    def transform(self) -> ngff.Transformation:
        """This level's transformation (see :meth:`MultiscaleImage.transform`)."""
        return self.image.transform(self.index)

    def matrix(self) -> np.ndarray | None:
        """This level's transformation as a homogeneous matrix, or None for fields."""
        return self.image.matrix(self.index)

    def resample(
        self,
        spacing: Sequence[float] | None = None,
        *,
        order: int = 1,
        region: Any = None,
    ) -> Resampled:
        """This level resampled on a regular grid of the image's coordinate system (axes
        aligned with it, ``spacing`` apart; default the voxel's extent along each axis of
        the coordinate system, which follows axes the level's transformation swaps),
        covering the level (or ``region`` of it): on the GPU with
        ``cupyx.scipy.ndimage.affine_transform``, on the CPU with scipy's. For levels placed
        by affine transformations, rotations or scales; displacement and coordinate fields
        raise :class:`~linumpy_gpu.UnsupportedTransformationError`. ``order``: spline
        order (0 nearest, 1 linear)."""
        from linumpy_gpu.image.resample import resample_level

        return resample_level(self, spacing, order=order, region=region)

    @property
    def device(self) -> str:
        """Where reads land: ``cpu`` or ``cuda:N``."""
        return self._reader.backend.name

    @property
    def zarr_array(self) -> zarr.Array:
        """The underlying zarr-python array (metadata, attributes, CPU access)."""
        return self._reader.array

    # reading ---------------------------------------------------------------------------
    def read(
        self,
        region: Any = None,
        out: Any = None,
        *,
        progress: bool | None = None,
        on_damaged: str = "raise",
    ) -> NDArray:
        """Read ``region`` (numpy basic indexing; None = everything) into a new array or
        into ``out`` (same shape and dtype, on this level's device). Returns numpy on the
        CPU and cupy on the GPU. ``on_damaged="fill"`` reads past damaged chunks (fill
        value in their place, a :class:`DamagedChunkWarning` naming them) instead of
        raising :class:`ChunkDecodeError`. ``progress``: a progress bar (default: the
        ``progress`` setting)."""
        index = () if region is None else region
        if progress is None:
            progress = self._reader.settings.progress
        bar = progress_bar(progress, f"reading {self._label()}", unit="chunk")
        if bar is None:
            return self._reader.read(index, out, on_damaged=on_damaged)
        with bar:
            return self._reader.read(index, out, progress=bar, on_damaged=on_damaged)

    def __getitem__(self, index: Any) -> NDArray:
        return self._reader.read(index)

    def read_regions(
        self, regions: Iterable[Any], *, progress: bool | None = None
    ) -> list[NDArray]:
        """Read many regions in one go (each touched chunk decoded once, in shared
        batches): the fast way to pull a set of tiles. ``progress``: a progress bar
        (default: the ``progress`` setting)."""
        if isinstance(regions, tuple) or not isinstance(regions, Iterable):
            # a tuple is one region (its items are per-axis indices), not a list of them
            raise InvalidArgumentError(
                f"regions must be a list of regions (each a slice or a tuple of slices), "
                f"got {type(regions).__name__}: read one region with level[region]"
            )
        if progress is None:
            progress = self._reader.settings.progress
        bar = progress_bar(progress, f"reading {self._label()}", unit="chunk")
        if bar is None:
            return self._reader.read_regions(list(regions))
        with bar:
            return self._reader.read_regions(list(regions), progress=bar)

    def _label(self) -> str:
        return f"{self.image.name or 'level'} [{self.index}]"

    def __setitem__(self, region: Any, value: Any) -> None:
        """Write ``value`` into ``region`` (integers and step-1 slices) of this level. The
        image must be opened with ``mode="r+"``. Chunks the region covers whole are encoded
        and replaced; partly covered ones are read, modified and rewritten. Lower levels are
        not touched: call ``image.update_pyramid(region)`` afterwards."""
        self._writer().write(region, value)

    def _writer(self) -> ChunkedArrayWriter:
        if getattr(self.image.group.store, "read_only", False):
            raise StorePermissionError(
                f"'{self.image.path}' is open read-only: open it with mode='r+' to write"
            )
        from linumpy_gpu.engine.writer import ChunkedArrayWriter

        self._reader.check_unchanged()
        return ChunkedArrayWriter(self._reader.array, self._reader.backend, name=self._reader.name)

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        data = self.read()
        if not isinstance(data, np.ndarray):
            data = data.get()
        return data if dtype is None else data.astype(dtype, copy=False)

    def to_dask(self, chunks: Any = None) -> dask.array.Array:
        """A lazy dask array over this level; each block is one read of whole storage units.

        ``chunks``: None (one shard, or chunk when unsharded, per block), ``"auto"`` or a
        size such as ``"256MiB"`` (whole storage units grouped up to dask's
        ``array.chunk-size`` or that size: fewer, larger tasks, which suits clusters and
        the GPU), or dask chunks. Blocks are numpy or cupy, as this level's device reads.

        The tasks are small and picklable (store path or URL, level path, region, device,
        settings), so the array computes on any dask scheduler, ``dask.distributed`` and
        dask-cuda clusters included: each worker opens the store once and keeps it, a GPU
        worker reads on its own current GPU, and the settings in effect here (those the
        image was opened with, and any ``linumpy_gpu.config.set`` block around this call)
        are the ones workers read with.
        """
        from linumpy_gpu.image.dask import level_to_dask

        return level_to_dask(self, chunks)

    def __len__(self) -> int:
        return self.shape[0]

    def _repr_html_(self) -> str:
        """An HTML summary for Jupyter: this level's row of the image's level table."""
        from linumpy_gpu.image.repr import level_html

        return level_html(self)

    def __repr__(self) -> str:
        shards = f", shards={self.shards}" if self.shards else ""
        return (
            f"<Level {self.index} of '{self.image.path}': shape={self.shape}, chunks={self.chunks}"
            f"{shards}, dtype={self.dtype}, codecs={list(self.codecs)}, "
            f"{format_bytes(self.nbytes)}, device={self.device}>"
        )


def _codec_texts(codecs: Any) -> tuple[str, ...]:
    """Short texts for zarr-python codec objects, a sharding codec with its chunks' codecs
    inside it (the plain bytes serializer left out, as the engine's own names leave it)."""
    out = []
    for codec in codecs:
        inner = getattr(codec, "codecs", None)
        if inner is not None:
            shape = tuple(getattr(codec, "chunk_shape", ()))
            out.append(f"sharding(chunks={shape}: {', '.join(_codec_texts(inner)) or 'raw'})")
        elif type(codec).__name__ != "BytesCodec":
            out.append(type(codec).__name__)
    return tuple(out)
