/* test_lib.h: shared helpers of the library's check suites (tests/lib).
 *
 * Every numeric comparison uses the contract's tolerance, element-wise:
 *   |got - ref| <= TL_TOL * (1 + |ref|),  TL_TOL = 1e-4
 * where ref is the float64 reference (attn_forward_ref, PyTorch in float64,
 * or an explicit NumPy float64 computation).
 */
#ifndef TEST_LIB_H
#define TEST_LIB_H

#include <check.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "attn.h"
#include "attn_analysis.h"

#define TL_TOL 1e-4

/* ck_assert_msg records its location on every pass (a write to check's
 * pipe in fork mode); element-wise checks over millions of values use this
 * instead, which costs nothing until it fails. */
#define TL_CHECK(cond, ...)                                                    \
    do {                                                                       \
        if (!(cond))                                                           \
            ck_abort_msg(__VA_ARGS__);                                         \
    } while (0)

/* One suite per area; test_main.c runs them all (CK_RUN_SUITE picks one). */
Suite *tl_suite_kernel(void);
Suite *tl_suite_torch(void);
Suite *tl_suite_lesson(void);
Suite *tl_suite_errors(void);
Suite *tl_suite_alloc(void);
Suite *tl_suite_exec(void);
Suite *tl_suite_analysis(void);
Suite *tl_suite_softmax(void);
Suite *tl_suite_rules(void);

/* -- deterministic random numbers (splitmix64) ----------------------------- */

typedef struct tl_rng {
    uint64_t state;
} tl_rng;

void tl_rng_seed(tl_rng *r, uint64_t seed);
/* The next 64 random bits. */
uint64_t tl_rng_next(tl_rng *r);
/* Uniform in [lo, hi). */
float tl_rng_uniform(tl_rng *r, float lo, float hi);

/* -- randomly filled problems ---------------------------------------------- */

/* Key-padding patterns, per batch element b. */
typedef enum tl_pad {
    TL_PAD_NONE = 0,
    TL_PAD_SOME,    /* b pads its last min(b % 3 + 1, m - 1) keys; odd b
                       also key 1 when m > 3: never a whole row */
    TL_PAD_ALL_B0,  /* b = 0 pads every key (fully masked rows), others SOME */
    TL_PAD_KEY0     /* every b pads key 0 (with causal: row 0 fully masked),
                       and nothing else */
} tl_pad;

enum { TL_B_Q = 1, TL_B_K = 2, TL_B_V = 4, TL_B_O = 8, TL_B_ALL = 15 };

typedef struct tl_spec {
    const char *name;
    attn_dims dims;
    bool cross;       /* memory given; otherwise self-attention on x */
    bool w_o;         /* W_O present; otherwise d_out must be h*d_v */
    unsigned biases;  /* TL_B_* flags */
    attn_mask mask;
    tl_pad pad;
    float scale;      /* 0: default 1/sqrt(d_k) */
    float x_scale;    /* multiplies every x value; 0 means 1 */
} tl_spec;

/* A problem built from a spec: owns its arrays, p points into them. */
typedef struct tl_case {
    attn_params p;
    float *x, *memory, *w_q, *w_k, *w_v, *w_o, *b_q, *b_k, *b_v, *b_o;
    uint8_t *key_padding;
} tl_case;

/* Fills c from spec s with values drawn from seed (x, memory in [-1, 1),
 * weights and biases in [-0.5, 0.5)). Fails the test on allocation failure. */
void tl_case_init(tl_case *c, const tl_spec *s, uint64_t seed);
void tl_case_free(tl_case *c);

/* Whether query i of batch element b may attend key j under p's masks. */
bool tl_allowed(const attn_params *p, size_t b, size_t i, size_t j);

/* Element counts of the outputs for p (asserts attn_output_sizes succeeds). */
size_t tl_output_elems(const attn_params *p);
size_t tl_weights_elems(const attn_params *p, attn_weights mode);

/* Calls fn (attn_forward or attn_forward_ref) with p's weights mode set to
 * mode; returns newly allocated output (and weights unless mode is NONE,
 * *weights set to NULL then). Fails the test on a non-OK status. */
typedef int (*tl_forward_fn)(const attn_params *, float *, float *);
float *tl_run(tl_forward_fn fn, const attn_params *p, attn_weights mode,
              float **weights);

/* -- assertions ------------------------------------------------------------ */

/* Asserts |got[i] - ref[i]| <= TL_TOL * (1 + |ref[i]|) for every i (and
 * that got is finite); what names the array in the failure message. */
void tl_assert_close_f(const char *what, const float *got, const float *ref,
                       size_t count);
void tl_assert_close_d(const char *what, const float *got, const double *ref,
                       size_t count);
/* The same with a caller-chosen relative tolerance. */
void tl_assert_close_tol(const char *what, const float *got,
                         const float *ref, size_t count, double tol);
void tl_assert_finite(const char *what, const float *v, size_t count);

/* Checks per-head weights [B][h][n][m] against p's masks: masked entries
 * exactly 0, each row sums to 1 (within TL_TOL * m) or is all zero when its
 * every key is masked. */
void tl_assert_weights_masked(const char *what, const attn_params *p,
                              const float *weights);

/* Mean over heads of per-head weights, [B][n][m], newly allocated. */
float *tl_mean_heads(const attn_params *p, const float *per_head);

/* -- fixtures (tests/fixtures/lib, written by tests/gen/gen_lib_fixtures.py) */

typedef struct tl_fixture {
    char name[64];
    attn_params p;
    float *x, *memory, *w_q, *w_k, *w_v, *w_o, *b_q, *b_k, *b_v, *b_o;
    uint8_t *key_padding;
    double *output;  /* expected [B][n][d_out] */
    double *weights; /* expected [B][h][n][m] */
    /* the score rules' arrays, NULL when the fixture has none */
    int64_t *positions, *key_positions;
    float *inv_freq, *q_weight, *k_weight, *alibi_slopes, *score_bias;
    float *value;
    uint8_t *score_mask;
    size_t *global_tokens;
} tl_fixture;

/* Loads <fixture dir>/<name>.txt; fails the test on any error (missing
 * file, bad token, a section whose count does not match the dims). */
void tl_fixture_load(tl_fixture *f, const char *name);
void tl_fixture_free(tl_fixture *f);

/* -- a counting allocator that can fail the k-th allocation ---------------- */

typedef struct tl_alloc {
    pthread_mutex_t lock; /* workers may allocate concurrently */
    size_t calls;         /* allocations attempted */
    size_t fail_at;       /* 1-based allocation to fail; 0: never */
    size_t live;          /* blocks handed out and not yet freed */
    size_t failures;      /* allocations refused */
    size_t bytes;         /* bytes live now */
    size_t peak_bytes;    /* most bytes live at once */
    attn_allocator iface;
} tl_alloc;

void tl_alloc_init(tl_alloc *a, size_t fail_at);
void tl_alloc_destroy(tl_alloc *a);

/* -- test executors ------------------------------------------------------- */

typedef enum tl_exec_kind {
    TL_EXEC_REVERSE, /* tasks in reverse order on the calling thread */
    TL_EXEC_THREADS  /* `workers` pthreads pulling tasks from a counter */
} tl_exec_kind;

typedef struct tl_exec {
    tl_exec_kind kind;
    pthread_mutex_t lock;
    size_t runs;  /* calls to run */
    size_t tasks; /* tasks executed in total */
    attn_executor iface;
} tl_exec;

void tl_exec_init(tl_exec *e, tl_exec_kind kind, size_t workers);
void tl_exec_destroy(tl_exec *e);

#endif /* TEST_LIB_H */
