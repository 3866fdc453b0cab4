"""The content check of a zstd frame, as C source shared by a CUDA kernel and a host test.

nvCOMP decodes zstd without bounds checks: a damaged entropy-coded section can make it hang
or kill the CUDA context. ``zc_frame`` therefore walks every block of a frame the way a
decoder would, without writing a byte (RFC 8878):

- the literals section: its header, the Huffman tree description (weights read directly or
  through their FSE table, and proven to form a complete prefix code), the jump table, and
  every Huffman stream decoded symbol by symbol (only code lengths matter, so the decoder
  keeps where each code length's range ends, in registers) until it is consumed exactly;
- the sequences section: its header, the three FSE table descriptions (predefined, RLE,
  compressed or repeated) built into decoding tables, and every sequence decoded with its
  repeat offsets;
- every literal run inside the block's literals, every match offset inside the bytes the
  frame has decoded so far, every block inside the maximum block size, and the frame's
  blocks adding up to the chunk's size exactly.

A frame passes only if every bitstream is consumed exactly, as libzstd requires. The source
compiles as CUDA (``LINUMPY_DEVICE`` unset) and as host C++ (the includer defines
``LINUMPY_DEVICE`` and ``LINUMPY_CONSTANT`` first), so a CPU test can hold it against
libzstd. ``zc_frame`` checks a frame block after block; ``zc_frame_blocks``,
``zc_frame_walk``, ``zc_block_apart`` and ``zc_frame_join`` check the same frame block by
block, each block apart, as a GPU wants it.

``kernels.check_zstd_frames`` runs it before every nvCOMP zstd decode. A GPU thread runs
one bitstream after another, so the check's time is that of the longest bitstream it
decodes: the block-parallel form gives each block's sequences and each of its four literal
streams a thread of their own (``zc_block_apart``'s parts).
"""

from __future__ import annotations

# The size of one block's description and of one block's result (structs of the source
# below, padded to these sizes).
DESC_BYTES = 128
RESULT_BYTES = 128

# Words of table space one frame's check needs: the literal length, match length and offset
# decoding tables, kept across blocks for the "repeat" mode.
TABLE_WORDS = 512 + 512 + 256

SOURCE = r"""
#ifndef LINUMPY_DEVICE
#define LINUMPY_DEVICE __device__ __forceinline__
/* device memory rather than __constant__: threads of a warp check different blocks and look
   up different entries, which the constant cache would serve one after another */
#define LINUMPY_CONSTANT __device__ const
#define ZC_HIGHBIT(v) (31 - __clz((int)(v)))
#define ZC_LOAD32(a) (*(const u32*)(a))
#define ZC_UNROLL _Pragma("unroll")
#else
#define ZC_UNROLL
#define ZC_HIGHBIT(v) (31 - __builtin_clz((unsigned)(v)))
static inline u32 ZC_LOAD32(const u8* a) { u32 v; __builtin_memcpy(&v, a, 4); return v; }
#endif

typedef long long i64;
typedef unsigned short u16;

#define ZC_BLOCK_MAX (128u * 1024u)
/* The largest window libzstd decodes in a frame that does not declare its content size. */
#define ZC_WINDOW_MAX_UNSIZED (1ull << 27)
/* The most blocks the device check describes for a frame of `want` decoded bytes: blocks
   averaging at least 1 KiB, and a few short ones. Each block costs device scratch, so a
   frame of many empty blocks (a few bytes each) would otherwise claim scratch out of all
   proportion to its chunk; such frames are decoded on the CPU instead. */
#define ZC_BLOCKS_MAX(want) ((want) / 1024u + 16u)
#define ZC_LITERALS_BAD (-13)
#define ZC_TABLES_BAD (-14)
#define ZC_SEQUENCES_BAD (-15)

LINUMPY_CONSTANT u32 ZC_LL_BASE[36] = {
    0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 18, 20, 22, 24, 28, 32, 40,
    48, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536};
LINUMPY_CONSTANT u8 ZC_LL_BITS[36] = {
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 3, 3,
    4, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
LINUMPY_CONSTANT u32 ZC_ML_BASE[53] = {
    3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26,
    27, 28, 29, 30, 31, 32, 33, 34, 35, 37, 39, 41, 43, 47, 51, 59, 67, 83, 99, 131, 259, 515,
    1027, 2051, 4099, 8195, 16387, 32771, 65539};
LINUMPY_CONSTANT u8 ZC_ML_BITS[53] = {
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 3, 3, 4, 4, 5, 7, 8, 9,
    10, 11, 12, 13, 14, 15, 16};
LINUMPY_CONSTANT short ZC_LL_DEFAULT[36] = {
    4, 3, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2,
    2, 3, 2, 1, 1, 1, 1, 1, -1, -1, -1, -1};
LINUMPY_CONSTANT short ZC_ML_DEFAULT[53] = {
    1, 4, 3, 2, 2, 2, 2, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, -1, -1,
    -1, -1, -1, -1, -1};
LINUMPY_CONSTANT short ZC_OF_DEFAULT[29] = {
    1, 1, 1, 1, 1, 1, 2, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    -1, -1, -1, -1, -1};

/* Bits [lo, lo + n) of a little-endian byte string, n <= 32; bits below 0 read as zero
   (a backward stream's reader may look past its start, never consume past it). Reads
   whole aligned words: an aligned word that holds a byte of an allocation lies inside it. */
LINUMPY_DEVICE u32 zc_bits(const u8* p, i64 lo, u32 n) {
    u32 below = 0;   /* zero bits below the start */
    if (lo < 0) {
        if ((u64)(-lo) >= n) return 0;
        below = (u32)(-lo);
        n -= below;
        lo = 0;
    }
    if (n == 0) return 0;
    const u8* a = p + (lo >> 3);
    const u8* aligned = (const u8*)((unsigned long long)a & ~3ull);
    const u32 shift = (u32)(a - aligned) * 8 + (u32)(lo & 7);
    u64 v = ZC_LOAD32(aligned);
    if (shift + n > 32) v |= (u64)ZC_LOAD32(aligned + 4) << 32;
    return (u32)((v >> shift) & ((1ull << n) - 1)) << below;
}

/* Bits [lo, lo + n) of a little-endian byte string, lo >= 0, n <= 57. */
LINUMPY_DEVICE u64 zc_bits64(const u8* p, i64 lo, u32 n) {
    const u8* a = p + (lo >> 3);
    const u8* aligned = (const u8*)((unsigned long long)a & ~3ull);
    const u32 shift = (u32)(a - aligned) * 8 + (u32)(lo & 7);
    u64 v = ZC_LOAD32(aligned);
    if (shift + n > 32) v |= (u64)ZC_LOAD32(aligned + 4) << 32;
    v >>= shift;
    if (shift + n > 64) v |= (u64)ZC_LOAD32(aligned + 8) << (64 - shift);
    return v & ((1ull << n) - 1);
}

/* A backward bitstream: `bits` bits left below the end marker, the top `avail` of them
   held in `window`. */
struct ZcBack { const u8* p; i64 bits; u64 window; u32 avail; };

LINUMPY_DEVICE int zc_back_init(ZcBack* b, const u8* p, u64 size) {
    if (size == 0 || p[size - 1] == 0) return 0;
    b->p = p;
    b->bits = (i64)(size - 1) * 8 + ZC_HIGHBIT(p[size - 1]);
    b->avail = 0;
    b->window = 0;
    return 1;
}

LINUMPY_DEVICE void zc_refill(ZcBack* b) {
    const u32 k = b->bits < 57 ? (u32)b->bits : 57u;
    b->window = k ? zc_bits64(b->p, b->bits - k, k) : 0;
    b->avail = k;
}

/* Consume n bits (n <= 32); 0 when fewer than n are left. */
LINUMPY_DEVICE int zc_read(ZcBack* b, u32 n, u32* v) {
    if (n > b->avail) {
        zc_refill(b);
        if (n > b->avail) return 0;
    }
    b->avail -= n;
    b->bits -= n;
    *v = (u32)((b->window >> b->avail) & ((1ull << n) - 1));
    return 1;
}

/* Consume n bits, reading zeros past the start (the FSE weight decoder stops on that). */
LINUMPY_DEVICE u32 zc_read_fill(ZcBack* b, u32 n) {
    b->bits -= n;
    return zc_bits(b->p, b->bits, n);
}

/* An FSE table description (FSE_readNCount): fills norm[0..*nsym), returns bytes used or
   0 on error. */
LINUMPY_DEVICE u64 zc_read_counts(const u8* p, u64 avail, u32 max_log, u32 max_sym,
                                  short* norm, u32* nsym, u32* log) {
    if (avail == 0) return 0;
    /* bits past `avail` read as zero here; the byte count is checked at the end */
    const i64 limit = (i64)avail * 8;
    i64 pos = 0;
    #define ZC_PEEK(n) (pos + (i64)(n) <= limit ? zc_bits(p, pos, (n)) \
        : (pos >= limit ? 0u : zc_bits(p, pos, (u32)(limit - pos))))
    const u32 al = (ZC_PEEK(4) & 0xF) + 5;
    pos += 4;
    if (al > max_log) return 0;
    *log = al;
    int remaining = (1 << al) + 1;
    int threshold = 1 << al;
    u32 nb = al + 1;
    u32 sym = 0;
    int prev0 = 0;
    while (remaining > 1 && sym <= max_sym) {
        if (prev0) {
            u32 n0 = sym;
            for (;;) {
                const u32 r = ZC_PEEK(2) & 3u;
                pos += 2;
                if (pos > limit) return 0;
                n0 += r;
                if (r != 3) break;
            }
            if (n0 > max_sym) return 0;
            while (sym < n0) norm[sym++] = 0;
        }
        const int mx = (2 * threshold - 1) - remaining;
        const u32 v = ZC_PEEK(nb);
        int count;
        if ((int)(v & (u32)(threshold - 1)) < mx) {
            count = (int)(v & (u32)(threshold - 1));
            pos += nb - 1;
        } else {
            count = (int)(v & (u32)(2 * threshold - 1));
            if (count >= threshold) count -= mx;
            pos += nb;
        }
        count -= 1;
        remaining -= count < 0 ? -count : count;
        norm[sym++] = (short)count;
        prev0 = count == 0;
        if (remaining < threshold) {
            if (remaining <= 1) break;
            nb = (u32)ZC_HIGHBIT(remaining) + 1;
            threshold = 1 << (nb - 1);
        }
        if (pos > limit) return 0;
    }
    #undef ZC_PEEK
    if (remaining != 1 || pos > limit) return 0;
    *nsym = sym;
    return (u64)((pos + 7) >> 3);
}

/* FSE decoding table (FSE_buildDTable): entry = symbol | nbBits << 8 | newState << 16. */
LINUMPY_DEVICE int zc_build_table(const short* norm, u32 nsym, u32 log, u32* table) {
    const u32 size = 1u << log;
    u32 high = size - 1;
    u16 next[64];   /* alphabets have at most 53 symbols */
    for (u32 s = 0; s < nsym; ++s) {
        if (norm[s] == -1) {
            table[high--] = s;
            next[s] = 1;
        } else {
            next[s] = (u16)(norm[s] < 0 ? 0 : norm[s]);
        }
    }
    const u32 step = (size >> 1) + (size >> 3) + 3;
    const u32 mask = size - 1;
    u32 position = 0;
    for (u32 s = 0; s < nsym; ++s) {
        for (int i = 0; i < norm[s]; ++i) {
            table[position] = s;
            do { position = (position + step) & mask; } while (position > high);
        }
    }
    if (position != 0) return 0;
    for (u32 u = 0; u < size; ++u) {
        const u32 s = table[u] & 0xFFu;
        const u32 state = next[s]++;
        const u32 nbits = log - (u32)ZC_HIGHBIT(state);
        table[u] = s | (nbits << 8) | (((state << nbits) - size) << 16);
    }
    return 1;
}

/* Huffman code lengths by the next `log` bits of a stream: the values of weight w come
   after those of every lower weight, each symbol of weight w taking 2^(w-1) of them, and
   their codes are log + 1 - w bits long. So a value's code length is `log` less the number
   of weight ranges that end at or below it: `ends[w - 1]` is where weight w ends (unused
   entries never reached), which keeps the decoder in registers rather than a table. */
#define ZC_HUFFMAN_ENDS 10
struct ZcHuffman { u32 log; u32 ends[ZC_HUFFMAN_ENDS]; int ready; };

LINUMPY_DEVICE void zc_count_weight(u32 w, u32* ranks, u32* total, u32* count) {
    ranks[w] += 1;
    *total += (1u << w) >> 1;
    *count += 1;
}

/* A Huffman tree description; returns bytes used or 0 on error. */
LINUMPY_DEVICE u64 zc_read_huffman(const u8* p, u64 avail, ZcHuffman* h) {
    if (avail == 0) return 0;
    /* only how many symbols carry each weight matters: weights are counted as read */
    u32 ranks[13] = {0};
    u32 count = 0, total = 0;
    u64 used;
    const u32 header = p[0];
    if (header >= 128) {
        const u32 weights = header - 127;
        used = 1 + (weights + 1) / 2;
        if (used > avail) return 0;
        for (u32 i = 0; i < weights; ++i) {
            const u8 b = p[1 + i / 2];
            const u32 w = (i & 1) ? (b & 15) : (b >> 4);
            if (w > 12) return 0;
            zc_count_weight(w, ranks, &total, &count);
        }
    } else {
        used = 1 + header;
        if (header == 0 || used > avail) return 0;
        short norm[13];   /* weights go up to 12 */
        u32 nsym = 0, log = 0;
        const u64 head = zc_read_counts(p + 1, header, 6, 12, norm, &nsym, &log);
        if (head == 0 || head >= header) return 0;
        u32 table[64];
        if (!zc_build_table(norm, nsym, log, table)) return 0;
        ZcBack b;
        if (!zc_back_init(&b, p + 1 + head, header - head)) return 0;
        u32 s1 = zc_read_fill(&b, log), s2 = zc_read_fill(&b, log);
        for (;;) {   /* two interleaved states; symbols of the table are weights <= 12 */
            if (count > 253) return 0;
            u32 e = table[s1];
            zc_count_weight(e & 0xFF, ranks, &total, &count);
            s1 = (e >> 16) + zc_read_fill(&b, (e >> 8) & 0xFF);
            if (b.bits < 0) { zc_count_weight(table[s2] & 0xFF, ranks, &total, &count); break; }
            if (count > 253) return 0;
            e = table[s2];
            zc_count_weight(e & 0xFF, ranks, &total, &count);
            s2 = (e >> 16) + zc_read_fill(&b, (e >> 8) & 0xFF);
            if (b.bits < 0) { zc_count_weight(table[s1] & 0xFF, ranks, &total, &count); break; }
        }
    }
    if (total == 0) return 0;
    const u32 log = (u32)ZC_HIGHBIT(total) + 1;
    if (log > 11) return 0;
    const u32 rest = (1u << log) - total;
    if (rest == 0 || (rest & (rest - 1)) != 0) return 0;
    ranks[ZC_HIGHBIT(rest) + 1] += 1;
    if (ranks[1] < 2 || (ranks[1] & 1)) return 0;
    u32 end = 0;
    for (u32 w = 1; w <= ZC_HUFFMAN_ENDS; ++w) {
        end += ranks[w] << (w - 1);
        h->ends[w - 1] = w < log ? end : 0xFFFFu;
    }
    h->log = log;
    h->ready = 1;
    return used;
}

/* Consume one Huffman code; 0 when it runs past the stream's start. */
LINUMPY_DEVICE int zc_huffman_step(ZcBack* b, const ZcHuffman* h) {
    const u32 log = h->log;
    if (b->avail < log) zc_refill(b);
    /* past the stream's start the code reads as zeros */
    const u64 mask = (1ull << log) - 1;
    const u32 v = b->avail >= log ? (u32)((b->window >> (b->avail - log)) & mask)
                                  : (u32)((b->window << (log - b->avail)) & mask);
    u32 nbits = log;
    ZC_UNROLL
    for (int k = 0; k < ZC_HUFFMAN_ENDS; ++k) nbits -= v >= h->ends[k];
    if (nbits > b->avail) return 0;
    b->avail -= nbits;
    b->bits -= nbits;
    return 1;
}

/* Decode `symbols` Huffman symbols from one stream, which must be consumed exactly. */
LINUMPY_DEVICE int zc_huffman_1(const u8* p, u64 size, u64 symbols, const ZcHuffman* shared) {
    const ZcHuffman local = *shared;
    const ZcHuffman* h = &local;
    ZcBack b;
    if (!zc_back_init(&b, p, size)) return 0;
    for (u64 k = 0; k < symbols; ++k) {
        if (!zc_huffman_step(&b, h)) return 0;
    }
    return b.bits == 0;
}

/* The four streams of a literals section side by side (independent work for the core to
   overlap); the first three decode `seg` symbols each, the fourth `last` <= seg. */
LINUMPY_DEVICE int zc_huffman_4(const u8* p, const u64* sizes, u64 seg, u64 last,
                                const ZcHuffman* shared) {
    const ZcHuffman local = *shared;   /* a copy the compiler may keep in registers */
    const ZcHuffman* h = &local;
    ZcBack b0, b1, b2, b3;
    if (!zc_back_init(&b0, p, sizes[0]) || !zc_back_init(&b1, p + sizes[0], sizes[1])
        || !zc_back_init(&b2, p + sizes[0] + sizes[1], sizes[2])
        || !zc_back_init(&b3, p + sizes[0] + sizes[1] + sizes[2], sizes[3])) return 0;
    for (u64 k = 0; k < seg; ++k) {
        const int ok = zc_huffman_step(&b0, h) & zc_huffman_step(&b1, h)
                     & zc_huffman_step(&b2, h) & (k >= last || zc_huffman_step(&b3, h));
        if (!ok) return 0;
    }
    return b0.bits == 0 && b1.bits == 0 && b2.bits == 0 && b3.bits == 0;
}

struct ZcTable { u32* entries; u32 log; int ready; };

/* Where the tables in effect before a block were described, for a block that repeats them
   and is checked apart from the blocks before it. Modes: 0 none, 1 predefined, 2 RLE,
   3 FSE-compressed. */
struct ZcRefs {
    const u8* huffman; u64 huffman_avail;
    const u8* table[3]; u64 table_avail[3]; u32 table_mode[3];   /* LL, OF, ML */
};

/* A repeat offset: the offset `value` (source < 0), or the block's initial repeat offset
   `source` minus `value`. */
struct ZcRep { u64 value; int source; };

/* What a block leaves for its frame to check once the blocks before it are known. */
struct alignas(128) ZcBlockResult {   /* RESULT_BYTES */
    i64 decoded;        /* the block's decoded size, or a status < 0 */
    i64 history;        /* bytes before the block its new offsets reach back past */
    u64 max_delta[3];   /* initial repeat offset j was used less up to this */
    i64 min_room[3];    /* ... at block positions (plus that delta) down to this */
    ZcRep rep[3];       /* the repeat offsets at the block's end */
};

#define ZC_NO_ROOM 0x7FFFFFFFFFFFFFFFll

struct ZcBlockState {
    ZcTable ll, of, ml;
    ZcHuffman huffman;
    u64 block_max;
};

/* One of the three tables of a sequences section; returns bytes used, or -1 on error. */
LINUMPY_DEVICE i64 zc_sequence_table(u32 mode, const u8* p, u64 avail, ZcTable* t,
                                     const short* defaults, u32 ndefault, u32 default_log,
                                     u32 max_log, u32 max_sym) {
    short norm[64];
    u32 nsym = 0, log = 0;
    i64 used = 0;
    if (mode == 0) {
        for (u32 s = 0; s < ndefault; ++s) norm[s] = defaults[s];
        nsym = ndefault;
        log = default_log;
    } else if (mode == 1) {
        if (avail < 1 || p[0] > max_sym) return -1;
        t->entries[0] = p[0];   /* one symbol, no bits, state 0 */
        t->log = 0;
        t->ready = 1;
        return 1;
    } else if (mode == 2) {
        used = (i64)zc_read_counts(p, avail, max_log, max_sym, norm, &nsym, &log);
        if (used == 0) return -1;
    } else {
        return t->ready ? 0 : -1;
    }
    if (!zc_build_table(norm, nsym, log, t->entries)) return -1;
    t->log = log;
    t->ready = 1;
    return used;
}

LINUMPY_DEVICE i64 zc_table(u32 k, u32 mode, const u8* p, u64 avail, ZcTable* t) {
    if (k == 0) return zc_sequence_table(mode, p, avail, t, ZC_LL_DEFAULT, 36, 6, 9, 35);
    if (k == 1) return zc_sequence_table(mode, p, avail, t, ZC_OF_DEFAULT, 29, 5, 8, 31);
    return zc_sequence_table(mode, p, avail, t, ZC_ML_DEFAULT, 53, 6, 9, 52);
}

/* A literals section header: 0 on error. */
LINUMPY_DEVICE int zc_literals_header(const u8* p, u64 size, u32* type, u32* format,
                                      u64* regen, u64* header, u64* stored) {
    if (size == 0) return 0;
    const u32 b0 = p[0];
    *type = b0 & 3u;
    *format = (b0 >> 2) & 3u;
    if (*type < 2) {
        if (*format == 0 || *format == 2) { *header = 1; *regen = b0 >> 3; }
        else if (*format == 1) {
            *header = 2;
            if (size < 2) return 0;
            *regen = (b0 >> 4) + ((u64)p[1] << 4);
        } else {
            *header = 3;
            if (size < 3) return 0;
            *regen = (b0 >> 4) + ((u64)p[1] << 4) + ((u64)p[2] << 12);
        }
        *stored = *type == 0 ? *regen : 1;
    } else {
        *header = *format < 2 ? 3 : (*format == 2 ? 4 : 5);
        if (size < *header) return 0;
        const u32 h = (u32)p[0] | ((u32)p[1] << 8) | ((u32)p[2] << 16)
                    | (*header > 3 ? ((u32)p[3] << 24) : 0u);
        if (*header == 3) { *regen = (h >> 4) & 0x3FF; *stored = (h >> 14) & 0x3FF; }
        else if (*header == 4) { *regen = (h >> 4) & 0x3FFF; *stored = h >> 18; }
        else { *regen = (h >> 4) & 0x3FFFF; *stored = (h >> 22) | ((u64)p[4] << 10); }
    }
    return *header + *stored <= size;
}

/* The number of sequences at p[*pos]; 0 on error. */
LINUMPY_DEVICE int zc_sequence_count(const u8* p, u64 size, u64* pos, u64* nseq) {
    if (*pos >= size) return 0;
    u64 n = p[(*pos)++];
    if (n >= 128) {
        if (n == 255) {
            if (*pos + 2 > size) return 0;
            n = (u64)p[*pos] + ((u64)p[*pos + 1] << 8) + 0x7F00;
            *pos += 2;
        } else {
            if (*pos + 1 > size) return 0;
            n = ((n - 128) << 8) + p[*pos];
            *pos += 1;
        }
    }
    *nseq = n;
    return 1;
}

/* Record in `refs` the tables a compressed block describes (its own literals and sequence
   table descriptions), without decoding its streams; 0 on error. */
LINUMPY_DEVICE int zc_block_refs(const u8* p, u64 size, ZcRefs* refs) {
    u32 type, format;
    u64 regen, header, stored;
    if (!zc_literals_header(p, size, &type, &format, &regen, &header, &stored)) return 0;
    if (type == 2) { refs->huffman = p + header; refs->huffman_avail = stored; }
    else if (type == 3 && refs->huffman == 0) return 0;
    u64 pos = header + stored, nseq;
    if (!zc_sequence_count(p, size, &pos, &nseq)) return 0;
    if (nseq == 0) return 1;
    if (pos >= size) return 0;
    const u32 modes = p[pos++];
    for (u32 k = 0; k < 3; ++k) {
        const u32 mode = (modes >> (6 - 2 * k)) & 3u;
        if (mode == 3) { if (refs->table_mode[k] == 0) return 0; continue; }
        refs->table[k] = p + pos;
        refs->table_avail[k] = size - pos;
        refs->table_mode[k] = mode + 1;
        if (mode == 1) { pos += 1; }
        else if (mode == 2) {
            short norm[64];
            u32 nsym, log;
            const u64 used = zc_read_counts(p + pos, size - pos, k == 1 ? 8 : 9,
                                            k == 0 ? 35 : (k == 1 ? 31 : 52), norm, &nsym, &log);
            if (used == 0) return 0;
            pos += used;
        }
        if (pos > size) return 0;
    }
    return 1;
}

/* Use of a repeat offset at block position `at`: concrete ones must reach no further back
   than the frame's start, initial ones are checked by the frame. */
LINUMPY_DEVICE void zc_use(const ZcRep* r, u64 at, ZcBlockResult* out) {
    if (r->source < 0) {
        const i64 back = (i64)r->value - (i64)at;
        if (back > out->history) out->history = back;
    } else {
        const int j = r->source;
        if (r->value > out->max_delta[j]) out->max_delta[j] = r->value;
        const i64 room = (i64)at + (i64)r->value;
        if (room < out->min_room[j]) out->min_room[j] = room;
    }
}

/* A result that asks nothing of the blocks before it and leaves the repeat offsets as
   they were. */
LINUMPY_DEVICE void zc_result_init(ZcBlockResult* r, i64 decoded) {
    r->decoded = decoded;
    r->history = -((i64)1 << 62);
    for (int j = 0; j < 3; ++j) {
        r->max_delta[j] = 0;
        r->min_room[j] = ZC_NO_ROOM;
        r->rep[j].source = j;
        r->rep[j].value = 0;
    }
}

/* Which Huffman streams of a literals section to decode: all of them, none (the section's
   bounds only), or stream 0..3 alone. */
#define ZC_ALL_STREAMS (-1)
#define ZC_NO_STREAMS (-2)

/* The literals section of a compressed block: its header, its Huffman tree description
   (or the one in effect) and the Huffman streams `streams` asks for. Sets the bytes it
   decodes to and where the section ends; 0 on error. */
LINUMPY_DEVICE int zc_literals(const u8* p, u64 size, ZcBlockState* f, const ZcRefs* inherited,
                               int streams, u64* regen_out, u64* end_out) {
    u32 type, format;
    u64 regen, header, stored;
    if (!zc_literals_header(p, size, &type, &format, &regen, &header, &stored)) return 0;
    if (regen > f->block_max) return 0;
    *regen_out = regen;
    *end_out = header + stored;
    if (type < 2 || streams == ZC_NO_STREAMS) return 1;
    const u8* q = p + header;
    u64 avail = stored;
    if (type == 2) {
        const u64 used = zc_read_huffman(q, avail, &f->huffman);
        if (used == 0) return 0;
        q += used;
        avail -= used;
    } else if (!f->huffman.ready) {
        if (inherited == 0 || inherited->huffman == 0
            || zc_read_huffman(inherited->huffman, inherited->huffman_avail, &f->huffman) == 0)
            return 0;
    }
    if (format == 0) return streams > 0 || zc_huffman_1(q, avail, regen, &f->huffman);
    if (avail < 10 || regen < 6) return 0;
    const u64 s1 = q[0] | ((u64)q[1] << 8);
    const u64 s2 = q[2] | ((u64)q[3] << 8);
    const u64 s3 = q[4] | ((u64)q[5] << 8);
    if (6 + s1 + s2 + s3 >= avail) return 0;
    const u64 seg = (regen + 3) / 4;
    if (3 * seg > regen) return 0;
    const u64 sizes[4] = {s1, s2, s3, avail - 6 - s1 - s2 - s3};
    if (streams == ZC_ALL_STREAMS)
        return zc_huffman_4(q + 6, sizes, seg, regen - 3 * seg, &f->huffman);
    u64 start = 6;
    for (int k = 0; k < streams; ++k) start += sizes[k];
    return zc_huffman_1(q + start, sizes[streams], streams == 3 ? regen - 3 * seg : seg,
                        &f->huffman);
}

/* One compressed block of `size` bytes, on its own: tables it repeats come from the state
   (or, where not there, from `inherited`), repeat offsets start as the block's initial
   ones; `streams` as zc_literals takes it. Fills `out`; out->decoded < 0 on error. */
LINUMPY_DEVICE void zc_block(const u8* p, u64 size, ZcBlockState* f, const ZcRefs* inherited,
                             int streams, ZcBlockResult* out) {
    zc_result_init(out, ZC_LITERALS_BAD);
    u64 regen, literals_end;
    if (!zc_literals(p, size, f, inherited, streams, &regen, &literals_end)) return;
    /* -- sequences section -- */
    out->decoded = ZC_SEQUENCES_BAD;
    u64 pos = literals_end, nseq;
    if (!zc_sequence_count(p, size, &pos, &nseq)) return;
    u64 block = regen;
    if (nseq == 0) {
        if (pos != size) return;
        out->decoded = (i64)block;
        return;
    }
    if (pos >= size) return;
    const u32 modes = p[pos++];
    if (modes & 3u) return;
    ZcTable* tables[3] = {&f->ll, &f->of, &f->ml};
    out->decoded = ZC_TABLES_BAD;
    for (u32 k = 0; k < 3; ++k) {
        const u32 mode = (modes >> (6 - 2 * k)) & 3u;
        if (mode == 3 && !tables[k]->ready) {
            if (inherited == 0 || inherited->table_mode[k] == 0
                || zc_table(k, inherited->table_mode[k] - 1, inherited->table[k],
                            inherited->table_avail[k], tables[k]) < 0) return;
        }
        const i64 used = zc_table(k, mode, p + pos, size - pos, tables[k]);
        if (used < 0) return;
        pos += (u64)used;
    }
    out->decoded = ZC_SEQUENCES_BAD;
    /* -- the sequences, decoded without copying a byte -- */
    ZcBack b;
    if (pos >= size || !zc_back_init(&b, p + pos, size - pos)) return;
    u32 ll_state, of_state, ml_state, v;
    if (!zc_read(&b, f->ll.log, &ll_state) || !zc_read(&b, f->of.log, &of_state)
        || !zc_read(&b, f->ml.log, &ml_state)) return;
    u64 literals_used = 0;
    u64 at = 0;
    ZcRep* rep = out->rep;
    for (u64 k = 0; k < nseq; ++k) {
        const u32 lle = f->ll.entries[ll_state];
        const u32 ofe = f->of.entries[of_state];
        const u32 mle = f->ml.entries[ml_state];
        const u32 of_code = ofe & 0xFF, ml_code = mle & 0xFF, ll_code = lle & 0xFF;
        if (!zc_read(&b, of_code, &v)) return;
        const u64 of_value = (1ull << of_code) + v;
        if (!zc_read(&b, ZC_ML_BITS[ml_code], &v)) return;
        const u64 match = ZC_ML_BASE[ml_code] + v;
        if (!zc_read(&b, ZC_LL_BITS[ll_code], &v)) return;
        const u64 literals = ZC_LL_BASE[ll_code] + v;
        literals_used += literals;
        if (literals_used > regen) return;
        at += literals;
        if (of_value > 3) {
            rep[2] = rep[1]; rep[1] = rep[0];
            rep[0].value = of_value - 3; rep[0].source = -1;
        } else {
            const u64 index = of_value - 1 + (literals == 0 ? 1 : 0);
            if (index == 3) {
                ZcRep r = rep[0];
                if (r.source < 0) { if (r.value <= 1) return; r.value -= 1; }
                else r.value += 1;
                rep[2] = rep[1]; rep[1] = rep[0]; rep[0] = r;
            } else if (index > 0) {
                const ZcRep r = rep[index];
                if (index == 2) rep[2] = rep[1];
                rep[1] = rep[0];
                rep[0] = r;
            }
        }
        zc_use(&rep[0], at, out);
        at += match;
        block += match;
        if (block > f->block_max) return;
        if (k + 1 < nseq) {
            if (!zc_read(&b, (lle >> 8) & 0xFF, &v)) return;
            ll_state = (lle >> 16) + v;
            if (!zc_read(&b, (mle >> 8) & 0xFF, &v)) return;
            ml_state = (mle >> 16) + v;
            if (!zc_read(&b, (ofe >> 8) & 0xFF, &v)) return;
            of_state = (ofe >> 16) + v;
        }
    }
    if (b.bits != 0) return;
    out->decoded = (i64)block;
}

/* The frame's side of a block checked on its own: `decoded` bytes came before it and
   `rep` are the repeat offsets it starts with; both move past it. */
LINUMPY_DEVICE int zc_resolve(const ZcBlockResult* r, u64* decoded, u64* rep) {
    if (r->decoded < 0) return (int)r->decoded;
    if (r->history > (i64)*decoded) return ZC_SEQUENCES_BAD;
    for (int j = 0; j < 3; ++j) {
        if (r->min_room[j] == ZC_NO_ROOM) continue;
        if (rep[j] <= r->max_delta[j] || rep[j] > *decoded + (u64)r->min_room[j])
            return ZC_SEQUENCES_BAD;
    }
    u64 next[3];
    for (int j = 0; j < 3; ++j)
        next[j] = r->rep[j].source < 0 ? r->rep[j].value : rep[r->rep[j].source] - r->rep[j].value;
    for (int j = 0; j < 3; ++j) rep[j] = next[j];
    *decoded += (u64)r->decoded;
    return 0;
}

#define ZSTD_MAGIC 0xFD2FB528u

LINUMPY_DEVICE u32 zc_rd32(const u8* p) {
    return (u32)p[0] | ((u32)p[1] << 8) | ((u32)p[2] << 16) | ((u32)p[3] << 24);
}

/* A frame's header: 0 with *pos at its first block, or a status. */
LINUMPY_DEVICE int zc_frame_header(const u8* p, u64 size, u64 want, u64* pos, u64* block_max,
                                   u32* has_checksum) {
    if (size < 4) return -1;
    const u32 magic = zc_rd32(p);
    if ((magic & 0xFFFFFFF0u) == 0x184D2A50u) return 2;   /* skippable */
    if (magic != ZSTD_MAGIC) return -2;
    if (size < 6) return -6;
    const u8 fhd = p[4];
    const u32 fcs_flag = fhd >> 6;
    const u32 single_segment = (fhd >> 5) & 1u;
    const u32 did_flag = fhd & 3u;
    if ((fhd >> 3) & 1u) return -3;
    *has_checksum = (fhd >> 2) & 1u;
    u64 at = 5;
    u64 window = 0;
    if (!single_segment) {
        const u8 wd = p[at++];
        const u32 exponent = wd >> 3;
        if (exponent > 21) return -12;     /* window log > 31 */
        const u64 base = 1ull << (10 + exponent);
        window = base + (base >> 3) * (wd & 7u);
    }
    const u32 did_size = did_flag == 0 ? 0 : (did_flag == 1 ? 1 : (did_flag == 2 ? 2 : 4));
    const u32 fcs_size = fcs_flag == 0 ? (single_segment ? 1 : 0)
                       : (fcs_flag == 1 ? 2 : (fcs_flag == 2 ? 4 : 8));
    if (at + did_size + fcs_size > size) return -6;
    u32 did = 0;
    for (u32 k = 0; k < did_size; ++k) did |= (u32)p[at + k] << (8 * k);
    at += did_size;
    if (did != 0) return -4;
    if (fcs_size) {
        u64 fcs = 0;
        for (u32 k = 0; k < fcs_size; ++k) fcs |= (u64)p[at + k] << (8 * k);
        if (fcs_size == 2) fcs += 256;
        at += fcs_size;
        if (fcs != want) return -5;
        if (single_segment) window = fcs;
    } else if (window > ZC_WINDOW_MAX_UNSIZED) {
        return -16;   /* libzstd refuses it too: a CPU read would fail, so must a GPU one */
    }
    *pos = at;
    *block_max = window < ZC_BLOCK_MAX ? window : ZC_BLOCK_MAX;
    return 0;
}

/* The next block header at *pos: 0 (and the block's type, size and stored bytes, *pos past
   its header) or a status. */
LINUMPY_DEVICE int zc_block_header(const u8* p, u64 size, u64 block_max, u64* pos, u32* last,
                                   u32* type, u64* bsize) {
    if (*pos + 3 > size) return -6;
    const u32 hdr = (u32)p[*pos] | ((u32)p[*pos + 1] << 8) | ((u32)p[*pos + 2] << 16);
    *pos += 3;
    *last = hdr & 1u;
    *type = (hdr >> 1) & 3u;
    *bsize = hdr >> 3;
    if (*type == 3) return -7;
    if (*bsize > block_max) return -8;
    if (*pos + (*type == 1 ? 1 : *bsize) > size) return -6;
    return 0;
}

/* After the last block: the checksum and what follows; the frame's status. */
LINUMPY_DEVICE int zc_frame_end(const u8* p, u64 size, u64 pos, u32 has_checksum,
                                u32* stored_checksum) {
    if (has_checksum) {
        if (pos + 4 > size) return -11;
        *stored_checksum = zc_rd32(p + pos);
        pos += 4;
    }
    if (pos != size) {
        if (size - pos >= 4 && (zc_rd32(p + pos) == ZSTD_MAGIC ||
                                (zc_rd32(p + pos) & 0xFFFFFFF0u) == 0x184D2A50u)) {
            return 3;   /* more frames follow: valid zstd, decoded on the CPU */
        }
        return -10;
    }
    return has_checksum ? 1 : 0;
}

LINUMPY_DEVICE void zc_state_init(ZcBlockState* f, u32* tables, u64 block_max) {
    f->ll.entries = tables; f->ll.ready = 0; f->ll.log = 0;
    f->ml.entries = tables + 512; f->ml.ready = 0; f->ml.log = 0;
    f->of.entries = tables + 1024; f->of.ready = 0; f->of.log = 0;
    f->huffman.ready = 0;
    f->huffman.log = 0;
    f->block_max = block_max;
}

/* Check one frame of `size` bytes that must decode to `want` bytes, block after block;
   `tables` holds TABLE_WORDS words of scratch. Returns the frame's status (FRAME_STATUS)
   and stores the content checksum, if any, in *stored_checksum. */
LINUMPY_DEVICE int zc_frame(const u8* p, u64 size, u64 want, u32* tables,
                            u32* stored_checksum) {
    *stored_checksum = 0;
    u64 pos, block_max;
    u32 has_checksum = 0;
    int status = zc_frame_header(p, size, want, &pos, &block_max, &has_checksum);
    if (status != 0) return status;
    ZcBlockState f;
    zc_state_init(&f, tables, block_max);
    u64 decoded = 0;
    u64 rep[3] = {1, 4, 8};
    for (;;) {
        u32 last, type;
        u64 bsize;
        status = zc_block_header(p, size, block_max, &pos, &last, &type, &bsize);
        if (status != 0) return status;
        if (type == 2) {
            ZcBlockResult r;
            zc_block(p + pos, bsize, &f, 0, ZC_ALL_STREAMS, &r);
            status = zc_resolve(&r, &decoded, rep);
            if (status != 0) return status;
        } else {
            decoded += bsize;
        }
        if (decoded > want) return -9;
        pos += type == 1 ? 1 : bsize;
        if (last) break;
    }
    if (decoded != want) return -9;
    return zc_frame_end(p, size, pos, has_checksum, stored_checksum);
}

/* -- the same check split for a GPU: frames walked, blocks checked apart, frames joined -- */

struct alignas(128) ZcBlockDesc {   /* DESC_BYTES */
    const u8* block;
    u64 size;
    u64 block_max;
    u32 type;
    ZcRefs inherited;
};

/* The number of block headers of a frame that read well (all of them, in a sound frame). */
LINUMPY_DEVICE u32 zc_frame_blocks(const u8* p, u64 size, u64 want) {
    u64 pos, block_max;
    u32 has_checksum = 0, count = 0;
    if (zc_frame_header(p, size, want, &pos, &block_max, &has_checksum) != 0) return 0;
    for (;;) {
        u32 last, type;
        u64 bsize;
        if (zc_block_header(p, size, block_max, &pos, &last, &type, &bsize) != 0) return count;
        count += 1;
        if (count > ZC_BLOCKS_MAX(want)) return 0;
        pos += type == 1 ? 1 : bsize;
        if (last) return count;
    }
}

/* Walk one frame's headers and block headers, describing each block (with the tables in
   effect before it) in descs[0..cap), cap from zc_frame_blocks; returns the frame's
   status as zc_frame does, or 4 where the frame has more blocks than the check takes. */
LINUMPY_DEVICE int zc_frame_walk(const u8* p, u64 size, u64 want, ZcBlockDesc* descs, u64 cap,
                                 u32* nblocks, u32* stored_checksum) {
    *stored_checksum = 0;
    *nblocks = 0;
    u64 pos, block_max;
    u32 has_checksum = 0;
    int status = zc_frame_header(p, size, want, &pos, &block_max, &has_checksum);
    if (status != 0) return status;
    ZcRefs refs;
    refs.huffman = 0;
    refs.huffman_avail = 0;
    for (int k = 0; k < 3; ++k) { refs.table[k] = 0; refs.table_avail[k] = 0; refs.table_mode[k] = 0; }
    u64 count = 0, plain = 0;
    for (;;) {
        u32 last, type;
        u64 bsize;
        status = zc_block_header(p, size, block_max, &pos, &last, &type, &bsize);
        if (status != 0) return status;
        if (count == cap) return 4;   /* more blocks than ZC_BLOCKS_MAX */
        ZcBlockDesc* d = descs + count++;
        d->block = p + pos;
        d->size = bsize;
        d->block_max = block_max;
        d->type = type;
        d->inherited = refs;
        if (type == 2 && !zc_block_refs(p + pos, bsize, &refs)) return ZC_TABLES_BAD;
        if (type != 2) {
            plain += bsize;
            if (plain > want) return -9;
        }
        pos += type == 1 ? 1 : bsize;
        if (last) break;
    }
    *nblocks = (u32)count;
    return zc_frame_end(p, size, pos, has_checksum, stored_checksum);
}

/* Check one described block on its own (raw and RLE blocks only count their size), or one
   part of it: part 0 its sequences and the bounds of its literals, part 1 + k its literals'
   Huffman stream k (which write only the literals verdict, 0 or ZC_LITERALS_BAD, to
   *literals). ZC_ALL_PARTS checks the whole block. */
#define ZC_ALL_PARTS (-1)
#define ZC_PARTS 5
LINUMPY_DEVICE void zc_block_apart(const ZcBlockDesc* d, int part, u32* tables,
                                   ZcBlockResult* r, int* literals) {
    if (part > 0) {
        ZcBlockState f;
        zc_state_init(&f, tables, d->block_max);
        const ZcRefs inherited = d->inherited;
        u64 regen, end;
        *literals = d->type != 2
            || zc_literals(d->block, d->size, &f, &inherited, part - 1, &regen, &end)
            ? 0 : ZC_LITERALS_BAD;
        return;
    }
    if (d->type != 2) {
        zc_result_init(r, (i64)d->size);
        return;
    }
    ZcBlockState f;
    zc_state_init(&f, tables, d->block_max);
    const ZcRefs inherited = d->inherited;
    ZcBlockResult result;   /* updated with every sequence: kept out of device memory */
    zc_block(d->block, d->size, &f, &inherited, part == 0 ? ZC_NO_STREAMS : ZC_ALL_STREAMS,
             &result);
    *r = result;
}

/* Join a frame's checked blocks in order; the frame's final status. `literals`: the
   verdicts of the blocks' literal parts (ZC_PARTS - 1 a block), or 0 where the blocks
   were checked whole. */
LINUMPY_DEVICE int zc_frame_join(const ZcBlockResult* results, const int* literals,
                                 u32 nblocks, u64 want) {
    u64 decoded = 0;
    u64 rep[3] = {1, 4, 8};
    for (u32 k = 0; k < nblocks; ++k) {
        if (literals != 0) {
            for (int j = 0; j < ZC_PARTS - 1; ++j)
                if (literals[k * (ZC_PARTS - 1) + j] != 0) return ZC_LITERALS_BAD;
        }
        const int status = zc_resolve(results + k, &decoded, rep);
        if (status != 0) return status;
        if (decoded > want) return -9;
    }
    return decoded == want ? 0 : -9;
}
"""
