/* codec_int.h: private to the codec (codec_*.c): the parsed request, the JSON
 * reader, numeric arrays and tensors, number conversion. Not for the HTTP
 * layer, which sees only codec.h. */
#ifndef ATTND_CODEC_INT_H
#define ATTND_CODEC_INT_H

#include <stddef.h>
#include <stdint.h>

#include "attn.h"
#include "codec.h"

/* -- the parsed request ---------------------------------------------------- */

struct codec_request {
    attn_params p;     /* pointers into the owned buffers below */
    int batched;       /* x was given as [B][n][d_model] (rank follows x) */
    int base64_out;    /* "encoding": "base64" */
    /* owned inputs (NULL when absent) */
    float *x, *memory, *w_q, *w_k, *w_v, *w_o, *b_q, *b_k, *b_v, *b_o;
    uint8_t *key_padding; /* [B][m] */
    char *tokens_json;        /* compact JSON of "tokens", or NULL */
    char *memory_tokens_json; /* compact JSON of "memory_tokens", or NULL */
    uint64_t params;   /* attn_param_count */
    uint64_t flops;    /* attn_flops */
    int analysis;      /* "analysis": true (head figures, issue 8) */
    size_t top_k;      /* "top_k": k, or 0 for dense maps */
    /* results of codec_run */
    float *output;     /* [B][n][d_out] */
    float *weights;    /* [B][h][n][m], [B][n][m] or NULL (also with top_k) */
    size_t output_elems, weights_elems;
    float *pairs;      /* top_k: [B][h][n][k][2] or [B][n][k][2] of (index,
                          weight); indices are exact in float32 (m < 2^24) */
    size_t pairs_elems;
    attn_head_stats *heads; /* analysis: [B][h] */
    float *similarity;      /* analysis: [B][h][h] */
    size_t *skipped_rows;   /* analysis: [B] */
    double elapsed_ms;
    double analysis_seconds; /* extras' cost, summed over compute threads */
};

/* -- JSON reader (codec_json.c) --------------------------------------------- */

/* A cursor over the request body. Syntax errors are reported as
 * ERRORS_INVALID_JSON with line and column computed from the offset. */
typedef struct codec_reader {
    const char *start, *p, *end;
    int depth;
} codec_reader;

/* Deepest nesting the reader accepts (jansson's limit is 2048). */
#define CODEC_MAX_DEPTH 512

/* Skips JSON whitespace. Inline: it runs twice per number in the arrays. */
static inline void codec_json_ws(codec_reader *r)
{
    const char *p = r->p, *end = r->end;
    while (p < end && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t'))
        p++;
    r->p = p;
}

/* Sets an invalid_json error at r->p: "<what> at line L, column C". */
void codec_json_syntax(const codec_reader *r, codec_error *err,
                       const char *what);

/* Reads a string at r->p (which must be '"'). On success *s and *len are the raw
 * content between the quotes (escapes not decoded) and *escaped tells whether
 * it holds any backslash. Validates escapes and UTF-8. Returns 0 or -1. */
int codec_json_string(codec_reader *r, const char **s, size_t *len,
                      int *escaped, codec_error *err);

/* Decodes the escapes of a raw string content into a malloc'd NUL-terminated
 * buffer (caller frees); NULL when out of memory. The content must have passed
 * codec_json_string. */
char *codec_json_unescape(const char *s, size_t len, size_t *out_len);

/* Scans a number at r->p per RFC 8259 and converts it to the nearest float32
 * (*finite is 0 when it is out of float32 range). Returns 0 or -1. */
int codec_json_number(codec_reader *r, float *out, int *finite,
                      codec_error *err);

/* Like codec_json_number but to the nearest double. */
int codec_json_number_d(codec_reader *r, double *out, codec_error *err);

/* Skips one value of any kind, validating its syntax. Returns 0 or -1. */
int codec_json_skip(codec_reader *r, codec_error *err);

/* Consumes the literal lit ("true", "false", "null") at r->p. */
int codec_json_literal(codec_reader *r, const char *lit, codec_error *err);

/* A word naming the kind of value starting at r->p, for messages
 * ("a string", "an object", "a number", ...). */
const char *codec_json_kind(const codec_reader *r);

/* -- numeric arrays and tensors (codec_tensor.c) ---------------------------- */

/* An owned row-major array with its shape, as parsed from one field. */
typedef struct codec_array {
    void *data;       /* float (CODEC_LEAF_F32) or uint8_t (CODEC_LEAF_BOOL) */
    size_t shape[4];
    int rank;
    size_t count;     /* product of shape */
    int tensor;       /* given as a base64 tensor object (pointers differ) */
} codec_array;

typedef enum codec_leaf {
    CODEC_LEAF_F32 = 0,
    CODEC_LEAF_BOOL = 1
} codec_leaf;

/* Parses the value at r->p (a nested array, or for CODEC_LEAF_F32 also a
 * tensor object) whose rank must lie in [min_rank, max_rank]. ptr is the
 * field's JSON Pointer ("/x"); shape_doc describes the accepted shapes for
 * messages ("[n][d_model] or [B][n][d_model]"). On success *a owns its data;
 * on failure *a is empty, err is filled (invalid_json or invalid_request). */
int codec_array_parse(codec_reader *r, const char *ptr, const char *shape_doc,
                      codec_leaf leaf, int min_rank, int max_rank,
                      codec_array *a, codec_error *err);

/* Frees a's data and empties it; accepts an empty array. */
void codec_array_clear(codec_array *a);

/* Writes into buf the JSON Pointer of dimension k of a field (the first
 * element along that axis, or "/shape/k" for a tensor object). */
void codec_array_dim_ptr(const codec_array *a, const char *ptr, int k,
                         char *buf, size_t cap);

/* Standard base64 (RFC 4648, with padding) of n bytes taken as the
 * little-endian bytes of floats: encodes whole 3-byte groups of the byte
 * range [from, to) of the float array; writes 4 chars per group. to - from
 * must be a multiple of 3 unless to is the end (then padding is written).
 * Returns the number of chars written. */
size_t codec_base64_f32(const float *v, size_t total_bytes, size_t from,
                        size_t to, char *out);

#include "codec_num.h"

#endif
