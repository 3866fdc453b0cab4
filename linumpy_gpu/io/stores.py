"""Where a store lives: local paths, URLs (through fsspec) and zarr store objects.

Every public entry point turns what the user passed into a zarr store here, so a URL is
never mistaken for a local path, and every failure of the layers below (zarr, fsspec,
aiohttp, botocore, the operating system) reaches the user as one of linumpy_gpu's errors
that names the store and says what to do.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from linumpy_gpu.errors import (
    InvalidArgumentError,
    InvalidMetadataError,
    LinumpyGpuError,
    MissingDependencyError,
    NotOmeZarrError,
    RemoteStoreError,
    StoreError,
    StoreNotFoundError,
    StorePermissionError,
)
from linumpy_gpu.io.files import json_object

READ_MODES = ("r", "r+")

# fsspec's protocol -> the package that implements it (fsspec names it only in prose)
_PROTOCOL_PACKAGES = {
    "s3": "s3fs",
    "s3a": "s3fs",
    "gs": "gcsfs",
    "gcs": "gcsfs",
    "az": "adlfs",
    "abfs": "adlfs",
    "http": "aiohttp",
    "https": "aiohttp",
}
# Protocols that can only be read.
_READ_ONLY_PROTOCOLS = ("http", "https")


@dataclass(frozen=True)
class StoreLocation:
    """A resolved store: the zarr store, a name for messages, and the local directory when
    the store is one (the fast paths read and write files directly)."""

    store: Any
    where: str
    local_root: str | None
    protocol: str | None = None  # the URL's protocol, None for local paths and store objects


def split_protocol(path: str) -> tuple[str | None, str]:
    """``("s3", "bucket/x.zarr")`` for ``"s3://bucket/x.zarr"``; ``(None, path)`` else. A
    chained fsspec URL (``"simplecache::s3://bucket/x.zarr"``) gives its first link's
    protocol and the rest of the chain."""
    if "://" in path:
        protocol, rest = path.split("://", 1)
        if "::" in protocol:
            first, chained = protocol.split("::", 1)
            if _is_protocol(first):
                return first.lower(), f"{chained}://{rest}"
        if _is_protocol(protocol):
            return protocol.lower(), rest
    return None, path


def _is_protocol(text: str) -> bool:
    return bool(text) and text.replace("+", "").replace("-", "").isalnum()


# Protocols fsspec serves from this machine's file system: the store is a local folder.
_LOCAL_PROTOCOLS = ("file", "local")
# Spellings fsspec gives one protocol.
_PROTOCOL_ALIASES = {"s3a": "s3", "gcs": "gs", "abfs": "az"}


def local_path(path: str) -> str | None:
    """The absolute folder a local spelling names (a path, ``~/x``, ``file://``,
    ``local://``, in any case), or None for a URL of another protocol."""
    if "\0" in path:
        raise InvalidArgumentError(f"store paths cannot hold a NUL character, got {path!r}")
    protocol, rest = split_protocol(path)
    if protocol is None:
        scheme = _ONE_SLASH_URL.match(path)
        if scheme is not None:
            # a folder named "s3:" is never what was meant
            name = scheme.group(1)
            # file:/x means the local /x (file:///x); s3:/bucket means s3://bucket
            rest = path[scheme.end() - (name.lower() in _LOCAL_PROTOCOLS) :]
            raise InvalidArgumentError(
                f"'{path}' looks like a URL with one slash after '{name}:'; did you mean "
                f"'{name}://{rest}'? (a local folder of that name: './{path}')"
            )
        return absolute(rest)
    if protocol in _LOCAL_PROTOCOLS:
        host, slash, inner = rest.partition("/")
        if host.lower() == "localhost":  # file://localhost/x is /x (RFC 8089)
            rest = slash + inner or "/"
        elif host and protocol == "file":
            # file://host/x names a file on another machine; read as a local path, it
            # would be ./host/x, a folder the user never meant
            raise InvalidArgumentError(
                f"'{path}' names the host '{host}', not this machine: give a local path "
                f"as file:///{rest} (three slashes), or the path where that host's share "
                "is mounted here"
            )
        return absolute(rest)
    return None


# "s3:/bucket/x", "file:/data/x": a protocol and one slash (two letters at least, so a
# drive letter is not taken for one)
_ONE_SLASH_URL = re.compile(r"([A-Za-z][A-Za-z0-9+.-]+):/(?!/)")


def absolute(path: str) -> str:
    """The absolute path the system means by ``path``: a leading ``~/`` is the home folder;
    ``..`` is taken after the links before it are followed (``link/../x`` is the folder
    beside the link's target, as the system resolves it, not beside the link); the last
    part is kept as it is, so a link there is still seen as a link."""
    if path == "~" or path.startswith("~/"):
        path = os.path.expanduser(path)
    if os.path.isabs(path):
        joined = path
    else:
        try:
            cwd = os.getcwd()
        except FileNotFoundError as exc:  # the folder the process runs in was removed
            raise StoreNotFoundError(
                f"'{path}' is relative to the current folder, which no longer exists (was "
                "it replaced or removed?); give an absolute path, or change folder first"
            ) from exc
        joined = os.path.join(cwd, path)
    parent, name = os.path.split(joined.rstrip(os.sep) or os.sep)
    if name in ("", ".", ".."):
        return os.path.realpath(joined)
    return os.path.join(os.path.realpath(parent), name)


def overlapping(a: str, b: str) -> bool:
    """Whether the stores at ``a`` and ``b`` (paths or URLs, spelled as users spell them)
    are the same, or one lies inside the other: writing one would change the other.
    Local paths are compared after links are resolved; URLs by protocol and key, with
    repeated and edge slashes ignored (a store spelled two ways counts as one)."""
    places = []
    for text in (a, b):
        folder = local_path(text)
        if folder is not None:
            places.append(("", os.path.realpath(folder)))
            continue
        protocol, rest = split_protocol(text)
        key = "/".join(part for part in rest.split("/") if part not in ("", "."))
        places.append((_PROTOCOL_ALIASES.get(protocol or "", protocol or ""), "/" + key))
    (pa, ka), (pb, kb) = places
    if pa != pb:
        return False
    sep = os.sep if pa == "" else "/"
    ka, kb = ka.rstrip(sep) or sep, kb.rstrip(sep) or sep
    return ka == kb or ka.startswith(kb.rstrip(sep) + sep) or kb.startswith(ka.rstrip(sep) + sep)


def locate(
    path: Any,
    *,
    mode: str = "r",
    storage_options: dict[str, Any] | None = None,
    must_exist: bool = True,
) -> StoreLocation:
    """Resolve ``path`` (a local path, a URL, or a zarr store) for ``mode`` ("r": read only,
    "r+": read and write, "w": create). Local paths that do not exist raise
    :class:`StoreNotFoundError` when ``must_exist``."""
    if mode not in ("r", "r+", "w"):
        raise InvalidArgumentError(f"mode must be 'r' or 'r+', got {mode!r}")
    read_only = mode == "r"
    if isinstance(path, os.PathLike | str):
        text = os.fspath(path)
        if not isinstance(text, str):
            raise InvalidArgumentError(f"store paths must be text, got {path!r}")
        protocol, rest = split_protocol(text)
        folder = local_path(text)
        if folder is not None:
            if storage_options:
                # most often a URL whose scheme was left out: never write it locally
                raise InvalidArgumentError(
                    f"storage_options apply to URLs (s3://..., gs://...), and '{text}' is a "
                    "local path: give the URL with its scheme, or leave storage_options out"
                )
            return _local(folder, read_only, must_exist)
        assert protocol is not None  # local_path answers every path without one
        if storage_options is not None and not isinstance(storage_options, dict):
            raise InvalidArgumentError("storage_options must be a dict")
        if "::" in text and not read_only:
            raise InvalidArgumentError(
                f"'{text}' is a chained fsspec URL, which linumpy_gpu reads but does not "
                "write: write to the URL of the store itself"
            )
        if protocol in _READ_ONLY_PROTOCOLS and not read_only:
            raise InvalidArgumentError(
                f"'{text}' is served over {protocol}, which is read-only: write to a local "
                "path or to an object store (s3://, gs://, memory://, ...) instead"
            )
        if "::" not in text:
            text = f"{protocol}://{rest}"  # schemes are case-insensitive; fsspec's are lower
        return _remote(text, protocol, read_only, storage_options)
    if storage_options:
        raise InvalidArgumentError("storage_options apply to URLs only, not to store objects")
    from zarr.abc.store import Store

    if isinstance(path, Store):
        if not read_only and getattr(path, "read_only", False):
            # the caller opened it read-only: a write through it is refused, not redirected
            raise StorePermissionError(
                f"'{path}' was opened read-only (read_only=True); pass a writable store"
            )
        root = getattr(path, "root", None)
        local_kind = type(path).__name__ in ("LocalStore", "GDSStore")
        if root is not None and local_kind and not must_exist and not path._is_open:
            # a folder to write: used by its path (opening the store would make the folder,
            # and a relative root names another folder once the process changes directory)
            return StoreLocation(path, str(path), absolute(os.fspath(root)))
        if not getattr(path, "_is_open", True):
            # zarr opens a store on its first use through zarr's API; stores handed to us
            # (a ZipStore, say) are used directly, so they are opened here
            from zarr.core.sync import sync

            with translated_errors(str(path)):
                sync(path._open())
        local = absolute(os.fspath(root)) if root is not None and local_kind else None
        return StoreLocation(path, str(path), local)
    raise InvalidArgumentError(
        f"expected a path, a URL or a zarr store, got {type(path).__module__}.{type(path).__name__}"
    )


def _local(text: str, read_only: bool, must_exist: bool) -> StoreLocation:
    import zarr

    where = absolute(text)
    if must_exist and not os.path.exists(where):
        raise StoreNotFoundError(f"no such file or directory: '{where}'")
    if must_exist and not os.path.isdir(where):
        raise StoreError(f"'{where}' is a file; an OME-Zarr store is a directory")
    store = zarr.storage.LocalStore(where, read_only=read_only)
    return StoreLocation(store, where, where)


def _remote(
    url: str, protocol: str, read_only: bool, storage_options: dict[str, Any] | None
) -> StoreLocation:
    import zarr

    with translated_errors(url):
        try:
            store = zarr.storage.FsspecStore.from_url(
                url, storage_options=storage_options, read_only=read_only
            )
        except TypeError as exc:  # unknown keys in storage_options
            raise InvalidArgumentError(f"storage_options for '{url}': {exc}") from exc
        except ValueError as exc:
            if "protocol" not in str(exc).lower():
                raise
            raise InvalidArgumentError(
                f"'{url}': fsspec knows no '{protocol}://' protocol ({exc})"
            ) from exc
        if storage_options:
            _check_options(store, url)
    return StoreLocation(store, url, None, protocol)


def _check_options(store: Any, url: str) -> None:
    """Make the store's first request now: fsspec applies ``storage_options`` only when it
    starts its session, and a wrong key or value there is the caller's argument, not the
    store's metadata (as it would read later)."""
    from zarr.core.sync import sync

    try:
        sync(store.exists("zarr.json"))
    except (TypeError, ValueError) as exc:
        raise InvalidArgumentError(f"storage_options for '{url}': {exc}") from exc


def store_url(store: Any) -> str:
    """A name for messages of where a zarr store's objects live: the URL of an fsspec
    store's root (``s3://bucket/x.zarr``, ``http://host/x.zarr``), a local store's folder,
    else the store's own description."""
    fs, path = getattr(store, "fs", None), getattr(store, "path", None)
    if fs is not None and isinstance(path, str):
        with contextlib.suppress(Exception):
            return str(fs.unstrip_protocol(path)).rstrip("/")
    root = getattr(store, "root", None)
    if root is not None:
        return os.fspath(root)
    return str(store)


@contextlib.contextmanager
def translated_errors(where: str, what: str = "store", metadata: bool = False) -> Iterator[None]:
    """Re-raise failures of the libraries below as linumpy_gpu errors naming ``where``.
    ``metadata``: the block parses zarr metadata, so any ValueError, TypeError, KeyError or
    OverflowError (a fill value out of its dtype's range) from zarr means metadata it
    refused."""
    try:
        yield
    except LinumpyGpuError:
        raise
    except Exception as exc:
        translated = translate(exc, where, what)
        if (
            translated is None
            and metadata
            and isinstance(exc, ValueError | TypeError | KeyError | OverflowError)
        ):
            text = str(exc).splitlines()[0] if str(exc) else ""
            translated = InvalidMetadataError(
                where,
                "zarr metadata",
                "valid zarr metadata",
                f"a document zarr-python refuses ({type(exc).__name__}: {text})",
            )
        if translated is None:
            raise
        raise translated from exc


def translate(exc: BaseException, where: str, what: str = "store") -> LinumpyGpuError | None:
    """The linumpy_gpu error for a failure ``exc`` met while using ``where``, or None when
    the failure is not one a user can cause (a bug: let it surface as it is)."""
    names = {c.__name__ for c in type(exc).__mro__}
    module = type(exc).__module__ or ""
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    if "NoCredentialsError" in names or "PartialCredentialsError" in names:
        return RemoteStoreError(
            f"'{where}': no credentials found ({text}). For a public bucket pass "
            "storage_options={'anon': True}; otherwise configure credentials (environment, "
            "~/.aws/credentials) or pass them in storage_options"
        )
    if "ClientError" in names and module.startswith("botocore"):
        code = getattr(exc, "response", {}).get("Error", {}).get("Code", "")
        if code in ("AccessDenied", "403", "InvalidAccessKeyId", "SignatureDoesNotMatch"):
            return StorePermissionError(
                f"'{where}': access denied ({text}); check the credentials, or pass "
                "storage_options={'anon': True} for a public bucket"
            )
        return RemoteStoreError(f"'{where}': the object store refused the request ({text})")
    if isinstance(exc, ImportError):
        protocol, _ = split_protocol(where)
        package = _PROTOCOL_PACKAGES.get(protocol or "", getattr(exc, "name", None) or "")
        hint = f"pip install {package}" if package else "install the fsspec backend it names"
        return MissingDependencyError(f"'{where}' needs a package that is missing: {text} ({hint})")
    if "BadZipFile" in names:
        return StoreError(f"'{where}' is not a zip file that can be read ({text})")
    if isinstance(exc, RecursionError):
        return InvalidMetadataError(
            where, "metadata", "JSON of reasonable depth", "nesting too deep"
        )
    if isinstance(exc, json.JSONDecodeError | UnicodeDecodeError):
        return InvalidMetadataError(where, "zarr metadata", "valid JSON", text)
    status = getattr(exc, "status", None)
    if module.startswith("aiohttp") and isinstance(status, int) and status >= 400:
        # an HTTP server's answer (fsspec turns 404 into FileNotFoundError itself)
        if status in (401, 403):
            return StorePermissionError(
                f"'{where}': access denied (HTTP {status}: {text}); pass the credentials the "
                "server asks for in storage_options (e.g. client_kwargs={'headers': {...}})"
            )
        return RemoteStoreError(f"'{where}': the server answered HTTP {status} ({text})")
    if isinstance(exc, PermissionError):
        hint = (
            "check the credentials, or pass storage_options={'anon': True} for a public bucket"
            if split_protocol(where)[0] is not None
            else "check the file permissions"
        )
        return StorePermissionError(f"'{where}': permission denied ({text}); {hint}")
    if isinstance(exc, IsADirectoryError | NotADirectoryError):
        return StoreError(f"'{where}': a directory and a file are mixed up in the {what} ({text})")
    if "ContainsArrayError" in names:
        return NotOmeZarrError(where, "zarr.json / .zgroup", "a zarr group", "an array")
    if "GroupNotFoundError" in names or "NodeNotFoundError" in names:
        return StoreNotFoundError(f"'{where}' holds no zarr group ({text})")
    if isinstance(exc, FileNotFoundError):
        return StoreNotFoundError(f"'{where}': not found ({text})")
    if (
        # botocore's own connection, timeout and protocol failures (not Python's
        # ConnectionError): the object store could not be reached or answered nothing
        (module.startswith("botocore") and "BotoCoreError" in names)
        or module.startswith("aiohttp")
        or isinstance(exc, ConnectionError | TimeoutError)
    ):
        return RemoteStoreError(f"'{where}' could not be reached ({type(exc).__name__}: {text})")
    if "MetadataValidationError" in names or "NodeTypeValidationError" in names:
        return InvalidMetadataError(where, "zarr metadata", "valid zarr metadata", text)
    if "UnknownCodecError" in names:
        return InvalidMetadataError(where, "codecs", "codecs zarr-python knows", text)
    if isinstance(exc, OSError):
        return StoreError(f"'{where}': {type(exc).__name__}: {text}")
    return None


def nested_by_spec(array: Any, ngff_version: str | None) -> tuple[Any, bool]:
    """``array`` as its chunks are stored, and whether that differs from its metadata.

    NGFF 0.2 to 0.4 keep a zarr v2 array's chunks in nested folders ("0/1/2"), yet files
    written before zarr's ``dimension_separator`` key existed do not say so, and zarr reads
    them with its default "." (every chunk missing: all fill values). Such an array is
    reopened with "/" where its files show nested chunks (:func:`_stored_separator`);
    nothing is looked at for any other array."""
    from zarr.core.buffer import default_buffer_prototype
    from zarr.core.sync import sync

    meta = array.metadata
    if (
        ngff_version not in ("0.2", "0.3", "0.4")
        or meta.zarr_format != 2
        or array.ndim < 2
        or meta.dimension_separator == "/"
    ):
        return array, False
    prefix = array.store_path.path
    inside = f"{prefix}/" if prefix else ""
    raw = sync(array.store.get(inside + ".zarray", default_buffer_prototype()))
    if "dimension_separator" in json_object(raw.to_bytes() if raw is not None else b""):
        return array, False
    chunks = tuple(int(c) for c in meta.chunks)
    if _stored_separator(array.store, prefix, tuple(array.shape), chunks) != "/":
        return array, False
    return with_separator(array, "/"), True


_DIGITS = re.compile(r"[0-9]+")


def _stored_separator(
    store: Any, prefix: str, shape: tuple[int, ...], chunks: tuple[int, ...]
) -> str | None:
    """The chunk key separator the array at ``prefix`` uses by its files, or None where
    they do not tell. The level's folder is read entry by entry until one tells: a flat
    key of as many numbers as the array has dimensions ("0.1.2"), or a nested one, a path
    of as many digit names ending in a file (a user's "2024/12/notes.txt" or "2.0" is
    neither). On object stores the first and the last chunk's keys are tried first, and
    the folder is listed only where neither exists."""
    from zarr.core.sync import sync
    from zarr.storage import LocalStore

    ndim = len(shape)
    flat_key = re.compile(r"[0-9]+" + r"\.[0-9]+" * (ndim - 1))
    if isinstance(store, LocalStore):
        folder = os.path.join(str(store.root), *prefix.split("/")) if prefix else str(store.root)
        try:
            with os.scandir(folder) as entries:
                for entry in entries:
                    if flat_key.fullmatch(entry.name) and entry.is_file():
                        return "."
                    if _DIGITS.fullmatch(entry.name) and _nested_key_below(entry, ndim - 1):
                        return "/"
        except OSError:
            return None
        return None
    inside = f"{prefix}/" if prefix else ""
    last = [str(max(0, -(-n // c) - 1)) for n, c in zip(shape, chunks, strict=True)]

    async def nested_below(path: str, depth: int) -> bool:
        if depth == 0:
            return bool(await store.exists(path))
        async for name in store.list_dir(path):
            if _DIGITS.fullmatch(name) and await nested_below(f"{path}/{name}", depth - 1):
                return True
        return False

    async def listed() -> str | None:
        async for name in store.list_dir(prefix):
            if flat_key.fullmatch(name):
                return "."
            if _DIGITS.fullmatch(name) and await nested_below(inside + name, ndim - 1):
                return "/"
        return None

    try:
        for index in (["0"] * ndim, last):
            if sync(store.exists(inside + ".".join(index))):
                return "."
            if sync(store.exists(inside + "/".join(index))):
                return "/"
        # both corners empty (a bright object on a dark background, say)
        return sync(listed())
    except Exception:  # a store that cannot tell (an HTTP server refusing, say)
        return None


def _nested_key_below(entry: os.DirEntry[str], depth: int) -> bool:
    """Whether the folder ``entry`` holds a path of ``depth`` more digit names ending in a
    file (or a link to one, as git-annex checkouts hold): the rest of a nested chunk key."""
    try:
        if depth == 0:
            return entry.is_file()
        if not entry.is_dir():
            return False
        with os.scandir(entry.path) as inner:
            return any(_DIGITS.fullmatch(e.name) and _nested_key_below(e, depth - 1) for e in inner)
    except OSError:
        return False


def with_separator(array: Any, separator: str) -> Any:
    """The zarr v2 ``array`` reading its chunk keys with ``separator``."""
    if array.metadata.zarr_format != 2 or array.metadata.dimension_separator == separator:
        return array
    import dataclasses

    from zarr import Array
    from zarr.core.array import AsyncArray

    inner = array._async_array
    renamed = dataclasses.replace(array.metadata, dimension_separator=separator)
    return Array(AsyncArray(metadata=renamed, store_path=inner.store_path, config=inner.config))
