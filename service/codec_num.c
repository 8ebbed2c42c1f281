/* codec_num.c: the text layout of a float32 from its shortest decimal digits
 * (dragonbox, via codec_num_cc.cc): plain notation for moderate exponents,
 * scientific otherwise, as printf's %g would lay them out. */
#include "codec_num.h"

#include <math.h>
#include <string.h>

static const char codec__pairs[201] =
    "00010203040506070809101112131415161718192021222324252627282930313233"
    "34353637383940414243444546474849505152535455565758596061626364656667"
    "6869707172737475767778798081828384858687888990919293949596979899";

/* The layout from the digits one at a time: every notation, used for the
 * scientific one. */
static size_t codec__format_slow(float v, char *buf)
{
    char digits[10];
    uint32_t sig;
    int e, k, point, i;
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
    codec_num_shortest(v, &sig, &e);
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

/* Eight decimal digits of x (< 10^8) as ASCII, the most significant in the
 * lowest byte (first in memory): x split into 4 + 4, 2 + 2, 1 + 1 digits in
 * the lanes of one 64-bit word, divisions by 100 and 10 done as
 * multiply-shifts that are exact in these ranges (checked for every x). */
static uint64_t codec__ascii8(uint32_t x)
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

/* The digits of a float32 number vary in count (1 to 9) and place from one
 * value to the next, so a loop per digit mispredicts a few branches a
 * number: here the nine digits are made and stored eight at a time, and
 * the text's length and the point's place are arithmetic. */
size_t codec_num_format(float v, char *buf)
{
    static const uint32_t pow10[10] = {1,      10,      100,      1000,
                                       10000,  100000,  1000000,  10000000,
                                       100000000, 1000000000};
    uint32_t sig, s9;
    uint64_t lo, d8;
    int e, k, point;
    size_t len;

    if (!isfinite(v) || v == 0.0f)
        return codec__format_slow(v, buf);
    codec_num_shortest(v, &sig, &e);
    /* |v| = 0.d1..dk * 10^point, k <= 9 */
    k = 1 + (sig >= 10) + (sig >= 100) + (sig >= 1000) + (sig >= 10000) +
        (sig >= 100000) + (sig >= 1000000) + (sig >= 10000000) +
        (sig >= 100000000);
    point = k + e;
    if (point > 9 || point < -3)
        return codec__format_slow(v, buf);
    len = signbit(v) ? 1 : 0;
    buf[0] = '-';
    /* nine digits, the ones past the k-th zero: bytes 0..7 and byte 8 */
    s9 = sig * pow10[9 - k];
    lo = (uint64_t)('0' + s9 / 100000000) |
         (codec__ascii8(s9 % 100000000) << 8);
    d8 = '0' + s9 % 10;
    if (point >= k) {
        /* an integer: the digits, then zeros up to the point (point <= 9,
         * and the digits past the k-th are zeros already) */
        memcpy(buf + len, &lo, 8);
        buf[len + 8] = (char)d8;
        return len + (size_t)point;
    }
    if (point <= 0) {
        /* 0.000ddd: "0." and -point zeros, then the k digits */
        const uint64_t zeros = UINT64_C(0x3030303030302e30); /* "0.000000" */
        memcpy(buf + len, &zeros, 8);
        len += (size_t)(2 - point);
        memcpy(buf + len, &lo, 8);
        buf[len + 8] = (char)d8;
        return len + (size_t)k;
    }
    /* d1..dp.dp+1..dk (1 <= point <= 8): all nine digits, then the ones
     * from the point on stored again one place to the right, after '.' */
    {
        uint64_t tail = (point < 8 ? lo >> (8 * point) : 0) |
                        (d8 << (8 * (8 - point)));
        memcpy(buf + len, &lo, 8);
        memcpy(buf + len + (size_t)point + 1, &tail, 8);
        buf[len + (size_t)point] = '.';
        return len + (size_t)k + 1;
    }
}
