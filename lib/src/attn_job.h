/* attn_job.h: one call of the fast kernel as a job: its settings, its
 * workspace's layout and buffers, shared by attn_blas.c (the phases) and
 * attn_job.c (the planning) (not installed). */
#ifndef ATTN_JOB_H
#define ATTN_JOB_H

#include <stdint.h>

#include "attn_heads.h"

/* Query rows per attention tile when a task holds every head's rows of its
 * tile (mean weights, head figures, top-k: h x rows x m floats a worker).
 * Without returned weights a tile's scores live in per-worker [rows][m]
 * buffers, which is all the n x m memory the call ever holds. */
#ifndef ATTN__BLOCK
#define ATTN__BLOCK 128
#endif
/* When a task is one head of a tile, taller tiles repack each head's K and
 * V (OpenBLAS packs both operands on every call) fewer times: about
 * ATTN__TILE_ELEMS scores a tile, ATTN__BLOCK to ATTN__BLOCK_MAX rows.
 * Outputs only, d_model = 256, 8 heads, two workers, perf's share of the
 * sgemm kernel in the whole: n = 2048 (m = 2048) 1/1.77 at 128 rows, 1/1.74
 * at 256, 1/1.65..1/1.70 at 512; n = 8192: 1/1.83 at 128, 1/1.80 at 256,
 * 1/1.92 at 512. */
#define ATTN__TILE_ELEMS ((size_t)1 << 20)
#define ATTN__BLOCK_MAX 512
/* Rows per projection task when an executor spreads the work. */
#define ATTN__PROJ_MIN_ROWS 64

typedef struct attn__job {
    const attn_params *p;
    const attn_dims *d;
    float *q;       /* [B*n][h*d_k] */
    float *k;       /* [B*m][g*d_k] */
    float *v;       /* [B*m][g*d_v] */
    float *cat;     /* [B*n][h*d_v]: the output itself when there is no W_O */
    float *output;  /* [B*n][d_out] */
    float *weights; /* caller's, or NULL */
    const attn_extras *ex; /* never NULL: a zeroed one when not asked */
    attn__acc *acc;        /* head figures' sums, when ex->stats */
    int dense_per_head;    /* S is written straight into the weights */
    int dense_mean;        /* the mean is accumulated into the weights */
    int keep_heads;        /* every head's rows of a tile are kept */
    int head_tasks;        /* phase 2 tasks are single heads of a tile */
    int lean;              /* outputs only: no weights, figures or top-k */
    float *flash;   /* lean with the fused kernel: [workers][flash_floats] */
    size_t flash_floats;
    attn__flash_args fa;
    float *scratch;        /* [workers][h or 1][blk][m], or NULL */
    float *probs;   /* lean: [workers][blk][m], the softmax beside scratch */
    size_t *zeroed; /* lean: [workers]: floats of the worker's scratch, from
                       its start, known to be zero */
    const float **hrow;    /* [workers][h]: each head's rows in the tile */
    const float **hrow_rows; /* [workers][h]: when h > the stack's room */
    size_t *visible;       /* [workers][h]: likewise, visible keys a head */
    float *meanrow;        /* [workers][m]: the mean row for top-k */
    double *cost;          /* [workers]: seconds spent on the extras */
    float *inv;     /* [workers][blk]: 1 / row sum of the unnormalised rows */
    unsigned char *hide; /* [workers][m]: one row's hidden keys */
    double *trig;   /* [workers][d_k]: one row's rotation */
    attn__vis vis;  /* which keys each query sees */
    attn_status *status; /* [workers]: ATTN_ERANGE when a worker saw overflow */
    float *absmax;  /* [workers][3]: the largest |value| of Q, of K and of
                       V among the rows a worker projected (Q and K after
                       norm and rope) */
    float *normmax; /* [workers][2]: the largest 2-norm of a head's d_k
                       slice of a row of Q and of K, likewise */
    void *block;    /* the one allocation all the buffers above live in */
    float scale;
    size_t blk, nblocks;                 /* attention tiles per batch element */
    size_t q_rows, kv_rows, chunk, q_chunks, kv_chunks; /* projection tasks */
} attn__job;

/* Sub-buffers of the workspace start on their own cache lines. */
#define ATTN__ALIGN 64

/* The workspace's layout, summed before its one allocation. */
typedef struct attn__plan {
    size_t total;
    int overflow;
} attn__plan;

/* The offset of a part the call does not need. */
#define ATTN__NONE SIZE_MAX

/* Reserves count * size bytes; returns their offset in the block. */
static inline size_t attn__plan_add(attn__plan *pl, size_t count, size_t size)
{
    size_t bytes, off = pl->total;

    if (attn__mul(count, size, &bytes) ||
        bytes > SIZE_MAX - 2 * ATTN__ALIGN - pl->total) {
        pl->overflow = 1;
        return 0;
    }
    pl->total += (bytes + ATTN__ALIGN - 1) / ATTN__ALIGN * ATTN__ALIGN;
    return off;
}

/* The part at offset off of the aligned block, or NULL for ATTN__NONE. */
static inline void *attn__part(unsigned char *base, size_t off)
{
    return off == ATTN__NONE ? NULL : base + off;
}

static inline size_t attn__ceil_div(size_t a, size_t b)
{
    return a / b + (a % b != 0);
}

/* Where each buffer of the workspace starts (ATTN__NONE: not needed). */
typedef struct attn__layout {
    size_t q, k, v, cat, status, absmax, normmax, inv, hrow, cost, hide, trig, scratch;
    size_t hrow_rows, visible, meanrow, probs, zeroed, flash, packed;
} attn__layout;

/* Step 1 of a call: the job's settings for p, ex and `workers` (which
 * path, tile height, projection chunks); no allocation. flash_ok: the
 * fused kernel may take the call. */
void attn__job_init(attn__job *job, const attn_params *p,
                    const attn_extras *ex, size_t workers, int flash_ok);

/* Step 2: the workspace's layout for the job; pl->total its size. */
void attn__job_layout(const attn__job *job, size_t workers, attn__layout *o,
                      attn__plan *pl);

/* Step 3: the workspace itself, its buffers placed, the visibility
 * tables and the head figures' sums. ATTN_OK, ATTN_EOVERFLOW or
 * ATTN_ENOMEM (attn__job_free releases whatever was made). */
attn_status attn__job_alloc(attn__job *job, attn__acc *acc, size_t workers);
void attn__job_free(attn__job *job, attn__acc *acc);

/* The peak bytes of steps 3 and 4 (the workspace, the visibility tables,
 * the head figures' sums, the value norms' buffer). */
attn_status attn__job_bytes(const attn__job *job, size_t workers,
                            uint64_t *bytes);

#endif
