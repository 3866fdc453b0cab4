"""What users hold: multiscale images, their levels, labels, plates, wells and series."""

from __future__ import annotations

import math
import os
from collections.abc import Iterator, Mapping
from functools import cached_property
from typing import Any

import numpy as np

from linumpy_gpu import config, ngff
from linumpy_gpu.backends import resolve_backend
from linumpy_gpu.backends.base import Backend
from linumpy_gpu.engine import ChunkedArrayReader
from linumpy_gpu.errors import (
    IncompleteStoreError,
    InvalidArgumentError,
    InvalidMetadataError,
    LevelNotFoundError,
    MetadataWarning,
    NotFoundError,
    NotOmeZarrError,
    StorePermissionError,
    warn,
)
from linumpy_gpu.io.stores import READ_MODES, locate, translated_errors


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
        return self._reader.layout.shape

    @property
    def dtype(self) -> np.dtype:
        return self._reader.layout.dtype

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def chunks(self) -> tuple[int, ...]:
        """The chunk shape: the inner chunk for sharded arrays."""
        return self._reader.layout.chunk_shape

    @property
    def shards(self) -> tuple[int, ...] | None:
        return self._reader.layout.shard_shape

    @property
    def codecs(self) -> tuple[str, ...]:
        layout = self._reader.layout
        if layout.chunk is not None:
            return layout.codec_names
        arr = self._reader.array
        return tuple(type(c).__name__ for c in (*arr.filters, *arr.compressors))

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def axes(self) -> tuple[ngff.Axis, ...]:
        return self.image.axes

    @property
    def scale(self) -> tuple[float, ...]:
        return self.image.scale(self.index)

    @property
    def translation(self) -> tuple[float, ...]:
        return self.image.translation(self.index)

    @property
    def device(self) -> str:
        return self._reader.backend.name

    @property
    def zarr_array(self) -> Any:
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
    ) -> Any:
        """Read ``region`` (numpy basic indexing; None = everything) into a new array or
        into ``out`` (same shape and dtype, on this level's device). Returns numpy on the
        CPU and cupy on the GPU. ``on_damaged="fill"`` reads past damaged chunks (fill
        value in their place, a :class:`DamagedChunkWarning` naming them) instead of
        raising :class:`ChunkDecodeError`. ``progress``: a progress bar (default: the
        ``progress`` setting)."""
        index = () if region is None else region
        if progress is None:
            progress = self._reader.settings.progress
        if not progress:
            return self._reader.read(index, out, on_damaged=on_damaged)
        from tqdm.auto import tqdm

        with tqdm(desc=f"reading {self.image.name or 'level'} [{self.index}]", unit="chunk") as bar:
            return self._reader.read(index, out, progress=bar, on_damaged=on_damaged)

    def __getitem__(self, index: Any) -> Any:
        return self._reader.read(index)

    def read_regions(self, regions: Any) -> list[Any]:
        """Read many regions in one go (each touched chunk decoded once, in shared
        batches): the fast way to pull a set of tiles."""
        return self._reader.read_regions(list(regions))

    def __setitem__(self, region: Any, value: Any) -> None:
        """Write ``value`` into ``region`` (integers and step-1 slices) of this level. The
        image must be opened with ``mode="r+"``. Chunks the region covers whole are encoded
        and replaced; partly covered ones are read, modified and rewritten. Lower levels are
        not touched: call ``image.update_pyramid(region)`` afterwards."""
        self._writer().write(region, value)

    def _writer(self) -> Any:
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

    def to_dask(self, chunks: Any = None) -> Any:
        """A lazy dask array over this level, one task per (multiple of the) storage chunk.

        Blocks are numpy or cupy, as this level's device reads.
        """
        from linumpy_gpu.dask import level_to_dask

        return level_to_dask(self, chunks)

    def __len__(self) -> int:
        return self.shape[0]

    def __repr__(self) -> str:
        shards = f", shards={self.shards}" if self.shards else ""
        return (
            f"<Level {self.index} of '{self.image.path}': shape={self.shape}, chunks={self.chunks}"
            f"{shards}, dtype={self.dtype}, codecs={list(self.codecs)}, "
            f"{format_bytes(self.nbytes)}, device={self.device}>"
        )


class MultiscaleImage:
    """An OME-NGFF multiscale image: levels, axes, physical transforms, channels, labels."""

    def __init__(self, group: Any, path: str, backend: Backend, *, multiscale_index: int = 0):
        self.group = group
        self.path = path
        self.backend = backend
        block, version = ngff.ome_block(dict(group.attrs), group.metadata.zarr_format)
        self.meta: ngff.MultiscaleMeta = ngff.parse_multiscales(
            block, version, path, multiscale_index
        )
        self.levels: list[Level] = [
            self._open_level(i, ds) for i, ds in enumerate(self.meta.datasets)
        ]
        self._check_levels()

    def _open_level(self, i: int, ds: ngff.DatasetMeta) -> Level:
        field = f"multiscales[0].datasets[{i}].path"
        where = _join(self.path, ds.path)
        with translated_errors(where, metadata=True):
            try:
                array = self.group[ds.path]
            except KeyError as exc:
                raise InvalidMetadataError(
                    self.path, field, f"a zarr array at '{ds.path}'", "nothing"
                ) from exc
        if not hasattr(array, "dtype"):
            raise InvalidMetadataError(self.path, field, f"a zarr array at '{ds.path}'", "a group")
        if array.ndim != len(self.meta.axes):
            raise InvalidMetadataError(
                self.path,
                field,
                f"a {len(self.meta.axes)}-D array (one dimension per axis "
                f"{list(self.meta.axis_names)})",
                f"{array.ndim}-D array of shape {array.shape}",
            )
        with translated_errors(where, metadata=True):
            reader = ChunkedArrayReader(array, self.backend, name=where)
        return Level(reader, self, i, ds.path)

    def _check_levels(self) -> None:
        dtypes = {lv.dtype for lv in self.levels}
        if len(dtypes) > 1:
            warn(
                f"{self.path}: pyramid levels have different dtypes "
                f"{[str(lv.dtype) for lv in self.levels]}; NGFF expects one dtype",
                MetadataWarning,
            )

    # metadata -------------------------------------------------------------------------
    @property
    def version(self) -> str:
        return self.meta.version

    @property
    def name(self) -> str | None:
        return self.meta.name

    @property
    def axes(self) -> tuple[ngff.Axis, ...]:
        return self.meta.axes

    @property
    def axis_names(self) -> tuple[str, ...]:
        return self.meta.axis_names

    @property
    def channels(self) -> tuple[ngff.Channel, ...]:
        return self.meta.channels

    @property
    def image_label(self) -> ngff.ImageLabelMeta | None:
        """The ``image-label`` metadata when this image is a label image."""
        return self.meta.image_label

    @property
    def device(self) -> str:
        return self.backend.name

    def scale(self, level: int | str = 0) -> tuple[float, ...]:
        """Physical size of one voxel of ``level`` (an index or a dataset path) along each
        axis (multiscale-level transforms composed in)."""
        return self.meta.datasets[self.level_index(level)].scale

    def translation(self, level: int | str = 0) -> tuple[float, ...]:
        """Physical position of the first voxel's centre of ``level`` along each axis."""
        return self.meta.datasets[self.level_index(level)].translation

    def level_index(self, level: int | str) -> int:
        """The index of ``level``: an index (negative counts from the coarsest) or a
        dataset path as the metadata writes it (``'0'``, ``'scale0/image'``)."""
        n = len(self.meta.datasets)
        if isinstance(level, int | np.integer) and not isinstance(level, bool):
            if -n <= int(level) < n:
                return int(level) % n
        elif isinstance(level, str):
            for i, ds in enumerate(self.meta.datasets):
                if ds.path == level:
                    return i
        paths = [ds.path for ds in self.meta.datasets]
        raise LevelNotFoundError(
            f"'{self.path}' has no level {level!r}: it has {n} level(s), "
            f"indices 0..{n - 1} or paths {paths}"
        )

    @cached_property
    def labels(self) -> Labels:
        return Labels(self)

    # access ----------------------------------------------------------------------------
    def __getitem__(self, level: int | str) -> Level:
        return self.levels[self.level_index(level)]

    def __len__(self) -> int:
        return len(self.levels)

    def __iter__(self) -> Iterator[Level]:
        return iter(self.levels)

    def to_dask(self, level: int | str = 0, chunks: Any = None) -> Any:
        """A lazy dask array over ``level`` (see :meth:`Level.to_dask`)."""
        return self[level].to_dask(chunks)

    def update_pyramid(self, region: Any = None, method: str | None = None) -> None:
        """Recompute the lower levels under ``region`` of level 0 (slices; None = all),
        after region writes into level 0. ``method`` defaults to the one the metadata
        records (``type``), else "mean"."""
        from linumpy_gpu.engine.pyramid import METHODS
        from linumpy_gpu.write import update_level

        method = method or (self.meta.type if self.meta.type in METHODS else "mean")
        shape0 = self.levels[0].shape
        current = (
            tuple(slice(0, n) for n in shape0)
            if region is None
            else tuple(
                slice(*s.indices(n)[:2])
                for s, n in zip(_as_slices(region, len(shape0)), shape0, strict=True)
            )
        )
        for i in range(1, len(self.levels)):
            finer, coarser = self.levels[i - 1], self.levels[i]
            factors = tuple(
                max(1, round(a / b)) for a, b in zip(finer.shape, coarser.shape, strict=True)
            )
            update_level(
                finer.zarr_array, coarser._writer(), factors, method, self.backend, current
            )
            current = tuple(
                slice(s.start // f, -(-s.stop // f)) for s, f in zip(current, factors, strict=True)
            )

    def __repr__(self) -> str:
        axes = ", ".join(
            f"{a.name}[{a.type or '?'}{', ' + a.unit if a.unit else ''}]" for a in self.axes
        )
        lines = [
            f"<MultiscaleImage '{self.path}' NGFF {self.version}, device={self.device}>",
            f"  axes: {axes}",
        ]
        if self.channels:
            lines.append(
                "  channels: "
                + ", ".join(f"{c.label or '?'} (#{c.color or '------'})" for c in self.channels)
            )
        rows = [("level", "shape", "chunks", "shards", "dtype", "codecs", "size", "scale")]
        for lv in self.levels:
            rows.append(
                (
                    str(lv.index),
                    str(lv.shape),
                    str(lv.chunks),
                    str(lv.shards or "-"),
                    str(lv.dtype),
                    ", ".join(lv.codecs) or "raw",
                    format_bytes(lv.nbytes),
                    "(" + ", ".join(f"{s:g}" for s in lv.scale) + ")",
                )
            )
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        lines += [
            "  " + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
            for r in rows
        ]
        return "\n".join(lines)


class Labels(Mapping[str, MultiscaleImage]):
    """The label images of an image (its ``labels`` group), opened on demand."""

    def __init__(self, image: MultiscaleImage):
        self._image = image
        self._opened: dict[str, MultiscaleImage] = {}
        self._group = None
        self.names: tuple[str, ...] = ()
        try:
            group = image.group["labels"]
        except KeyError:
            return
        block, _ = ngff.ome_block(dict(group.attrs), group.metadata.zarr_format)
        where = _join(image.path, "labels")
        self.names = ngff.parse_labels_group(block, where) if "labels" in block else ()
        self._group = group

    def __getitem__(self, name: str) -> MultiscaleImage:
        if name not in self.names:
            raise NotFoundError(
                f"'{self._image.path}' has no label image {name!r}; it has {list(self.names)}"
            )
        if name not in self._opened:
            where = _join(self._image.path, "labels", name)
            try:
                group = self._group[name]
            except KeyError:
                raise InvalidMetadataError(
                    _join(self._image.path, "labels"),
                    "labels",
                    f"a label group at '{name}'",
                    "nothing",
                ) from None
            label = MultiscaleImage(group, where, self._image.backend)
            if label.image_label is None:
                warn(f"{where}: label image has no 'image-label' metadata", MetadataWarning)
            self._opened[name] = label
        return self._opened[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.names)

    def __len__(self) -> int:
        return len(self.names)

    def __repr__(self) -> str:
        return f"<Labels of '{self._image.path}': {list(self.names)}>"


class Well:
    """One well of a plate: its fields of view, each a multiscale image."""

    def __init__(self, group: Any, path: str, backend: Backend):
        self.group, self.path, self.backend = group, path, backend
        block, version = ngff.ome_block(dict(group.attrs), group.metadata.zarr_format)
        self.meta = ngff.parse_well(block, version, path)

    @property
    def fields(self) -> tuple[ngff.FieldRef, ...]:
        return self.meta.images

    def image(self, field: int = 0) -> MultiscaleImage:
        """The multiscale image of field of view ``field`` (an index)."""
        n = len(self.meta.images)
        if (
            not isinstance(field, int | np.integer)
            or isinstance(field, bool)
            or not -n <= field < n
        ):
            raise NotFoundError(f"well '{self.path}' has no field {field!r}; it has {n} field(s)")
        ref = self.meta.images[int(field)]
        return _open_child(self.group, ref.path, _join(self.path, ref.path), self.backend)

    def __getitem__(self, field: int) -> MultiscaleImage:
        return self.image(field)

    def __len__(self) -> int:
        return len(self.meta.images)

    def __repr__(self) -> str:
        return f"<Well '{self.path}': {len(self)} field(s)>"


class Plate:
    """An HCS plate: rows, columns, wells; ``plate["A/1"]`` or ``plate.well("A", "1")``."""

    def __init__(self, group: Any, path: str, backend: Backend):
        self.group, self.path, self.backend = group, path, backend
        block, version = ngff.ome_block(dict(group.attrs), group.metadata.zarr_format)
        self.meta = ngff.parse_plate(block, version, path)

    @property
    def name(self) -> str | None:
        return self.meta.name

    @property
    def rows(self) -> tuple[str, ...]:
        return self.meta.rows

    @property
    def columns(self) -> tuple[str, ...]:
        return self.meta.columns

    @property
    def wells(self) -> tuple[ngff.WellRef, ...]:
        return self.meta.wells

    def well(self, row: str, column: str) -> Well:
        return self[f"{row}/{column}"]

    def image(self, row: str, column: str, field: int = 0) -> MultiscaleImage:
        return self.well(row, column).image(field)

    def __getitem__(self, path: str) -> Well:
        if path not in {w.path for w in self.meta.wells}:
            shown = [w.path for w in self.meta.wells[:20]]
            raise NotFoundError(f"plate '{self.path}' has no well {path!r}; it has {shown}")
        try:
            group = self.group[path]
        except KeyError:
            raise InvalidMetadataError(
                self.path, "plate.wells", f"a well group at '{path}'", "nothing"
            ) from None
        return Well(group, _join(self.path, path), self.backend)

    def __repr__(self) -> str:
        return (
            f"<Plate '{self.path}' {self.name or ''}: {len(self.rows)} rows x "
            f"{len(self.columns)} columns, {len(self.wells)} wells>"
        )


class SeriesCollection:
    """A bioformats2raw.layout root: the images ``0``, ``1``, ... it holds."""

    def __init__(self, group: Any, path: str, backend: Backend):
        self.group, self.path, self.backend = group, path, backend
        block, _ = ngff.ome_block(dict(group.attrs), group.metadata.zarr_format)
        ngff.parse_bioformats2raw(block, path)
        self.series_paths = self._series_paths()

    def _series_paths(self) -> list[str]:
        try:
            ome = self.group["OME"]
        except KeyError:
            ome = None
        if ome is not None:
            with translated_errors(_join(self.path, "OME"), metadata=True):
                block, _ = ngff.ome_block(dict(ome.attrs), ome.metadata.zarr_format)
            listed = block.get("series")
            if isinstance(listed, list) and listed:
                return [str(s) for s in listed]
        paths = []
        i = 0
        while True:
            try:
                self.group[str(i)]
            except KeyError:
                break
            paths.append(str(i))
            i += 1
        return paths

    def __len__(self) -> int:
        return len(self.series_paths)

    def __getitem__(self, i: int) -> MultiscaleImage:
        n = len(self.series_paths)
        if not isinstance(i, int | np.integer) or isinstance(i, bool) or not -n <= i < n:
            raise NotFoundError(f"'{self.path}' has no series {i!r}; it has {n} series")
        p = self.series_paths[int(i)]
        return _open_child(self.group, p, _join(self.path, p), self.backend)

    def __repr__(self) -> str:
        return f"<SeriesCollection '{self.path}' (bioformats2raw): {len(self)} series>"


def open_ome_zarr(
    path: Any,
    device: Any = "cpu",
    *,
    mode: str = "r",
    storage_options: dict[str, Any] | None = None,
    settings: config.Settings | Mapping[str, Any] | None = None,
) -> Any:
    """Open an OME-Zarr store: a :class:`MultiscaleImage`, :class:`Plate`, :class:`Well` or
    :class:`SeriesCollection` (bioformats2raw), by what the root holds.

    ``path``: a local path, a URL (``s3://``, ``gs://``, ``https://``, ``memory://``, with
    ``storage_options`` for fsspec), a zarr store or an open ``zarr.Group``.
    ``device``: "cpu" (numpy), "gpu" / "cuda:N" / N (cupy), or "auto" (GPU when usable,
    else CPU with a warning). ``mode``: "r" (read only) or "r+" (region writes into existing
    levels). Opening never creates, changes or deletes anything; to create or replace a
    store use :func:`~linumpy_gpu.write_ome_zarr`. ``settings``: changes to
    :mod:`linumpy_gpu.config` for this image (its reads keep them). Only metadata is read
    here; pixels are read on indexing.
    """
    if settings is not None:
        with config.set(settings):
            return open_ome_zarr(path, device, mode=mode, storage_options=storage_options)
    if mode not in READ_MODES:
        raise InvalidArgumentError(
            f"mode must be 'r' (read) or 'r+' (write regions of existing levels), got {mode!r}; "
            "opening never creates or deletes a store: use write_ome_zarr(..., overwrite=True)"
        )
    backend = resolve_backend(device)
    group, where = _open_group(path, mode, storage_options)
    with translated_errors(where, metadata=True):
        attrs = dict(group.attrs)
    if isinstance(attrs.get("linumpy_gpu"), dict) and attrs["linumpy_gpu"].get("write_in_progress"):
        raise IncompleteStoreError(
            where,
            "attributes",
            "a finished write (a linumpy_gpu write of this store was "
            "interrupted before its metadata was written; rewrite it with overwrite=True)",
        )
    block, _ = ngff.ome_block(attrs, group.metadata.zarr_format)
    kind = ngff.require_ome(block, where)
    if kind == "plate":
        return Plate(group, where, backend)
    if kind == "well":
        return Well(group, where, backend)
    if kind == "bioformats2raw" and "multiscales" not in block:
        return SeriesCollection(group, where, backend)
    if kind == "labels":
        raise NotOmeZarrError(
            where,
            "multiscales",
            "an image (this is a 'labels' group: open its parent image and use image.labels[name])",
        )
    return MultiscaleImage(group, where, backend)


def _open_group(path: Any, mode: str, storage_options: dict[str, Any] | None) -> tuple[Any, str]:
    import zarr

    if isinstance(path, zarr.Group):
        if storage_options:
            raise InvalidArgumentError("storage_options apply to URLs, not to an open zarr.Group")
        where = _group_where(path)
        if mode == "r+" and path.store.read_only:
            raise StorePermissionError(
                f"'{where}': the zarr.Group's store is read-only; open it with mode='r+'"
            )
        return path, where
    if isinstance(path, zarr.Array):
        raise NotOmeZarrError(
            str(path.store_path), "zarr.json / .zgroup", "an OME-Zarr group", "a zarr array"
        )
    location = locate(path, mode=mode, storage_options=storage_options)
    with translated_errors(location.where, metadata=True):
        group = zarr.open_group(store=location.store, mode=mode)
    return group, location.where


def _group_where(group: Any) -> str:
    root = getattr(group.store, "root", None)
    if root is not None:
        return _join(os.fspath(root), group.path)
    return str(group.store_path)


def _open_child(group: Any, path: str, where: str, backend: Backend) -> MultiscaleImage:
    """The multiscale image at ``path`` below ``group``."""
    with translated_errors(where, metadata=True):
        try:
            child = group[path]
        except KeyError as exc:
            raise InvalidMetadataError(where, "path", "a zarr group", "nothing") from exc
    if not hasattr(child, "attrs") or hasattr(child, "dtype"):
        raise InvalidMetadataError(where, "path", "a zarr group", "an array")
    return MultiscaleImage(child, where, backend)


def _as_slices(region: Any, ndim: int) -> tuple[slice, ...]:
    region = region if isinstance(region, tuple) else (region,)
    region = tuple(slice(r, r + 1) if isinstance(r, int) else r for r in region)
    return region + (slice(None),) * (ndim - len(region))


def _join(*parts: str) -> str:
    return "/".join(p.rstrip("/") for p in parts if p)


def format_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"
