"""Write arrays as OME-Zarr images (NGFF 0.5 on zarr v3 by default, 0.4 on zarr v2, or the
0.6 release candidate on request) with a pyramid.

Every argument is checked, and the metadata the write will produce is built and validated,
before anything touches the disk. A local store is built in a hidden folder beside its
destination and swapped in once complete, so an existing store stays whole until its
replacement is, and a lazy array that reads from the store it replaces still finds its
source while it is written.
"""

from __future__ import annotations

import contextlib
import os
import re
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import zarr

from linumpy_gpu import config, ngff
from linumpy_gpu.backends import resolve_backend
from linumpy_gpu.engine.pyramid import LABEL_METHODS
from linumpy_gpu.errors import (
    InvalidArgumentError,
    LinumpyGpuWarning,
    NotOmeZarrError,
    StoreExistsError,
    UnsupportedWriteError,
    WriteError,
)
from linumpy_gpu.image import Level, MultiscaleImage, open_image
from linumpy_gpu.io.files import (
    IN_PROGRESS,
    ChunkKeys,
    DocumentReader,
    UnitLocks,
    built_beside,
    check_replaceable,
    is_litter_or_ours,
    json_object,
    not_zarr_documents,
    refresh_consolidated,
    refusal_above,
    replace_refusal,
)
from linumpy_gpu.io.stores import locate, translated_errors
from linumpy_gpu.ngff import build
from linumpy_gpu.ngff.model import Axis, Channel
from linumpy_gpu.write.levels import write_image
from linumpy_gpu.write.plan import (
    ImagePlan,
    label_colors,
    label_properties,
    plan_image,
    zarr_format_of,
)

# Label names become folder names: plain names only.
# no separators or control characters, and none of the characters a URL gives a meaning
# to (%, #, ?): a label read over HTTP must name the same object
_LABEL_NAME = re.compile(r"[^/\\\x00-\x1f\x7f-\x9f%#?]+")


def write_ome_zarr(
    path: Any,
    data: Any,
    *,
    axes: Sequence[str | Axis] | str | None = None,
    units: Sequence[str | None] | None = None,
    scale: Sequence[float] | None = None,
    translation: Sequence[float] | None = None,
    channels: Sequence[Channel | dict[str, Any]] | None = None,
    version: str = "0.5",
    chunks: Sequence[int] | None = None,
    shards: Sequence[int] | None = None,
    compressor: str | None = "zstd",
    compression_level: int = 3,
    checksum: bool = True,
    levels: int | Sequence[Sequence[int]] | None = None,
    method: str = "mean",
    name: str | None = None,
    overwrite: bool = False,
    device: Any = "auto",
    progress: bool | None = None,
    storage_options: dict[str, Any] | None = None,
    fill_value: float | int | bool = 0,
    _extra_block: dict[str, Any] | None = None,
    _progress_label: str | None = None,
    _unfinished: bool = False,
) -> MultiscaleImage:
    """Write ``data`` (numpy, cupy or dask, 2- to 5-D) as an OME-Zarr multiscale image and
    return it opened.

    ``version``: "0.5" (default), "0.4", or "0.6" (RFC-5 coordinate systems; written only
    when asked while 0.6 is a release candidate). ``axes``: names ("czyx"; t, c, z, y and x
    get their NGFF types) or :class:`linumpy_gpu.ngff.Axis` objects (``image.axes``: each
    keeps its type and unit, a channel axis named "ch" say).
    ``path``: a local path, an object-store URL (``s3://``, ``gs://``, ``memory://``, with
    ``storage_options`` for fsspec) or a zarr store. ``levels``: a number of levels (2x on
    spatial axes per level), a list of per-level factors relative to the previous level,
    or None (default): as many levels as it takes for the coarsest to fit 256 x 256 voxels
    in-plane (one level for smaller data).
    ``method``: "mean" (intensities; partial edge blocks averaged over what they hold),
    "gaussian", "nearest" or "mode" (labels). ``device``: where the pyramid is computed and
    chunks are compressed: "auto" (the GPU for cupy input, else the CPU), "cpu", "gpu".
    ``progress``: a progress bar while the levels are written, shown on a terminal or in a
    notebook (default: the ``progress`` setting). ``fill_value``: every level's fill value,
    what readers give for chunks never written (default 0; NaN for a float "no data").

    An existing store at ``path`` is replaced only with ``overwrite=True``, and only if it
    is a zarr store (or an empty folder): a local one is built beside it and swapped in when
    complete; a remote one is deleted once every check has passed, then written with its
    metadata last (an interrupted write leaves a store that refuses to open).
    """
    plan = plan_image(
        data,
        axes=axes,
        units=units,
        scale=scale,
        translation=translation,
        channels=channels,
        version=version,
        chunks=chunks,
        shards=shards,
        compressor=compressor,
        compression_level=compression_level,
        checksum=checksum,
        levels=levels,
        method=method,
        name=name,
        extra_block=_extra_block,
        where=str(path),
        fill_value=fill_value,
    )
    if not isinstance(overwrite, bool):
        raise InvalidArgumentError(f"overwrite must be True or False, got {overwrite!r}")
    backend = _backend_for(data, device)
    if progress is None:
        progress = config.get().progress
    if type(path).__name__ == "ZipStore":
        # zarr's ZipStore gives no read-only view of a store open for writing, so the image
        # could not be opened once written; a zip also cannot replace a member in place
        raise UnsupportedWriteError(
            f"'{path}': writes into a ZipStore are not supported; write to a folder and zip "
            "it afterwards (zip -0 -r image.ome.zarr.zip image.ome.zarr)"
        )
    location = locate(path, mode="w", storage_options=storage_options, must_exist=False)
    if location.local_root is not None:
        target = location.local_root
        _check_destination(target, overwrite)
        # the file system's refusals (a file where a folder goes, no permission, a name
        # too long) as StoreError naming the destination
        with translated_errors(target), built_beside(target, overwrite) as staging:
            write_image(
                _local_group(staging, plan),
                data,
                plan,
                backend,
                progress,
                target,
                _progress_label,
                _unfinished,
            )
        refresh_consolidated(target)
        if _unfinished:
            return _still_unfinished(zarr.storage.LocalStore(target), target, backend)
        return open_image(target, device=backend)
    _check_not_reading_from(data, location.store, "", location.where)
    root = _remote_group(location.store, "", plan, overwrite, location.where)
    write_image(root, data, plan, backend, progress, location.where, _progress_label, _unfinished)
    if _unfinished:
        return _still_unfinished(location.store, location.where, backend)
    if location.protocol is not None:
        return open_image(path, device=backend, storage_options=storage_options)
    return open_image(location.store, device=backend)


def _still_unfinished(store: Any, where: str, backend: Any) -> MultiscaleImage:
    """The image a write left marked unfinished (its caller writes more before the mark
    goes: convert's label images and copied levels), opened for that caller."""
    with translated_errors(where, metadata=True):
        group = zarr.open_group(store=store, mode="r", use_consolidated=False)
    return MultiscaleImage(group, where, backend, _unfinished_ok=True)


def _listed_labels(store: Any, path: str, where: str) -> list[str]:
    """The names the labels group at ``path`` lists ([] where there is none yet); raises
    :class:`NotOmeZarrError` where ``path`` holds an array, :class:`InvalidMetadataError`
    where its listing is not a list of label image paths."""
    try:
        node = zarr.open(store=store, path=path, mode="r")
    except FileNotFoundError:  # zarr's NodeNotFoundError among them
        return []
    if not isinstance(node, zarr.Group):
        raise NotOmeZarrError(where, "labels", "a zarr group listing label images", "an array")
    block, _ = ngff.ome_block(dict(node.attrs), node.metadata.zarr_format)
    # as opening the image parses it
    return list(ngff.parse_labels_group(block, where)) if "labels" in block else []


def write_labels(
    image: Any,
    name: str,
    data: Any,
    *,
    colors: dict[int, Sequence[int]] | Sequence[dict[str, Any]] | None = None,
    properties: Sequence[dict[str, Any]] | None = None,
    method: str = "mode",
    chunks: Sequence[int] | None = None,
    overwrite: bool = False,
    device: Any = "auto",
    _unfinished: bool = False,
) -> MultiscaleImage:
    """Write a label image ``name`` under ``image`` (a path or an opened image): integer
    data of level 0's shape, a pyramid matching the image's ("mode" or "nearest"), the
    ``image-label`` metadata (``colors`` as {value: (r, g, b, a)} or NGFF dicts,
    ``properties`` as NGFF dicts) and the ``labels`` group listing. Returns the label image.

    Replacing a label image (``overwrite=True``) touches that label image only."""
    parent = image if isinstance(image, MultiscaleImage) else open_image(image)
    # a handle opened before the image was replaced must not write into its successor
    parent.levels[0]._reader.check_unchanged()
    if not parent.exact:
        raise WriteError(
            f"'{parent.path}' places level 0 with a transformation other than scale and "
            "translation; label images are written only for images placed by scale and "
            "translation"
        )
    _check_label_name(name, parent)
    if not all(hasattr(data, a) for a in ("shape", "dtype", "ndim")):
        raise WriteError(
            f"label data must be a numpy, cupy or dask array, got {type(data).__name__}"
        )
    dtype = np.dtype(data.dtype)
    if dtype.kind not in "iu":
        raise WriteError(f"label images need an integer dtype, got {dtype}")
    if tuple(data.shape) != parent[0].shape:
        raise WriteError(
            f"labels of shape {tuple(data.shape)} for an image of shape {parent[0].shape}"
        )
    if method not in LABEL_METHODS:
        raise WriteError(f"label pyramids use 'mode' or 'nearest', not {method!r}")
    color_list = label_colors(colors)
    props = label_properties(properties)
    if (
        color_list
        and props
        and {c["label-value"] for c in color_list} != {p.get("label-value") for p in props}
    ):
        raise WriteError("label colors and properties must describe the same label values")
    label_block: dict[str, Any] = {"image-label": {"source": {"image": "../../"}}}
    if color_list:
        label_block["image-label"]["colors"] = color_list
    if props:
        label_block["image-label"]["properties"] = props
    if parent.version == "0.4":
        label_block["image-label"]["version"] = "0.4"
    # the label pyramid has the image's level shapes, rounded as the image's writer rounded
    factors = parent.reduction_factors("a label image")
    plan = plan_image(
        data,
        axes=parent.axes,
        units=None,
        scale=parent.scale(0),
        translation=parent.translation(0),
        version=parent.version,
        chunks=chunks or parent[0].chunks,
        levels=factors if factors else 1,
        method=method,
        name=name,
        extra_block=label_block,
        where=f"{parent.path}/labels/{name}",
        shapes=[level.shape for level in parent.levels],
    )
    if not isinstance(overwrite, bool):
        raise InvalidArgumentError(f"overwrite must be True or False, got {overwrite!r}")
    backend = _backend_for(data, device)
    zarr_format = zarr_format_of(parent.version)
    store, prefix = parent.group.store, parent.group.path
    labels_path = f"{prefix}/labels" if prefix else "labels"
    with translated_errors(f"{parent.path}/labels"):
        _listed_labels(store, labels_path, f"{parent.path}/labels")  # before anything is written
    root = getattr(store, "root", None)
    where = f"{parent.path}/labels/{name}"
    if type(store).__name__ == "ZipStore":
        raise UnsupportedWriteError(
            f"'{where}': writes into a ZipStore are not supported; write the labels into "
            "the image's folder and zip it afterwards"
        )
    if root is not None:
        store = zarr.storage.LocalStore(root)  # writable whatever mode the image was opened in
        target = os.path.join(os.fspath(root), *labels_path.split("/"), name)
        _check_destination(target, overwrite, whole=False)
        with translated_errors(target), built_beside(target, overwrite, whole=False) as staging:
            write_image(
                _local_group(staging, plan),
                data,
                plan,
                backend,
                False,
                target,
                unfinished=_unfinished,
            )
    else:
        if getattr(store, "read_only", False):
            store = store.with_read_only(False)
        _check_not_reading_from(data, store, f"{labels_path}/{name}", where)
        label_root = _remote_group(
            store, f"{labels_path}/{name}", plan, overwrite, where, whole=False
        )
        write_image(label_root, data, plan, backend, False, where, unfinished=_unfinished)
    # the listing is read, extended and written back: one writer at a time (other
    # processes too, on a local store), or concurrent label writes lose entries
    listing = (
        UnitLocks(os.path.join(os.fspath(root), *labels_path.split("/"))).hold([0])
        if root is not None
        else contextlib.nullcontext()
    )
    with listing, translated_errors(f"{parent.path}/labels"):
        listed = _listed_labels(store, labels_path, f"{parent.path}/labels")
        labels_group = zarr.open_group(
            store=store, path=labels_path, mode="a", zarr_format=zarr_format
        )
        attributes = dict(labels_group.attrs)
        names = [n for n in listed if n != name] + [name]
        # the group's other attributes (the user's, other tools') stay as they were
        for key, value in build.wrap(parent.version, {"labels": names}).items():
            kept = attributes.get(key)
            attributes[key] = (
                {**kept, **value} if isinstance(value, dict) and isinstance(kept, dict) else value
            )
        labels_group.attrs.put(attributes)
    # outside the listing's lock: the refresh takes the lock of each consolidated group
    # above, the labels group's own among them (one lock per file where locks are flock)
    _consolidate_again(store, labels_path)
    # opened on its own, not through the parent: a caller that writes the parent's labels
    # before the parent's metadata (convert) has the parent marked unfinished until then
    with translated_errors(where, metadata=True):
        label_group = zarr.open_group(
            store=store, path=f"{labels_path}/{name}", mode="r", use_consolidated=False
        )
    with config.set(config.layered(parent._settings)):
        return MultiscaleImage(
            label_group, where, resolve_backend(backend), _unfinished_ok=_unfinished
        )


def _consolidate_again(store: Any, path: str) -> None:
    """Bring consolidated metadata (ngff-zarr writes it for an image, HCS tools for a
    plate) up to date in the group at ``path`` of ``store`` and the groups above it, after
    a write below them (local folders: :func:`refresh_consolidated`)."""
    root = getattr(store, "root", None)
    if root is not None:
        refresh_consolidated(os.path.join(os.fspath(root), *path.split("/")) if path else root)
        return
    parts = path.split("/") if path else []
    for i in range(len(parts), -1, -1):
        where = "/".join(parts[:i])
        try:
            group = zarr.open_group(store=store, path=where, mode="r", use_consolidated=None)
            if group.metadata.consolidated_metadata is not None:
                zarr.consolidate_metadata(store, path=where, zarr_format=group.metadata.zarr_format)
        except Exception as exc:  # the data is written whatever its parents' copies say
            warnings.warn(
                f"the consolidated metadata of '{where or store}' could not be brought up "
                f"to date ({type(exc).__name__}: {exc}): readers that trust it may not see "
                "the new data",
                LinumpyGpuWarning,
                stacklevel=3,
            )


def _check_label_name(name: Any, parent: Any) -> None:
    """A label name is one folder name: not empty, no separators, not '.' or '..', not a
    hidden or zarr metadata name, and not the path of one of the image's levels."""
    if not isinstance(name, str) or not _LABEL_NAME.fullmatch(name or ""):
        raise InvalidArgumentError(
            "label name must be a plain folder name (no '/', '\\\\', '%', '#', '?' or "
            f"control characters), got {name!r}"
        )
    if name in (".", "..") or name.startswith(".") or name == "zarr.json" or name != name.strip():
        raise InvalidArgumentError(
            f"label name {name!r} is not allowed: it must not start with '.', be 'zarr.json' "
            "or have leading or trailing spaces"
        )
    if name in {lv.path for lv in parent.levels} or name == "labels":
        raise InvalidArgumentError(
            f"label name {name!r} is also the path of a level or group of '{parent.path}'; "
            "choose another name"
        )


def _check_destination(target: str, overwrite: bool, whole: bool = True) -> None:
    if os.path.lexists(target) and not overwrite:
        raise StoreExistsError(f"'{target}' exists; pass overwrite=True to replace it")
    check_replaceable(target, whole)


def _local_group(folder: str, plan: ImagePlan) -> Any:
    store = zarr.storage.LocalStore(folder)
    return zarr.open_group(store=store, mode="w", zarr_format=plan.zarr_format)


def _remote_group(
    store: Any, path: str, plan: ImagePlan, overwrite: bool, where: str, whole: bool = True
) -> Any:
    """The group to write into at ``path`` of a store we cannot build beside; an existing
    zarr group there is deleted (``overwrite``) only now that every check has passed.
    ``whole``: as for :func:`check_replaceable`."""
    with translated_errors(where):
        existing = _existing_node(store, path)
        if existing == "other":
            raise StoreExistsError(
                f"'{where}' holds objects that are not a zarr store; refusing to replace them"
            )
        if existing == "zarr" and not overwrite:
            raise StoreExistsError(f"'{where}' exists; pass overwrite=True to replace it")
        read, target, parents = _store_nodes(store, path)
        read = _tolerant(read)
        keys: list[str] = []
        if existing == "zarr":
            keys = _keys_below(store, path)
            below, foreign = _nodes_and_foreign(keys, target, read)
            reason = replace_refusal(
                read, target, parents if whole else (), below, images_below=True
            )
            if reason is None and foreign:
                reason = f"holds '{foreign}', which is not part of a zarr store"
        else:
            reason = refusal_above(read, parents, new=True) if whole else None
        if reason:
            raise StoreExistsError(
                f"'{where}' {reason}; refusing to write there: write the image to a path of its own"
            )
        if existing == "zarr":
            _remove_store(store, path, keys)
        # not zarr's mode "w": it removes the path's prefix as a whole, which on an object
        # store also takes an object named like the store itself (a user's file, not ours)
        return zarr.open_group(store=store, path=path, mode="a", zarr_format=plan.zarr_format)


def _tolerant(read: DocumentReader) -> DocumentReader:
    """``read``, with a document that cannot be read (an object store's key above the
    prefix the credentials cover, say) taken as missing: no node there to refuse for."""

    def tolerant(node: str, name: str) -> dict[str, Any] | None:
        try:
            return read(node, name)
        except Exception:
            return None

    return tolerant


def _keys_below(store: Any, path: str) -> list[str]:
    """The keys of the objects below ``path`` of ``store``, relative to it."""
    from zarr.core.sync import sync

    prefix = f"{path}/" if path else ""

    async def listed() -> list[str]:
        return [k[len(prefix) :] async for k in store.list_prefix(prefix) if k.startswith(prefix)]

    return sync(listed())


def _nodes_and_foreign(
    keys: list[str], target: str, read: DocumentReader
) -> tuple[list[str], str | None]:
    """From the keys below ``target`` (relative to it): the zarr nodes there, named as
    :func:`_store_nodes` names ``target``, and the first key that is neither metadata
    nor a chunk of an array nor litter (a user's object among the store's), or None."""
    named = {}
    for key in keys:
        inner, _, name = key.rpartition("/")
        if name in ("zarr.json", ".zattrs", ".zgroup", ".zarray") and inner:
            named[inner] = f"{target}/{inner}" if target else inner
    listed = set(keys)
    documents = {}  # array -> its metadata document, read once
    for inner, node in named.items():
        if f"{inner}/.zarray" in listed:
            documents[inner] = read(node, ".zarray") or {}
        elif (document := read(node, "zarr.json") or {}).get("node_type") == "array":
            documents[inner] = document
    # an array inside another's folder is not one of the store's: its keys are foreign
    chunk_keys = {
        a: ChunkKeys.of(document)
        for a, document in documents.items()
        if not any(a.startswith(f"{b}/") for b in documents)
    }
    for key in keys:
        inner, _, name = key.rpartition("/")
        if is_litter_or_ours(name):
            continue
        parts = key.split("/")  # the array whose folder holds the key, if any
        array = next(
            (a for k in range(1, len(parts)) if (a := "/".join(parts[:k])) in chunk_keys), None
        )
        if array is not None:
            within = key[len(array) + 1 :]
            if within in ("zarr.json", ".zarray", ".zattrs") or chunk_keys[array].chunk(within):
                continue  # its metadata, or a chunk: anything else is someone's object
        elif name in ("zarr.json", ".zattrs", ".zgroup", ".zarray", ".zmetadata"):
            node = named.get(inner, target)
            if f"{node}/{name}" not in not_zarr_documents(read, node):
                continue
        return list(named.values()), f"{target}/{key}" if target else key
    return list(named.values()), None


# the documents that make a node an array (zarr v2), or may (zarr v3)
_ARRAY_DOCS = ("zarr.json", ".zarray")


def _remove_store(store: Any, path: str, keys: list[str]) -> None:
    """Delete the zarr store at ``path`` of ``store`` (``keys``: its objects, relative to
    ``path``), one object at a time. The store and its label images are first marked as a
    write in progress (consolidated copies above brought up to date), its chunks go before
    any metadata and its root last: a deletion cut short (a dropped connection, Ctrl-C)
    leaves images that refuse to open as incomplete, never images whose deleted chunks
    read as fill, and a replacement tried again finds every node it left whole."""
    from zarr.core.sync import sync

    documents = {"zarr.json", ".zarray", ".zattrs", ".zgroup", ".zmetadata"}
    label_images = sorted(
        {
            k.rpartition("/")[0]
            for k in keys
            if re.fullmatch(r"labels/[^/]+/(zarr\.json|\.zattrs)", k)
        }
    )
    marked = _mark_unfinished(store, path)
    for label in label_images:
        _mark_unfinished(store, f"{path}/{label}" if path else label)
    if marked:
        # each array too, before its chunks go: a reader that opened it before the
        # replacement checks the array's own metadata after every read (object stores
        # tell no versions), and refuses a marked one rather than return the deleted
        # chunks as fill values
        for node in sorted({k.rpartition("/")[0] for k in keys if k.endswith(_ARRAY_DOCS)}):
            attributes = f"{node}/.zattrs"
            if _mark_unfinished(store, f"{path}/{node}" if path else node, array=True) and (
                f"{node}/.zarray" in keys and attributes not in keys
            ):
                keys = [*keys, attributes]  # a v2 array's mark is an object of its own
        _consolidate_again(store, path)
    # the root's consolidated copy before its attributes, its node type last: a deletion
    # cut short among them leaves a plain group (replaced when tried again)
    rank = {".zmetadata": 0, ".zattrs": 1}
    roots = sorted((k for k in keys if k in documents), key=lambda k: rank.get(k, 2))
    # metadata of the nodes below, deepest first, a v2 node's attributes before its node
    # type: what is left at any point is nodes whose objects are all theirs
    below = sorted(
        (k for k in keys if k not in documents and k.rpartition("/")[2] in documents),
        key=lambda k: (-k.count("/"), not k.endswith(".zattrs")),
    )
    chunks = [k for k in keys if k.rpartition("/")[2] not in documents]
    # a root that cannot be marked (no zarr group zarr-python opens) goes first instead:
    # what remains then opens as no image at all
    ordered = chunks + below + roots if marked else roots + chunks + below

    async def remove() -> None:
        for key in ordered:
            await store.delete(f"{path}/{key}" if path else key)

    sync(remove())


def _mark_unfinished(store: Any, path: str, array: bool = False) -> bool:
    """Mark the group (``array``: the array) at ``path`` as a write in progress, its other
    attributes kept (a replacement tried again knows the levels it lists). False where no
    such node zarr-python opens stands there; a failure to write the mark raises (nothing
    is deleted then)."""
    try:
        opened = (zarr.open_array if array else zarr.open_group)(store=store, path=path, mode="r+")
    except Exception as exc:
        names = {c.__name__ for c in type(exc).__mro__}
        structural = {
            "GroupNotFoundError",
            "ArrayNotFoundError",
            "NodeNotFoundError",
            "NodeTypeValidationError",
            "MetadataValidationError",
        }
        if names & structural or isinstance(exc, ValueError | TypeError | KeyError):
            return False
        raise
    opened.attrs.update(IN_PROGRESS)
    return True


def _store_nodes(store: Any, path: str) -> tuple[DocumentReader, str, list[str]]:
    """A metadata reader for ``store``, the node at ``path`` in its terms, and the nodes
    above it, nearest first: beyond the store's root too where the store is a folder of
    an fsspec file system (an image inside another's store is opened at its own URL)."""
    from zarr.core.buffer import default_buffer_prototype
    from zarr.core.sync import sync

    fs, root = getattr(store, "fs", None), getattr(store, "path", None)
    if fs is not None and isinstance(root, str) and hasattr(fs, "_cat_file"):

        def read_file(node: str, name: str) -> dict[str, Any] | None:
            try:
                raw = sync(fs._cat_file(f"{node}/{name}" if node else name))
            except FileNotFoundError:
                return None
            return json_object(raw)

        node = "/".join(p for p in (root.rstrip("/"), path) if p)
        parts = node.split("/")
        parents = ["/".join(parts[:i]) for i in range(len(parts) - 1, 0, -1)]
        return read_file, node, [p for p in parents if p.strip("/")]

    def read_key(node: str, name: str) -> dict[str, Any] | None:
        raw = sync(store.get(f"{node}/{name}" if node else name, default_buffer_prototype()))
        return None if raw is None else json_object(raw.to_bytes())

    parts = path.split("/") if path else []
    return read_key, path, ["/".join(parts[:i]) for i in range(len(parts) - 1, -1, -1)]


def _check_not_reading_from(data: Any, store: Any, path: str, where: str) -> None:
    """Refuse ``data`` that reads lazily from what is about to be written at ``path`` of
    ``store`` (``where`` names it): a dask array, a level or a zarr array of that store.
    Without a folder to build beside, an existing store is removed before the new one is
    written, and the data would then read fill values."""
    from linumpy_gpu.io.stores import overlapping, store_url

    def joined(root: str, inner: str) -> str:
        return f"{root.rstrip('/')}/{inner}" if inner else root

    from linumpy_gpu.image.dask import ArraySource, graph_objects

    read: list[tuple[str, str]] = []  # (where the data reads from, its name)
    arrays: list[Any] = [data]
    if type(data).__module__.startswith("dask"):
        # our reads, and the arrays dask.array.from_array / from_zarr wrap
        arrays = graph_objects(data, (ArraySource, Level, zarr.Array))
    for item in arrays:
        array = item.zarr_array if isinstance(item, Level) else item
        if isinstance(array, zarr.Array):
            place = joined(store_url(array.store), array.store_path.path)
            read.append((place, place))
        elif isinstance(item, ArraySource):
            spec = item.store
            root = spec.where if spec.kind in ("local", "url") else store_url(spec.store)
            read.append((joined(root, item.path), item.where))
    target = joined(store_url(store), path)
    for place, name in read:
        if overlapping(place, target):
            raise WriteError(
                f"the data reads from '{name}', which writing '{where}' replaces: on an "
                "object store the old store is removed before the new one is written; write "
                "to another path, or compute the data first"
            )


def _existing_node(store: Any, path: str) -> str | None:
    """'zarr' where zarr metadata sits at ``path``, 'other' where other objects do, else
    None."""
    from zarr.core.sync import sync

    prefix = f"{path}/" if path else ""

    async def look() -> str | None:
        for marker in ("zarr.json", ".zgroup", ".zattrs", ".zarray"):
            if await store.exists(prefix + marker):
                return "zarr"
        async for _ in store.list_dir(path):
            return "other"
        return None

    return sync(look())


def _backend_for(data: Any, device: Any) -> Any:
    is_dask = type(data).__module__.startswith("dask")
    on_gpu = hasattr(data, "__cuda_array_interface__") or (
        is_dask and hasattr(getattr(data, "_meta", None), "__cuda_array_interface__")
    )
    if isinstance(device, str) and device == "auto":
        device = "gpu" if on_gpu else "cpu"
    return resolve_backend(device)


__all__ = ["write_labels", "write_ome_zarr"]
