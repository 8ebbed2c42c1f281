/* tensors_http.h: the tensor store's endpoints without the HTTP server:
 * POST /tensors (a body in, a ref out) and GET/HEAD /tensors/<ref> (a ref
 * in, a tensor object out), as status, content type and body, so they are
 * tested without sockets. The server buffers the body, picks the route and
 * sends what these return. */
#ifndef ATTND_TENSORS_HTTP_H
#define ATTND_TENSORS_HTTP_H

#include <stdbool.h>
#include <stddef.h>

#include "errors.h"
#include "store/store.h"

/* A successful answer. body is malloc'd (the caller frees it). */
typedef struct store_http_answer {
    int status;               /* 200, or 201 for a new upload */
    const char *content_type; /* static */
    char *body;
    size_t len;
    char location[96];        /* "/tensors/sha256:<hex>" after a POST, or "" */
} store_http_answer;

/* Whether POST /tensors takes a body of this Content-Type (parameters such
 * as charset allowed): application/json, application/<x>+json or
 * application/octet-stream. NULL (none given) is not taken. */
bool store_http_media_ok(const char *content_type);

/* POST /tensors: stores the tensor of body[0..len) and answers
 * {"ref":"sha256:<hex>","shape":[..],"bytes":N} with 201 (new) or 200
 * (already stored: the stored shape). The body is, by content_type, a
 * tensor object {"dtype":"float32","shape":[..],"data":"<base64>"} or a
 * nested numeric array of rank 1 to 4 (JSON), or the raw little-endian
 * float32 values (application/octet-stream) whose shape is shape_arg, the
 * query string's "768,768" (NULL when absent). Returns 0 with *ans filled,
 * or -1 with err filled and nothing stored: 404 when s is NULL (the store
 * is off), 400 for a body that is not JSON, 415 for another content type,
 * 413 for a tensor larger than the whole store, 422 for anything else
 * wrong (shape, length, a value that is not finite, no values), 503 when
 * out of memory. */
int store_http_post(store *s, const char *content_type, const char *shape_arg,
                    const char *body, size_t len, store_http_answer *ans,
                    codec_error *err);

/* GET /tensors/<ref>: ref[0..len) is the path after "/tensors/". Answers
 * 200 with the tensor object {"dtype":"float32","shape":[..],"data":".."}
 * (a hit, and the tensor becomes the most recently used). Returns 0 with
 * *ans filled, or -1 with err filled: 404 when s is NULL, when ref is not
 * "sha256:<64 lowercase hex>" or when the store does not hold it; 503 when
 * out of memory. */
int store_http_get(store *s, const char *ref, size_t len,
                   store_http_answer *ans, codec_error *err);

#endif
