/* codec_row.c: the numeric arrays' innermost loop, with SSSE3.
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
 * general reader (codec_json_number). */
#include "codec_int.h"

#if defined(__x86_64__) && defined(__GNUC__)

#include <immintrin.h>

#define CODEC__ROW_TARGET __attribute__((target("ssse3")))

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
    static const float pow10f[11] = {1e0f, 1e1f, 1e2f, 1e3f, 1e4f, 1e5f,
                                     1e6f, 1e7f, 1e8f, 1e9f, 1e10f};
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
    uint32_t fbits;
    __m128i t;
    float fv;

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
    if (mant < (UINT64_C(1) << 24) && f <= 10) {
        /* both exact floats: one float division rounds correctly */
        fv = (float)(uint32_t)mant / pow10f[f];
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

size_t codec_json_row(const char **pp, const char *end, float *out,
                      size_t room)
{
    if (!__builtin_cpu_supports("ssse3"))
        return 0;
    return codec__row_ssse3(pp, end, out, room);
}

#else

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
