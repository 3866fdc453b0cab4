"""The write engine: region -> storage units -> gather -> batched encode -> atomic files.

One implementation for both backends (the backend gathers chunks and compresses them:
numcodecs threads on the CPU, nvCOMP batches on the GPU). Each chunk or shard file is
written under a temporary name and renamed into place, so a reader never sees half a file.
Regions that do not cover whole storage units are read first (read-modify-write).
"""

from __future__ import annotations

import contextlib
import itertools
import math
import numbers
import os
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from linumpy_gpu.backends.base import Backend
from linumpy_gpu.core.layout import ArrayLayout, layout_of
from linumpy_gpu.core.selection import normalize_selection
from linumpy_gpu.engine.reader import ChunkedArrayReader
from linumpy_gpu.errors import (
    ChunkWriteError,
    SelectionError,
    StoreError,
    UnsupportedWriteError,
    WriteError,
)
from linumpy_gpu.io.files import OpenFolder, UnitLocks, identity

# Stored bytes: ordinary bytes, or a view of the memory an encoder landed them in
Buffer = bytes | memoryview
# What a storage unit's file holds: one buffer, or pieces written back to back (a shard)
Blob = Buffer | list[Buffer]


class ChunkedArrayWriter:
    """Writes regions of one zarr array (zstd or uncompressed, optionally sharded)."""

    def __init__(
        self,
        array: Any,
        backend: Backend,
        *,
        name: str | None = None,
        batch_bytes: int | None = None,
        locking: bool = True,
    ):
        """``locking``: serialise writes of the same storage unit with other writers
        (threads and processes; local stores only). A writer that owns the array alone
        (a new store being built) does without."""
        self.array = array
        self.backend = backend
        self.name = name or str(array.store_path)
        self.layout: ArrayLayout = layout_of(array, self.name)
        fmt = self.layout.chunk
        if fmt is None or [c.name for c in fmt.codecs] not in ([], ["zstd"]):
            uses = (
                f"uses {list(self.layout.codec_names)}"
                if self.layout.codec_names
                else f"is not one: {self.layout.delegate_reason}"
            )
            raise UnsupportedWriteError(
                f"{self.name}: linumpy_gpu writes zstd or uncompressed chunks; this array {uses}"
            )
        if fmt.transpose is not None or fmt.order != "C" or fmt.needs_byteswap:
            raise UnsupportedWriteError(f"{self.name}: only C-order, native-endian chunks")
        if self.layout.shard_index is not None and (
            self.layout.shard_index.location != "end" or not self.layout.shard_index.little_endian
        ):
            raise UnsupportedWriteError(
                f"{self.name}: only shard indexes at the end, little endian"
            )
        zstd = fmt.codecs[0].config if fmt.codecs else None
        self.level = int(zstd.get("level", 3)) if zstd else None
        # zarr v2 metadata has no portable place for the flag (see write.plan): zstd chunks
        # of zarr v2 arrays always carry a content checksum, so reads can verify them.
        v2 = self.layout.zarr_format == 2
        self.checksum = bool(zstd and (v2 or zstd.get("checksum", False)))
        self.batch_bytes = batch_bytes or backend.memory().write_batch_bytes()
        self.store = array.store
        prefix = array.store_path.path
        self._prefix = f"{prefix}/" if prefix else ""
        self._root = getattr(self.store, "root", None)
        self.written = 0
        self._locks = None
        self._folder: str | None = None
        self._folder_identity: tuple[int, int] | None = None
        if self._root is not None:
            self._folder = os.path.join(os.fspath(self._root), *self._prefix.split("/"))
            self._folder_identity = identity(self._folder)
        if locking and self._folder is not None:
            self._locks = UnitLocks(self._folder)

    # -- public ---------------------------------------------------------------------------

    def write(self, region: Any, block: Any, progress: Any = None) -> None:
        """Write ``block`` (numpy or cupy, of exactly the region's shape, or a scalar) into
        ``region`` (integers and step-1 slices inside the array's bounds)."""
        layout = self.layout
        check_write_bounds(region, layout.shape)
        sel = normalize_selection(region, layout.shape)
        if any(a.step != 1 or a.reversed for a in sel.axes):
            raise UnsupportedWriteError("region writes take step-1 slices and integers only")
        if hasattr(block, "dask") and hasattr(block, "compute"):
            block = block.compute()  # a lazy block: its values are checked, then written
        refuse_masked(block, self.name)
        scalar = np.ndim(block) == 0 and not hasattr(block, "__cuda_array_interface__")
        if not scalar and not all(hasattr(block, a) for a in ("shape", "dtype")):
            block = np.asarray(block)
        if not scalar and tuple(block.shape) != sel.shape:
            raise WriteError(
                f"{self.name}: a block of shape {tuple(block.shape)} for a region of shape "
                f"{sel.shape}; the shapes must match exactly"
            )
        check_castable(np.asarray(block) if scalar else block, layout.dtype, self.name)
        if sel.size == 0:
            return
        if scalar:
            value = np.asarray(block).astype(layout.dtype)[()]
        else:
            value = self.backend.from_any(block).reshape(sel.full_shape)
            value = value.astype(layout.dtype, copy=False)
        unit = layout.shard_shape or layout.chunk_shape
        starts = [a.start for a in sel.axes]
        stops = [a.start + a.count for a in sel.axes]
        lo = [s // u * u for s, u in zip(starts, unit, strict=True)]
        hi = [min(-(-e // u) * u, n) for e, u, n in zip(stops, unit, layout.shape, strict=True)]
        aligned = lo == starts and hi == stops
        with self._locked(lo, hi, unit), self._opened_folder() as folder:
            if aligned and not scalar:
                data = value
            else:  # read-modify-write of the partly covered units
                expanded = tuple(slice(a, b) for a, b in zip(lo, hi, strict=True))
                if aligned:
                    data = self.backend.empty(
                        tuple(b - a for a, b in zip(lo, hi, strict=True)), layout.dtype
                    )
                else:
                    data = ChunkedArrayReader(self.array, self.backend, name=self.name).read(
                        expanded
                    )
                inner = tuple(
                    slice(s - a, e - a) for s, e, a in zip(starts, stops, lo, strict=True)
                )
                data[inner] = value
            self._write_units(data, lo, progress, folder)
            if folder is not None and folder.replaced():
                raise self._replaced_meanwhile()

    @contextlib.contextmanager
    def _opened_folder(self) -> Iterator[OpenFolder | None]:
        """The array's folder held open for one write (local stores; None for others):
        files go into the folder the write began in, whatever its path names meanwhile."""
        if self._folder is None:
            yield None
            return
        with OpenFolder(self._folder) as folder:
            if folder.identity != self._folder_identity:
                raise StoreError(
                    f"'{self.name}' was replaced or removed after it was opened: open it "
                    "again to write to the new store"
                )
            yield folder

    def _locked(self, lo: list[int], hi: list[int], unit: tuple[int, ...]) -> Any:
        """The locks of the units between ``lo`` and ``hi`` (element bounds), held."""
        if self._locks is None:
            return contextlib.nullcontext()
        grid = tuple(-(-n // u) for n, u in zip(self.layout.shape, unit, strict=True))
        ranges = [range(a // u, -(-b // u)) for a, b, u in zip(lo, hi, unit, strict=True)]
        coords = np.array(list(itertools.product(*ranges)), dtype=np.int64).reshape(-1, len(grid))
        if not len(coords):
            return contextlib.nullcontext()
        linear = np.ravel_multi_index(tuple(coords.T), grid)
        return self._locks.hold(int(u) for u in np.atleast_1d(linear))

    # -- stages ---------------------------------------------------------------------------

    def _write_units(
        self, data: Any, origin: list[int], progress: Any, folder: OpenFolder | None
    ) -> None:
        layout = self.layout
        unit = layout.shard_shape or layout.chunk_shape
        grid = [
            range(o // u, -(-(o + n) // u))
            for o, n, u in zip(origin, data.shape, unit, strict=True)
        ]
        units = list(itertools.product(*grid))
        per_unit = math.prod(unit) * layout.dtype.itemsize
        per_batch = max(1, self.batch_bytes // per_unit)
        # Files of batch k are written while batch k+1 is encoded (one batch in flight, so
        # host memory holds at most two batches of compressed bytes).
        with ThreadPoolExecutor(1, thread_name_prefix="linumpy-put") as putter:
            if (
                layout.shard_shape is not None
                and per_unit > self.batch_bytes
                and folder is not None
            ):
                # a shard larger than a batch: its file is written as its chunks are
                # encoded, a batch at a time, so no shard is ever held whole
                for shard in units:
                    self._write_shard_in_parts(data, origin, shard, putter, folder)
                    if progress is not None:
                        progress.update(1)
                return
            pending = None
            for i in range(0, len(units), per_batch):
                batch = units[i : i + per_batch]
                blobs, release = self._encode_units(data, origin, batch)
                try:
                    keys = [self._prefix + layout.storage_key(u) for u in batch]
                    if pending is not None:
                        pending.result()
                except BaseException:
                    release()  # the previous batch failed: this one is never written
                    raise
                pending = putter.submit(self._put_all, keys, blobs, release, folder)
                if progress is not None:
                    progress.update(len(batch))
            if pending is not None:
                pending.result()

    def _encode_units(
        self, data: Any, origin: list[int], units: list[tuple[int, ...]]
    ) -> tuple[Sequence[Blob | None], Callable[[], None]]:
        """The files of ``units`` (None: outside the array), and what gives back the memory
        their bytes lie in once they are written."""
        layout = self.layout
        chunk = layout.chunk_shape
        if layout.shard_shape is None:
            regions = [self._region(u, chunk, origin) for u in units]
            return self._encode_chunks(data, regions)
        assert layout.shard_index is not None  # sharded: the index format is known
        per = layout.shard_index.inner_per_shard
        inner_regions = []
        for shard in units:
            for inner in itertools.product(*(range(p) for p in per)):
                coords = tuple(s * p + i for s, p, i in zip(shard, per, inner, strict=True))
                inner_regions.append(self._region(coords, chunk, origin))
        frames, release = self._encode_chunks(data, inner_regions)
        shards: list[Blob | None] = []
        n_inner = math.prod(per)
        for k in range(len(units)):
            parts = frames[k * n_inner : (k + 1) * n_inner]
            regions = inner_regions[k * n_inner : (k + 1) * n_inner]
            shards.append(_assemble_shard(parts, regions, layout.shard_index.crc32c))
        return shards, release

    def _write_shard_in_parts(
        self,
        data: Any,
        origin: list[int],
        shard: tuple[int, ...],
        putter: ThreadPoolExecutor,
        folder: OpenFolder,
    ) -> None:
        """One shard's file (local stores), its inner chunks encoded a batch at a time and
        appended while the next batch encodes; the index goes last, as in
        :func:`_assemble_shard`. The file appears whole under its name or not at all."""
        layout = self.layout
        assert layout.shard_index is not None  # sharded: the index format is known
        per = layout.shard_index.inner_per_shard
        chunk = layout.chunk_shape
        regions = [
            self._region(
                tuple(s * p + i for s, p, i in zip(shard, per, inner, strict=True)), chunk, origin
            )
            for inner in itertools.product(*(range(p) for p in per))
        ]
        group = max(1, self.batch_bytes // (math.prod(chunk) * layout.dtype.itemsize))
        index = np.full((len(regions), 2), np.iinfo(np.uint64).max, dtype="<u8")
        key = self._prefix + layout.storage_key(shard)
        try:
            with folder.new_file(layout.storage_key(shard)) as f:
                offset = 0
                pending = None
                try:
                    for start in range(0, len(regions), group):
                        frames, release = self._encode_chunks(data, regions[start : start + group])
                        parts = []
                        for i, frame in enumerate(frames, start):
                            if frame is not None:
                                index[i] = (offset, len(frame))
                                parts.append(frame)
                                offset += len(frame)
                        try:
                            if pending is not None:
                                pending.result()
                        except BaseException:
                            release()
                            raise
                        pending = putter.submit(_append_parts, f, parts, release)
                finally:  # never close the file under a write still running
                    if pending is not None:
                        pending.result()
                f.writelines(_index_parts(index, layout.shard_index.crc32c))
        except OSError as exc:
            raise self._write_failed(key, exc, self.written) from exc
        self.written += 1

    def _replaced_meanwhile(self) -> StoreError:
        return StoreError(
            f"'{self.name}' was replaced or removed while this write ran: what it wrote went "
            "to the store it began in, none of it to the new one. Write again after opening "
            "the new store"
        )

    def _write_failed(self, key: str, exc: OSError, written: int) -> Exception:
        """The error for a file of ``key`` that could not be written: StoreError where the
        store went away meanwhile, else ChunkWriteError."""
        if self._folder is not None and identity(self._folder) != self._folder_identity:
            return self._replaced_meanwhile()
        return ChunkWriteError(
            f"{self.name}: writing '{key}' failed ({type(exc).__name__}: "
            f"{exc.strerror or exc}); {written} objects of this array were written before "
            "it, each whole"
        )

    def _region(
        self, coords: tuple[int, ...], chunk: tuple[int, ...], origin: list[int]
    ) -> tuple[slice, ...] | None:
        """Slices of ``data`` (which starts at ``origin``) that chunk ``coords`` covers, or
        None if the chunk lies outside the array."""
        out = []
        for c, size, o, full in zip(coords, chunk, origin, self.layout.shape, strict=True):
            a = c * size
            if a >= full:
                return None
            b = min(a + size, full)
            out.append(slice(a - o, b - o))
        return tuple(out)

    def _encode_chunks(
        self, data: Any, regions: list[Any]
    ) -> tuple[list[Buffer | None], Callable[[], None]]:
        layout = self.layout
        present = [i for i, r in enumerate(regions) if r is not None]
        zstd = None if self.level is None else (self.level, self.checksum)
        encoded = self.backend.encode_regions(
            data, [regions[i] for i in present], layout.chunk_shape, layout.fill_value, zstd
        )
        out: list[Buffer | None] = [None] * len(regions)
        for i, f in zip(present, encoded.frames, strict=True):
            out[i] = f
        return out, encoded.release

    def _put_all(
        self,
        keys: list[str],
        blobs: Sequence[Blob | None],
        release: Callable[[], None],
        folder: OpenFolder | None,
    ) -> None:
        """Write each blob to its key, then give back the memory the blobs lie in."""
        try:
            self._put_blobs(keys, blobs, folder)
        finally:
            release()

    def _put_blobs(
        self, keys: list[str], blobs: Sequence[Blob | None], folder: OpenFolder | None
    ) -> None:
        done: list[str] = []

        def put(item: tuple[str, Blob | None]) -> None:
            key, blob = item
            if blob is None:  # a unit wholly outside the array: nothing to store
                return
            try:
                self._put(key, blob, folder)
            except OSError as exc:
                raise self._write_failed(key, exc, self.written + len(done)) from exc
            done.append(key)

        if folder is not None and len(keys) > 1:
            with ThreadPoolExecutor(min(32, len(keys))) as pool:
                list(pool.map(put, zip(keys, blobs, strict=True)))
        else:
            for item in zip(keys, blobs, strict=True):
                put(item)
        self.written += len(done)

    def _put(self, key: str, blob: Blob, folder: OpenFolder | None) -> None:
        if folder is None:
            from zarr.core.buffer import default_buffer_prototype
            from zarr.core.sync import sync

            # a copy: the store may keep it, and landed memory is reused once released
            whole = b"".join(blob) if isinstance(blob, list) else bytes(blob)
            sync(self.store.set(key, default_buffer_prototype().buffer.from_bytes(whole)))
            return
        folder.write(key[len(self._prefix) :], blob)


def _append_parts(f: Any, parts: list[Buffer], release: Callable[[], None]) -> None:
    """Append ``parts`` to the open file ``f``, then give back the memory they lie in."""
    try:
        f.writelines(parts)
    finally:
        release()


def _assemble_shard(
    frames: list[Buffer | None], regions: list[Any], crc32c: bool = True
) -> list[Buffer]:
    """Inner chunks back to back, then the index (offset, nbytes per inner chunk, C order)
    and, where the array's index codecs say so (``crc32c``), its checksum, as zarr's
    sharding codec (index at the end) lays them out: the pieces of the shard's file,
    written one after another without joining them in memory."""
    index = np.full((len(frames), 2), np.iinfo(np.uint64).max, dtype="<u8")
    parts: list[Buffer] = []
    offset = 0
    for i, f in enumerate(frames):
        if f is None or regions[i] is None:
            continue
        index[i] = (offset, len(f))
        parts.append(f)
        offset += len(f)
    return parts + _index_parts(index, crc32c)


def _index_parts(index: np.ndarray, crc32c: bool) -> list[Buffer]:
    """A shard's index (little-endian offset and size per inner chunk) as the file's last
    bytes, and its CRC-32C where the array's index codecs call for one."""
    import google_crc32c

    raw = index.tobytes()
    return [raw, google_crc32c.value(raw).to_bytes(4, "little")] if crc32c else [raw]


def check_write_bounds(region: Any, shape: tuple[int, ...]) -> None:
    """Refuse slices that reach past the array (numpy would clip them silently, and a
    block written there would land somewhere the caller did not mean)."""
    items = region if isinstance(region, tuple) else (region,)
    if any(i is Ellipsis for i in items):
        # the Ellipsis stands for the axes the other items leave: expand it in place, so
        # the items after it meet the last axes, not the first
        at = next(k for k, i in enumerate(items) if i is Ellipsis)
        rest = tuple(i for i in items if i is not Ellipsis)
        fill = (slice(None),) * max(0, len(shape) - len(rest))
        items = rest[:at] + fill + rest[at:]
    for axis, (item, n) in enumerate(zip(items, shape, strict=False)):
        if isinstance(item, slice):
            for bound in (item.start, item.stop):
                if isinstance(bound, numbers.Integral) and not -n <= int(bound) <= n:
                    raise SelectionError(
                        f"slice {item.start}:{item.stop} on axis {axis} reaches past the array's "
                        f"size {n} there"
                    )


def _check_integers_exact_as(block: Any, src: np.dtype, dtype: np.dtype, name: str) -> None:
    """Refuse integers that the float ``dtype`` does not hold exactly (rounded, or beyond
    its range): object ids and counts must read back as written."""
    if not bool(getattr(block, "size", 1)):
        return
    exact_below = 2 ** (np.finfo(dtype).nmant + 1)  # every integer up to this is exact
    low, high = int(block.min()), int(block.max())
    if -exact_below <= low and high <= exact_below:
        return  # the common case, without a copy of the block
    # (unsigned blocks are not compared with a negative bound: cupy may refuse it)
    far = (block > exact_below) | (block < -exact_below) if src.kind == "i" else block > exact_below
    beyond = block[far]
    info = np.iinfo(src)
    with np.errstate(over="ignore", invalid="ignore"):  # overflows are what is checked
        converted = beyond.astype(dtype)
        wide = converted.astype(np.float64)
        # infinite, or at the end of the source's range and past it (2**63 for int64)
        inside = (abs(wide) < float("inf")) & (wide >= float(info.min))
        inside &= wide < float(info.max) + 1.0
        exact = bool(inside.all()) and bool((converted.astype(src) == beyond).all())
    if not exact:
        raise WriteError(
            f"{name}: integers beyond {exact_below} (values {low}..{high}) would not be "
            f"stored exactly as {dtype} (rounded, or past its range); store them in an "
            "integer array, or convert them first "
            f"(block.astype({str(dtype)!r})) if rounding is acceptable"
        )


def refuse_masked(data: Any, name: str) -> None:
    """Refuse a numpy masked array that masks anything (a dask array of them too): its
    masked values would be written as they lie underneath, unchecked and unmarked, and
    zarr has no mask to keep them out. One that masks nothing is its data."""
    if (isinstance(data, np.ma.MaskedArray) and np.ma.is_masked(data)) or isinstance(
        getattr(data, "_meta", None), np.ma.MaskedArray
    ):
        raise WriteError(
            f"{name}: a masked array cannot be stored as it is (zarr keeps no mask, and the "
            "values under the mask would be written); pass data.filled(value), with the "
            "value readers should see there (the image's fill value, say)"
        )


def check_castable(block: Any, dtype: np.dtype, name: str) -> None:
    """Refuse a block whose values cannot be stored as ``dtype`` without changing: floats
    into integers, integers outside the target's range, and integers a float target
    would round (checked by value)."""
    src = np.dtype(block.dtype)
    if src == dtype:
        return
    if src.kind in "biu" and dtype.kind == "f":
        # numpy counts int64 -> float64 as safe, yet it rounds integers beyond 2**53
        magnitude_bits = 1 if src.kind == "b" else src.itemsize * 8 - (src.kind == "i")
        if magnitude_bits > np.finfo(dtype).nmant + 1:
            _check_integers_exact_as(block, src, dtype, name)
        return
    if np.can_cast(src, dtype, "safe"):
        return
    if src.kind == "f" and dtype.kind == "f":
        # a narrower float rounds, as numpy's assignment does; finite values from half a
        # unit in the last place beyond its largest value round to infinities
        finfo = np.finfo(dtype)
        # in the block's own precision: the bound of a float64 target passes a Python float
        overflow = np.ldexp(src.type(1) - src.type(2.0 ** -(finfo.nmant + 2)), finfo.maxexp)
        if not bool(getattr(block, "size", 1)) or (
            bool(block.max() < overflow) and bool(block.min() > -overflow)
        ):
            return  # the common case, without a copy of the block (NaN goes on below)
        magnitude = abs(block)
        beyond = magnitude >= overflow
        if bool(beyond.any()) and not bool((magnitude[beyond] == float("inf")).all()):
            raise WriteError(
                f"{name}: values beyond {float(finfo.max):g} (the largest {dtype}) would be "
                "stored as infinities; scale or clip them first"
            )
        return
    if src.kind in "biu" and dtype.kind in "iu" and bool(getattr(block, "size", 1)):
        info = np.iinfo(dtype)
        low, high = int(block.min()), int(block.max())
        if info.min <= low and high <= info.max:
            return
        raise WriteError(
            f"{name}: values {low}..{high} do not fit the array's dtype {dtype} "
            f"({info.min}..{info.max}); convert them first (e.g. np.clip(block, ...).astype(...))"
        )
    raise WriteError(
        f"{name}: a block of dtype {src} cannot be stored as {dtype} without changing its "
        f"values; convert it first (block.astype({str(dtype)!r}) after rounding or clipping)"
    )
