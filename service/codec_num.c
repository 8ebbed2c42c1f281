/* codec_num.c: the text layout of a float32 from its shortest decimal digits
 * (dragonbox, via codec_num_cc.cc): plain notation for moderate exponents,
 * scientific otherwise, as printf's %g would lay them out. Plain notation
 * takes one SSSE3 byte shuffle a number where the CPU has it; the portable
 * layout writes every notation, and the tests hold the two to the same
 * text (every float32 was compared once, 2^32 values, when the SSSE3 one
 * was written). */
#include "codec_num.h"

#include <math.h>
#include <string.h>

static const char codec__pairs[201] =
    "00010203040506070809101112131415161718192021222324252627282930313233"
    "34353637383940414243444546474849505152535455565758596061626364656667"
    "6869707172737475767778798081828384858687888990919293949596979899";

/* The layout from the digits one at a time: every notation. Used for zero,
 * non-finite values and the scientific notation, and for all values on a
 * machine without SSSE3. */
static size_t codec__format_slow(float v, uint32_t sig, int e, char *buf)
{
    char digits[10];
    int k, point, i;
    size_t len = 0;

    if (!isfinite(v)) {
        memcpy(buf, "null", 4);
        return 4;
    }
    if (signbit(v))
        buf[len++] = '-';
    if (v == 0.0f) {
        /* dragonbox needs a nonzero input; "-0" reads back as -0.0f */
        buf[len++] = '0';
        return len;
    }
    /* at most 9 significant digits for a float32, written right to left two
     * at a time (half the divisions of one at a time) */
    k = sig < 10 ? 1 : sig < 100 ? 2 : sig < 1000 ? 3 : sig < 10000 ? 4
        : sig < 100000 ? 5 : sig < 1000000 ? 6 : sig < 10000000 ? 7
        : sig < 100000000 ? 8 : 9;
    {
        char *d = digits + k;
        while (sig >= 100) {
            uint32_t q = sig / 100;
            d -= 2;
            memcpy(d, codec__pairs + 2 * (sig - q * 100), 2);
            sig = q;
        }
        if (sig >= 10)
            memcpy(d - 2, codec__pairs + 2 * sig, 2);
        else
            d[-1] = (char)('0' + sig);
    }
    /* |v| = 0.d1d2..dk * 10^point */
    point = k + e;
    if (point > 9 || point < -3) {
        /* scientific: d1.d2..dk e(point-1) */
        int x = point - 1;
        buf[len++] = digits[0];
        if (k > 1) {
            buf[len++] = '.';
            memcpy(buf + len, digits + 1, (size_t)(k - 1));
            len += (size_t)(k - 1);
        }
        buf[len++] = 'e';
        if (x < 0) {
            buf[len++] = '-';
            x = -x;
        }
        if (x >= 10)
            buf[len++] = (char)('0' + x / 10);
        buf[len++] = (char)('0' + x % 10);
    } else if (point <= 0) {
        /* 0.000ddd */
        buf[len++] = '0';
        buf[len++] = '.';
        for (i = 0; i < -point; i++)
            buf[len++] = '0';
        memcpy(buf + len, digits, (size_t)k);
        len += (size_t)k;
    } else if (point >= k) {
        /* integer: digits then zeros */
        memcpy(buf + len, digits, (size_t)k);
        len += (size_t)k;
        for (i = k; i < point; i++)
            buf[len++] = '0';
    } else {
        memcpy(buf + len, digits, (size_t)point);
        len += (size_t)point;
        buf[len++] = '.';
        memcpy(buf + len, digits + point, (size_t)(k - point));
        len += (size_t)(k - point);
    }
    return len;
}

#if defined(__x86_64__) && defined(__GNUC__)

#include <immintrin.h>

/* Digit count (1 to 9) of sig > 0: digits_min[b] is that of 2^b,
 * the least value with b + 1 bits, and a range [2^b, 2^(b+1)) holds at most
 * one power of ten. */
static int codec__digits(uint32_t sig)
{
    static const unsigned char digits_min[32] = {
        1, 1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4, 4, 5, 5,
        5, 6, 6, 6, 7, 7, 7, 7, 8, 8, 8, 9, 9, 9, 10, 10};
    static const uint32_t pow10[11] = {1,         10,        100,
                                       1000,      10000,     100000,
                                       1000000,   10000000,  100000000,
                                       1000000000, 0xFFFFFFFFu};
    int t = digits_min[31 - __builtin_clz(sig)];

    return t + (sig >= pow10[t]);
}

/* Eight decimal digits of x (< 10^8) as ASCII, the most significant in the
 * lowest byte (first in memory): x split into 4 + 4, 2 + 2, 1 + 1 digits in
 * the lanes of one 64-bit word, divisions by 100 and 10 done as
 * multiply-shifts that are exact in these ranges (checked for every x). */
static inline __attribute__((always_inline)) uint64_t codec__ascii8(uint32_t x)
{
    uint64_t hi = x / 10000, lo = x % 10000;
    uint64_t merged = hi | (lo << 32);
    uint64_t top = ((merged * 10486) >> 20) & ((UINT64_C(0x7F) << 32) | 0x7F);
    uint64_t bot = merged - 100 * top;
    uint64_t hundreds = (bot << 16) + top;
    uint64_t tens = (hundreds * 103) >> 10;

    tens &= (UINT64_C(0xF) << 48) | (UINT64_C(0xF) << 32) |
            (UINT64_C(0xF) << 16) | UINT64_C(0xF);
    tens += (hundreds - 10 * tens) << 8;
    return tens | UINT64_C(0x3030303030303030);
}

/* Every plain layout of k digits (1 to 9) with the point at `point` (-3 to
 * 9, |v| = 0.d1..dk * 10^point) is one byte shuffle of the vector
 * [the 9 digits of sig, leading zeros included] '.' '0':
 * codec__place[k - 1][point + 3], and the text's length beside it. Lanes
 * past the text get 0x80 (zero bytes, scratch the caller writes over). */
static __m128i codec__place[9][13];
static unsigned char codec__place_len[9][13];
static int codec__ssse3;

__attribute__((constructor)) static void codec__place_init(void)
{
    int k, point, i;

    for (k = 1; k <= 9; k++)
        for (point = -3; point <= 9; point++) {
            unsigned char b[16];
            int n = 0, first = 9 - k; /* lane of the first digit */
            memset(b, 0x80, sizeof b);
            if (point <= 0) { /* 0.000ddd */
                b[n++] = 10;
                b[n++] = 9;
                for (i = 0; i < -point; i++)
                    b[n++] = 10;
                for (i = 0; i < k; i++)
                    b[n++] = (unsigned char)(first + i);
            } else if (point >= k) { /* ddd000 */
                for (i = 0; i < k; i++)
                    b[n++] = (unsigned char)(first + i);
                for (i = k; i < point; i++)
                    b[n++] = 10;
            } else { /* dd.ddd */
                for (i = 0; i < k; i++) {
                    if (i == point)
                        b[n++] = 9;
                    b[n++] = (unsigned char)(first + i);
                }
            }
            memcpy(&codec__place[k - 1][point + 3], b, sizeof b);
            codec__place_len[k - 1][point + 3] = (unsigned char)n;
        }
    __builtin_cpu_init(); /* a constructor may run before libgcc's */
    codec__ssse3 = __builtin_cpu_supports("ssse3");
}

/* The plain layout without a branch on the value: the nine digits of sig
 * (right-aligned, so independent of its digit count), then one shuffle
 * and one 16-byte store. */
__attribute__((target("ssse3"))) static size_t
codec__layout_ssse3(uint32_t neg, uint32_t sig, int k, int point, char *buf)
{
    uint64_t a8 = codec__ascii8(sig % 100000000);
    uint64_t head = ('0' + sig / 100000000) | (a8 << 8);
    uint64_t tail = (a8 >> 56) | ((uint64_t)'.' << 8) | ((uint64_t)'0' << 16);
    __m128i d = _mm_set_epi64x((long long)tail, (long long)head);

    d = _mm_shuffle_epi8(
        d, _mm_load_si128(&codec__place[k - 1][point + 3]));
    buf[0] = '-';
    _mm_storeu_si128((__m128i *)(void *)(buf + neg), d);
    return neg + codec__place_len[k - 1][point + 3];
}

#endif

size_t codec_num_layout(float v, uint32_t sig, int e, char *buf)
{
#if defined(__x86_64__) && defined(__GNUC__)
    if (sig != 0 && codec__ssse3) {
        /* |v| = 0.d1..dk * 10^point, k <= 9 */
        int k = codec__digits(sig), point = k + e;
        if (point <= 9 && point >= -3)
            return codec__layout_ssse3(signbit(v) ? 1u : 0u, sig, k, point,
                                       buf);
    }
#endif
    return codec__format_slow(v, sig, e, buf);
}

/* The shortest digits of v as codec_num_shortest_n gives them: sig 0 (and
 * *e 0) for zero and non-finite values. */
static uint32_t codec__shortest(float v, int *e)
{
    uint32_t sig = 0;

    *e = 0;
    if (isfinite(v) && v != 0.0f)
        codec_num_shortest(v, &sig, e);
    return sig;
}

size_t codec_num_format_portable(float v, char *buf)
{
    int e;
    uint32_t sig = codec__shortest(v, &e);

    return codec__format_slow(v, sig, e, buf);
}

size_t codec_num_format(float v, char *buf)
{
    int e;
    uint32_t sig = codec__shortest(v, &e);

    return codec_num_layout(v, sig, e, buf);
}
