/* test_exec.c: the optional executor and reentrancy.
 *
 * An executor that runs tasks in reverse order, or on 2 or 3 pthreads, must
 * give the same results as running on the calling thread; several threads
 * calling attn_forward at once (on different outputs) must each get the
 * result of a call made alone. "Same" allows 1e-6 * (1 + |x|) element-wise:
 * the tiles compute the same sums, but OpenBLAS may pick different kernels
 * for different block sizes; a shared buffer or a lost tile shows up as a
 * difference many orders of magnitude larger. Each result is also checked
 * against the float64 reference at the contract's 1e-4 * (1 + |ref|).
 */
#include "test_lib.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EXEC_SAME_TOL 1e-6

static const tl_spec exec_specs[] = {
    { "exec_gqa_cross", { 2, 45, 19, 16, 12, 4, 2, 8, 6, 10 }, true, true,
      TL_B_ALL, ATTN_MASK_CAUSAL, TL_PAD_SOME, 0, 0 },
    { "exec_long", { 1, 300, 300, 16, 16, 8, 4, 4, 4, 32 }, false, false, 0,
      ATTN_MASK_CAUSAL, TL_PAD_NONE, 0, 0 },
    { "exec_fully_masked", { 2, 33, 33, 8, 8, 2, 1, 4, 4, 8 }, false, false,
      0, ATTN_MASK_NONE, TL_PAD_ALL_B0, 0, 0 },
};
#define EXEC_SPECS_LEN (sizeof exec_specs / sizeof exec_specs[0])

static const struct {
    const char *name;
    tl_exec_kind kind;
    size_t workers;
} exec_kinds[] = {
    { "reverse, 1 worker", TL_EXEC_REVERSE, 1 },
    { "reverse, 3 workers", TL_EXEC_REVERSE, 3 },
    { "2 threads", TL_EXEC_THREADS, 2 },
    { "3 threads", TL_EXEC_THREADS, 3 },
};
#define EXEC_KINDS_LEN (sizeof exec_kinds / sizeof exec_kinds[0])

/* Case _i: spec x executor kind, all weights modes. */
START_TEST(test_exec_same_as_calling_thread)
{
    const tl_spec *s = &exec_specs[(size_t)_i / EXEC_KINDS_LEN];
    size_t kind = (size_t)_i % EXEC_KINDS_LEN;
    attn_weights modes[] = { ATTN_WEIGHTS_PER_HEAD, ATTN_WEIGHTS_MEAN,
                             ATTN_WEIGHTS_NONE };
    tl_case c;
    tl_exec e;
    float *ref_out;
    char what[160];

    tl_case_init(&c, s, 900 + (uint64_t)_i);
    ref_out = tl_run(attn_forward_ref, &c.p, ATTN_WEIGHTS_NONE, NULL);
    for (size_t k = 0; k < 3; k++) {
        float *w_plain = NULL, *w_exec = NULL;
        float *plain = tl_run(attn_forward, &c.p, modes[k], &w_plain);
        float *with;
        attn_params p = c.p;

        tl_exec_init(&e, exec_kinds[kind].kind, exec_kinds[kind].workers);
        p.executor = &e.iface;
        with = tl_run(attn_forward, &p, modes[k], &w_exec);
        ck_assert_msg(e.runs >= 1 && e.tasks >= 1,
                      "%s, %s: the executor was never used", s->name,
                      exec_kinds[kind].name);

        snprintf(what, sizeof what, "%s, %s, weights mode %d: output",
                 s->name, exec_kinds[kind].name, (int)modes[k]);
        tl_assert_close_tol(what, with, plain, tl_output_elems(&p),
                            EXEC_SAME_TOL);
        tl_assert_close_f(what, with, ref_out, tl_output_elems(&p));
        if (modes[k] != ATTN_WEIGHTS_NONE) {
            snprintf(what, sizeof what, "%s, %s, weights mode %d: weights",
                     s->name, exec_kinds[kind].name, (int)modes[k]);
            tl_assert_close_tol(what, w_exec, w_plain,
                                tl_weights_elems(&p, modes[k]),
                                EXEC_SAME_TOL);
        }
        tl_exec_destroy(&e);
        free(plain);
        free(with);
        free(w_plain);
        free(w_exec);
    }
    free(ref_out);
    tl_case_free(&c);
}
END_TEST

/* -- reentrancy -------------------------------------------------------------- */

#define REENTRANT_THREADS 4
#define REENTRANT_REPEATS 3

typedef struct reentrant_job {
    const attn_params *p;
    float *out;      /* [REENTRANT_REPEATS][output elems] */
    float *weights;  /* [REENTRANT_REPEATS][weights elems] or NULL */
    size_t out_elems, w_elems;
    int status[REENTRANT_REPEATS];
} reentrant_job;

static void *reentrant_thread(void *arg)
{
    reentrant_job *job = arg;

    for (size_t r = 0; r < REENTRANT_REPEATS; r++)
        job->status[r] = attn_forward(
            job->p, job->out + r * job->out_elems,
            job->weights ? job->weights + r * job->w_elems : NULL);
    return NULL;
}

/* Threads alternate between two different problems (one with weights, one
 * without, so both code paths run at once); every result must equal the
 * same call made alone. */
START_TEST(test_exec_reentrant_threads)
{
    tl_case cases[2];
    attn_params params[2];
    float *alone_out[2], *alone_w[2];
    reentrant_job jobs[REENTRANT_THREADS];
    pthread_t ids[REENTRANT_THREADS];
    char what[160];

    for (size_t k = 0; k < 2; k++) {
        tl_case_init(&cases[k], &exec_specs[k], 4000 + k);
        params[k] = cases[k].p;
        params[k].weights = k ? ATTN_WEIGHTS_NONE : ATTN_WEIGHTS_PER_HEAD;
        alone_w[k] = NULL;
        alone_out[k] = tl_run(attn_forward, &params[k], params[k].weights,
                              &alone_w[k]);
    }
    for (size_t t = 0; t < REENTRANT_THREADS; t++) {
        reentrant_job *job = &jobs[t];
        memset(job, 0, sizeof *job);
        job->p = &params[t % 2];
        job->out_elems = tl_output_elems(job->p);
        job->w_elems = tl_weights_elems(job->p, job->p->weights);
        job->out = calloc(REENTRANT_REPEATS * job->out_elems, sizeof(float));
        ck_assert_ptr_nonnull(job->out);
        if (job->w_elems) {
            job->weights = calloc(REENTRANT_REPEATS * job->w_elems,
                                  sizeof(float));
            ck_assert_ptr_nonnull(job->weights);
        }
    }
    for (size_t t = 0; t < REENTRANT_THREADS; t++)
        ck_assert_int_eq(pthread_create(&ids[t], NULL, reentrant_thread,
                                        &jobs[t]), 0);
    for (size_t t = 0; t < REENTRANT_THREADS; t++)
        pthread_join(ids[t], NULL);

    for (size_t t = 0; t < REENTRANT_THREADS; t++) {
        reentrant_job *job = &jobs[t];
        for (size_t r = 0; r < REENTRANT_REPEATS; r++) {
            ck_assert_msg(job->status[r] == ATTN_OK,
                          "thread %zu call %zu returned %d", t, r,
                          job->status[r]);
            snprintf(what, sizeof what, "thread %zu call %zu output", t, r);
            tl_assert_close_tol(what, job->out + r * job->out_elems,
                                alone_out[t % 2], job->out_elems,
                                EXEC_SAME_TOL);
            if (job->weights) {
                snprintf(what, sizeof what, "thread %zu call %zu weights", t,
                         r);
                tl_assert_close_tol(what, job->weights + r * job->w_elems,
                                    alone_w[t % 2], job->w_elems,
                                    EXEC_SAME_TOL);
            }
        }
        free(job->out);
        free(job->weights);
    }
    for (size_t k = 0; k < 2; k++) {
        free(alone_out[k]);
        free(alone_w[k]);
        tl_case_free(&cases[k]);
    }
}
END_TEST

Suite *tl_suite_exec(void)
{
    Suite *s = suite_create("exec");
    TCase *tc = tcase_create("exec");

    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, test_exec_same_as_calling_thread, 0,
                        (int)(EXEC_SPECS_LEN * EXEC_KINDS_LEN));
    tcase_add_test(tc, test_exec_reentrant_threads);
    suite_add_tcase(s, tc);
    return s;
}
