/* attend/write.c: the 200 response body, streamed. The body is a short list of
 * segments (literal text, a float array as nested JSON arrays, a float array
 * as base64) that codec_writer_read turns into text a staging buffer at a
 * time, so a response of tens of megabytes never exists as one string or one
 * jansson tree. Numbers are the shortest text that reads back to the same
 * float32 (json/numbers.c). */
#include "attend/fields.h"
#include "attend/request.h"
#include "json/text.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum codec__seg_kind {
    CODEC__SEG_TEXT = 0,
    CODEC__SEG_JSON = 1, /* nested arrays of numbers */
    CODEC__SEG_B64 = 2   /* base64 of the little-endian float32 values */
} codec__seg_kind;

/* Deepest array written: top-k pairs [B][h][n][k][2]. */
#define CODEC__RANK 5

typedef struct codec__seg {
    codec__seg_kind kind;
    char *text;        /* TEXT: owned */
    size_t len;        /* TEXT: bytes; JSON/B64: values */
    const float *v;    /* JSON/B64: borrowed from the request */
    size_t shape[CODEC__RANK];
    int rank;
} codec__seg;

#define CODEC__STAGE 65536
/* Most bytes one value of a JSON segment takes: the number (with the
 * formatter's scratch room), the brackets its index closes and opens, the
 * comma. */
#define CODEC__VALUE_MAX (CODEC_NUM_BUF + 2 * CODEC__RANK + 1)
/* JSON segments of at least this many values are formatted in parallel on
 * the compute pool, CODEC__PAR_CHUNK values a task: formatting costs about
 * 8 ns a value with AVX-512 (30 without), so a 3-million-value map would
 * take 25 ms (0.1 s) on one thread. */
#define CODEC__PAR_MIN 65536
#define CODEC__PAR_CHUNK 8192

struct codec_writer {
    codec_request *req;
    codec__seg *seg;  /* grows: the analysis adds segments per batch element */
    int nseg, cap, cur;
    size_t pos;      /* within seg[cur]: byte (TEXT, B64) or value (JSON) */
    const attn_executor *exec; /* the pool, for large JSON segments */
    bool (*par_ok)(void *ctx);  /* whether to use it now (NULL: always) */
    void *par_ctx;
    char *par;       /* [tasks][CODEC__PAR_CHUNK * CODEC__VALUE_MAX] */
    size_t *par_len; /* [tasks]: bytes each task wrote */
    size_t par_tasks;
    size_t par_next, par_done; /* chunks of the last batch: next to serve,
                                  formatted */
    text_buf pending; /* text since the last array segment: it becomes one
                         TEXT segment (codec__flush) */
    char *stage;     /* CODEC__STAGE bytes, or the tasks' output */
    size_t stage_len, stage_off;
    char stage_own[CODEC__STAGE];
};

/* A new segment at the end of the list, or NULL when out of memory. */
static codec__seg *codec__push(codec_writer *w)
{
    if (w->nseg == w->cap) {
        int cap = w->cap ? w->cap * 2 : 16;
        codec__seg *s = realloc(w->seg, (size_t)cap * sizeof *s);
        if (s == NULL)
            return NULL;
        w->seg = s;
        w->cap = cap;
    }
    memset(&w->seg[w->nseg], 0, sizeof w->seg[0]);
    return &w->seg[w->nseg++];
}

/* Appends printf-formatted text to the pending text; 0, or -1 once out of
 * memory (the pending text is then failed, and freed with the writer). */
static int codec__text(codec_writer *w, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static int codec__text(codec_writer *w, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    text_vprintf(&w->pending, fmt, ap);
    va_end(ap);
    return text_failed(&w->pending) ? -1 : 0;
}

/* Appends the literal s to the pending text; 0, or -1 once out of memory
 * (as codec__text, without a format to parse). */
static int codec__puts(codec_writer *w, const char *s)
{
    text_puts(&w->pending, s);
    return text_failed(&w->pending) ? -1 : 0;
}

/* Ends the pending text as one TEXT segment, which then owns it (nothing
 * when there is none). 0, or -1 when out of memory. */
static int codec__flush(codec_writer *w)
{
    codec__seg *g;
    size_t len;

    if (w->pending.len == 0 && !text_failed(&w->pending))
        return 0;
    if ((g = codec__push(w)) == NULL)
        return -1;
    g->kind = CODEC__SEG_TEXT;
    g->text = text_take(&w->pending, &len);
    g->len = len;
    return g->text != NULL ? 0 : -1;
}

/* Appends the segments of one float array: nested arrays, or a tensor
 * object {"dtype","shape","data"} in base64 mode. */
static int codec__array(codec_writer *w, const float *v, const size_t *shape,
                        int rank, int base64)
{
    codec__seg *s;
    size_t count = 1;
    int i;

    for (i = 0; i < rank; i++)
        count *= shape[i];
    if (base64) {
        codec__text(w, "{\"dtype\":\"float32\",\"shape\":[");
        for (i = 0; i < rank; i++)
            codec__text(w, "%s%zu", i ? "," : "", shape[i]);
        codec__text(w, "],\"data\":\"");
    }
    if (codec__flush(w) != 0 || (s = codec__push(w)) == NULL)
        return -1;
    s->kind = base64 ? CODEC__SEG_B64 : CODEC__SEG_JSON;
    s->len = count;
    s->v = v;
    s->rank = rank;
    for (i = 0; i < rank; i++)
        s->shape[i] = shape[i];
    if (base64 && codec__text(w, "\"}") != 0)
        return -1;
    return 0;
}

/* One head's figures as a JSON object, after a comma unless first. */
static int codec__head(codec_writer *w, const attn_head_stats *st, int first)
{
    char v[7][CODEC_NUM_BUF];
    const double f[7] = {st->entropy, st->entropy_normalized, st->confidence,
                         st->self, st->prev, st->next, st->first};
    int i;

    for (i = 0; i < 7; i++)
        v[i][codec_num_format((float)f[i], v[i])] = '\0';
    return codec__text(w, "%s{\"entropy\":%s,\"entropy_normalized\":%s,"
                       "\"confidence\":%s,\"self\":%s,\"prev\":%s,"
                       "\"next\":%s,\"first\":%s,\"dominant_offset\":%ld,"
                       "\"pattern\":\"%s\"}", first ? "" : ",", v[0], v[1],
                       v[2], v[3], v[4], v[5], v[6], st->dominant_offset,
                       attn_pattern_name((int)st->pattern));
}

/* "analysis": {"heads":[..],"similarity":[[h x h]],"skipped_rows":k} for
 * a 2-D x, a list of them (one per batch element) for a batched x. Figures
 * are written as float32 (shortest form): they are summaries. */
static int codec__analysis(codec_writer *w, const codec_request *req)
{
    const attn_dims *d = &req->p.dims;
    size_t e, i, shape[2] = {d->h, d->h};

    if (codec__text(w, ",\"analysis\":%s", req->batched ? "[" : "") != 0)
        return -1;
    for (e = 0; e < d->B; e++) {
        if (codec__text(w, "%s{\"heads\":[", e ? "," : "") != 0)
            return -1;
        for (i = 0; i < d->h; i++)
            if (codec__head(w, &req->heads[e * d->h + i], i == 0) != 0)
                return -1;
        if (codec__text(w, "],\"similarity\":") != 0 ||
            codec__array(w, req->similarity + e * d->h * d->h, shape, 2, 0) ||
            codec__text(w, ",\"skipped_rows\":%zu}", req->skipped_rows[e]))
            return -1;
    }
    return req->batched ? codec__text(w, "]") : 0;
}

/* Appends the segments of one answer object {"output": .., "meta": {..}}
 * for a request that codec_run completed. 0, or -1 when out of memory. */
static int codec__answer(codec_writer *w, const codec_request *req)
{
    const attn_params *p = &req->p;
    const attn_dims *d = &p->dims;
    size_t shape[CODEC__RANK];
    int b = req->batched, ok;

    /* output: [B][n][d_out] or [n][d_out] */
    shape[0] = d->B;
    shape[1] = d->n;
    shape[2] = d->d_out;
    ok = codec__puts(w, "{\"output\":") == 0 &&
         codec__array(w, req->output, shape + !b, 2 + b, req->base64_out) == 0;

    if (ok && (req->weights != NULL || req->pairs != NULL)) {
        int r;
        size_t last = req->pairs ? req->top_k : d->m;
        if (p->weights == ATTN_WEIGHTS_PER_HEAD) {
            /* [B][h][n][m] or [h][n][m]; top_k: [..][k][2] */
            shape[0] = d->B;
            shape[1] = d->h;
            shape[2] = d->n;
            shape[3] = last;
            r = 3;
        } else {
            /* [B][n][m] or [n][m]; top_k: [..][k][2] */
            shape[0] = d->B;
            shape[1] = d->n;
            shape[2] = last;
            r = 2;
        }
        shape[r + 1] = 2; /* the pair axis, used only with top_k */
        ok = codec__puts(w, ",\"attention\":") == 0 &&
             codec__array(w, req->pairs ? req->pairs : req->weights,
                          shape + !b, r + b + (req->pairs != NULL),
                          req->base64_out) == 0;
    }
    if (ok && req->heads != NULL)
        ok = codec__analysis(w, req) == 0;
    if (ok && req->value_norms != NULL) {
        /* [B][h][m] or [h][m] */
        shape[0] = d->B;
        shape[1] = d->h;
        shape[2] = d->m;
        ok = codec__text(w, ",\"value_norms\":") == 0 &&
             codec__array(w, req->value_norms, shape + !b, 2 + b,
                          req->base64_out) == 0;
    }
    if (ok && req->q_out != NULL) {
        /* q [B][h][n][d_k], k [B][g][m][d_k] */
        shape[0] = d->B;
        shape[1] = d->h;
        shape[2] = d->n;
        shape[3] = d->d_k;
        ok = codec__text(w, ",\"q\":") == 0 &&
             codec__array(w, req->q_out, shape + !b, 3 + b,
                          req->base64_out) == 0;
        shape[1] = d->g;
        shape[2] = d->m;
        ok = ok && codec__text(w, ",\"k\":") == 0 &&
             codec__array(w, req->k_out, shape + !b, 3 + b,
                          req->base64_out) == 0;
    }
    if (ok && req->tokens_json != NULL)
        ok = codec__text(w, ",\"tokens\":%s", req->tokens_json) == 0;
    if (ok && req->memory_tokens_json != NULL)
        ok = codec__text(w, ",\"memory_tokens\":%s",
                         req->memory_tokens_json) == 0;
    if (ok) {
        /* the integers appended as they are: one printf of them all parsed
         * its format for every answer (a microsecond) */
        static const char *const key[] = {
            ",\"meta\":{\"batch\":", ",\"n\":", ",\"m\":", ",\"d_model\":",
            ",\"d_mem\":", ",\"num_heads\":", ",\"num_kv_heads\":", ",\"d_k\":",
            ",\"d_v\":", ",\"d_out\":"};
        const size_t dim[] = {d->B, d->n,   d->m,   d->d_model, d->d_mem,
                              d->h, d->g,   d->d_k, d->d_v,     d->d_out};
        size_t i;
        _Static_assert(sizeof key / sizeof key[0] == sizeof dim / sizeof dim[0],
                       "a key for every dimension");
        for (i = 0; i < sizeof dim / sizeof dim[0]; i++) {
            text_puts(&w->pending, key[i]);
            text_uint(&w->pending, dim[i]);
        }
        text_puts(&w->pending, ",\"mask\":\"");
        text_puts(&w->pending, attend_mask_names[p->mask == ATTN_MASK_CAUSAL]);
        text_puts(&w->pending, "\",\"params\":");
        text_uint(&w->pending, req->params);
        text_puts(&w->pending, ",\"flops\":");
        text_uint(&w->pending, req->flops);
        ok = codec__text(w, ",\"elapsed_ms\":%.3f", req->elapsed_ms) == 0;
    }
    /* the extras' share of elapsed_ms, as CPU time over the compute threads */
    if (ok && (req->analysis || req->top_k))
        ok = codec__text(w, ",\"analysis_ms\":%.3f",
                         req->analysis_seconds * 1e3) == 0;
    if (ok && req->refs_json != NULL)
        ok = codec__text(w, ",\"refs\":%s", req->refs_json) == 0;
    if (ok)
        ok = codec__puts(w, "}}") == 0;
    return ok ? 0 : -1;
}

/* The answer of a `layers` request: each layer's answer, the rollout, and
 * the sums. */
static int codec__layers_answer(codec_writer *w, const codec_request *req)
{
    const attn_dims *d = &req->layers[0]->p.dims;
    size_t l, shape[3];
    int ok = codec__text(w, "{\"layers\":[") == 0;

    for (l = 0; ok && l < req->n_layers; l++)
        ok = (l == 0 || codec__text(w, ",") == 0) &&
             codec__answer(w, req->layers[l]) == 0;
    ok = ok && codec__text(w, "]") == 0;
    if (ok && req->rollout_map != NULL) {
        int b = req->layers[0]->batched;
        shape[0] = d->B;
        shape[1] = d->n;
        shape[2] = d->n;
        ok = codec__text(w, ",\"rollout\":") == 0 &&
             codec__array(w, req->rollout_map, shape + !b, 2 + b,
                          req->base64_out) == 0;
    }
    return ok && codec__text(w, ",\"meta\":{\"layers\":%zu,\"params\":%llu,"
                             "\"flops\":%llu,\"elapsed_ms\":%.3f}}",
                             req->n_layers, (unsigned long long)req->params,
                             (unsigned long long)req->flops,
                             req->elapsed_ms) == 0
               ? 0
               : -1;
}

codec_writer *codec_writer_new(codec_request *req)
{
    codec_writer *w;

    if (req == NULL)
        return NULL;
    if (req->n_layers == 0 ? req->output == NULL
                           : req->layers[req->n_layers - 1]->output == NULL) {
        /* codec_run has not succeeded: there is no body to write */
        codec_request_free(req);
        return NULL;
    }
    /* the stage is written before it is read: only the fields are zeroed
     * (calloc cleared its 64 KiB for every response) */
    w = malloc(sizeof *w);
    if (w == NULL) {
        codec_request_free(req);
        return NULL;
    }
    memset(w, 0, offsetof(codec_writer, stage_own));
    w->req = req;
    w->stage = w->stage_own;
    /* Parallel formatting needs a pool of two or more workers, and its
     * buffers (codec__par_buffers) only a segment large enough for it. */
    if (req->exec != NULL && req->exec->workers > 1 && !req->base64_out) {
        w->par_tasks = 2 * req->exec->workers;
        w->exec = req->exec;
    }
    if ((req->n_layers == 0 ? codec__answer(w, req)
                            : codec__layers_answer(w, req)) != 0 ||
        codec__flush(w) != 0) {
        codec_writer_free(w);
        return NULL;
    }
    return w;
}

/* Writes values [from, to) of JSON segment s at o, with the brackets and
 * commas around them exactly as a writer going from the first value would,
 * and returns the end. Every value takes at most CODEC__VALUE_MAX bytes (the
 * opening brackets before value 0 fit in the first value's share, as
 * rank <= CODEC__RANK). */
static char *codec__json_range(const codec__seg *s, size_t from, size_t to,
                               char *o)
{
    size_t idx[CODEC__RANK], rest = from;
    int rank = s->rank, l, closes;
    char text[CODEC_NUM_RUN][16];
    unsigned char len[CODEC_NUM_RUN];

    /* the index of value `from`, axis by axis from the last */
    for (l = rank - 1; l >= 0; l--) {
        idx[l] = rest % s->shape[l];
        rest /= s->shape[l];
    }
    if (from == 0)
        for (l = 0; l < rank; l++)
            *o++ = '[';
    for (size_t p = from; p < to; p++) {
        size_t j = (p - from) % CODEC_NUM_RUN;
        if (j == 0)
            codec_num_text_n(s->v + p,
                             to - p < CODEC_NUM_RUN ? to - p : CODEC_NUM_RUN,
                             text, len);
        memcpy(o, text[j], 16);
        o += len[j];
        /* advance the index: most values end no row, only a comma follows */
        l = rank - 1;
        if (++idx[l] < s->shape[l]) {
            *o++ = ',';
            continue;
        }
        /* each axis that wraps closes one bracket */
        closes = 1;
        while (l > 0) {
            idx[l] = 0;
            l--;
            if (++idx[l] < s->shape[l])
                break;
            closes++;
        }
        for (l = 0; l < closes; l++)
            *o++ = ']';
        if (p + 1 < s->len) {
            *o++ = ',';
            for (l = 0; l < closes; l++)
                *o++ = '[';
        }
    }
    return o;
}

/* Task i of a parallel fill: chunk i of the values from w->pos. */
static void codec__par_task(void *arg, size_t i, size_t worker)
{
    codec_writer *w = arg;
    const codec__seg *s = &w->seg[w->cur];
    size_t from = w->pos + i * CODEC__PAR_CHUNK, to = from + CODEC__PAR_CHUNK;
    char *o = w->par + i * (CODEC__PAR_CHUNK * CODEC__VALUE_MAX);

    (void)worker;
    if (to > s->len)
        to = s->len;
    w->par_len[i] = (size_t)(codec__json_range(s, from, to, o) - o);
}

/* 1 when the parallel fill's buffers are there (allocated on first use:
 * 1.4 MiB with two workers, which most responses never need); 0 when the
 * writer has no pool or no memory for them, and stays on one thread. */
static int codec__par_buffers(codec_writer *w)
{
    if (w->par != NULL)
        return 1;
    if (w->exec == NULL)
        return 0;
    w->par = malloc(w->par_tasks * CODEC__PAR_CHUNK * CODEC__VALUE_MAX);
    w->par_len = malloc(w->par_tasks * sizeof *w->par_len);
    if (w->par == NULL || w->par_len == NULL) {
        free(w->par);
        free(w->par_len);
        w->par = NULL;
        w->par_len = NULL;
        w->exec = NULL;
        return 0;
    }
    return 1;
}

/* Emits values of a JSON segment into the stage while room remains. A
 * large segment, with the pool at hand, is formatted a batch of chunks at a
 * time on the pool, and each chunk of the batch becomes the stage in turn. */
static void codec__fill_json(codec_writer *w, codec__seg *s)
{
    size_t room = (CODEC__STAGE - w->stage_len) / CODEC__VALUE_MAX, n;

    if (s->len >= CODEC__PAR_MIN && w->stage_len == 0 && w->exec != NULL &&
        (w->par_ok == NULL || w->par_ok(w->par_ctx)) &&
        codec__par_buffers(w)) {
        size_t left = s->len - w->pos, tasks;
        tasks = (left + CODEC__PAR_CHUNK - 1) / CODEC__PAR_CHUNK;
        if (tasks > w->par_tasks)
            tasks = w->par_tasks;
        w->exec->run(w->exec->ctx, tasks, codec__par_task, w);
        w->pos += tasks * CODEC__PAR_CHUNK;
        if (w->pos > s->len)
            w->pos = s->len;
        /* the chunks become the stage in turn (codec_writer_read) */
        w->stage = w->par;
        w->stage_len = w->par_len[0];
        w->par_next = 1;
        w->par_done = tasks;
        return;
    }
    n = s->len - w->pos < room ? s->len - w->pos : room;
    w->stage_len = (size_t)(codec__json_range(s, w->pos, w->pos + n,
                                              w->stage + w->stage_len) -
                            w->stage);
    w->pos += n;
}

/* Refills the stage from the current segment(s). */
static void codec__fill(codec_writer *w)
{
    w->stage = w->stage_own;
    w->stage_len = w->stage_off = 0;
    while (w->cur < w->nseg && w->stage == w->stage_own &&
           CODEC__STAGE - w->stage_len >= CODEC__VALUE_MAX + 64) {
        codec__seg *s = &w->seg[w->cur];
        size_t room = CODEC__STAGE - w->stage_len;

        if (s->kind == CODEC__SEG_TEXT) {
            size_t n = s->len - w->pos;
            if (n > room)
                n = room;
            memcpy(w->stage + w->stage_len, s->text + w->pos, n);
            w->stage_len += n;
            w->pos += n;
            if (w->pos < s->len)
                return;
        } else if (s->kind == CODEC__SEG_JSON) {
            codec__fill_json(w, s);
            if (w->pos < s->len || w->stage != w->stage_own) {
                if (w->pos == s->len) {
                    w->cur++;
                    w->pos = 0;
                }
                return;
            }
        } else {
            size_t total = s->len * 4, to = w->pos + room / 4 * 3;
            if (to >= total)
                to = total;
            w->stage_len += codec_base64_f32(s->v, total, w->pos, to,
                                             w->stage + w->stage_len);
            w->pos = to;
            if (w->pos < total)
                return;
        }
        w->cur++;
        w->pos = 0;
    }
}

void codec_writer_gate(codec_writer *w, bool (*ok)(void *ctx), void *ctx)
{
    w->par_ok = ok;
    w->par_ctx = ctx;
}

size_t codec_writer_read(codec_writer *w, char *buf, size_t cap)
{
    size_t n = 0, k;

    while (n < cap) {
        if (w->stage_off == w->stage_len && w->par_next < w->par_done) {
            /* the next chunk of a batch formatted on the pool */
            w->stage = w->par + w->par_next * (CODEC__PAR_CHUNK *
                                               CODEC__VALUE_MAX);
            w->stage_len = w->par_len[w->par_next++];
            w->stage_off = 0;
        }
        if (w->stage_off == w->stage_len) {
            codec__fill(w);
            if (w->stage_len == 0)
                break;
        }
        k = w->stage_len - w->stage_off;
        if (k > cap - n)
            k = cap - n;
        memcpy(buf + n, w->stage + w->stage_off, k);
        w->stage_off += k;
        n += k;
    }
    return n;
}

void codec_writer_free(codec_writer *w)
{
    int i;

    if (w == NULL)
        return;
    for (i = 0; i < w->nseg; i++)
        free(w->seg[i].text);
    free(w->seg);
    text_free(&w->pending);
    free(w->par);
    free(w->par_len);
    codec_request_free(w->req);
    free(w);
}
