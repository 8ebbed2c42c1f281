/* json/rows_avx512.c: the numeric arrays' innermost loop on CPUs with
 * AVX-512 (VBMI2); json/rows.c has the SSSE3 loop and chooses.
 *
 * The bytes of 64 at a time are classified once (digits, points, signs,
 * exponent marks, whitespace, separators), the JSON grammar of every
 * number in them checked with a few operations on those masks, and the
 * mantissa digits of all the numbers packed together (vpcompressb). In a
 * block whose blanks all follow separators (", ", a newline and
 * indentation) a number starts at the first byte after a separator's
 * blanks, and the block is read as compact text is, with no pass to take
 * the blanks out; blocks with exponents or other blanks take a general
 * pass, in which a number is the run of non-blank bytes before a
 * separator.
 * The next block starts after the last separator of this one.
 *
 * The blocks are taken two at a time: their packed digits make one table
 * of 128 bytes, their numbers one list, and the numbers of both are read
 * eight at a time, each in a 64-bit lane (codec__row_convert): no step
 * depends on one number's length or form. A 17-digit number and its ", "
 * take 20 bytes, so a block holds about three numbers: read alone, five
 * of the eight lanes would be idle, and the conversion would cost as much
 * as the classification. The loop needs 64 bytes after a block's start,
 * so the SSSE3 loop and the general reader take a body's last ones.
 * Figures for every form in docs/performance.md ("The JSON reader"). */
#include "json/json.h"

#if defined(__x86_64__) && defined(__GNUC__)

#include <immintrin.h>

#define CODEC__ROW512_TARGET                                                  \
    __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vbmi,"   \
                          "avx512vbmi2,bmi,bmi2,popcnt")))
#define CODEC__ROW512_INLINE                                                  \
    CODEC__ROW512_TARGET __attribute__((always_inline))

/* Bit i set where the byte at p + i equals c, for i in [0, 64). */
CODEC__ROW512_INLINE static inline uint64_t codec__eq64(__m512i v, char c)
{
    return _mm512_cmpeq_epi8_mask(v, _mm512_set1_epi8(c));
}

/* Byte i: i. */
#define CODEC__ROW_IOTA                                                       \
    _mm512_set_epi64(0x3F3E3D3C3B3A3938, 0x3736353433323130,                 \
                     0x2F2E2D2C2B2A2928, 0x2726252423222120,                 \
                     0x1F1E1D1C1B1A1918, 0x1716151413121110,                 \
                     0x0F0E0D0C0B0A0908, 0x0706050403020100)

/* The conversion's constants, made once before a loop and then opaque to
 * the compiler (CODEC__ROW_SET): gcc would otherwise make each again from
 * an immediate wherever it is used, a move and a broadcast, some twenty
 * of a group's two hundred instructions. */
typedef struct codec__row_k {
    __m512i lane;    /* 0 .. 7 in each 64-bit lane */
    __m512i idx[3];  /* codec__row_index: lane less 7 + skip (skip 0, 8, 16) */
    __m512i need[3]; /* codec__row_have: 8 + skip */
    __m512i madd_b, madd_w;       /* codec__row_madd */
    __m512i e4, e8, e16, top_max; /* 10^4, 10^8, 10^16, 1000 */
    /* codec__row_f32x8 */
    __m512i lowbits, least, q31, q16, q128, q255, mid, mid_span, normal;
    __m512d p10[4]; /* 10^-31 .. 10^0 */
    /* codec__row_store8 */
    __m512 pow10f;
    __m512i small, q10;
    __m256i sign;
} codec__row_k;

/* v = x, after which the compiler knows v only as a register's value. */
#define CODEC__ROW_SET(v, x)                                                  \
    do {                                                                      \
        (v) = (x);                                                            \
        __asm__("" : "+v"(v));                                                \
    } while (0)

CODEC__ROW512_INLINE static inline void codec__row_k_init(codec__row_k *k)
{
    int i;

    CODEC__ROW_SET(k->lane, _mm512_set1_epi64(0x0706050403020100));
    for (i = 0; i < 3; i++) {
        CODEC__ROW_SET(k->idx[i], _mm512_sub_epi8(k->lane,
                                                  _mm512_set1_epi8(
                                                      (char)(7 + 8 * i))));
        CODEC__ROW_SET(k->need[i], _mm512_set1_epi8((char)(8 + 8 * i)));
    }
    CODEC__ROW_SET(k->madd_b, _mm512_set1_epi16(0x010A));
    CODEC__ROW_SET(k->madd_w, _mm512_set1_epi32(0x00010064));
    CODEC__ROW_SET(k->e4, _mm512_set1_epi64(10000));
    CODEC__ROW_SET(k->e8, _mm512_set1_epi64(100000000));
    CODEC__ROW_SET(k->e16, _mm512_set1_epi64(INT64_C(10000000000000000)));
    CODEC__ROW_SET(k->top_max, _mm512_set1_epi64(1000));
    CODEC__ROW_SET(k->lowbits, _mm512_set1_epi64((INT64_C(1) << 29) - 1));
    /* the bits of 2^-126, the least normal float, as a double */
    CODEC__ROW_SET(k->least, _mm512_set1_epi64(INT64_C(897) << 52));
    CODEC__ROW_SET(k->q31, _mm512_set1_epi64(31));
    CODEC__ROW_SET(k->q16, _mm512_set1_epi64(16));
    CODEC__ROW_SET(k->q128, _mm512_set1_epi64(128));
    CODEC__ROW_SET(k->q255, _mm512_set1_epi64(255));
    CODEC__ROW_SET(k->mid, _mm512_set1_epi64((INT64_C(1) << 28) -
                                             CODEC__F32_SLACK));
    CODEC__ROW_SET(k->mid_span, _mm512_set1_epi64(2 * CODEC__F32_SLACK));
    CODEC__ROW_SET(k->normal, _mm512_set1_epi64(INT64_C(0x47EFFFFFE0000000) -
                                                (INT64_C(897) << 52)));
    for (i = 0; i < 4; i++)
        CODEC__ROW_SET(k->p10[i],
                       _mm512_loadu_pd(codec__pow10_q + 97 + 8 * i));
    CODEC__ROW_SET(k->pow10f,
                   _mm512_set_ps(1, 1, 1, 1, 1, 1e10f, 1e9f, 1e8f, 1e7f, 1e6f,
                                 1e5f, 1e4f, 1e3f, 1e2f, 1e1f, 1));
    CODEC__ROW_SET(k->small, _mm512_set1_epi64((1 << 24) - 1));
    CODEC__ROW_SET(k->q10, _mm512_set1_epi64(10));
    CODEC__ROW_SET(k->sign, _mm256_set1_epi32((int)0x80000000u));
}

/* The pieces of a group's digits, eight numbers each in a 64-bit lane.
 * For the digits last - skip - 7 .. last - skip of each number: the byte
 * of the packed digits lane byte j takes (l8: each number's last digit in
 * every byte of its lane), and the lane bytes that hold one of its digits
 * (c8: its digit count, likewise), j + count >= 8 + skip. */
CODEC__ROW512_INLINE static inline __m512i
codec__row_index(const codec__row_k *k, __m512i l8, int skip)
{
    return _mm512_add_epi8(l8, k->idx[skip / 8]);
}

CODEC__ROW512_INLINE static inline __mmask64
codec__row_have(const codec__row_k *k, __m512i c8, int skip)
{
    return _mm512_cmpge_epu8_mask(_mm512_add_epi8(k->lane, c8),
                                  k->need[skip / 8]);
}

/* Eight digits a lane (the first in its low byte, zeros before a number's
 * first) as two values of four digits: the first four's in the low 32
 * bits, the last four's in the high ones. */
CODEC__ROW512_INLINE static inline __m512i
codec__row_madd(const codec__row_k *k, __m512i d)
{
    return _mm512_madd_epi16(_mm512_maddubs_epi16(d, k->madd_b), k->madd_w);
}

/* The eight digits' value, from their two values of four. */
CODEC__ROW512_INLINE static inline __m512i
codec__row_join(const codec__row_k *k, __m512i quads)
{
    return _mm512_add_epi64(_mm512_mul_epu32(quads, k->e4),
                            _mm512_srli_epi64(quads, 32));
}

/* mant with the digits 9 to 16 from the end (their quads) added. */
CODEC__ROW512_INLINE static inline __m512i
codec__row_add8(const codec__row_k *k, __m512i mant, __m512i quads)
{
    return _mm512_add_epi64(mant,
                            _mm512_mul_epu32(codec__row_join(k, quads), k->e8));
}

/* Adds the digits 17 to 24 from the end (their quads) to *mant: up to 24
 * digits, of which the first five must be zeros (leading zeros of a
 * fraction: "0.00034558001160621643") so that the mantissa has at most 19
 * and fits in 64 bits. The first four digits' value above the last four's
 * is below 1000 when the first five are zeros, and then their value;
 * returns the lanes where it is not. */
CODEC__ROW512_INLINE static inline __mmask8
codec__row_top(const codec__row_k *k, __m512i quads, __m512i *mant)
{
    __m512i top = _mm512_ror_epi64(quads, 32);

    *mant = _mm512_add_epi64(*mant, _mm512_mullo_epi64(top, k->e16));
    return _mm512_cmpge_epu64_mask(top, k->top_max);
}

/* The quads of each number i of a group from the packed digits (xa, then
 * xb: 128 bytes). A number's digits lie all in xa or all in xb. */
CODEC__ROW512_INLINE static inline __m512i
codec__row_quads(const codec__row_k *k, __m512i xa, __m512i xb, __m512i l8,
                 __m512i c8, int skip)
{
    return codec__row_madd(
        k, _mm512_maskz_permutex2var_epi8(codec__row_have(k, c8, skip), xa,
                                          codec__row_index(k, l8, skip), xb));
}

/* codec__f32_of_decimal of eight lanes: mant * 10^q as float32 (without
 * the sign). *unsure gets the lanes it cannot be sure of: on or too near
 * a float midpoint, float subnormal or overflow, q beyond the table (which
 * the callers' at most 24 digits and two exponent digits never reach).
 *
 * A product, not a quotient: d = fl(fl(mant) * fl(10^q)) carries the same
 * three half-unit errors as fl(mant) / fl(10^-q), under 3.01 units of the
 * result, and a lane whose d lies within CODEC__F32_SLACK units of a
 * midpoint is unsure, even when d is exact (mant <= 2^53, 0 <= q <= 22):
 * such decimals are midpoints or as near one as a float32's own digits
 * never are, and the general reader decides them. One multiplication and
 * two comparisons cost a fraction of a division of eight doubles and the
 * exact case's masks. */
CODEC__ROW512_INLINE static inline __m256
codec__row_f32x8(const codec__row_k *k, __m512i mant, __m512i q,
                 __mmask8 *unsure)
{
    __m512i i = _mm512_add_epi64(q, k->q31);
    __m512d d, p;
    __m512i bits;
    __mmask8 nz = _mm512_test_epi64_mask(mant, mant), beyond = 0;

    if (_mm512_cmpgt_epu64_mask(i, k->q31) == 0) {
        /* 10^-31 .. 10^0, the decimals of plain numbers: from registers */
        p = _mm512_mask_blend_pd(_mm512_cmpge_epu64_mask(i, k->q16),
                                 _mm512_permutex2var_pd(k->p10[0], i, k->p10[1]),
                                 _mm512_permutex2var_pd(k->p10[2], i, k->p10[3]));
    } else {
        __m512i at = _mm512_add_epi64(q, k->q128);

        beyond = _mm512_cmpgt_epu64_mask(at, k->q255);
        at = _mm512_min_epu64(at, k->q255);
        p = _mm512_i64gather_pd(at, codec__pow10_q, 8);
    }
    d = _mm512_mul_pd(_mm512_cvtepu64_pd(mant), p);
    bits = _mm512_castpd_si512(d);
    /* near a midpoint: the low 29 bits within the slack of 1 << 28; out of
     * the normal floats: d below 2^-126 or above the largest float (d is
     * not negative, so its bits order as its values) */
    *unsure = (__mmask8)(_mm512_mask_cmple_epu64_mask(
                             nz,
                             _mm512_sub_epi64(
                                 _mm512_and_si512(bits, k->lowbits), k->mid),
                             k->mid_span) |
                         _mm512_mask_cmpgt_epu64_mask(
                             nz, _mm512_sub_epi64(bits, k->least),
                             k->normal)) |
              beyond;
    return _mm512_cvtpd_ps(d);
}

/* Stores the values (-1)^neg * mant * 10^q of the lanes of n8 at out,
 * up to the first lane unsure (given, or that codec__row_f32x8 is not sure
 * of). A float division rounds correctly when the mantissa is below 2^24
 * and the power of ten an exact float (10^0 to 10^-10); the other lanes
 * take codec__row_f32x8. Returns the unsure lanes of n8 (0: all stored). */
CODEC__ROW512_INLINE static inline __mmask8
codec__row_store8(const codec__row_k *k, __m512i mant, __m512i q,
                  __mmask8 neg, __mmask8 n8, __mmask8 unsure, float *out)
{
    __m256i bits;
    /* the lanes whose division is not exact: 10^q in a double */
    __mmask8 big =
        _mm512_mask_cmpgt_epu64_mask(n8, mant, k->small) |
        _mm512_mask_cmpgt_epu64_mask(n8, _mm512_add_epi64(q, k->q10), k->q10);

    if (big != n8)
        bits = _mm256_castps_si256(_mm256_div_ps(
            _mm256_cvtepi32_ps(_mm512_cvtepi64_epi32(mant)),
            _mm512_castps512_ps256(_mm512_permutexvar_ps(
                _mm512_castsi256_si512(_mm512_cvtepi64_epi32(
                    _mm512_sub_epi64(_mm512_setzero_si512(), q))),
                k->pow10f))));
    else
        bits = _mm256_setzero_si256();
    if (big) {
        __mmask8 far;
        __m256 dv = codec__row_f32x8(k, mant, q, &far);
        bits = _mm256_mask_blend_epi32(big, bits, _mm256_castps_si256(dv));
        unsure |= far & big;
    }
    unsure &= n8;
    if (unsure)
        n8 &= (__mmask8)((1u << __builtin_ctz(unsure)) - 1);
    bits = _mm256_mask_or_epi32(bits, neg, bits, k->sign);
    _mm256_mask_storeu_epi32(out, n8, bits);
    return unsure;
}

/* What codec__row_scan finds in one block. */
typedef struct codec__row_blk {
    __m512i x;     /* the mantissas' digit values, packed in order */
    __m512i ev;    /* each number's exponent (-99 to 99, 0 without) */
    uint64_t last; /* in x: each number's last digit */
    uint64_t ie;   /* in x: each number's last digit before its point */
    uint64_t negs; /* a bit a number: its sign */
    uint64_t ends; /* in the block: the separator after each number taken */
    unsigned nnum; /* the numbers taken (1 to 32) */
    int more;      /* 0 when the row cannot go on after them (its ']', or
                      a number the other readers must take) */
} codec__row_blk;

/* Bit i set where the byte at i is JSON whitespace (' ', '\t', '\n',
 * '\r'): one lookup of each byte's low four bits in a table that holds
 * each of the four at its own place (bytes from 0x80 look up 0). */
CODEC__ROW512_INLINE static inline uint64_t codec__row_blanks(__m512i v)
{
    const __m512i table = _mm512_broadcast_i32x4(
        _mm_setr_epi8(' ', 0, 0, 0, 0, 0, 0, 0, 0, '\t', '\n', 0, 0, '\r', 0,
                      0));

    return _mm512_cmpeq_epi8_mask(_mm512_shuffle_epi8(table, v), v);
}

/* The bytes up to and including the last separator of ends (nonzero). */
CODEC__ROW512_INLINE static inline uint64_t codec__row_upto(uint64_t ends)
{
    return ends >> 63 ? ~UINT64_C(0)
                      : (UINT64_C(2) << (63 - __builtin_clzll(ends))) - 1;
}

/* Classifies the 64 bytes at s and checks the grammar of the numbers in
 * them (at most cap, with at most two exponent digits; plain decimals
 * without blanks before them unless any), up to the first it does not
 * take. Returns 0 when it takes none, else 1 with *b filled. */
CODEC__ROW512_INLINE static inline int codec__row_scan(const char *s,
                                                      size_t cap, int any,
                                                      codec__row_blk *b)
{
    __m512i v = _mm512_loadu_si512((const void *)s);
    __m512i x = _mm512_sub_epi8(v, _mm512_set1_epi8('0'));
    uint64_t dg = _mm512_cmple_epu8_mask(x, _mm512_set1_epi8(9));
    uint64_t pt = codec__eq64(v, '.'), mn = codec__eq64(v, '-');
    uint64_t cl = codec__eq64(v, ']');
    uint64_t ends = codec__eq64(v, ',') | cl;
    uint64_t w, other, zero, odg, st, first, mdg, last, ie;
    uint64_t bad = 0, blanks = 0;

    b->ev = _mm512_setzero_si512();
    if (cl)
        ends &= ((cl & -cl) << 1) - 1; /* up to the row's ']' */
    if ((size_t)__builtin_popcountll(ends) > cap)
        ends &= (_pdep_u64(UINT64_C(1) << (cap - 1), ends) << 1) - 1;
    if (ends == 0)
        return 0; /* a number longer than the block */
    w = codec__row_upto(ends);
    other = w & ~(dg | pt | mn | ends);
    zero = codec__eq64(v, '0');
    odg = dg & w;
    if (other != 0 && any) {
        uint64_t ws = codec__row_blanks(v) & w;
        if ((other & ~ws) == 0 && (ws & ~(((ends | ws) << 1) | 1)) == 0) {
            /* blanks only after separators (", ", and a newline and
             * indentation): each number is then the run from the first
             * byte after them to the next separator, as in compact text */
            blanks = ws;
            other = 0;
        }
    }
    if (other == 0) {
        /* plain decimals: a number starts at the first byte after a
         * separator and its blanks (or the block's start), and ends
         * before the next separator */
        uint64_t dots, fr;

        dg &= w;
        pt &= w;
        mn &= w;
        st = ~blanks & w & (((ends | blanks) << 1) | 1);
        first = (st & ~mn) | ((st & mn) << 1);
        dots = _pext_u64(pt, pt | ends); /* points in separator order */
        /* one test of all the faults, not one branch each */
        if (((mn & ~st) |           /* a sign not first */
             (first & ~dg) |        /* no digit first (",,", ".5") */
             ((pt << 1) & ~dg) |    /* no digit after a point (one before
                                       it: the first-digit and two-point
                                       tests) */
             (dots & (dots >> 1)) | /* two points in one number */
             (first & zero & (dg >> 1))) != 0) /* "01" */
            return 0;
        /* the digits after a point (ends - (pt << 1): each point's next
         * digit borrows from its number's end) */
        fr = (ends - (pt << 1)) & dg;
        mdg = dg;
        last = (ends >> 1) & dg;
        ie = ((pt >> 1) | ((ends >> 1) & ~fr)) & dg;
        b->x = _mm512_maskz_compress_epi8(odg, x);
    } else {
        /* blanks before numbers, exponents, or a fault */
        const __m512i iota = CODEC__ROW_IOTA;
        uint64_t pl = codec__eq64(v, '+');
        uint64_t ex = _mm512_cmpeq_epi8_mask(
            _mm512_or_si512(v, _mm512_set1_epi8(0x20)),
            _mm512_set1_epi8('e')); /* 'e' or 'E' */
        uint64_t ws = codec__row_blanks(v);
        uint64_t tok, fin, aft, er, fr, edg;

        if (!any)
            return 0; /* codec_json_row: the general reader's */
        /* a number: the run of non-blank bytes before a separator */
        tok = w & ~(ws | ends);
        st = tok & ~(tok << 1);  /* each number's first byte */
        fin = tok & ~(tok >> 1); /* its last */
        aft = fin << 1;          /* the blank or separator after it */
        dg &= tok;
        mn &= tok;
        first = (st & ~mn) | ((st & mn) << 1); /* its first digit */
        pt &= tok;
        pl &= tok;
        ex &= tok;
        er = (aft - (ex << 1)) & tok;        /* after an 'e' */
        fr = ((aft | ex) - (pt << 1)) & tok; /* after a point */
        mdg = dg & ~er;
        edg = dg & er;
        /* each separator right after a number and each number right before
         * a separator: no empty number (",,", ", ,"), no blank after one
         * (the last of an indented row: the general reader's) */
        bad = ends ^ aft;
        bad |= (tok & ~(dg | pt | mn | pl | ex)) | /* another byte */
               (first & ~dg) |                     /* no first digit */
               (mn & ~(st | (ex << 1))) |          /* misplaced signs */
               (pl & ~(ex << 1)) |
               ((pt << 1) & ~dg) |                 /* no digit after a point */
               ((ex << 1) & ~(dg | mn | pl)) |     /* nor after an 'e' */
               ((((ex << 1) & (mn | pl)) << 1) & ~dg) | /* nor its sign */
               (pt & (fr | er)) | (ex & er) | /* two points or 'e's */
               (first & zero & (dg >> 1)) |   /* "01" */
               (edg & (edg << 1) & (edg << 2)); /* 3 exponent digits: the
                                                   general reader's */
        if (bad) {
            /* the numbers before the first fault are read; it is left to
             * the general reader, which takes it or says what is wrong */
            ends &= (bad & -bad) - 1;
            if (ends == 0)
                return 0;
        }
        if (ex) {
            /* each number's exponent at its last byte (its last digit),
             * tens from the byte before, then one byte a number */
            __m512i xp = _mm512_maskz_permutexvar_epi8(
                edg & (edg << 1) & ~UINT64_C(1),
                _mm512_sub_epi8(iota, _mm512_set1_epi8(1)), x);
            __m512i x2 = _mm512_add_epi8(xp, xp), x8;
            uint64_t eneg;

            x8 = _mm512_add_epi8(x2, x2);
            x8 = _mm512_add_epi8(x8, x8);
            b->ev = _mm512_maskz_compress_epi8(
                fin, _mm512_maskz_add_epi8(edg & fin, x,
                                           _mm512_add_epi8(x8, x2)));
            /* negative: the number's last byte lies after its exponent's
             * '-' */
            eneg = _pext_u64((aft - ((mn & (ex << 1)) << 1)) & fin, fin);
            b->ev = _mm512_mask_sub_epi8(b->ev, eneg, _mm512_setzero_si512(),
                                         b->ev);
        }
        last = ((aft | ex) >> 1) & mdg;
        ie = ((pt >> 1) | (((aft | ex) >> 1) & ~fr)) & mdg;
        b->x = _mm512_maskz_compress_epi8(mdg, x);
    }
    b->nnum = (unsigned)__builtin_popcountll(ends);
    b->last = _pext_u64(last, mdg);
    b->ie = _pext_u64(ie, mdg);
    b->negs = _pext_u64(mn, st);
    b->ends = ends;
    b->more = (cl & ends) == 0 && bad == 0;
    return 1;
}

/* A block's lists, one byte a number: in its packed digits, the index of
 * each number's last digit (*lastv) and its digit count (*cv); and its
 * decimals (*fv). */
CODEC__ROW512_INLINE static inline void codec__row_lists(
    const codec__row_blk *b, __m512i *lastv, __m512i *cv, __m512i *fv)
{
    const __m512i iota = CODEC__ROW_IOTA;

    *lastv = _mm512_maskz_compress_epi8(b->last, iota);
    *fv = _mm512_sub_epi8(*lastv, _mm512_maskz_compress_epi8(b->ie, iota));
    /* digit counts: last minus the previous number's last (-1 before the
     * first) */
    *cv = _mm512_sub_epi8(
        *lastv, _mm512_mask_permutexvar_epi8(
                    _mm512_set1_epi8(-1), ~UINT64_C(1),
                    _mm512_sub_epi8(iota, _mm512_set1_epi8(1)), *lastv));
}

/* Stores the numbers of blocks a and b (b->nnum may be 0) at out, eight at
 * a time. The lists of b follow those of a (one permutation of two
 * registers), its digits index the second half of the table (a->x,
 * b->x). For eight numbers then: one byte permutation right-aligns their
 * last eight digits in eight 64-bit lanes (more for the digits before
 * those, up to 24 with at most 19 after leading zeros), three
 * multiply-adds make the mantissas, one division of eight floats the
 * values. A float division rounds correctly when the mantissa is below
 * 2^24 and the power of ten an exact float (10^0 to 10^-10); the other
 * lanes take codec__row_f32x8. Returns the numbers stored: all, or fewer,
 * up to one of more digits or one codec__row_f32x8 is not sure of (left
 * to the other readers). The lanes past it may be written, within the
 * numbers of a and b. */
CODEC__ROW512_TARGET static unsigned codec__row_convert(
    const codec__row_blk *a, const codec__row_blk *b, const codec__row_k *k,
    float *out)
{
    const __m512i iota = CODEC__ROW_IOTA;
    /* byte 8i + j of a group: number i */
    const __m512i number = _mm512_set_epi64(
        0x0707070707070707, 0x0606060606060606, 0x0505050505050505,
        0x0404040404040404, 0x0303030303030303, 0x0202020202020202,
        0x0101010101010101, 0);
    unsigned nnum = a->nnum + b->nnum, g;
    __m512i lastv, cv, fv, ev = a->ev;
    __m512i xb = b->nnum ? b->x : _mm512_setzero_si512();
    uint64_t negs = a->negs, over;

    codec__row_lists(a, &lastv, &cv, &fv);
    if (b->nnum) {
        __m512i lb, cb, fb;
        /* list entry i: a's i, then b's i - a->nnum */
        __m512i at = _mm512_mask_add_epi8(
            iota,
            _mm512_cmpge_epu8_mask(iota, _mm512_set1_epi8((char)a->nnum)),
            iota, _mm512_set1_epi8((char)(64 - a->nnum)));

        codec__row_lists(b, &lb, &cb, &fb);
        lastv = _mm512_permutex2var_epi8(
            lastv, at, _mm512_add_epi8(lb, _mm512_set1_epi8(64)));
        cv = _mm512_permutex2var_epi8(cv, at, cb);
        fv = _mm512_permutex2var_epi8(fv, at, fb);
        ev = _mm512_permutex2var_epi8(ev, at, b->ev);
        negs |= b->negs << a->nnum;
    }
    over = _mm512_mask_cmpgt_epu8_mask(_bzhi_u64(~UINT64_C(0), nnum), cv,
                                       _mm512_set1_epi8(24));
    if (over) /* more digits than three groups: the general reader's */
        nnum = (unsigned)__builtin_ctzll(over);
    for (g = 0; g < nnum; g += 8) {
        unsigned live = nnum - g < 8 ? nnum - g : 8;
        uint64_t bytes = _bzhi_u64(~UINT64_C(0), 8 * live);
        __m512i sel = _mm512_add_epi8(number, _mm512_set1_epi8((char)g));
        __m512i c8 = _mm512_permutexvar_epi8(sel, cv);
        __m512i l8 = _mm512_permutexvar_epi8(sel, lastv);
        __m512i mant =
            codec__row_join(k, codec__row_quads(k, a->x, xb, l8, c8, 0));
        __m512i at, f, q;
        __mmask8 n8 = (__mmask8)_bzhi_u32(0xFF, live), unsure = 0;

        /* and the digits before the last eight, and before those */
        if (_mm512_cmpgt_epu8_mask(c8, _mm512_set1_epi8(8)) & bytes)
            mant = codec__row_add8(k, mant,
                                   codec__row_quads(k, a->x, xb, l8, c8, 8));
        if (_mm512_cmpgt_epu8_mask(c8, _mm512_set1_epi8(16)) & bytes)
            unsure = codec__row_top(
                k, codec__row_quads(k, a->x, xb, l8, c8, 16), &mant);
        at = _mm512_add_epi8(iota, _mm512_set1_epi8((char)g));
        f = _mm512_cvtepu8_epi64(
            _mm512_castsi512_si128(_mm512_permutexvar_epi8(at, fv)));
        q = _mm512_sub_epi64(
            _mm512_cvtepi8_epi64(
                _mm512_castsi512_si128(_mm512_permutexvar_epi8(at, ev))),
            f);
        unsure = codec__row_store8(k, mant, q, (__mmask8)(negs >> g), n8,
                                   unsure, out + g);
        if (unsure)
            return g + (unsigned)__builtin_ctz(unsure);
    }
    return nnum;
}

/* The separator after number i (from 0) of a block's ends. */
CODEC__ROW512_INLINE static inline const char *
codec__row_sep(const char *s, uint64_t ends, unsigned i)
{
    return s + __builtin_ctzll(_pdep_u64(UINT64_C(1) << i, ends));
}

/* Reads the numbers of whole 64-byte blocks from *pp while they are ones
 * codec_json_number_fast takes (with at most two exponent digits and 24
 * mantissa digits; plain decimals without blanks before them unless any);
 * stops before the first that is not, leaving it to the other readers.
 * Same contract as codec_json_row. */
CODEC__ROW512_TARGET size_t codec__row_avx512(const char **pp,
                                              const char *end, float *out,
                                              size_t room, int any)
{
    const char *s = *pp, *done = *pp;
    size_t k = 0;
    codec__row_k rk;

    codec__row_k_init(&rk);
    while (end - s >= 64 && k < room) {
        codec__row_blk a, b;
        const char *sb;
        unsigned got, n;

        if (!codec__row_scan(s, room - k, any, &a))
            break;
        /* the next block's start from the masks alone, not from the values
         * read, so the core can go on to it while they are made */
        sb = s + (64 - __builtin_clzll(a.ends));
        b.nnum = 0;
        b.ends = 0;
        if (a.more && a.nnum < room - k && end - sb >= 64 &&
            !codec__row_scan(sb, room - k - a.nnum, any, &b))
            b.nnum = 0;
        n = a.nnum + b.nnum;
        got = codec__row_convert(&a, &b, &rk, out + k);
        if (got < n) { /* a number this loop leaves to the others */
            if (got > a.nnum)
                done = codec__row_sep(sb, b.ends, got - a.nnum - 1);
            else if (got > 0)
                done = codec__row_sep(s, a.ends, got - 1);
            k += got;
            break;
        }
        k += n;
        if (b.nnum == 0) {
            /* a alone: the row ends in it, or the next block is not one
             * this loop takes */
            done = sb - 1;
            break;
        }
        done = sb + (63 - __builtin_clzll(b.ends));
        if (!b.more || k == room)
            break;
        s = done + 1;
    }
    *pp = done;
    return k;
}


/* -- the fixed-stride loop ------------------------------------------------
 *
 * codec__row_avx512 starts each block after the last separator of the one
 * before, so a block's address waits on the previous block's masks: a
 * chain of some twenty cycles a block, which the core cannot overlap. The
 * loop below reads the row at fixed strides instead (block i at start +
 * 64 i) and carries what a number straddling two blocks needs across
 * them as a few bits (the grammar's previous byte, and whether a fraction
 * goes on), so the blocks' work is independent and overlaps. Its digits
 * go to a table in memory, one stream for the row, each digit byte
 * marked with what the number needs of it: 0x80 on the digits after a
 * point, 0x40 on the first digit of a negative number. A number's
 * decimals and sign are then read off its own digits, and the blocks keep
 * only each number's last index. Each number's last eight, sixteen and
 * twenty-four digits are permuted out of 128-byte windows of the stream
 * by that index. It takes plain decimals (sign, digits, a point; blanks
 * only after separators, when any) and stops at the first block with
 * anything else, which codec__row (json/rows.c) gives to
 * codec__row_avx512. */

/* Blocks scanned before their numbers are converted. */
#define CODEC__STRIDE_BLOCKS 32

/* The marks of a digit byte in the stream (its value in the low four
 * bits). */
#define CODEC__STRIDE_FRAC 0x80 /* after its number's point */
#define CODEC__STRIDE_NEG 0x40  /* its negative number's first digit */

typedef struct codec__stride {
    /* the digits, from dig[32] on (the windows read up to 23 bytes before
     * a number's last digit, and 127 after where they start: the bytes
     * before dig[32] and after the digits, masked out) */
    uint8_t dig[32 + 32 + (CODEC__STRIDE_BLOCKS + 3) * 64];
    /* number j's last digit is dig[last[j + 1]]; last[0] the index just
     * before the first number's first digit */
    uint16_t last[1 + CODEC__STRIDE_BLOCKS * 32 + 32];
} codec__stride;

/* Where the reading of a row stands between two blocks. */
typedef struct codec__stride_at {
    unsigned base; /* dig[base]: where the next block's digits go */
    unsigned nn;   /* numbers ended in this batch of blocks */
    /* the previous byte (bit 0 each): a separator or a blank after one,
     * a number's leading '-', a point, a number's leading '0'; and
     * whether the next byte is in a fraction (after a point, before its
     * number's separator) */
    uint64_t c_sb, c_mf, c_pt, c_fz, c_fr;
    const char *close; /* the row's ']', once taken */
} codec__stride_at;

/* Reads the 64 bytes at s into t: their digits, marked, and the last
 * digit's index of each number that ends in them (at most room in the
 * batch). Returns -1, with t and z unchanged, when they hold anything but
 * plain decimals and separators (and blanks after separators when any), a
 * fault of grammar, or more numbers than room; else 1 when the row's ']'
 * is in them, 0 otherwise. */
CODEC__ROW512_INLINE static inline int codec__stride_block(const char *s,
                                                          int any,
                                                          size_t room,
                                                          codec__stride *t,
                                                          codec__stride_at *z)
{
    const __m512i iota = CODEC__ROW_IOTA;
    __m512i v = _mm512_loadu_si512((const void *)s);
    __m512i x = _mm512_sub_epi8(v, _mm512_set1_epi8('0'));
    uint64_t dg = _mm512_cmple_epu8_mask(x, _mm512_set1_epi8(9));
    uint64_t pt = codec__eq64(v, '.'), mn = codec__eq64(v, '-');
    uint64_t cl = codec__eq64(v, ']'), ends = codec__eq64(v, ',');
    uint64_t w = ~UINT64_C(0), ws = 0, zero, sb, st, first, bad, fr, ptb;
    unsigned nsep;
    unsigned char out;

    if (cl) {
        w = ((cl & -cl) << 1) - 1; /* up to the row's ']' */
        ends = (ends | cl) & w;
        dg &= w;
        pt &= w;
        mn &= w;
    }
    if (any)
        ws = codec__row_blanks(v) & w;
    if ((w & ~(dg | pt | mn | ends | ws)) != 0)
        return -1;
    zero = codec__eq64(v, '0') & w;
    sb = (ends | ws) << 1 | z->c_sb; /* after a separator or its blanks */
    /* a number starts at the first byte after a separator and its blanks */
    st = ~ws & w & sb;
    first = (st & ~mn) | (mn << 1) | z->c_mf; /* its first digit */
    ptb = (pt << 1) | z->c_pt;                /* after a point */
    /* the bytes in a fraction: each point's next byte borrows from its
     * number's separator (or from beyond the block, a fraction that goes
     * on), and a fraction from the block before borrows from byte 0 */
    out = _subborrow_u64((unsigned char)z->c_fr, ends, pt << 1,
                         (unsigned long long *)&fr);
    /* one test of all the faults, not one branch each */
    bad = (ws & ~sb) |                 /* a blank elsewhere */
          (mn & ~st) |                 /* a sign not first */
          (first & ~dg) |              /* no digit first (",,", ".5") */
          (ptb & ~dg) |                /* nor after a point */
          ((((first & zero) << 1) | z->c_fz) & dg) | /* "01" */
          (pt & fr);                   /* a point in a fraction */
    nsep = (unsigned)__builtin_popcountll(ends);
    if (bad != 0 || z->nn + nsep > room)
        return -1;
    /* the digits, marked, to the stream */
    x = _mm512_mask_add_epi8(x, fr & dg, x,
                            _mm512_set1_epi8((char)CODEC__STRIDE_FRAC));
    x = _mm512_mask_add_epi8(x, ((mn << 1) | z->c_mf) & dg, x,
                            _mm512_set1_epi8(CODEC__STRIDE_NEG));
    _mm512_storeu_si512((void *)(t->dig + z->base),
                        _mm512_maskz_compress_epi8(dg, x));
    /* each separator's index among the block's digits and separators,
     * less its rank among the separators: the digits before it; so the
     * stream's index of each number's last digit */
    _mm512_storeu_si512(
        (void *)(t->last + 1 + z->nn),
        _mm512_add_epi16(
            _mm512_cvtepu8_epi16(_mm512_castsi512_si256(_mm512_sub_epi8(
                _mm512_maskz_compress_epi8(_pext_u64(ends, dg | ends),
                                           iota),
                iota))),
            _mm512_set1_epi16((short)(z->base - 1))));
    /* what the next block needs of this one */
    z->c_sb = (ends | ws) >> 63;
    z->c_mf = mn >> 63;
    z->c_pt = pt >> 63;
    z->c_fz = (first & zero) >> 63;
    z->c_fr = out | z->c_pt;
    z->base += (unsigned)__builtin_popcountll(dg);
    z->nn += nsep;
    if (cl) {
        z->close = s + __builtin_ctzll(cl);
        return 1;
    }
    return 0;
}

/* Eight numbers' digit bytes last - skip - 7 .. last - skip from the
 * stream, marks and all, zeros before each number's first. The stream's
 * 128 bytes from the first digit the first four numbers may need are in
 * a0, a1, those of the last four in b0, b1; at is each number's last
 * digit there and c8 its digit count (both in every byte of its lane). A
 * number of at most 24 digits and the three before it fit in 128 bytes;
 * the lanes of longer ones are not used. */
CODEC__ROW512_INLINE static inline __m512i
codec__stride_bytes(const codec__row_k *k, __m512i a0, __m512i a1,
                    __m512i b0, __m512i b1, __m512i at, __m512i c8, int skip)
{
    __m512i idx = codec__row_index(k, at, skip);
    __mmask64 have = codec__row_have(k, c8, skip);

    return _mm512_or_si512(
        _mm512_maskz_permutex2var_epi8(have & 0xFFFFFFFFu, a0, idx, a1),
        _mm512_maskz_permutex2var_epi8(have & ~UINT64_C(0xFFFFFFFF), b0, idx,
                                       b1));
}

/* The marks' part of the digit bytes d: 1 in each byte after its
 * number's point. */
CODEC__ROW512_INLINE static inline __m512i codec__stride_frac(__m512i d,
                                                             __m512i ones)
{
    return _mm512_and_si512(_mm512_srli_epi64(d, 7), ones);
}

/* The digits' part: d as codec__row_madd takes them. */
CODEC__ROW512_INLINE static inline __m512i
codec__stride_quads(const codec__row_k *k, __m512i d, __m512i low)
{
    return codec__row_madd(k, _mm512_and_si512(d, low));
}

/* Stores the first nn numbers of t at out, eight at a time; returns the
 * number stored, fewer up to one of more than 24 digits or one
 * codec__row_store8 is not sure of. */
CODEC__ROW512_INLINE static inline unsigned codec__stride_convert(
    const codec__stride *t, unsigned nn, float *out)
{
    codec__row_k k;
    __m512i byte0, ones, low, negs, q8, q24;
    unsigned g;

    codec__row_k_init(&k);
    /* byte 0 of each 64-bit lane, in all eight of its bytes */
    CODEC__ROW_SET(byte0, _mm512_broadcast_i32x4(
                              _mm_set_epi64x(0x0808080808080808, 0)));
    CODEC__ROW_SET(ones, _mm512_set1_epi8(1));
    CODEC__ROW_SET(low, _mm512_set1_epi8(0x0F));
    CODEC__ROW_SET(negs, _mm512_set1_epi8(CODEC__STRIDE_NEG));
    CODEC__ROW_SET(q8, _mm512_set1_epi64(8));
    CODEC__ROW_SET(q24, _mm512_set1_epi64(24));
    for (g = 0; g < nn; g += 8) {
        unsigned live = nn - g < 8 ? nn - g : 8;
        __mmask8 n8 = (__mmask8)_bzhi_u32(0xFF, live), unsure = 0, over, neg;
        __m512i last = _mm512_cvtepu16_epi64(
            _mm_loadu_si128((const __m128i *)(const void *)(t->last + 1 + g)));
        __m512i count = _mm512_sub_epi64(
            last, _mm512_cvtepu16_epi64(_mm_loadu_si128(
                      (const __m128i *)(const void *)(t->last + g))));
        /* the windows: from 23 digits before the first number's last, and
         * the fifth's */
        unsigned wa = t->last[1 + g] - 23u,
                 wb = live > 4 ? t->last[1 + g + 4] - 23u : wa;
        __m512i a0 = _mm512_loadu_si512((const void *)(t->dig + wa));
        __m512i a1 = _mm512_loadu_si512((const void *)(t->dig + wa + 64));
        __m512i b0 = _mm512_loadu_si512((const void *)(t->dig + wb));
        __m512i b1 = _mm512_loadu_si512((const void *)(t->dig + wb + 64));
        __m512i at = _mm512_shuffle_epi8(
            _mm512_sub_epi64(last, _mm512_mask_blend_epi64(
                                       0xF0, _mm512_set1_epi64(wa),
                                       _mm512_set1_epi64(wb))),
            byte0);
        /* the digit count in every byte of its lane (at most 255: more
         * than 24 is never used) */
        __m512i c8 = _mm512_shuffle_epi8(_mm512_min_epu64(count, k.q255),
                                         byte0);
        __m512i d = codec__stride_bytes(&k, a0, a1, b0, b1, at, c8, 0);
        __m512i marks = d, fracs = codec__stride_frac(d, ones), mant;

        /* more digits than three groups: the others' */
        over = _mm512_mask_cmpgt_epu64_mask(n8, count, q24);
        mant = codec__row_join(&k, codec__stride_quads(&k, d, low));
        if (_mm512_mask_cmpgt_epu64_mask(n8, count, q8)) {
            d = codec__stride_bytes(&k, a0, a1, b0, b1, at, c8, 8);
            marks = _mm512_or_si512(marks, d);
            fracs = _mm512_add_epi8(fracs, codec__stride_frac(d, ones));
            mant = codec__row_add8(&k, mant, codec__stride_quads(&k, d, low));
        }
        if (_mm512_mask_cmpgt_epu64_mask(n8, count, k.q16)) {
            d = codec__stride_bytes(&k, a0, a1, b0, b1, at, c8, 16);
            marks = _mm512_or_si512(marks, d);
            fracs = _mm512_add_epi8(fracs, codec__stride_frac(d, ones));
            unsure =
                codec__row_top(&k, codec__stride_quads(&k, d, low), &mant);
        }
        neg = _mm512_test_epi64_mask(marks, negs);
        /* the decimals: each lane's marked digits, summed */
        unsure = codec__row_store8(
            &k, mant,
            _mm512_sub_epi64(_mm512_setzero_si512(),
                             _mm512_sad_epu8(fracs, _mm512_setzero_si512())),
            neg, n8, unsure | over, out + g);
        if (unsure)
            return g + (unsigned)__builtin_ctz(unsure);
    }
    return nn;
}

/* The separator after number i (from 0) of those that end at s or after
 * it: text codec__stride_block took, in which every ',' is one. */
static const char *codec__stride_sep(const char *s, unsigned i)
{
    for (;; s++)
        if ((*s == ',' || *s == ']') && i-- == 0)
            return s;
}

/* The last ',' before s, in text codec__stride_block took that has
 * one. */
static const char *codec__stride_lastsep(const char *s)
{
    while (*--s != ',')
        ;
    return s;
}

/* codec__row_stride for any given: the loop specialised for each. */
CODEC__ROW512_INLINE static inline size_t codec__stride_loop(
    const char **pp, const char *end, float *out, size_t room, int any)
{
    codec__stride t;
    codec__stride_at z;
    const char *s = *pp, *done = *pp;
    size_t k = 0;

    memset(t.dig, 0, 32);
    memset(&z, 0, sizeof z);
    t.last[0] = 31;
    z.base = 32;
    z.c_sb = 1;
    for (;;) {
        const char *cs = s; /* the batch's first block */
        unsigned b, got, from, left;
        int r = -1;

        z.nn = 0;
        for (b = 0; b < CODEC__STRIDE_BLOCKS && end - s >= 64; b++) {
            r = codec__stride_block(s, any, room - k, &t, &z);
            if (r < 0)
                break;
            s += 64;
            if (r > 0)
                break;
        }
        got = codec__stride_convert(&t, z.nn, out + k);
        if (got == z.nn && got > 0)
            done = r > 0 ? z.close : codec__stride_lastsep(s);
        else if (got > 0)
            done = codec__stride_sep(cs, got - 1);
        k += got;
        if (got < z.nn || b < CODEC__STRIDE_BLOCKS || r != 0)
            break; /* a stop, the row's end or the body's */
        /* the number begun in the last block: its digits to the front */
        from = t.last[z.nn] + 1u;
        left = z.base - from;
        if (left > 24)
            break; /* too many digits; the others say so */
        _mm256_storeu_si256(
            (__m256i *)(void *)(t.dig + 32),
            _mm256_loadu_si256((const __m256i *)(void *)(t.dig + from)));
        z.base = 32 + left;
    }
    *pp = done;
    return k;
}

/* codec__row_avx512's contract, at fixed strides. */
CODEC__ROW512_TARGET size_t codec__row_stride(const char **pp,
                                              const char *end, float *out,
                                              size_t room, int any)
{
    return any ? codec__stride_loop(pp, end, out, room, 1)
               : codec__stride_loop(pp, end, out, room, 0);
}

#else

typedef int codec__row_avx512_none; /* ISO C wants a declaration */

#endif
