/* fuzz_rows.c: libFuzzer harness over the numeric rows' loops
 * (json/rows.c, json/rows_avx512.c): the same body read at every row-loop
 * level this CPU has (codec__row_isa 3: fixed strides, 2: block-relative
 * AVX-512, 1: SSSE3, 0: the general reader alone) must give the same
 * result, and what codec_json_row_any / codec_json_row take must be what
 * the general reader (codec_json_number) reads, bit for bit.
 *
 * The input is a body in one of two ways, by its first byte:
 *   mode 0 (byte % 4 == 0): '[' and the rest of the bytes, as they are;
 *   modes 1-3: a long row of realistic numbers (Python's 17-digit repr of
 *     float32 values, shortest digits, fixed decimals, negatives, now and
 *     then an exponent or a long or near-midpoint decimal) with ",", ", "
 *     or ",\n      " between them, grown from a seed in the input, and a
 *     few of the input's later bytes spliced in as faults, most near the
 *     64-byte blocks of the fixed-stride loop (which reads batches of 32
 *     blocks: 2048 bytes) and past 2048 bytes, counted from the row's
 *     start or from its second number (codec_array_parse reads the first
 *     number alone, so its first row call starts there).
 * Each body sits alone in a heap block of its exact size, so a read past
 * its end is an ASan report.
 *
 * For each body:
 *   1. codec_array_parse(..., "[k]", CODEC_LEAF_F32, 1, 1, ...) at every
 *      level from codec__row_isa(-1) down to 0: same return code, error
 *      kind, field and message, count, shape, floats (bit for bit) and
 *      end position.
 *   2. codec_json_row_any and codec_json_row from just after '[', at every
 *      level, with a large room and with a small one: each value taken
 *      equals the general reader's (and strtof's) reading of the same
 *      text, it takes no number the general reader would not take
 *      followed directly by ',' or ']', never more than room, and *pp
 *      lands on the separator after the last number taken (unchanged if
 *      none). codec_json_row takes no blanks and no exponents.
 * A broken promise prints both sides and traps, so libFuzzer keeps it.
 *
 * json/rows.c keeps a per-thread share for the block-relative loop that
 * depends on the rows read before; it is put back to the same state
 * (by reading fixed rows) before each read, so one input's result does
 * not depend on the inputs before it. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json/json.h"
#include "errors.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The structured bodies' largest size (before faults). */
#define FR_MAX_ROW 12000
/* The faults spliced into one structured body, at most. */
#define FR_MAX_FAULTS 8

static int fr_have; /* codec__row_isa(-1) */

/* Fixed rows that set json/rows.c's per-thread share: a long compact row
 * the fixed-stride loop takes whole (share back to 256), and a row of
 * exponents (which it stops on: each stop doubles the share). */
static char fr_reset_row[2400], fr_exp_row[700];
static size_t fr_reset_len, fr_exp_len;
static float fr_scratch[1200];

/* -- printing a body ----------------------------------------------------- */

static void fr_print_c(const char *what, const char *s, size_t n)
{
    size_t i;

    fprintf(stderr, "%s (%zu bytes): \"", what, n);
    for (i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '\n')
            fputs("\\n", stderr);
        else if (c == '\t')
            fputs("\\t", stderr);
        else if (c == '\r')
            fputs("\\r", stderr);
        else if (c == '"' || c == '\\')
            fprintf(stderr, "\\%c", c);
        else if (c < 0x20 || c >= 0x7f)
            fprintf(stderr, "\\x%02x\"\"", c);
        else
            fputc(c, stderr);
    }
    fputs("\"\n", stderr);
}

/* -- the per-thread share of json/rows.c ------------------------------- */

static void fr_row_state(unsigned doublings)
{
    unsigned i;
    const char *p;

    codec__row_isa(3);
    p = fr_reset_row + 1;
    (void)codec_json_row_any(&p, fr_reset_row + fr_reset_len, fr_scratch,
                             sizeof fr_scratch / sizeof *fr_scratch);
    for (i = 0; i < doublings; i++) {
        p = fr_exp_row + 1;
        (void)codec_json_row_any(&p, fr_exp_row + fr_exp_len, fr_scratch,
                                 sizeof fr_scratch / sizeof *fr_scratch);
    }
}

/* A row of one four-byte number and separator ("0.5,") repeated to
 * nearly cap bytes, in brackets; returns its length. */
static size_t fr_fill_row(char *row, size_t cap, const char *item)
{
    size_t n = 0;

    row[n++] = '[';
    while (n < cap - 8) {
        memcpy(row + n, item, 4);
        n += 4;
    }
    row[n - 1] = ']';
    return n;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fr_have = codec__row_isa(-1);
    fr_reset_len = fr_fill_row(fr_reset_row, sizeof fr_reset_row, "0.5,");
    fr_exp_len = fr_fill_row(fr_exp_row, sizeof fr_exp_row, "1e5,");
    return 0;
}

/* -- 1. the whole array at every level ---------------------------------- */

typedef struct fr_result {
    int rc;
    codec_error err;
    size_t count, shape0, at; /* at: r.p - body after the parse */
    int rank;
    float *data; /* a copy (count floats), NULL when rc != 0 */
} fr_result;

static void fr_parse(const char *body, size_t n, int isa, unsigned doublings,
                     fr_result *o)
{
    codec_reader r;
    codec_array a;

    fr_row_state(doublings);
    codec__row_isa(isa);
    memset(o, 0, sizeof *o);
    codec_reader_init(&r, body, n, NULL);
    o->rc = codec_array_parse(&r, "/x", "[k]", CODEC_LEAF_F32, 1, 1, &a,
                              &o->err);
    o->at = (size_t)(r.p - body);
    if (o->rc == 0) {
        o->count = a.count;
        o->shape0 = a.shape[0];
        o->rank = a.rank;
        o->data = malloc(a.count * sizeof(float) + 1);
        if (o->data == NULL)
            abort();
        memcpy(o->data, a.data, a.count * sizeof(float));
    }
    codec_array_clear(&a);
}

static void fr_print_result(int isa, const fr_result *o)
{
    size_t i;

    fprintf(stderr,
            "level %d: rc %d, kind %d, field \"%s\", message \"%s\", count "
            "%zu, rank %d, shape[0] %zu, ends at %zu\n",
            isa, o->rc, (int)o->err.kind, o->err.field, o->err.message,
            o->count, o->rank, o->shape0, o->at);
    for (i = 0; i < o->count && i < 4096; i++)
        fprintf(stderr, "  [%zu] %a\n", i, (double)o->data[i]);
}

static int fr_same(const fr_result *a, const fr_result *b, size_t *where)
{
    size_t i;

    *where = (size_t)-1;
    if (a->rc != b->rc || a->at != b->at)
        return 0;
    if (a->rc != 0)
        return a->err.kind == b->err.kind &&
               strcmp(a->err.field, b->err.field) == 0 &&
               strcmp(a->err.message, b->err.message) == 0;
    if (a->count != b->count || a->rank != b->rank || a->shape0 != b->shape0)
        return 0;
    for (i = 0; i < a->count; i++)
        if (memcmp(&a->data[i], &b->data[i], sizeof(float)) != 0) {
            *where = i;
            return 0;
        }
    return 1;
}

static void fr_check_levels(const char *body, size_t n, unsigned doublings)
{
    fr_result top, o;
    int isa;

    fr_parse(body, n, fr_have, doublings, &top);
    for (isa = fr_have - 1; isa >= 0; isa--) {
        size_t where;

        fr_parse(body, n, isa, doublings, &o);
        if (!fr_same(&top, &o, &where)) {
            fprintf(stderr,
                    "fuzz_rows: codec_array_parse differs between row-loop "
                    "levels %d and %d (share doublings %u; first value "
                    "differing: %lld)\n",
                    fr_have, isa, doublings,
                    where == (size_t)-1 ? -1LL : (long long)where);
            fr_print_c("body", body, n);
            fr_print_result(fr_have, &top);
            fr_print_result(isa, &o);
            __builtin_trap();
        }
        free(o.data);
    }
    free(top.data);
}

/* -- 2. the row loops alone against the general reader ------------------ */

static int fr_blank(char c)
{
    return c == ' ' || c == '\n' || c == '\r' || c == '\t';
}

/* The general reader over the row from body + from: numbers each followed
 * directly by ',' or ']' (blanks before each when any), up to the first
 * that is not one, finite in float32, at most max. ref[i]: the value,
 * at[i] its first byte, to[i] the separator after it. */
static size_t fr_reference(const char *body, size_t n, size_t from, int any,
                           float *ref, size_t *at, size_t *to, size_t max)
{
    size_t q = from, k = 0;

    while (k < max) {
        codec_reader r;
        codec_error err;
        int finite = 0;

        if (any)
            while (q < n && fr_blank(body[q]))
                q++;
        if (q >= n)
            break;
        memset(&err, 0, sizeof err);
        codec_reader_init(&r, body + q, n - q, NULL);
        if (codec_json_number(&r, &ref[k], &finite, &err) != 0 || !finite ||
            r.p >= r.end || (*r.p != ',' && *r.p != ']'))
            break;
        at[k] = q;
        to[k] = (size_t)(r.p - body);
        k++;
        if (*r.p == ']')
            break;
        q = to[k - 1] + 1;
    }
    return k;
}

static void fr_fail_row(const char *why, const char *body, size_t n,
                        int isa, int any, size_t room, size_t got,
                        size_t want, size_t i, const float *out,
                        const float *ref, const size_t *at, const size_t *to,
                        size_t p_at)
{
    fprintf(stderr,
            "fuzz_rows: %s: %s at level %d, room %zu: took %zu numbers, the "
            "general reader %zu; *pp at %zu",
            why, any ? "codec_json_row_any" : "codec_json_row", isa, room,
            got, want, p_at);
    if (p_at < n)
        fprintf(stderr, " ('%c')", body[p_at]);
    fputc('\n', stderr);
    if (i < got) {
        fprintf(stderr, "  number %zu read %a (%.9g)", i, (double)out[i],
                (double)out[i]);
        if (i < want)
            fprintf(stderr, ", the general reader %a (%.9g) from \"%.*s\"",
                    (double)ref[i], (double)ref[i], (int)(to[i] - at[i]),
                    body + at[i]);
        fputc('\n', stderr);
    }
    fr_print_c("body", body, n);
    __builtin_trap();
}

/* One call of codec_json_row(_any) from body + 1 at level isa with room,
 * held to the reference (want numbers). */
static void fr_check_row(const char *body, size_t n, int isa, int any,
                         size_t room, const float *ref, const size_t *at,
                         const size_t *to, size_t want, unsigned doublings)
{
    const char *p = body + 1;
    float *out = malloc(room * sizeof(float));
    size_t got, i, p_at;

    if (out == NULL)
        abort();
    fr_row_state(doublings);
    codec__row_isa(isa);
    got = any ? codec_json_row_any(&p, body + n, out, room)
              : codec_json_row(&p, body + n, out, room);
    p_at = (size_t)(p - body);
    if (got > room)
        fr_fail_row("more numbers than room", body, n, isa, any, room, got,
                    want, got, out, ref, at, to, p_at);
    if (got > want)
        fr_fail_row("a number the general reader does not take there", body,
                    n, isa, any, room, got, want, want, out, ref, at, to,
                    p_at);
    for (i = 0; i < got; i++) {
        if (memcmp(&out[i], &ref[i], sizeof(float)) != 0)
            fr_fail_row("a value unlike the general reader's", body, n, isa,
                        any, room, got, want, i, out, ref, at, to, p_at);
        if (!any) {
            size_t j;
            if (at[i] != (i ? to[i - 1] + 1 : 1))
                fr_fail_row("codec_json_row took blanks", body, n, isa, any,
                            room, got, want, i, out, ref, at, to, p_at);
            for (j = at[i]; j < to[i]; j++)
                if (body[j] == 'e' || body[j] == 'E')
                    fr_fail_row("codec_json_row took an exponent", body, n,
                                isa, any, room, got, want, i, out, ref, at,
                                to, p_at);
        }
    }
    if (got == 0 && p_at != 1)
        fr_fail_row("*pp moved without a number taken", body, n, isa, any,
                    room, got, want, 0, out, ref, at, to, p_at);
    if (got > 0) {
        if (p_at != to[got - 1])
            fr_fail_row("*pp not at the separator after the last number",
                        body, n, isa, any, room, got, want, got, out, ref, at,
                        to, p_at);
        if (body[p_at] != ',' && body[p_at] != ']')
            fr_fail_row("*pp not on ',' or ']'", body, n, isa, any, room, got,
                        want, got, out, ref, at, to, p_at);
    }
    free(out);
}

/* strtof of each number the general reader took, bit for bit (the general
 * reader's own promise; a difference here is not the row loops'). */
static void fr_check_strtof(const char *body, size_t n, const float *ref,
                            const size_t *at, const size_t *to, size_t want)
{
    size_t i;

    for (i = 0; i < want; i++) {
        char one[512], *e;
        size_t len = to[i] - at[i];
        float v;

        if (len >= sizeof one)
            continue;
        memcpy(one, body + at[i], len);
        one[len] = '\0';
        v = strtof(one, &e);
        if (*e != '\0' || memcmp(&v, &ref[i], sizeof v) != 0) {
            fprintf(stderr,
                    "fuzz_rows: the general reader read \"%s\" as %a, strtof "
                    "as %a\n",
                    one, (double)ref[i], (double)v);
            fr_print_c("body", body, n);
            __builtin_trap();
        }
    }
}

static void fr_check_rows(const char *body, size_t n, size_t small_room,
                          unsigned doublings)
{
    size_t max = n / 2 + 2, want, isa;
    float *ref = malloc(max * sizeof(float));
    size_t *at = malloc(max * sizeof(size_t));
    size_t *to = malloc(max * sizeof(size_t));
    int any;

    if (ref == NULL || at == NULL || to == NULL)
        abort();
    if (n < 1 || body[0] != '[')
        goto done;
    for (any = 1; any >= 0; any--) {
        want = fr_reference(body, n, 1, any, ref, at, to, max);
        if (any)
            fr_check_strtof(body, n, ref, at, to, want);
        for (isa = 0; isa <= (size_t)fr_have; isa++) {
            fr_check_row(body, n, (int)isa, any, max, ref, at, to, want,
                         doublings);
            /* a small room: the rows' loops stop at it */
            fr_check_row(body, n, (int)isa, any, small_room, ref, at, to,
                         want < small_room ? want : small_room, doublings);
        }
    }
done:
    free(ref);
    free(at);
    free(to);
}

/* -- the structured bodies ---------------------------------------------- */

typedef struct fr_rng {
    uint64_t s;
} fr_rng;

static uint64_t fr_next(fr_rng *g)
{
    /* splitmix64 */
    uint64_t z = (g->s += UINT64_C(0x9E3779B97F4A7C15));
    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    return z ^ (z >> 31);
}

static double fr_unit(fr_rng *g)
{
    return (double)(fr_next(g) >> 11) / 9007199254740992.0;
}

/* A value as weights are: mostly within (-2, 2), sometimes scaled. */
static float fr_value(fr_rng *g, unsigned neg_pct)
{
    double v = fr_unit(g) * 2.0;
    unsigned r = (unsigned)(fr_next(g) % 100);

    if (r < 8)
        v *= 1e-4;
    else if (r < 12)
        v *= 1e-8;
    else if (r < 16)
        v *= 1e3;
    else if (r < 18)
        v = (double)(fr_next(g) % 1000);
    else if (r < 19)
        v = 0.0;
    if (fr_next(g) % 100 < neg_pct)
        v = -v;
    return (float)v;
}

/* Python's repr of a float32 value (as the double it widens to): the
 * shortest of 15, 16, 17 digits that reads back, "1.0" for integers. */
static int fr_python(float f, char *buf, size_t cap)
{
    double d = (double)f;
    int k, n = 0;

    for (k = 15; k <= 17; k++) {
        n = snprintf(buf, cap, "%.*g", k, d);
        if (strtod(buf, NULL) == d)
            break;
    }
    if (!strpbrk(buf, ".en") && (size_t)n + 2 < cap) {
        memcpy(buf + n, ".0", 3);
        n += 2;
    }
    return n;
}

/* One number's text by form (0-9), into buf (at least 64 bytes). */
static int fr_number(fr_rng *g, unsigned form, unsigned neg_pct, char *buf)
{
    float v = fr_value(g, neg_pct);
    int n;

    switch (form) {
    case 0: /* Python's repr */
    case 1:
    case 2:
    case 3:
        return fr_python(v, buf, 64);
    case 4: /* 17 significant digits always */
        return snprintf(buf, 64, "%.17g", (double)v);
    case 5: { /* shortest float32 digits */
        int k;
        for (k = 1; k <= 9; k++) {
            n = snprintf(buf, 64, "%.*g", k, (double)v);
            if (strtof(buf, NULL) == v)
                break;
        }
        return n;
    }
    case 6: /* fixed decimals, leading zeros in the fraction */
        return snprintf(buf, 64, "%.*f", 1 + (int)(fr_next(g) % 12),
                        (double)v);
    case 7: { /* an exponent */
        unsigned r = (unsigned)(fr_next(g) % 4);
        if (r == 0)
            return snprintf(buf, 64, "%.8e", (double)v);
        if (r == 1)
            return snprintf(buf, 64, "%.3E", (double)v);
        if (r == 2)
            return snprintf(buf, 64, "%de%s%d", (int)(fr_next(g) % 10),
                            fr_next(g) % 2 ? "-" : "",
                            (int)(fr_next(g) % 45));
        return snprintf(buf, 64, "%.6fe+%03d", (double)v,
                        (int)(fr_next(g) % 3));
    }
    case 8: { /* near a float32 midpoint, or many digits */
        float w = v;
        double mid;
        uint32_t bits;
        memcpy(&bits, &w, sizeof bits);
        bits++;
        memcpy(&w, &bits, sizeof bits);
        mid = ((double)v + (double)w) / 2.0;
        if (fr_next(g) % 2)
            return snprintf(buf, 64, "%.*g", 17 + (int)(fr_next(g) % 8), mid);
        return snprintf(buf, 64, "%.*f", 18 + (int)(fr_next(g) % 10),
                        (double)v);
    }
    default: { /* integers, zeros */
        static const char *const z[] = {"0", "-0", "0.0", "-0.0", "1", "-1",
                                        "10", "100000", "16777217",
                                        "0.00000000000000000000001"};
        unsigned r = (unsigned)(fr_next(g) % 10);
        n = (int)strlen(z[r]);
        memcpy(buf, z[r], (size_t)n + 1);
        return n;
    }
    }
}

/* The bytes a fault puts in. */
static const char fr_fault_chars[] = " ,-0.\ne+1\t]x[E5";
static const char *const fr_fault_strs[] = {
    "01", "1.", "-", "1..2", "-.5", "1 ", " ,", ",", "-0", "0.", "1.2.",
    "+1", "--1", "00", "1e5", ".", "0-", "9.-", "-01", "1.5.", "\n ", "]",
    "1]", " 1", "0.0", "-9", "5", "12345678901234567890123456", "x", "1e",
    "1e+", ", ", ",\n      ", "\r", "\t", "e-05", "1E+38", "3.4028236e38",
    "1e-46", "0.000000000000000000000000000000000000000000001"};

static size_t fr_splice(char *body, size_t n, size_t cap, size_t at,
                        size_t del, const char *s, size_t len)
{
    if (at > n)
        at = n;
    if (del > n - at)
        del = n - at;
    if (n - del + len > cap)
        return n;
    memmove(body + at + len, body + at + del, n - at - del);
    memcpy(body + at, s, len);
    return n - del + len;
}

/* Expands the input into a row; returns its length. */
static size_t fr_structured(const uint8_t *data, size_t size, char *body,
                            size_t cap)
{
    static const char *const seps[] = {",", ", ", ",\n      ", ",\n  "};
    uint8_t h[16];
    fr_rng g;
    size_t n = 0, target, i, nf, second = 1;
    unsigned layout, forms, neg_pct, exp_pct, k;
    int indent;

    memset(h, 0, sizeof h);
    memcpy(h, data, size < sizeof h ? size : sizeof h);
    layout = h[1] % 5; /* 4: a separator chosen per number */
    forms = h[2];
    neg_pct = (unsigned)(h[3] % 101);
    exp_pct = h[4] % 4 == 0 ? 0 : (unsigned)(h[4] % 16);
    target = 64 + (((size_t)h[5] << 8 | h[6]) % (FR_MAX_ROW - 200));
    g.s = 0;
    for (i = 7; i < 15; i++)
        g.s = g.s << 8 | h[i];
    indent = layout == 2;

    body[n++] = '[';
    if (indent) {
        memcpy(body + n, "\n      ", 7);
        n += 7;
    }
    for (k = 0; n < target; k++) {
        char num[64];
        unsigned form, r = (unsigned)(fr_next(&g) % 100);
        int len;
        const char *sep;

        if (r < exp_pct)
            form = 7;
        else if (forms & 0x80)
            form = (unsigned)(fr_next(&g) % 10); /* any form */
        else if (forms & 0x40)
            form = (forms & 0x3F) % 10; /* one form throughout */
        else
            form = r % 3 ? 0 : (forms >> 3) % 7; /* mostly Python's */
        if (form == 7 && r >= exp_pct && exp_pct == 0)
            form = 0;
        len = fr_number(&g, form, neg_pct, num);
        sep = layout == 4 ? seps[fr_next(&g) % 4] : seps[layout];
        if (k) {
            size_t sl = strlen(sep);
            memcpy(body + n, sep, sl);
            n += sl;
            if (k == 1)
                second = n;
        }
        memcpy(body + n, num, (size_t)len);
        n += (size_t)len;
    }
    if (indent) {
        memcpy(body + n, "\n    ", 5);
        n += 5;
    }
    body[n++] = ']';
    if (h[1] & 0x80) {
        /* the row inside a larger body: text after it */
        memcpy(body + n, ", \"y\": [1.5]}", 13);
        n += 13;
    }
    /* the faults: 3 bytes each from byte 16 on */
    nf = size > 16 ? (size - 16) / 3 : 0;
    if (nf > FR_MAX_FAULTS)
        nf = FR_MAX_FAULTS;
    for (i = 0; i < nf; i++) {
        const uint8_t *f = data + 16 + 3 * i;
        size_t at;
        char c;

        if (f[0] & 0x80) {
            /* near a block seam: base + 64 b, up to 8 bytes either side;
             * base is the row after '[' (where codec_json_row_any starts
             * below) or its second number (where codec_array_parse's
             * first row call starts: it reads the first number alone) */
            at = ((f[1] & 8) ? second : 1) + 64 * (size_t)(f[0] & 0x7F) +
                 (f[1] >> 4);
            at = at >= 8 ? at - 8 : 0;
            if (at > n)
                at %= n + 1;
        } else {
            at = (size_t)(fr_next(&g) % (n + 1));
        }
        c = (f[2] & 0x80) ? fr_fault_chars[f[2] & 15] : (char)f[2];
        switch (f[1] & 3) {
        case 0: /* insert */
            n = fr_splice(body, n, cap, at, 0, &c, 1);
            break;
        case 1: /* over */
            n = fr_splice(body, n, cap, at, 1, &c, 1);
            break;
        case 2: /* drop */
            n = fr_splice(body, n, cap, at, 1 + (f[2] & 3), "", 0);
            break;
        default: { /* a fault string, in or over */
            const char *s =
                fr_fault_strs[f[2] % (sizeof fr_fault_strs /
                                      sizeof *fr_fault_strs)];
            size_t len = strlen(s);
            n = fr_splice(body, n, cap, at, (f[1] & 4) ? len : 0, s, len);
        }
        }
    }
    return n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static char row[FR_MAX_ROW + 1024];
    char *body;
    size_t n;
    unsigned doublings, small_room;

    if (size < 1)
        return 0;
    doublings = (data[0] >> 2) & 3;
    small_room = 1 + (data[0] >> 4) * 3;
    if (data[0] % 4 == 0) {
        n = size; /* '[' and the rest */
        body = malloc(n);
        if (body == NULL)
            abort();
        body[0] = '[';
        memcpy(body + 1, data + 1, size - 1);
    } else {
        n = fr_structured(data, size, row, sizeof row);
        body = malloc(n);
        if (body == NULL)
            abort();
        memcpy(body, row, n);
    }
    fr_check_levels(body, n, doublings);
    fr_check_rows(body, n, small_room, doublings);
    free(body);
    codec__row_isa(-1);
    return 0;
}
