/* test_alloc.c: allocation failure. A run through a counting allocator
 * gives the number of allocations N; then for k = 1..N the k-th allocation
 * alone fails: the call must return ATTN_ENOMEM and free every block it got
 * (the allocator's live count is back to 0). Run in every weights mode, with
 * and without an executor, for both kernels; `make test-lib-valgrind` runs
 * this suite under valgrind as well. */
#include "test_lib.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* cross-attention, GQA, W_O, all biases, both masks, several query rows */
static const tl_spec alloc_spec = {
    "alloc", { 2, 37, 11, 8, 6, 4, 2, 4, 3, 5 }, true, true, TL_B_ALL,
    ATTN_MASK_CAUSAL, TL_PAD_SOME, 0, 0
};

typedef enum alloc_exec_kind { ALLOC_EXEC_NONE, ALLOC_EXEC_REVERSE,
                               ALLOC_EXEC_THREADS } alloc_exec_kind;

/* Case _i: kernel (2) x weights mode (3) x executor (3). */
static void alloc_run(int index)
{
    static const char *const mode_names[] = { "none", "per_head", "mean" };
    static const char *const exec_names[] = { "no executor",
                                              "reverse executor (3 workers)",
                                              "2-thread executor" };
    tl_forward_fn fn = (index / 9) ? attn_forward_ref : attn_forward;
    const char *fn_name = (index / 9) ? "attn_forward_ref" : "attn_forward";
    attn_weights mode = (attn_weights)((index / 3) % 3);
    alloc_exec_kind ek = (alloc_exec_kind)(index % 3);
    tl_case c;
    tl_exec e;
    tl_alloc a;
    float *out, *w = NULL, *ref_out;
    size_t n_out, total;
    int st;

    memset(&e, 0, sizeof e);
    tl_case_init(&c, &alloc_spec, 77);
    c.p.weights = mode;
    if (ek != ALLOC_EXEC_NONE) {
        tl_exec_init(&e, ek == ALLOC_EXEC_REVERSE ? TL_EXEC_REVERSE
                                                  : TL_EXEC_THREADS,
                     ek == ALLOC_EXEC_REVERSE ? 3 : 2);
        c.p.executor = &e.iface;
    }
    n_out = tl_output_elems(&c.p);
    out = malloc(n_out * sizeof *out);
    ck_assert_ptr_nonnull(out);
    if (mode != ATTN_WEIGHTS_NONE) {
        w = malloc(tl_weights_elems(&c.p, mode) * sizeof *w);
        ck_assert_ptr_nonnull(w);
    }
    ref_out = tl_run(attn_forward_ref, &c.p, ATTN_WEIGHTS_NONE, NULL);

    /* the counting run */
    tl_alloc_init(&a, 0);
    c.p.allocator = &a.iface;
    st = fn(&c.p, out, w);
    ck_assert_msg(st == ATTN_OK, "%s, weights %s, %s: counting run returned %d",
                  fn_name, mode_names[mode], exec_names[ek], st);
    ck_assert_msg(a.calls >= 1, "%s allocated nothing through the caller's "
                  "allocator", fn_name);
    ck_assert_uint_eq(a.live, 0);
    tl_assert_close_f("counting run output", out, ref_out, n_out);
    total = a.calls;
    tl_alloc_destroy(&a);

    for (size_t k = 1; k <= total; k++) {
        tl_alloc_init(&a, k);
        c.p.allocator = &a.iface;
        st = fn(&c.p, out, w);
        /* with threads, a worker that got no task may skip its scratch
         * allocation, so a run can make fewer than `total` allocations;
         * only then may the k-th never happen */
        if (a.failures == 0)
            ck_assert_msg(ek == ALLOC_EXEC_THREADS && st == ATTN_OK,
                          "%s, weights %s, %s: allocation %zu of %zu never "
                          "requested (status %d)", fn_name, mode_names[mode],
                          exec_names[ek], k, total, st);
        else
            ck_assert_msg(st == ATTN_ENOMEM,
                          "%s, weights %s, %s: failing allocation %zu of %zu "
                          "returned %d (%s), expected ATTN_ENOMEM", fn_name,
                          mode_names[mode], exec_names[ek], k, total, st,
                          attn_strerror(st));
        ck_assert_msg(a.live == 0,
                      "%s, weights %s, %s: failing allocation %zu of %zu "
                      "leaked %zu blocks", fn_name, mode_names[mode],
                      exec_names[ek], k, total, a.live);
        tl_alloc_destroy(&a);
    }

    /* the allocation after the last: the call succeeds as in the count run */
    tl_alloc_init(&a, total + 1);
    c.p.allocator = &a.iface;
    ck_assert_int_eq(fn(&c.p, out, w), ATTN_OK);
    ck_assert_uint_eq(a.failures, 0);
    ck_assert_uint_eq(a.live, 0);
    tl_alloc_destroy(&a);

    if (ek != ALLOC_EXEC_NONE)
        tl_exec_destroy(&e);
    free(ref_out);
    free(out);
    free(w);
    tl_case_free(&c);
}

START_TEST(test_alloc_fail_each)
{
    alloc_run(_i);
}
END_TEST

Suite *tl_suite_alloc(void)
{
    Suite *s = suite_create("alloc");
    TCase *tc = tcase_create("alloc");

    tcase_set_timeout(tc, 120); /* valgrind */
    tcase_add_loop_test(tc, test_alloc_fail_each, 0, 18);
    suite_add_tcase(s, tc);
    return s;
}
