"""Collections of images: HCS plates and their wells, bioformats2raw series."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from linumpy_gpu import config, ngff
from linumpy_gpu.backends.base import Backend
from linumpy_gpu.errors import InvalidMetadataError, NotFoundError
from linumpy_gpu.image._common import child_group, join
from linumpy_gpu.image.multiscale import MultiscaleImage
from linumpy_gpu.io.stores import translated_errors


class Well:
    """One well of a plate: its fields of view, each a multiscale image."""

    def __init__(self, group: Any, path: str, backend: Backend):
        self.group, self.path, self.backend = group, path, backend
        self._settings = config.get()  # its images read with those it was opened with
        block, version = ngff.ome_block(dict(group.attrs), group.metadata.zarr_format)
        self.meta = ngff.parse_well(block, version, path)

    @property
    def fields(self) -> tuple[ngff.FieldRef, ...]:
        """The well's fields of view (their paths and acquisitions)."""
        return self.meta.images

    def image(self, field: int | str = 0) -> MultiscaleImage:
        """The multiscale image of field of view ``field``: an index, or a field's path as
        the well's metadata lists it."""
        n = len(self.meta.images)
        paths = [ref.path for ref in self.meta.images]
        if isinstance(field, str) and field in paths:
            field = paths.index(field)
        if (
            not isinstance(field, int | np.integer)
            or isinstance(field, bool)
            or not -n <= field < n
        ):
            raise NotFoundError(
                f"well '{self.path}' has no field {field!r}; it has {n} field(s), at paths "
                f"{paths[:20]}"
            )
        ref = self.meta.images[int(field)]
        return _open_child(
            self.group, ref.path, join(self.path, ref.path), self.backend, self._settings
        )

    def __getitem__(self, field: int | str) -> MultiscaleImage:
        return self.image(field)

    def __len__(self) -> int:
        return len(self.meta.images)

    def _repr_html_(self) -> str:
        """An HTML summary for Jupyter: the well's fields of view."""
        from linumpy_gpu.image.repr import well_html

        return well_html(self)

    def __repr__(self) -> str:
        return f"<Well '{self.path}': {len(self)} field(s)>"


class Plate:
    """An HCS plate: rows, columns, wells; ``plate["A/1"]`` or ``plate.well("A", "1")``."""

    def __init__(self, group: Any, path: str, backend: Backend):
        self.group, self.path, self.backend = group, path, backend
        self._settings = config.get()  # its images read with those it was opened with
        block, version = ngff.ome_block(dict(group.attrs), group.metadata.zarr_format)
        self.meta = ngff.parse_plate(block, version, path)

    @property
    def name(self) -> str | None:
        """The plate's name, if the metadata gives one."""
        return self.meta.name

    @property
    def rows(self) -> tuple[str, ...]:
        """Row names, in order."""
        return self.meta.rows

    @property
    def columns(self) -> tuple[str, ...]:
        """Column names, in order."""
        return self.meta.columns

    @property
    def wells(self) -> tuple[ngff.WellRef, ...]:
        """The wells the metadata lists."""
        return self.meta.wells

    def well(self, row: str, column: str) -> Well:
        """The well at ``row``, ``column`` (names)."""
        return self[f"{row}/{column}"]

    def image(self, row: str, column: str, field: int = 0) -> MultiscaleImage:
        """Field ``field`` of the well at ``row``, ``column``."""
        return self.well(row, column).image(field)

    def __getitem__(self, path: str) -> Well:
        if not isinstance(path, str) or path not in {w.path for w in self.meta.wells}:
            shown = [w.path for w in self.meta.wells[:20]]
            raise NotFoundError(f"plate '{self.path}' has no well {path!r}; it has {shown}")
        group = child_group(self.group, path, join(self.path, path))
        if group is None:
            raise InvalidMetadataError(
                self.path, "plate.wells", f"a well group at '{path}'", "nothing"
            )
        with config.set(config.layered(self._settings)):
            return Well(group, join(self.path, path), self.backend)

    def __iter__(self) -> Iterator[str]:
        """The wells' paths ("A/1", ...), as the metadata lists them."""
        return iter([w.path for w in self.meta.wells])

    def __len__(self) -> int:
        return len(self.meta.wells)

    def __contains__(self, path: object) -> bool:
        return any(w.path == path for w in self.meta.wells)

    def _repr_html_(self) -> str:
        """An HTML summary for Jupyter: rows, columns and the wells present."""
        from linumpy_gpu.image.repr import plate_html

        return plate_html(self)

    def __repr__(self) -> str:
        return (
            f"<Plate '{self.path}' {self.name or ''}: {len(self.rows)} rows x "
            f"{len(self.columns)} columns, {len(self.wells)} wells>"
        )


class SeriesCollection:
    """A bioformats2raw.layout root: the images ``0``, ``1``, ... it holds."""

    def __init__(self, group: Any, path: str, backend: Backend):
        self.group, self.path, self.backend = group, path, backend
        self._settings = config.get()  # its images read with those it was opened with
        block, _ = ngff.ome_block(dict(group.attrs), group.metadata.zarr_format)
        ngff.parse_bioformats2raw(block, path)
        self.series_paths = self._series_paths()

    def _series_paths(self) -> list[str]:
        ome = child_group(self.group, "OME", join(self.path, "OME"))
        if ome is not None:
            with translated_errors(join(self.path, "OME"), metadata=True):
                block, _ = ngff.ome_block(dict(ome.attrs), ome.metadata.zarr_format)
            listed = block.get("series")
            if isinstance(listed, list) and listed:
                return [str(s) for s in listed]
        paths = []
        i = 0
        while True:
            with translated_errors(join(self.path, str(i)), metadata=True):
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
        return _open_child(self.group, p, join(self.path, p), self.backend, self._settings)

    def _repr_html_(self) -> str:
        """An HTML summary for Jupyter: the series' paths."""
        from linumpy_gpu.image.repr import series_html

        return series_html(self)

    def __repr__(self) -> str:
        return f"<SeriesCollection '{self.path}' (bioformats2raw): {len(self)} series>"


class Scene:
    """An NGFF 0.6 scene: images placed in shared coordinate systems (registered tiles,
    modalities). ``scene.images()`` lists each image with the transformation that maps its
    coordinate system into the scene's; ``scene[path]`` opens one."""

    def __init__(self, group: Any, path: str, backend: Backend):
        self.group, self.path, self.backend = group, path, backend
        self._settings = config.get()  # its images read with those it was opened with
        block, version = ngff.ome_block(dict(group.attrs), group.metadata.zarr_format)
        self.meta: ngff.Scene = ngff.parse_scene(block, version, path)

    @property
    def coordinate_systems(self) -> tuple[ngff.CoordinateSystem, ...]:
        """The scene's own coordinate systems."""
        return self.meta.coordinate_systems

    @property
    def transformations(self) -> tuple[ngff.Transformation, ...]:
        """The scene's transformations, as the metadata gives them."""
        return self.meta.transformations

    def images(self, target: str | None = None) -> tuple[ngff.SceneImage, ...]:
        """Every image of the scene with the transformation from its coordinate system into
        the scene's coordinate system ``target`` (default the scene's first)."""
        ref = None if target is None else ngff.CoordinateSystemRef(target)
        return ngff.scene_images(self.meta, ref)

    def __getitem__(self, path: str) -> MultiscaleImage:
        if path not in self.meta.image_paths:
            raise NotFoundError(
                f"scene '{self.path}' has no image {path!r}; it has {list(self.meta.image_paths)}"
            )
        return _open_child(self.group, path, join(self.path, path), self.backend, self._settings)

    def __iter__(self) -> Iterator[str]:
        """The images' paths, as the metadata lists them."""
        return iter(self.meta.image_paths)

    def __len__(self) -> int:
        return len(self.meta.image_paths)

    def __contains__(self, path: object) -> bool:
        return path in self.meta.image_paths

    def __repr__(self) -> str:
        return f"<Scene '{self.path}': {len(self)} image(s) {list(self.meta.image_paths)}>"


def _open_child(
    group: Any, path: str, where: str, backend: Backend, settings: config.Settings
) -> MultiscaleImage:
    """The multiscale image at ``path`` below ``group``, reading with ``settings``."""
    child = child_group(group, path, where)
    if child is None:
        raise InvalidMetadataError(where, "path", "a zarr group", "nothing")
    with config.set(config.layered(settings)):
        return MultiscaleImage(child, where, backend)
