/* codec_write.c: the 200 response body, streamed. The body is a short list of
 * segments (literal text, a float array as nested JSON arrays, a float array
 * as base64) that codec_writer_read turns into text a staging buffer at a
 * time, so a response of tens of megabytes never exists as one string or one
 * jansson tree. Numbers are the shortest text that reads back to the same
 * float32 (codec_num.c). */
#include "codec_int.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum codec__seg_kind {
    CODEC__SEG_TEXT = 0,
    CODEC__SEG_JSON = 1, /* nested arrays of numbers */
    CODEC__SEG_B64 = 2   /* base64 of the little-endian float32 values */
} codec__seg_kind;

typedef struct codec__seg {
    codec__seg_kind kind;
    char *text;        /* TEXT: owned */
    size_t len;        /* TEXT: bytes; JSON/B64: values */
    const float *v;    /* JSON/B64: borrowed from the request */
    size_t shape[4];
    int rank;
} codec__seg;

#define CODEC__STAGE 65536
#define CODEC__MAX_SEGS 12

struct codec_writer {
    codec_request *req;
    codec__seg seg[CODEC__MAX_SEGS];
    int nseg, cur;
    size_t pos;      /* within seg[cur]: byte (TEXT, B64) or value (JSON) */
    size_t idx[4];   /* JSON: index of the next value along each axis */
    size_t stage_len, stage_off;
    char stage[CODEC__STAGE];
};

/* Appends a text segment made with printf; -1 when out of memory. */
static int codec__text(codec_writer *w, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static int codec__text(codec_writer *w, const char *fmt, ...)
{
    va_list ap;
    int n;
    char *s;

    va_start(ap, fmt);
    n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0 || (s = malloc((size_t)n + 1)) == NULL)
        return -1;
    va_start(ap, fmt);
    vsnprintf(s, (size_t)n + 1, fmt, ap);
    va_end(ap);
    w->seg[w->nseg].kind = CODEC__SEG_TEXT;
    w->seg[w->nseg].text = s;
    w->seg[w->nseg].len = (size_t)n;
    w->nseg++;
    return 0;
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
        char dims[128];
        size_t n = 0;
        for (i = 0; i < rank; i++)
            n += (size_t)snprintf(dims + n, sizeof dims - n, "%s%zu",
                                  i ? "," : "", shape[i]);
        if (codec__text(w, "{\"dtype\":\"float32\",\"shape\":[%s],\"data\":\"",
                        dims) != 0)
            return -1;
    }
    s = &w->seg[w->nseg++];
    s->kind = base64 ? CODEC__SEG_B64 : CODEC__SEG_JSON;
    s->text = NULL;
    s->len = count;
    s->v = v;
    s->rank = rank;
    for (i = 0; i < 4; i++)
        s->shape[i] = i < rank ? shape[i] : 0;
    if (base64 && codec__text(w, "\"}") != 0)
        return -1;
    return 0;
}

codec_writer *codec_writer_new(codec_request *req)
{
    codec_writer *w;
    const attn_params *p;
    const attn_dims *d;
    size_t shape[4];
    int b, ok;

    if (req == NULL)
        return NULL;
    if (req->output == NULL) {
        /* codec_run has not succeeded: there is no body to write */
        codec_request_free(req);
        return NULL;
    }
    w = calloc(1, sizeof *w);
    if (w == NULL) {
        codec_request_free(req);
        return NULL;
    }
    w->req = req;
    p = &req->p;
    d = &p->dims;
    b = req->batched;

    /* output: [B][n][d_out] or [n][d_out] */
    shape[0] = d->B;
    shape[1] = d->n;
    shape[2] = d->d_out;
    ok = codec__text(w, "{\"output\":") == 0 &&
         codec__array(w, req->output, shape + !b, 2 + b, req->base64_out) == 0;

    if (ok && req->weights != NULL) {
        int r;
        if (p->weights == ATTN_WEIGHTS_PER_HEAD) {
            /* [B][h][n][m] or [h][n][m] */
            shape[0] = d->B;
            shape[1] = d->h;
            shape[2] = d->n;
            shape[3] = d->m;
            r = 3;
        } else {
            /* [B][n][m] or [n][m] */
            shape[0] = d->B;
            shape[1] = d->n;
            shape[2] = d->m;
            r = 2;
        }
        ok = codec__text(w, ",\"attention\":") == 0 &&
             codec__array(w, req->weights, shape + !b, r + b,
                          req->base64_out) == 0;
    }
    if (ok && req->tokens_json != NULL)
        ok = codec__text(w, ",\"tokens\":%s", req->tokens_json) == 0;
    if (ok && req->memory_tokens_json != NULL)
        ok = codec__text(w, ",\"memory_tokens\":%s",
                         req->memory_tokens_json) == 0;
    if (ok)
        ok = codec__text(w, ",\"meta\":{\"batch\":%zu,\"n\":%zu,\"m\":%zu,"
                         "\"d_model\":%zu,\"d_mem\":%zu,\"num_heads\":%zu,"
                         "\"num_kv_heads\":%zu,\"d_k\":%zu,\"d_v\":%zu,"
                         "\"d_out\":%zu,\"mask\":\"%s\",\"params\":%llu,"
                         "\"flops\":%llu,\"elapsed_ms\":%.3f}}",
                         d->B, d->n, d->m, d->d_model, d->d_mem, d->h, d->g,
                         d->d_k, d->d_v, d->d_out,
                         p->mask == ATTN_MASK_CAUSAL ? "causal" : "none",
                         (unsigned long long)req->params,
                         (unsigned long long)req->flops, req->elapsed_ms) == 0;
    if (!ok) {
        codec_writer_free(w);
        return NULL;
    }
    return w;
}

/* Emits values of a JSON segment into the stage while room remains. */
static void codec__fill_json(codec_writer *w, codec__seg *s)
{
    char *o = w->stage + w->stage_len;
    char *lim = w->stage + CODEC__STAGE - (CODEC_NUM_MAX + 2 * 4 + 2);
    int rank = s->rank, l, closes;

    if (w->pos == 0)
        for (l = 0; l < rank; l++)
            *o++ = '[';
    while (w->pos < s->len && o < lim) {
        o += codec_num_format(s->v[w->pos], o);
        w->pos++;
        /* advance the index; each axis that wraps closes one bracket */
        l = rank - 1;
        closes = 0;
        w->idx[l]++;
        while (w->idx[l] == s->shape[l]) {
            closes++;
            if (l == 0)
                break;
            w->idx[l] = 0;
            l--;
            w->idx[l]++;
        }
        for (l = 0; l < closes; l++)
            *o++ = ']';
        if (w->pos < s->len) {
            *o++ = ',';
            for (l = 0; l < closes; l++)
                *o++ = '[';
        }
    }
    w->stage_len = (size_t)(o - w->stage);
}

/* Refills the stage from the current segment(s). */
static void codec__fill(codec_writer *w)
{
    w->stage_len = w->stage_off = 0;
    while (w->cur < w->nseg && CODEC__STAGE - w->stage_len >= 64) {
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
            if (w->pos < s->len)
                return;
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
        memset(w->idx, 0, sizeof w->idx);
    }
}

size_t codec_writer_read(codec_writer *w, char *buf, size_t cap)
{
    size_t n = 0, k;

    while (n < cap) {
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
    codec_request_free(w->req);
    free(w);
}
