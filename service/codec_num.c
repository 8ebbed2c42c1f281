/* codec_num.c: the text layout of a float32 from its shortest decimal digits
 * (dragonbox, via codec_num_cc.cc): plain notation for moderate exponents,
 * scientific otherwise, as printf's %g would lay them out. */
#include "codec_num.h"

#include <math.h>
#include <string.h>

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
    /* at most 9 significant digits for a float32 */
    k = 0;
    do {
        digits[9 - k++] = (char)('0' + sig % 10);
        sig /= 10;
    } while (sig != 0);
    memmove(digits, digits + 10 - k, (size_t)k);
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
