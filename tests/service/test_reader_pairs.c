/* test_reader_pairs.c: the AVX-512 row loop (json/rows_avx512.c) takes
 * the numbers of two 64-byte blocks per conversion pass; here, where one
 * pass ends and the next begins, every value it stores must be strtof's
 * and it must stop just before each number it leaves to the other
 * readers. Part of the reader_forms suite (test_reader_forms.c). */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json/json.h"
#include "test_service.h"

/* A float32 of the weights' and inputs' spreads, as a double. */
static double rp_value(void)
{
    static uint64_t state = 0x2545F4914F6CDD1Dull;
    float unit;

    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    unit = (float)((state >> 40) & 0xFFFFFF) / 16777216.0f * 4.0f - 2.0f;
    if (state % 3 != 0)
        unit *= state % 3 == 1 ? 0.1f : 0.001f;
    return (double)unit;
}

/* The AVX-512 loop reads the numbers of two blocks per pass. In 17-digit
 * rows (three a block), ", " spaced and compact: a number it leaves to
 * the other readers (a midpoint, 20 or 24 digits, a fault) at each place
 * of the first passes, rows ending in either block, and rooms ending
 * before, at and after that number. */
START_TEST(test_reader_forms_pairs)
{
    static const char *const odd[] = {
        "-0.0", "0.000012345678901234567", "-0.00000000000000000000012",
        "12345678901234567890", "1.00000005960464477539062", "16777216.5",
        "-1.0000000596046448", "01", "1.", "1e5e5", "-", "1 ", "1e"};
    static char buf[1024];
    float out[16];
    const size_t nodd = sizeof odd / sizeof odd[0];
    size_t to[16], n, i, k, c, o, len, pos, room;
    const char *p;

    /* c: 3 rooms, 15 lengths, 16 places, each odd number, 2 separators */
    for (c = 0; c < 3 * 15 * 16 * nodd * 2; c++) {
        const char *sep = c / (3 * 15 * 16 * nodd) ? "," : ", ", *s;

        len = 1 + c / 3 % 15;
        pos = c / (3 * 15) % 16; /* none when past len */
        o = c / (3 * 15 * 16) % nodd;
        room = c % 3 == 0 ? len : pos + c % 3 - 1; /* before, at it */
        room = room == 0 ? 1 : room;
        for (n = i = 0; i < len; i++) {
            n += (size_t)snprintf(buf + n, 64, "%s", i ? sep : "");
            if (i == pos)
                n += (size_t)snprintf(buf + n, 64, "%s", odd[o]);
            else
                n += (size_t)snprintf(buf + n, 64, "%.17g", rp_value());
            to[i] = n;
        }
        memcpy(buf + n, "]", 1);
        memset(buf + n + 1, ' ', 128);
        p = buf;
        k = codec_json_row_any(&p, buf + n + 129, out, room);
        ck_assert_uint_le(k, room < len ? room : len);
        ck_assert_ptr_eq(p, k ? buf + to[k - 1] : buf);
        if (o < 2 || pos >= len) /* read whole */
            ck_assert_uint_eq(k, room < len ? room : len);
        if (o >= 7 && pos < len) /* a fault: left to the general reader */
            ck_assert_uint_le(k, pos);
        for (i = 0; i < k; i++) {
            char one[64];
            float want;

            s = i ? buf + to[i - 1] + strlen(sep) : buf;
            memcpy(one, s, (size_t)(buf + to[i] - s));
            one[buf + to[i] - s] = '\0';
            want = strtof(one, NULL);
            ck_assert_msg(memcmp(&want, &out[i], 4) == 0,
                          "'%s' (%zu of %zu, %s): read %a, strtof %a", one, i,
                          len, sep, (double)out[i], (double)want);
        }
    }
}
END_TEST

/* Decimals on and a few double units either side of float32 midpoints,
 * written with 9 to 17 significant digits and exponents from -30 to 20
 * (the product of codec__row_f32x8, kept clear of each midpoint by its
 * margin, exact products included), in rows of three forms: each value
 * stored must be strtof's. */
START_TEST(test_reader_forms_midpoints)
{
    static char buf[4096];
    float out[128];
    size_t to[128], n, i, k, r;
    const char *p, *s;

    for (r = 0; r < 600; r++) {
        for (n = i = 0; i < 100; i++) {
            double v = rp_value() * (r % 3 == 0 ? 1 : r % 3 == 1 ? 1e12 : 1e-20);
            float f = (float)v;
            double mid = ((double)f + (double)nextafterf(f, 1e30f)) / 2;
            int ulps = (int)(i % 9) - 4;

            while (ulps < 0 && ulps++ < 0)
                mid = nextafter(mid, -1e300);
            while (ulps > 0 && ulps-- > 0)
                mid = nextafter(mid, 1e300);
            n += (size_t)snprintf(buf + n, 64, "%s", i ? (r & 4 ? "," : ", ")
                                                       : "");
            n += (size_t)snprintf(buf + n, 64, r & 8 ? "%.*e" : "%.*g",
                                  (int)(8 + (i + r) % 9), mid);
            to[i] = n;
        }
        memcpy(buf + n, "]", 1);
        memset(buf + n + 1, ' ', 128);
        for (s = p = buf, k = 0; k < 100;) {
            size_t got = codec_json_row_any(&p, buf + n + 129, out + k,
                                            100 - k);

            for (i = k; i < k + got; i++) {
                char one[64];
                float want;

                s = i ? buf + to[i - 1] + (buf[to[i - 1] + 1] == ' ' ? 2 : 1)
                      : buf;
                memcpy(one, s, (size_t)(buf + to[i] - s));
                one[buf + to[i] - s] = '\0';
                want = strtof(one, NULL);
                ck_assert_msg(memcmp(&want, &out[i], 4) == 0,
                              "'%s' (%zu): read %a, strtof %a", one, i,
                              (double)out[i], (double)want);
            }
            k += got;
            if (k == 100)
                break;
            /* one the loops left: skip it as the general reader would */
            p = buf + to[k] + 1;
            while (*p == ' ')
                p++;
            k++;
            if (k < 100 && got == 0 && p >= buf + n)
                break;
        }
    }
}
END_TEST

void reader_forms_pairs(TCase *tc)
{
    tcase_add_test(tc, test_reader_forms_pairs);
    tcase_add_test(tc, test_reader_forms_midpoints);
}
