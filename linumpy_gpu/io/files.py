"""Safe file operations for local stores: atomic files, stores built beside and swapped in,
and locks that serialise writers of the same storage unit across threads and processes.

A reader never sees half a file (each is written under a temporary name and renamed), a
store being replaced stays whole until the new one is complete (the new one is built in a
hidden sibling folder and swapped in with one rename), and two writers that touch the same
chunk or shard take turns instead of losing one another's updates.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import errno
import fcntl
import hashlib
import json
import os
import re
import shutil
import socket
import struct
import threading
import uuid
import warnings
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from linumpy_gpu.errors import (
    LinumpyGpuWarning,
    StoreError,
    StoreExistsError,
    StorePermissionError,
)

STAGING_SUFFIX = ".linumpy-gpu-partial"
LOCK_FILE = ".linumpy-gpu.lock"
# Files whose presence at a folder's top level makes it a zarr store (or group, or array).
ZARR_MARKERS = ("zarr.json", ".zgroup", ".zarray", ".zattrs")
# The attribute a store's root holds while linumpy_gpu writes it where it cannot be built
# beside (object stores): the store is incomplete until the write removes it.
INCOMPLETE_MARKER = "linumpy_gpu"
# the attributes that mark a group or array whose write is under way
IN_PROGRESS = {INCOMPLETE_MARKER: {"write_in_progress": True}}


# Files this process replaced, counted: a reader's cached view of a file (a shard's index)
# is stale once the count moved, even where the file system's timestamps did not.
_generations: dict[str, int] = {}
_generations_lock = threading.Lock()


def generation(path: str) -> int:
    """How many times this process replaced ``path`` (0: never)."""
    return _generations.get(path, 0)


def _partial_name(name: str) -> str:
    """A temporary name for a new version of the file ``name``, in the same folder: named
    by host and process, so a later writer can tell one a killed process left."""
    return f".{name}.{_HOST}.{os.getpid()}-{uuid.uuid4().hex[:8]}.partial"


def _replaced(path: str) -> None:
    with _generations_lock:
        _generations[path] = _generations.get(path, 0) + 1


@contextlib.contextmanager
def replacing(path: str) -> Iterator[str]:
    """A temporary path in ``path``'s folder for the block to write the new file to; it is
    renamed to ``path`` when the block ends, so readers see the old file or the new one,
    never part of either, and removed if the block fails."""
    folder, name = os.path.split(path)
    tmp = os.path.join(folder, _partial_name(name))
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    finally:
        _replaced(path)


class OpenFolder:
    """A local folder held open while a write runs, and the files the write makes in it.

    Files are created and renamed relative to the open folder, not by path: where the
    folder's path comes to name another folder meanwhile (the store was replaced while the
    write ran), the rest of the write lands in the folder it began in and never in the
    store that replaced it. :meth:`replaced` tells the writer so it can say what happened.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        try:
            self._fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except FileNotFoundError as exc:
            raise StoreError(f"'{path}' was removed: nothing was written") from exc
        found = os.fstat(self._fd)
        self.identity = (found.st_dev, found.st_ino)
        self._made: set[str] = set()
        self._made_lock = threading.Lock()

    def close(self) -> None:
        os.close(self._fd)

    def __enter__(self) -> OpenFolder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def replaced(self) -> bool:
        """Whether the folder's path names another folder now, or nothing."""
        return identity(self.path) != self.identity

    @contextlib.contextmanager
    def new_file(self, name: str) -> Iterator[Any]:
        """The file ``name`` ('/'-separated, relative to the folder; its folders made)
        opened for writing under a temporary name, renamed to ``name`` when the block
        ends, so readers see the old file or the new one, never part of either; removed
        if the block fails."""
        sub, _, base = name.rpartition("/")
        folder = self._subfolder(sub)
        tmp = _partial_name(base)
        try:
            fd = os.open(
                tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666, dir_fd=folder
            )
            try:
                with os.fdopen(fd, "wb") as f:
                    yield f
                os.replace(tmp, base, src_dir_fd=folder, dst_dir_fd=folder)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp, dir_fd=folder)
                raise
            finally:
                _replaced(os.path.join(self.path, *name.split("/")))
        finally:
            if folder != self._fd:
                os.close(folder)

    def write(self, name: str, data: bytes | memoryview | list[bytes | memoryview]) -> None:
        """Write ``data`` (one buffer, or buffers written back to back) to the file
        ``name`` through :meth:`new_file`."""
        with self.new_file(name) as f:
            if isinstance(data, list):
                f.writelines(data)
            else:
                f.write(data)

    def _subfolder(self, sub: str) -> int:
        """An open descriptor of the folder ``sub`` below this one (made where missing,
        and cleared of what an earlier write killed midway left there the first time)."""
        with self._made_lock:  # made whole before any thread opens it
            first = sub not in self._made
            if first and sub:
                parent = ""
                for part in sub.split("/"):
                    parent = f"{parent}/{part}" if parent else part
                    with contextlib.suppress(FileExistsError):
                        os.mkdir(parent, dir_fd=self._fd)
            self._made.add(sub)
        folder = (
            os.open(sub, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=self._fd)
            if sub
            else self._fd
        )
        if first:
            remove_stale_partials(folder)
        return folder


def is_zarr_store(path: str) -> bool:
    """Whether the folder ``path`` holds zarr metadata at its top level."""
    return any(os.path.isfile(os.path.join(path, m)) for m in ZARR_MARKERS)


# Reads one zarr metadata document of a node: (node, name) -> its JSON object ({} where it
# is not one), or None where the document is absent. Local folders and object stores each
# give one, so what an overwrite may replace is decided once for both.
DocumentReader = Callable[[str, str], "dict[str, Any] | None"]


def local_document(folder: str, name: str) -> dict[str, Any] | None:
    """The metadata document ``name`` of the local folder ``folder`` (a DocumentReader)."""
    try:
        with open(os.path.join(folder, name), "rb") as f:
            return json_object(f.read())
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError:
        return {}


def json_object(raw: bytes) -> dict[str, Any]:
    """A metadata document's bytes as its JSON object; {} where they are not one."""
    try:
        document = json.loads(raw or b"{}")
    except ValueError:
        return {}
    return document if isinstance(document, dict) else {}


# Attributes of the OME-Zarr nodes that hold images: an image written over one deletes them
_COLLECTIONS = {
    "plate": "an HCS plate",
    "well": "an HCS well",
    "scene": "an NGFF scene",
    "bioformats2raw.layout": "a bioformats2raw collection",
}


def replace_refusal(
    read: DocumentReader,
    target: str,
    parents: Iterable[str],
    below: Iterable[str] = (),
    images_below: bool = False,
) -> str | None:
    """Why the zarr node ``target`` may not be replaced by a new image, or None: it is an
    array, it lies inside a multiscale image (its levels, its labels) or an array, it is
    part of a collection of images, which it would break, or it holds images or arrays of
    its own that it would delete. ``parents``: the nodes above ``target``, nearest first.
    ``below``: the zarr nodes under ``target``, as paths that start with ``target``,
    looked at where ``target`` is no image, or with ``images_below`` (a cheap walk): for
    images other than its label images."""
    v3 = read(target, "zarr.json")
    if _is_array(read, target, v3):
        return "is a zarr array"
    own = _ome_keys(v3, read(target, ".zattrs"))
    for key, collection in _COLLECTIONS.items():
        if key in own:
            return f"is {collection}, whose images it would delete"
    # an image's own levels and label images go with it, as do the levels of a store whose
    # write by linumpy_gpu was interrupted (marked unfinished: levels it names 0, 1, ...)
    if _is_image(own) and images_below:
        levels = {"": _level_paths(v3, read(target, ".zattrs"))}  # image -> its levels
        unfinished = {"": INCOMPLETE_MARKER in own}
        named = [(node, node[len(target) :].strip("/").replace(os.sep, "/")) for node in below]
        for node, relative in named:
            parts = relative.split("/")
            node_v3, node_v2 = read(node, "zarr.json"), read(node, ".zattrs")
            keys = _ome_keys(node_v3, node_v2)
            # the mark alone makes a group an image, not an array (a level marked by a
            # replacement, or the attributes such a replacement cut short left of one)
            marked_group = INCOMPLETE_MARKER in keys and _is_group(read, node, node_v3)
            if "multiscales" in keys or marked_group:
                if not (len(parts) == 2 and parts[0] == "labels"):
                    return f"holds the image at '{node}', which it would delete"
                levels[relative] = _level_paths(node_v3, node_v2)
                unfinished[relative] = INCOMPLETE_MARKER in keys
        for node, relative in named:
            parts = relative.split("/")
            image, level = "/".join(parts[:2]), "/".join(parts[2:])
            if not (parts[0] == "labels" and image in levels):
                image, level = "", relative
            ours = level in levels[image] or (unfinished[image] and level.isdigit())
            if not ours and _is_array(read, node, read(node, "zarr.json")):
                return f"holds the zarr array at '{node}', not one of its levels (deleted with it)"
    elif not _is_image(own):
        nodes = [(node, read(node, "zarr.json")) for node in below]
        for node, node_v3 in nodes:
            if _ome_keys(node_v3, read(node, ".zattrs")) & ({"multiscales"} | set(_COLLECTIONS)):
                return f"holds the OME-Zarr data at '{node}', which it would delete"
        for node, node_v3 in nodes:
            if _is_array(read, node, node_v3):
                return f"holds the zarr array at '{node}', which it would delete"
    return refusal_above(read, parents, _is_image(own))


def refusal_above(
    read: DocumentReader, parents: Iterable[str], image: bool = True, new: bool = False
) -> str | None:
    """Why an image may not be written at a node whose ``parents`` (nearest first) these
    are, or None: it would lie inside another image or an array (and go when that is
    replaced), or be a row or well of a plate, or a group of a bioformats2raw collection
    (``image``: the node is an image itself, as a collection's series are). ``new``: the
    node does not exist yet, and may become a label image of the image two levels up
    (``labels/<name>``, as readers look for them)."""
    contiguous = True  # every node up to here is a zarr group
    nearest = None
    for distance, parent in enumerate(parents, 1):
        nearest = nearest or parent
        v3 = read(parent, "zarr.json")
        if _is_array(read, parent, v3):
            return f"lies inside the zarr array at '{parent}'"
        v2 = read(parent, ".zattrs")
        if v3 is None and v2 is None and read(parent, ".zgroup") is None:
            contiguous = False
            continue
        keys = _ome_keys(v3, v2)
        if _is_image(keys):
            if new and distance == 2 and nearest.rstrip("/").rpartition("/")[2] == "labels":
                return None
            return f"lies inside the image at '{parent}'"
        if not contiguous:
            continue
        if "plate" in keys and distance <= 2:
            # a plate's rows and wells hold its images; its fields (three down) are images
            return f"is a {('row', 'well')[distance - 1]} of the plate at '{parent}'"
        if "bioformats2raw.layout" in keys and distance == 1 and not image:
            # its series are images; its other groups (OME) hold the acquisition metadata
            return f"is part of the bioformats2raw collection at '{parent}'"
    return None


def _is_image(keys: set[str]) -> bool:
    """Whether a node with these OME keys is an image, or one whose write by linumpy_gpu
    was interrupted before its metadata was complete."""
    return "multiscales" in keys or INCOMPLETE_MARKER in keys


def _level_paths(v3: dict[str, Any] | None, v2_attributes: dict[str, Any] | None) -> set[str]:
    """The dataset paths every multiscale of an image's metadata lists (its levels)."""
    paths: set[str] = set()
    for attributes in ((v3 or {}).get("attributes"), v2_attributes):
        if not isinstance(attributes, dict):
            continue
        ome = attributes.get("ome")
        for block in (attributes, ome if isinstance(ome, dict) else {}):
            multiscales = block.get("multiscales")
            for multiscale in multiscales if isinstance(multiscales, list) else []:
                datasets = multiscale.get("datasets") if isinstance(multiscale, dict) else None
                for dataset in datasets if isinstance(datasets, list) else []:
                    path = dataset.get("path") if isinstance(dataset, dict) else None
                    if isinstance(path, str):
                        paths.add(path.strip("/"))
    return paths


def _is_array(read: DocumentReader, node: str, v3: dict[str, Any] | None) -> bool:
    return read(node, ".zarray") is not None or (v3 or {}).get("node_type") == "array"


def _is_group(read: DocumentReader, node: str, v3: dict[str, Any] | None) -> bool:
    return read(node, ".zgroup") is not None or (v3 or {}).get("node_type") == "group"


# Files a zarr group's folder holds besides its children: metadata documents
_GROUP_FILES = {"zarr.json", ".zgroup", ".zattrs", ".zarray", ".zmetadata"}
# What operating systems and file managers leave in folders they show
_LITTER = {".DS_Store", "Thumbs.db", "desktop.ini", "Icon\r", ".directory"}
_LITTER_FOLDERS = {"@eaDir"}  # Synology's thumbnails, one folder per folder shown
# NFS renames a file deleted while open to .nfs and hex digits until it is closed
_NFS_RENAMED = re.compile(r"\.nfs[0-9a-fA-F]+")
# tensorstore writes each chunk or metadata document through a lock file beside it
_TENSORSTORE_LOCK = re.compile(
    r"(?:c(?:\.\d+)*|\d+(?:\.\d+)*|zarr\.json|\.zarray|\.zattrs|\.zgroup)\.__lock"
)


def is_litter_or_ours(name: str) -> bool:
    """Whether a folder entry of this name is nobody's data: file managers' litter, or
    what linumpy_gpu and zarr-python leave while they work (a lock file, an atomic write's
    temporary file, a build folder; never a store an interrupted swap parked)."""
    return (
        name in _LITTER
        or name.startswith("._")  # AppleDouble files
        or _NFS_RENAMED.fullmatch(name) is not None
        or name == LOCK_FILE
        or _PARTIAL.fullmatch(name) is not None
        or _ZARR_PARTIAL.fullmatch(name) is not None
        or _TENSORSTORE_LOCK.fullmatch(name) is not None
        or _BUILD_FOLDER.fullmatch(name) is not None
    )


def is_litter_folder_or_ours(name: str) -> bool:
    """Whether a folder of this name holds nobody's data: a file manager's thumbnail
    folder, or a build folder of linumpy_gpu. A folder named like litter files (``._x``)
    may hold anything: it is looked into, not skipped."""
    return name in _LITTER_FOLDERS or _BUILD_FOLDER.fullmatch(name) is not None


def _is_nobodys(entry: os.DirEntry[str]) -> bool:
    if entry.is_dir(follow_symlinks=False):
        return is_litter_folder_or_ours(entry.name)
    return is_litter_or_ours(entry.name)


def holds_nothing(folder: str) -> bool:
    """Whether ``folder`` holds nothing but litter and linumpy_gpu's own files."""
    try:
        with os.scandir(folder) as entries:
            return all(_is_nobodys(entry) for entry in entries)
    except OSError:
        return False


def _local_nodes_below(folder: str, found: list[str]) -> Iterator[str]:
    """The zarr groups and arrays under ``folder`` (arrays are not entered: below them lie
    chunks; links are neither followed nor counted). Folders without zarr metadata are
    walked as groups (tensorstore writes levels at ``s0/data`` without one at ``s0``); a
    file that is no metadata document and nobody's litter (a user's files beside the
    store's) is added to ``found``."""
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return
    for entry in entries:
        if entry.is_symlink() or entry.name in _GROUP_FILES or _is_nobodys(entry):
            continue
        if not entry.is_dir(follow_symlinks=False):
            found.append(entry.path)
            continue
        if not is_zarr_store(entry.path):
            yield from _local_nodes_below(entry.path, found)
            continue
        yield entry.path
        inner: list[str] = []
        if _is_local_array(entry.path):
            _foreign_in_array(entry.path, inner)
        else:
            yield from _local_nodes_below(entry.path, inner)
        # files below a document that is no zarr node's (an array's chunks, unrecognised)
        # are reported as that document, which is what needs mending
        damaged = _damaged_metadata(entry.path) if inner else None
        found.extend([damaged] if damaged is not None else inner)
        found.extend(not_zarr_documents(local_document, entry.path))


def not_zarr_documents(read: DocumentReader, node: str) -> list[str]:
    """The documents of ``node`` named like zarr metadata that do not say they are (no JSON
    object with ``zarr_format``: a user's file, or one too damaged to tell from one)."""
    found = []
    for name in ("zarr.json", ".zarray", ".zgroup"):
        document = read(node, name)
        if document is not None and "zarr_format" not in document:
            found.append(f"{node}/{name}")
    return found


def _damaged_metadata(folder: str) -> str | None:
    """The path of a zarr metadata document of ``folder`` that is no zarr node's (not JSON,
    or no node type), or None."""
    v3 = local_document(folder, "zarr.json")
    if v3 is not None and v3.get("node_type") not in ("array", "group"):
        return os.path.join(folder, "zarr.json")
    for name in (".zarray", ".zgroup"):
        if local_document(folder, name) == {}:
            return os.path.join(folder, name)
    return None


def _foreign_refusal(target: str, path: str) -> str:
    """The message refusing to replace ``target``, which holds ``path``: a file that no
    zarr node of it owns, or (:func:`_damaged_metadata`) a metadata document that is no
    zarr node's, above such files."""
    if os.path.basename(path) in _GROUP_FILES and _damaged_metadata(os.path.dirname(path)):
        return (
            f"'{target}' holds '{path}', which is not valid zarr metadata, so the files below "
            "it cannot be told from files of yours; refusing to replace it: mend or remove "
            "that folder yourself, or choose another path"
        )
    return (
        f"'{target}' holds '{path}', which is not part of a zarr store; refusing to replace "
        "it: move that out first, or choose another path"
    )


def _foreign_in_array(array: str, found: list[str]) -> None:
    """Add to ``found`` what the array folder ``array`` holds that is neither its metadata,
    nor one of its chunks or shards (:class:`ChunkKeys`), nor litter."""
    keys = ChunkKeys.of(_read_array_document(local_document, array))

    def walk(rel: str) -> None:
        try:
            entries = list(os.scandir(os.path.join(array, rel) if rel else array))
        except OSError:
            return
        for entry in entries:
            key = f"{rel}/{entry.name}" if rel else entry.name
            if entry.is_symlink() or _is_nobodys(entry):
                continue
            if not rel and entry.name in _GROUP_FILES:
                continue
            if entry.is_dir(follow_symlinks=False):
                if keys.folder(key):
                    walk(key)
                elif not holds_nothing(entry.path):  # (an empty one holds no one's data)
                    found.append(entry.path)
            elif not keys.chunk(key):
                found.append(entry.path)

    walk("")


def _read_array_document(read: DocumentReader, node: str) -> dict[str, Any]:
    """The array metadata document of ``node`` (v3 ``zarr.json`` or v2 ``.zarray``)."""
    document = read(node, "zarr.json")
    if document and document.get("node_type") == "array":
        return document
    return read(node, ".zarray") or {}


@dataclasses.dataclass(frozen=True)
class ChunkKeys:
    """Which keys below an array are its chunks (or shards), by its metadata: its number of
    dimensions and its chunk key encoding ("default": ``c/0/1`` or ``c.0.1``; "v2" and zarr
    v2: ``0/1`` or ``0.1``). Unknown metadata allows every encoding's keys."""

    pattern: re.Pattern[str]
    folders: re.Pattern[str]

    @classmethod
    def of(cls, document: dict[str, Any]) -> ChunkKeys:
        shape = document.get("shape")
        if not isinstance(shape, list):
            return cls(_ANY_CHUNK_KEY, _ANY_CHUNK_FOLDER)
        ndim = len(shape)
        if document.get("zarr_format") == 2:
            prefix = None
            # no key: written before it existed, nested or flat (see io.stores.nested_by_spec)
            given = document.get("dimension_separator")
            separators = [given] if "dimension_separator" in document else [".", "/"]
        else:
            encoding = document.get("chunk_key_encoding")
            encoding = encoding if isinstance(encoding, dict) else {}
            name = encoding.get("name")
            config = encoding.get("configuration")
            config = config if isinstance(config, dict) else {}
            if name not in ("default", "v2"):
                return cls(_ANY_CHUNK_KEY, _ANY_CHUNK_FOLDER)
            prefix = "c" if name == "default" else None
            separators = [config.get("separator") or ("/" if name == "default" else ".")]
        known = [sep for sep in separators if sep in ("/", ".")]
        if len(known) != len(separators):
            return cls(_ANY_CHUNK_KEY, _ANY_CHUNK_FOLDER)
        keys, folders = [], []
        for separator in known:
            sep = re.escape(separator)
            if prefix is None:  # "0", "0.1", "0/1/2" (an array of no dimensions: "0")
                keys.append(r"\d+" + (rf"(?:{sep}\d+){{{ndim - 1}}}" if ndim > 1 else ""))
                if separator == "/" and ndim >= 2:
                    folders.append(rf"\d+(?:/\d+){{0,{ndim - 2}}}")
            else:  # "c", "c/0/1", "c.0.1"
                keys.append("c" + rf"(?:{sep}\d+){{{ndim}}}")
                if separator == "/" and ndim >= 1:
                    folders.append(rf"c(?:/\d+){{0,{ndim - 1}}}")
        folder_pattern = "|".join(folders) or "(?!)"
        return cls(re.compile("|".join(keys), re.ASCII), re.compile(folder_pattern, re.ASCII))

    def chunk(self, key: str) -> bool:
        """Whether ``key`` (relative to the array) names a chunk or shard."""
        return self.pattern.fullmatch(key) is not None

    def folder(self, key: str) -> bool:
        """Whether ``key`` (relative to the array) is a folder chunk keys pass through."""
        return self.folders.fullmatch(key) is not None


# any encoding's keys, for arrays whose metadata does not say
_ANY_CHUNK_KEY = re.compile(r"c(/\d+)*|c(\.\d+)+|\d+([./]\d+)*", re.ASCII)
_ANY_CHUNK_FOLDER = re.compile(r"(c|\d+)(/\d+)*", re.ASCII)


def _is_local_array(folder: str) -> bool:
    return _is_array(local_document, folder, local_document(folder, "zarr.json"))


def refresh_consolidated(changed: str) -> None:
    """Bring the consolidated metadata of the zarr groups above the local folder
    ``changed`` (and of ``changed`` itself) up to date with what is in ``changed`` now:
    readers that trust it (zarr-python by default) would otherwise miss what was written
    there, or read it with the old dtype and shape. Only the entries under ``changed``
    are rewritten, so a write into a large plate costs what its own subtree costs.
    Failures warn: the data is written whatever its parents' copies say."""
    changed = os.path.abspath(changed)
    if any(part.endswith(STAGING_SUFFIX) for part in changed.split(os.sep)):
        return  # a store being built: its writer refreshes them once it is swapped in
    folder = changed
    while is_zarr_store(folder):
        try:
            _refresh_entries(folder, os.path.relpath(changed, folder).replace(os.sep, "/"))
        except Exception as exc:  # whatever the documents hold, the data is written
            warnings.warn(
                f"'{changed}' was written, but the consolidated metadata in '{folder}' could "
                f"not be brought up to date ({type(exc).__name__}: {exc}): readers that "
                "trust it may not see the new data; run zarr.consolidate_metadata on it",
                LinumpyGpuWarning,
                stacklevel=3,
            )
        parent = os.path.dirname(folder)
        if parent == folder:
            break
        folder = parent


def _refresh_entries(group: str, rel: str) -> None:
    """Rewrite the consolidated entries of ``group`` (a folder) for the subtree ``rel``
    below it (``.``: the group itself), where it holds consolidated metadata: one writer
    at a time (threads and processes), since each rewrites the whole document."""
    v3 = local_document(group, "zarr.json")
    if not isinstance((v3 or {}).get("consolidated_metadata"), dict) and not os.path.isfile(
        os.path.join(group, ".zmetadata")
    ):
        return
    with UnitLocks(group).hold([_CONSOLIDATED_UNIT]):
        _rewrite_entries(group, "" if rel == "." else rel)


def _rewrite_entries(group: str, prefix: str) -> None:
    nodes = list(_subtree(os.path.join(group, *prefix.split("/")) if prefix else group))
    v3 = local_document(group, "zarr.json")
    if v3 is not None and isinstance(v3.get("consolidated_metadata"), dict):
        entries = v3["consolidated_metadata"].setdefault("metadata", {})
        kept = {k: v for k, v in entries.items() if not _under(k, prefix)}
        for node in nodes:
            key = _joined(prefix, node)
            document = local_document(os.path.join(group, *key.split("/")), "zarr.json")
            if key and document is not None:
                # a node's own consolidated copy stays its own: readers rebuild the nested
                # view from these flat entries
                document.pop("consolidated_metadata", None)
                kept[key] = document
        # sorted: zarr rebuilds the nested view from runs of keys with the same parent
        v3["consolidated_metadata"]["metadata"] = dict(sorted(kept.items()))
        _write_document(os.path.join(group, "zarr.json"), v3)
        return
    v2 = local_document(group, ".zmetadata")
    if v2 is not None and isinstance(v2.get("metadata"), dict):
        kept = {k: v for k, v in v2["metadata"].items() if not _under(k.rpartition("/")[0], prefix)}
        for node in nodes:
            key = _joined(prefix, node)
            folder = os.path.join(group, *key.split("/")) if key else group
            for name in (".zgroup", ".zattrs", ".zarray"):
                document = local_document(folder, name)
                if document is not None:
                    kept[_joined(key, name)] = document
        v2["metadata"] = dict(sorted(kept.items()))
        _write_document(os.path.join(group, ".zmetadata"), v2)


def _under(key: str, prefix: str) -> bool:
    return not prefix or key == prefix or key.startswith(prefix + "/")


def _joined(a: str, b: str) -> str:
    return f"{a}/{b}" if a and b else a or b


def _subtree(folder: str, prefix: str = "", depth: int = 0) -> Iterator[str]:
    """'' for ``folder``, then the paths (relative, '/'-separated) of the zarr nodes below
    it, as zarr's own consolidation finds them: through zarr groups only (not below
    arrays, nor below folders without metadata), links followed, build folders left out."""
    yield prefix
    if depth > 64 or (prefix and _is_local_array(folder)):
        return
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        return
    for name in names:
        path = os.path.join(folder, name)
        if name in _GROUP_FILES or is_litter_or_ours(name) or not os.path.isdir(path):
            continue
        if is_zarr_store(path):
            yield from _subtree(path, _joined(prefix, name), depth + 1)


# The byte of a group's lock file that guards its consolidated metadata (far above the
# bytes that lock storage units, one per unit)
_CONSOLIDATED_UNIT = 1 << 62


def _write_document(path: str, document: dict[str, Any]) -> None:
    with replacing(path) as tmp, open(tmp, "w") as f:
        json.dump(document, f, indent=2)


def _ome_keys(v3: dict[str, Any] | None, v2: dict[str, Any] | None) -> set[str]:
    """The attribute names of a node's zarr v3 document ``v3`` or zarr v2 ``.zattrs``
    ``v2``, those inside an ``ome`` attribute (NGFF 0.5) included."""
    keys: set[str] = set()
    for attributes in ((v3 or {}).get("attributes"), v2):
        if isinstance(attributes, dict):
            keys.update(attributes)
            ome = attributes.get("ome")
            if isinstance(ome, dict):
                keys.update(ome)
    return keys


def _local_parents(folder: str) -> Iterator[str]:
    folder = os.path.abspath(folder)
    while (parent := os.path.dirname(folder)) != folder:
        yield parent
        folder = parent


def check_replaceable(target: str, whole: bool = True) -> None:
    """Refuse to write a new image at ``target`` where that would delete or break what we
    did not write: ``target`` must be missing, an empty folder, or a zarr store holding
    only zarr data and no other image or array than its own. ``whole``: ``target`` is to
    become an image of its own, so it may not lie inside another image (a label write
    passes False: its label image lies inside its image)."""
    parents = _local_parents(target) if whole else ()
    if not os.path.lexists(target) or (
        os.path.isdir(target) and not os.path.islink(target) and holds_nothing(target)
    ):
        # nothing there yet (or an empty folder, a build folder among them): a new image
        reason = refusal_above(local_document, parents, new=True)
        if reason:
            raise StoreExistsError(
                f"'{target}' {reason}; refusing to write there: write the image to a path "
                "of its own"
            )
        return
    if os.path.islink(target) or not os.path.isdir(target):
        raise StoreExistsError(
            f"'{target}' exists and is not a folder; refusing to replace it with a store"
        )
    if not is_zarr_store(target):
        raise StoreExistsError(
            f"'{target}' exists and is not a zarr store (no zarr.json, .zgroup or .zattrs at "
            "its top level); refusing to replace it: choose another path or remove it yourself"
        )
    foreign: list[str] = not_zarr_documents(local_document, target)
    below = list(_local_nodes_below(target, foreign))
    reason = replace_refusal(local_document, target, parents, below, images_below=True)
    if reason:
        raise StoreExistsError(
            f"'{target}' {reason}; refusing to replace it: write the image to a path of its own"
        )
    if foreign:
        raise StoreExistsError(_foreign_refusal(target, foreign[0]))
    if not os.access(target, os.W_OK | os.X_OK):
        # a store made read-only is protected by its owner (and its files could not be
        # removed once it is swapped out)
        raise StorePermissionError(
            f"'{target}' is read-only; refusing to replace it: make it writable first "
            "(chmod -R u+w) if it should be replaced"
        )


@contextlib.contextmanager
def built_beside(target: str, overwrite: bool, whole: bool = True) -> Iterator[str]:
    """Yield a new hidden folder beside ``target`` to build a store in; once the block
    finishes, swap it into ``target`` (replacing an existing store only with
    ``overwrite``, and ``whole`` as for :func:`check_replaceable`). If the block fails, the
    folder is removed and ``target`` is untouched."""
    parent, base = os.path.split(target)  # absolute already (io.stores.absolute)
    if is_own_build_folder(base) and os.path.isdir(target) and not os.listdir(target):
        # already a fresh build folder of this process (convert builds its image in one):
        # built in place; the build folder's own swap makes it appear whole
        yield target
        return
    name = f".{_stem(base)}.{_HOST}.{os.getpid()}-{uuid.uuid4().hex[:8]}{STAGING_SUFFIX}"
    staging = os.path.join(parent, name)
    try:
        os.makedirs(parent, exist_ok=True)
        restored = remove_stale_staging(parent, base)
        _building.add(name)
        os.mkdir(staging)
    except OSError as exc:
        _building.discard(name)
        # named by the destination: the build folder is ours, not the user's
        kind = StorePermissionError if isinstance(exc, PermissionError) else StoreError
        reason = exc.strerror or str(exc)
        if os.path.exists(parent) and not os.path.isdir(parent):
            reason = "it is a file, not a folder"
        raise kind(f"'{target}' cannot be created in '{parent}': {reason}") from exc
    except BaseException:  # interrupted once the folder may exist
        shutil.rmtree(staging, ignore_errors=True)
        _building.discard(name)
        raise
    if restored and not overwrite:
        os.rmdir(staging)
        _building.discard(name)
        raise StoreExistsError(
            f"'{target}' exists again: a replacement of it was interrupted, and the store it "
            "was replacing has been put back; pass overwrite=True to replace it"
        )
    try:
        yield staging
        target = os.path.join(parent, base)
        if not os.path.lexists(target):
            try:
                os.rename(staging, target)
                return
            except OSError as exc:
                # another writer's store landed there first (a rename onto a folder that
                # holds files fails): replaced as an existing store is, or refused
                if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                    raise
        if not overwrite:
            raise StoreExistsError(f"'{target}' appeared while it was being written")
        check_replaceable(target, whole)
        _exchange(staging, target)  # staging now holds the old store
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        # (zarr's event loop may still write a file of the interrupted block, making the
        # folder again: once out of _building, the next write of the target removes it)
        _building.discard(name)
        raise
    shutil.rmtree(staging, ignore_errors=True)
    _building.discard(name)
    if os.path.lexists(staging):
        warnings.warn(
            f"'{target}' was replaced, but the store it replaced could not be removed "
            f"entirely (another process was still writing into it, or a folder in it is "
            f"read-only): what is left of it is in '{staging}'; the next write of "
            f"'{target}' on this host removes it, or remove it yourself",
            LinumpyGpuWarning,
            stacklevel=3,
        )


# This host, in the names of build folders: on a file system several hosts share, a process
# id says whether a writer lives only on its own host.
_HOST = "h" + hashlib.sha1(socket.gethostname().encode()).hexdigest()[:8]


def is_own_build_folder(name: str) -> bool:
    """Whether ``name`` is that of a build folder this process made (:func:`built_beside`)."""
    return (
        name.startswith(".")
        and re.search(
            re.escape(f".{_HOST}.{os.getpid()}-")
            + r"[0-9a-f]{8}"
            + re.escape(STAGING_SUFFIX)
            + "$",
            name,
        )
        is not None
    )


def _stem(base: str) -> str:
    """``base`` as build folders name it: whole, or where it is so long that the folder's
    name would pass the file system's limit of 255 bytes, cut short and told apart by a
    hash of the whole."""
    if len(base.encode()) <= 180:
        return base
    digest = hashlib.sha1(base.encode()).hexdigest()[:12]
    return base.encode()[:160].decode(errors="ignore") + "~" + digest


def destination_of(where: str) -> str:
    """``where`` for messages: a path inside a store being built beside its destination
    (:func:`built_beside`) named by the destination's path."""
    return _BUILD_FOLDER.sub(r"\1", where)


_BUILD_FOLDER = re.compile(
    r"\.([^/]+?)\.(?:h[0-9a-f]{8}\.)?\d+-[0-9a-f]{8}" + re.escape(STAGING_SUFFIX)
)


# the names of the build folders of this process's writes under way (names, not paths:
# one folder has several spellings; the uuid in each name tells them apart)
_building: set[str] = set()


def remove_stale_staging(parent: str, base: str) -> bool:
    """Remove folders that earlier writes of ``base`` on this host left beside it when
    their process was killed or interrupted (named with the host and that process's id;
    left alone while the process lives and its write is under way, and always where
    another host wrote them). Returns whether an old
    store that such a write had set aside was put back at ``base``."""
    # (a swap without renameat2 parks the old store under the same name plus ".old"; names
    # without a host are from versions that wrote none)
    pattern = re.compile(
        re.escape(f".{_stem(base)}.")
        + r"(?:(h[0-9a-f]{8})\.)?(\d+)-[0-9a-f]{8}"
        + re.escape(STAGING_SUFFIX)
        + r"(\.old)?"
    )
    restored = False
    with contextlib.suppress(OSError):
        for name in os.listdir(parent):
            found = pattern.fullmatch(name)
            if found is None or found.group(1) not in (None, _HOST):
                continue
            left = os.path.join(parent, name)
            if int(found.group(2)) == os.getpid():
                if name.removesuffix(".old") in _building:
                    continue  # a write of this process, under way
            elif _process_alive(int(found.group(2))):
                continue
            target = os.path.join(parent, base)
            if found.group(3) and not os.path.lexists(target):
                # the old store, parked by a swap that was killed before the new one took
                # its place: put back, the only copy of it there is
                try:
                    os.rename(left, target)
                    restored = True
                except OSError:
                    pass  # kept where it is: it may be the only copy
                continue
            shutil.rmtree(left, ignore_errors=True)
    return restored


# Temporary files of :func:`replacing`: the file's name, then the host and process.
_PARTIAL = re.compile(r"\..+\.(h[0-9a-f]{8})\.(\d+)-[0-9a-f]{8}\.partial")
# zarr-python's LocalStore writes each file as <name>.<uuid4 hex>.partial, then renames it:
# one left behind is the remains of an interrupted zarr write (of ours, or another tool's)
_ZARR_PARTIAL = re.compile(r".*\.[0-9a-f]{32}\.partial")


def remove_stale_partials(folder: str | int, any_process: bool = False) -> None:
    """Remove the temporary files of atomic writes that processes of this host killed
    mid-write left in ``folder`` (a path, or an open folder's descriptor; ``any_process``:
    also those of live processes, once every writer of the folder is known to be done)."""
    with contextlib.suppress(OSError):
        for name in os.listdir(folder):
            found = _PARTIAL.fullmatch(name)
            if found is None or found.group(1) != _HOST:
                continue
            if any_process or not _process_alive(int(found.group(2))):
                with contextlib.suppress(OSError):
                    if isinstance(folder, int):
                        os.unlink(name, dir_fd=folder)
                    else:
                        os.unlink(os.path.join(folder, name))


def _process_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _exchange(a: str, b: str) -> None:
    """Swap two folders atomically where the kernel can (Linux renameat2), else with two
    renames (a crash between them leaves the old store under a hidden name beside ``b``)."""
    if _renameat2(a, b):
        return
    parked = f"{a}.old"
    os.rename(b, parked)
    try:
        os.rename(a, b)
    except BaseException:
        os.rename(parked, b)
        raise
    os.rename(parked, a)


_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def _renameat2(a: str, b: str) -> bool:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):
        return False
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    rc = fn(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE)
    if rc == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        return False
    raise StoreError(f"could not swap '{a}' into '{b}': {os.strerror(err)}")


def identity(path: str) -> tuple[int, int] | None:
    """Which file or folder ``path`` names now (device and inode), or None where it is
    gone: the same path naming another one means it was replaced."""
    try:
        found = os.stat(path)
    except OSError:
        return None
    return found.st_dev, found.st_ino


class UnitLocks:
    """Exclusive locks on the storage units (chunks, or shards) of one array in a local
    store, held while a writer reads, modifies and replaces them.

    Each hold opens the array's lock file anew and takes open-file-description locks
    (Linux) on one byte per unit: they exclude other processes and other threads alike,
    go when the process dies, and follow the lock file a replaced store brings (a
    descriptor kept open would lock the old one). Units are always locked in increasing
    order, so writers cannot deadlock. Where the system has no such locks, a hold locks
    the whole file (``flock``)."""

    def __init__(self, array_dir: str):
        # the real path: one array reached through a symlink and through its own path
        # must share one lock file
        self.path = os.path.join(os.path.realpath(array_dir), LOCK_FILE)

    def _open(self) -> int:
        try:
            return os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
        except FileNotFoundError as exc:  # never made again here: the store is gone
            raise StoreError(
                f"'{os.path.dirname(self.path)}' was removed; it cannot be written"
            ) from exc
        except PermissionError as exc:
            raise StorePermissionError(
                f"'{os.path.dirname(self.path)}' is not writable here "
                f"({exc.strerror}); it cannot be written"
            ) from exc
        except OSError as exc:  # a read-only file system, no inodes left, ...
            error = StorePermissionError if exc.errno == errno.EROFS else StoreError
            raise error(
                f"'{os.path.dirname(self.path)}' cannot be written ({exc.strerror})"
            ) from exc

    @contextlib.contextmanager
    def hold(self, units: Iterable[int]) -> Iterator[None]:
        """Hold the locks of ``units`` (linear unit numbers) for the block."""
        spans = _spans(sorted(set(units)))
        fd = -1
        try:
            while True:
                fd = _held.add(self._open())
                for start, length in spans:
                    _lock_bytes(fd, start, length)
                held = os.fstat(fd)
                if identity(self.path) == (held.st_dev, held.st_ino):
                    break
                _held.close(fd)  # the store was replaced while we waited: the new file
                fd = -1
            yield
        finally:
            if fd >= 0:
                _held.close(fd)  # closing the description drops every lock it holds


# Units locked one range per run of neighbours; past this many runs, one range from the
# first unit to the last (each lock is a record the system scans on every insert)
MAX_LOCK_SPANS = 256


def _spans(ordered: list[int]) -> list[tuple[int, int]]:
    """``ordered`` units as (start, length) runs, in increasing order."""
    spans: list[tuple[int, int]] = []
    for u in ordered:
        if spans and spans[-1][0] + spans[-1][1] == u:
            spans[-1] = (spans[-1][0], spans[-1][1] + 1)
        else:
            spans.append((u, 1))
    if len(spans) > MAX_LOCK_SPANS:
        return [(ordered[0], ordered[-1] - ordered[0] + 1)]
    return spans


class _HeldDescriptors:
    """The descriptors of the holds in progress: a child made by fork shares their open
    file descriptions (and so their locks) and closes its copies at once, or the parent's
    locks would outlive its holds while the child lives."""

    def __init__(self) -> None:
        self._fds: set[int] = set()
        self._lock = threading.Lock()

    def add(self, fd: int) -> int:
        with self._lock:
            self._fds.add(fd)
        return fd

    def close(self, fd: int) -> None:
        with self._lock:
            self._fds.discard(fd)
        os.close(fd)

    def close_all_in_child(self) -> None:
        for fd in self._fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        self._fds = set()
        self._lock = threading.Lock()


_held = _HeldDescriptors()
_OFD_LOCK = getattr(fcntl, "F_OFD_SETLKW", None)


def _lock_bytes(fd: int, start: int, length: int) -> None:
    """Wait for an exclusive lock of ``length`` bytes from ``start`` of ``fd``'s file,
    owned by the open file description (released when it is closed)."""
    if _OFD_LOCK is None:  # the whole file (taking it again through fd is a no-op)
        fcntl.flock(fd, fcntl.LOCK_EX)
        return
    # struct flock: l_type, l_whence, l_start, l_len, l_pid (0 for these locks)
    flock = struct.pack("hhqqi", fcntl.F_WRLCK, os.SEEK_SET, start, length, 0)
    fcntl.fcntl(fd, _OFD_LOCK, flock)


def _fresh_locks_after_fork() -> None:
    # the parent's lock may have been held by its other threads at the fork
    global _generations_lock
    _generations_lock = threading.Lock()
    _held.close_all_in_child()


os.register_at_fork(after_in_child=_fresh_locks_after_fork)
