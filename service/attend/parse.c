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

/* Where each field lives in codec__fields, by id. */
static const struct {
    size_t offset, size;
} codec__slots[F_COUNT] = {
#define CODEC__SLOT(id, name, member, kind, lo, hi, scope, doc)              \
    {offsetof(codec__fields, member), sizeof(((codec__fields *)0)->member)},
    ATTEND_FIELDS(CODEC__SLOT)
#undef CODEC__SLOT
};

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

static void codec__oom(codec_error *err)
{
    codec_error_set(err, ERRORS_UNAVAILABLE, NULL,
                    "out of memory while parsing the request");
}

/* Copies request text into a message safely: printable ASCII, at most 40
 * characters, anything else as '?'. */
static void codec__quote(const char *s, size_t len, char *out, size_t cap)
{
    size_t i, n = 0;
    for (i = 0; i < len && n + 4 < cap && i < 40; i++) {
        unsigned char c = (unsigned char)s[i];
        out[n++] = (c >= 0x20 && c < 0x7F && c != '"') ? (char)c : '?';
    }
    if (i < len && n + 4 < cap) {
        memcpy(out + n, "...", 3);
        n += 3;
    }
    out[n] = '\0';
}

static int codec__is_number(const codec_reader *r)
{
    return r->p < r->end &&
           (*r->p == '-' || (*r->p >= '0' && *r->p <= '9'));
}

/* A string at r->p, unescaped when it holds escapes ("caus\u0061l" is
 * "causal"): *s and *len give it; *owned is what to free. */
static int codec__string(codec_reader *r, const char **s, size_t *len,
                         char **owned, codec_error *err)
{
    int esc;

    *owned = NULL;
    if (codec_json_string(r, s, len, &esc, err) != 0)
        return -1;
    if (esc) {
        *owned = codec_json_unescape(*s, *len, len);
        if (*owned == NULL) {
            codec__oom(err);
            return -1;
        }
        *s = *owned;
    }
    return 0;
}

/* An enum string: *out is the index of the value in names. */
static int codec__enum(codec_reader *r, const char *ptr,
                       const char *const *names, int *out, codec_error *err)
{
    const char *s;
    char *unesc;
    size_t len, n = 0;
    int i;
    char q[64], expect[160];

    for (i = 0; names[i] != NULL; i++)
        n += (size_t)snprintf(expect + n, sizeof expect - n, "%s\"%s\"",
                              i == 0 ? "" : names[i + 1] == NULL ? " or "
                                                                 : ", ",
                              names[i]);
    if (r->p >= r->end || *r->p != '"') {
        codec_error_set(err, ERRORS_INVALID_REQUEST, ptr,
                        "%s: expected %s, found %s", ptr, expect,
                        codec_json_kind(r));
        return -1;
    }
    if (codec__string(r, &s, &len, &unesc, err) != 0)
        return -1;
    i = attend_name_index(names, s, len);
    if (i >= 0) {
        free(unesc);
        *out = i;
        return 0;
    }
    codec__quote(s, len, q, sizeof q);
    free(unesc);
    codec_error_set(err, ERRORS_INVALID_REQUEST, ptr,
                    "%s: expected %s, found \"%s\"", ptr, expect, q);
    return -1;
}

/* Counts above this are read as this (every limit is far below it). */
#define CODEC__COUNT_MAX ((size_t)1000000000000000ULL)

/* An integer >= least (a JSON number with an integral value: 8 or 8.0). */
static int codec__integer(codec_reader *r, const char *ptr, double least,
                          size_t *out, codec_error *err)
{
    double d;

    if (!codec__is_number(r)) {
        codec_error_set(err, ERRORS_INVALID_REQUEST, ptr,
                        "%s: expected an integer >= %.0f, found %s", ptr,
                        least, codec_json_kind(r));
        return -1;
    }
    if (codec_json_number_d(r, &d, err) != 0)
        return -1;
    if (!(d >= least) || d != floor(d) || !isfinite(d)) {
        codec_error_set(err, ERRORS_INVALID_REQUEST, ptr,
                        "%s: expected an integer >= %.0f, found %.17g", ptr,
                        least, d);
        return -1;
    }
    /* larger values are refused by the limits with a 413, which says
     * "at least" for a clamped one */
    *out = d > (double)CODEC__COUNT_MAX ? CODEC__COUNT_MAX : (size_t)d;
    return 0;
}

/* A number > 0 that is finite in float32 (scale, softcap, theta, ...). */
static int codec__positive(codec_reader *r, const char *ptr, double *out,
                           codec_error *err)
{
    float v;
    int finite;

    if (!codec__is_number(r)) {
        codec_error_set(err, ERRORS_INVALID_REQUEST, ptr,
                        "%s: expected a number > 0, found %s", ptr,
                        codec_json_kind(r));
        return -1;
    }
    if (codec_json_number(r, &v, &finite, err) != 0)
        return -1;
    if (!finite || !(v > 0.0f)) {
        codec_error_set(err, ERRORS_INVALID_REQUEST, ptr,
                        "%s: expected a number > 0 that is finite in "
                        "float32, found %s", ptr,
                        !finite ? "one out of range"
                                : "one <= 0 (or one that rounds to 0)");
        return -1;
    }
    *out = v;
    return 0;
}

static int codec__flag(codec_reader *r, const char *ptr, int *out,
                       codec_error *err)
{
    if (r->p < r->end && (*r->p == 't' || *r->p == 'f')) {
        *out = *r->p == 't';
        return codec_json_literal(r, *out ? "true" : "false", err);
    }
    codec_error_set(err, ERRORS_INVALID_REQUEST, ptr,
                    "%s: expected true or false, found %s", ptr,
                    codec_json_kind(r));
    return -1;
}

/* tokens / memory_tokens: validated and kept as text. */
static int codec__labels(codec_reader *r, const char *ptr,
                         codec__label_text *out, codec_error *err)
{
    const char *begin = r->p;

    if (codec_json_skip(r, err) != 0)
        return -1;
    if (*begin != '[') {
        codec_reader at = *r;
        at.p = begin;
        codec_error_set(err, ERRORS_INVALID_REQUEST, ptr,
                        "%s: expected an array of strings, found %s", ptr,
                        codec_json_kind(&at));
        return -1;
    }
    out->text = begin;
    out->len = (size_t)(r->p - begin);
    return 0;
}

/* Reports key[0..len) of an object at `where` as unknown, naming the
 * closest of keys. */
static void codec__unknown(const char *where, const char *key, size_t len,
                           const char *const *keys, const char *what,
                           codec_error *err)
{
    char shown[64], ptr[400];
    const char *near = codec_json_closest(key, len, keys,
                                          attend_name_count(keys));
    size_t i, n = 0;

    /* the pointer keeps the key as given, escaped per RFC 6901 */
    for (i = 0; i < len && n + 4 < sizeof shown && i < 48; i++) {
        unsigned char c = (unsigned char)key[i];
        if (c == '~' || c == '/') {
            shown[n++] = '~';
            shown[n++] = c == '~' ? '0' : '1';
        } else {
            shown[n++] = (c >= 0x20 && c < 0x7F && c != '"') ? (char)c : '?';
        }
    }
    shown[n] = '\0';
    snprintf(ptr, sizeof ptr, "%s/%s", where, shown);
    if (near != NULL)
        codec_error_set(err, ERRORS_INVALID_REQUEST, ptr,
                        "%s: unknown %s \"%s\"; did you mean \"%s\"?", ptr,
                        what, shown, near);
    else
        codec_error_set(err, ERRORS_INVALID_REQUEST, ptr,
                        "%s: unknown %s \"%s\" (GET /openapi.json lists "
                        "them all)", ptr, what, shown);
}

/* Walks an object field's members: calls member(ctx, index of the key in
 * keys, r, ptr of the member) for each, with unknown keys refused and
 * duplicates refused. Returns 0 or -1. */
typedef int (*codec__member_fn)(void *ctx, int key, codec_reader *r,
                                const char *ptr, codec_error *err);

static int codec__members(codec_reader *r, const char *ptr,
                          const char *const *keys, codec__member_fn member,
                          void *ctx, codec_error *err)
{
    const char *key;
    size_t len;
    int first = 1, esc, rc, k;
    unsigned seen = 0;
    char *unesc, sub[400];

    if (r->p >= r->end || *r->p != '{') {
        codec_error_set(err, ERRORS_INVALID_REQUEST, ptr,
                        "%s: expected an object, found %s", ptr,
                        codec_json_kind(r));
        return -1;
    }
    r->p++;
    while ((rc = codec_json_member(r, &first, &key, &len, &esc, err)) == 1) {
        unesc = NULL;
        if (esc) {
            unesc = codec_json_unescape(key, len, &len);
            if (unesc == NULL) {
                codec__oom(err);
                return -1;
            }
            key = unesc;
        }
        k = attend_name_index(keys, key, len);
        if (k < 0) {
            codec__unknown(ptr, key, len, keys, "key", err);
            free(unesc);
            return -1;
        }
        free(unesc);
        snprintf(sub, sizeof sub, "%s/%s", ptr, keys[k]);
        if (seen & (1u << k)) {
            codec_error_set(err, ERRORS_INVALID_REQUEST, sub,
                            "%s: the key is given twice", sub);
            return -1;
        }
        seen |= 1u << k;
        if (r->p + 4 <= r->end && memcmp(r->p, "null", 4) == 0) {
            r->p += 4; /* absent */
            continue;
        }
        if (member(ctx, k, r, sub, err) != 0)
            return -1;
    }
    return rc < 0 ? -1 : 0;
}

static int codec__rope_member(void *ctx, int key, codec_reader *r,
                              const char *ptr, codec_error *err)
{
    codec__rope *o = ctx;

    switch (key) {
    case 0:
        return codec__integer(r, ptr, 1, &o->dim, err);
    case 1:
        return codec__positive(r, ptr, &o->theta, err);
    case 2:
        return codec_array_parse(r, ptr, "[dim/2]", CODEC_LEAF_F32, 1, 1,
                                 &o->inv_freq, err);
    case 3:
        return codec__enum(r, ptr, attend_rope_style_names, &o->style, err);
    default:
        return codec__positive(r, ptr, &o->factor, err);
    }
}

static int codec__window_member(void *ctx, int key, codec_reader *r,
                                const char *ptr, codec_error *err)
{
    codec__window *o = ctx;

    if (key == 0) {
        o->has_left = 1;
        return codec__integer(r, ptr, 0, &o->left, err);
    }
    o->has_right = 1;
    return codec__integer(r, ptr, 0, &o->right, err);
}

static int codec__qk_norm_member(void *ctx, int key, codec_reader *r,
                                 const char *ptr, codec_error *err)
{
    codec__qk_norm *o = ctx;

    switch (key) {
    case 0:
        return codec_array_parse(r, ptr, "[d_k] (over \"head\") or [h*d_k] "
                                 "(over \"all\")", CODEC_LEAF_F32, 1, 1,
                                 &o->q_weight, err);
    case 1:
        return codec_array_parse(r, ptr, "[d_k] (over \"head\") or [g*d_k] "
                                 "(over \"all\")", CODEC_LEAF_F32, 1, 1,
                                 &o->k_weight, err);
    case 2:
        return codec__positive(r, ptr, &o->eps, err);
    default:
        return codec__enum(r, ptr, attend_qk_norm_over_names, &o->over, err);
    }
}

static int codec__alibi_member(void *ctx, int key, codec_reader *r,
                               const char *ptr, codec_error *err)
{
    codec__alibi *o = ctx;

    (void)key;
    return codec_array_parse(r, ptr, "[h]", CODEC_LEAF_F32, 1, 1, &o->slopes,
                             err);
}

/* Parses the value of field `id` at r->p into f; ptr is its pointer. */
static int codec__field(codec_reader *r, int id, codec__fields *f,
                        const char *ptr, codec_error *err)
{
    const attend_field *fd = &attend_fields[id];
    void *slot = (char *)f + codec__slots[id].offset;

    switch (fd->kind) {
    case ATTEND_F32:
        return codec_array_parse(r, ptr, fd->doc, CODEC_LEAF_F32,
                                 fd->min_rank, fd->max_rank, slot, err);
    case ATTEND_BOOL:
        return codec_array_parse(r, ptr, fd->doc, CODEC_LEAF_BOOL,
                                 fd->min_rank, fd->max_rank, slot, err);
    case ATTEND_INDEX:
        return codec_array_parse(r, ptr, fd->doc, CODEC_LEAF_INDEX,
                                 fd->min_rank, fd->max_rank, slot, err);
    case ATTEND_COUNT:
        return codec__integer(r, ptr, 1, slot, err);
    case ATTEND_NUMBER:
        return codec__positive(r, ptr, slot, err);
    case ATTEND_FLAG:
        return codec__flag(r, ptr, slot, err);
    case ATTEND_ENUM:
        return codec__enum(r, ptr, fd->values, slot, err);
    case ATTEND_LABELS:
        return codec__labels(r, ptr, slot, err);
    case ATTEND_ALIBI:
        if (r->p < r->end && (*r->p == 't' || *r->p == 'f'))
            return codec__flag(r, ptr, &f->alibi.on, err);
        f->alibi.on = 1;
        if (codec__members(r, ptr, fd->keys, codec__alibi_member, &f->alibi,
                           err) != 0)
            return -1;
        if (f->alibi.slopes.data == NULL) {
            codec_error_set(err, ERRORS_INVALID_REQUEST, ptr,
                            "%s: expected true, false or {\"slopes\": [h]}, "
                            "found an object without \"slopes\"", ptr);
            return -1;
        }
        return 0;
    case ATTEND_OBJECT:
        if (id == F_ROPE)
            return codec__members(r, ptr, fd->keys, codec__rope_member,
                                  &f->rope, err);
        if (id == F_WINDOW)
            return codec__members(r, ptr, fd->keys, codec__window_member,
                                  &f->window, err);
        return codec__members(r, ptr, fd->keys, codec__qk_norm_member,
                              &f->qk_norm, err);
    case ATTEND_LAYERS: {
        const char *begin = r->p;
        if (r->p >= r->end || *r->p != '[') {
            codec_error_set(err, ERRORS_INVALID_REQUEST, ptr,
                            "%s: expected an array of layer objects, found "
                            "%s", ptr, codec_json_kind(r));
            return -1;
        }
        if (codec_json_skip(r, err) != 0)
            return -1;
        f->layers.text = begin;
        f->layers.len = (size_t)(r->p - begin);
        return 0;
    }
    }
    return codec_json_skip(r, err);
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
                codec__oom(err);
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
            snprintf(ptr, sizeof ptr, "%s/%s", prefix, attend_fields[id].name);
        if (failed || id == F_COUNT ||
            (r->p + 4 <= r->end && memcmp(r->p, "null", 4) == 0 &&
             id != F_X)) {
            /* skipped: null (absent), or after a contract error */
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
            !top->seen[id])
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

/* An error found after a layer's fields were merged points at the field
 * where it came from: "/layers/2/w_q" when the layer gave w_q, "/w_q" when
 * it inherited it. */
static void codec__relocate(codec_error *err, const codec__fields *layer,
                            const char *prefix)
{
    char name[64];
    const char *f = err->field;
    size_t n = 0;
    int id;

    if (f[0] != '/' || strncmp(f, prefix, strlen(prefix)) == 0)
        return;
    for (f++; *f && *f != '/' && n + 1 < sizeof name; f++)
        name[n++] = *f;
    name[n] = '\0';
    id = attend_field_find(name, n);
    if (id == F_COUNT || !layer->seen[id] || layer->shared[id])
        return;
    /* messages that start with the pointer say it the same way */
    n = strlen(err->field);
    if (strncmp(err->message, err->field, n) == 0)
        codec__prepend(err->message, sizeof err->message, prefix);
    codec__prepend(err->field, sizeof err->field, prefix);
}

/* Checks f, checks the limits and builds one request from it. */
static int codec__one(codec__fields *f, const limits_config *lim,
                      const codec_refs *refs, codec_request **out,
                      codec_error *err)
{
    codec_request *req = calloc(1, sizeof *req);
    codec__stored plan[CODEC__STORED];
    size_t stored = 0;
    attn_params *p;

    *out = NULL;
    if (req == NULL) {
        codec__oom(err);
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
    if (f->store)
        stored = codec__store_plan(f, plan);
    if (codec__build(f, req, err) != 0 || codec__budget(req, lim, err) != 0)
        goto fail;
    if (f->store && codec__store_refs(plan, stored, req, refs, err) != 0)
        goto fail;
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
    int first = 1, rc;

    codec_reader_init(&r, top->layers.text, top->layers.len, refs);
    r.p++; /* '[' (validated) */
    while ((rc = codec_json_element(&r, &first, err)) == 1) {
        codec__fields f;
        char prefix[40];
        codec_request *one;

        snprintf(prefix, sizeof prefix, "/layers/%zu", count);
        if (count == cap) {
            size_t c = cap ? 2 * cap : 8;
            codec_request **t = realloc(layers, c * sizeof *t);
            if (t == NULL) {
                codec__oom(err);
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
        {
            /* the answer holds every layer's output and maps */
            size_t o = 0, w = 0;
            attn_output_sizes(&one->p, &o, &w);
            if (one->top_k)
                w = w / one->p.dims.m * 2 * one->top_k;
            maps += o + w;
        }
        if (maps > lim->max_map_elems) {
            codec_error_set(err, ERRORS_TOO_LARGE, NULL,
                            "the layers' outputs and maps would hold %zu "
                            "values together; the limit --max-map-elems "
                            "(ATTND_MAX_MAP_ELEMS) is %zu", maps,
                            lim->max_map_elems);
            goto fail;
        }
        if (work > lim->max_flops) {
            codec_error_set(err, ERRORS_TOO_LARGE, NULL,
                            "the layers need %llu units of work together; "
                            "the limit --max-flops (ATTND_MAX_FLOPS) is %llu",
                            (unsigned long long)work,
                            (unsigned long long)lim->max_flops);
            goto fail;
        }
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
            codec__oom(err);
        else if (codec__layers(&f, lim, refs, whole, err) != 0)
            codec_request_free(whole);
        else if ((whole->rollout = f.rollout) &&
                 codec_rollout_check(whole, err) != 0)
            codec_request_free(whole);
        else {
            *out = whole;
            rc = 0;
        }
    }
    codec__fields_free(&f);
    return rc;
}
