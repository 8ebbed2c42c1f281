/* test_reader_forms.c: the numeric arrays are read to the same float32
 * values whatever form a client writes them in: compact or ", " spaced,
 * one to a line as json.dumps(indent=2) writes them, 1 to 17 significant
 * digits, exponents, negative zero. Every value must equal strtof of its
 * text bit for bit (glibc's strtof rounds correctly, ties to even), with
 * each row loop this CPU has (AVX-512 at fixed strides, AVX-512 block by
 * block, SSSE3, none), including decimals at and next to float32 rounding
 * midpoints, subnormals, the largest float and long rows whose numbers
 * fall on every offset of the AVX-512 loops' 64-byte blocks. Values
 * beyond float32 are refused as out of range and malformed numbers inside
 * long rows as invalid JSON. */
#include <check.h>
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json/json.h"
#include "json/text.h"
#include "test_service.h"

/* -- a growable text and the numbers written into it ------------------- */

/* The body in the service's text buffer (json/text.h; zeroed is empty). */
typedef struct rf_text {
    text_buf text;
    /* where each number starts and ends in text, in order */
    size_t *at, *to, count, room;
} rf_text;

static void rf_put(rf_text *t, const char *s, size_t n)
{
    text_append(&t->text, s, n);
    TS_REQUIRE(!text_failed(&t->text), "out of memory for the body");
}

static void rf_puts(rf_text *t, const char *s)
{
    rf_put(t, s, strlen(s));
}

/* Appends one number's text, remembering where it lies. */
static void rf_number(rf_text *t, const char *num)
{
    if (t->count == t->room) {
        t->room = t->room ? t->room * 2 : 1024;
        t->at = realloc(t->at, t->room * sizeof *t->at);
        t->to = realloc(t->to, t->room * sizeof *t->to);
        TS_REQUIRE(t->at != NULL && t->to != NULL,
                   "out of memory for the lists");
    }
    t->at[t->count] = t->text.len;
    rf_puts(t, num);
    t->to[t->count++] = t->text.len;
}

static void rf_free(rf_text *t)
{
    text_free(&t->text);
    free(t->at);
    free(t->to);
    memset(t, 0, sizeof *t);
}

/* The layouts: compact, json.dumps' default ", ", json.dumps(indent=2)
 * (the matrix as the value of a member, so rows sit at depth 2 and
 * numbers at depth 3). */
enum { RF_COMPACT, RF_SPACED, RF_INDENT, RF_LAYOUTS };

static void rf_newline(rf_text *t, int depth)
{
    int i;

    rf_put(t, "\n", 1);
    for (i = 0; i < 2 * depth; i++)
        rf_put(t, " ", 1);
}

/* A [rows][cols] matrix of nums[0 .. rows * cols) in layout. */
static void rf_matrix(rf_text *t, int layout, char (*nums)[64], size_t rows,
                      size_t cols)
{
    size_t r, c;

    rf_put(t, "[", 1);
    for (r = 0; r < rows; r++) {
        if (r)
            rf_puts(t, layout == RF_SPACED ? ", " : ",");
        if (layout == RF_INDENT)
            rf_newline(t, 2);
        rf_put(t, "[", 1);
        for (c = 0; c < cols; c++) {
            if (c)
                rf_puts(t, layout == RF_SPACED ? ", " : ",");
            if (layout == RF_INDENT)
                rf_newline(t, 3);
            rf_number(t, nums[r * cols + c]);
        }
        if (layout == RF_INDENT)
            rf_newline(t, 2);
        rf_put(t, "]", 1);
    }
    if (layout == RF_INDENT)
        rf_newline(t, 1);
    rf_put(t, "]", 1);
}

/* The float32 strtof reads from the number text [at, to) of t. */
static float rf_want(const rf_text *t, size_t i)
{
    char one[128], *e;
    size_t n = t->to[i] - t->at[i];
    float v;

    TS_REQUIRE(n < sizeof one, "number %zu takes %zu bytes", i, n);
    memcpy(one, t->text.data + t->at[i], n);
    one[n] = '\0';
    v = strtof(one, &e);
    TS_REQUIRE(*e == '\0', "'%s' is not all a number", one);
    return v;
}

/* Parses t as a rank-2 array and holds every value to strtof's, bit for
 * bit, with each row loop this CPU has. */
static void rf_check(const rf_text *t, size_t rows, size_t cols,
                     const char *what)
{
    int have = codec__row_isa(-1), isa;
    size_t i;

    for (isa = have; isa >= 0; isa--) {
        codec_reader r;
        codec_array a;
        codec_error err;

        memset(&err, 0, sizeof err);
        codec__row_isa(isa);
        codec_reader_init(&r, t->text.data, t->text.len, NULL);
        TS_REQUIRE(codec_array_parse(&r, "/x", "[n][d_model]",
                                     CODEC_LEAF_F32, 2, 2, &a, &err) == 0,
                   "%s, row loop %d: %s", what, isa, err.message);
        ck_assert_uint_eq(a.shape[0], rows);
        ck_assert_uint_eq(a.shape[1], cols);
        ck_assert_uint_eq(a.count, t->count);
        for (i = 0; i < t->count; i++) {
            float want = rf_want(t, i), got = ((const float *)a.data)[i];
            TS_REQUIRE(memcmp(&want, &got, sizeof want) == 0,
                       "%s, row loop %d, value %zu '%.*s': read %a, "
                       "strtof %a", what, isa, i,
                       (int)(t->to[i] - t->at[i]), t->text.data + t->at[i],
                       (double)got, (double)want);
        }
        codec_array_clear(&a);
    }
    codec__row_isa(-1);
}

/* -- the values and the ways clients write them ------------------------ */

#define RF_SEED 0x9E3779B97F4A7C15ull
static uint64_t rf_state = RF_SEED;

/* Each test starts from the same state, forked or not (CK_FORK=no). */
static void rf_reset(void)
{
    rf_state = RF_SEED;
}

static uint64_t rf_rand(void)
{
    rf_state ^= rf_state << 13;
    rf_state ^= rf_state >> 7;
    rf_state ^= rf_state << 17;
    return rf_state;
}

/* A float32 of one of the spreads requests carry: weights of (-0.1, 0.1),
 * inputs of (-1, 1), magnitudes from 1e-8 to 1e3 (many written with
 * exponents), and now and then zero, -0.0, or any finite bit pattern. */
static float rf_value(void)
{
    uint64_t u = rf_rand();
    float unit = (float)((u >> 40) & 0xFFFFFF) / 16777216.0f * 2.0f - 1.0f;
    uint32_t bits;
    float v;

    switch (u % 16) {
    case 0:
        return (u >> 8) & 1 ? -0.0f : 0.0f;
    case 1:
        do {
            bits = (uint32_t)(rf_rand() >> 16);
            memcpy(&v, &bits, sizeof v);
        } while (!isfinite(v));
        return v;
    case 2: case 3: case 4:
        return (unit < 0 ? -1.0f : 1.0f) *
               powf(10.0f, -8.0f + 11.0f * fabsf(unit));
    case 5: case 6: case 7:
        return unit;
    default:
        return unit * 0.1f;
    }
}

/* The shortest digits of v laid out as Python's repr lays out a float
 * ("0.0001", "3.0", "1e-05", "3.4028235e+38"): what json.dumps writes for
 * a client's float32 values rounded to their shortest digits. */
static void rf_python(float v, char *buf)
{
    char d[32];
    uint32_t sig;
    int exp, k, point, i;
    size_t n = 0;

    if (signbit(v))
        buf[n++] = '-';
    if (v == 0.0f) {
        strcpy(buf + n, "0.0");
        return;
    }
    codec_num_shortest(v, &sig, &exp);
    k = snprintf(d, sizeof d, "%u", sig);
    point = k + exp; /* |v| = 0.d1..dk * 10^point */
    if (point < -3 || point > 16) {
        buf[n++] = d[0];
        if (k > 1)
            n += (size_t)sprintf(buf + n, ".%s", d + 1);
        sprintf(buf + n, "e%c%02d", point - 1 < 0 ? '-' : '+',
                abs(point - 1));
    } else if (point <= 0) {
        n += (size_t)sprintf(buf + n, "0.");
        for (i = 0; i < -point; i++)
            buf[n++] = '0';
        strcpy(buf + n, d);
    } else if (point >= k) {
        n += (size_t)sprintf(buf + n, "%s", d);
        for (i = k; i < point; i++)
            buf[n++] = '0';
        strcpy(buf + n, ".0");
    } else {
        sprintf(buf + n, "%.*s.%s", point, d, d + point);
    }
}

/* Writes v as form f: 0 shortest (Python), 1 %.17g (NumPy's tolist and
 * JavaScript), 2 %.9g, 3 %.8e, 4 %.{p}g for p of 1 to 17 (which need not
 * read back to v), 5 %.6g. Returns whether the text reads back to v. */
static int rf_write(int f, float v, char *buf)
{
    switch (f) {
    case 0: rf_python(v, buf); return 1;
    case 1: snprintf(buf, 64, "%.17g", (double)v); return 1;
    case 2: snprintf(buf, 64, "%.9g", (double)v); return 1;
    case 3: snprintf(buf, 64, "%.8e", (double)v); return 1;
    case 4:
        snprintf(buf, 64, "%.*g", 1 + (int)(rf_rand() % 17), (double)v);
        return 0;
    default: snprintf(buf, 64, "%.6g", (double)v); return 0;
    }
}

#define RF_FORMS 6
static const char *const rf_form_name[RF_FORMS] = {
    "shortest digits (json.dumps)", "17 digits (tolist, JavaScript)",
    "%.9g", "%.8e", "1 to 17 digits", "%.6g"};
static const char *const rf_layout_name[RF_LAYOUTS] = {
    "compact", "\", \" spaced", "indent=2"};

/* Every form in every layout reads to strtof's float32 of each text, and
 * the forms that round-trip read back to the very values written: the
 * same float32 whichever of them a client sends. */
START_TEST(test_reader_forms_same_values)
{
    const size_t rows = 4, cols = 700;
    float *v = malloc(rows * cols * sizeof *v);
    char (*nums)[64] = malloc(rows * cols * sizeof *nums);
    int f, layout;
    size_t i;

    ck_assert(v != NULL && nums != NULL);
    for (i = 0; i < rows * cols; i++)
        v[i] = rf_value();
    for (f = 0; f < RF_FORMS; f++)
        for (layout = 0; layout < RF_LAYOUTS; layout++) {
            rf_text t = {0};
            char what[96];
            int exact = 1;

            for (i = 0; i < rows * cols; i++)
                exact &= rf_write(f, v[i], nums[i]);
            rf_matrix(&t, layout, nums, rows, cols);
            snprintf(what, sizeof what, "%s, %s", rf_form_name[f],
                     rf_layout_name[layout]);
            rf_check(&t, rows, cols, what);
            if (exact) /* and strtof reads back v itself */
                for (i = 0; i < rows * cols; i++) {
                    float w = rf_want(&t, i);
                    TS_REQUIRE(memcmp(&w, &v[i], sizeof w) == 0,
                               "%s: '%s' is not %a", what, nums[i],
                               (double)v[i]);
                }
            rf_free(&t);
        }
    free(v);
    free(nums);
}
END_TEST

/* The edge cases, each at every offset of a 64-byte block: rows of
 * fillers of 1 to 22 bytes with the case at each place, compact, spaced
 * and indented. */
static void rf_edges(const char *const *cases, size_t ncases,
                     const char *what)
{
    const size_t cols = 160;
    char (*nums)[64] = malloc(ncases * cols * sizeof *nums);
    size_t c, i;
    int layout;

    ck_assert_ptr_nonnull(nums);
    for (c = 0; c < ncases; c++)
        for (i = 0; i < cols; i++) {
            /* fillers of varying length, so the case moves across the
             * blocks from row to row */
            static const char *const fill[] = {
                "1", "-2", "0.5", "-0.25", "12.345", "0.034558001160621643",
                "-0.34558001160621643", "1e-05", "-3.4558e-05", "7",
                "123456.78", "0.1", "-1.30316"};
            if (i % 23 == (c * 7) % 23)
                snprintf(nums[c * cols + i], 64, "%s", cases[c]);
            else
                snprintf(nums[c * cols + i], 64, "%s",
                         fill[(i * 5 + c * 3) %
                              (sizeof fill / sizeof fill[0])]);
        }
    for (layout = 0; layout < RF_LAYOUTS; layout++) {
        rf_text t = {0};
        char name[96];

        rf_matrix(&t, layout, nums, ncases, cols);
        snprintf(name, sizeof name, "%s, %s", what, rf_layout_name[layout]);
        rf_check(&t, ncases, cols, name);
        rf_free(&t);
    }
    free(nums);
}

START_TEST(test_reader_forms_edges)
{
    static const char *const cases[] = {
        "-0.0", "-0", "0", "0.0", "-0e5", "0e-5", "0.000", "-0.00000000",
        "1e-45", "1.4e-45", "1.401298464324817e-45", "7.1e-46", "7e-46",
        "1e-40", "1.1754942e-38", "1.17549435e-38", "1.1754943508222875e-38",
        "3.4028235e38", "3.4028235e+38", "3.4028234663852886e+38",
        "340282346638528859811704183484516925440", "1e38", "-3.4028235E38",
        "16777217", "16777216.5", "0.30000001192092896", "1e-05", "1E-5",
        "3.4e+38", "1e+00", "1.5e0", "25e-1", "0.1e1", "9.999999999999999e-5",
        "0.00000000000000000000000001", "123456789012345678",
        "1234567890123456789", "12345678901234567890123",
        "0.12345678901234567890123", "99999999999999999999", "4e-38",
        "1e-99", "1e-100", "-1e-300", "1.0000000596046448",
        "1.00000005960464477539062", "1.0000000596046447753906251",
        "0.000099999997473787516", "2.5e-05", "-7.0064923216240861e-46"};
    char (*mids)[64];
    const char **list;
    size_t n = 0, i;

    rf_edges(cases, sizeof cases / sizeof cases[0], "edge cases");

    /* decimals at and next to float32 rounding midpoints: the exact
     * midpoint (many digits), 17 digits either side of it, and the double
     * next to it either way in 17 digits */
    mids = malloc(6 * 400 * sizeof *mids);
    list = malloc(6 * 400 * sizeof *list);
    ck_assert(mids != NULL && list != NULL);
    for (i = 0; i < 400; i++) {
        float a;
        double m;
        uint32_t bits = (uint32_t)(rf_rand() >> 33) % 0x7F000000u;

        if (i % 4 == 0)
            bits = 0x3F800000u + (uint32_t)(rf_rand() % 0x800000u); /* [1,2) */
        if (i % 4 == 1) /* weights' magnitudes */
            bits = 0x3A000000u + (uint32_t)(rf_rand() % 0x4000000u);
        memcpy(&a, &bits, sizeof a);
        m = ((double)a + (double)nextafterf(a, INFINITY)) / 2;
        snprintf(mids[n], 64, "%.40g", m);
        list[n] = mids[n];
        n++;
        snprintf(mids[n], 64, "%.17g", m);
        list[n] = mids[n];
        n++;
        snprintf(mids[n], 64, "%.16e", nextafter(m, 0));
        list[n] = mids[n];
        n++;
        snprintf(mids[n], 64, "%.17g", nextafter(m, INFINITY));
        list[n] = mids[n];
        n++;
        snprintf(mids[n], 64, "-%.17g", nextafter(nextafter(m, 0), 0));
        list[n] = mids[n];
        n++;
        snprintf(mids[n], 64, "%.19g", m * (1 + 0x1p-52));
        list[n] = mids[n];
        n++;
    }
    rf_edges(list, n, "float32 midpoints");
    free(mids);
    free(list);
}
END_TEST

/* The bits of some of the edge cases, beyond agreeing with strtof. */
START_TEST(test_reader_forms_bits)
{
    static const struct {
        const char *text;
        uint32_t bits;
    } cases[] = {
        {"-0.0", 0x80000000u},      {"-0", 0x80000000u},
        {"-0e-5", 0x80000000u},     {"0.0", 0u},
        {"1e-45", 0x00000001u},     {"-1e-45", 0x80000001u},
        {"3.4028235e38", 0x7F7FFFFFu}, {"3.4028235e+38", 0x7F7FFFFFu},
        {"-3.4028234663852886e+38", 0xFF7FFFFFu},
        {"1.1754942e-38", 0x007FFFFFu}, {"1.17549435e-38", 0x00800000u},
        {"16777217", 0x4B800000u},  /* a midpoint: to even */
        {"16777219", 0x4B800002u},  /* a midpoint: to even, up */
        {"0.34558001160621643", 0x3EB0EFDDu}};
    char body[4096];
    size_t i, k;
    int have = codec__row_isa(-1), isa;

    for (isa = have; isa >= 0; isa--) {
        codec__row_isa(isa);
        for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
            codec_reader r;
            codec_array a;
            codec_error err;
            size_t n = 0;
            uint32_t got;

            /* a long row with the case in the middle, so the block loop
             * meets it */
            n += (size_t)snprintf(body + n, sizeof body - n, "[");
            for (k = 0; k < 40; k++)
                n += (size_t)snprintf(body + n, sizeof body - n, "%s, ",
                                      k == 20 ? cases[i].text : "0.125");
            n += (size_t)snprintf(body + n, sizeof body - n, "1]");
            memset(&err, 0, sizeof err);
            codec_reader_init(&r, body, n, NULL);
            ck_assert_int_eq(codec_array_parse(&r, "/x", "[k]",
                                               CODEC_LEAF_F32, 1, 1, &a,
                                               &err), 0);
            memcpy(&got, (const float *)a.data + 20, sizeof got);
            ck_assert_msg(got == cases[i].bits, "'%s', row loop %d: 0x%08x, "
                          "expected 0x%08x", cases[i].text, isa, got,
                          cases[i].bits);
            codec_array_clear(&a);
        }
    }
    codec__row_isa(-1);
}
END_TEST

/* Values beyond float32 are refused as out of range, with the element's
 * pointer, in any form and at any place of a long row. */
START_TEST(test_reader_forms_overflow)
{
    static const char *const big[] = {
        "3.4028236e38", "3.5e38", "1e39", "-1e39", "1e+300", "-3.5E+38",
        "340282356779733661637539395458142568448", /* the midpoint above
                                                      FLT_MAX: to even,
                                                      2^128 */
        "3.40282356779733661637539395458142568448e38", "1e400"};
    char body[8192];
    size_t i, k, at;
    int have = codec__row_isa(-1), isa;

    for (isa = have; isa >= 0; isa--) {
        codec__row_isa(isa);
        for (i = 0; i < sizeof big / sizeof big[0]; i++)
            for (at = 0; at < 70; at += 13) {
                codec_reader r;
                codec_array a;
                codec_error err;
                size_t n = 0;
                char ptr[32];

                n += (size_t)snprintf(body + n, sizeof body - n, "[");
                for (k = 0; k < 80; k++)
                    n += (size_t)snprintf(body + n, sizeof body - n, "%s%s",
                                          k ? (at & 1 ? ", " : ",") : "",
                                          k == at ? big[i] : "-0.5");
                n += (size_t)snprintf(body + n, sizeof body - n, "]");
                memset(&err, 0, sizeof err);
                codec_reader_init(&r, body, n, NULL);
                ck_assert_int_eq(codec_array_parse(&r, "/x", "[k]",
                                                   CODEC_LEAF_F32, 1, 1, &a,
                                                   &err), -1);
                ck_assert_int_eq(err.kind, ERRORS_INVALID_REQUEST);
                snprintf(ptr, sizeof ptr, "/x/%zu", at);
                ck_assert_str_eq(err.field, ptr);
                ck_assert_msg(strstr(err.message, "out of range") != NULL,
                              "'%s': %s", big[i], err.message);
            }
    }
    codec__row_isa(-1);
}
END_TEST

/* Malformed numbers inside long rows, in every layout, are invalid JSON:
 * the block loops leave them to the general reader, which says so. */
START_TEST(test_reader_forms_invalid)
{
    static const char *const bad[] = {
        "01", "-01", "1.", "-", ".5", "-.5", "1e", "1e+", "1E-", "+1",
        "1.5.5", "1e5e5", "1e5.5", "1..5", "--1", "1-1", "1+1", "0x10",
        "1 2", "1\t2", "", " ", "1,,2", "1, ,2", "NaN", "Infinity",
        "-Infinity", "1f", "1e5f", "\"1\"", "1\x01", "\x7f", "1e-+5",
        "1e+-5", "e5", "E5", ".", "-e5"};
    char body[8192];
    size_t i, k, at;
    int have = codec__row_isa(-1), isa, layout;

    for (isa = have; isa >= 0; isa--) {
        codec__row_isa(isa);
        for (i = 0; i < sizeof bad / sizeof bad[0]; i++)
            for (layout = 0; layout < RF_LAYOUTS; layout++)
                for (at = 0; at < 70; at += 11) {
                    codec_reader r;
                    codec_array a;
                    codec_error err;
                    size_t n = 0;
                    const char *sep = layout == RF_COMPACT  ? ","
                                      : layout == RF_SPACED ? ", "
                                                            : ",\n      ";

                    n += (size_t)snprintf(body + n, sizeof body - n, "[");
                    for (k = 0; k < 80; k++)
                        n += (size_t)snprintf(body + n, sizeof body - n,
                                              "%s%s", k ? sep : "",
                                              k == at ? bad[i]
                                                      : "0.34558001160621643");
                    n += (size_t)snprintf(body + n, sizeof body - n, "]");
                    memset(&err, 0, sizeof err);
                    codec_reader_init(&r, body, n, NULL);
                    ck_assert_msg(codec_array_parse(&r, "/x", "[k]",
                                                    CODEC_LEAF_F32, 1, 1, &a,
                                                    &err) == -1,
                                  "'%s' at %zu, %s, row loop %d accepted",
                                  bad[i], at, rf_layout_name[layout], isa);
                    ck_assert_msg(err.kind == ERRORS_INVALID_JSON ||
                                      err.kind == ERRORS_INVALID_REQUEST,
                                  "'%s': %s", bad[i], err.message);
                }
    }
    codec__row_isa(-1);
}
END_TEST

/* Long rows in every layout and number form with a random fault or two
 * (a byte inserted, dropped or replaced by one the grammar cares about)
 * are read the same by every row loop and by the general reader alone:
 * the same values, or the same error kind at the same pointer. */
START_TEST(test_reader_forms_mutated_same_everywhere)
{
    static const char faults[] = " ,-0.\ne+1\t]x[E";
    static char body[4096], base[4096];
    int have = codec__row_isa(-1), round, failed = 0;

    for (round = 0; round < 6000; round++) {
        size_t n = 0, k, count = 20 + rf_rand() % 60;
        int layout = (int)(rf_rand() % RF_LAYOUTS), isa, m;
        const char *sep = layout == RF_COMPACT  ? ","
                          : layout == RF_SPACED ? ", "
                                                : ",\n      ";
        float first[256];
        codec_error first_err;
        int first_rc = 0;
        size_t first_count = 0;

        base[n++] = '[';
        for (k = 0; k < count; k++) {
            char num[64];
            rf_write((int)(rf_rand() % RF_FORMS), rf_value(), num);
            n += (size_t)snprintf(base + n, sizeof base - n, "%s%s",
                                  k ? sep : "", num);
        }
        base[n++] = ']';
        memcpy(body, base, n);
        for (m = 0; m < 1 + (int)(rf_rand() % 2); m++) {
            size_t at = rf_rand() % n;
            char c = faults[rf_rand() % (sizeof faults - 1)];
            switch (rf_rand() % 3) {
            case 0: /* insert */
                memmove(body + at + 1, body + at, n - at);
                body[at] = c;
                n++;
                break;
            case 1: /* drop */
                memmove(body + at, body + at + 1, n - at - 1);
                n--;
                break;
            default:
                body[at] = c;
            }
        }
        for (isa = have; isa >= 0; isa--) {
            codec_reader r;
            codec_array a;
            codec_error err;
            int rc;

            codec__row_isa(isa);
            memset(&err, 0, sizeof err);
            memset(&a, 0, sizeof a);
            codec_reader_init(&r, body, n, NULL);
            rc = codec_array_parse(&r, "/x", "[k]", CODEC_LEAF_F32, 1, 1, &a,
                                   &err);
            if (rc == 0) {
                codec_json_ws(&r);
                if (r.p != r.end)
                    rc = 2; /* text after the row */
            }
            if (isa == have) {
                first_rc = rc;
                first_err = err;
                first_count = a.count;
                if (rc == 0)
                    memcpy(first, a.data, a.count * sizeof *first);
            } else if (rc != first_rc ||
                       (rc == -1 && (err.kind != first_err.kind ||
                                     strcmp(err.field, first_err.field))) ||
                       (rc == 0 && (a.count != first_count ||
                                    memcmp(first, a.data,
                                           a.count * sizeof *first)))) {
                if (failed++ < 5)
                    fprintf(stderr,
                            "row loop %d: rc %d kind %d field '%s' (%s); "
                            "row loop %d: rc %d kind %d field '%s' (%s); "
                            "body %.*s\n",
                            have, first_rc, (int)first_err.kind,
                            first_err.field, first_err.message, isa, rc,
                            (int)err.kind, err.field, err.message, (int)n,
                            body);
            }
            if (rc == 0 || rc == 2)
                codec_array_clear(&a);
        }
    }
    codec__row_isa(-1);
    ck_assert_int_eq(failed, 0);
}
END_TEST

/* The fixed-stride loop carries a number's state across its 64-byte
 * blocks and its batches of 32. codec_json_row_any from a row's
 * start, with room for all of it, runs that loop from there, so its block
 * i starts at byte 1 + 64 i of the row: a fault put on either side of
 * block seams and of the first batch seams may only stop it. Whatever it
 * takes must be the numbers the general reader finds before the first
 * fault, each read as the general reader reads it, and it must stop just
 * before the separator after the last. */
START_TEST(test_reader_forms_stride_seams)
{
    static const char *const faults[] = {
        "01",   "1.",   "-",    "1..2", "-.5",  "1 ",   " ,",   ",",
        "-0",   "0.",   "1.2.", "+1",   "--1",  "00",   "1e5",  ".",
        "0-",   "9.-",  "-01",  "1.5.", "\n ",  "]",    "1]",   " 1",
        "0.0",  "-9",   "5",    "12345678901234567890123456", "x"};
    static const size_t seams[] = {1 + 64, 1 + 128, 1 + 960, 1 + 1024,
                                   1 + 1088, 1 + 2048};
    static char body[8192], row[8192];
    static float out[2048];
    int have = codec__row_isa(-1), layout, taken = 0;
    size_t f, n0, z;

    ck_assert_int_ge(have, 1);
    for (layout = 0; layout < 2; layout++) {
        const char *sep = layout ? ", " : ",";
        size_t k;

        /* a row of weights as json.dumps writes them (16 to 17 digits, no
         * exponent), a third negative, over two batches */
        n0 = 0;
        row[n0++] = '[';
        for (k = 0; n0 < 3000; k++) {
            char num[64];
            float v = (float)(0.001 + (double)(rf_rand() % 2000000) / 1e6);
            rf_python(k % 3 ? v : -v, num);
            n0 += (size_t)snprintf(row + n0, sizeof row - n0, "%s%s",
                                   k ? sep : "", num);
        }
        row[n0++] = ']';
        for (f = 0; f < sizeof faults / sizeof *faults; f++)
            for (z = 0; z < sizeof seams / sizeof *seams; z++) {
                int d, how;

                for (d = -3; d <= 3; d++)
                    for (how = 0; how < 2; how++) {
                        size_t at = seams[z] + (size_t)(d + 3) - 3;
                        size_t len = strlen(faults[f]), n, got, want = 0, i;
                        const char *p = body + 1, *q = body + 1,
                                   *stop = body + 1;
                        float ref[2048];

                        /* inserted, or over the bytes there */
                        memcpy(body, row, at);
                        memcpy(body + at, faults[f], len);
                        if (how == 0) {
                            memcpy(body + at + len, row + at, n0 - at);
                            n = n0 + len;
                        } else {
                            memcpy(body + at + len, row + at + len,
                                   n0 - at - len);
                            n = n0;
                        }
                        memset(body + n, ' ', 128);
                        /* the general reader: numbers, each followed by a
                         * separator, up to the first fault */
                        for (;;) {
                            codec_reader r;
                            codec_error err;
                            int finite;

                            while (*q == ' ' || *q == '\n')
                                q++;
                            memset(&err, 0, sizeof err);
                            codec_reader_init(&r, q, (size_t)(body + n - q),
                                              NULL);
                            if (codec_json_number(&r, &ref[want], &finite,
                                                  &err) != 0 ||
                                !finite || (*r.p != ',' && *r.p != ']'))
                                break;
                            want++;
                            stop = r.p;
                            if (*r.p == ']')
                                break;
                            q = r.p + 1;
                        }
                        codec__row_isa(have);
                        got = codec_json_row_any(&p, body + n + 128, out,
                                                 sizeof out / sizeof *out);
                        TS_REQUIRE(got <= want,
                                   "'%s' at %zu (%s): %zu numbers taken, "
                                   "%zu before the fault",
                                      faults[f], at, how ? "over" : "in",
                                      got, want);
                        for (i = 0; i < got; i++)
                            TS_REQUIRE(memcmp(&out[i], &ref[i], 4) == 0,
                                       "'%s' at %zu: number %zu read %a, "
                                       "the general reader %a",
                                       faults[f], at, i, (double)out[i],
                                          (double)ref[i]);
                        if (got == want)
                            TS_REQUIRE(p == stop,
                                       "'%s' at %zu: stopped at %td, not %td",
                                       faults[f], at, p - body, stop - body);
                        else if (got > 0)
                            TS_REQUIRE(*p == ',',
                                       "'%s' at %zu: stopped on '%c'",
                                       faults[f], at, *p);
                        taken += (int)got;
                    }
            }
    }
    codec__row_isa(-1);
    ck_assert_int_gt(taken, 100000);
}
END_TEST

/* codec_json_row_any on random rows of numbers in every form, blanks
 * before them, and rare faults: whatever it takes is a JSON number equal
 * to strtof's reading of it, and it stops just before a separator. */
START_TEST(test_reader_forms_row_any)
{
    static char buf[8192];
    float out[256];
    size_t at[256], to[256];
    int round, taken = 0, have = codec__row_isa(-1);

    ck_assert_int_ge(have, 1);
    for (round = 0; round < 20000; round++) {
        size_t n = 0, count = 0, k, i, room;
        const char *p;

        codec__row_isa(round % 2 ? have : 1);
        while (count < 60 && n < sizeof buf - 300) {
            uint64_t u = rf_rand();
            char num[64];

            /* blanks before: none, a space, a newline and indentation */
            if (u % 3 == 1)
                buf[n++] = ' ';
            else if (u % 3 == 2 && count > 0) {
                memcpy(buf + n, "\n      ", 7);
                n += 7;
            }
            rf_write((int)((u >> 2) % RF_FORMS), rf_value(), num);
            switch ((u >> 50) % 64) { /* rare faults */
            case 0: strcat(num, " "); break;
            case 1: strcat(num, "."); break;
            case 2: num[0] = num[0] == '-' ? '+' : num[0]; break;
            case 3: strcat(num, "e"); break;
            case 4: strcat(num, "e5e5"); break;
            case 5: strcpy(num, "01"); break;
            case 6: strcpy(num, ""); break;
            case 7: strcat(num, "e123"); break;
            default: break;
            }
            at[count] = n;
            memcpy(buf + n, num, strlen(num));
            n += strlen(num);
            to[count++] = n;
            buf[n++] = (u >> 58) == 0 ? ']' : ',';
        }
        memset(buf + n, ' ', 128);
        n += 128;
        p = buf;
        room = (rf_rand() % 4) ? 256 : 1 + (size_t)(rf_rand() % (count + 2));
        k = codec_json_row_any(&p, buf + n, out, room);
        TS_REQUIRE(k <= count, "round %d: %zu of %zu numbers", round, k,
                   count);
        TS_REQUIRE(k <= room, "round %d: %zu numbers, room %zu", round, k,
                   room);
        if (k == 0)
            TS_REQUIRE(p == buf, "round %d: moved with none read", round);
        else
            TS_REQUIRE(p == buf + to[k - 1],
                       "round %d: stopped at %td, not %zu", round, p - buf,
                       to[k - 1]);
        for (i = 0; i < k; i++) {
            char one[64], *e;
            size_t s = at[i], len;
            float want;
            codec_reader r;
            codec_error err;
            float v;
            int finite;

            while (buf[s] == ' ' || buf[s] == '\n')
                s++;
            len = to[i] - s;
            memcpy(one, buf + s, len);
            one[len] = '\0';
            want = strtof(one, &e);
            TS_REQUIRE(*e == '\0' && memcmp(&want, &out[i], 4) == 0,
                       "'%s': read %a, strtof %a", one, (double)out[i],
                       (double)want);
            /* and the general reader takes the same text whole */
            memset(&err, 0, sizeof err);
            codec_reader_init(&r, one, len, NULL);
            TS_REQUIRE(codec_json_number(&r, &v, &finite, &err) == 0 &&
                           r.p == r.end && finite,
                       "'%s' taken, not a finite JSON number", one);
        }
        taken += (int)k;
    }
    codec__row_isa(-1);
    ck_assert_int_gt(taken, 50000);
}
END_TEST

Suite *reader_forms_suite(void)
{
    Suite *s = suite_create("reader_forms");
    TCase *tc = tcase_create("forms");

    tcase_set_timeout(tc, 120);
    tcase_add_checked_fixture(tc, rf_reset, NULL);
    tcase_add_test(tc, test_reader_forms_same_values);
    tcase_add_test(tc, test_reader_forms_edges);
    tcase_add_test(tc, test_reader_forms_bits);
    tcase_add_test(tc, test_reader_forms_overflow);
    tcase_add_test(tc, test_reader_forms_invalid);
    tcase_add_test(tc, test_reader_forms_mutated_same_everywhere);
    tcase_add_test(tc, test_reader_forms_row_any);
    tcase_add_test(tc, test_reader_forms_stride_seams);
    reader_forms_pairs(tc); /* tests/service/test_reader_pairs.c */
    suite_add_tcase(s, tc);
    return s;
}

#ifdef READER_FORMS_STANDALONE
int main(void)
{
    SRunner *sr = srunner_create(reader_forms_suite());
    int failed;

    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
#endif
