/* attn_job.c: the planning of a fast-kernel call: which path takes it,
 * how tall its tiles are, and the one workspace block its buffers share
 * (the phases that run it are attn_blas.c's). */
#include <string.h>

#include "attn_job.h"

/* Step 1 of a call: the job's settings for p, ex and `workers` (which
 * path, tile height, projection chunks); no allocation. */
void attn__job_init(attn__job *job, const attn_params *p,
                           const attn_extras *ex, size_t workers,
                           int flash_ok)
{
    const attn_dims *d = &p->dims;
    size_t per_tile;

    memset(job, 0, sizeof(*job));
    job->p = p;
    job->d = d;
    job->fa.p = p;
    job->ex = ex;
    job->dense_per_head = p->weights == ATTN_WEIGHTS_PER_HEAD && !ex->top_k;
    job->dense_mean = p->weights == ATTN_WEIGHTS_MEAN && !ex->top_k;
    job->keep_heads = ex->stats || ex->top_k;
    /* tasks per tile: every head, or one when heads share the tile */
    job->head_tasks = !job->dense_mean && !job->keep_heads;
    job->lean = job->head_tasks && !job->dense_per_head;
    if (job->lean && flash_ok)
        job->flash_floats = attn__flash_floats(d);
    job->scale = (float)attn__scale(p);
    job->q_rows = d->B * d->n;
    job->kv_rows = d->B * d->m;
    /* one task per projection without an executor (OpenBLAS may thread
     * it); otherwise enough chunks to keep every worker busy */
    job->chunk = job->q_rows > job->kv_rows ? job->q_rows : job->kv_rows;
    if (workers > 1) {
        size_t c = attn__ceil_div(job->chunk, 2 * workers);
        job->chunk = c < ATTN__PROJ_MIN_ROWS ? ATTN__PROJ_MIN_ROWS : c;
    }
    job->q_chunks = attn__ceil_div(job->q_rows, job->chunk);
    job->kv_chunks = attn__ceil_div(job->kv_rows, job->chunk);
    per_tile = job->head_tasks ? d->h : 1;
    job->blk = ATTN__BLOCK;
    if (job->flash_floats) {
        job->blk = ATTN__FLASH_ROWS;
    } else if (job->head_tasks) {
        size_t rows = ATTN__TILE_ELEMS / d->m;
        job->blk = rows < ATTN__BLOCK       ? ATTN__BLOCK
                   : rows > ATTN__BLOCK_MAX ? ATTN__BLOCK_MAX
                                            : rows;
    }
    if (workers > 1 &&
        d->B * per_tile * attn__ceil_div(d->n, job->blk) < 2 * workers) {
        /* small requests: smaller tiles so every worker gets two tasks */
        size_t tiles = attn__ceil_div(2 * workers, d->B * per_tile);
        size_t b = attn__ceil_div(d->n, tiles);
        job->blk = b < 8 ? 8 : b;
    }
    if (job->blk > d->n)
        job->blk = d->n;
    job->nblocks = attn__ceil_div(d->n, job->blk);
}

/* Step 2: the workspace's layout for the job; pl->total its size. One
 * block for the whole workspace: one allocation to fail, and a size that
 * malloc keeps on its heap between calls instead of mapping and faulting
 * in fresh zeroed pages every time (a 3 to 7% cost at n = 2048 when the
 * buffers went to malloc one by one). */
void attn__job_layout(const attn__job *job, size_t workers,
                             attn__layout *o, attn__plan *pl)
{
    const attn_params *p = job->p;
    const attn_dims *d = job->d;
    size_t scratch_rows;

    o->cat = o->scratch = o->hrow_rows = o->visible = ATTN__NONE;
    o->meanrow = o->probs = o->zeroed = o->flash = o->packed = ATTN__NONE;
    o->q = attn__plan_add(pl, job->q_rows, d->h * d->d_k * sizeof(float));
    o->k = attn__plan_add(pl, job->kv_rows, d->g * d->d_k * sizeof(float));
    o->v = attn__plan_add(pl, job->kv_rows, d->g * d->d_v * sizeof(float));
    if (p->w_o != NULL)
        o->cat = attn__plan_add(pl, job->q_rows,
                                d->h * d->d_v * sizeof(float));
    o->status = attn__plan_add(pl, workers, sizeof(attn_status));
    o->absmax = attn__plan_add(pl, 3 * workers, sizeof(float));
    o->normmax = attn__plan_add(pl, 2 * workers, sizeof(float));
    o->inv = attn__plan_add(pl, workers * job->blk, sizeof(float));
    o->hrow = attn__plan_add(pl, workers * d->h, sizeof(float *));
    o->cost = attn__plan_add(pl, workers, sizeof(double));
    o->hide = attn__plan_add(pl, workers, d->m);
    o->trig = attn__plan_add(pl, workers, d->d_k * sizeof(double));
    if (job->flash_floats) {
        if (attn__mul(workers, job->flash_floats, &scratch_rows))
            pl->overflow = 1;
        else
            o->flash = attn__plan_add(pl, scratch_rows, sizeof(float));
        o->packed = attn__plan_add(pl, attn__flash_packed_floats(d),
                                   sizeof(float));
    } else if (!job->dense_per_head) {
        /* workers * (h or 1) * blk rows of m scores */
        if (attn__mul(workers * job->blk, job->keep_heads ? d->h : 1,
                      &scratch_rows))
            pl->overflow = 1;
        else
            o->scratch = attn__plan_add(pl, scratch_rows,
                                        d->m * sizeof(float));
    }
    if (job->lean && !job->flash_floats) {
        o->probs = attn__plan_add(pl, workers * job->blk,
                                  d->m * sizeof(float));
        o->zeroed = attn__plan_add(pl, workers, sizeof(size_t));
    }
    if (job->keep_heads && d->h > ATTN__MAX_STACK_HEADS) {
        o->hrow_rows = attn__plan_add(pl, workers * d->h, sizeof(float *));
        o->visible = attn__plan_add(pl, workers * d->h, sizeof(size_t));
    }
    if (job->ex->top_k && p->weights == ATTN_WEIGHTS_MEAN)
        o->meanrow = attn__plan_add(pl, workers * d->m, sizeof(float));
}

/* Step 3: the workspace itself, its buffers placed, the visibility
 * tables and the head figures' sums. ATTN_OK, ATTN_EOVERFLOW or
 * ATTN_ENOMEM (attn__job_free releases whatever was made). */
attn_status attn__job_alloc(attn__job *job, attn__acc *acc, size_t workers)
{
    const attn_params *p = job->p;
    attn__plan pl = {0, 0};
    attn__layout o;
    unsigned char *base;
    attn_status rc;

    attn__job_layout(job, workers, &o, &pl);
    if (pl.overflow)
        return ATTN_EOVERFLOW;
    job->block = attn__alloc(p, pl.total + ATTN__ALIGN, 1);
    if (job->block == NULL)
        return ATTN_ENOMEM;
    base = (unsigned char *)job->block +
           (ATTN__ALIGN - (uintptr_t)job->block % ATTN__ALIGN);
    job->q = attn__part(base, o.q);
    job->k = attn__part(base, o.k);
    job->v = attn__part(base, o.v);
    job->cat = o.cat != ATTN__NONE ? attn__part(base, o.cat) : job->output;
    job->status = attn__part(base, o.status);
    job->absmax = attn__part(base, o.absmax);
    job->normmax = attn__part(base, o.normmax);
    job->inv = attn__part(base, o.inv);
    job->hrow = attn__part(base, o.hrow);
    job->cost = attn__part(base, o.cost);
    job->scratch = attn__part(base, o.scratch);
    job->probs = attn__part(base, o.probs);
    job->zeroed = attn__part(base, o.zeroed);
    job->hrow_rows = attn__part(base, o.hrow_rows);
    job->visible = attn__part(base, o.visible);
    job->hide = attn__part(base, o.hide);
    job->trig = attn__part(base, o.trig);
    job->meanrow = attn__part(base, o.meanrow);
    job->flash = attn__part(base, o.flash);
    if (o.packed != ATTN__NONE)
        attn__flash_place(&job->fa, attn__part(base, o.packed));
    if (job->lean && !job->flash_floats)
        memset(job->zeroed, 0, workers * sizeof(size_t));
    memset(job->status, 0, workers * sizeof(attn_status));
    memset(job->absmax, 0, 3 * workers * sizeof(float));
    memset(job->normmax, 0, 2 * workers * sizeof(float));
    memset(job->cost, 0, workers * sizeof(double));
    rc = attn__vis_init(&job->vis, p);
    if (rc != ATTN_OK)
        return rc;
    job->fa.vis = &job->vis;
    if (job->ex->stats) {
        rc = attn__acc_init(acc, p, workers);
        if (rc != ATTN_OK)
            return rc;
        job->acc = acc;
    }
    return ATTN_OK;
}

void attn__job_free(attn__job *job, attn__acc *acc)
{
    attn__vis_free(&job->vis);
    attn__acc_free(acc, job->p);
    attn__free(job->p, job->block);
}

attn_status attn__job_bytes(const attn__job *job, size_t workers,
                            uint64_t *bytes)
{
    const attn_params *p = job->p;
    const attn_dims *d = job->d;
    attn__plan pl = {0, 0};
    attn__layout o;
    uint64_t total;

    attn__job_layout(job, workers, &o, &pl);
    if (pl.overflow)
        return ATTN_EOVERFLOW;
    total = (uint64_t)pl.total + ATTN__ALIGN + attn__vis_bytes(p);
    if (job->ex->stats)
        total += (uint64_t)workers * d->B *
                 (d->h * (sizeof(attn__head_sums) +
                          (d->n + d->m - 1 + d->h) * sizeof(double)) +
                  sizeof(size_t));
    if (job->ex->value_norms != NULL && p->w_o != NULL)
        total += (uint64_t)d->m * d->d_out * sizeof(float);
    *bytes = total;
    return ATTN_OK;
}
