/* request.h: private to attend/: the parsed request as parse.c builds it,
 * run.c fills it and write.c writes it out. Not for the HTTP layer, which
 * sees only codec.h. */
#ifndef ATTND_REQUEST_H
#define ATTND_REQUEST_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "attn.h"
#include "attn_analysis.h"
#include "attend/codec.h"
#include "json/json.h"

/* -- the parsed request ---------------------------------------------------- */

typedef struct codec__pending codec__pending;

/* Most buffers one request owns or holds: every tensor field, its layout
 * conversions and the expanded masks and positions. */
#define CODEC_MAX_OWNED 64

struct codec_request {
    attn_params p;     /* pointers into the owned and held buffers below */
    int batched;       /* x was given as [B][n][d_model] (rank follows x) */
    int base64_out;    /* "encoding": "base64" (of a `layers` request:
                          the top level's, for the rollout) */
    void *owned[CODEC_MAX_OWNED];       /* freed with the request */
    size_t n_owned;
    const void *holds[CODEC_MAX_OWNED]; /* stored tensors, given back */
    size_t n_holds;
    codec_refs refs;          /* how holds are given back (a copy) */
    char *tokens_json;        /* compact JSON of "tokens", or NULL */
    char *memory_tokens_json; /* compact JSON of "memory_tokens", or NULL */
    char *refs_json;          /* store: {"w_q":"sha256:..",...}, or NULL */
    codec__pending *pending;  /* store: not stored yet (parse.h), or NULL */
    uint64_t params;   /* attn_param_count */
    uint64_t flops;    /* attn_flops */
    uint64_t cost;     /* attn_cost: the work held to --max-flops */
    uint64_t copied;   /* bytes of inputs build.c copied or converted:
                          layouts, expanded masks and positions, a field
                          a layer inherits, the tokens */
    uint64_t inputs;   /* bytes of the input tensors it took from the body
                          (moved) or holds from the tensor store (held,
                          they outlive their eviction from the store) */
    uint64_t ws_bytes, result_bytes; /* codec__budget's figures (0 when
                                        --max-request-bytes is off) */
    int analysis;      /* "analysis": true (head figures) */
    size_t top_k;      /* "top_k": k, or 0 for dense maps */
    int want_value_norms; /* "value_norms": true */
    int want_qk;          /* "return_qk": true */
    /* a `layers` request: the layers, each a whole request of its own;
     * this request then computes nothing itself */
    codec_request **layers;
    size_t n_layers;
    int rollout;          /* "rollout": true */
    float *rollout_map;   /* [B][n][n] once run */
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
    float *value_norms;     /* value_norms: [B][h][m] */
    float *q_out, *k_out;   /* return_qk: [B][h][n][d_k], [B][g][m][d_k] */
    const attn_executor *exec; /* the pool codec_run was given, or NULL */
    double elapsed_ms;
    double analysis_seconds; /* extras' cost, summed over compute threads */
};

/* The most work the float64 reference takes on when float32 overflows or
 * may miss the contract's bound (run.c's codec__forward): 1.4 to 3.3 s of
 * it on one core here (3 to 7 GFLOP/s, the lower where n is large next
 * to d_model; 1.45 s for n = 1024, d_model = 768, 12 heads, 8e9 flops),
 * against a float32 answer that may miss the bound by a thousand times.
 * Its memory is budgeted (budget.c) for every request that may take it. */
#define CODEC_REF_FLOPS UINT64_C(10000000000)

/* The most layers a `layers` request takes (413 beyond): a layer costs
 * its parse and bookkeeping whatever its work, so a body of a few hundred
 * KB of empty layers would otherwise hold a thread for seconds. */
#define CODEC_MAX_LAYERS 1024

/* The estimate of float32's error in an answer (run.c's codec__loose)
 * above which the float64 reference computes it again. Measured by
 * tools/calibrate_f32.py over 1200 random requests: float32 missed the
 * contract's 1e-4 (1 + |ref|) only where the estimate was 4.3e-4 or more,
 * and its error never passed 0.9 times the estimate; the benchmark's
 * workloads (x of N(0, 1), weights of N(0, 1/d_model)) estimate 2e-6 to
 * 5e-6, twenty times below. A build may set it: the calibration measures
 * float32's own error with the fallback off (a huge value). */
#ifndef CODEC_F32_ERROR
#define CODEC_F32_ERROR 1e-4
#endif

/* refs.c: the resolver of {"ref": ...} tensors and `store: true` puts
 * over the tensor store st; NULL when st is NULL (the store is off). */
struct store;
const codec_refs *codec_refs_of(struct store *st);

/* build.c: puts the tensors of a `store: true` request (each layer's)
 * into the store and writes each one's meta.refs, then frees what was
 * kept for it. codec_run calls it once the whole request has been
 * computed, so that a request that fails stores nothing; without
 * `store: true` there is nothing to do. 0, or -1 with err filled (out of
 * memory). */
int codec_store_pending(codec_request *req, codec_error *err);

/* build.c: frees a pending store without storing; accepts NULL. */
void codec_pending_free(codec__pending *p);

/* run.c: a rollout request's layers are self-attention over one n and B;
 * 0, or -1 with err filled. */
int codec_rollout_check(const codec_request *req, codec_error *err);

#endif
