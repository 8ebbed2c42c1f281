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

size_t codec_num_format(float v, char *buf)
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
