/* codec.h: the JSON codec. Request body -> validated attn_params with owned
 * buffers -> library call -> streamed response body. Knows nothing of HTTP
 * beyond the error kinds of errors.h. */
#ifndef ATTND_CODEC_H
#define ATTND_CODEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "attn.h"
#include "attend/limits_config.h"
#include "errors.h"

/* The error response body {"error":{"code","message","field"}} as a
 * malloc'd NUL-terminated string (caller frees); NULL when out of memory. */
char *codec_error_body(const codec_error *err, size_t *len);

typedef struct codec_request codec_request;

/* Parses and validates body[0..len). On success returns 0 and *out owns every
 * buffer the call needs; on failure returns -1, fills err, *out is NULL and
 * nothing leaks. Limits (dimensions, heads, map elements, flops) are checked,
 * with overflow-checked products, before any large allocation.
 * codec_parse_with also resolves {"ref": ...} tensors and plans to keep the
 * tensors of a `store: true` request in st (NULL: no store, every ref
 * unknown), which codec_run does; codec_parse is codec_parse_with and no
 * store. */
struct store;
int codec_parse(const char *body, size_t len, const limits_config *lim,
                codec_request **out, codec_error *err);
int codec_parse_with(const char *body, size_t len, const limits_config *lim,
                     struct store *st, codec_request **out, codec_error *err);

/* The work a parsed request will do (the library's attn_cost, summed over
 * the layers of a `layers` request): what --max-flops bounds. The HTTP
 * layer answers the cheapest requests on the thread that read them. */
uint64_t codec_request_cost(const codec_request *req);

/* Runs the library on a parsed request and keeps the results in req;
 * then, with `store: true`, puts its tensors into the store, so a request
 * that fails stores nothing. exec is the server's compute pool (NULL: the
 * calling thread).
 * *compute_seconds receives the library's wall time (may be NULL).
 * Returns 0, or -1 with err filled. */
int codec_run(codec_request *req, const attn_executor *exec, codec_error *err,
              double *compute_seconds);

/* Frees a request; accepts NULL. */
void codec_request_free(codec_request *req);

/* Streaming writer of the 200 response body for a request that codec_run
 * completed. codec_writer_new takes ownership of req (freed with the writer,
 * or at once on failure). Returns NULL when out of memory. */
typedef struct codec_writer codec_writer;
codec_writer *codec_writer_new(codec_request *req);

/* Large JSON arrays of the body (65,536 values or more) are formatted a
 * batch at a time on the request's compute pool, which shortens a lone
 * request but only adds hand-offs when other requests keep the cores busy.
 * With a gate, each batch goes to the pool only when ok(ctx) says so, and
 * is otherwise formatted on the thread that reads the body. */
void codec_writer_gate(codec_writer *w, bool (*ok)(void *ctx), void *ctx);

/* Copies up to cap (> 0) bytes of the body into buf; returns the count, 0
 * at the end of the body. Never fails once the writer exists. */
size_t codec_writer_read(codec_writer *w, char *buf, size_t cap);

/* Frees a writer and its request; accepts NULL. */
void codec_writer_free(codec_writer *w);

#endif
