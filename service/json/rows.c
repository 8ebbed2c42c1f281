/* json/rows.c: the numeric arrays' innermost loop.
 *
 * A request's matrices are rows of numbers, written compact
 * ("0.345584,-1.30316"), spaced as json.dumps writes them
 * ("0.34558001160621643, -1.3031600713729858"), one to a line under
 * json.dumps(indent=2), with 1 to 17 significant digits and now and then
 * an exponent ("1e-05"). On CPUs with AVX-512 (VBMI2), codec_json_row
 * classifies 64 bytes at a time (json/rows_avx512.c): plain decimals at
 * fixed strides, and the blocks with exponents one after another, each
 * starting after the last separator of the one before, two read
 * together. Elsewhere an SSSE3 loop takes the compact short ones: it
 * first finds the separators of 64 bytes, so each number's extent is
 * known before it is read; per number, one 16-byte load
 * classifies its bytes (digits, the point), one shuffle gathers its digits
 * into two right-aligned groups of eight, and SWAR arithmetic turns each
 * group into an integer. With a mantissa below 2^24 and at most ten
 * decimals (both exact floats) one float division rounds correctly;
 * otherwise codec__f32_of_decimal (json.h) converts it. What neither loop
 * takes (whitespace for the SSSE3 loop; more than 19 digits, exponents of
 * three digits, decimals too near a float midpoint, the body's last bytes
 * for both) is left to the general reader (codec_json_number). */
#include "json/json.h"

#if defined(__x86_64__) && defined(__GNUC__)

#include <immintrin.h>

#define CODEC__ROW_TARGET __attribute__((target("ssse3")))

/* The powers of ten that are exact floats. */
static const float codec__pow10f[11] = {1e0f, 1e1f, 1e2f, 1e3f, 1e4f, 1e5f,
                                        1e6f, 1e7f, 1e8f, 1e9f, 1e10f};

/* Stores the float nearest to (neg ? -1 : 1) * mant / 10^f (mant < 2^53,
 * f <= 15) at out: 1, or 0 when codec__f32_of_decimal cannot be sure of it
 * (the general reader decides those). */
static inline int codec__row_value(uint64_t mant, unsigned f, unsigned neg,
                                   float *out)
{
    uint32_t fbits;
    float fv;

    if (mant >= (UINT64_C(1) << 24) || f > 10)
        return codec__f32_of_decimal(mant, -(int)f, neg, out);
    /* both exact floats: one float division rounds correctly */
    fv = (float)(uint32_t)mant / codec__pow10f[f];
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

/* The loops this CPU has: 3 AVX-512 at fixed strides (then the others), 2
 * AVX-512 (then SSSE3), 1 SSSE3, 0 none; and the ones in use, which tests
 * may lower (codec__row_isa). */
static int codec__row_have, codec__row_use;

__attribute__((constructor)) static void codec__row_cpu(void)
{
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("ssse3"))
        codec__row_have = 0;
    else if (__builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") &&
             __builtin_cpu_supports("avx512dq") &&
             __builtin_cpu_supports("avx512vbmi") &&
             __builtin_cpu_supports("avx512vbmi2") &&
             __builtin_cpu_supports("bmi2") &&
             __builtin_cpu_supports("popcnt"))
        codec__row_have = 3;
    else
        codec__row_have = 1;
    codec__row_use = codec__row_have;
}

int codec__row_isa(int isa)
{
    codec__row_use = isa < 0 || isa > codec__row_have ? codec__row_have : isa;
    return codec__row_use;
}

/* codec_json_row (any 0) and codec_json_row_any (any 1): each loop in
 * turn from where the one before stopped, the fixed-stride loop again
 * after some blocks of the block-relative one (an exponent now and then
 * stops it; the block-relative loop takes that and its neighbours). The
 * block-relative loop's share doubles each time the fixed-stride one
 * stops within a few numbers (exponents everywhere) and returns to 256
 * bytes once it runs on; the next row starts from the share this one
 * ended with (the rows of a body are mostly written alike). */
static _Thread_local size_t codec__row_span = 256;

static size_t codec__row(const char **pp, const char *end, float *out,
                         size_t room, int any)
{
    const char *q = *pp, *lim;
    size_t k = 0, n, span = codec__row_span;

    if (codec__row_use == 0)
        return 0;
    while (codec__row_use >= 2) {
        if (codec__row_use >= 3) {
            n = codec__row_stride(&q, end, out + k, room - k, any);
            span = n >= 32 ? 256 : span < ((size_t)1 << 20) ? 2 * span : span;
            codec__row_span = span;
            if (n > 0) {
                k += n;
                *pp = q;
                if (k == room || *q != ',')
                    return k;
                q++;
            }
        }
        lim = codec__row_use >= 3 && (size_t)(end - q) > span ? q + span
                                                               : end;
        n = codec__row_avx512(&q, lim, out + k, room - k, any);
        if (n == 0)
            break;
        k += n;
        *pp = q;
        if (k == room || *q != ',')
            return k;
        q++;
        if (codec__row_use < 3)
            break;
    }
    /* the rest of the row, from the block the loops above left, one
     * number at a time up to whatever stopped it */
    n = codec__row_ssse3(&q, end, out + k, room - k);
    if (n > 0)
        *pp = q;
    return k + n;
}

size_t codec_json_row(const char **pp, const char *end, float *out,
                      size_t room)
{
    return codec__row(pp, end, out, room, 0);
}

size_t codec_json_row_any(const char **pp, const char *end, float *out,
                          size_t room)
{
    return codec__row(pp, end, out, room, 1);
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

size_t codec_json_row_any(const char **pp, const char *end, float *out,
                          size_t room)
{
    return codec_json_row(pp, end, out, room);
}

#endif
