/* attend/build.c: checked fields -> the library's parameters. Weights are
 * converted to the library's one layout ([d_in][heads*d_head], heads side
 * by side) from whichever the request used: PyTorch's [d_out][d_in]
 * (weight_layout "out_in"), per-head 3-D arrays, or the three projections
 * packed into w_qkv in either order. Masks and positions given once for
 * the batch are expanded to [B][..]. Every buffer ends up owned by the
 * request (or held from the tensor store), so the fields can be freed. */
#include "attend/parse.h"
#include "json/text.h"

#include <stddef.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Makes buf the request's (freed with it); NULL when buf is NULL or the
 * request's list is full (then buf is freed). */
static void *codec__adopt(codec_request *req, void *buf)
{
    if (buf == NULL)
        return NULL;
    if (req->n_owned == CODEC_MAX_OWNED) {
        free(buf);
        return NULL;
    }
    req->owned[req->n_owned++] = buf;
    return buf;
}

/* A new buffer of count elements of size elem, owned by the request. */
static void *codec__alloc(codec_request *req, size_t count, size_t elem)
{
    req->copied += (uint64_t)count * elem;
    return codec__adopt(req, malloc(count * elem + (count == 0)));
}

/* The values of a as the request's: moved, held (stored tensors stay in
 * the store) or, when shared with other layers, copied. NULL when a is
 * empty; *oom set when out of memory. */
static const void *codec__take(codec_array *a, int shared, size_t elem,
                               codec_request *req, int *oom)
{
    void *copy;

    if (a->data == NULL)
        return NULL;
    if (shared) {
        copy = codec__alloc(req, a->count, elem);
        if (copy == NULL) {
            *oom = 1;
            return NULL;
        }
        memcpy(copy, a->data, a->count * elem);
        return copy;
    }
    /* the values the request keeps, moved or held, count in its working
     * memory: the body they came from is freed once parsed, and a held
     * tensor stays after the store evicts it */
    req->inputs += (uint64_t)a->count * elem;
    if (a->hold != NULL) {
        if (req->n_holds == CODEC_MAX_OWNED) {
            *oom = 1;
            return NULL;
        }
        req->holds[req->n_holds++] = a->hold;
        req->refs = *a->refs;
        a->hold = NULL;
    } else if (codec__adopt(req, a->data) == NULL) {
        a->data = NULL;
        *oom = 1;
        return NULL;
    }
    copy = a->data;
    a->data = NULL;
    return copy;
}

/* One projection weight in the library's layout [in][heads*per]: a 2-D
 * in_out weight as it is; [heads*per][in] transposed; [heads][in][per] and
 * [heads][per][in] put side by side. */
static const float *codec__weight(codec_array *a, int shared, int out_in,
                                  codec_request *req, int *oom)
{
    const float *in = a->data;
    float *out;
    size_t r, c, i, rows, cols, k, per;

    if (a->data == NULL)
        return NULL;
    if (a->rank == 2 && !out_in)
        return codec__take(a, shared, sizeof(float), req, oom);
    out = codec__alloc(req, a->count, sizeof(float));
    if (out == NULL) {
        *oom = 1;
        return NULL;
    }
    if (a->rank == 2) {
        /* [cols][rows] -> [rows][cols] */
        cols = a->shape[0];
        rows = a->shape[1];
        for (c = 0; c < cols; c++)
            for (r = 0; r < rows; r++)
                out[r * cols + c] = in[c * rows + r];
        return out;
    }
    k = a->shape[0];
    if (!out_in) {
        /* [k][rows][per] -> [rows][k*per] */
        rows = a->shape[1];
        per = a->shape[2];
        for (i = 0; i < k; i++)
            for (r = 0; r < rows; r++)
                memcpy(out + r * k * per + i * per, in + (i * rows + r) * per,
                       per * sizeof(float));
    } else {
        /* [k][per][rows] -> [rows][k*per] */
        per = a->shape[1];
        rows = a->shape[2];
        for (i = 0; i < k; i++)
            for (c = 0; c < per; c++)
                for (r = 0; r < rows; r++)
                    out[r * k * per + i * per + c] = in[(i * per + c) * rows + r];
    }
    return out;
}

/* Which projection output o of a packed w_qkv or b_qkv feeds: 0 queries,
 * 1 keys, 2 values, with its column in that projection. */
static int codec__packed_slot(size_t o, const attn_dims *d, int per_head,
                              size_t *col)
{
    size_t hk = d->h * d->d_k, gk = d->g * d->d_k;

    if (per_head) {
        size_t head = o / (3 * d->d_k), rest = o % (3 * d->d_k);
        *col = head * d->d_k + rest % d->d_k;
        return (int)(rest / d->d_k);
    }
    if (o < hk) {
        *col = o;
        return 0;
    }
    if (o < hk + gk) {
        *col = o - hk;
        return 1;
    }
    *col = o - hk - gk;
    return 2;
}

/* w_qkv (and b_qkv) -> w_q, w_k, w_v (b_q, b_k, b_v). */
static int codec__unpack(codec__fields *f, codec_request *req)
{
    attn_params *p = &req->p;
    const attn_dims *d = &p->dims;
    const float *w = f->w_qkv.data, *b = f->b_qkv.data;
    int oi = f->weight_layout == 1, per_head = f->qkv_order == 1;
    size_t outs = (d->h + 2 * d->g) * d->d_k, width[3], o, r, col;
    float *dst[3], *bias[3] = {NULL, NULL, NULL};
    int k;

    width[0] = d->h * d->d_k;
    width[1] = d->g * d->d_k;
    width[2] = d->g * d->d_v;
    for (k = 0; k < 3; k++) {
        dst[k] = codec__alloc(req, d->d_model * width[k], sizeof(float));
        if (dst[k] == NULL)
            return -1;
        if (b != NULL && (bias[k] = codec__alloc(req, width[k],
                                                 sizeof(float))) == NULL)
            return -1;
    }
    for (o = 0; o < outs; o++) {
        k = codec__packed_slot(o, d, per_head, &col);
        for (r = 0; r < d->d_model; r++)
            dst[k][r * width[k] + col] = oi ? w[o * d->d_model + r]
                                            : w[r * outs + o];
        if (b != NULL)
            bias[k][col] = b[o];
    }
    p->w_q = dst[0];
    p->w_k = dst[1];
    p->w_v = dst[2];
    if (b != NULL) {
        p->b_q = bias[0];
        p->b_k = bias[1];
        p->b_v = bias[2];
    }
    return 0;
}

/* A [len] or [B][len] field as [B][len] elements of size elem. */
static void *codec__per_batch(const codec_array *a, size_t B, size_t len,
                              size_t elem, codec_request *req)
{
    unsigned char *out;
    size_t b;

    if (a->data == NULL)
        return NULL;
    out = codec__alloc(req, B * len, elem);
    if (out == NULL)
        return NULL;
    for (b = 0; b < B; b++)
        memcpy(out + b * len * elem,
               (const unsigned char *)a->data + (a->rank == 2 ? b * len * elem
                                                              : 0),
               len * elem);
    return out;
}

/* The broadcast strides of an attn_bias / attn_mask (check.c accepted its
 * form). */
static void codec__strides(const codec_array *a, int b3, const attn_dims *d,
                           attn_score_map *s)
{
    size_t nm = d->n * d->m;

    s->stride_b = s->stride_h = 0;
    if (a->rank == 3 && b3)
        s->stride_b = nm;
    else if (a->rank == 3)
        s->stride_h = nm;
    else if (a->rank == 4) {
        s->stride_h = nm;
        s->stride_b = a->shape[0] == 1 ? 0 : d->h * nm;
    }
}

/* BLOOM's slopes (build_alibi_tensor): with p the largest power of two
 * <= h, 2^(-8(i+1)/p) for the first p heads, then 2^(-4(2k+1)/p). */
static float *codec__bloom_slopes(size_t h, codec_request *req)
{
    float *s = codec__alloc(req, h, sizeof(float));
    size_t p = 1, i;

    if (s == NULL)
        return NULL;
    while (p * 2 <= h)
        p *= 2;
    for (i = 0; i < h; i++)
        s[i] = (float)(i < p ? exp2(-8.0 * (double)(i + 1) / (double)p)
                             : exp2(-4.0 * (double)(2 * (i - p) + 1) /
                                    (double)p));
    return s;
}

/* rope, alibi, window, global tokens, softcap and qk_norm. */
static int codec__rules(codec__fields *f, codec_request *req, int *oom)
{
    attn_params *p = &req->p;
    const attn_dims *d = &p->dims;
    size_t i;

    if (f->seen[F_ROPE]) {
        /* dim 0 rotates nothing (the library's "no rope") */
        p->rope.dim = f->rope.dim_given ? f->rope.dim : d->d_k;
        p->rope.theta = f->rope.theta;
        p->rope.style = (attn_rope_style)f->rope.style;
        p->rope.attention_factor = f->rope.factor;
        p->rope.inv_freq = codec__take(&f->rope.inv_freq, f->shared[F_ROPE],
                                       sizeof(float), req, oom);
    }
    if (f->alibi.on) {
        p->alibi_slopes =
            f->alibi.slopes.data
                ? codec__take(&f->alibi.slopes, f->shared[F_ALIBI],
                              sizeof(float), req, oom)
                : codec__bloom_slopes(d->h, req);
        if (p->alibi_slopes == NULL)
            *oom = 1;
    }
    if (f->seen[F_WINDOW]) {
        p->window.on = 1;
        p->window.left = f->window.has_left ? f->window.left : ATTN_UNBOUNDED;
        p->window.right =
            f->window.has_right ? f->window.right : ATTN_UNBOUNDED;
    }
    if (f->global_tokens.data != NULL) {
        size_t *g = codec__alloc(req, f->global_tokens.count, sizeof *g);
        if (g == NULL) {
            *oom = 1;
        } else {
            for (i = 0; i < f->global_tokens.count; i++)
                g[i] = (size_t)((const int64_t *)f->global_tokens.data)[i];
            p->global_tokens = g;
            p->n_global = f->global_tokens.count;
        }
    }
    p->softcap = f->seen[F_SOFTCAP] ? (float)f->softcap : 0.0f;
    if (f->seen[F_QK_NORM]) {
        p->qk_norm.over = f->qk_norm.over == 1 ? ATTN_QK_NORM_ALL
                                               : ATTN_QK_NORM_HEAD;
        p->qk_norm.eps = f->qk_norm.eps > 0 ? f->qk_norm.eps : 1e-6;
        p->qk_norm.q_weight = codec__take(&f->qk_norm.q_weight,
                                          f->shared[F_QK_NORM],
                                          sizeof(float), req, oom);
        p->qk_norm.k_weight = codec__take(&f->qk_norm.k_weight,
                                          f->shared[F_QK_NORM],
                                          sizeof(float), req, oom);
    }
    return *oom ? -1 : 0;
}

/* A malloc'd NUL-terminated copy of s[0..len), counted in req->copied
 * twice: the answer copies it again while it is written (write.c); NULL
 * when out of memory. */
static char *codec__strndup(codec_request *req, const char *s, size_t len)
{
    char *d = malloc(len + 1);

    req->copied += 2 * ((uint64_t)len + 1);
    if (d != NULL) {
        memcpy(d, s, len);
        d[len] = '\0';
    }
    return d;
}

int codec__build(codec__fields *f, codec_request *req, codec_error *err)
{
    attn_params *p = &req->p;
    const attn_dims *d = &p->dims;
    int oi = f->weight_layout == 1, b3 = f->x.rank == 3, oom = 0;
    attn_status rc;
    unsigned char *sh = f->shared;

    p->mask = (attn_mask)f->mask;
    p->weights = (attn_weights)f->return_weights;
    p->scale = f->seen[F_SCALE] ? (float)f->scale : 0.0f;
    req->batched = b3;
    req->base64_out = f->encoding == 1;
    req->analysis = f->analysis;
    req->top_k = f->top_k;
    req->want_value_norms = f->value_norms;
    req->want_qk = f->return_qk;

    p->x = codec__take(&f->x, sh[F_X], sizeof(float), req, &oom);
    p->memory = codec__take(&f->memory, sh[F_MEMORY], sizeof(float), req,
                            &oom);
    if (f->value.data != NULL) {
        p->d_val = f->value.shape[f->value.rank - 1];
        p->value = codec__take(&f->value, sh[F_VALUE], sizeof(float), req,
                               &oom);
    }
    if (f->w_qkv.data != NULL) {
        if (codec__unpack(f, req) != 0)
            oom = 1;
    } else {
        p->w_q = codec__weight(&f->w_q, sh[F_W_Q], oi, req, &oom);
        p->w_k = codec__weight(&f->w_k, sh[F_W_K], oi, req, &oom);
        p->w_v = codec__weight(&f->w_v, sh[F_W_V], oi, req, &oom);
    }
    p->w_o = codec__weight(&f->w_o, sh[F_W_O], oi, req, &oom);
    if (f->b_qkv.data == NULL) {
        p->b_q = codec__take(&f->b_q, sh[F_B_Q], sizeof(float), req, &oom);
        p->b_k = codec__take(&f->b_k, sh[F_B_K], sizeof(float), req, &oom);
        p->b_v = codec__take(&f->b_v, sh[F_B_V], sizeof(float), req, &oom);
    }
    p->b_o = codec__take(&f->b_o, sh[F_B_O], sizeof(float), req, &oom);
    p->key_padding = codec__per_batch(&f->kpm, d->B, d->m, 1, req);
    p->positions = codec__per_batch(&f->positions, d->B, d->n,
                                    sizeof(int64_t), req);
    p->key_positions = codec__per_batch(&f->key_positions, d->B, d->m,
                                        sizeof(int64_t), req);
    if ((f->kpm.data && !p->key_padding) ||
        (f->positions.data && !p->positions) ||
        (f->key_positions.data && !p->key_positions))
        oom = 1;
    if (f->attn_bias.data != NULL) {
        codec__strides(&f->attn_bias, b3, d, &p->score_bias);
        p->score_bias.data = codec__take(&f->attn_bias, sh[F_ATTN_BIAS],
                                         sizeof(float), req, &oom);
    }
    if (f->attn_mask.data != NULL) {
        codec__strides(&f->attn_mask, b3, d, &p->score_mask);
        p->score_mask.data = codec__take(&f->attn_mask, sh[F_ATTN_MASK], 1,
                                         req, &oom);
    }
    if (!oom)
        codec__rules(f, req, &oom);
    if (!oom && f->tokens.text != NULL &&
        (req->tokens_json = codec__strndup(req, f->tokens.text,
                                            f->tokens.len)) ==
            NULL)
        oom = 1;
    if (!oom && f->memory_tokens.text != NULL &&
        (req->memory_tokens_json = codec__strndup(
             req, f->memory_tokens.text, f->memory_tokens.len)) == NULL)
        oom = 1;
    if (oom) {
        codec_error_set(err, ERRORS_UNAVAILABLE, NULL,
                        "out of memory while parsing the request");
        return -1;
    }
    rc = attn_check(p);
    if (rc != ATTN_OK) {
        codec_error_set(err, errors_from_attn(rc), NULL,
                        "the library refused the request: %s",
                        attn_strerror(rc));
        return -1;
    }
    return 0;
}

/* The tensors inside the score rules' objects, by their names in
 * meta.refs, and the field of the object that holds each. */
static const struct {
    const char *name;
    size_t offset;
    int object;
} codec__nested[] = {
    {"rope.inv_freq", offsetof(codec__fields, rope.inv_freq), F_ROPE},
    {"alibi.slopes", offsetof(codec__fields, alibi.slopes), F_ALIBI},
    {"qk_norm.q_weight", offsetof(codec__fields, qk_norm.q_weight),
     F_QK_NORM},
    {"qk_norm.k_weight", offsetof(codec__fields, qk_norm.k_weight),
     F_QK_NORM},
};

/* The float-valued tensor fields of f, as the field table lists them,
 * then the tensors inside the score rules' objects: their names, arrays
 * and whether they are the top level's (shared). At most CODEC__STORED. */
static size_t codec__float_arrays(codec__fields *f, const char **name,
                                  codec_array **a, int *shared)
{
    size_t n = 0;
    int id;

    for (id = 0; id < F_COUNT; id++) {
        if (attend_fields[id].kind != ATTEND_F32)
            continue;
        name[n] = attend_fields[id].name;
        a[n] = (codec_array *)(void *)((char *)f + codec__slots[id].offset);
        shared[n++] = f->shared[id];
    }
    for (id = 0; id < (int)(sizeof codec__nested / sizeof codec__nested[0]);
         id++) {
        name[n] = codec__nested[id].name;
        a[n] = (codec_array *)(void *)((char *)f + codec__nested[id].offset);
        shared[n++] = f->shared[codec__nested[id].object];
    }
    return n;
}

codec__pending *codec__pending_new(codec__fields *f, const codec_refs *refs)
{
    codec__pending *p = calloc(1, sizeof *p);
    const char *name[CODEC__STORED];
    codec_array *a[CODEC__STORED];
    int shared[CODEC__STORED];
    size_t n, i;

    if (p == NULL)
        return NULL;
    if (refs != NULL)
        p->refs = *refs;
    n = f != NULL ? codec__float_arrays(f, name, a, shared) : 0;
    for (i = 0; i < n; i++) {
        codec__stored *t = &p->plan[p->n];
        if (a[i]->data == NULL)
            continue;
        t->name = name[i];
        t->data = a[i]->data;
        t->count = a[i]->count;
        memcpy(t->shape, a[i]->shape, sizeof a[i]->shape);
        t->rank = a[i]->rank;
        snprintf(t->ref, sizeof t->ref, "%s", a[i]->ref);
        p->n++;
    }
    return p;
}

void codec__pending_keep(codec__pending *p, codec__fields *f)
{
    const char *name[CODEC__STORED];
    codec_array *a[CODEC__STORED];
    int shared[CODEC__STORED];
    size_t n = codec__float_arrays(f, name, a, shared), i;

    /* kept[] has a slot for each of them */
    for (i = 0; i < n; i++) {
        if (a[i]->data == NULL || shared[i] || a[i]->hold != NULL)
            continue;
        p->kept[p->n_kept++] = a[i]->data;
        a[i]->data = NULL;
    }
}

void codec_pending_free(codec__pending *p)
{
    size_t i;

    if (p == NULL)
        return;
    for (i = 0; i < p->n_kept; i++)
        free(p->kept[i]);
    free(p);
}

/* Puts the planned tensors that were not given by ref into the store and
 * writes req->refs_json, {"name":"sha256:..",...}; a tensor the store
 * cannot keep (or every one, with the store off) is left out. 0, or -1
 * with err filled (out of memory). */
static int codec__store_refs(codec__pending *p, codec_request *req,
                             codec_error *err)
{
    const codec_refs *refs = p->refs.put != NULL ? &p->refs : NULL;
    text_buf json = TEXT_BUF_INIT;
    const char *sep = "";
    char *s;

    /* {"name":"ref",...}: the names are the request's field names */
    text_puts(&json, "{");
    for (size_t i = 0; i < p->n; i++) {
        codec__stored *t = &p->plan[i];
        if (t->ref[0] == '\0' &&
            (refs == NULL || refs->put(refs->ctx, t->data, t->count,
                                       t->shape, t->rank, t->ref) != 0))
            continue; /* no store, or it cannot keep this one */
        text_puts(&json, sep);
        text_json_string(&json, t->name, strlen(t->name));
        text_puts(&json, ":");
        text_json_string(&json, t->ref, strlen(t->ref));
        sep = ",";
    }
    text_puts(&json, "}");
    if ((s = text_take(&json, NULL)) == NULL) {
        codec_error_set(err, ERRORS_UNAVAILABLE, NULL,
                        "out of memory while storing the request's tensors");
        return -1;
    }
    free(req->refs_json);
    req->refs_json = s;
    return 0;
}

int codec_store_pending(codec_request *req, codec_error *err)
{
    size_t l;
    int rc = 0;

    for (l = 0; rc == 0 && l < req->n_layers; l++)
        rc = codec_store_pending(req->layers[l], err);
    /* a `layers` request keeps only the top level's values for its
     * layers; it names no tensors itself */
    if (rc == 0 && req->pending != NULL && req->n_layers == 0)
        rc = codec__store_refs(req->pending, req, err);
    codec_pending_free(req->pending);
    req->pending = NULL;
    return rc;
}
