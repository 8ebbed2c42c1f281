/* json/rows.c: the numeric arrays' innermost loop, with SSSE3.
 *
 * A request's matrices are mostly short decimals in compact rows
 * ("0.345584,-1.30316,..."). codec_json_row first finds the separators of
 * 64 bytes at a time, so each number's extent is known before it is read
 * and nothing in one number's reading waits for the previous one. Per
 * number, one 16-byte load classifies its bytes (digits, the point), one
 * shuffle gathers its digits into two right-aligned groups of eight, and
 * SWAR arithmetic turns each group into an integer. With a mantissa below
 * 2^24 and at most ten decimals (both exact floats) one float division
 * rounds correctly; otherwise (at most 14 digits, < 2^53) one double
 * division gives the correctly rounded double (Clinger's fast path), and
 * rounding that to float is correct unless it sits exactly on a float
 * midpoint. Midpoints, exponents, whitespace, leading zeros, numbers of
 * more than fifteen bytes and the body's last 96 bytes are left to the
 * general reader (codec_json_number). On CPUs with AVX-512 (VBMI2), whole
 * 64-byte blocks of such numbers are read together first (below). */
#include "json/json.h"

#if defined(__x86_64__) && defined(__GNUC__)

#include <immintrin.h>

#define CODEC__ROW_TARGET __attribute__((target("ssse3")))

/* The powers of ten that are exact floats. */
static const float codec__pow10f[11] = {1e0f, 1e1f, 1e2f, 1e3f, 1e4f, 1e5f,
                                        1e6f, 1e7f, 1e8f, 1e9f, 1e10f};

/* Stores the float nearest to (neg ? -1 : 1) * mant / 10^f (mant < 2^53,
 * f <= 15) at out: 1, or 0 when that decimal is a float midpoint (the
 * general reader decides those). Both row loops end with it. */
static inline int codec__row_value(uint64_t mant, unsigned f, unsigned neg,
                                   float *out)
{
    uint32_t fbits;
    float fv;

    if (mant < (UINT64_C(1) << 24) && f <= 10) {
        /* both exact floats: one float division rounds correctly */
        fv = (float)(uint32_t)mant / codec__pow10f[f];
    } else if (!codec__f32_of_exact((double)mant / codec__pow10[f], &fv)) {
        /* zero passes (bits 0); no nonzero value here is below 1e-13 */
        return 0;
    }
    /* the sign as a bit, not a branch: signs are random in real weights */
    memcpy(&fbits, &fv, sizeof fbits);
    fbits ^= (uint32_t)neg << 31;
    memcpy(out, &fbits, sizeof fbits);
    return 1;
}

/* codec__row_pack[neg][a][L]: the shuffle that gathers the L digits of a
 * number with a sign byte (neg), a integer digits and a point after them
 * (when L > a): lanes 0-7 take its last eight digits and lanes 8-15 the
 * ones before them, each group right-aligned. Digit t sits at byte
 * neg + t, one further past the point; lanes without a digit get 0x80,
 * which the shuffle turns into 0. */
static __m128i codec__row_pack[2][16][16];

__attribute__((constructor)) static void codec__row_init(void)
{
    int neg, a, L, j;

    for (neg = 0; neg < 2; neg++)
        for (a = 0; a < 16; a++)
            for (L = 0; L < 16; L++) {
                unsigned char b[16];
                for (j = 0; j < 16; j++) {
                    int t = j < 8 ? j + L - 8 : j + L - 24;
                    int ok = j < 8 ? t >= 0 : (t >= 0 && t < L - 8);
                    b[j] = !ok ? 0x80
                               : (unsigned char)(neg + t + (t >= a));
                }
                memcpy(&codec__row_pack[neg][a][L], b, sizeof b);
            }
}

/* The number of len bytes (1 to 15) at p, which the caller found between
 * separators. Returns 1 with *out set, 0 when this loop does not take it.
 * Nothing here feeds the next number's position, so the core overlaps the
 * numbers of a row. */
CODEC__ROW_TARGET static inline int codec__row_one(const char *p,
                                                   unsigned len, float *out)
{
    __m128i v = _mm_loadu_si128((const __m128i *)(const void *)p);
    __m128i x = _mm_sub_epi8(v, _mm_set1_epi8('0'));
    unsigned neg = p[0] == '-';
    unsigned dig = (unsigned)_mm_movemask_epi8(
        _mm_cmpeq_epi8(_mm_min_epu8(x, _mm_set1_epi8(9)), x));
    unsigned dot = (unsigned)_mm_movemask_epi8(
        _mm_cmpeq_epi8(v, _mm_set1_epi8('.')));
    unsigned body = (1u << len) - (1u << neg); /* lanes after the sign */
    unsigned a, f, q;
    uint64_t mant;
    __m128i t;

    if (((dig | dot) & body) != body)
        return 0;
    dot &= body;
    if (dot == 0) {
        if (len == neg)
            return 0;
        a = len - neg;
        f = 0;
    } else {
        q = (unsigned)__builtin_ctz(dot);
        if ((dot & (dot - 1)) != 0 || q == neg || q + 1 == len)
            return 0; /* two points, or no digit before or after it */
        a = q - neg;
        f = len - 1 - q;
    }
    if (a > 1 && p[neg] == '0')
        return 0; /* a leading zero stands alone in JSON */
    t = _mm_shuffle_epi8(x, _mm_load_si128(&codec__row_pack[neg][a][a + f]));
    mant = codec__swar8((uint64_t)_mm_cvtsi128_si64(t));
    if (a + f > 8)
        mant += (uint64_t)100000000u * codec__swar8(
            (uint64_t)_mm_cvtsi128_si64(_mm_unpackhi_epi64(t, t)));
    return codec__row_value(mant, f, neg, out);
}

/* Bit i set when p[i] is ',' or ']', for i in [0, 64). */
CODEC__ROW_TARGET static inline uint64_t codec__row_seps(const char *p)
{
    uint64_t m = 0;
    int i;

    for (i = 0; i < 4; i++) {
        __m128i v = _mm_loadu_si128((const __m128i *)(const void *)(p + 16 * i));
        __m128i s = _mm_or_si128(_mm_cmpeq_epi8(v, _mm_set1_epi8(',')),
                                 _mm_cmpeq_epi8(v, _mm_set1_epi8(']')));
        m |= (uint64_t)(unsigned)_mm_movemask_epi8(s) << (16 * i);
    }
    return m;
}

/* The separators of 64 bytes at a time are found first, so each number's
 * extent is known before it is read. */
CODEC__ROW_TARGET static size_t codec__row_ssse3(const char **pp,
                                                 const char *end, float *out,
                                                 size_t room)
{
    const char *p = *pp, *done = *pp; /* done: just past the last number */
    const char *s = p;                /* the next number's first byte */
    size_t k = 0;

    while (end - s >= 96) {
        uint64_t seps;
        p = s;
        seps = codec__row_seps(p);
        while (seps) {
            const char *e = p + __builtin_ctzll(seps);
            if (e - s > 15 || e == s || !codec__row_one(s, (unsigned)(e - s),
                                                        out + k))
                goto stop;
            k++;
            done = e;
            if (*e != ',' || k == room)
                goto stop;
            s = e + 1;
            seps &= seps - 1;
        }
        if (s == p)
            break; /* no separator in 64 bytes: not a short number */
    }
stop:
    *pp = done;
    return k;
}

/* -- AVX-512: the separators, points, signs and digits of 64 bytes are
 * classified once, the JSON grammar of every number in them checked with a
 * few operations on those masks, and the digits of all the numbers packed
 * together (vpcompressb). The numbers are then read eight at a time, each
 * in a 64-bit lane (codec__row_block8): no step depends on one number's
 * length. Workload 1's body parses in 0.064 ms, against 0.101 when each
 * number took its own permutation and division and 0.138 with the SSSE3
 * loop; workload 2's in 1.36 to 1.41 ms against 1.83. It needs 64 bytes after a
 * block's start, so the SSSE3 loop and the general reader take a body's
 * last ones. */

#define CODEC__ROW512_TARGET                                                  \
    __attribute__((target("avx512f,avx512bw,avx512vl,avx512vbmi,"            \
                          "avx512vbmi2,bmi,bmi2,popcnt")))

/* Bit i set where the byte at p + i equals c, for i in [0, 64). */
CODEC__ROW512_TARGET static inline uint64_t codec__eq64(__m512i v, char c)
{
    return _mm512_cmpeq_epi8_mask(v, _mm512_set1_epi8(c));
}

/* In the 64-bit lane of each number i of a group, the value of its digits
 * last_i - skip - 7 .. last_i - skip of the packed digits x (zeros before
 * its first): l8 and c8 hold each number's last digit and digit count in
 * every byte of its lane. */
CODEC__ROW512_TARGET static inline __m512i codec__row_digits8(__m512i x,
                                                             __m512i l8,
                                                             __m512i c8,
                                                             int skip)
{
    const __m512i lane = _mm512_set1_epi64(0x0706050403020100);
    /* lane j takes packed digit last - skip - 7 + j when j + c >= 8 + skip */
    __m512i idx = _mm512_add_epi8(
        l8, _mm512_sub_epi8(lane, _mm512_set1_epi8((char)(7 + skip))));
    __mmask64 have = _mm512_cmpge_epu8_mask(
        _mm512_add_epi8(lane, c8), _mm512_set1_epi8((char)(8 + skip)));
    __m512i d = _mm512_maskz_permutexvar_epi8(have, idx, x);

    d = _mm512_maddubs_epi16(d, _mm512_set1_epi16(0x010A));
    d = _mm512_madd_epi16(d, _mm512_set1_epi32(0x00010064));
    return _mm512_add_epi64(_mm512_mul_epu32(d, _mm512_set1_epi64(10000)),
                            _mm512_srli_epi64(d, 32));
}

/* Stores the block's first nnum numbers (at most 32) at out, eight at a
 * time. x holds the block's digit values packed in order; last and ie mark
 * in that order each number's last digit and its last digit before the
 * point, so the lists of both (vpcompressb of the byte indices) give every
 * number's digit count and decimals as byte differences. For eight numbers
 * then: one byte permutation right-aligns their last eight digits in eight
 * 64-bit lanes (a second one the digits before those, when a number has
 * more), three multiply-adds make the mantissas, one division of eight
 * floats the values. A float division rounds correctly when the mantissa
 * is below 2^24 and 10^f an exact float; the other lanes take
 * codec__row_value one at a time. negs has a bit a number, its sign.
 * Returns the numbers stored: nnum, or fewer, up to one of more than 15
 * digits or one that is a float midpoint (left to the other readers). The
 * lanes past it may be written, within nnum. */
CODEC__ROW512_TARGET static unsigned codec__row_block8(__m512i x,
                                                      uint64_t last,
                                                      uint64_t ie,
                                                      uint64_t negs,
                                                      unsigned nnum,
                                                      float *out)
{
    const __m512i iota = _mm512_set_epi64(
        0x3F3E3D3C3B3A3938, 0x3736353433323130, 0x2F2E2D2C2B2A2928,
        0x2726252423222120, 0x1F1E1D1C1B1A1918, 0x1716151413121110,
        0x0F0E0D0C0B0A0908, 0x0706050403020100);
    /* byte 8i + j of a group: number i */
    const __m512i number = _mm512_set_epi64(
        0x0707070707070707, 0x0606060606060606, 0x0505050505050505,
        0x0404040404040404, 0x0303030303030303, 0x0202020202020202,
        0x0101010101010101, 0);
    const __m512 pow10 = _mm512_set_ps(1, 1, 1, 1, 1, 1e10f, 1e9f, 1e8f, 1e7f,
                                       1e6f, 1e5f, 1e4f, 1e3f, 1e2f, 1e1f, 1);
    __m512i lastv = _mm512_maskz_compress_epi8(last, iota);
    __m512i fv = _mm512_sub_epi8(lastv, _mm512_maskz_compress_epi8(ie, iota));
    /* digit counts: last minus the previous number's last (-1 before the
     * first) */
    __m512i cv = _mm512_sub_epi8(
        lastv, _mm512_mask_permutexvar_epi8(
                   _mm512_set1_epi8(-1), ~UINT64_C(1),
                   _mm512_sub_epi8(iota, _mm512_set1_epi8(1)), lastv));
    uint64_t over = _mm512_mask_cmpgt_epu8_mask(_bzhi_u64(~UINT64_C(0), nnum),
                                                cv, _mm512_set1_epi8(15));
    unsigned g;

    if (over) /* a mantissa beyond 2^53: the SSSE3 loop refuses it too */
        nnum = (unsigned)__builtin_ctzll(over);
    for (g = 0; g < nnum; g += 8) {
        __m512i sel = _mm512_add_epi8(number, _mm512_set1_epi8((char)g));
        __m512i c8 = _mm512_permutexvar_epi8(sel, cv);
        __m512i l8 = _mm512_permutexvar_epi8(sel, lastv);
        __m512i mant = codec__row_digits8(x, l8, c8, 0), f;
        __m256i bits;
        __mmask8 n8 = (__mmask8)_bzhi_u32(0xFF, nnum - g), big;

        if (_mm512_cmpgt_epu8_mask(c8, _mm512_set1_epi8(8)) &
            _bzhi_u64(~UINT64_C(0), 8 * (nnum - g)))
            /* and the digits before the last eight */
            mant = _mm512_add_epi64(
                mant, _mm512_mul_epu32(codec__row_digits8(x, l8, c8, 8),
                                       _mm512_set1_epi64(100000000)));
        f = _mm512_cvtepu8_epi64(_mm512_castsi512_si128(
            _mm512_permutexvar_epi8(
                _mm512_add_epi8(iota, _mm512_set1_epi8((char)g)), fv)));
        bits = _mm256_castps_si256(_mm256_div_ps(
            _mm256_cvtepi32_ps(_mm512_cvtepi64_epi32(mant)),
            _mm512_castps512_ps256(_mm512_permutexvar_ps(
                _mm512_castsi256_si512(_mm512_cvtepi64_epi32(f)), pow10))));
        bits = _mm256_mask_or_epi32(bits, (__mmask8)(negs >> g), bits,
                                    _mm256_set1_epi32((int)0x80000000u));
        _mm256_mask_storeu_epi32(out + g, n8, bits);
        /* the lanes whose division was not exact: one at a time */
        big = n8 & (_mm512_cmpge_epu64_mask(mant, _mm512_set1_epi64(1 << 24)) |
                    _mm512_cmpgt_epu64_mask(f, _mm512_set1_epi64(10)));
        if (big) {
            uint64_t mi[8], fi[8];

            _mm512_storeu_si512(mi, mant);
            _mm512_storeu_si512(fi, f);
            do {
                unsigned i = (unsigned)__builtin_ctz(big);
                if (!codec__row_value(mi[i], (unsigned)fi[i],
                                      (unsigned)(negs >> (g + i)) & 1,
                                      out + g + i))
                    return g + i;
                big &= (__mmask8)(big - 1);
            } while (big);
        }
    }
    return nnum;
}

/* Reads the numbers of whole 64-byte blocks from *pp while every number of
 * a block is one codec__row_one would take (other than by length); stops
 * at the first block that holds anything else, leaving it to the SSSE3
 * loop. Same contract as codec__row_ssse3. */
CODEC__ROW512_TARGET static size_t codec__row_avx512(const char **pp,
                                                     const char *end,
                                                     float *out, size_t room)
{
    const char *s = *pp, *done = *pp;
    size_t k = 0;

    while (end - s >= 64 && k < room) {
        __m512i v = _mm512_loadu_si512((const void *)s);
        __m512i x = _mm512_sub_epi8(v, _mm512_set1_epi8('0'));
        uint64_t dg = _mm512_cmple_epu8_mask(x, _mm512_set1_epi8(9));
        uint64_t pt = codec__eq64(v, '.'), mn = codec__eq64(v, '-');
        uint64_t cl = codec__eq64(v, ']');
        uint64_t ends = codec__eq64(v, ',') | cl, w, st, first, dots, frac;
        size_t cap = room - k;
        unsigned nnum, got;

        if (cl)
            ends &= ((cl & -cl) << 1) - 1; /* up to the row's ']' */
        if ((size_t)__builtin_popcountll(ends) > cap)
            ends &= (_pdep_u64(UINT64_C(1) << (cap - 1), ends) << 1) - 1;
        if (ends == 0)
            break; /* a number longer than the block */
        w = ends >> 63 ? ~UINT64_C(0)
                       : (UINT64_C(2) << (63 - __builtin_clzll(ends))) - 1;
        dg &= w;
        pt &= w;
        mn &= w;
        st = ((ends << 1) | 1) & w;           /* first byte of each number */
        first = (st & ~mn) | ((st & mn) << 1); /* its first digit's place */
        dots = _pext_u64(pt, pt | ends);      /* points in separator order */
        if ((w & ~(dg | pt | mn | ends)) != 0 || /* another byte */
            (mn & ~st) != 0 ||                   /* a sign not first */
            (first & ~dg) != 0 || /* no digit first (empty, ".5", "-,") */
            ((pt << 1) & ~dg) != 0 ||  /* no digit after a point (one
                                          before it: the first-digit and
                                          two-point tests) */
            (dots & (dots >> 1)) != 0 || /* two points in one number */
            (first & codec__eq64(v, '0') & (dg >> 1)) != 0) /* "01" */
            break;
        /* the digits after a point (ends - (pt << 1): each point's next
         * digit borrows from its number's end); then, in the packed order of
         * the digits, each number's last digit (before its separator) and
         * its last before the point (its last when it has no point) */
        frac = (ends - (pt << 1)) & dg;
        nnum = (unsigned)__builtin_popcountll(ends);
        got = codec__row_block8(
            _mm512_maskz_compress_epi8(dg, x), _pext_u64(ends >> 1, dg),
            _pext_u64((pt >> 1) | ((ends >> 1) & ~frac), dg),
            _pext_u64(mn, st), nnum, out + k);
        if (got < nnum) { /* a number this loop leaves to the others */
            if (got > 0) /* the separator after the last number stored */
                done = s + __builtin_ctzll(
                               _pdep_u64(UINT64_C(1) << (got - 1), ends));
            k += got;
            break;
        }
        /* the next block's start from the masks alone, not from the values
         * just read, so the core can go on to it while they are made */
        k += nnum;
        done = s + (63 - __builtin_clzll(ends));
        if ((cl & ends) != 0 || k == room)
            break; /* the row's ']', or no more room */
        s = done + 1;
    }
    *pp = done;
    return k;
}

/* The loops this CPU has: 2 AVX-512 (then SSSE3), 1 SSSE3, 0 none; and the
 * ones in use, which tests may lower (codec__row_isa). */
static int codec__row_have, codec__row_use;

__attribute__((constructor)) static void codec__row_cpu(void)
{
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("ssse3"))
        codec__row_have = 0;
    else if (__builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") &&
             __builtin_cpu_supports("avx512vbmi") &&
             __builtin_cpu_supports("avx512vbmi2") &&
             __builtin_cpu_supports("bmi2") &&
             __builtin_cpu_supports("popcnt"))
        codec__row_have = 2;
    else
        codec__row_have = 1;
    codec__row_use = codec__row_have;
}

int codec__row_isa(int isa)
{
    codec__row_use = isa < 0 || isa > codec__row_have ? codec__row_have : isa;
    return codec__row_use;
}

size_t codec_json_row(const char **pp, const char *end, float *out,
                      size_t room)
{
    size_t k, more;
    const char *q;

    if (codec__row_use == 0)
        return 0;
    if (codec__row_use == 1)
        return codec__row_ssse3(pp, end, out, room);
    k = codec__row_avx512(pp, end, out, room);
    if (k == 0)
        return codec__row_ssse3(pp, end, out, room);
    if (k == room || **pp != ',')
        return k;
    /* the rest of the row, from the block the AVX-512 loop left, one number
     * at a time up to whatever stopped it */
    q = *pp + 1;
    more = codec__row_ssse3(&q, end, out + k, room - k);
    if (more > 0)
        *pp = q;
    return k + more;
}

#else

int codec__row_isa(int isa)
{
    (void)isa;
    return 0;
}

size_t codec_json_row(const char **pp, const char *end, float *out,
                      size_t room)
{
    (void)pp;
    (void)end;
    (void)out;
    (void)room;
    return 0;
}

#endif
