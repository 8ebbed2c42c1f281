/* fuzz_codec.c: libFuzzer harness over the whole request path without HTTP:
 * bytes -> codec_parse (JSON reader, validation, limits) -> codec_run (the
 * library on the calling thread) -> codec_writer_read to the end -> free.
 *
 * Limits are set small so that a valid input costs microseconds and the
 * fuzzer spends its time on the parser and the size checks; the limits
 * themselves are part of what is fuzzed (an input over one must come back
 * as 413, never as an allocation). Besides the sanitizers, the harness
 * checks the codec's own promises: an error has a kind from the table and a
 * field that is empty or a JSON Pointer; a success yields a non-empty body
 * that starts with '{' and ends with '}'. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn.h"
#include "attend/codec.h"
#include "errors.h"
#include "attend/limits_config.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static limits_config fuzz_codec__limits;

/* A broken promise: print it and crash so libFuzzer keeps the input. */
static void fuzz_codec__fail(const char *what, const codec_error *e)
{
    fprintf(stderr, "fuzz_codec: %s (kind %d, field \"%s\", message \"%s\")\n",
            what, e ? (int)e->kind : -1, e ? e->field : "",
            e ? e->message : "");
    __builtin_trap();
}

static void fuzz_codec__check_error(const codec_error *e)
{
    if ((int)e->kind < 0 || e->kind >= ERRORS_COUNT ||
        e->kind == ERRORS_INTERNAL)
        fuzz_codec__fail("error kind outside the request errors", e);
    if (e->field[0] && e->field[0] != '/')
        fuzz_codec__fail("error field is not a JSON Pointer", e);
    if (!e->message[0])
        fuzz_codec__fail("error without a message", e);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    /* One BLAS thread: the fuzzer's process stays single-threaded in
     * compute, as the request path is on a pool worker. */
    attn_blas_set_threads(1);
    limits_defaults(&fuzz_codec__limits);
    fuzz_codec__limits.max_body_bytes = (size_t)1 << 20;
    fuzz_codec__limits.max_dim = 64;
    fuzz_codec__limits.max_batch = 4;
    fuzz_codec__limits.max_heads = 8;
    fuzz_codec__limits.max_map_elems = (size_t)1 << 14;
    fuzz_codec__limits.max_flops = UINT64_C(20000000);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    codec_error err;
    memset(&err, 0, sizeof err);
    codec_request *req = NULL;
    if (codec_parse((const char *)data, size, &fuzz_codec__limits, &req,
                    &err)) {
        if (req)
            fuzz_codec__fail("codec_parse failed but left a request", &err);
        fuzz_codec__check_error(&err);
        return 0;
    }
    if (!req)
        fuzz_codec__fail("codec_parse succeeded without a request", NULL);
    if (codec_run(req, NULL, &err, NULL)) {
        fuzz_codec__check_error(&err);
        codec_request_free(req);
        return 0;
    }
    codec_writer *w = codec_writer_new(req);
    if (!w)
        return 0; /* out of memory; the writer freed req */
    /* An odd block size exercises the writer's resumption at every kind of
     * boundary (inside numbers, keys and base64 quanta). */
    char buf[777];
    size_t total = 0, n;
    char first = 0, last = 0;
    while ((n = codec_writer_read(w, buf, sizeof buf)) > 0) {
        if (n > sizeof buf)
            fuzz_codec__fail("writer returned more than asked", NULL);
        if (!total)
            first = buf[0];
        last = buf[n - 1];
        total += n;
    }
    codec_writer_free(w);
    if (!total || first != '{' || last != '}')
        fuzz_codec__fail("response body is not one JSON object", NULL);
    return 0;
}
