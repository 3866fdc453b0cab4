"""Chunks made of compressed streams (Blosc frames, numcodecs LZ4 chunks) decoded on the
GPU: every stream of a batch in one nvCOMP call per inner codec, then every block built
(copied, or unshuffled) by one kernel, straight into its place.

Decode of one batch:
  1. the host reads the chunks' headers and stream tables (a
     :class:`~linumpy_gpu.codecs.layout.StreamLayout`, no device round trip), checking every
     offset and size against its chunk;
  2. the frames go to the device in one copy (per staging arena);
  3. ``lz4_block_check`` walks every LZ4 stream and ``check_zstd_frames`` every zstd stream:
     a chunk with a stream either refuses is not given to nvCOMP;
  4. nvCOMP decodes the remaining streams (LZ4 and zstd batches) into a scratch buffer and
     reports a status and size per stream;
  5. ``blosc_unshuffle`` builds each block from its streams (streams stored as they are are
     read where they lie) into the chunk's output;
  6. chunks refused anywhere (another inner codec, a damaged chunk) are decoded by the CPU
     codec, whose verdict stands: a valid chunk reads correctly, a damaged one fails with
     both reasons.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from linumpy_gpu.codecs.layout import StreamLayout
from linumpy_gpu.core.placement import SLOT_ALIGN
from linumpy_gpu.gpu.kernels import FRAME_STATUS, LZ4_STATUS, check_zstd_frames, kernel
from linumpy_gpu.gpu.nvcomp.lib import lz4_api
from linumpy_gpu.gpu.nvcomp.zstd import (
    DecodedBatch,
    Workspace,
    ZstdBatchCodec,
    device_view,
    round_up,
)

# inner codecs nvCOMP decodes; others (blosclz, zlib, snappy) go to the CPU
GPU_INNER = ("lz4", "zstd")
_THREADS = 128
_UNSHUFFLE_THREADS = 256

# CPU decode of whole frames: frame bytes -> decoded bytes, or the reason it failed
CpuDecode = Callable[[list[bytes]], list[Any]]


def decode_frames(
    codec: ZstdBatchCodec,
    frames: Sequence[Any],
    nbytes: int,
    layout: StreamLayout,
    cpu_decode: CpuDecode,
    staging: Any = None,
    targets: np.ndarray | None = None,
    workspace: Workspace | None = None,
) -> DecodedBatch:
    """Decode ``frames`` of ``nbytes`` each, as ``layout`` describes them, on ``codec``'s
    device and stream.
    ``targets``: per frame a device address to decode into, or 0 for a scratch slot (from
    ``workspace`` where it fits). ``cpu_decode`` decodes the frames the device does not."""
    workspace = workspace or Workspace()
    n = len(frames)
    elsewhere = sorted(layout.elsewhere)
    host_copies = {i: bytes(frames[i]) for i in elsewhere}  # before staging is reused
    comp, offsets, _sizes, release = codec.stage(frames, staging, workspace)
    batch = _output_slots(n, nbytes, targets, workspace, codec)
    batch.owners.append(comp)
    try:
        refused = _decode_streams(codec, layout, comp, offsets, batch, workspace, release)
    finally:
        if release is not None:
            release()
    refused.update(layout.elsewhere)
    if refused:
        for i in refused:
            if i not in host_copies:
                lo = int(offsets[i])
                host_copies[i] = comp[lo : lo + len(frames[i])].get(stream=codec.stream).tobytes()
        order = sorted(refused)
        results = cpu_decode([host_copies[i] for i in order])
        for i, result in zip(order, results, strict=True):
            if isinstance(result, str):
                gpu_reason = refused[i]
                batch.failures[i] = (
                    result if i in layout.elsewhere else f"{gpu_reason}; on the CPU: {result}"
                )
                continue
            raw = np.frombuffer(result, dtype=np.uint8)
            device_view(int(batch.ptrs[i]), nbytes, batch).set(raw, stream=codec.stream)
            batch.cpu_decoded.append(i)
    codec.stream.synchronize()
    return batch


def _output_slots(
    n: int, nbytes: int, targets: np.ndarray | None, workspace: Workspace, codec: ZstdBatchCodec
) -> DecodedBatch:
    ptrs = np.zeros(n, dtype=np.uint64) if targets is None else targets.astype(np.uint64)
    batch = DecodedBatch(ptrs, nbytes)
    need = np.flatnonzero(ptrs == 0)
    if need.size:
        stride = round_up(max(nbytes, 1), SLOT_ALIGN)
        slots = workspace.take(int(need.size) * stride)
        batch.owners.append(slots)
        ptrs[need] = np.uint64(slots.data.ptr) + np.arange(need.size, dtype=np.uint64) * np.uint64(
            stride
        )
    return batch


def _decode_streams(
    codec: ZstdBatchCodec,
    layout: StreamLayout,
    comp: Any,
    offsets: np.ndarray,
    batch: DecodedBatch,
    workspace: Workspace,
    release: Callable[[], None] | None,
) -> dict[int, str]:
    """Check, decode and unshuffle the streams ``layout`` lists; returns the frames refused
    (index -> reason). Buffers taken here on the codec's stream go back to cupy's pool for
    that stream, so they are reused only after the work queued on them."""
    refused: dict[int, str] = {}
    n_streams = layout.start.size
    if n_streams == 0:
        return refused
    base = np.uint64(comp.data.ptr)
    where = offsets[layout.frame].astype(np.uint64) + layout.start.astype(np.uint64)
    coded = np.flatnonzero(~layout.raw)
    names = np.asarray(layout.codec, dtype=object)

    # 3. every coded stream checked before nvCOMP reads it
    verdicts = np.zeros(n_streams, dtype=np.int32)
    checks = []
    for name in GPU_INNER:
        sel = coded[names[coded] == name]
        if sel.size:
            checks.append((sel, _check(codec, name, base, where[sel], layout, sel, workspace)))
    for sel, status_d in checks:
        verdicts[sel] = status_d.get(stream=codec.stream)
    for s in np.flatnonzero(verdicts).tolist():
        frame = int(layout.frame[s])
        if frame not in refused:
            refused[frame] = _check_reason(layout.codec[s], int(verdicts[s]))

    # 4. nvCOMP decodes the coded streams of frames still in
    keep = ~np.isin(layout.frame, list(refused)) if refused else np.ones(n_streams, bool)
    out_align = max(16, SLOT_ALIGN)
    slot = np.zeros(n_streams, dtype=np.uint64)
    todo = coded[keep[coded]]
    padded = ((layout.decoded[todo] + out_align - 1) // out_align) * out_align
    if todo.size:
        slot[todo[1:]] = np.cumsum(padded[:-1]).astype(np.uint64)
    scratch = workspace.take(max(1, int(padded.sum())), codec.stream)
    batch.owners.append(scratch)
    slot[todo] += np.uint64(scratch.data.ptr)
    stream_ptr = np.where(layout.raw, base + where, slot).astype(np.uint64)
    decodes = []
    for name in GPU_INNER:
        sel = todo[names[todo] == name]
        if sel.size:
            decodes.append(
                (sel, _nvcomp(codec, name, base + where[sel], layout, sel, slot[sel], workspace))
            )
    if release is not None:
        release()  # nvCOMP's reads are queued: the fetch stage may refill the arenas
    for sel, (status_d, actual_d) in decodes:
        status_h = status_d.get(stream=codec.stream)
        actual_h = actual_d.get(stream=codec.stream)
        wrong = (status_h != 0) | (actual_h != layout.decoded[sel].astype(np.uint64))
        for k in np.flatnonzero(wrong).tolist():
            frame = int(layout.frame[sel[k]])
            if frame not in refused:
                refused[frame] = (
                    f"nvCOMP {layout.codec[sel[k]]} reported "
                    f"'{codec.api.status_string(int(status_h[k]))}'"
                    if status_h[k]
                    else f"nvCOMP decoded {int(actual_h[k])} bytes of a "
                    f"{int(layout.decoded[sel[k]])}-byte stream"
                )

    # 5. the blocks of frames still in, unshuffled into their chunks
    blocks = np.flatnonzero(~np.isin(layout.block_frame, list(refused)))
    if blocks.size:
        table = np.empty((blocks.size, 6), dtype=np.int64)
        table[:, 0] = layout.block_first[blocks]
        table[:, 1] = layout.block_split[blocks]
        table[:, 2] = (
            batch.ptrs[layout.block_frame[blocks]] + layout.block_offset[blocks].astype(np.uint64)
        ).view(np.int64)
        table[:, 3] = layout.block_size[blocks]
        table[:, 4] = layout.block_typesize[blocks]
        table[:, 5] = layout.block_mode[blocks]
        d_table = codec._upload(table)
        d_streams = codec._upload(stream_ptr)
        with codec.stream:
            kernel("blosc_unshuffle")(
                (int(blocks.size),),
                (_UNSHUFFLE_THREADS,),
                (d_streams, d_table, np.int32(blocks.size)),
            )
    return refused


def _check(
    codec: ZstdBatchCodec,
    name: str,
    base: np.uint64,
    where: np.ndarray,
    layout: StreamLayout,
    sel: np.ndarray,
    workspace: Workspace,
) -> Any:
    """Queue the check of streams ``sel`` (at ``base + where``; zstd's scratch from
    ``workspace``); the verdicts' device array (0: decodable)."""
    cp = codec.cupy
    m = int(sel.size)
    meta = np.empty((3, m), dtype=np.uint64)
    meta[0] = where if name == "zstd" else base + where
    meta[1] = layout.stored[sel]
    meta[2] = layout.decoded[sel]
    d_meta = codec._upload(meta)
    grid = ((m + _THREADS - 1) // _THREADS,)
    with codec.stream:
        status = cp.empty(m, dtype=np.int32)
        if name == "lz4":
            kernel("lz4_block_check")(
                grid, (_THREADS,), (d_meta[0], d_meta[1], d_meta[2], np.int32(m), status)
            )
        else:
            stored = cp.empty(m, dtype=np.uint32)
            check_zstd_frames(
                base,
                d_meta[0],
                d_meta[1],
                d_meta[2],
                status,
                stored,
                workspace.scratch(codec.stream),
            )
    return status


def _check_reason(name: str, status: int) -> str:
    if name == "lz4":
        return LZ4_STATUS.get(status, f"LZ4 check status {status}")
    if status == 1:
        return "zstd stream with a content checksum"
    return f"zstd stream: {FRAME_STATUS.get(status, (f'frame check status {status}',))[0]}"


def _nvcomp(
    codec: ZstdBatchCodec,
    name: str,
    ptrs: np.ndarray,
    layout: StreamLayout,
    sel: np.ndarray,
    out: np.ndarray,
    workspace: Workspace,
) -> tuple[Any, Any]:
    """Queue nvCOMP's decode of streams ``sel`` (at device addresses ``ptrs``) into ``out``;
    the (status, decoded size) device arrays."""
    api = codec.api if name == "zstd" else lz4_api()
    m = int(sel.size)
    align = int(api.decompress_alignments.input)
    if align > 1 and (ptrs % np.uint64(align)).any():
        ptrs = _aligned_copy(codec, ptrs, layout.stored[sel], align, workspace)
    args = np.empty((4, m), dtype=np.uint64)
    args[0] = ptrs
    args[1] = layout.stored[sel]
    args[2] = layout.decoded[sel]
    args[3] = out
    largest = int(layout.decoded[sel].max())
    total = int(layout.decoded[sel].sum())
    temp_bytes = api.decompress_temp_bytes(m, largest, total, codec.stream.ptr)
    temp = workspace.take(max(temp_bytes, 1), codec.stream)
    return codec._decompress(api, args, temp, temp_bytes)


def _aligned_copy(
    codec: ZstdBatchCodec, ptrs: np.ndarray, sizes: np.ndarray, align: int, workspace: Workspace
) -> np.ndarray:
    """Copy streams to addresses nvCOMP accepts (a multiple of ``align``)."""
    padded = ((sizes + align - 1) // align) * align
    starts = np.zeros(sizes.size, dtype=np.uint64)
    starts[1:] = np.cumsum(padded[:-1]).astype(np.uint64)
    buf = workspace.take(max(1, int(padded.sum())), codec.stream)
    new = np.uint64(buf.data.ptr) + starts
    spans = np.stack([ptrs, new, sizes.astype(np.uint64)], axis=1)
    d_spans = codec._upload(np.ascontiguousarray(spans))
    with codec.stream:
        kernel("copy_spans")(
            (int(sizes.size),), (_UNSHUFFLE_THREADS,), (d_spans, np.int32(sizes.size))
        )
    return new
