"""Chunks decoded on host cores into device memory: zstd chunks of small reads (instead of
nvCOMP), and every chunk of a codec nvCOMP does not decode (gzip, zlib, other numcodecs
codecs).

nvCOMP's zstd decodes each chunk on one thread block, so a batch of 4 MiB chunks takes
30-60 ms however few chunks it holds, while a host core decodes such a chunk in about 9 ms.
A read whose chunks the host threads decode in less time than one nvCOMP batch (a tile of
a tile-by-tile pipeline) is therefore decoded on the host entirely; larger reads stay on
nvCOMP whole, since the host cores also serve the reads that feed the GPU. Which side is
faster for a read size is learned from the reads themselves.

Each worker thread decodes a unit of chunks into one of its two host buffers (pinned within
the side budget of :mod:`.pinned`), copies the unit to the device on its own stream
(after the read's previous GPU work, via an event), and records an event the caller's
stream waits on before placing the chunks. Chunks of codecs nvCOMP lacks take the same path
whatever their size, so their decode overlaps the copies to the device and no decoded batch
is held on the host.
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from linumpy_gpu.codecs.zstd import decode_into as zstd_decode_into
from linumpy_gpu.gpu.pinned import GrowingHostBuffer


def default_threads() -> int:
    """One per core. The fetch threads and the thread driving the GPU mostly wait (on the
    page cache, on the disk, on the device), so the pool decodes fastest with every core:
    a gzip level on 16 cores reads about 15% faster than with 14 decode threads."""
    return os.cpu_count() or 1


UNIT_BYTES = 4 << 20  # decoded bytes per unit of work (one copy to the device each)
# The rates assumed until this device's reads have been timed: one thread block decodes a
# chunk at about this rate, so an nvCOMP batch takes about one chunk's time (a 4 MiB
# chunk: 30-40 ms), and a host thread decodes zstd level 3 at about 0.45 GB/s.
NVCOMP_CHUNK_RATE = 120e6
MIN_GPU_SECONDS = 0.002
INITIAL_THREAD_RATE = 0.45e9
# Reads the pool would take longer than this for stay on nvCOMP whatever was measured
# (nvCOMP batches take 30-80 ms): a batch timed while other threads decoded at once (a
# tile pipeline's workers) must not send a whole level to the host, where it decodes at
# about half nvCOMP's speed.
MAX_HOST_READ_SECONDS = 0.1
# A read size one side lost on is sent to that side again every RETIME_EVERY reads while its
# measured time is within RETIME_WITHIN of the winner's: one slow early measurement (a
# worker setting up, the machine busy, nvCOMP's first batches) must not keep a read size on
# the slower side for good.
RETIME_EVERY = 16
RETIME_WITHIN = 1.5
# A read size one side has been timed on fewer than this many times is timed again however
# far behind it is: its first batches carry one-off costs (nvCOMP's first batch in a
# process takes half as long again as later ones).
SETTLED_AFTER = 3
# Wall times have one-sided noise (set-up, other work on the machine): a faster time moves
# a learned time most of the way, a slower one a little.
_SMOOTHING = 0.3
_SMOOTHING_FASTER = 0.7


# decodes a chunk's bytes into ``out`` (uint8, the decoded size): None, or why it cannot
DecodeInto = Callable[[Any, np.ndarray], "str | None"]


@dataclass
class HostUnits:
    """A batch's host share in flight; :meth:`HostDecoder.wait` collects it."""

    futures: list[Future]
    first: list[int]  # index of each unit's first chunk
    count: int
    nbytes: int = 0  # decoded bytes per chunk
    started: float = 0.0  # perf_counter() at submission
    failures: dict[int, str] = field(default_factory=dict)


class DecodeTurn:
    """One batch's decode; ``overlapped`` once another batch decoded on this device at the
    same time (its times then say more about the other reader than about nvCOMP or the
    pool, and are not learned)."""

    __slots__ = ("overlapped",)

    def __init__(self) -> None:
        self.overlapped = False


class _WorkerState(threading.local):
    stream: Any = None
    # set together on a worker's first unit: two host buffers and their copies' events
    buffers: Any = None
    events: Any = None
    turn = 0


class HostDecoder:
    """A pool of host threads decoding chunks into device memory, with the rates it has
    measured on zstd (shared by every read on this device)."""

    def __init__(self, device_id: int, threads: int):
        self.device_id = device_id
        self.threads = max(0, threads)
        self._pool = (
            ThreadPoolExecutor(self.threads, thread_name_prefix="linumpy-host-decode")
            if self.threads
            else None
        )
        self._state = _WorkerState()
        self._lock = threading.Lock()
        self.thread_rate = INITIAL_THREAD_RATE  # decoded bytes per second per thread
        # (chunk bytes, batch size bucket) -> seconds of one nvCOMP batch / of the pool for
        # that many chunks (the pool's: submission to its last copy done); measured
        self.gpu_seconds: dict[tuple[int, int], float] = {}
        self.pool_seconds: dict[tuple[int, int], float] = {}
        self._decoding: set[DecodeTurn] = set()
        self._lost: dict[tuple[int, int], int] = {}  # reads the loser lost since last timed
        self._held: dict[tuple[int, int], int] = {}  # (chunk bytes, chunks) -> share (hold)
        self._timed: dict[tuple[bool, int, int], int] = {}  # (on host, key): times learned

    @contextmanager
    def decoding(self) -> Iterator[DecodeTurn]:
        """Marks a batch's decode; times measured within it are learned only if no other
        batch decoded meanwhile (threads reading tiles at once make each nvCOMP batch look
        several times slower than it is)."""
        turn = DecodeTurn()
        with self._lock:
            if self._decoding:
                turn.overlapped = True
                for other in self._decoding:
                    other.overlapped = True
            self._decoding.add(turn)
        try:
            yield turn
        finally:
            with self._lock:
                self._decoding.discard(turn)

    def host_seconds(self, nbytes: int, n_chunks: int) -> float:
        """How long the pool takes for ``n_chunks`` chunks of ``nbytes``: measured for about
        that many chunks, else from the rate per thread measured so far (each thread decodes
        whole chunks, in units of at most UNIT_BYTES)."""
        if not self.threads:
            return math.inf
        with self._lock:
            measured = self.pool_seconds.get((nbytes, _bucket(n_chunks)))
        if measured is not None:
            return measured
        return self._modelled_seconds(nbytes, n_chunks)

    def _modelled_seconds(self, nbytes: int, n_chunks: int) -> float:
        per_unit = _chunks_per_unit(n_chunks, nbytes, self.threads)
        rounds = _ceil_div(_ceil_div(n_chunks, per_unit), self.threads)
        return rounds * per_unit * nbytes / self.thread_rate

    def batch_seconds(self, nbytes: int, n_chunks: int) -> float:
        """How long one nvCOMP batch of ``n_chunks`` chunks of ``nbytes`` takes: measured
        for batches of about that many chunks, else the one-block-per-chunk estimate kept
        between the times measured for fewer chunks and for more (a batch never gets
        faster by growing)."""
        bucket = _bucket(n_chunks)
        with self._lock:
            known = {b: s for (size, b), s in self.gpu_seconds.items() if size == nbytes}
        if bucket in known:
            return known[bucket]
        estimate = max(MIN_GPU_SECONDS, nbytes / NVCOMP_CHUNK_RATE)
        fewer = [s for b, s in known.items() if b < bucket]
        more = [s for b, s in known.items() if b > bucket]
        if fewer:
            estimate = max(estimate, max(fewer))
        if more:
            estimate = min(estimate, min(more))
        return estimate

    def share_of_read(self, nbytes: int, n_chunks: int) -> int:
        """How many of a read's ``n_chunks`` chunks go to the host: all of them when the
        host finishes them sooner than nvCOMP's batch would, else none; every
        RETIME_EVERY-th read of a size goes to the side that lost, if its measured time is
        close enough to be worth timing again. An answer :meth:`hold` kept for this read
        size is given (once) instead."""
        with self._lock:
            held = self._held.pop((nbytes, n_chunks), None)
        if held is not None:
            return held
        if n_chunks <= 0 or not self.threads:
            return 0
        if self._modelled_seconds(nbytes, n_chunks) > MAX_HOST_READ_SECONDS:
            return 0
        host, gpu = self.host_seconds(nbytes, n_chunks), self.batch_seconds(nbytes, n_chunks)
        host_wins = host < gpu
        winner, loser = (n_chunks, 0) if host_wins else (0, n_chunks)
        key = (nbytes, _bucket(n_chunks))
        with self._lock:
            if key not in (self.gpu_seconds if host_wins else self.pool_seconds):
                return winner
            settled = self._timed.get((not host_wins, *key), 0) >= SETTLED_AFTER
            if settled and max(host, gpu) > RETIME_WITHIN * min(host, gpu):
                return winner
            self._lost[key] = self._lost.get(key, 0) + 1
            if self._lost[key] < RETIME_EVERY:
                return winner
            self._lost[key] = 0
        return loser  # timed again

    def hold(self, nbytes: int, n_chunks: int, share: int) -> None:
        """Keep ``share``, the answer :meth:`share_of_read` just gave for a read before its
        batches were planned, for the read's first batch: a read sent to nvCOMP to be timed
        again is then timed there, not given to the host by a second answer."""
        with self._lock:
            self._held[(nbytes, n_chunks)] = share

    def learn_gpu(
        self, nbytes: int, n_chunks: int, seconds: float, turn: DecodeTurn | None = None
    ) -> None:
        """Record how long an nvCOMP batch of ``n_chunks`` chunks of ``nbytes`` took
        (unless ``turn`` overlapped another batch's decode)."""
        if turn is not None and turn.overlapped:
            return
        key = (nbytes, _bucket(n_chunks))
        old = self.batch_seconds(nbytes, n_chunks)
        with self._lock:
            self.gpu_seconds[key] = _learned(old, seconds)
            self._timed[(False, *key)] = self._timed.get((False, *key), 0) + 1

    def submit(
        self,
        frames: Sequence[Any],
        nbytes: int,
        dests: np.ndarray,
        after: Any,
        decode_into: DecodeInto = zstd_decode_into,
    ) -> HostUnits:
        """Decode ``frames`` on the pool with ``decode_into``; frame i's ``nbytes`` go to
        device address ``dests[i]`` once the GPU work recorded in event ``after`` is done."""
        assert self._pool is not None, "a decoder of 0 threads decodes nothing"
        started = time.perf_counter()
        stride = -(-nbytes // 256) * 256
        per_unit = _chunks_per_unit(len(frames), nbytes, self.threads)
        firsts = list(range(0, len(frames), per_unit))
        futures = [
            self._pool.submit(
                self._unit,
                frames[a : a + per_unit],
                nbytes,
                stride,
                dests[a : a + per_unit],
                after,
                decode_into,
            )
            for a in firsts
        ]
        return HostUnits(futures, firsts, len(frames), nbytes, started)

    def wait(
        self, units: HostUnits, stream: Any, turn: DecodeTurn | None = None, learn: bool = True
    ) -> dict[int, str]:
        """Wait for the units; ``stream`` waits (on the GPU) for their copies. Returns the
        failed chunks' reasons by index. Their times are learned unless ``turn`` overlapped
        another batch's decode, or ``learn`` is False (codecs other than zstd); the pool's
        wall time also not when a worker set itself up for a unit (its stream and pinned
        buffers: not what later reads pay). A timed read
        ends once its copies to the device are done, as an nvCOMP batch's time ends once
        the device has decoded it, so that the two compare."""
        decoded, busy, setting_up, events = 0, 0.0, False, []
        for first, future in zip(units.first, units.futures, strict=True):
            failures, event, seconds, nbytes, fresh = future.result()
            stream.wait_event(event)
            events.append(event)
            decoded += nbytes
            busy += seconds
            setting_up |= fresh
            for j, reason in failures.items():
                units.failures[first + j] = reason
        if not learn or (turn is not None and turn.overlapped):
            return units.failures
        timed = bool(units.nbytes) and not setting_up
        if timed:
            for event in events:
                event.synchronize()
        elapsed = time.perf_counter() - units.started
        old = self.host_seconds(units.nbytes, units.count)
        with self._lock:
            if busy > 0 and decoded >= 4 * UNIT_BYTES:
                self.thread_rate += _SMOOTHING * (decoded / busy - self.thread_rate)
            if timed:
                key = (units.nbytes, _bucket(units.count))
                self.pool_seconds[key] = _learned(old, elapsed)
                self._timed[(True, *key)] = self._timed.get((True, *key), 0) + 1
        return units.failures

    # -- worker side --------------------------------------------------------------------

    def _unit(
        self,
        frames: Sequence[Any],
        nbytes: int,
        stride: int,
        dests: np.ndarray,
        after: Any,
        decode_into: DecodeInto,
    ) -> tuple[dict[int, str], Any, float, int, bool]:
        import cupy

        st = self._state
        fresh = False
        with cupy.cuda.Device(self.device_id):
            if st.stream is None:
                st.stream = cupy.cuda.Stream(non_blocking=True)
                st.buffers, st.events = [GrowingHostBuffer(), GrowingHostBuffer()], [None, None]
                fresh = True
            turn = st.turn
            st.turn ^= 1
            if st.events[turn] is not None:
                st.events[turn].synchronize()  # its last copy to the device is done
            buffer = st.buffers[turn]
            held = buffer.capacity
            host = buffer.get(max(len(frames) * stride, UNIT_BYTES))
            fresh |= buffer.capacity != held
            t0 = time.perf_counter()
            failures: dict[int, str] = {}
            for j, frame in enumerate(frames):
                reason = decode_into(frame, host[j * stride : j * stride + nbytes])
                if reason is not None:
                    failures[j] = reason
            seconds = time.perf_counter() - t0
            st.stream.wait_event(after)
            base = host.ctypes.data
            for start, stop in _runs(dests, stride, failures):
                cupy.cuda.runtime.memcpyAsync(
                    int(dests[start]),
                    base + start * stride,
                    (stop - start - 1) * stride + nbytes,
                    cupy.cuda.runtime.memcpyHostToDevice,
                    st.stream.ptr,
                )
            event = cupy.cuda.Event(disable_timing=True)
            event.record(st.stream)
            st.events[turn] = event
        return failures, event, seconds, len(frames) * nbytes, fresh


def _learned(old: float, seconds: float) -> float:
    return old + (_SMOOTHING_FASTER if seconds < old else _SMOOTHING) * (seconds - old)


def _chunks_per_unit(n_chunks: int, nbytes: int, threads: int) -> int:
    """Chunks per unit of work: at most UNIT_BYTES (a worker's buffer), and spread evenly so
    that no round leaves threads idle (125 chunks of 512 KiB on 14 threads: 25 units of 5,
    not 16 of 8)."""
    threads = max(1, threads)
    most = max(1, UNIT_BYTES // max(1, nbytes))
    rounds = max(1, _ceil_div(n_chunks, threads * most))
    return max(1, _ceil_div(n_chunks, threads * rounds))


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _bucket(n_chunks: int) -> int:
    """Batch sizes within a factor of two of each other share a measured time."""
    return max(1, n_chunks).bit_length()


def _runs(dests: np.ndarray, stride: int, failures: dict[int, str]) -> list[tuple[int, int]]:
    """[start, stop) runs of good chunks whose destinations follow each other at ``stride``
    (one copy each)."""
    runs: list[tuple[int, int]] = []
    start = None
    for j in range(len(dests)):
        if j in failures:
            if start is not None:
                runs.append((start, j))
            start = None
            continue
        if start is not None and int(dests[j]) != int(dests[j - 1]) + stride:
            runs.append((start, j))
            start = None
        if start is None:
            start = j
    if start is not None:
        runs.append((start, len(dests)))
    return runs


_decoders: dict[tuple[int, int], HostDecoder] = {}
_decoders_lock = threading.Lock()


def host_decoder(device_id: int, threads: int) -> HostDecoder:
    """The process-wide host decoder of a device (one pool, one set of measured rates)."""
    with _decoders_lock:
        key = (device_id, threads)
        if key not in _decoders:
            _decoders[key] = HostDecoder(device_id, threads)
        return _decoders[key]
