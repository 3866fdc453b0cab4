"""Opening a store: what its root holds decides what the user gets."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from typing import Any

from linumpy_gpu import config, ngff
from linumpy_gpu.backends import resolve_backend
from linumpy_gpu.errors import (
    InvalidArgumentError,
    NotOmeZarrError,
    StorePermissionError,
)
from linumpy_gpu.image._common import join, refuse_unfinished
from linumpy_gpu.image.collections import Plate, Scene, SeriesCollection, Well
from linumpy_gpu.image.multiscale import MultiscaleImage
from linumpy_gpu.io.stores import READ_MODES, locate, translated_errors


def open_ome_zarr(
    path: Any,
    device: Any = "cpu",
    *,
    mode: str = "r",
    storage_options: dict[str, Any] | None = None,
    settings: config.Settings | Mapping[str, Any] | None = None,
) -> MultiscaleImage | Plate | Well | SeriesCollection | Scene:
    """Open an OME-Zarr store: a :class:`MultiscaleImage`, :class:`Plate`, :class:`Well`,
    :class:`SeriesCollection` (bioformats2raw) or :class:`Scene` (NGFF 0.6), by what the
    root holds.

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
    refuse_unfinished(attrs, where)
    block, _ = ngff.ome_block(attrs, group.metadata.zarr_format)
    kind = ngff.require_ome(block, where)
    if kind == "plate":
        return Plate(group, where, backend)
    if kind == "well":
        return Well(group, where, backend)
    if kind == "bioformats2raw" and "multiscales" not in block:
        return SeriesCollection(group, where, backend)
    if kind == "scene":
        return Scene(group, where, backend)
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
                f"'{where}': the zarr.Group's store is read-only; open the group with "
                "zarr.open_group(..., mode='r+') to write through it"
            )
        if mode == "r" and not path.store.read_only:
            # mode="r" holds whatever the group was opened with: writes are refused (a
            # store class that cannot make a read-only copy of itself is used as it is)
            with contextlib.suppress(NotImplementedError), translated_errors(where, metadata=True):
                path = zarr.open_group(
                    store=path.store.with_read_only(True), path=path.path, mode="r"
                )
        return path, where
    if isinstance(path, zarr.Array):
        raise NotOmeZarrError(
            str(path.store_path), "zarr.json / .zgroup", "an OME-Zarr group", "a zarr array"
        )
    location = locate(path, mode=mode, storage_options=storage_options)
    with translated_errors(location.where, metadata=True):
        # the store's own metadata, not a consolidated copy of it: tools that add a label
        # image or a well without consolidating again leave that copy stale
        group = zarr.open_group(
            store=location.store, mode="r+" if mode == "r+" else "r", use_consolidated=False
        )
    return group, location.where


def _group_where(group: Any) -> str:
    root = getattr(group.store, "root", None)
    if root is not None:
        return join(os.fspath(root), group.path)
    return str(group.store_path)


def open_image(path: Any, device: Any = "cpu", **kwargs: Any) -> MultiscaleImage:
    """:func:`open_ome_zarr` for a store that must hold one multiscale image (a plate,
    well or series collection is refused with :class:`~linumpy_gpu.NotOmeZarrError`)."""
    opened = open_ome_zarr(path, device, **kwargs)
    if not isinstance(opened, MultiscaleImage):
        where = getattr(opened, "path", str(path))
        raise NotOmeZarrError(
            where, "multiscales", "a multiscale image", f"a {type(opened).__name__}"
        )
    return opened
