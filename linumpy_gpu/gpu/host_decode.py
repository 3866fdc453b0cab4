"""zstd chunks decoded on host cores while nvCOMP decodes the rest of their batch.

nvCOMP's zstd decodes each chunk on one thread block, so a batch of 4 MiB chunks takes
30-40 ms however many chunks it holds, and its workspace is about three times the batch's
decoded size. A host core decodes the same chunk in a few milliseconds and needs no device
workspace at all. So each batch gives its last chunks to a pool of host threads, as many
as they can decode in the time the GPU takes for the rest; small reads (one tile) go to
the host entirely, because a single nvCOMP batch would take longer than the whole read.

How many is measured, not assumed: after each batch that both sides worked on, the share
moves towards the count that would have finished with the GPU (host cores also serve the
reads and the thread driving nvCOMP, so the balance depends on the machine and the read).

Each worker thread decodes a unit of chunks into one of its two pinned buffers, copies the
unit to the device on its own stream (after the read's previous GPU work, via an event),
and records an event the caller's stream waits on before placing the chunks.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..engine.codecs import zstd_decode_into

# Host cores left to the fetch threads and the Python thread driving the GPU.
DEFAULT_THREADS = int(os.environ.get("LINUMPY_GPU_HOST_THREADS", max(0, (os.cpu_count() or 2) - 2)))
UNIT_BYTES = 4 << 20  # decoded bytes per unit of work (one copy to the device each)
# Before any batch was timed: nvCOMP's time per batch of large chunks on an H200 and the
# host rate per thread (zstd level 3, ratio 1.55: 0.45-0.6 GB/s per core on its host).
INITIAL_GPU_SECONDS = 0.035
INITIAL_THREAD_RATE = 0.45e9
_SMOOTHING = 0.5
MAX_SHARE = 8192


@dataclass
class HostUnits:
    """A batch's host share in flight; :meth:`HostDecoder.wait` collects it."""

    futures: list[Future]
    first: list[int]  # index of each unit's first chunk
    count: int
    nbytes: int
    submitted: float
    failures: dict[int, str] = field(default_factory=dict)


class _WorkerState(threading.local):
    stream: Any = None
    buffers: list[Any] | None = None
    events: list[Any] | None = None
    turn = 0


class HostDecoder:
    """A pool of host threads decoding zstd frames into device memory, with the rates it
    has measured (shared by every read on this device)."""

    def __init__(self, device_id: int, threads: int):
        self.device_id = device_id
        self.threads = max(0, threads)
        self._pool = (
            ThreadPoolExecutor(self.threads, thread_name_prefix="linumpy-host-zstd")
            if self.threads
            else None
        )
        self._state = _WorkerState()
        self._lock = threading.Lock()
        self._share: dict[int, float] = {}  # chunk bytes -> host chunks per batch
        self.thread_rate = INITIAL_THREAD_RATE  # decoded bytes per second per thread, measured

    def chunks_per_batch(self, nbytes: int) -> int:
        """Chunks of ``nbytes`` the pool decodes in the time of one nvCOMP batch."""
        if not self.threads:
            return 0
        share = self._share.get(nbytes)
        if share is None:  # nothing measured yet for this chunk size
            rate = INITIAL_THREAD_RATE * self.threads
            share = max(self.threads, rate * INITIAL_GPU_SECONDS / max(1, nbytes))
        return max(1, int(share))

    def balance(self, units: HostUnits, host_seconds: float, gpu_seconds: float) -> None:
        """Move the share towards the count that would have taken ``gpu_seconds``."""
        if units.count == 0 or host_seconds <= 0 or gpu_seconds <= 0:
            return
        ratio = min(2.0, max(0.5, gpu_seconds / host_seconds))
        target = units.count * ratio
        with self._lock:
            share = self._share.get(units.nbytes, float(units.count))
            share += _SMOOTHING * (target - share)
            self._share[units.nbytes] = min(MAX_SHARE, max(1.0, share))

    def submit(
        self, frames: Sequence[Any], nbytes: int, dests: np.ndarray, after: Any
    ) -> HostUnits:
        """Decode ``frames`` on the pool; frame i's ``nbytes`` go to device address
        ``dests[i]`` once the GPU work recorded in event ``after`` is done."""
        stride = -(-nbytes // 256) * 256
        per_unit = max(1, UNIT_BYTES // stride)
        firsts = list(range(0, len(frames), per_unit))
        futures = [
            self._pool.submit(
                self._unit, frames[a : a + per_unit], nbytes, stride, dests[a : a + per_unit], after
            )
            for a in firsts
        ]
        return HostUnits(futures, firsts, len(frames), nbytes, time.perf_counter())

    def wait(self, units: HostUnits, stream: Any, gpu_seconds: float = 0.0) -> dict[int, str]:
        """Wait for the units; ``stream`` waits (on the GPU) for their copies. With the time
        the GPU took for the rest of the batch (0: it had none), rebalances the share.
        Returns the failed chunks' reasons by index."""
        decoded, busy, last = 0, 0.0, units.submitted
        for first, future in zip(units.first, units.futures, strict=True):
            failures, event, seconds, nbytes, done = future.result()
            stream.wait_event(event)
            decoded += nbytes
            busy += seconds
            last = max(last, done)
            for j, reason in failures.items():
                units.failures[first + j] = reason
        self.balance(units, last - units.submitted, gpu_seconds)
        if busy > 0 and decoded >= 4 * UNIT_BYTES:
            with self._lock:
                self.thread_rate += _SMOOTHING * (decoded / busy - self.thread_rate)
        return units.failures

    # -- worker side --------------------------------------------------------------------

    def _unit(
        self, frames: Sequence[Any], nbytes: int, stride: int, dests: np.ndarray, after: Any
    ) -> tuple[dict[int, str], Any, float, int, float]:
        import cupy

        st = self._state
        with cupy.cuda.Device(self.device_id):
            if st.stream is None:
                st.stream = cupy.cuda.Stream(non_blocking=True)
                st.buffers, st.events = [None, None], [None, None]
            turn = st.turn
            st.turn ^= 1
            if st.events[turn] is not None:
                st.events[turn].synchronize()  # its last copy to the device is done
            need = len(frames) * stride
            if st.buffers[turn] is None or st.buffers[turn][1].size < need:
                memory = cupy.cuda.alloc_pinned_memory(max(need, UNIT_BYTES))
                st.buffers[turn] = (memory, np.frombuffer(memory, np.uint8, max(need, UNIT_BYTES)))
            host = st.buffers[turn][1]
            t0 = time.perf_counter()
            failures: dict[int, str] = {}
            for j, frame in enumerate(frames):
                reason = zstd_decode_into(frame, host[j * stride : j * stride + nbytes])
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
        return failures, event, seconds, len(frames) * nbytes, time.perf_counter()


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


def host_decoder(device_id: int, threads: int = DEFAULT_THREADS) -> HostDecoder:
    """The process-wide host decoder of a device (one pool, one set of measured rates)."""
    with _decoders_lock:
        key = (device_id, threads)
        if key not in _decoders:
            _decoders[key] = HostDecoder(device_id, threads)
        return _decoders[key]
