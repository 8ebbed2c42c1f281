/* attend/parse.c: request body -> validated attn_params with owned buffers.
 *
 * One pass over the body with the reader of json/reader.c: each field of
 * the table in fields.h is parsed straight into its packed buffer. An
 * unknown field is 422 with the closest known name ("did you mean"), so a
 * typo never computes a different attention in silence; a JSON null counts
 * as an absent optional field. The first contract error is kept while the
 * rest of the body is still checked for syntax, so a body that is not JSON
 * at all is always 400 invalid_json, never 422. Then check.c derives the
 * dimensions and cross-checks every field, the limits are checked with
 * overflow-checked products, and only then does build.c convert weights to
 * the library's layout.
 *
 * A `layers` request is read as its top-level fields (the defaults) and
 * then each layer's object; a layer inherits every field it does not give,
 * so each layer is parsed, checked and built exactly as the same request
 * alone would be. */
#include "attend/parse.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The arrays field `id` owns in f (up to two), for freeing and copying. */
static int codec__arrays_of(codec__fields *f, int id, codec_array **a)
{
    switch (attend_fields[id].kind) {
    case ATTEND_F32:
    case ATTEND_BOOL:
    case ATTEND_INDEX:
        a[0] = (codec_array *)(void *)((char *)f + codec__slots[id].offset);
        return 1;
    default:
        break;
    }
    if (id == F_ROPE) {
        a[0] = &f->rope.inv_freq;
        return 1;
    }
    if (id == F_QK_NORM) {
        a[0] = &f->qk_norm.q_weight;
        a[1] = &f->qk_norm.k_weight;
        return 2;
    }
    if (id == F_ALIBI) {
        a[0] = &f->alibi.slopes;
        return 1;
    }
    return 0;
}

void codec__fields_free(codec__fields *f)
{
    int id, k, n;
    codec_array *a[2];

    for (id = 0; id < F_COUNT; id++) {
        n = codec__arrays_of(f, id, a);
        for (k = 0; k < n; k++) {
            if (f->shared[id])
                memset(a[k], 0, sizeof *a[k]);
            else
                codec_array_clear(a[k]);
        }
    }
}

void codec__error_copy(codec_error *err, const codec_error *e)
{
    if (err->message[0] == '\0')
        *err = *e;
}

/* ptr = prefix "/" name, cut to cap bytes as snprintf would cut it:
 * without printf, which parsed its format for every field of a request. */
static void codec__pointer(char *ptr, size_t cap, const char *prefix,
                           const char *name)
{
    size_t a = strlen(prefix), b = strlen(name);

    if (a > cap - 1)
        a = cap - 1;
    memcpy(ptr, prefix, a);
    if (a < cap - 1)
        ptr[a++] = '/';
    if (b > cap - 1 - a)
        b = cap - 1 - a;
    memcpy(ptr + a, name, b);
    ptr[a + b] = '\0';
}

/* Reads the object at r->p into f. prefix is "" at the top level and
 * "/layers/<i>" inside a layer, where the fields that apply to the whole
 * request are refused. Returns 0, or -1 with err filled: a syntax error
 * anywhere wins over the first contract error. */
static int codec__object(codec_reader *r, codec__fields *f,
                         const char *prefix, codec_error *err)
{
    codec_error first = {0};
    int failed = 0, at_start = 1;
    const char *names[F_COUNT + 1];
    int i;

    for (i = 0; i < F_COUNT; i++)
        names[i] = attend_fields[i].name;
    names[F_COUNT] = NULL;
    codec_json_ws(r);
    if (r->p >= r->end) {
        codec_json_syntax(r, err, "empty body, expected a JSON object");
        return -1;
    }
    if (*r->p != '{') {
        codec_error tmp = {0};
        codec_reader at = *r;
        if (codec_json_skip(r, &tmp) != 0) {
            codec__error_copy(err, &tmp);
            return -1;
        }
        codec_json_ws(r);
        if (prefix[0] == '\0' && r->p < r->end) {
            codec_json_syntax(r, err, "unexpected text after the JSON value");
            return -1;
        }
        codec_error_set(err, ERRORS_INVALID_REQUEST, prefix,
                        "%s must be a JSON object, found %s",
                        prefix[0] ? prefix : "the body", codec_json_kind(&at));
        return -1;
    }
    r->p++;
    r->depth++;
    for (;;) {
        const char *key, *vstart;
        size_t key_len;
        int esc, id, rc, depth;
        char *unesc = NULL, ptr[400];
        codec_error e = {0};

        rc = codec_json_member(r, &at_start, &key, &key_len, &esc, err);
        if (rc < 0)
            return -1;
        if (rc == 0)
            break;
        if (esc) {
            unesc = codec_json_unescape(key, key_len, &key_len);
            if (unesc == NULL) {
                codec__parse_oom(err);
                return -1;
            }
            key = unesc;
        }
        id = attend_field_find(key, key_len);
        vstart = r->p;
        depth = r->depth;
        if (!failed && id == F_COUNT) {
            codec__unknown(prefix, key, key_len, names, "field", &first);
            failed = 1;
        }
        free(unesc);
        if (id < F_COUNT)
            codec__pointer(ptr, sizeof ptr, prefix, attend_fields[id].name);
        if (failed || id == F_COUNT ||
            (r->p + 4 <= r->end && memcmp(r->p, "null", 4) == 0 &&
             id != F_X)) {
            /* skipped: null (absent), or after a contract error */
            if (!failed && id < F_COUNT && prefix[0] != '\0')
                f->nulled[id] = 1; /* in a layer: not inherited either */
            if (codec_json_skip(r, err) != 0)
                return -1;
        } else if (prefix[0] != '\0' &&
                   attend_fields[id].scope == ATTEND_WHOLE) {
            codec_error_set(&first, ERRORS_INVALID_REQUEST, ptr,
                            "%s: \"%s\" applies to the whole request; give "
                            "it at the top level, not in a layer", ptr,
                            attend_fields[id].name);
            failed = 1;
            if (codec_json_skip(r, err) != 0)
                return -1;
        } else if (f->seen[id]) {
            codec_error_set(&first, ERRORS_INVALID_REQUEST, ptr,
                            "%s: the field is given twice", ptr);
            failed = 1;
            if (codec_json_skip(r, err) != 0)
                return -1;
        } else {
            f->seen[id] = 1;
            if (codec__field(r, id, f, ptr, &e) != 0) {
                if (e.kind != ERRORS_INVALID_REQUEST &&
                    e.kind != ERRORS_UNKNOWN_REF) {
                    codec__error_copy(err, &e);
                    return -1;
                }
                /* re-read the value for syntax only: a syntax error
                 * further on outranks this contract error */
                first = e;
                failed = 1;
                r->p = vstart;
                r->depth = depth;
                if (codec_json_skip(r, err) != 0)
                    return -1;
            }
        }
    }
    r->depth--;
    if (prefix[0] == '\0') {
        codec_json_ws(r);
        if (r->p < r->end) {
            codec_json_syntax(r, err, "unexpected text after the JSON object");
            return -1;
        }
    }
    if (failed) {
        codec__error_copy(err, &first);
        return -1;
    }
    return 0;
}

/* A layer inherits every per-layer field the top level gives and it does
 * not; inherited buffers stay the top level's (shared). */
static void codec__inherit(codec__fields *layer, const codec__fields *top)
{
    int id;

    for (id = 0; id < F_COUNT; id++) {
        if (attend_fields[id].scope != ATTEND_LAYER || layer->seen[id] ||
            layer->nulled[id] || !top->seen[id])
            continue;
        memcpy((char *)layer + codec__slots[id].offset,
               (const char *)top + codec__slots[id].offset,
               codec__slots[id].size);
        layer->seen[id] = 1;
        layer->shared[id] = 1;
    }
}

/* Puts prefix before the NUL-terminated text in buf[0..cap), cutting the
 * end when it does not fit. */
static void codec__prepend(char *buf, size_t cap, const char *prefix)
{
    size_t p = strlen(prefix), t = strlen(buf);

    if (p >= cap)
        return;
    if (p + t >= cap)
        t = cap - 1 - p;
    memmove(buf + p, buf, t);
    memcpy(buf, prefix, p);
    buf[p + t] = '\0';
}

/* An error found after a layer's fields were merged says which layer it
 * is in. One without a field (a limit, 413) starts "/layers/2: ". One in
 * a field the layer gave, or in one that neither it nor the
 * top level gave (a missing field), points into the layer:
 * "/layers/2/w_q/0", its message saying "/layers/2/w_q: ..." alike. One in
 * a field it inherited keeps the top-level pointer, "/w_q", where the
 * offending values are, and its message names the layer:
 * "/layers/2 (with the top-level /w_q): ...". */
static void codec__relocate(codec_error *err, const codec__fields *layer,
                            const char *prefix)
{
    char name[64], lead[sizeof err->field + 64];
    const char *f = err->field, *m = err->message, *rest;
    size_t n = 0;
    int id, starts;

    if (f[0] == '\0') {
        /* no field (a limit of the layer, 413): the message says which
         * layer */
        snprintf(lead, sizeof lead, "%s: ", prefix);
        codec__prepend(err->message, sizeof err->message, lead);
        return;
    }
    if (f[0] != '/' || strncmp(f, prefix, strlen(prefix)) == 0)
        return;
    for (f++; *f && *f != '/' && n + 1 < sizeof name; f++)
        name[n++] = *f;
    name[n] = '\0';
    id = attend_field_find(name, n);
    if (id == F_COUNT)
        return;
    /* messages start with the field's pointer, or with the pointer of the
     * whole field when `field` names one of its dimensions ("/w_q: ..."
     * for "/w_q/0") */
    starts = strncmp(m, err->field, n + 1) == 0 &&
             (m[n + 1] == ':' || m[n + 1] == '/');
    if (!layer->shared[id]) {
        if (starts)
            codec__prepend(err->message, sizeof err->message, prefix);
        codec__prepend(err->field, sizeof err->field, prefix);
        return;
    }
    rest = starts ? strstr(m, ": ") : NULL;
    if (rest != NULL) {
        snprintf(lead, sizeof lead, "%s (with the top-level %.*s)", prefix,
                 (int)(rest - m), m);
        memmove(err->message, rest, strlen(rest) + 1);
    } else {
        snprintf(lead, sizeof lead, "%s (with the top-level %s): ", prefix,
                 err->field);
    }
    codec__prepend(err->message, sizeof err->message, lead);
}

/* Checks f, checks the limits and builds one request from it. */
static int codec__one(codec__fields *f, const limits_config *lim,
                      const codec_refs *refs, codec_request **out,
                      codec_error *err)
{
    codec_request *req = calloc(1, sizeof *req);
    attn_params *p;

    *out = NULL;
    if (req == NULL) {
        codec__parse_oom(err);
        return -1;
    }
    p = &req->p;
    /* before the shapes are checked against a huge h */
    if ((f->seen[F_NUM_HEADS] && f->num_heads > lim->max_heads) ||
        (f->seen[F_NUM_KV_HEADS] && f->num_kv_heads > lim->max_heads)) {
        int q = f->seen[F_NUM_HEADS] && f->num_heads > lim->max_heads;
        codec_error_set(err, ERRORS_TOO_LARGE, NULL,
                        "%s is %s%zu; the limit --max-heads "
                        "(ATTND_MAX_HEADS) is %zu",
                        q ? "num_heads" : "num_kv_heads",
                        (q ? f->num_heads : f->num_kv_heads) >= CODEC__COUNT_MAX
                            ? "at least " : "",
                        q ? f->num_heads : f->num_kv_heads, lim->max_heads);
        goto fail;
    }
    if (codec__check(f, &p->dims, err) != 0)
        goto fail;
    if (codec__limits(p, f, lim, err) != 0)
        goto fail;
    if (f->store && (req->pending = codec__pending_new(f, refs)) == NULL) {
        codec__parse_oom(err);
        goto fail;
    }
    if (codec__build(f, req, err) != 0 || codec__budget(req, lim, err) != 0)
        goto fail;
    if (req->pending != NULL)
        codec__pending_keep(req->pending, f);
    *out = req;
    return 0;
fail:
    codec_request_free(req);
    return -1;
}

/* The layers of a `layers` request, each parsed over the top level's
 * defaults; their sums are held to the limits too. */
static int codec__layers(codec__fields *top, const limits_config *lim,
                         const codec_refs *refs, codec_request *whole,
                         codec_error *err)
{
    codec_reader r;
    codec_request **layers = NULL;
    size_t count = 0, cap = 0, maps = 0;
    uint64_t work = 0;
    int first = 1, ovf = 0, rc;

    codec_reader_init(&r, top->layers.text, top->layers.len, refs);
    r.p++; /* '[' (validated) */
    while ((rc = codec_json_element(&r, &first, err)) == 1) {
        codec__fields f;
        char prefix[40];
        codec_request *one;

        snprintf(prefix, sizeof prefix, "/layers/%zu", count);
        if (count == CODEC_MAX_LAYERS) {
            /* each layer costs its parse and bookkeeping whatever its
             * work, and the sums above take all the layers so far */
            codec_error_set(err, ERRORS_TOO_LARGE, prefix,
                            "/layers: more than %d layers; a request takes "
                            "at most %d (the deepest models have about 130)",
                            CODEC_MAX_LAYERS, CODEC_MAX_LAYERS);
            goto fail;
        }
        if (count == cap) {
            size_t c = cap ? 2 * cap : 8;
            codec_request **t = realloc(layers, c * sizeof *t);
            if (t == NULL) {
                codec__parse_oom(err);
                goto fail;
            }
            layers = t;
            cap = c;
        }
        memset(&f, 0, sizeof f);
        f.return_weights = ATTN_WEIGHTS_PER_HEAD;
        if (codec__object(&r, &f, prefix, err) != 0) {
            codec__fields_free(&f);
            goto fail;
        }
        codec__inherit(&f, top);
        f.store = top->store;
        rc = codec__one(&f, lim, refs, &one, err);
        if (rc != 0)
            codec__relocate(err, &f, prefix);
        codec__fields_free(&f);
        if (rc != 0)
            goto fail;
        layers[count++] = one;
        work += one->cost;
        if (top->rollout) {
            /* the rollout's share: each layer's map again when it returns
             * none (computed once more for the rollout), and the product
             * with the rollout so far, 2 B n^3, from the second layer */
            const attn_dims *d = &one->p.dims;
            uint64_t share = 0;
            if (one->p.weights == ATTN_WEIGHTS_NONE || one->top_k)
                share = one->cost;
            if (count > 1) {
                uint64_t prod;
                if (__builtin_mul_overflow((uint64_t)2 * d->B, d->n, &prod) ||
                    __builtin_mul_overflow(prod, (uint64_t)d->n, &prod) ||
                    __builtin_mul_overflow(prod, (uint64_t)d->n, &prod) ||
                    __builtin_add_overflow(share, prod, &share))
                    share = UINT64_MAX;
            }
            if (__builtin_add_overflow(work, share, &work))
                work = UINT64_MAX;
        }
        {
            /* The answer's attention maps, each layer's counted as check.c
             * counts a request's, and the rollout's [B][n][n] once; each
             * layer's output is bounded there on its own, and all of them
             * by the work. */
            const attn_dims *d = &one->p.dims;
            size_t o = 0, w = 0, roll = 0;
            attn_output_sizes(&one->p, &o, &w);
            if (one->top_k)
                w = w / d->m * 2 * one->top_k;
            if (top->rollout && count == 1)
                ovf = __builtin_mul_overflow(d->B, d->n, &roll) ||
                      __builtin_mul_overflow(roll, d->n, &roll);
            ovf = ovf || __builtin_add_overflow(maps, roll, &maps) ||
                  __builtin_add_overflow(maps, w, &maps);
            if (ovf)
                maps = SIZE_MAX;
        }
        if (maps > lim->max_map_elems) {
            codec_error_set(err, ERRORS_TOO_LARGE, NULL,
                            "the attention maps of the layers%s would hold "
                            "%s%zu values together; the limit "
                            "--max-map-elems (ATTND_MAX_MAP_ELEMS) is %zu",
                            top->rollout ? " and the rollout" : "",
                            ovf ? "more than " : "", maps,
                            lim->max_map_elems);
            goto fail;
        }
        if (work > lim->max_flops) {
            codec_error_set(err, ERRORS_TOO_LARGE, NULL,
                            "the layers%s need %llu units of work together; "
                            "the limit --max-flops (ATTND_MAX_FLOPS) is %llu",
                            top->rollout ? " and the rollout" : "",
                            (unsigned long long)work,
                            (unsigned long long)lim->max_flops);
            goto fail;
        }
        /* the layers so far, before the next one copies anything */
        if (codec__layers_budget(layers, count, top->rollout, lim, err) != 0)
            goto fail;
    }
    if (rc < 0)
        goto fail;
    if (count == 0) {
        codec_error_set(err, ERRORS_INVALID_REQUEST, "/layers",
                        "/layers: expected at least one layer object, found "
                        "an empty array");
        goto fail;
    }
    whole->layers = layers;
    whole->n_layers = count;
    return 0;
fail:
    while (count > 0)
        codec_request_free(layers[--count]);
    free(layers);
    return -1;
}

int codec_parse(const char *body, size_t len, const limits_config *lim,
                codec_request **out, codec_error *err)
{
    return codec_parse_with(body, len, lim, NULL, out, err);
}

int codec_parse_with(const char *body, size_t len, const limits_config *lim,
                     struct store *st, codec_request **out, codec_error *err)
{
    codec__fields f;
    codec_reader r;
    const codec_refs *refs = codec_refs_of(st);
    int rc;

    *out = NULL;
    memset(&f, 0, sizeof f);
    f.return_weights = ATTN_WEIGHTS_PER_HEAD;
    if (len > lim->max_body_bytes) {
        codec_error_set(err, ERRORS_TOO_LARGE, NULL,
                        "the body has %zu bytes; the limit --max-body-bytes "
                        "(ATTND_MAX_BODY_BYTES) is %zu", len,
                        lim->max_body_bytes);
        return -1;
    }
    codec_reader_init(&r, body, len, refs);
    if (codec__object(&r, &f, "", err) != 0) {
        codec__fields_free(&f);
        return -1;
    }
    if (f.layers.text == NULL) {
        if (f.rollout) {
            codec_error_set(err, ERRORS_INVALID_REQUEST, "/rollout",
                            "/rollout: needs \"layers\" (the rollout of a "
                            "stack of self-attention layers)");
            rc = -1;
        } else {
            rc = codec__one(&f, lim, refs, out, err);
        }
    } else {
        codec_request *whole = calloc(1, sizeof *whole);
        rc = -1;
        if (whole == NULL)
            codec__parse_oom(err);
        else if (codec__layers(&f, lim, refs, whole, err) != 0)
            codec_request_free(whole);
        else if ((whole->rollout = f.rollout) &&
                 codec_rollout_check(whole, err) != 0)
            codec_request_free(whole);
        else if (f.store &&
                 (whole->pending = codec__pending_new(NULL, refs)) == NULL) {
            codec__parse_oom(err);
            codec_request_free(whole);
        } else {
            /* the layers' plans point at the top level's values too */
            if (whole->pending != NULL)
                codec__pending_keep(whole->pending, &f);
            /* rollout applies to the whole request, and so does its
             * encoding: the top level's */
            whole->base64_out = f.encoding == 1;
            *out = whole;
            rc = 0;
        }
    }
    codec__fields_free(&f);
    return rc;
}
