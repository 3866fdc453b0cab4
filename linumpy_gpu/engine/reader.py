"""The read engine: region -> chunk plan -> fetch bytes -> batched decode -> assemble.

One implementation for every backend. Work proceeds in batches of bounded decoded size;
the bytes of batch k+1 are fetched while batch k is decoded and assembled.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import math
import threading
import time
from collections import OrderedDict
from collections.abc import Hashable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeGuard

import numpy as np

from linumpy_gpu import config
from linumpy_gpu.backends.base import PLACED, Backend
from linumpy_gpu.core.assemble import chunk_array, fill, place
from linumpy_gpu.core.layout import ArrayLayout, layout_of
from linumpy_gpu.core.plan import ChunkPlan, ChunkTask, chunk_plan
from linumpy_gpu.core.selection import Selection, normalize_selection
from linumpy_gpu.engine.batching import Placement, output_geometry, plan_batches
from linumpy_gpu.engine.read_ahead import ReadAhead
from linumpy_gpu.engine.sharding import (
    InnerChunks,
    index_request_args,
    inner_chunks,
    inner_entries,
    parse_index,
)
from linumpy_gpu.errors import (
    ChunkDecodeError,
    CodecError,
    DamagedChunkWarning,
    InvalidArgumentError,
    LinumpyGpuError,
    StoreError,
    warn,
)
from linumpy_gpu.io.files import INCOMPLETE_MARKER
from linumpy_gpu.io.sources import ByteRequest, ByteSource, Runs, merge_ranges, source_for
from linumpy_gpu.io.stores import translate, translated_errors

# Longest run of adjacent inner chunks of a shard read into staging in one request.
STAGED_RUN_BYTES = 8 << 20
# Shards of a batch held open at once (well under the usual limit on open files).
PINNED_SHARDS = 256


@dataclass
class _InnerChunks:
    """Chunks of a batch within their shards: ``keys`` per chunk (for errors); per chunk
    present (``rows``), its shard (into ``shard_keys``), offset and length there; the
    chunks whose shard index is damaged (``damaged``), neither present nor missing."""

    keys: list[str]
    shard_keys: list[str]
    rows: np.ndarray
    shard_of: np.ndarray
    offsets: np.ndarray
    lengths: np.ndarray
    damaged: dict[int, ChunkDecodeError]  # chunk -> why its shard cannot give it


@dataclass
class _Fetched:
    tasks: ChunkPlan
    keys: list[str]
    data: list[memoryview | ChunkDecodeError | None]  # see _fetch_into
    staging: Any = None
    host_staging: Any = None  # the host-decoded chunks' bytes (kept until they are decoded)
    placement: Placement | None = None
    profile: dict[str, float] | None = None  # the read's stage timings


class ChunkedArrayReader:
    """Reads regions of one zarr array into arrays of one backend."""

    def __init__(
        self,
        array: Any,
        backend: Backend,
        *,
        name: str | None = None,
        source: ByteSource | None = None,
        batch_bytes: int | None = None,
        index_cache_size: int = 1024,
    ):
        self.array = array
        self.backend = backend
        self.name = name or str(array.store_path)
        self.layout: ArrayLayout = layout_of(array, self.name)
        self.memory = backend.memory()
        self.settings = config.get()
        self._given_source = source  # small reads handed to another backend use it too
        self.source = (
            source or backend.byte_source(array.store) or source_for(array.store, self.settings)
        )
        prefix = array.store_path.path
        self._prefix = f"{prefix}/" if prefix else ""
        # None: the backend picks per read (the GPU needs many chunks in flight)
        self.batch_bytes = batch_bytes
        # shard key -> (the shard's version when its index was read, the index)
        self._index_cache: OrderedDict[str, tuple[Hashable, np.ndarray | None]] = OrderedDict()
        self._index_cache_size = index_cache_size
        self._read_serial = 0  # versions a source cannot tell are trusted for one read
        self._metadata_key = self._prefix + (
            "zarr.json" if self.layout.zarr_format == 3 else ".zarray"
        )
        self._metadata_version = self._versions([self._metadata_key])[0]
        # where the source tells no versions: the layout as stored, to compare with later
        self._stored = self._stored_layout() if self._metadata_version is None else None
        self._lock = threading.Lock()
        self._small_reader: ChunkedArrayReader | None = None
        self.last_profile: dict[str, float] = {}
        # stored bytes per decoded byte, learned from reads (sizes staging per batch): the
        # last batch's, which predicts the next batch of a read (its neighbours), and the
        # mean of everything read so far, which starts the next read
        self._stored_fraction = 1.0
        self._stored_total = 0
        self._decoded_total = 0

    # -- public ---------------------------------------------------------------------------

    def read(
        self,
        index: Any = (),
        out: Any = None,
        progress: Any = None,
        on_damaged: str = "raise",
    ) -> Any:
        """Read ``index`` (numpy basic indexing) into a new array or into ``out``.

        ``on_damaged``: "raise" (default) raises :class:`ChunkDecodeError` for the first
        damaged chunk once its batch is done; "fill" puts the fill value in damaged chunks'
        place and warns with every damaged key.
        """
        if not isinstance(on_damaged, str) or on_damaged not in ("raise", "fill"):
            raise InvalidArgumentError(f"on_damaged must be 'raise' or 'fill', got {on_damaged!r}")
        layout = self.layout
        sel = normalize_selection(index, layout.shape)
        if out is not None:
            self.backend.check_out(out, sel.shape, layout.dtype)
        small = self._small_read_reader(sel)
        if small is not None:  # which checks the store as this reader would
            return self._read_through(small, sel, out, progress, on_damaged)
        self._read_serial += 1
        self.check_unchanged()

        def attempt(tight: bool) -> Any:
            with translated_errors(self.name, "array"):
                try:
                    return self._read(sel, out, progress, on_damaged, tight)
                except ChunkDecodeError:
                    # an index and its shard from different versions (a writer replaced the
                    # shard between the two, where the store cannot tell versions): once
                    # more, afresh
                    if layout.shard_index is None or on_damaged != "raise":
                        raise
                    self._read_serial += 1
                    self._forget_indexes(list(self._index_cache))
                    return self._read(sel, out, progress, on_damaged, tight)

        whole_level = sel.size == math.prod(layout.shape)
        result = self._within_memory(attempt, sel.size * layout.dtype.itemsize, whole_level)
        # a store replaced while the chunks were read (write_ome_zarr(overwrite=True) in
        # another process) may have given some chunks of each: refused, never mixed
        self.check_unchanged()
        return result

    def _small_read_reader(self, sel: Selection) -> ChunkedArrayReader | None:
        """The reader of the backend that reads ``sel`` faster than this one (where the
        backend names one for a read of its size), else None."""
        layout, fmt = self.layout, self.layout.chunk
        if layout.delegate_reason is not None or fmt is None or sel.size == 0:
            return None
        n_chunks = 1
        for axis, size in zip(sel.axes, layout.chunk_shape, strict=True):
            # with steps of a chunk or more each element lies in a chunk of its own
            spanned = (axis.stop - 1) // size - axis.start // size + 1
            n_chunks *= min(spanned, axis.count)
        backend = self.backend.small_read_backend(fmt, n_chunks, sel.size * layout.dtype.itemsize)
        if backend is None:
            return None
        reader = self._small_reader
        if reader is None or reader.backend is not backend:
            with config.set(self.settings):
                reader = ChunkedArrayReader(
                    self.array,
                    backend,
                    name=self.name,
                    source=self._given_source,
                    batch_bytes=self.batch_bytes,
                    index_cache_size=self._index_cache_size,
                )
            # checked against the store as this reader opened it: one replaced since then
            # is refused, as this reader refuses it, not read as its successor
            reader._metadata_version, reader._stored = self._metadata_version, self._stored
            with self._lock:
                self._small_reader = reader
        return reader

    def _read_through(
        self, reader: ChunkedArrayReader, sel: Selection, out: Any, progress: Any, on_damaged: str
    ) -> Any:
        """``sel`` read by ``reader`` (another backend's), then copied into this backend's
        memory (into ``out`` where given)."""
        host = reader.read(sel, None, progress, on_damaged)
        self.last_profile = {**reader.last_profile, "through": 1.0}
        try:
            result = self.backend.from_any(host)
        except MemoryError as exc:
            if isinstance(exc, LinumpyGpuError):
                raise
            raise self.memory.memory_error(host.nbytes, host.nbytes) from exc
        if out is None:
            return result
        out[...] = result
        return out

    def _within_memory(self, attempt: Any, out_nbytes: int, whole_level: bool) -> Any:
        """``attempt(tight=False)``; where it runs out of memory midway (other work took
        what was free when it started) and the backend has a tighter bound, once more under
        that bound; a typed out-of-memory error otherwise."""
        try:
            return attempt(False)
        except MemoryError as exc:
            if isinstance(exc, LinumpyGpuError):
                raise
            tight = self.memory.scratch_budget(out_nbytes, whole_level, True)
            roomy = self.memory.scratch_budget(out_nbytes, whole_level)
            if tight is None or roomy is None or tight >= roomy:
                raise self.memory.memory_error(out_nbytes, self._batch_bytes(out_nbytes)) from exc
        # outside the handler, so the first attempt's buffers go with its traceback
        try:
            return attempt(True)
        except MemoryError as exc:
            if isinstance(exc, LinumpyGpuError):
                raise
            raise self.memory.memory_error(out_nbytes, self._batch_bytes(out_nbytes)) from exc

    def _read(
        self, sel: Selection, out: Any, progress: Any, on_damaged: str, tight: bool = False
    ) -> Any:
        layout = self.layout
        if out is not None:
            work, result = sel.writable_full_view(out), out
        else:
            out_nbytes = sel.size * layout.dtype.itemsize
            self.memory.reserve_for_read(out_nbytes, self._batch_bytes(out_nbytes))
            work = self.backend.empty(sel.full_shape, layout.dtype)
            result = sel.result_view(work)
        if sel.size == 0:
            return result
        if layout.delegate_reason is not None:
            self._read_delegated(sel, work, on_damaged)
            return result
        t_start = time.perf_counter()
        profile = _new_profile()
        plan = chunk_plan(sel, layout.shape, layout.chunk_shape)
        geometry = None
        if self.memory.borrows_output:
            fmt = layout.chunk
            plain = (
                fmt is not None
                and fmt.order == "C"
                and fmt.transpose is None
                and not fmt.needs_byteswap
                and fmt.stored_dtype.itemsize == layout.dtype.itemsize
            )
            geometry = output_geometry(plan, work, layout.chunk_shape, layout.dtype.itemsize, plain)
        out_nbytes = sel.size * layout.dtype.itemsize
        whole_level = sel.size == math.prod(layout.shape)
        batches = self._batches(plan, geometry, out_nbytes, whole_level, tight)
        profile["plan"] = time.perf_counter() - t_start
        if progress is not None:
            progress.reset(total=len(plan))
        damaged, n_batches = self._run_batches(
            batches, plan, _OneOutput(work), profile, progress, on_damaged
        )
        self.backend.finish()
        profile["total"] = time.perf_counter() - t_start
        profile["batches"] = n_batches
        profile["chunks"] = len(plan)
        self.last_profile = profile
        _warn_damaged(self.name, damaged)
        return result

    def read_regions(self, regions: Sequence[Any], progress: Any = None) -> list[Any]:
        """Read several regions at once: every chunk they touch is fetched and decoded once,
        in shared batches (tile pipelines: many small regions keep the GPU busy together
        where one at a time would not), then placed into each region's result.
        ``progress``: a tqdm-like bar, advanced per chunk decoded (per region where the
        array is read through zarr-python)."""
        layout = self.layout
        sels = [normalize_selection(r, layout.shape) for r in regions]
        if layout.delegate_reason is not None or not sels:
            if progress is not None:
                progress.reset(total=len(sels))
            results = []
            for s in sels:
                results.append(self.read(s))
                if progress is not None:
                    progress.update(1)
            return results
        self._read_serial += 1
        self.check_unchanged()

        def attempt(tight: bool) -> list[Any]:
            with translated_errors(self.name, "array"):
                return self._read_regions(sels, progress, tight)

        out_nbytes = sum(s.size for s in sels) * layout.dtype.itemsize
        whole_level = any(s.size == math.prod(layout.shape) for s in sels)
        # every region's output is made before any is read: all of them must fit
        self.memory.reserve_for_read(out_nbytes, self._batch_bytes(out_nbytes))
        result: list[Any] = self._within_memory(attempt, out_nbytes, whole_level)
        self.check_unchanged()  # as for read(): never a mix of a store and its replacement
        return result

    def check_unchanged(self) -> None:
        """Refuse to read or write through metadata that is no longer the array's: the
        store was replaced (``write_ome_zarr(..., overwrite=True)``) since it was opened.
        Where the source cannot tell versions (object stores, HTTP), the array's metadata
        as stored now is compared with what it was (one read of it): chunks of another
        dtype or layout would be read as this one's, or written for the wrong one, and a
        removed array would read as fill values."""
        if self._metadata_version is None:
            stored = self._stored_layout()
            if stored is None:
                raise StoreError(
                    f"'{self.name}' was removed since it was opened (its metadata is gone); "
                    "open the store again if it exists"
                )
            if stored != self._stored:
                raise StoreError(
                    f"'{self.name}' was replaced, or is being replaced, since it was opened "
                    "(its metadata changed); open the store again"
                )
            return
        now = self._versions([self._metadata_key])[0]
        if now is None:
            raise StoreError(
                f"'{self.name}' was removed or replaced since it was opened (its metadata "
                "is gone); open the store again if it exists"
            )
        if now != self._metadata_version:
            raise StoreError(
                f"'{self.name}' was replaced since it was opened (its metadata changed); "
                "open the store again"
            )

    def _stored_layout(self) -> str | None:
        """The array's metadata document as stored now, without its attributes (which may
        change without the data changing) except a write's in-progress mark (a replacement
        marks each array before it deletes its chunks), as comparable text; None where it
        is gone. One small read (two at once for zarr v2, whose attributes lie apart),
        parsed by hand: zarr's own parsing would cost a small read more than the read."""
        import asyncio

        from zarr.core.buffer import default_buffer_prototype
        from zarr.core.sync import sync

        store, prototype = self.array.store, default_buffer_prototype()
        keys = [self._metadata_key]
        if self.layout.zarr_format == 2:
            keys.append(self._prefix + ".zattrs")

        async def get_all() -> list[Any]:
            return list(await asyncio.gather(*(store.get(k, prototype) for k in keys)))

        with translated_errors(self.name):
            raws = sync(get_all())
        if raws[0] is None:
            return None
        try:
            documents = [json.loads(raw.to_bytes()) if raw is not None else {} for raw in raws]
        except ValueError:
            return ""  # not the JSON it was: something else stands there now
        document = documents[0]
        if isinstance(document, dict):
            attributes = document.pop("attributes", None) if len(keys) == 1 else documents[1]
            if isinstance(attributes, dict) and INCOMPLETE_MARKER in attributes:
                document[INCOMPLETE_MARKER] = attributes[INCOMPLETE_MARKER]
        return json.dumps(document, sort_keys=True)

    def _versions(self, keys: Sequence[str]) -> list[Hashable | None]:
        versions = getattr(self.source, "versions", None)
        return list(versions(keys)) if versions is not None else [None] * len(keys)

    def _read_regions(self, sels: list[Selection], progress: Any, tight: bool = False) -> list[Any]:
        layout = self.layout
        works = [self.backend.empty(s.full_shape, layout.dtype) for s in sels]
        targets = _SharedChunks()
        unique = ChunkPlan.concatenate(
            [
                targets.add(work, chunk_plan(sel, layout.shape, layout.chunk_shape))
                for sel, work in zip(sels, works, strict=True)
            ],
            len(layout.shape),
        )
        profile = _new_profile()
        out_nbytes = sum(s.size for s in sels) * layout.dtype.itemsize
        whole_level = any(s.size == math.prod(layout.shape) for s in sels)
        batches = self._batches(unique, None, out_nbytes, whole_level, tight)
        if progress is not None:
            progress.reset(total=len(unique))
        _, profile["batches"] = self._run_batches(
            batches, unique, targets, profile, progress, "raise"
        )
        self.backend.finish()
        profile["chunks"] = len(unique)
        self.last_profile = profile
        return [sel.result_view(work) for sel, work in zip(sels, works, strict=True)]

    def _run_batches(
        self,
        batches: Iterator[tuple[ChunkPlan, Placement | None]],
        plan: ChunkPlan,
        targets: _Targets,
        profile: dict[str, float],
        progress: Any,
        on_damaged: str,
    ) -> tuple[list[ChunkDecodeError], int]:
        """Fetch, decode and place every batch of ``plan`` (``batches`` slices it in order);
        batch k+1 is fetched while batch k decodes, and on slow storage the OS is told which
        bytes come after it (:mod:`.read_ahead`). ``targets`` says which outputs each chunk
        of a batch feeds.
        Returns the damaged chunks (with ``on_damaged="fill"``) and the number of batches."""
        damaged: list[ChunkDecodeError] = []
        n_batches = 0
        n_tasks = len(plan)
        ahead = ReadAhead.for_source(
            self.source,
            n_tasks,
            lambda start, stop: self._advised_requests(plan, start, stop),
            self._stored_per_chunk,
        )
        fetching_to = 0

        def fetch(batch: tuple[ChunkPlan, Placement | None]) -> _Fetched:
            nonlocal fetching_to
            fetching_to += len(batch[0])
            if ahead is not None:
                t0 = time.perf_counter()
                ahead.advance(fetching_to)
                profile["read_ahead"] = profile.get("read_ahead", 0.0) + time.perf_counter() - t0
            return self._fetch(*batch, profile)

        def run(fetched: _Fetched) -> None:
            nonlocal n_batches
            n_batches += 1
            damaged.extend(self._decode_and_place(fetched, targets, on_damaged))
            if progress is not None:
                progress.update(len(fetched.tasks))

        first = next(batches, None)
        if first is None:
            return damaged, 0
        if len(first[0]) == n_tasks:  # one batch: nothing to overlap
            run(self._fetch(*first, profile))
            return damaged, n_batches
        with ThreadPoolExecutor(1, thread_name_prefix="linumpy-prefetch") as prefetch:
            pending: Future | None = prefetch.submit(fetch, first)
            try:
                while pending is not None:
                    t0 = time.perf_counter()
                    fetched = pending.result()
                    profile["wait_fetch"] += time.perf_counter() - t0
                    pending = None
                    nxt = next(batches, None)  # sized with what this batch taught
                    if nxt is not None:
                        pending = prefetch.submit(fetch, nxt)
                    run(fetched)
            finally:
                if pending is not None:  # a failed read still gives its staging back
                    with contextlib.suppress(Exception):
                        left = pending.result()
                        self.memory.release_staging(left.staging)
                        self.memory.release_staging(left.host_staging)
        return damaged, n_batches

    # -- stages ---------------------------------------------------------------------------

    def _batch_bytes(self, read_nbytes: int) -> int:
        if self.batch_bytes is not None:
            return max(1, self.batch_bytes)
        return self.memory.batch_bytes(read_nbytes)

    def _batches(
        self,
        tasks: ChunkPlan,
        geometry: Any,
        out_nbytes: int,
        whole_level: bool,
        tight: bool = False,
    ) -> Iterator[tuple[ChunkPlan, Placement | None]]:
        fmt = self.layout.chunk
        assert fmt is not None, "only arrays the engine decodes are read in batches"
        per_chunk = fmt.nbytes
        if self._decoded_total:  # a read's first batch, often its largest
            self._stored_fraction = self._clamped(self._stored_total / self._decoded_total)
        by_decoded = max(1, self._batch_bytes(len(tasks) * per_chunk) // max(1, per_chunk))
        staging = self.memory.staging_batch_bytes()
        host = 0  # chunks per batch decoded on host cores, asked again for every batch

        def max_chunks() -> int:
            # plan_batches asks this first for each batch, then scratch_bytes: the plan and
            # the placement of one batch agree on its host share
            nonlocal host
            host = self.memory.host_chunks(fmt, len(tasks)) if fmt is not None else 0
            if staging is None:
                return by_decoded
            return max(1, min(by_decoded + host, int(staging // self._stored_per_chunk())))

        def scratch_pieces(n: int, n_direct: int) -> tuple[int, ...]:
            return self.memory.scratch_pieces(fmt, n, n_direct, self._stored_fraction, min(n, host))

        budget = self.memory.scratch_budget(out_nbytes, whole_level, tight)
        if budget is not None:
            # the read's own buffer is shared by its batches (separate buffers of varying
            # size per batch fragment the memory pool): as large as the budget, or as the
            # largest batch needs on its own if that is less
            largest = min(max_chunks(), len(tasks))
            budget = max(0, budget - self.memory.table_bytes(largest))
            budget = min(budget, sum(scratch_pieces(largest, 0)) * 5 // 4)
        spare = None
        movable = self.memory.movable_slots(fmt) if fmt is not None else None
        for first, stop, placement in plan_batches(
            len(tasks), max_chunks, scratch_pieces, geometry, budget, movable
        ):
            if placement is None:
                yield tasks[first:stop], None
                continue
            placement.host = min(stop - first, host)
            if placement.wants_spare:
                if spare is None:
                    # planned to want the read's own buffer only where a budget exists
                    spare = self.backend.empty((max(1, budget or 0),), np.dtype(np.uint8))
                placement.spare = spare
            yield tasks[first:stop], placement

    def _fetch(
        self,
        tasks: ChunkPlan,
        placement: Placement | None = None,
        profile: dict[str, float] | None = None,
    ) -> _Fetched:
        t0 = time.perf_counter()
        fetched = self._fetch_staged(tasks, placement.host if placement is not None else 0)
        fetched.placement = placement
        fetched.profile = profile
        self._learn_ratio(fetched)
        if profile is not None:
            profile["fetch"] += time.perf_counter() - t0
        return fetched

    def _learn_ratio(self, fetched: _Fetched) -> None:
        sizes = [len(d) for d in fetched.data if _stored(d)]
        if sizes and self.layout.chunk is not None:
            decoded = len(sizes) * max(1, self.layout.chunk.nbytes)
            self._stored_fraction = self._clamped(sum(sizes) / decoded)
            self._stored_total += sum(sizes)
            self._decoded_total += decoded

    def _stored_per_chunk(self) -> float:
        """Stored bytes a chunk is expected to take in staging: what reads taught, with a
        margin for chunks that compress less and for each read's aligned start."""
        fmt = self.layout.chunk
        return (fmt.nbytes if fmt else 1) * self._stored_fraction * 1.1 + 512

    def _expected_stored_bytes(self, n_chunks: int) -> int:
        return int(max(0, n_chunks) * self._stored_per_chunk())

    @staticmethod
    def _clamped(fraction: float) -> float:
        return min(1.05, max(0.01, fraction))

    def _fetch_staged(self, tasks: ChunkPlan, host: int = 0) -> _Fetched:
        """Fetch a batch; its last ``host`` chunks (decoded on host cores) are staged apart,
        since the device's share goes back to the ring as soon as it is uploaded."""
        split = len(tasks) - host
        staging = self.memory.acquire_staging(self._expected_stored_bytes(split))
        host_staging = self.memory.acquire_staging() if host else None
        try:
            keys, data = self._fetch_into(tasks[:split], getattr(staging, "reserve", None))
            if host:
                host_keys, host_data = self._fetch_into(
                    tasks[split:], getattr(host_staging, "reserve", None)
                )
                keys, data = keys + host_keys, data + host_data
            return _Fetched(tasks, keys, data, staging, host_staging)
        except BaseException:
            self.memory.release_staging(staging)
            self.memory.release_staging(host_staging)
            raise

    def _fetch_into(
        self, tasks: ChunkPlan, allocate: Any
    ) -> tuple[list[str], list[memoryview | ChunkDecodeError | None]]:
        """Per chunk of ``tasks``, its key and its stored bytes: None where it is missing
        (the fill value), a ChunkDecodeError where its shard says it cannot be read."""
        layout = self.layout
        if not len(tasks):
            return [], []
        if layout.shard_index is None:
            chunk_keys = [self._prefix + layout.storage_key(c) for c in tasks.coord_tuples()]
            hint = int(layout.chunk.nbytes * self._stored_fraction) if layout.chunk else None
            fetched = self.source.fetch([ByteRequest(k) for k in chunk_keys], allocate, hint)
            return chunk_keys, list(fetched)
        chunks = inner_chunks(tasks.coords, layout.shard_index)  # narrowed above
        n_shards = len(chunks.shards)
        keys: list[str] = [""] * len(tasks)
        data: list[memoryview | ChunkDecodeError | None] = [None] * len(tasks)
        # shards are held open while their index and their chunks are read, so both come
        # from one version of the file even while a writer replaces it; a few at a time
        for first in range(0, n_shards, PINNED_SHARDS):
            if n_shards <= PINNED_SHARDS:
                rows = np.arange(len(tasks))
                group = chunks
            else:
                in_group = (chunks.shard_of >= first) & (chunks.shard_of < first + PINNED_SHARDS)
                rows = np.flatnonzero(in_group)
                # the shards are sorted: those of this group are the next PINNED_SHARDS
                group = InnerChunks(
                    chunks.shards[first : first + PINNED_SHARDS],
                    chunks.shard_of[rows] - first,
                    chunks.local[rows],
                )
            shard_keys = self._shard_keys(group.shards)
            with self._pinned(shard_keys) as pins:
                inner = self._inner_chunks(group, shard_keys, pins)
                blobs, runs = self._fetch_runs(inner, allocate, pins)
            for i, key in zip(rows.tolist(), inner.keys, strict=True):
                keys[i] = key
            for chunk, error in inner.damaged.items():
                data[int(rows[chunk])] = error
            starts = (inner.offsets - runs.start[runs.of]).tolist()
            for row, run, start, length in zip(
                inner.rows.tolist(), runs.of.tolist(), starts, inner.lengths.tolist(), strict=True
            ):
                blob = blobs[run]
                if blob is None or start + length > len(blob):
                    data[int(rows[row])] = ChunkDecodeError(
                        self.name, inner.keys[row], "shard is shorter than its index says"
                    )
                    continue
                data[int(rows[row])] = blob[start : start + length]
            if n_shards <= PINNED_SHARDS:
                break
        return keys, data

    def _pinned(self, keys: Sequence[str]) -> Any:
        """The source's open handles of ``keys`` for the block (none where it has none)."""
        pinned = getattr(self.source, "pinned", None)
        return pinned(keys) if pinned is not None else contextlib.nullcontext({})

    def _fetch_runs(
        self, inner: _InnerChunks, allocate: Any, pins: dict[str, Any]
    ) -> tuple[list[Any], Runs]:
        """The stored bytes of the chunks of ``inner``, in runs of adjacent inner chunks."""
        layout = self.layout
        shard_keys, rows = inner.shard_keys, inner.rows
        offsets, lengths, shard_of = inner.offsets, inner.lengths, inner.shard_of
        if allocate is None:
            runs = merge_ranges(shard_of, offsets, lengths)
        elif self.memory.stages_unaligned(layout.chunk):
            # adjacent inner chunks in one read each (fewer, larger reads: a cold disk
            # serves them faster); the chunks then start anywhere in staging
            runs = merge_ranges(shard_of, offsets, lengths, 0, STAGED_RUN_BYTES)
        else:  # each inner chunk to its own aligned staging slot, ready for the device
            runs = Runs(np.arange(len(rows)), shard_of, offsets, offsets + lengths)
        merged = [
            ByteRequest(shard_keys[s], a, b - a, fd=_fd_of(pins, shard_keys[s]))
            for s, a, b in zip(
                runs.key.tolist(), runs.start.tolist(), runs.stop.tolist(), strict=True
            )
        ]
        hint = int((runs.stop - runs.start).sum()) // max(1, len(merged))
        return self.source.fetch(merged, allocate, hint), runs

    def _shard_keys(self, shards: np.ndarray) -> list[str]:
        """The store keys of the shards at grid coordinates ``shards`` (n, ndim)."""
        return [self._prefix + self.layout.storage_key(tuple(c)) for c in shards.tolist()]

    def _inner_chunks(
        self, chunks: InnerChunks, shard_keys: list[str], pins: dict[str, Any] | None
    ) -> _InnerChunks:
        """Where each of ``chunks`` lies in its shard (``shard_keys``: the shards' keys; the
        shard indexes read through ``pins``, the shards' open handles, and cached while a
        shard is unchanged; without pins, the cached indexes as they are: for hints only)."""
        fmt = self.layout.shard_index
        assert fmt is not None, "only sharded arrays have shard indexes"
        indexes = self._shard_indexes(shard_keys, pins)
        parsed = [indexes[k][1] for k in shard_keys]
        entries, present = inner_entries(
            [i if isinstance(i, np.ndarray) else None for i in parsed], chunks, fmt
        )
        keys = [
            f"{shard_keys[s]} (inner chunk {tuple(local)})"
            for s, local in zip(chunks.shard_of.tolist(), chunks.local.tolist(), strict=True)
        ]
        damaged: dict[int, ChunkDecodeError] = {}
        for s, index in enumerate(parsed):
            if isinstance(index, ChunkDecodeError):
                for row in np.flatnonzero(chunks.shard_of == s).tolist():
                    damaged[row] = ChunkDecodeError(self.name, keys[row], index.reason)
        # a damaged index may point anywhere: past 2**62 no file reaches, and int64 holds it
        for row in np.flatnonzero(present & (entries >= np.uint64(1 << 62)).any(axis=1)).tolist():
            damaged[row] = ChunkDecodeError(self.name, keys[row], "shard index entry out of range")
        if damaged:
            present[list(damaged)] = False
        rows = np.flatnonzero(present)
        return _InnerChunks(
            keys,
            shard_keys,
            rows,
            chunks.shard_of[rows],
            entries[rows, 0].astype(np.int64),
            entries[rows, 1].astype(np.int64),
            damaged,
        )

    def _advised_requests(self, plan: ChunkPlan, start: int, stop: int) -> list[ByteRequest]:
        """The stored bytes of chunks ``[start, stop)`` of ``plan``, as few requests as
        possible: whole chunk files, or a shard's inner chunks merged into runs."""
        tasks = plan[start:stop]
        if self.layout.shard_index is None:
            return [
                ByteRequest(self._prefix + self.layout.storage_key(c)) for c in tasks.coord_tuples()
            ]
        fmt = self.layout.shard_index
        chunks = inner_chunks(tasks.coords, fmt)
        inner = self._inner_chunks(chunks, self._shard_keys(chunks.shards), None)
        runs = merge_ranges(inner.shard_of, inner.offsets, inner.lengths)
        return [
            ByteRequest(inner.shard_keys[k], a, b - a)
            for k, a, b in zip(
                runs.key.tolist(), runs.start.tolist(), runs.stop.tolist(), strict=True
            )
        ]

    def _forget_indexes(self, keys: Sequence[str]) -> None:
        with self._lock:
            for k in keys:
                self._index_cache.pop(k, None)

    def _shard_indexes(
        self, shard_keys: Sequence[str], pins: dict[str, Any] | None
    ) -> dict[str, tuple[Hashable, np.ndarray | ChunkDecodeError | None]]:
        """Per shard, (its version, its index: None where the shard is missing, a
        ChunkDecodeError where its index is damaged). With ``pins`` (the shards held open), the
        version is the open file's, and a cached index is used only for that version; a
        source that cannot hold files open versions nothing, and its indexes are trusted
        for one read."""
        fmt = self.layout.shard_index
        assert fmt is not None, "only sharded arrays have shard indexes"
        holds_files = hasattr(self.source, "pinned")
        found: dict[str, tuple[Hashable, np.ndarray | ChunkDecodeError | None]] = {}
        tokens: dict[str, Hashable] = {}
        for k in shard_keys:
            if pins is None:
                tokens[k] = None  # hints: any cached version
            elif holds_files:
                pin = pins.get(k)
                if pin is None:
                    found[k] = (None, None)  # no such shard: every chunk is the fill value
                    continue
                tokens[k] = pin.version
            else:
                tokens[k] = ("read", self._read_serial)
        with self._lock:
            for k, token in tokens.items():
                entry = self._index_cache.get(k)
                if entry is not None and (token is None or entry[0] == token):
                    self._index_cache.move_to_end(k)
                    found[k] = entry
        missing = [k for k in tokens if k not in found]
        if missing:
            args = index_request_args(fmt)
            requests = [ByteRequest(k, fd=_fd_of(pins, k), **args) for k in missing]
            blobs = self.source.fetch(requests)
            for k, blob in zip(missing, blobs, strict=True):
                try:
                    found[k] = (tokens[k], parse_index(blob, fmt))
                except CodecError as exc:
                    found[k] = (tokens[k], ChunkDecodeError(self.name, k, str(exc)))
            with self._lock:
                for k in missing:
                    version, index = found[k]
                    if not isinstance(index, ChunkDecodeError):
                        self._index_cache[k] = (version, index)
                while len(self._index_cache) > self._index_cache_size:
                    self._index_cache.popitem(last=False)
        return found

    def _decode_and_place(
        self, fetched: _Fetched, targets: _Targets, on_damaged: str
    ) -> list[ChunkDecodeError]:
        """Decode a fetched batch and place it in the outputs ``targets`` gives for each
        chunk (one for a plain read, several when :meth:`read_regions` shares chunks
        between regions)."""
        layout = self.layout
        fmt = layout.chunk
        assert fmt is not None, "only arrays the engine decodes are read in batches"
        present = [i for i, d in enumerate(fetched.data) if _stored(d)]
        profile = fetched.profile if fetched.profile is not None else _new_profile()
        t0 = time.perf_counter()
        try:
            placement = fetched.placement
            if placement is not None and len(present) != len(fetched.data):
                host_from = len(fetched.data) - placement.host
                placement = Placement(
                    placement.buffer,
                    [placement.direct[i] for i in present],
                    placement.scratch,
                    placement.spare,
                    sum(i >= host_from for i in present),
                    placement.wants_spare,
                    placement.own,
                )
            if placement is not None:
                profile["host_chunks"] = profile.get("host_chunks", 0) + placement.host

            def sink(k: int, raw: Any) -> None:
                chunk = chunk_array(raw, fmt, layout.dtype)
                for work, task in targets.tasks(fetched.tasks, present[k]):
                    place(work, task.out_region, chunk, task.chunk_region)

            decoded = self.backend.decode(
                [(fetched.keys[i], data) for i in present if _stored(data := fetched.data[i])],
                fmt,
                self.name,
                staging=fetched.staging,
                placement=placement,
                sink=sink,
            )
        finally:
            self.memory.release_staging(fetched.staging)
            self.memory.release_staging(fetched.host_staging)
        damaged = [d for d in fetched.data if isinstance(d, ChunkDecodeError)]
        for i, d in enumerate(fetched.data):
            if isinstance(d, ChunkDecodeError):
                for work, task in targets.tasks(fetched.tasks, i):
                    fill(work, task.out_region, layout.fill_value)
        rows, raws = [], []
        for i, raw in zip(present, decoded, strict=True):
            if raw is PLACED:
                continue
            if isinstance(raw, ChunkDecodeError):
                damaged.append(raw)
                for work, task in targets.tasks(fetched.tasks, i):
                    fill(work, task.out_region, layout.fill_value)
                continue
            rows.append(i)
            raws.append(raw)
        t1 = time.perf_counter()
        profile["decode"] += t1 - t0
        if rows:
            for work, tasks, chunk_raws in targets.groups(fetched.tasks, rows, raws):
                self.backend.place_all(work, tasks, chunk_raws, fmt, layout.dtype)
        profile["place"] += time.perf_counter() - t1
        for i, d in enumerate(fetched.data):
            if d is None:
                for work, task in targets.tasks(fetched.tasks, i):
                    fill(work, task.out_region, layout.fill_value)
        if damaged and on_damaged == "raise":
            self.backend.finish()
            first = damaged[0]
            if len(damaged) > 1:
                others = ", ".join(e.key for e in damaged[1:10])
                first.add_note(f"{len(damaged) - 1} more damaged chunk(s) in this batch: {others}")
            raise first
        return damaged

    def _read_delegated(self, sel: Selection, work: Any, on_damaged: str) -> None:
        """zarr-python reads the selection; where it fails on a chunk (not on the store),
        the chunks are read one by one to name the damaged ones, as the engine does."""
        region = tuple(slice(a.start, a.stop, a.step) for a in sel.axes)
        direct = isinstance(work, np.ndarray) and work.dtype == self.array.dtype
        try:
            if direct:
                # straight into the output: no second copy of the result in host memory
                from zarr.core.buffer import default_buffer_prototype

                into = default_buffer_prototype().nd_buffer.from_numpy_array(work)
                self.array.get_basic_selection(region, out=into)
                return
            host = np.asarray(self.array[region])
        except Exception as exc:
            if _store_failed(exc, self.name):
                raise  # the store failed, not a chunk
            self._read_delegated_by_chunk(sel, work, on_damaged)
            return
        work[...] = self.backend.from_any(host.astype(self.layout.dtype, copy=False))

    def _read_delegated_by_chunk(self, sel: Selection, work: Any, on_damaged: str) -> None:
        layout = self.layout
        plan = chunk_plan(sel, layout.shape, layout.chunk_shape)
        damaged = []
        for k in range(len(plan)):
            task = plan.task(k)
            origin = [c * n for c, n in zip(task.coords, layout.chunk_shape, strict=True)]
            region = tuple(
                slice(o + r.start, o + r.stop, r.step)
                for o, r in zip(origin, task.chunk_region, strict=True)
            )
            try:
                part = np.asarray(self.array[region]).astype(layout.dtype, copy=False)
            except Exception as exc:
                if _store_failed(exc, self.name):
                    raise
                key = self._delegated_key(task.coords)
                error = ChunkDecodeError(self.name, key, str(exc) or type(exc).__name__)
                if on_damaged == "raise":
                    raise error from exc
                damaged.append(error)
                fill(work, task.out_region, layout.fill_value)
                continue
            work[task.out_region] = self.backend.from_any(part)
        _warn_damaged(self.name, damaged)

    def _delegated_key(self, coords: tuple[int, ...]) -> str:
        """The store key of chunk ``coords`` (the shard's, with the inner chunk's place)."""
        layout = self.layout
        if layout.shard_shape is None:
            return layout.storage_key(coords)
        per = [s // c for s, c in zip(layout.shard_shape, layout.chunk_shape, strict=True)]
        shard = tuple(c // p for c, p in zip(coords, per, strict=True))
        local = tuple(c % p for c, p in zip(coords, per, strict=True))
        return f"{layout.storage_key(shard)} (inner chunk {local})"


def _stored(data: Any) -> TypeGuard[memoryview]:
    """Whether a fetched chunk is stored bytes (not missing, not refused by its shard)."""
    return data is not None and not isinstance(data, ChunkDecodeError)


def _store_failed(exc: Exception, name: str) -> bool:
    """Whether ``exc``, met while zarr-python read chunks, is the store failing rather than
    a chunk's bytes. Python's gzip and bz2 report damaged data as OSError too (BadGzipFile;
    a bare OSError without an errno): those are the chunk's."""
    if isinstance(exc, gzip.BadGzipFile) or (type(exc) is OSError and exc.errno is None):
        return False
    return isinstance(exc, OSError | MemoryError) or translate(exc, name) is not None


def _warn_damaged(name: str, damaged: Sequence[ChunkDecodeError]) -> None:
    """With ``on_damaged="fill"``: one warning naming the damaged chunks of a read."""
    if not damaged:
        return
    keys = ", ".join(e.key for e in damaged[:10])
    more = f" and {len(damaged) - 10} more" if len(damaged) > 10 else ""
    warn(
        f"{name}: {len(damaged)} damaged chunk(s) replaced by the fill value: "
        f"{keys}{more}; first: {damaged[0].reason}",
        DamagedChunkWarning,
    )


class _Targets:
    """Which outputs the chunks of a batch (rows of its plan) feed."""

    def tasks(self, batch: ChunkPlan, i: int) -> list[tuple[Any, ChunkTask]]:
        """The (output, task) pairs that chunk ``i`` of ``batch`` fills."""
        raise NotImplementedError

    def groups(
        self, batch: ChunkPlan, rows: list[int], raws: list[Any]
    ) -> list[tuple[Any, ChunkPlan, list[Any]]]:
        """Decoded chunks ``raws`` (rows ``rows`` of ``batch``) as (output, the plan of
        where they land in it, their decoded bytes), one entry per output."""
        raise NotImplementedError


class _OneOutput(_Targets):
    """A plain read: each chunk fills its own place in one output."""

    def __init__(self, work: Any):
        self.work = work

    def tasks(self, batch: ChunkPlan, i: int) -> list[tuple[Any, ChunkTask]]:
        return [(self.work, batch.task(i))]

    def groups(
        self, batch: ChunkPlan, rows: list[int], raws: list[Any]
    ) -> list[tuple[Any, ChunkPlan, list[Any]]]:
        return [(self.work, batch[np.asarray(rows, dtype=np.intp)], raws)]


class _SharedChunks(_Targets):
    """Regions read together (:meth:`ChunkedArrayReader.read_regions`): a chunk feeds every
    region it touches, each its own output."""

    def __init__(self) -> None:
        self._feeds: dict[tuple[int, ...], list[tuple[Any, ChunkPlan, int]]] = {}

    def add(self, work: Any, plan: ChunkPlan) -> ChunkPlan:
        """Record that ``plan``'s chunks fill ``work``; returns those not seen before."""
        new = []
        for row, coords in enumerate(plan.coord_tuples()):
            feeds = self._feeds.get(coords)
            if feeds is None:
                feeds = self._feeds[coords] = []
                new.append(row)
            feeds.append((work, plan, row))
        return plan[np.asarray(new, dtype=np.intp)]

    def tasks(self, batch: ChunkPlan, i: int) -> list[tuple[Any, ChunkTask]]:
        return [(work, plan.task(row)) for work, plan, row in self._feeds[batch.coords_of(i)]]

    def groups(
        self, batch: ChunkPlan, rows: list[int], raws: list[Any]
    ) -> list[tuple[Any, ChunkPlan, list[Any]]]:
        by_output: dict[int, tuple[Any, ChunkPlan, list[int], list[Any]]] = {}
        for i, raw in zip(rows, raws, strict=True):
            for work, plan, row in self._feeds[batch.coords_of(i)]:
                entry = by_output.setdefault(id(work), (work, plan, [], []))
                entry[2].append(row)
                entry[3].append(raw)
        return [
            (work, plan[np.asarray(plan_rows, dtype=np.intp)], chunk_raws)
            for work, plan, plan_rows, chunk_raws in by_output.values()
        ]


def _new_profile() -> dict[str, float]:
    return {"plan": 0.0, "fetch": 0.0, "wait_fetch": 0.0, "decode": 0.0, "place": 0.0}


def _fd_of(pins: dict[str, Any] | None, key: str) -> int | None:
    pin = None if pins is None else pins.get(key)
    return None if pin is None else pin.fd
