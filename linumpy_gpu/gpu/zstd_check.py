"""The content check of a zstd frame, as C source shared by a CUDA kernel and a host test.

nvCOMP decodes zstd without bounds checks: a damaged entropy-coded section can make it hang
or kill the CUDA context. ``zc_frame`` therefore walks every block of a frame the way a
decoder would, without writing a byte (RFC 8878):

- the literals section: its header, the Huffman tree description (weights read directly or
  through their FSE table, and proven to form a complete prefix code), the jump table, and
  every Huffman stream decoded symbol by symbol (only code lengths matter, so the decoder
  needs one rank table rather than a lookup table) until it is consumed exactly;
- the sequences section: its header, the three FSE table descriptions (predefined, RLE,
  compressed or repeated) built into decoding tables, and every sequence decoded with its
  repeat offsets;
- every literal run inside the block's literals, every match offset inside the bytes the
  frame has decoded so far, every block inside the maximum block size, and the frame's
  blocks adding up to the chunk's size exactly.

A frame passes only if every bitstream is consumed exactly, as libzstd requires. The source
compiles as CUDA (``LINUMPY_DEVICE`` unset) and as host C++ (the includer defines
``LINUMPY_DEVICE`` and ``LINUMPY_CONSTANT`` first), so a CPU test can hold it against
libzstd.
"""

from __future__ import annotations

# Words of table space one frame's check needs: the literal length, match length and offset
# decoding tables and the Huffman code lengths, kept across blocks for the "repeat" and
# "treeless" modes.
TABLE_WORDS = 512 + 512 + 256 + 512

SOURCE = r"""
#ifndef LINUMPY_DEVICE
#define LINUMPY_DEVICE __device__ __forceinline__
#define LINUMPY_CONSTANT __constant__ const
#define ZC_HIGHBIT(v) (31 - __clz((int)(v)))
#define ZC_LOAD32(a) (*(const u32*)(a))
#else
#define ZC_HIGHBIT(v) (31 - __builtin_clz((unsigned)(v)))
static inline u32 ZC_LOAD32(const u8* a) { u32 v; __builtin_memcpy(&v, a, 4); return v; }
#endif

typedef long long i64;
typedef unsigned short u16;

#define ZC_BLOCK_MAX (128u * 1024u)
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

/* Huffman code lengths by table index (the next `log` bits of a stream): the indexes of
   weight w come after those of every lower weight, each symbol of weight w taking 2^(w-1),
   and their codes are log + 1 - w bits long. */
struct ZcHuffman { u32 log; u8* lengths; int ready; };

/* A Huffman tree description; returns bytes used or 0 on error. */
LINUMPY_DEVICE u64 zc_read_huffman(const u8* p, u64 avail, ZcHuffman* h) {
    if (avail == 0) return 0;
    /* the weights are read into the code-length table, which they are turned into */
    u8* weights = h->lengths;
    u32 count = 0;
    u64 used;
    const u32 header = p[0];
    if (header >= 128) {
        count = header - 127;
        used = 1 + (count + 1) / 2;
        if (used > avail) return 0;
        for (u32 i = 0; i < count; ++i) {
            const u8 b = p[1 + i / 2];
            weights[i] = (i & 1) ? (b & 15) : (b >> 4);
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
        for (;;) {
            if (count > 253) return 0;
            u32 e = table[s1];
            weights[count++] = (u8)(e & 0xFF);
            s1 = (e >> 16) + zc_read_fill(&b, (e >> 8) & 0xFF);
            if (b.bits < 0) { weights[count++] = (u8)(table[s2] & 0xFF); break; }
            if (count > 253) return 0;
            e = table[s2];
            weights[count++] = (u8)(e & 0xFF);
            s2 = (e >> 16) + zc_read_fill(&b, (e >> 8) & 0xFF);
            if (b.bits < 0) { weights[count++] = (u8)(table[s1] & 0xFF); break; }
        }
    }
    u32 ranks[13] = {0};
    u32 total = 0;
    for (u32 i = 0; i < count; ++i) {
        if (weights[i] > 12) return 0;
        ranks[weights[i]] += 1;
        total += (1u << weights[i]) >> 1;
    }
    if (total == 0) return 0;
    const u32 log = (u32)ZC_HIGHBIT(total) + 1;
    if (log > 11) return 0;
    const u32 rest = (1u << log) - total;
    if (rest == 0 || (rest & (rest - 1)) != 0) return 0;
    ranks[ZC_HIGHBIT(rest) + 1] += 1;
    if (ranks[1] < 2 || (ranks[1] & 1)) return 0;
    u32 start = 0;
    for (u32 w = 1; w <= log; ++w) {
        const u32 end = start + (ranks[w] << (w - 1));
        for (u32 k = start; k < end; ++k) h->lengths[k] = (u8)(log + 1 - w);
        start = end;
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
    const u32 nbits = h->lengths[v];
    if (nbits > b->avail) return 0;
    b->avail -= nbits;
    b->bits -= nbits;
    return 1;
}

/* Decode `symbols` Huffman symbols from one stream, which must be consumed exactly. */
LINUMPY_DEVICE int zc_huffman_1(const u8* p, u64 size, u64 symbols, const ZcHuffman* h) {
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
                                const ZcHuffman* h) {
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

struct ZcFrame {
    ZcTable ll, of, ml;
    ZcHuffman huffman;
    u64 rep[3];
    u64 decoded;     /* bytes the frame has decoded so far */
    u64 limit;       /* the frame's content size */
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

/* One compressed block of `size` bytes; returns its decoded size, or a status < 0. */
LINUMPY_DEVICE i64 zc_block(const u8* p, u64 size, ZcFrame* f) {
    if (size == 0) return ZC_LITERALS_BAD;
    /* -- literals section -- */
    const u32 b0 = p[0];
    const u32 type = b0 & 3u;
    const u32 format = (b0 >> 2) & 3u;
    u64 regen, header, stored;
    if (type < 2) {
        if (format == 0 || format == 2) { header = 1; regen = b0 >> 3; }
        else if (format == 1) {
            header = 2;
            if (size < 2) return ZC_LITERALS_BAD;
            regen = (b0 >> 4) + ((u64)p[1] << 4);
        } else {
            header = 3;
            if (size < 3) return ZC_LITERALS_BAD;
            regen = (b0 >> 4) + ((u64)p[1] << 4) + ((u64)p[2] << 12);
        }
        stored = type == 0 ? regen : 1;
    } else {
        header = format < 2 ? 3 : (format == 2 ? 4 : 5);
        if (size < header) return ZC_LITERALS_BAD;
        const u32 h = (u32)p[0] | ((u32)p[1] << 8) | ((u32)p[2] << 16)
                    | (header > 3 ? ((u32)p[3] << 24) : 0u);
        if (header == 3) { regen = (h >> 4) & 0x3FF; stored = (h >> 14) & 0x3FF; }
        else if (header == 4) { regen = (h >> 4) & 0x3FFF; stored = h >> 18; }
        else { regen = (h >> 4) & 0x3FFFF; stored = (h >> 22) | ((u64)p[4] << 10); }
    }
    if (regen > f->block_max || header + stored > size) return ZC_LITERALS_BAD;
    if (type >= 2) {
        const u8* q = p + header;
        u64 avail = stored;
        if (type == 2) {
            const u64 used = zc_read_huffman(q, avail, &f->huffman);
            if (used == 0) return ZC_LITERALS_BAD;
            q += used;
            avail -= used;
        } else if (!f->huffman.ready) {
            return ZC_LITERALS_BAD;
        }
        if (format == 0) {
            if (!zc_huffman_1(q, avail, regen, &f->huffman)) return ZC_LITERALS_BAD;
        } else {
            if (avail < 10 || regen < 6) return ZC_LITERALS_BAD;
            const u64 s1 = q[0] | ((u64)q[1] << 8);
            const u64 s2 = q[2] | ((u64)q[3] << 8);
            const u64 s3 = q[4] | ((u64)q[5] << 8);
            if (6 + s1 + s2 + s3 >= avail) return ZC_LITERALS_BAD;
            const u64 s4 = avail - 6 - s1 - s2 - s3;
            const u64 seg = (regen + 3) / 4;
            if (3 * seg > regen) return ZC_LITERALS_BAD;
            const u64 sizes[4] = {s1, s2, s3, s4};
            if (!zc_huffman_4(q + 6, sizes, seg, regen - 3 * seg, &f->huffman))
                return ZC_LITERALS_BAD;
        }
    }
    /* -- sequences section header -- */
    u64 pos = header + stored;
    if (pos >= size) return ZC_SEQUENCES_BAD;
    u64 nseq = p[pos++];
    if (nseq >= 128) {
        if (nseq == 255) {
            if (pos + 2 > size) return ZC_SEQUENCES_BAD;
            nseq = (u64)p[pos] + ((u64)p[pos + 1] << 8) + 0x7F00;
            pos += 2;
        } else {
            if (pos + 1 > size) return ZC_SEQUENCES_BAD;
            nseq = ((nseq - 128) << 8) + p[pos];
            pos += 1;
        }
    }
    u64 block = regen;
    if (nseq == 0) {
        if (pos != size) return ZC_SEQUENCES_BAD;
    } else {
        if (pos >= size) return ZC_SEQUENCES_BAD;
        const u32 modes = p[pos++];
        if (modes & 3u) return ZC_SEQUENCES_BAD;
        i64 used = zc_sequence_table(modes >> 6, p + pos, size - pos, &f->ll,
                                     ZC_LL_DEFAULT, 36, 6, 9, 35);
        if (used < 0) return ZC_TABLES_BAD;
        pos += (u64)used;
        used = zc_sequence_table((modes >> 4) & 3u, p + pos, size - pos, &f->of,
                                 ZC_OF_DEFAULT, 29, 5, 8, 31);
        if (used < 0) return ZC_TABLES_BAD;
        pos += (u64)used;
        used = zc_sequence_table((modes >> 2) & 3u, p + pos, size - pos, &f->ml,
                                 ZC_ML_DEFAULT, 53, 6, 9, 52);
        if (used < 0) return ZC_TABLES_BAD;
        pos += (u64)used;
        /* -- the sequences, decoded without copying a byte -- */
        ZcBack b;
        if (pos >= size || !zc_back_init(&b, p + pos, size - pos)) return ZC_SEQUENCES_BAD;
        u32 ll_state, of_state, ml_state, v;
        if (!zc_read(&b, f->ll.log, &ll_state) || !zc_read(&b, f->of.log, &of_state)
            || !zc_read(&b, f->ml.log, &ml_state)) return ZC_SEQUENCES_BAD;
        u64 literals_used = 0;
        u64 at = f->decoded;
        for (u64 k = 0; k < nseq; ++k) {
            const u32 lle = f->ll.entries[ll_state];
            const u32 ofe = f->of.entries[of_state];
            const u32 mle = f->ml.entries[ml_state];
            const u32 of_code = ofe & 0xFF, ml_code = mle & 0xFF, ll_code = lle & 0xFF;
            if (!zc_read(&b, of_code, &v)) return ZC_SEQUENCES_BAD;
            const u64 of_value = (1ull << of_code) + v;
            if (!zc_read(&b, ZC_ML_BITS[ml_code], &v)) return ZC_SEQUENCES_BAD;
            const u64 match = ZC_ML_BASE[ml_code] + v;
            if (!zc_read(&b, ZC_LL_BITS[ll_code], &v)) return ZC_SEQUENCES_BAD;
            const u64 literals = ZC_LL_BASE[ll_code] + v;
            u64 offset;
            if (of_value > 3) {
                offset = of_value - 3;
                f->rep[2] = f->rep[1]; f->rep[1] = f->rep[0]; f->rep[0] = offset;
            } else {
                const u64 index = of_value - 1 + (literals == 0 ? 1 : 0);
                if (index == 0) {
                    offset = f->rep[0];
                } else if (index == 3) {
                    offset = f->rep[0] - 1;
                    if (offset == 0) return ZC_SEQUENCES_BAD;
                    f->rep[2] = f->rep[1]; f->rep[1] = f->rep[0]; f->rep[0] = offset;
                } else {
                    offset = f->rep[index];
                    if (index == 2) f->rep[2] = f->rep[1];
                    f->rep[1] = f->rep[0];
                    f->rep[0] = offset;
                }
            }
            literals_used += literals;
            if (literals_used > regen) return ZC_SEQUENCES_BAD;
            at += literals;
            if (offset > at) return ZC_SEQUENCES_BAD;
            at += match;
            block += match;
            if (at > f->limit || block > f->block_max) return ZC_SEQUENCES_BAD;
            if (k + 1 < nseq) {
                if (!zc_read(&b, (lle >> 8) & 0xFF, &v)) return ZC_SEQUENCES_BAD;
                ll_state = (lle >> 16) + v;
                if (!zc_read(&b, (mle >> 8) & 0xFF, &v)) return ZC_SEQUENCES_BAD;
                ml_state = (mle >> 16) + v;
                if (!zc_read(&b, (ofe >> 8) & 0xFF, &v)) return ZC_SEQUENCES_BAD;
                of_state = (ofe >> 16) + v;
            }
        }
        if (b.bits != 0) return ZC_SEQUENCES_BAD;
    }
    if (block > f->block_max || f->decoded + block > f->limit) return ZC_SEQUENCES_BAD;
    f->decoded += block;
    return (i64)block;
}

#define ZSTD_MAGIC 0xFD2FB528u

LINUMPY_DEVICE u32 zc_rd32(const u8* p) {
    return (u32)p[0] | ((u32)p[1] << 8) | ((u32)p[2] << 16) | ((u32)p[3] << 24);
}

/* Check one frame of `size` bytes that must decode to `want` bytes; `tables` holds
   TABLE_WORDS words of scratch. Returns the frame's status (FRAME_STATUS) and stores the
   content checksum, if any, in *stored_checksum. */
LINUMPY_DEVICE int zc_frame(const u8* p, u64 size, u64 want, u32* tables,
                            u32* stored_checksum) {
    *stored_checksum = 0;
    if (size < 4) return -1;
    const u32 magic = zc_rd32(p);
    if ((magic & 0xFFFFFFF0u) == 0x184D2A50u) return 2;   /* skippable */
    if (magic != ZSTD_MAGIC) return -2;
    if (size < 6) return -6;
    const u8 fhd = p[4];
    const u32 fcs_flag = fhd >> 6;
    const u32 single_segment = (fhd >> 5) & 1u;
    const u32 reserved = (fhd >> 3) & 1u;
    const u32 has_checksum = (fhd >> 2) & 1u;
    const u32 did_flag = fhd & 3u;
    if (reserved) return -3;
    u64 pos = 5;
    u64 window = 0;
    if (!single_segment) {
        const u8 wd = p[pos++];
        const u32 exponent = wd >> 3;
        const u32 mantissa = wd & 7u;
        if (exponent > 21) return -12;     /* window log > 31 */
        const u64 base = 1ull << (10 + exponent);
        window = base + (base >> 3) * mantissa;
    }
    const u32 did_size = did_flag == 0 ? 0 : (did_flag == 1 ? 1 : (did_flag == 2 ? 2 : 4));
    const u32 fcs_size = fcs_flag == 0 ? (single_segment ? 1 : 0)
                       : (fcs_flag == 1 ? 2 : (fcs_flag == 2 ? 4 : 8));
    if (pos + did_size + fcs_size > size) return -6;
    u32 did = 0;
    for (u32 k = 0; k < did_size; ++k) did |= (u32)p[pos + k] << (8 * k);
    pos += did_size;
    if (did != 0) return -4;
    if (fcs_size) {
        u64 fcs = 0;
        for (u32 k = 0; k < fcs_size; ++k) fcs |= (u64)p[pos + k] << (8 * k);
        if (fcs_size == 2) fcs += 256;
        pos += fcs_size;
        if (fcs != want) return -5;
        if (single_segment) window = fcs;
    }
    ZcFrame f;
    f.ll.entries = tables; f.ll.ready = 0; f.ll.log = 0;
    f.ml.entries = tables + 512; f.ml.ready = 0; f.ml.log = 0;
    f.of.entries = tables + 1024; f.of.ready = 0; f.of.log = 0;
    f.huffman.ready = 0;
    f.huffman.log = 0;
    f.huffman.lengths = (u8*)(tables + 1280);
    f.rep[0] = 1; f.rep[1] = 4; f.rep[2] = 8;
    f.decoded = 0;
    f.limit = want;
    f.block_max = window < ZC_BLOCK_MAX ? window : ZC_BLOCK_MAX;
    for (;;) {
        if (pos + 3 > size) return -6;
        const u32 hdr = (u32)p[pos] | ((u32)p[pos + 1] << 8) | ((u32)p[pos + 2] << 16);
        pos += 3;
        const u32 last = hdr & 1u;
        const u32 type = (hdr >> 1) & 3u;
        const u64 bsize = hdr >> 3;
        if (type == 3) return -7;
        if (bsize > f.block_max) return -8;
        const u64 stored = type == 1 ? 1 : bsize;
        if (pos + stored > size) return -6;
        if (type == 2) {
            const i64 decoded = zc_block(p + pos, bsize, &f);
            if (decoded < 0) return (int)decoded;
        } else {
            f.decoded += bsize;
            if (f.decoded > want) return -9;
        }
        pos += stored;
        if (last) break;
    }
    if (f.decoded != want) return -9;
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
"""
