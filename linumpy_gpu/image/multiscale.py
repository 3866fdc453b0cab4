"""Multiscale images and their label images."""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping
from functools import cached_property
from typing import TYPE_CHECKING, Any

import numpy as np

from linumpy_gpu import config, ngff
from linumpy_gpu.backends.base import Backend
from linumpy_gpu.core.selection import normalize_selection
from linumpy_gpu.engine import ChunkedArrayReader
from linumpy_gpu.engine.writer import check_write_bounds
from linumpy_gpu.errors import (
    InvalidArgumentError,
    InvalidMetadataError,
    LevelNotFoundError,
    MetadataWarning,
    NotFoundError,
    SelectionError,
    WriteError,
    warn,
)
from linumpy_gpu.image._common import (
    child_group,
    dtype_text,
    format_bytes,
    join,
    refuse_unfinished,
)
from linumpy_gpu.image.level import Level
from linumpy_gpu.io.stores import nested_by_spec, translated_errors
from linumpy_gpu.progress import progress_bar

if TYPE_CHECKING:
    import dask.array


def _inline_stored_parameters(block: dict[str, Any], group: Any, where: str) -> dict[str, Any]:
    """``block`` with the scales and translations that NGFF 0.4 and 0.5 allow to be stored
    in a zarr array (``{"type": "scale", "path": ...}``) read from there and written inline,
    so the metadata parser sees values (it never touches arrays)."""
    multiscales = block.get("multiscales")
    if not isinstance(multiscales, list):
        return block
    multiscales = copy.deepcopy(multiscales)

    def inline(transforms: Any, field: str) -> None:
        for i, t in enumerate(transforms if isinstance(transforms, list) else []):
            kind = t.get("type") if isinstance(t, dict) else None
            if kind not in ("scale", "translation") or kind in t or "path" not in t:
                continue
            stored = t["path"]
            try:
                values = np.asarray(group[stored][...], dtype=np.float64)
            except (KeyError, TypeError, ValueError) as exc:
                raise InvalidMetadataError(
                    where, f"{field}[{i}].path", f"a 1-D zarr array of numbers at {stored!r}", exc
                ) from None
            if values.ndim != 1:
                raise InvalidMetadataError(
                    where, f"{field}[{i}].path", "a 1-D array", f"shape {values.shape}"
                )
            t[kind] = values.tolist()

    for m, multiscale in enumerate(multiscales):
        if not isinstance(multiscale, dict):
            continue
        inline(
            multiscale.get("coordinateTransformations"),
            f"multiscales[{m}].coordinateTransformations",
        )
        datasets = multiscale.get("datasets")
        for d, dataset in enumerate(datasets if isinstance(datasets, list) else []):
            if isinstance(dataset, dict):
                field = f"multiscales[{m}].datasets[{d}].coordinateTransformations"
                inline(dataset.get("coordinateTransformations"), field)
    return {**block, "multiscales": multiscales}


class MultiscaleImage:
    """An OME-NGFF multiscale image: levels, axes, physical transforms, channels, labels."""

    def __init__(
        self,
        group: Any,
        path: str,
        backend: Backend,
        *,
        multiscale_index: int = 0,
        _unfinished_ok: bool = False,
    ):
        self.group = group
        self.path = path
        self.backend = backend
        self._settings = config.get()  # its label images read with those it was opened with
        attrs = dict(group.attrs)
        if not _unfinished_ok:  # the writer of an image it has yet to finish opens it
            refuse_unfinished(attrs, path)  # (label images and fields too, however reached)
        block, version = ngff.ome_block(attrs, group.metadata.zarr_format)
        if version in ("0.4", "0.5"):
            block = _inline_stored_parameters(block, group, path)
        self.meta: ngff.MultiscaleMeta = ngff.parse_multiscales(
            block, version, path, multiscale_index
        )
        self.levels: list[Level] = [
            self._open_level(i, ds) for i, ds in enumerate(self.meta.datasets)
        ]
        self.meta = ngff.scales_from_shapes(self.meta, [lv.shape for lv in self.levels])
        self._check_levels()

    def _open_level(self, i: int, ds: ngff.DatasetMeta) -> Level:
        field = f"multiscales[0].datasets[{i}].path"
        where = join(self.path, ds.path)
        with translated_errors(where, metadata=True):
            try:
                array = self.group[ds.path]
            except KeyError as exc:
                raise InvalidMetadataError(
                    self.path, field, f"a zarr array at '{ds.path}'", "nothing"
                ) from exc
        if not hasattr(array, "dtype"):
            raise InvalidMetadataError(self.path, field, f"a zarr array at '{ds.path}'", "a group")
        with translated_errors(where, metadata=True):
            array, nested = nested_by_spec(array, self.meta.version)
        if nested:
            warn(
                f"{where}: the array's metadata names no dimension_separator; its chunks are "
                f"read from nested folders ('0/1/2'), as NGFF {self.meta.version} stores them "
                "(zarr-python's default '.' would find none of them)",
                MetadataWarning,
            )
        if array.ndim != len(self.meta.axes):
            raise InvalidMetadataError(
                self.path,
                field,
                f"a {len(self.meta.axes)}-D array (one dimension per axis "
                f"{list(self.meta.axis_names)})",
                f"{array.ndim}-D array of shape {array.shape}",
            )
        names = getattr(array.metadata, "dimension_names", None)
        axes = list(self.meta.axis_names)
        if names is not None and list(names) != axes:
            warn(
                f"{where}: the array's dimension_names {list(names)} are not the image's axes "
                f"{axes}; the axes are used",
                MetadataWarning,
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
        # a level whose shape its scale contradicts places its voxels where they are not:
        # analyses and viewers that trust the scales measure the wrong distances
        problems = self.shape_scale_mismatches()
        if problems:
            more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
            warn(
                f"level shapes contradict their scales: {problems[0]}{more}; the scales are "
                "used as they are (`linumpy-gpu validate` lists every case)",
                MetadataWarning,
            )

    def shape_scale_mismatches(self) -> list[str]:
        """Where a level's shape is not the previous level's divided by the ratio of their
        scales (within one voxel), or a level is longer than the one before: one sentence
        each. Empty for images placed by more than a scale and a translation, and for
        versions that store no scales (not checked)."""
        if not self.meta.exact or not ngff.states_scales(self.meta.version):
            return []
        names = self.axis_names
        problems = []
        for i in range(1, len(self.levels)):
            prev, cur = self.levels[i - 1], self.levels[i]
            scales = zip(prev.shape, cur.shape, self.scale(i - 1), self.scale(i), strict=True)
            for ax, (n0, n1, a, b) in enumerate(scales):
                if n1 > n0:
                    problems.append(
                        f"{self.path}: level {i} ('{cur.path}') is longer than level {i - 1} "
                        f"along axis '{names[ax]}' ({n1} > {n0})"
                    )
                    continue
                if a <= 0 or b <= 0:
                    continue
                expected = n0 * a / b
                if abs(n1 - expected) > 1.0 + 1e-6:
                    problems.append(
                        f"{self.path}: level {i} ('{cur.path}') has {n1} voxels along axis "
                        f"'{names[ax]}', but its scale ({b:g} vs {a:g}) says about "
                        f"{expected:.1f} (level {i - 1} has {n0})"
                    )
        return problems

    # metadata -------------------------------------------------------------------------
    @property
    def version(self) -> str:
        """The NGFF version the metadata follows."""
        return self.meta.version

    @property
    def name(self) -> str | None:
        """The image's name, if the metadata gives one."""
        return self.meta.name

    @property
    def axes(self) -> tuple[ngff.Axis, ...]:
        """The image's axes (names, types, units)."""
        return self.meta.axes

    @property
    def axis_names(self) -> tuple[str, ...]:
        """The axes' names, in order."""
        return self.meta.axis_names

    @property
    def channels(self) -> tuple[ngff.Channel, ...]:
        """The channels of the ``omero`` metadata (labels, colours, windows), if any."""
        return self.meta.channels

    @property
    def image_label(self) -> ngff.ImageLabelMeta | None:
        """The ``image-label`` metadata when this image is a label image."""
        return self.meta.image_label

    @property
    def device(self) -> str:
        """Where reads land: ``cpu`` or ``cuda:N``."""
        return self.backend.name

    def scale(self, level: int | str = 0) -> tuple[float, ...]:
        """Physical size of one voxel of ``level`` (an index or a dataset path) along each
        axis (multiscale-level transforms composed in)."""
        return self.meta.datasets[self.level_index(level)].scale

    def translation(self, level: int | str = 0) -> tuple[float, ...]:
        """Physical position of the first voxel's centre of ``level`` along each axis."""
        return self.meta.datasets[self.level_index(level)].translation

    @property
    def exact(self) -> bool:
        """Whether every level is placed by a scale and a translation alone (then
        :meth:`scale` and :meth:`translation` describe it exactly); NGFF 0.6 may place
        levels with affine transformations, rotations or fields, see :meth:`transform`."""
        return self.meta.exact

    @property
    def coordinate_systems(self) -> tuple[ngff.CoordinateSystem, ...]:
        """The coordinate systems the metadata names (NGFF 0.6; empty before)."""
        return self.meta.coordinate_systems

    @property
    def coordinate_system(self) -> str | None:
        """The name of the coordinate system the levels are placed in (NGFF 0.6)."""
        return self.meta.coordinate_system

    @property
    def transformations(self) -> tuple[ngff.Transformation, ...]:
        """The multiscale's own transformations between coordinate systems (NGFF 0.6)."""
        return self.meta.transformations

    def transform(self, level: int | str = 0) -> ngff.Transformation:
        """The transformation from ``level``'s voxel indices to the image's coordinate
        system, its parameters loaded where they live in arrays of the store (NGFF 0.6);
        for earlier versions a scale followed by a translation."""
        dataset = self.meta.datasets[self.level_index(level)]
        t = dataset.transform
        if t is None:
            t = ngff.TransformSequence(
                transformations=(
                    ngff.Scale(scale=dataset.scale),
                    ngff.Translation(translation=dataset.translation),
                )
            )

        def read_array(path: str) -> np.ndarray:
            with translated_errors(join(self.path, path), metadata=True):
                return np.asarray(self.group[path][...])

        return ngff.resolve_parameters(t, read_array, where=self.path, ndim=len(self.axes))

    def matrix(self, level: int | str = 0) -> np.ndarray | None:
        """``level``'s transformation as a homogeneous ``(ndim + 1) x (ndim + 1)`` matrix
        (voxel index to coordinates), or None for fields (displacements, coordinates)."""
        return ngff.to_matrix(self.transform(level), len(self.axes))

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

    def to_dask(self, level: int | str = 0, chunks: Any = None) -> dask.array.Array:
        """A lazy dask array over ``level`` (an index or a dataset path), blocks of whole
        storage units, computable on any dask scheduler or cluster (see
        :meth:`Level.to_dask` for ``chunks``)."""
        return self[level].to_dask(chunks)

    def update_pyramid(
        self, region: Any = None, method: str | None = None, *, progress: bool | None = None
    ) -> None:
        """Recompute the lower levels under ``region`` of level 0 (slices; None = all),
        after region writes into level 0. ``method`` defaults to the one the metadata
        records (``type``; another is refused), else "mean" for images and "nearest" for
        label images (whose levels hold only values of level 0: "mode" or "nearest").
        ``progress``: a progress bar (default: the ``progress`` setting)."""
        from linumpy_gpu.engine.pyramid import (
            LABEL_METHODS,
            METHODS,
            affected_region,
            units_updated,
            update_level,
        )

        labels = self.image_label is not None
        if self.meta.type and self.meta.type not in METHODS:
            # another tool's method (ngff-zarr's "itkwasm_gaussian", say): recomputing some
            # levels with another method would mix two pyramids under one description
            raise InvalidArgumentError(
                f"'{self.path}' records its levels as made with {self.meta.type!r}, which "
                f"linumpy_gpu does not compute ({', '.join(METHODS)}); write the pyramid "
                "again (write_ome_zarr, or linumpy-gpu convert) to update it here"
            )
        recorded = self.meta.type if self.meta.type in METHODS else None
        if labels and recorded not in LABEL_METHODS:
            recorded = None
        if method is not None and recorded is not None and method != recorded:
            # the metadata (its type, and the levels' translations, which differ between
            # methods) describes levels made with the recorded method
            raise InvalidArgumentError(
                f"'{self.path}' records its levels as made with {recorded!r}; update_pyramid "
                f"with {method!r} would leave that metadata wrong: use {recorded!r}, or write "
                "the pyramid again with the new method"
            )
        method = method or recorded or ("nearest" if labels else "mean")
        if labels and method not in LABEL_METHODS:
            # a mean of two labels is a third label that names nothing
            raise InvalidArgumentError(
                f"'{self.path}' is a label image: its levels are computed with 'mode' or "
                f"'nearest', not {method!r}"
            )
        if progress is None:
            progress = self.levels[0]._reader.settings.progress
        shape0 = self.levels[0].shape
        if region is None:
            current = tuple(slice(0, n) for n in shape0)
        else:
            # numpy's basic indexing (negative indices, Ellipsis, numpy integers), as level
            # reads take it; the bounds of what it selects on each axis
            check_write_bounds(region, shape0)
            sel = normalize_selection(region, shape0)
            current = tuple(slice(a.start, a.stop) for a in sel.axes)
            if any(s.stop <= s.start for s in current):
                raise SelectionError(
                    f"update_pyramid: region {region!r} selects nothing of level 0 (shape {shape0})"
                )
        steps = []
        for i, factors in enumerate(self.reduction_factors("update_pyramid"), start=1):
            finer, coarser = self.levels[i - 1], self.levels[i]
            current = affected_region(current, finer.shape, factors, method)
            steps.append((finer, coarser, factors, current))
            current = tuple(
                slice(s.start // f, -(-s.stop // f)) for s, f in zip(current, factors, strict=True)
            )
        # every level's writer first: a level that cannot be written (another writer's
        # codec, a read-only store) refuses before any level has changed
        writers = [coarser._writer() for _, coarser, _, _ in steps]
        bar = None
        if progress and steps:
            total = sum(
                units_updated(
                    finer.zarr_array,
                    coarser.shards or coarser.chunks,
                    f,
                    where,
                    coarse=coarser.shape,
                )
                for finer, coarser, f, where in steps
            )
            bar = progress_bar(True, f"updating {self.name or 'pyramid'}", total=total)
        try:
            for (finer, _, factors, where), writer in zip(steps, writers, strict=True):
                update_level(finer.zarr_array, writer, factors, method, self.backend, where, bar)
        finally:
            if bar is not None:
                bar.close()

    def reduction_factors(self, purpose: str = "this") -> list[tuple[int, ...]]:
        """Per level after the first, the whole factors by which it reduces the level
        before it on each axis: the ratio of their scales where that is a whole number the
        shapes agree with, else the ratio of the shapes. A level of ``n / f`` elements
        rounded up (as this package writes) or down (as ome-zarr-py writes) counts as
        reduced by ``f``. Raises :class:`WriteError` (naming ``purpose``) for a level that
        is not such a reduction."""
        out = []
        for i in range(1, len(self.levels)):
            finer, coarser = self.levels[i - 1].shape, self.levels[i].shape
            ratios = [1.0] * len(finer)
            if self.exact:
                ratios = [b / a for a, b in zip(self.scale(i - 1), self.scale(i), strict=True)]
            factors = []
            for a, b, r in zip(finer, coarser, ratios, strict=True):
                # the scales tell 3 -> 1 reduced by 2 (rounded down) from reduced by 3
                f = round(r)
                if not (f >= 1 and abs(r - f) <= 1e-6 * f and b in (a // f, -(-a // f))):
                    f = max(1, round(a / max(b, 1)))
                if b not in (a // f, -(-a // f)):
                    raise WriteError(
                        f"'{self.path}': level {i} of shape {coarser} is not level {i - 1} of "
                        f"shape {finer} reduced by whole factors; {purpose} needs such a pyramid"
                    )
                factors.append(f)
            out.append(tuple(factors))
        return out

    def _repr_html_(self) -> str:
        """An HTML summary for Jupyter: levels, axes, channels, labels and a thumbnail (see
        :mod:`linumpy_gpu.image.repr`)."""
        from linumpy_gpu.image.repr import image_html

        return image_html(self)

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
                    dtype_text(lv),
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
        inexact = [str(i) for i, ds in enumerate(self.meta.datasets) if not ds.exact]
        if inexact:
            lines.append(
                f"  levels {', '.join(inexact)}: placed by more than a scale and a translation "
                "(see .transform(level), .matrix(level))"
            )
        return "\n".join(lines)


class Labels(Mapping[str, MultiscaleImage]):
    """The label images of an image (its ``labels`` group), opened on demand."""

    def __init__(self, image: MultiscaleImage):
        self._image = image
        # by name and the settings they read with (a set() block around opening one
        # gives it other settings than the image's own)
        self._opened: dict[tuple[str, config.Settings], MultiscaleImage] = {}
        self._group: Any = None
        self.names: tuple[str, ...] = ()
        where = join(image.path, "labels")
        with translated_errors(where, metadata=True):
            group = image.group.get("labels")
        if group is None:
            return
        if hasattr(group, "dtype"):
            # an array of the user's under the name NGFF gives the labels group
            warn(f"{where} is an array, not a labels group: no label images", MetadataWarning)
            return
        block, _ = ngff.ome_block(dict(group.attrs), group.metadata.zarr_format)
        self.names = ngff.parse_labels_group(block, where) if "labels" in block else ()
        self._group = group

    def __getitem__(self, name: str) -> MultiscaleImage:
        if name not in self.names:
            raise NotFoundError(
                f"'{self._image.path}' has no label image {name!r}; it has {list(self.names)}"
            )
        settings = config.layered(self._image._settings)
        if (name, settings) not in self._opened:
            where = join(self._image.path, "labels", name)
            group = child_group(self._group, name, where)
            if group is None:
                raise InvalidMetadataError(
                    join(self._image.path, "labels"),
                    "labels",
                    f"a label group at '{name}'",
                    "nothing",
                )
            with config.set(settings):
                label = MultiscaleImage(group, where, self._image.backend)
            if label.image_label is None:
                warn(f"{where}: label image has no 'image-label' metadata", MetadataWarning)
            self._opened[name, settings] = label
        return self._opened[name, settings]

    def __iter__(self) -> Iterator[str]:
        return iter(self.names)

    def __len__(self) -> int:
        return len(self.names)

    def _repr_html_(self) -> str:
        """An HTML summary for Jupyter: the label images' names, shapes and colours."""
        from linumpy_gpu.image.repr import labels_html

        return labels_html(self)

    def __repr__(self) -> str:
        return f"<Labels of '{self._image.path}': {list(self.names)}>"
