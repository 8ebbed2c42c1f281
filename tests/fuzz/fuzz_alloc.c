/* fuzz_alloc.c: the allocation-failure pass over the request path, as a
 * libFuzzer harness so that `-runs=0` over the codec corpus runs it on every
 * seed and `make fuzz` can explore it too.
 *
 * For one input, the path (codec_parse -> codec_run -> codec_writer_read to
 * the end -> free, the limits of fuzz_codec.c) first runs with no failure,
 * counting the allocations K; then it runs K more times, the i-th run
 * failing the i-th allocation. The link wraps malloc, calloc and realloc
 * (-Wl,--wrap) for attnd's codec and library objects, which make every
 * allocation of the path (the codec writes its error bodies with its own
 * text buffer, json/text.h, and calls no jansson). Each failing run must
 * end cleanly: no crash or sanitizer report, nothing leaked (LeakSanitizer,
 * libFuzzer's -detect_leaks), and when the failure made the request fail,
 * the error is 503 `unavailable` (out of memory is transient), never a
 * request error blaming the client or a 500. */
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
void *__wrap_malloc(size_t size);
void *__wrap_calloc(size_t n, size_t size);
void *__wrap_realloc(void *p, size_t size);
void *__real_malloc(size_t size);
void *__real_calloc(size_t n, size_t size);
void *__real_realloc(void *p, size_t size);

/* Runs with more allocations than this are cut short (inputs that build
 * many token strings); the first FUZZ_ALLOC_MAX_RUNS allocations are still
 * each failed in turn. */
#define FUZZ_ALLOC_MAX_RUNS 400

static size_t fuzz_alloc__count;   /* allocations so far in this run */
static size_t fuzz_alloc__fail_at; /* 1-based index to fail; 0: none */
static int fuzz_alloc__failed;     /* the run saw its failure */

static int fuzz_alloc__should_fail(void)
{
    fuzz_alloc__count++;
    if (fuzz_alloc__fail_at && fuzz_alloc__count == fuzz_alloc__fail_at) {
        fuzz_alloc__failed = 1;
        return 1;
    }
    return 0;
}

void *__wrap_malloc(size_t size)
{
    return fuzz_alloc__should_fail() ? NULL : __real_malloc(size);
}

void *__wrap_calloc(size_t n, size_t size)
{
    return fuzz_alloc__should_fail() ? NULL : __real_calloc(n, size);
}

void *__wrap_realloc(void *p, size_t size)
{
    return fuzz_alloc__should_fail() ? NULL : __real_realloc(p, size);
}

static limits_config fuzz_alloc__limits;
static int fuzz_alloc__verbose; /* FUZZ_ALLOC_VERBOSE set: a line per input */

static void fuzz_alloc__fail(const char *what, size_t at,
                             const codec_error *e)
{
    fprintf(stderr,
            "fuzz_alloc: %s (allocation %zu failed; kind %d, field \"%s\", "
            "message \"%s\")\n",
            what, at, e ? (int)e->kind : -1, e ? e->field : "",
            e ? e->message : "");
    __builtin_trap();
}

/* One pass over the path. Returns 0 on success, else -1 with *err. */
static int fuzz_alloc__run(const uint8_t *data, size_t size, codec_error *err)
{
    codec_request *req = NULL;
    memset(err, 0, sizeof *err);
    if (codec_parse((const char *)data, size, &fuzz_alloc__limits, &req, err))
        return -1;
    if (codec_run(req, NULL, err, NULL)) {
        codec_request_free(req);
        return -1;
    }
    codec_writer *w = codec_writer_new(req);
    if (!w) {
        codec_error_set(err, ERRORS_UNAVAILABLE, NULL, "writer: no memory");
        return -1;
    }
    char buf[1024];
    while (codec_writer_read(w, buf, sizeof buf) > 0)
        ;
    codec_writer_free(w);
    return 0;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    attn_blas_set_threads(1);
    fuzz_alloc__verbose = getenv("FUZZ_ALLOC_VERBOSE") != NULL;
    limits_defaults(&fuzz_alloc__limits);
    fuzz_alloc__limits.max_body_bytes = (size_t)1 << 20;
    fuzz_alloc__limits.max_dim = 64;
    fuzz_alloc__limits.max_batch = 4;
    fuzz_alloc__limits.max_heads = 8;
    fuzz_alloc__limits.max_map_elems = (size_t)1 << 14;
    fuzz_alloc__limits.max_flops = UINT64_C(20000000);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    codec_error base_err, err;
    fuzz_alloc__fail_at = 0;
    fuzz_alloc__count = 0;
    int base_rc = fuzz_alloc__run(data, size, &base_err);
    size_t total = fuzz_alloc__count;
    if (total > FUZZ_ALLOC_MAX_RUNS)
        total = FUZZ_ALLOC_MAX_RUNS;
    size_t hit = 0, oom = 0;
    for (size_t i = 1; i <= total; i++) {
        fuzz_alloc__count = 0;
        fuzz_alloc__failed = 0;
        fuzz_alloc__fail_at = i;
        if (fuzz_alloc__verbose)
            fprintf(stderr, "fuzz_alloc: failing allocation %zu of %zu\n", i,
                    total);
        int rc = fuzz_alloc__run(data, size, &err);
        fuzz_alloc__fail_at = 0;
        hit += (size_t)fuzz_alloc__failed;
        if (!fuzz_alloc__failed || rc == 0)
            continue; /* not reached this time, or a fallback absorbed it */
        if (err.kind == ERRORS_UNAVAILABLE) {
            oom++;
            continue;
        }
        /* Failing after the point the baseline failed changes nothing. */
        if (base_rc && err.kind == base_err.kind &&
            !strcmp(err.field, base_err.field) &&
            !strcmp(err.message, base_err.message))
            continue;
        fuzz_alloc__fail("out of memory reported as another error", i, &err);
    }
    if (fuzz_alloc__verbose)
        fprintf(stderr,
                "fuzz_alloc: %zu bytes, baseline %s, %zu allocations failed "
                "in turn, %zu answered unavailable\n",
                size, base_rc ? errors_code(base_err.kind) : "ok", hit, oom);
    return 0;
}
