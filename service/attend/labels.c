/* attend/labels.c: tokens and memory_tokens, checked for shape against n,
 * m and B once they are known (the values are echoed back as they came). */
#include "attend/parse.h"

#include <stdio.h>
#include <string.h>

/* Walks the elements of the array at r->p (validated JSON), calling
 * visit(ctx, i, r) with r->p at element i; visit consumes the element.
 * Returns the element count, or -1 when visit does. */
static long codec__elements(codec_reader *r,
                            int (*visit)(void *ctx, size_t i, codec_reader *r),
                            void *ctx)
{
    size_t i = 0;
    codec_error ignored = {0};

    r->p++; /* '[' */
    codec_json_ws(r);
    if (*r->p == ']') {
        r->p++;
        return 0;
    }
    for (;;) {
        codec_json_ws(r);
        if (visit ? visit(ctx, i, r) != 0 : codec_json_skip(r, &ignored) != 0)
            return -1;
        i++;
        codec_json_ws(r);
        if (*r->p++ == ']')
            return (long)i;
    }
}

typedef struct codec__label_check {
    const char *name;
    size_t row;      /* the row of a nested array, or (size_t)-1 */
    size_t count;    /* labels a row must hold */
    const char *count_doc;
    codec_error *err;
} codec__label_check;

/* Element i of a row of labels: a string. */
static int codec__label_string(void *ctx, size_t i, codec_reader *r)
{
    codec__label_check *c = ctx;
    codec_error ignored = {0};
    char ptr[96];

    if (*r->p != '"') {
        if (c->row == (size_t)-1)
            snprintf(ptr, sizeof ptr, "/%s/%zu", c->name, i);
        else
            snprintf(ptr, sizeof ptr, "/%s/%zu/%zu", c->name, c->row, i);
        codec_error_set(c->err, ERRORS_INVALID_REQUEST, ptr,
                        "%s: expected a string", ptr);
        return -1;
    }
    return codec_json_skip(r, &ignored);
}

/* Row i of [B][count] labels: an array of count strings. */
static int codec__label_row(void *ctx, size_t i, codec_reader *r)
{
    codec__label_check *c = ctx;
    codec_reader counter = *r;
    char ptr[96];
    long n;

    snprintf(ptr, sizeof ptr, "/%s/%zu", c->name, i);
    if (*r->p != '[') {
        codec_error_set(c->err, ERRORS_INVALID_REQUEST, ptr,
                        "%s: expected an array of strings", ptr);
        return -1;
    }
    n = codec__elements(&counter, NULL, NULL);
    if (n != (long)c->count) {
        codec_error_set(c->err, ERRORS_INVALID_REQUEST, ptr,
                        "%s: %ld labels, expected %s = %zu", ptr, n,
                        c->count_doc, c->count);
        return -1;
    }
    c->row = i;
    return codec__elements(r, codec__label_string, c) < 0 ? -1 : 0;
}

int codec__check_labels(const codec__label_text *t, const char *name,
                               size_t B, int batched, size_t count,
                               const char *count_doc, codec_error *err)
{
    codec__label_check c = {name, (size_t)-1, count, count_doc, err};
    codec_reader r;
    char ptr[96];
    long rows;
    int nested;

    if (t->text == NULL)
        return 0;
    codec_reader_init(&r, t->text, t->len, NULL);
    rows = codec__elements(&r, NULL, NULL);
    r.p = t->text + 1;
    codec_json_ws(&r);
    nested = rows > 0 && *r.p == '[';
    r.p = t->text;
    snprintf(ptr, sizeof ptr, "/%s", name);
    if (!nested) {
        if (rows != (long)count) {
            codec_error_set(err, ERRORS_INVALID_REQUEST, ptr,
                            "%s: %ld labels, expected %s = %zu (or [B][%s])",
                            ptr, rows, count_doc, count, count_doc);
            return -1;
        }
        return codec__elements(&r, codec__label_string, &c) < 0 ? -1 : 0;
    }
    if (!batched) {
        codec_error_set(err, ERRORS_INVALID_REQUEST, ptr,
                        "%s: expected [%s] strings for a 2-D x ([B][%s] goes "
                        "with a batched x), found nested arrays", ptr,
                        count_doc, count_doc);
        return -1;
    }
    if (rows != (long)B) {
        codec_error_set(err, ERRORS_INVALID_REQUEST, ptr,
                        "%s: %ld rows of labels, expected B = %zu", ptr, rows,
                        B);
        return -1;
    }
    return codec__elements(&r, codec__label_row, &c) < 0 ? -1 : 0;
}

