"""CUDA kernels: zstd frame and LZ4 block validation before nvCOMP sees a byte, XXH64
checksums, Blosc unshuffles and the scatter of decoded chunks into an output.

nvCOMP assumes valid input; on damaged frames it can hang, kill the CUDA context or return
wrong bytes. ``check_zstd_frames`` runs the content check of ``zstd_check.py`` on every
frame before decode: ``zstd_frame_walk`` reads each frame's header and block headers (one
thread a frame), ``zstd_block_check`` decodes every block's sequences and each of its
literal streams without writing a byte (one thread a part, so that no thread decodes more
than one bitstream of a block), ``zstd_frame_join`` joins each frame's blocks (sizes,
offsets reaching back into earlier blocks, repeat offsets).
``zstd_xxh64_verify`` recomputes the frame content checksum of decoded chunks.
``lz4_block_check`` walks every sequence of each raw LZ4 block (one thread a block) with the
rules of LZ4's own safe decoder, so nvCOMP only sees blocks whose every literal and match
stays inside the input and the output and that end exactly at both ends.
``blosc_unshuffle`` builds Blosc blocks from their decoded streams (byte and bit unshuffle).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import Any

from linumpy_gpu.gpu import zstd_check

_TYPES = r"""
typedef unsigned long long u64;
typedef unsigned int u32;
typedef unsigned char u8;
"""

_ZSTD_CHECK = r"""
extern "C" __global__ void zstd_frame_blocks(
    const u8* __restrict__ src, const u64* __restrict__ offsets, const u64* __restrict__ sizes,
    const u64* __restrict__ expected, const int n, u32* __restrict__ counts)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) counts[i] = zc_frame_blocks(src + offsets[i], sizes[i], expected[i]);
}

extern "C" __global__ void zstd_frame_walk(
    const u8* __restrict__ src, const u64* __restrict__ offsets, const u64* __restrict__ sizes,
    const u64* __restrict__ expected, const u64* __restrict__ first_desc, const int n,
    u8* __restrict__ descs, u32* __restrict__ nblocks,
    int* __restrict__ status, u32* __restrict__ stored_checksum)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    status[i] = zc_frame_walk(src + offsets[i], sizes[i], expected[i],
                              (ZcBlockDesc*)(descs + first_desc[i] * ZC_DESC_BYTES),
                              first_desc[i + 1] - first_desc[i], nblocks + i,
                              stored_checksum + i);
}

/* block_start: per frame, the number of blocks to check in the frames before it (frames
   the walk refused count none); n + 1 entries. The first `sequence_workers` threads check
   blocks' sequences, each with its decoding tables in ZC_TABLE_WORDS words of `tables`;
   the others check the blocks' literal streams, which need no tables. */
extern "C" __global__ void zstd_block_check(
    const u8* __restrict__ descs, const u64* __restrict__ first_desc,
    const u64* __restrict__ block_start, const int n, const u64 sequence_workers,
    u8* __restrict__ results, int* __restrict__ literals, u32* __restrict__ tables)
{
    const u64 t = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    const u64 workers = (u64)gridDim.x * blockDim.x;
    const u64 total = block_start[n];
    const int literal = t >= sequence_workers;
    const u64 parts = literal ? (ZC_PARTS - 1) * total : total;
    const u64 stride = literal ? workers - sequence_workers : sequence_workers;
    u32* mine = literal ? tables : tables + t * ZC_TABLE_WORDS;
    for (u64 j = literal ? t - sequence_workers : t; j < parts; j += stride) {
        const u64 block = literal ? j / (ZC_PARTS - 1) : j;
        int lo = 0, hi = n;   /* the frame of the block: block_start[lo] <= block < block_start[hi] */
        while (hi - lo > 1) {
            const int mid = (lo + hi) / 2;
            if (block_start[mid] <= block) lo = mid; else hi = mid;
        }
        const u64 slot = first_desc[lo] + (block - block_start[lo]);
        const int part = literal ? 1 + (int)(j % (ZC_PARTS - 1)) : 0;
        zc_block_apart((const ZcBlockDesc*)(descs + slot * ZC_DESC_BYTES), part, mine,
                       (ZcBlockResult*)(results + slot * ZC_RESULT_BYTES),
                       literals + slot * (ZC_PARTS - 1) + (part > 0 ? part - 1 : 0));
    }
}

extern "C" __global__ void zstd_frame_join(
    const u8* __restrict__ results, const int* __restrict__ literals,
    const u64* __restrict__ first_desc, const u32* __restrict__ nblocks,
    const u64* __restrict__ expected, const int n, int* __restrict__ status)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n || (status[i] != 0 && status[i] != 1)) return;
    const int joined = zc_frame_join(
        (const ZcBlockResult*)(results + first_desc[i] * ZC_RESULT_BYTES),
        literals + first_desc[i] * (ZC_PARTS - 1), nblocks[i], expected[i]);
    if (joined != 0) status[i] = joined;
}
"""

_KERNELS = r"""
__device__ __forceinline__ u32 rd32(const u8* p) {
    return (u32)p[0] | ((u32)p[1] << 8) | ((u32)p[2] << 16) | ((u32)p[3] << 24);
}

#define P1 11400714785074694791ull
#define P2 14029467366897019727ull
#define P3 1609587929392839161ull
#define P4 9650029242287828579ull
#define P5 2870177450012600261ull

__device__ __forceinline__ u64 rotl64(u64 x, int r) { return (x << r) | (x >> (64 - r)); }
__device__ __forceinline__ u64 xround(u64 acc, u64 v) { acc += v * P2; acc = rotl64(acc, 31); return acc * P1; }
__device__ __forceinline__ u64 xmerge(u64 acc, u64 v) { v = xround(0, v); acc ^= v; return acc * P1 + P4; }
__device__ __forceinline__ u64 rd64(const u8* p) {
    u64 v = 0;
    for (int k = 0; k < 8; ++k) v |= (u64)p[k] << (8 * k);
    return v;
}

/* XXH64 of `length` bytes at p, from its four accumulators (read only where length >= 32)
   once the whole 32-byte stripes are consumed: the bytes from `pos` on, then the final mix. */
__device__ __forceinline__ u64 xxh64_finish(const u8* p, u64 pos, const u64 length,
                                            u64 v1, u64 v2, u64 v3, u64 v4) {
    u64 h;
    if (length >= 32) {
        h = rotl64(v1, 1) + rotl64(v2, 7) + rotl64(v3, 12) + rotl64(v4, 18);
        h = xmerge(h, v1); h = xmerge(h, v2); h = xmerge(h, v3); h = xmerge(h, v4);
    } else {
        h = P5;
    }
    h += length;
    for (; pos + 8 <= length; pos += 8) { h ^= xround(0, rd64(p + pos)); h = rotl64(h, 27) * P1 + P4; }
    if (pos + 4 <= length) { h ^= (u64)rd32(p + pos) * P1; h = rotl64(h, 23) * P2 + P3; pos += 4; }
    for (; pos < length; ++pos) { h ^= (u64)p[pos] * P5; h = rotl64(h, 11) * P1; }
    h ^= h >> 33; h *= P2; h ^= h >> 29; h *= P3; h ^= h >> 32;
    return h;
}

/* Four threads per chunk, one per XXH64 accumulator lane; chunk data 8-byte aligned. */
extern "C" __global__ void zstd_xxh64_verify(
    const u64* __restrict__ ptrs, const u64 length,
    const int* __restrict__ status, const u32* __restrict__ stored_checksum, const int n,
    int* __restrict__ mismatch)
{
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    const int chunk = t >> 2;
    const int lane = t & 3;
    const bool active = chunk < n && status[chunk] == 1;
    const u8* p = (const u8*)ptrs[chunk < n ? chunk : 0];
    const u64 stripes = length / 32;
    u64 v = lane == 0 ? P1 + P2 : (lane == 1 ? P2 : (lane == 2 ? 0ull : 0ull - P1));
    if (active) {
        const u64* w = (const u64*)p + lane;
        u64 s = 0;
        for (; s + 8 <= stripes; s += 8) {
            u64 x[8];
            #pragma unroll
            for (int k = 0; k < 8; ++k) x[k] = __ldg(w + 4 * (s + k));
            #pragma unroll
            for (int k = 0; k < 8; ++k) v = xround(v, x[k]);
        }
        for (; s < stripes; ++s) v = xround(v, __ldg(w + 4 * s));
    }
    const int group = (int)(threadIdx.x & 31u) & ~3;   /* first lane of this chunk's four */
    const u64 v1 = __shfl_sync(0xffffffffu, v, group + 0);
    const u64 v2 = __shfl_sync(0xffffffffu, v, group + 1);
    const u64 v3 = __shfl_sync(0xffffffffu, v, group + 2);
    const u64 v4 = __shfl_sync(0xffffffffu, v, group + 3);
    if (!active || lane != 0) return;
    const u64 h = xxh64_finish(p, stripes * 32, length, v1, v2, v3, v4);
    mismatch[chunk] = ((u32)(h & 0xFFFFFFFFull)) != stored_checksum[chunk];
}

/* XXH64 (low 32 bits) of n contiguous chunks, for writing zstd content checksums. */
extern "C" __global__ void xxh64_low32(
    const u8* __restrict__ data, const u64 stride, const u64 length, const int n,
    u32* __restrict__ out)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const u8* p = data + (u64)i * stride;
    u64 pos = 0;
    u64 v1 = P1 + P2, v2 = P2, v3 = 0, v4 = 0ull - P1;
    for (; pos + 32 <= length; pos += 32) {
        v1 = xround(v1, rd64(p + pos)); v2 = xround(v2, rd64(p + pos + 8));
        v3 = xround(v3, rd64(p + pos + 16)); v4 = xround(v4, rd64(p + pos + 24));
    }
    out[i] = (u32)(xxh64_finish(p, pos, length, v1, v2, v3, v4) & 0xFFFFFFFFull);
}

/* Raw LZ4 blocks (no frame): one thread per block, every sequence checked as LZ4's safe
   decoder (LZ4_decompress_safe) checks it, plus an exact decoded size. Stricter than that
   decoder where it is lenient (offset 0), never looser: a block refused here is decoded on
   the CPU, which gives the verdict. */
extern "C" __global__ void lz4_block_check(
    const u64* __restrict__ ptrs, const u64* __restrict__ sizes,
    const u64* __restrict__ expected, const int n, int* __restrict__ status)
{
    const int s = blockIdx.x * blockDim.x + threadIdx.x;
    if (s >= n) return;
    const u8* in = (const u8*)ptrs[s];
    const long long isize = (long long)sizes[s];
    const long long osize = (long long)expected[s];
    long long ip = 0, op = 0;
    int st = 0;
    if (isize <= 0) { status[s] = -1; return; }
    for (;;) {
        if (ip >= isize) { st = -2; break; }
        const u32 token = in[ip++];
        long long lit = token >> 4;
        if (lit == 15) {
            if (ip >= isize - 15) { st = -2; break; }
            u32 b;
            do { b = in[ip++]; lit += b; } while (b == 255 && ip <= isize - 15);
            if (b == 255 || ip > isize - 15) { st = -2; break; }
        }
        if (lit > isize - ip) { st = -2; break; }
        if (lit > osize - op) { st = -3; break; }
        if (op + lit > osize - 12 || ip + lit > isize - 8) {
            /* the last sequence: literals only, ending at the end of input and output */
            if (ip + lit != isize) st = -4;
            else if (op + lit != osize) st = -5;
            break;
        }
        ip += lit; op += lit;
        const u32 offset = (u32)in[ip] | ((u32)in[ip + 1] << 8);
        ip += 2;
        if (offset == 0 || offset > op) { st = -6; break; }
        long long match = token & 15;
        if (match == 15) {
            u32 b;
            do {
                if (ip >= isize - 4) { st = -2; break; }
                b = in[ip++]; match += b;
            } while (b == 255);
            if (st) break;
        }
        match += 4;
        if (match > osize - 5 - op) { st = -7; break; }   /* the last 5 bytes are literals */
        op += match;
    }
    status[s] = st;
}

/* One Blosc block per CUDA block. Block row (int64): first stream, split, destination
   address, size, typesize, mode (0 copy, 1 byte unshuffle, 2 bit unshuffle). Byte plane j
   of the block is stream first+j when split, else stream first at j * (size / typesize);
   bytes past the last whole element are copied as they are. */
extern "C" __global__ void blosc_unshuffle(
    const u64* __restrict__ streams, const long long* __restrict__ blocks, const int n)
{
    if ((int)blockIdx.x >= n) return;
    const long long* B = blocks + 6ll * blockIdx.x;
    const u8* base = (const u8*)streams[B[0]];
    const int split = (int)B[1];
    u8* dst = (u8*)B[2];
    const u32 size = (u32)B[3];
    const u32 ts = (u32)B[4];
    const int mode = (int)B[5];
    const u32 quot = size / ts;
    const u32 body = quot * ts;
    const u32 row8 = quot >> 3;
    for (u32 o = threadIdx.x; o < size; o += blockDim.x) {
        u8 v;
        if (o >= body) {
            v = base[o];
        } else if (mode == 0) {
            const u32 j = o / quot, i = o - j * quot;
            v = split ? ((const u8*)streams[B[0] + j])[i] : base[o];
        } else {
            const u32 i = o / ts, j = o - i * ts;
            const u8* row = split ? (const u8*)streams[B[0] + j] : base + (u64)j * quot;
            if (mode == 1) {
                v = row[i];
            } else {
                const u8* p = row + (i >> 3);
                const u32 sh = i & 7u;
                v = 0;
                for (u32 k = 0; k < 8; ++k) v |= (u8)(((p[(u64)k * row8] >> sh) & 1u) << k);
            }
        }
        dst[o] = v;
    }
}

/* Copy spans: one CUDA block per span (source address, destination address, bytes), in
   8-byte words where both ends are 8-byte aligned (compressed frames on their way to the
   host are), else byte by byte. */
extern "C" __global__ void copy_spans(const u64* __restrict__ spans, const int n)
{
    if ((int)blockIdx.x >= n) return;
    const u8* src = (const u8*)spans[3ll * blockIdx.x];
    u8* dst = (u8*)spans[3ll * blockIdx.x + 1];
    const u64 nbytes = spans[3ll * blockIdx.x + 2];
    u64 head = 0;
    if ((((u64)src | (u64)dst) & 7) == 0) {
        const u64 words = nbytes >> 3;
        const u64* s = (const u64*)src;
        u64* d = (u64*)dst;
        for (u64 w = threadIdx.x; w < words; w += blockDim.x) d[w] = s[w];
        head = words << 3;
    }
    for (u64 o = head + threadIdx.x; o < nbytes; o += blockDim.x) dst[o] = src[o];
}

/* Assemble decoded chunks into the output: one job per chunk (blockIdx.y), N-D strided copy.
   Job row (int64): src address, dst address, shape[6], src strides[6], dst strides[6]
   (strides in units of T; dst strides may be negative for reversed views). A block of
   2^lanes_log2 x (blockDim.x >> lanes_log2) threads copies that many rows at once, one
   unit per lane: a 64^3 uint16 chunk's 128-byte rows are 8 units of 16 bytes, so one
   block of 256 threads copies 32 rows instead of one row on 64 threads. */
#define SCATTER(NAME, T) \
extern "C" __global__ void NAME(const long long* __restrict__ jobs, const int ndim, \
                                const int lanes_log2) { \
    const long long* J = jobs + (long long)blockIdx.y * 20; \
    const T* src = (const T*)J[0]; \
    T* dst = (T*)J[1]; \
    const long long* shape = J + 2; \
    const long long* ss = J + 8; \
    const long long* ds = J + 14; \
    const long long inner = shape[ndim - 1]; \
    const long long si = ss[ndim - 1], di = ds[ndim - 1]; \
    long long rows = 1; \
    for (int k = 0; k < ndim - 1; ++k) rows *= shape[k]; \
    const int lanes = 1 << lanes_log2; \
    const int lane = threadIdx.x & (lanes - 1); \
    const long long rows_per_block = blockDim.x >> lanes_log2; \
    const bool narrow = rows <= 0xFFFFFFFFll; /* 32-bit division: several times cheaper */ \
    for (long long r = blockIdx.x * rows_per_block + (threadIdx.x >> lanes_log2); r < rows; \
         r += gridDim.x * rows_per_block) { \
        long long so = 0, dof = 0; \
        if (narrow) { \
            unsigned int rem = (unsigned int)r; \
            for (int k = ndim - 2; k >= 0; --k) { \
                const unsigned int n = (unsigned int)shape[k]; \
                const unsigned int idx = rem % n; rem /= n; \
                so += (long long)idx * ss[k]; dof += (long long)idx * ds[k]; \
            } \
        } else { \
            long long rem = r; \
            for (int k = ndim - 2; k >= 0; --k) { \
                const long long idx = rem % shape[k]; rem /= shape[k]; \
                so += idx * ss[k]; dof += idx * ds[k]; \
            } \
        } \
        for (long long i = lane; i < inner; i += lanes) \
            dst[dof + i * di] = src[so + i * si]; \
    } \
}
SCATTER(scatter_1, unsigned char)
SCATTER(scatter_2, unsigned short)
SCATTER(scatter_4, unsigned int)
SCATTER(scatter_8, uint2)
SCATTER(scatter_16, uint4)
"""

# status -> (meaning, decodable by the CPU as valid zstd)
FRAME_STATUS = {
    0: ("valid frame", True),
    1: ("valid frame with content checksum", True),
    2: ("skippable frame", True),
    3: ("several concatenated frames", True),
    4: ("more blocks than the device check takes (under 1 KiB each on average)", True),
    -1: ("empty or shorter than a zstd magic number", False),
    -2: ("bad zstd magic number", False),
    -3: ("reserved bit set in the frame header", False),
    -4: ("frame needs a dictionary", False),
    -5: ("frame header declares a content size other than the chunk's", False),
    -6: ("truncated frame", False),
    -7: ("reserved block type", False),
    -8: ("block size larger than the zstd maximum", False),
    -9: ("blocks cannot decode to the chunk's size", False),
    -10: ("trailing bytes after the frame", False),
    -11: ("truncated content checksum", False),
    -12: ("window size larger than 2 GiB", False),
    -13: ("damaged literals section (header, Huffman table or stream)", False),
    -14: ("damaged sequence table description", False),
    -15: ("damaged sequences (a bitstream, literal run or match offset out of bounds)", False),
    -16: ("window larger than 128 MiB in a frame that does not declare its size", False),
}

# status -> meaning, written by lz4_block_check
LZ4_STATUS = {
    -1: "empty LZ4 block",
    -2: "LZ4 block truncated (a length or literal run passes its end)",
    -3: "LZ4 literals run past the block's decoded size",
    -4: "LZ4 block does not end with its last sequence",
    -5: "LZ4 block decodes to another size than its Blosc header declares",
    -6: "LZ4 match offset outside the decoded bytes",
    -7: "LZ4 match runs into the block's last five bytes or past its end",
}


_SOURCE = (
    _TYPES
    + f"#define ZC_TABLE_WORDS {zstd_check.TABLE_WORDS}\n"
    + f"#define ZC_DESC_BYTES {zstd_check.DESC_BYTES}ull\n"
    + f"#define ZC_RESULT_BYTES {zstd_check.RESULT_BYTES}ull\n"
    + zstd_check.SOURCE
    + 'static_assert(sizeof(ZcBlockDesc) <= ZC_DESC_BYTES, "block description");\n'
    + 'static_assert(sizeof(ZcBlockResult) <= ZC_RESULT_BYTES, "block result");\n'
    + _ZSTD_CHECK
    + _KERNELS
)

_CHECK_BLOCK = 32
# A thread checks a literal stream or a block's sequences: the work of one bitstream, done
# one symbol after another. Threads beyond one per part would wait idle.
_LITERAL_STREAMS = 4
# Threads checking sequences when the scratch allows any number: one per block, up to this
_MAX_SEQUENCE_WORKERS = 1 << 16
_TABLE_BYTES = 4 * zstd_check.TABLE_WORDS


def zstd_check_scratch(blocks: int) -> tuple[int, int]:
    """Bytes of device scratch the zstd check of ``blocks`` blocks needs at least (its
    block descriptions, results and one sequence worker's tables) and at most (one
    sequence worker per block)."""
    fixed = blocks * (zstd_check.DESC_BYTES + zstd_check.RESULT_BYTES + 4 * _LITERAL_STREAMS)
    workers = min(max(blocks, 1), _MAX_SEQUENCE_WORKERS)
    return fixed + _TABLE_BYTES, fixed + workers * _TABLE_BYTES


def check_zstd_frames(
    base: Any,
    offsets: Any,
    sizes: Any,
    expected: Any,
    status: Any,
    stored: Any,
    scratch: Callable[[int, int], Any] | None = None,
) -> None:
    """Queue the zstd check on the current stream: frame ``i`` lies at ``base + offsets[i]``
    (device memory), ``sizes[i]`` bytes long, and must decode to ``expected[i]`` bytes
    (device arrays). Writes each frame's ``FRAME_STATUS`` code to ``status[i]`` and its
    stored content checksum (if any) to ``stored[i]``.

    ``scratch(least, most)`` returns a 1-D uint8 device array of between ``least`` and
    ``most`` bytes for the check's descriptions, results and decoding tables (the more, the
    more blocks are checked at once); by default it is allocated. Waits once, for the
    number of blocks in the frames, which sizes the scratch."""
    import cupy
    import numpy as np

    n = int(status.size)
    if n == 0:
        return
    frames_grid = ((n + _CHECK_BLOCK - 1) // _CHECK_BLOCK,)
    counts = cupy.empty(n, dtype=np.uint32)
    kernel("zstd_frame_blocks")(
        frames_grid, (_CHECK_BLOCK,), (base, offsets, sizes, expected, np.int32(n), counts)
    )
    first_desc = np.zeros(n + 1, dtype=np.uint64)
    np.cumsum(counts.get(stream=cupy.cuda.get_current_stream()), out=first_desc[1:])
    blocks = int(first_desc[-1])
    least, most = zstd_check_scratch(blocks)
    buffer = scratch(least, most) if scratch is not None else cupy.empty(most, dtype=np.uint8)
    descs_end = blocks * zstd_check.DESC_BYTES
    results_end = descs_end + blocks * zstd_check.RESULT_BYTES
    tables_start = results_end + blocks * 4 * _LITERAL_STREAMS
    descs = buffer[:descs_end]
    results = buffer[descs_end:results_end]
    literals = buffer[results_end:tables_start].view(np.int32)
    sequence_workers = max(1, min(blocks, (int(buffer.size) - tables_start) // _TABLE_BYTES))
    tables = buffer[tables_start : tables_start + sequence_workers * _TABLE_BYTES]
    d_first = cupy.asarray(first_desc)
    nblocks = cupy.empty(n, dtype=np.uint32)
    kernel("zstd_frame_walk")(
        frames_grid,
        (_CHECK_BLOCK,),
        (base, offsets, sizes, expected, d_first, np.int32(n), descs, nblocks, status, stored),
    )
    if blocks:
        walked = cupy.where((status == 0) | (status == 1), nblocks, 0).astype(np.uint64)
        block_start = cupy.zeros(n + 1, dtype=np.uint64)
        cupy.cumsum(walked, out=block_start[1:])
        # sequence workers fill whole warps of their own
        sequence_threads = -(-sequence_workers // _CHECK_BLOCK) * _CHECK_BLOCK
        threads = sequence_threads + blocks * _LITERAL_STREAMS
        kernel("zstd_block_check")(
            ((threads + _CHECK_BLOCK - 1) // _CHECK_BLOCK,),
            (_CHECK_BLOCK,),
            (
                descs,
                d_first,
                block_start,
                np.int32(n),
                np.uint64(sequence_workers),
                results,
                literals,
                tables,
            ),
        )
    kernel("zstd_frame_join")(
        frames_grid,
        (_CHECK_BLOCK,),
        (results, literals, d_first, nblocks, expected, np.int32(n), status),
    )


@cache
def _module(device_id: int) -> Any:
    import cupy

    with cupy.cuda.Device(device_id):
        return cupy.RawModule(code=_SOURCE, options=("-std=c++17",))


def kernel(name: str) -> Any:
    """The compiled CUDA kernel ``name`` (compiled once per process)."""
    import cupy

    return _module(cupy.cuda.Device().id).get_function(name)
