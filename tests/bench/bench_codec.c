/* bench_codec.c: micro-benchmark of the JSON codec. First the reader on
 * every form in which clients write numbers (compact or spaced, indented,
 * 6 to 17 digits, exponents), side by side with simdjson On-Demand +
 * fast_float walking the same body (bench_simdjson.cc); then, on the
 * contract's workload 3 (n = 512, d_model = 768, 12 heads, per-head maps):
 * parsing with jansson vs the codec's reader, the library call, writing the
 * response (JSON and base64), and the cost of one float32 -> text
 * conversion by each candidate. Prints figures (best of a few runs); never
 * fails on a time. The single-threaded steps are timed in thread CPU time,
 * so a machine shared with other jobs inflates them less than wall time
 * would.
 *
 *   bench_codec                     everything (`make bench-codec`)
 *   bench_codec forms               the reader table only
 *   bench_codec parse FORM READER   one parse of form FORM (its row number
 *                                   in the table) by READER (attnd or
 *                                   simdjson), for callgrind */
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "attend/codec.h"
#include "attend/request.h"
#include "bench_simdjson.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

typedef struct sbuf {
    char *s;
    size_t len, cap;
} sbuf;

static void put(sbuf *b, const char *s, size_t n)
{
    if (b->len + n + 1 > b->cap) {
        b->cap = (b->len + n + 1) * 2;
        b->s = realloc(b->s, b->cap);
        if (b->s == NULL) {
            fprintf(stderr, "out of memory\n");
            exit(1);
        }
    }
    memcpy(b->s + b->len, s, n);
    b->len += n;
    b->s[b->len] = '\0';
}

static void puts_(sbuf *b, const char *s)
{
    put(b, s, strlen(s));
}

static uint32_t rng = 1;

static float frand(void)
{
    rng = rng * 1664525u + 1013904223u;
    return ((float)(rng >> 8) / 16777216.0f - 0.5f) * 0.2f;
}

/* A [rows][cols] matrix of random values, written with %.9g as a client
 * (numpy's repr, JSON.stringify) writes full-precision float32. */
static void matrix(sbuf *b, const char *name, size_t rows, size_t cols)
{
    char num[32];
    size_t r, c;
    int n;

    put(b, ",\"", 2);
    puts_(b, name);
    put(b, "\":[", 3);
    for (r = 0; r < rows; r++) {
        put(b, r ? ",[" : "[", r ? 2 : 1);
        for (c = 0; c < cols; c++) {
            n = snprintf(num, sizeof num, "%s%.9g", c ? "," : "",
                         (double)frand());
            put(b, num, (size_t)n);
        }
        put(b, "]", 1);
    }
    put(b, "]", 1);
}

/* The same request with every matrix as a base64 tensor object. */
static char *workload3_b64(size_t *len)
{
    sbuf b = {0};
    const size_t n = 512, d = 768;
    const char *names[4] = {"x", "w_q", "w_k", "w_v"};
    size_t rows[4] = {n, d, d, d}, i, j, chars;
    char head[128];
    /* d >= n: the weights are the largest matrices */
    float *v = malloc(d * d * sizeof(float));
    char *text = malloc((d * d * 4 + 2) / 3 * 4 + 8);

    puts_(&b, "{\"num_heads\":12,\"encoding\":\"base64\"");
    for (i = 0; i < 4; i++) {
        for (j = 0; j < rows[i] * d; j++)
            v[j] = frand();
        chars = codec_base64_f32(v, rows[i] * d * 4, 0, rows[i] * d * 4, text);
        snprintf(head, sizeof head, ",\"%s\":{\"dtype\":\"float32\","
                 "\"shape\":[%zu,%zu],\"data\":\"", names[i], rows[i], d);
        puts_(&b, head);
        put(&b, text, chars);
        puts_(&b, "\"}");
    }
    puts_(&b, "}");
    free(v);
    free(text);
    *len = b.len;
    return b.s;
}

static char *workload3(size_t *len, size_t *numbers)
{
    sbuf b = {0};
    const size_t n = 512, d = 768;

    puts_(&b, "{\"num_heads\":12");
    matrix(&b, "x", n, d);
    matrix(&b, "w_q", d, d);
    matrix(&b, "w_k", d, d);
    matrix(&b, "w_v", d, d);
    puts_(&b, "}");
    *len = b.len;
    *numbers = n * d + 3 * d * d;
    return b.s;
}

/* %.6g .. %.9g until strtof reads back the same float: correct, shortest in
 * digit count, slow. */
static size_t fmt_try(float v, char *buf)
{
    int p, n = 0;
    for (p = 6; p <= 9; p++) {
        n = snprintf(buf, 32, "%.*g", p, (double)v);
        if (strtof(buf, NULL) == v)
            break;
    }
    return (size_t)n;
}

static size_t fmt_9g(float v, char *buf)
{
    return (size_t)snprintf(buf, 32, "%.9g", (double)v);
}

static size_t fmt_17g(float v, char *buf)
{
    return (size_t)snprintf(buf, 32, "%.17g", (double)v);
}

static size_t fmt_codec(float v, char *buf)
{
    return codec_num_format(v, buf);
}

static void bench_format(const char *name, size_t (*f)(float, char *),
                         const float *v, size_t count)
{
    char buf[64];
    size_t i, total = 0;
    double best = 1e30, t;
    int rep;

    for (rep = 0; rep < 3; rep++) {
        t = now();
        for (i = 0; i < count; i++)
            total += f(v[i], buf);
        t = now() - t;
        if (t < best)
            best = t;
    }
    printf("  %-34s %7.1f ns/number  (%.2f chars avg)\n", name,
           best / (double)count * 1e9, (double)total / 3.0 / (double)count);
}

/* The run conversions the writer uses, CODEC_NUM_RUN values a call: the
 * shortest digits alone (dragonbox's loop, then codec_num_shortest_n: the
 * AVX-512 loop where the CPU has it), and whole texts (codec_num_text_n). */
static void bench_runs(const float *v, size_t count)
{
    static const char *const names[3] = {
        "digits, dragonbox's loop", "digits, codec_num_shortest_n",
        "texts, codec_num_text_n"};
    uint32_t sig[CODEC_NUM_RUN];
    int ex[CODEC_NUM_RUN];
    char text[CODEC_NUM_RUN][16];
    unsigned char len[CODEC_NUM_RUN];
    int kind, rep;

    for (kind = 0; kind < 3; kind++) {
        double best = 1e30, t;
        size_t i, total = 0;

        for (rep = 0; rep < 3; rep++) {
            t = now();
            for (i = 0; i < count; i += CODEC_NUM_RUN) {
                size_t n = count - i < CODEC_NUM_RUN ? count - i
                                                     : CODEC_NUM_RUN;
                if (kind == 0)
                    codec_num_dragonbox_n(v + i, n, sig, ex);
                else if (kind == 1)
                    codec_num_shortest_n(v + i, n, sig, ex);
                else
                    codec_num_text_n(v + i, n, text, len);
                total += kind == 2 ? len[0] : sig[0];
            }
            t = now() - t;
            if (t < best)
                best = t;
        }
        printf("  %-34s %7.1f ns/number%s\n", names[kind],
               best / (double)count * 1e9,
               kind == 0 ? "" : codec_num_shortest_simd() ? "  (AVX-512)"
                                                          : "  (dragonbox)");
        if (total == 0)
            printf("  (no values)\n");
    }
}

/* Seconds of one codec_parse of body (thread CPU time), or -1 when it
 * fails (printed). The request is freed. */
static double parse_once(const char *body, size_t len,
                         const limits_config *lim, const char *what)
{
    codec_request *req = NULL;
    codec_error err = {0};
    double t = now();

    if (codec_parse(body, len, lim, &req, &err) != 0) {
        printf("codec_parse (%s) failed: %s\n", what, err.message);
        return -1;
    }
    t = now() - t;
    codec_request_free(req);
    return t;
}

/* -- the reader on every form of number ---------------------------------- */

/* How a client writes one float32: the text goes to buf (64 bytes). */
typedef size_t (*form_writer)(float v, char *buf);

/* The shortest digits of v (dragonbox) laid out as Python's repr lays out
 * a float: plain from 1e-4 up to 1e16 ("0.0001", "12.5", "3.0"), otherwise
 * scientific with at least two exponent digits ("1e-05", "3.4028235e+38").
 * json.dumps of a client's float32 values rounded to their shortest digits
 * (np.float32 -> str, then float) writes exactly this. */
static size_t fmt_python(float v, char *buf)
{
    char d[16];
    uint32_t sig;
    int exp, k, point, i;
    size_t n = 0;

    if (signbit(v))
        buf[n++] = '-';
    if (v == 0.0f) {
        memcpy(buf + n, "0.0", 3);
        return n + 3;
    }
    codec_num_shortest(v, &sig, &exp);
    k = snprintf(d, sizeof d, "%u", sig);
    point = k + exp; /* |v| = 0.d1..dk * 10^point */
    if (point < -3 || point > 16) {
        buf[n++] = d[0];
        if (k > 1) {
            buf[n++] = '.';
            memcpy(buf + n, d + 1, (size_t)(k - 1));
            n += (size_t)(k - 1);
        }
        n += (size_t)snprintf(buf + n, 16, "e%c%02d", point - 1 < 0 ? '-' : '+',
                              abs(point - 1));
    } else if (point <= 0) {
        buf[n++] = '0';
        buf[n++] = '.';
        for (i = 0; i < -point; i++)
            buf[n++] = '0';
        memcpy(buf + n, d, (size_t)k);
        n += (size_t)k;
    } else if (point >= k) {
        memcpy(buf + n, d, (size_t)k);
        n += (size_t)k;
        for (i = k; i < point; i++)
            buf[n++] = '0';
        memcpy(buf + n, ".0", 2);
        n += 2;
    } else {
        memcpy(buf + n, d, (size_t)point);
        n += (size_t)point;
        buf[n++] = '.';
        memcpy(buf + n, d + point, (size_t)(k - point));
        n += (size_t)(k - point);
    }
    return n;
}

static size_t fmt_6g(float v, char *buf)
{
    return (size_t)snprintf(buf, 64, "%.6g", (double)v);
}

/* 1 to 17 significant digits, one more each number and again from 1 (a
 * client that rounds some tensors and not others, or hand-written ones). */
static size_t fmt_cycle(float v, char *buf)
{
    static int k;

    k = k % 17 + 1;
    return (size_t)snprintf(buf, 64, "%.*g", k, (double)v);
}

/* Two digits ("0.34", "-0.051"): rounded for display or a test. */
static size_t fmt_2g(float v, char *buf)
{
    return (size_t)snprintf(buf, 64, "%.2g", (double)v);
}

/* Half the values 0.0 or -0.0, as json.dumps writes them (a ReLU's output,
 * a sparse or pruned matrix), the rest json.dumps' shortest digits. */
static size_t fmt_zeros(float v, char *buf)
{
    if (fabsf(v) < 0.05f)
        return fmt_python(signbit(v) ? -0.0f : 0.0f, buf);
    return fmt_python(v, buf);
}

static size_t fmt_8e(float v, char *buf)
{
    return (size_t)snprintf(buf, 64, "%.8e", (double)v);
}

/* One way of writing a request: the numbers' text, the item separator
 * (", " is json.dumps' default), json.dumps' indent (0: none), and whether
 * the values span magnitudes 1e-8 to 1e2 (so that many need exponents)
 * rather than the uniform weights of (-0.1, 0.1) and inputs of (-1, 1). */
typedef struct form {
    const char *name;
    form_writer write;
    const char *sep;
    int indent;
    int wide;
} form;

static const form forms[] = {
    {"compact, %.6g (6 digits)", fmt_6g, ",", 0, 0},
    {"json.dumps, shortest f32 digits, \", \"", fmt_python, ", ", 0, 0},
    {"17 digits compact (tolist, JS)", fmt_17g, ",", 0, 0},
    {"17 digits, \", \" (json.dumps)", fmt_17g, ", ", 0, 0},
    {"json.dumps indent=2, 17 digits", fmt_17g, ",", 2, 0},
    {"json.dumps indent=2, shortest", fmt_python, ",", 2, 0},
    {"exponents mixed, shortest, \", \"", fmt_python, ", ", 0, 1},
    {"exponents mixed, 17 digits", fmt_17g, ",", 0, 1},
    {"scientific %.8e, compact", fmt_8e, ",", 0, 0},
    {"1 to 17 digits in turn, \", \"", fmt_cycle, ", ", 0, 0},
    {"2 digits (%.2g), \", \"", fmt_2g, ", ", 0, 0},
    {"half 0.0 and -0.0, shortest, \", \"", fmt_zeros, ", ", 0, 0},
};
#define NFORMS (sizeof forms / sizeof forms[0])

static void newline(sbuf *b, int indent, int depth)
{
    int i;

    put(b, "\n", 1);
    for (i = 0; i < indent * depth; i++)
        put(b, " ", 1);
}

/* A value of the form's distribution. */
static float form_value(const form *f, int input)
{
    float u = frand() * 10.0f; /* (-1, 1) */

    if (f->wide) {
        /* log-uniform magnitude in [1e-8, 1e2], random sign */
        float m = powf(10.0f, -8.0f + 10.0f * (frand() * 5.0f + 0.5f));
        return u < 0 ? -m : m;
    }
    return input ? u : u * 0.1f;
}

/* Member `name` (first: no comma before it) of a [rows][cols] matrix. */
static void form_matrix(sbuf *b, const form *f, const char *name, size_t rows,
                        size_t cols, int input)
{
    char num[64];
    size_t r, c;

    put(b, ",", 1);
    if (f->indent)
        newline(b, f->indent, 1);
    else if (f->sep[1] == ' ')
        put(b, " ", 1);
    put(b, "\"", 1);
    puts_(b, name);
    puts_(b, f->indent || f->sep[1] == ' ' ? "\": [" : "\":[");
    for (r = 0; r < rows; r++) {
        if (r)
            puts_(b, f->indent ? "," : f->sep);
        if (f->indent)
            newline(b, f->indent, 2);
        put(b, "[", 1);
        for (c = 0; c < cols; c++) {
            if (c)
                puts_(b, f->indent ? "," : f->sep);
            if (f->indent)
                newline(b, f->indent, 3);
            put(b, num, f->write(form_value(f, input), num));
        }
        if (f->indent)
            newline(b, f->indent, 2);
        put(b, "]", 1);
    }
    if (f->indent)
        newline(b, f->indent, 1);
    put(b, "]", 1);
}

/* The request of the table: n = 128, d_model = 256, 8 heads, with W_O
 * (294912 numbers), written in form f. The buffer has simdjson's padding
 * after the body. */
static char *form_body(const form *f, size_t *len, size_t *numbers)
{
    sbuf b = {0};
    const size_t n = 128, d = 256;
    char *padded;

    rng = 7;
    put(&b, "{", 1);
    if (f->indent)
        newline(&b, f->indent, 1);
    puts_(&b, f->indent || f->sep[1] == ' ' ? "\"num_heads\": 8"
                                            : "\"num_heads\":8");
    form_matrix(&b, f, "x", n, d, 1);
    form_matrix(&b, f, "w_q", d, d, 0);
    form_matrix(&b, f, "w_k", d, d, 0);
    form_matrix(&b, f, "w_v", d, d, 0);
    form_matrix(&b, f, "w_o", d, d, 0);
    if (f->indent)
        newline(&b, f->indent, 0);
    put(&b, "}", 1);
    padded = malloc(b.len + bench_simdjson_padding() + 1);
    if (padded == NULL) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    memcpy(padded, b.s, b.len);
    memset(padded + b.len, 0, bench_simdjson_padding() + 1);
    *len = b.len;
    *numbers = n * d + 4 * d * d;
    free(b.s);
    return padded;
}

/* Seconds of one simdjson walk of body into out, or -1 when it fails. */
static double simdjson_once(const char *body, size_t len, float *out,
                            size_t room)
{
    size_t count = 0;
    double t = now();

    if (bench_simdjson_parse(body, len, len + bench_simdjson_padding(), out,
                             room, &count) != 0 || count != room)
        return -1;
    return now() - t;
}

/* The table: each form's body parsed by codec_parse and by simdjson,
 * alternately, best of reps each. */
static int reader_forms(int reps)
{
    limits_config lim;
    size_t i;

    limits_defaults(&lim);
    printf("codec_parse against simdjson On-Demand (%s kernel) + fast_float, "
           "n = 128, d_model = 256, 8 heads, W_O (294912 numbers), one core, "
           "best of %d (thread CPU time):\n", bench_simdjson_impl(), reps);
    printf("  %-38s %6s %9s %7s %9s %7s %7s %9s\n", "numbers written as",
           "MB", "attnd ms", "GB/s", "simdj ms", "GB/s", "ratio",
           "blocks ms");
    for (i = 0; i < NFORMS; i++) {
        size_t len, numbers;
        char *body = form_body(&forms[i], &len, &numbers);
        float *out = malloc(numbers * sizeof(float));
        double best_a = 1e30, best_s = 1e30, best_b = 1e30, t;
        int rep, have = codec__row_isa(-1);

        for (rep = 0; rep < reps; rep++) {
            if ((t = parse_once(body, len, &lim, forms[i].name)) < 0)
                return 1;
            if (t < best_a)
                best_a = t;
            /* the AVX-512 block loop without the fixed-stride one */
            if (have >= 3) {
                codec__row_isa(2);
                t = parse_once(body, len, &lim, forms[i].name);
                codec__row_isa(-1);
                if (t < 0)
                    return 1;
                if (t < best_b)
                    best_b = t;
            }
            if ((t = simdjson_once(body, len, out, numbers)) < 0) {
                printf("simdjson failed on %s\n", forms[i].name);
                return 1;
            }
            if (t < best_s)
                best_s = t;
        }
        printf("  %-38s %6.2f %9.2f %7.2f %9.2f %7.2f %6.1fx %9.2f\n",
               forms[i].name, (double)len / 1e6, best_a * 1e3,
               (double)len / best_a * 1e-9, best_s * 1e3,
               (double)len / best_s * 1e-9, best_s / best_a,
               have >= 3 ? best_b * 1e3 : 0.0);
        free(out);
        free(body);
    }
    printf("  (ratio: simdjson's time over attnd's; above 1, attnd is "
           "faster; blocks: attnd without its fixed-stride loop, the AVX-512 "
           "blocks each after the one before)\n");
    return 0;
}

/* One parse of form f by reader ("attnd" or "simdjson"), for counting
 * instructions under callgrind. */
static int reader_one(size_t f, const char *reader)
{
    limits_config lim;
    size_t len, numbers;
    char *body;
    float *out;
    double t;

    if (f >= NFORMS)
        return 2;
    limits_defaults(&lim);
    body = form_body(&forms[f], &len, &numbers);
    out = malloc(numbers * sizeof(float));
    t = strcmp(reader, "simdjson") == 0
            ? simdjson_once(body, len, out, numbers)
            : parse_once(body, len, &lim, forms[f].name);
    printf("%s, %s: %.2f ms\n", forms[f].name, reader, t * 1e3);
    free(out);
    free(body);
    return t < 0;
}

int main(int argc, char **argv)
{
    size_t len, numbers, i, out_len;
    char *body = workload3(&len, &numbers);
    limits_config lim;
    json_error_t je;
    double t, best_j = 1e30, best_w = 1e30, best_b = 1e30;
    double run_ms = 0;
    int rep;
    codec_request *req = NULL;
    codec_error err = {0};
    char *chunk = malloc(1 << 16);

    if (argc >= 4 && strcmp(argv[1], "parse") == 0)
        return reader_one((size_t)atoi(argv[2]), argv[3]);
    if (reader_forms(30) != 0)
        return 1;
    if (argc >= 2 && strcmp(argv[1], "forms") == 0)
        return 0;
    printf("\n");

    limits_defaults(&lim);
    printf("workload 3 request: %zu numbers, %.1f MB of JSON\n", numbers,
           (double)len / 1e6);

    for (rep = 0; rep < 3; rep++) {
        json_t *root;
        t = now();
        root = json_loadb(body, len, 0, &je);
        t = now() - t;
        if (root == NULL) {
            printf("jansson failed: %s\n", je.text);
            return 1;
        }
        json_decref(root);
        if (t < best_j)
            best_j = t;
    }
    /* the row loops this CPU has, alternating: 3 AVX-512 at fixed strides
     * (then the others), 2 AVX-512 block after block (then SSSE3), 1
     * SSSE3, 0 none (the general reader alone); 3 is what attnd uses */
    {
        static const char *const isa_name[4] = {
            "general reader only", "SSSE3 row loop", "AVX-512 block loop",
            "AVX-512 strides"};
        double best_isa[4] = {1e30, 1e30, 1e30, 1e30};
        int have = codec__row_isa(-1), isa;
        for (rep = 0; rep < 3; rep++)
            for (isa = have; isa >= 0; isa--) {
                codec__row_isa(isa);
                if ((t = parse_once(body, len, &lim, isa_name[isa])) < 0)
                    return 1;
                if (t < best_isa[isa])
                    best_isa[isa] = t;
            }
        codec__row_isa(-1);
        printf("parse  jansson json_loadb (tree only)   %8.1f ms  %6.1f "
               "ns/number\n", best_j * 1e3, best_j / (double)numbers * 1e9);
        for (isa = have; isa >= 0; isa--)
            printf("parse  codec_parse, %-19s %8.1f ms  %6.1f ns/number  "
                   "(jansson/codec %.1fx)\n", isa_name[isa],
                   best_isa[isa] * 1e3,
                   best_isa[isa] / (double)numbers * 1e9,
                   best_j / best_isa[isa]);
        if (codec_parse(body, len, &lim, &req, &err) != 0) {
            printf("codec_parse failed: %s\n", err.message);
            return 1;
        }
    }

    {
        size_t blen;
        char *b64 = workload3_b64(&blen);
        double best = 1e30;
        for (rep = 0; rep < 3; rep++) {
            if ((t = parse_once(b64, blen, &lim, "base64")) < 0)
                return 1;
            if (t < best)
                best = t;
        }
        printf("parse  codec_parse, base64 tensors      %8.1f ms  (%.1f MB)\n",
               best * 1e3, (double)blen / 1e6);
        free(b64);
    }

    if (codec_run(req, NULL, &err, NULL) != 0) {
        printf("codec_run failed: %s\n", err.message);
        return 1;
    }
    run_ms = req->elapsed_ms;
    printf("compute attn_forward (wall, meta)       %8.1f ms  (%.2f GFLOP)\n",
           run_ms, (double)req->flops * 1e-9);

    /* the writer takes the request; re-parse and re-run for each pass */
    for (rep = 0; rep < 5; rep++) {
        codec_writer *w;
        size_t got;
        int b64 = rep >= 3;
        if (rep > 0) {
            if (codec_parse(body, len, &lim, &req, &err) != 0 ||
                codec_run(req, NULL, &err, NULL) != 0) {
                printf("failed: %s\n", err.message);
                return 1;
            }
        }
        req->base64_out = b64;
        w = codec_writer_new(req);
        out_len = 0;
        if (rep == 0) {
            /* once, untimed: the body is valid JSON of the right shape */
            sbuf all = {0};
            json_t *root, *att;
            while ((got = codec_writer_read(w, chunk, 1 << 16)) > 0)
                put(&all, chunk, got);
            root = json_loadb(all.s, all.len, 0, &je);
            att = root ? json_object_get(root, "attention") : NULL;
            if (root == NULL || json_array_size(att) != 12 ||
                json_array_size(json_array_get(att, 11)) != 512 ||
                json_array_size(json_object_get(root, "output")) != 512) {
                printf("the response is not the expected JSON\n");
                return 1;
            }
            json_decref(root);
            free(all.s);
            codec_writer_free(w);
            continue;
        }
        t = now();
        while ((got = codec_writer_read(w, chunk, 1 << 16)) > 0)
            out_len += got;
        t = now() - t;
        codec_writer_free(w);
        if (!b64 && t < best_w)
            best_w = t;
        if (b64 && t < best_b)
            best_b = t;
        if (rep == 2)
            printf("write  JSON   %.1f MB  %8.1f ms  %6.1f ns/number\n",
                   (double)out_len / 1e6, best_w * 1e3,
                   best_w / (512.0 * 768 + 12.0 * 512 * 512) * 1e9);
        if (rep == 4)
            printf("write  base64 %.1f MB  %8.1f ms\n",
                   (double)out_len / 1e6, best_b * 1e3);
    }

    {
        /* per-number costs on realistic values: outputs ~N(0, 0.1) and
         * attention weights in (0, 1) */
        size_t count = 1000000;
        float *v = malloc(count * sizeof(float));
        for (i = 0; i < count; i++)
            v[i] = (i & 1) ? frand() : (frand() + 0.1f) * 5.0f;
        printf("float32 -> text, %zu values:\n", count);
        bench_format("codec_num_format (dragonbox)", fmt_codec, v, count);
        bench_runs(v, count);
        bench_format("snprintf %.9g (round-trips, long)", fmt_9g, v, count);
        bench_format("snprintf %.17g (jansson's way)", fmt_17g, v, count);
        bench_format("%.6g..%.9g until strtof agrees", fmt_try, v, count);
        free(v);
    }
    free(chunk);
    free(body);
    return 0;
}
