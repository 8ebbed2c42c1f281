/* request.h: private to attend/: the parsed request as parse.c builds it,
 * run.c fills it and write.c writes it out. Not for the HTTP layer, which
 * sees only codec.h. */
#ifndef ATTND_REQUEST_H
#define ATTND_REQUEST_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "attn.h"
#include "attend/codec.h"
#include "json/json.h"

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
    const attn_executor *exec; /* the pool codec_run was given, or NULL */
    double elapsed_ms;
    double analysis_seconds; /* extras' cost, summed over compute threads */
};

#endif
