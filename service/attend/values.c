/* attend/values.c: the values of request fields, read by the kind the
 * field table gives them (fields.h): arrays of floats, booleans and
 * indices, counts, positive numbers, flags, enums, labels, and the objects
 * rope, window, qk_norm and alibi with their own keys (an unknown key is
 * refused with the closest known one named). parse.c walks the objects
 * and calls codec__field for each member. */
#include "attend/parse.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Where each field lives in codec__fields, by id. */
const codec__slot codec__slots[F_COUNT] = {
#define CODEC__SLOT(id, name, member, kind, lo, hi, scope, doc)              \
    {offsetof(codec__fields, member), sizeof(((codec__fields *)0)->member)},
    ATTEND_FIELDS(CODEC__SLOT)
#undef CODEC__SLOT
};

void codec__parse_oom(codec_error *err)
{
    codec_error_set(err, ERRORS_UNAVAILABLE, NULL,
                    "out of memory while parsing the request");
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
            codec__parse_oom(err);
            return -1;
        }
        *s = *owned;
    }
    return 0;
}

/* The names an enum takes, for its error messages: "a", "b" or "c". */
static void codec__enum_expect(const char *const *names, char *expect,
                               size_t cap)
{
    size_t n = 0;
    int i;

    for (i = 0; names[i] != NULL; i++)
        n += (size_t)snprintf(expect + n, cap - n, "%s\"%s\"",
                              i == 0 ? "" : names[i + 1] == NULL ? " or "
                                                                 : ", ",
                              names[i]);
}

/* An enum string: *out is the index of the value in names. */
static int codec__enum(codec_reader *r, const char *ptr,
                       const char *const *names, int *out, codec_error *err)
{
    const char *s;
    char *unesc;
    size_t len;
    int i;
    char *q, expect[160];

    if (r->p >= r->end || *r->p != '"') {
        codec__enum_expect(names, expect, sizeof expect);
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
    q = codec_json_quote_key(s, len);
    free(unesc);
    if (q == NULL) {
        codec__parse_oom(err);
        return -1;
    }
    codec__enum_expect(names, expect, sizeof expect);
    codec_error_set(err, ERRORS_INVALID_REQUEST, ptr,
                    "%s: expected %s, found %s", ptr, expect, q);
    free(q);
    return -1;
}

/* An integer >= least (a JSON number with an integral value: 8 or 8.0),
 * stored as most when it is larger. */
static int codec__integer(codec_reader *r, const char *ptr, double least,
                          size_t most, size_t *out, codec_error *err)
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
    *out = d > (double)most ? most : (size_t)d;
    return 0;
}

/* A number > 0 that is finite in float32 (scale, softcap, theta, ...),
 * as the float32 the library takes, or with `exact` as read (rope's theta
 * and attention_factor and qk_norm's eps, which the library takes in
 * double: a theta of 10000.1, 10000.099609375 in float32, would move q at
 * position 10^6 by some 1e-3). */
static int codec__positive_as(codec_reader *r, const char *ptr, int exact,
                              double *out, codec_error *err)
{
    float v;
    double d = 0;
    int finite;

    if (!codec__is_number(r)) {
        codec_error_set(err, ERRORS_INVALID_REQUEST, ptr,
                        "%s: expected a number > 0, found %s", ptr,
                        codec_json_kind(r));
        return -1;
    }
    if (exact) {
        if (codec_json_number_d(r, &d, err) != 0)
            return -1;
        v = (float)d;
        finite = isfinite(v);
    } else if (codec_json_number(r, &v, &finite, err) != 0) {
        return -1;
    }
    if (!finite || !(v > 0.0f)) {
        codec_error_set(err, ERRORS_INVALID_REQUEST, ptr,
                        "%s: expected a number > 0 that is finite in "
                        "float32, found %s", ptr,
                        !finite ? "one out of range"
                                : "one <= 0 (or one that rounds to 0)");
        return -1;
    }
    *out = exact ? d : v;
    return 0;
}

static int codec__positive(codec_reader *r, const char *ptr, double *out,
                           codec_error *err)
{
    return codec__positive_as(r, ptr, 0, out, err);
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
void codec__unknown(const char *where, const char *key, size_t len,
                    const char *const *keys, const char *what,
                    codec_error *err)
{
    char ptr[400];
    const char *near = codec_json_closest(key, len, keys,
                                          attend_name_count(keys));
    char *shown = codec_json_quote_key(key, len);

    if (shown == NULL) {
        codec__parse_oom(err);
        return;
    }
    codec_json_pointer(ptr, sizeof ptr, where, key, len);
    if (near != NULL)
        codec_error_set(err, ERRORS_INVALID_REQUEST, ptr,
                        "%s: unknown %s %s; did you mean \"%s\"?", ptr, what,
                        shown, near);
    else
        codec_error_set(err, ERRORS_INVALID_REQUEST, ptr,
                        "%s: unknown %s %s (GET /openapi.json lists them "
                        "all)", ptr, what, shown);
    free(shown);
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
                codec__parse_oom(err);
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
        o->dim_given = 1;
        return codec__integer(r, ptr, 0, CODEC__COUNT_MAX, &o->dim, err);
    case 1:
        return codec__positive_as(r, ptr, 1, &o->theta, err);
    case 2:
        return codec_array_parse(r, ptr, "[dim/2]", CODEC_LEAF_F32, 1, 1,
                                 &o->inv_freq, err);
    case 3:
        return codec__enum(r, ptr, attend_rope_style_names, &o->style, err);
    default:
        return codec__positive_as(r, ptr, 1, &o->factor, err);
    }
}

static int codec__window_member(void *ctx, int key, codec_reader *r,
                                const char *ptr, codec_error *err)
{
    codec__window *o = ctx;

    /* positions are at most 2^53, so a wider side is the same window:
     * held at 2^53, never at the counts' bound, which is smaller */
    if (key == 0) {
        o->has_left = 1;
        return codec__integer(r, ptr, 0, CODEC__POSITION_MAX, &o->left, err);
    }
    o->has_right = 1;
    return codec__integer(r, ptr, 0, CODEC__POSITION_MAX, &o->right, err);
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
        return codec__positive_as(r, ptr, 1, &o->eps, err);
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

/* 1, past it, when r->p is at an empty array ("[]", blanks allowed
 * inside); else 0, r->p unmoved. */
static int codec__empty_array(codec_reader *r)
{
    const char *at = r->p;

    if (r->p >= r->end || *r->p != '[')
        return 0;
    r->p++;
    codec_json_ws(r);
    if (r->p < r->end && *r->p == ']') {
        r->p++;
        return 1;
    }
    r->p = at;
    return 0;
}

/* Parses the value of field `id` at r->p into f; ptr is its pointer. */
int codec__field(codec_reader *r, int id, codec__fields *f,
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
        if (id == F_GLOBAL_TOKENS && codec__empty_array(r))
            return 0; /* no global tokens, as when absent */
        return codec_array_parse(r, ptr, fd->doc, CODEC_LEAF_INDEX,
                                 fd->min_rank, fd->max_rank, slot, err);
    case ATTEND_COUNT:
        /* larger counts are refused by the limits with a 413, which says
         * "at least" for a clamped one */
        return codec__integer(r, ptr, 1, CODEC__COUNT_MAX, slot, err);
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
