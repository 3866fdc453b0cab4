"""Telling slow storage, a window ahead, which stored bytes a read will fetch next.

A read fetches batch by batch, and each batch's reads drain before the next batch's start,
so a disk sees bursts of requests from a few files at a time, with gaps between them. The
OS can do better when it knows the bytes in advance: ``posix_fadvise(WILLNEED)`` on the
ranges of the chunks after the batch being fetched lets it stream them into the page cache
while the batch is read, and the next batch then finds them there.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from linumpy_gpu.io.sources import ByteRequest

# Hints go out in steps of at least this fraction of the window: one per batch at most
# where batches are large, not one per few chunks where they are small.
STEP_FRACTION = 4


class ReadAhead:
    """Keeps ``window`` stored bytes of a read's plan advised beyond the batch being
    fetched, while ``source.reads_ahead()`` says the storage wants it.

    ``requests_for(start, stop)`` gives the byte requests of the plan's chunks
    ``[start, stop)``; ``stored_per_chunk()`` the stored bytes a chunk is expected to take;
    ``window``: the stored bytes to keep advised (the source's ``read_ahead_bytes``).
    Used from one thread (the read's fetch thread).
    """

    def __init__(
        self,
        source: Any,
        n_chunks: int,
        requests_for: Callable[[int, int], Sequence[ByteRequest]],
        stored_per_chunk: Callable[[], float],
        window: int | None = None,
    ):
        self.source = source
        self.n_chunks = n_chunks
        self.requests_for = requests_for
        self.stored_per_chunk = stored_per_chunk
        self.window = getattr(source, "read_ahead_bytes", 0) if window is None else window
        self.advised_to = 0  # chunks of the plan before this are advised or fetched
        self.hints = 0

    @classmethod
    def for_source(cls, source: Any, n_chunks: int, *args: Any, **kwargs: Any) -> ReadAhead | None:
        """A read-ahead for a source that can take hints; None for others (zarr stores)."""
        if not hasattr(source, "reads_ahead") or not hasattr(source, "will_need"):
            return None
        return cls(source, n_chunks, *args, **kwargs)

    def advance(self, fetching_to: int) -> None:
        """The batch ending before chunk ``fetching_to`` is about to be fetched: advise the
        chunks after it, up to the window."""
        if self.window <= 0 or not self.source.reads_ahead():
            return
        per_chunk = max(1.0, float(self.stored_per_chunk()))
        ahead = max(1, int(self.window // per_chunk))
        start = max(self.advised_to, fetching_to)
        stop = min(self.n_chunks, fetching_to + ahead)
        if stop <= start or (stop < self.n_chunks and (stop - start) * STEP_FRACTION < ahead):
            return
        requests = self.requests_for(start, stop)
        self.advised_to = stop
        if requests:
            self.source.will_need(requests)
            self.hints += 1
