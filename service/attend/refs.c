/* attend/refs.c: {"ref": "sha256:..."} tensors of a request, resolved
 * through the tensor store (store/store.h), and `store: true` puts. The
 * request holds each stored tensor it uses until it is freed, so the store
 * never frees one under it. */
#include "attend/request.h"
#include "store/store.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int codec__ref_resolve(void *ctx, const char *ref, size_t len,
                              const char *ptr, codec_array *a,
                              codec_error *err)
{
    store *s = ctx;
    unsigned char hash[32];
    const store_tensor *t;
    char *shown;
    size_t i;

    if (store_ref_parse(ref, len, hash) != 0) {
        /* a ref's 71 bytes and a few more */
        shown = codec_json_quote(ref, len, 80);
        if (shown == NULL) {
            codec_error_set(err, ERRORS_UNAVAILABLE, NULL,
                            "out of memory while parsing the request");
            return -1;
        }
        codec_error_set(err, ERRORS_INVALID_REQUEST, ptr,
                        "%s: expected a ref \"sha256:<64 lowercase hex "
                        "digits>\", found %s", ptr, shown);
        free(shown);
        return -1;
    }
    if (s == NULL) {
        codec_error_set(err, ERRORS_UNKNOWN_REF, ptr,
                        "%s: this server keeps no tensors (its tensor store "
                        "is off); send the values inline", ptr);
        return -1;
    }
    t = store_get(s, hash);
    if (t == NULL) {
        char name[72];
        store_ref_format(hash, name);
        codec_error_set(err, ERRORS_UNKNOWN_REF, ptr,
                        "%s: the tensor store does not hold %s (it forgets "
                        "tensors, and each replica has its own); send the "
                        "values inline", ptr, name);
        return -1;
    }
    memset(a, 0, sizeof *a);
    a->data = (void *)(uintptr_t)t->data; /* borrowed, never written */
    a->count = t->count;
    a->rank = t->rank;
    for (i = 0; i < 4; i++)
        a->shape[i] = t->shape[i];
    a->hold = t;
    snprintf(a->ref, sizeof a->ref, "%s", t->ref);
    return 0;
}

static void codec__ref_release(void *ctx, const void *hold)
{
    store_release(ctx, hold);
}

static int codec__ref_put(void *ctx, const float *data, size_t count,
                          const size_t *shape, int rank, char ref[72])
{
    const store_tensor *t;
    int created;

    if (ctx == NULL || /* the store is off */
        store_put(ctx, data, count, shape, rank, &t, &created) != 0)
        return -1;
    snprintf(ref, 72, "%s", t->ref);
    store_release(ctx, t);
    return 0;
}

/* The resolver of st, valid on this thread until the next call: the
 * parser uses it while it runs, and a request keeps its own copy for the
 * holds it gives back when freed. With the store off (st NULL) a ref is
 * still read, so a malformed one is invalid_request and a well-formed one
 * unknown_ref, as with a store that does not hold it; nothing is put. */
const codec_refs *codec_refs_of(struct store *st)
{
    static _Thread_local codec_refs cell;

    cell.resolve = codec__ref_resolve;
    cell.release = codec__ref_release;
    cell.put = codec__ref_put;
    cell.ctx = st;
    return &cell;
}
