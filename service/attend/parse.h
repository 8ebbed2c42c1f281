/* attend/parse.h: private to the request parser (parse.c reads the body,
 * check.c derives and cross-checks the dimensions and limits, build.c turns
 * the checked fields into the library's parameters). */
#ifndef ATTND_PARSE_H
#define ATTND_PARSE_H

#include "attend/fields.h"
#include "attend/request.h"

/* tokens / memory_tokens: the raw text of the value in the body (the
 * reader validated it), checked for shape once n, m and B are known and
 * echoed back as it came. */
typedef struct codec__label_text {
    const char *text; /* NULL: absent */
    size_t len;
} codec__label_text;

typedef struct codec__rope {
    size_t dim;           /* when dim_given; else d_k */
    int dim_given;        /* 0 is given too: nothing rotates */
    double theta;         /* 0: 10000 */
    double factor;        /* 0: 1 */
    int style;            /* index in attend_rope_style_names */
    codec_array inv_freq; /* [dim/2] or empty */
} codec__rope;

typedef struct codec__window {
    int has_left, has_right;
    size_t left, right;
} codec__window;

typedef struct codec__qk_norm {
    codec_array q_weight, k_weight;
    double eps; /* 0: 1e-6 */
    int over;   /* index in attend_qk_norm_over_names */
} codec__qk_norm;

typedef struct codec__alibi {
    int on;
    codec_array slopes; /* [h], or empty: BLOOM's slopes */
} codec__alibi;

/* A span of the body (the `layers` array, kept to be read after the
 * top-level fields). */
typedef struct codec__span {
    const char *text;
    size_t len;
} codec__span;

/* Everything the fields of one object say, before cross-checking. seen[id]
 * marks a field given (a JSON null is absent); shared[id] marks one
 * inherited from the top level of a `layers` request, whose buffers belong
 * to the top level's fields; nulled[id] one a layer gives as null, which
 * takes the top level's default away (the layer's own field overrides it,
 * and null is absent). */
typedef struct codec__fields {
    codec_array x, memory, value, w_q, w_k, w_v, w_o, w_qkv, b_q, b_k, b_v,
        b_o, b_qkv, kpm, attn_mask, attn_bias, positions, key_positions,
        global_tokens;
    size_t num_heads, num_kv_heads, top_k;
    double scale, softcap;
    int weight_layout, qkv_order, mask, return_weights, encoding;
    int analysis, value_norms, return_qk, store, rollout;
    codec__label_text tokens, memory_tokens;
    codec__rope rope;
    codec__window window;
    codec__qk_norm qk_norm;
    codec__alibi alibi;
    codec__span layers;
    unsigned char seen[F_COUNT], shared[F_COUNT], nulled[F_COUNT];
} codec__fields;

/* Counts above this are read as this (every limit is far below it). */
#define CODEC__COUNT_MAX ((size_t)1000000000000000ULL)

/* The largest position (2^53, as json/tensor.c reads index fields): window
 * sides above it are read as it. */
#define CODEC__POSITION_MAX ((size_t)1 << 53)

/* values.c: where each field lives in codec__fields, by id. */
typedef struct codec__slot {
    size_t offset, size;
} codec__slot;
extern const codec__slot codec__slots[F_COUNT];

/* values.c: parses the value of field `id` at r->p into f; ptr is its
 * JSON Pointer. 0, or -1 with err filled. */
int codec__field(codec_reader *r, int id, codec__fields *f, const char *ptr,
                 codec_error *err);

/* values.c: reports key[0..len) of an object at `where` as unknown
 * (what: "field", "key"), naming the closest of keys within two edits. */
void codec__unknown(const char *where, const char *key, size_t len,
                    const char *const *keys, const char *what,
                    codec_error *err);

/* values.c: "out of memory while parsing the request" (503). */
void codec__parse_oom(codec_error *err);

/* Frees what f owns (not what it shares); f is then empty. */
void codec__fields_free(codec__fields *f);

/* The first contract error wins; copies e into err unless err holds one. */
void codec__error_copy(codec_error *err, const codec_error *e);

/* check.c: derives d from the fields and checks every field against it
 * (messages say expected vs found, with a JSON Pointer). 0 or -1. */
int codec__check(codec__fields *f, attn_dims *d, codec_error *err);

/* labels.c: tokens / memory_tokens t (absent: fine) hold [count] strings,
 * or [B][count] with a batched x. 0 or -1. */
int codec__check_labels(const codec__label_text *t, const char *name,
                        size_t B, int batched, size_t count,
                        const char *count_doc, codec_error *err);

/* check.c: the limits of the shapes (dimensions, batch, heads, the
 * values returned), with overflow-checked products, on params whose dims
 * are set, before anything is built. 0 or -1 (413 in err). */
int codec__limits(const attn_params *p, const codec__fields *f,
                  const limits_config *lim, codec_error *err);

/* budget.c: the limits of the work and the memory, on a built request:
 * fills req->flops and req->params. 0 or -1 (413 in err). */
int codec__budget(codec_request *req, const limits_config *lim,
                  codec_error *err);

/* budget.c: the memory of a `layers` request's built layers together:
 * every layer's results and input copies are kept until the answer is
 * written, beside the largest workspace (or the rollout's buffers). 0 or
 * -1 (413 in err). */
int codec__layers_budget(codec_request *const *layers, size_t count,
                         int rollout, const limits_config *lim,
                         codec_error *err);

/* build.c: fills req's params from checked fields, converting weights to
 * the library's layout; buffers move from f to req (shared ones are
 * copied). 0 or -1 (out of memory). */
int codec__build(codec__fields *f, codec_request *req, codec_error *err);

/* build.c: `store: true`. The float-valued tensor fields of a request as
 * they were sent (at most CODEC__STORED of them), planned before build
 * moves them and put into the store only once the whole request has been
 * computed (codec_store_pending), so that a request that fails stores
 * nothing. */
#define CODEC__STORED 24
typedef struct codec__stored {
    const char *name;
    const float *data;
    size_t count, shape[4];
    int rank;
    char ref[72]; /* given by ref, or "" until stored */
} codec__stored;

struct codec__pending {
    codec__stored plan[CODEC__STORED];
    size_t n;
    /* owned: the sent values that nothing else keeps until then */
    void *kept[CODEC__STORED];
    size_t n_kept;
    codec_refs refs; /* a copy of the store's; put NULL: no store */
};

/* A new pending store over refs (NULL: the store is off) with the plan of
 * f's tensors (f NULL: none); call it before build. NULL when out of
 * memory. Free it with codec_pending_free. */
codec__pending *codec__pending_new(codec__fields *f, const codec_refs *refs);

/* After build: moves to p the values f still owns, which the plan points
 * at (those build converted instead of moving them into the request, and a
 * top level's, which its layers copied); shared and stored ones stay. */
void codec__pending_keep(codec__pending *p, codec__fields *f);

#endif
