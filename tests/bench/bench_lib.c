/* bench_lib.c: the library benchmark. Measures this machine's cblas_sgemm
 * peak, then the lesson's scaling exercise (self-attention, d_model = 256,
 * 8 heads, n = 128 .. 8192, with per-head weights and outputs-only) and the
 * n = 512, d_model = 768, 12-head goal shape, in two thread configurations:
 *   blas  OpenBLAS with T threads, no executor
 *   exec  OpenBLAS with 1 thread, the library's tiles on a T-worker pthread
 *         executor (the way a server that owns one pool calls the library)
 * Every configuration is first checked against attn_forward_ref. Prints
 * figures and writes one CSV row per timed case; it never fails on a time,
 * only on a wrong answer or a failed call.
 *
 *   bench_lib [--quick] [--threads T] [--csv PATH] [--peak-only]
 *             [--coretype-hint] [--window]
 * --window times sliding-window attention alone (n = 8192 and 16384,
 * d_model = 256, 8 heads, causal, outputs only, window left = 255, on the
 * T-worker executor with OpenBLAS on one thread) against the same call
 * without the window, and prints the ratios.
 * OpenBLAS's kernels are chosen when it loads (OPENBLAS_CORETYPE); the
 * drivers set that variable, as attnd does for itself, from
 * --coretype-hint (attn_blas_coretype_hint). */
#include <cblas.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "attn.h"
#include "attn_coretype.h"

/* Answers must match the float64 reference to 1e-4 * (1 + |ref|), the
 * contract's tolerance. */
#define BENCH_TOL 1e-4

/* Timing stops adding repetitions once the samples add up to this. */
#define BENCH_CAP_S 10.0

static double bench_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* splitmix64: a seeded, portable generator so every run times the same data. */
static uint64_t bench_rng_next(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* Fills v[0..count) with uniform values in [-amp, amp). */
static void bench_fill(float *v, size_t count, float amp, uint64_t seed)
{
    uint64_t s = seed;
    for (size_t i = 0; i < count; i++) {
        double u = (double)(bench_rng_next(&s) >> 11) * (1.0 / 9007199254740992.0);
        v[i] = (float)((2.0 * u - 1.0) * amp);
    }
}

static int bench_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Sorts v and returns its median. */
static double bench_median(double *v, int count)
{
    qsort(v, (size_t)count, sizeof v[0], bench_cmp_double);
    return count % 2 ? v[count / 2] : 0.5 * (v[count / 2 - 1] + v[count / 2]);
}

static long bench_maxrss_kib(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0)
        return -1;
    return ru.ru_maxrss;
}

/* Bytes the kernel says are available now; 0 when unknown. */
static uint64_t bench_mem_available(void)
{
    FILE *f = fopen("/proc/meminfo", "r");
    char line[256];
    unsigned long long kib = 0;
    if (!f)
        return 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %llu kB", &kib) == 1)
            break;
    fclose(f);
    return (uint64_t)kib * 1024u;
}

/* -- a tiny executor: T-1 pool threads plus the calling thread ------------- */

typedef struct bench_pool bench_pool;

typedef struct bench_worker_arg {
    bench_pool *pool;
    size_t worker;
} bench_worker_arg;

struct bench_pool {
    pthread_mutex_t lock;
    pthread_cond_t wake;
    pthread_cond_t done;
    pthread_t *threads;
    bench_worker_arg *args; /* one per pool thread, indexed by worker */
    size_t nthreads;        /* pool threads; workers = nthreads + 1 */
    unsigned long generation;
    int stop;
    size_t active; /* pool threads still draining the current job */
    void (*fn)(void *arg, size_t i, size_t worker);
    void *arg;
    size_t count;
    atomic_size_t next;
};

/* Takes task indices until none are left; each index runs exactly once. */
static void bench_pool_drain(bench_pool *pool, size_t worker)
{
    for (;;) {
        size_t i = atomic_fetch_add(&pool->next, 1);
        if (i >= pool->count)
            return;
        pool->fn(pool->arg, i, worker);
    }
}

static void *bench_pool_main(void *p)
{
    bench_worker_arg *wa = p;
    bench_pool *pool = wa->pool;
    unsigned long seen = 0;
    for (;;) {
        pthread_mutex_lock(&pool->lock);
        while (pool->generation == seen && !pool->stop)
            pthread_cond_wait(&pool->wake, &pool->lock);
        if (pool->stop) {
            pthread_mutex_unlock(&pool->lock);
            return NULL;
        }
        seen = pool->generation;
        pthread_mutex_unlock(&pool->lock);
        bench_pool_drain(pool, wa->worker);
        pthread_mutex_lock(&pool->lock);
        if (--pool->active == 0)
            pthread_cond_signal(&pool->done);
        pthread_mutex_unlock(&pool->lock);
    }
}

static void bench_pool_run(void *ctx, size_t count,
                           void (*fn)(void *arg, size_t i, size_t worker),
                           void *arg)
{
    bench_pool *pool = ctx;
    pthread_mutex_lock(&pool->lock);
    pool->fn = fn;
    pool->arg = arg;
    pool->count = count;
    atomic_store(&pool->next, 0);
    pool->active = pool->nthreads;
    pool->generation++;
    pthread_cond_broadcast(&pool->wake);
    pthread_mutex_unlock(&pool->lock);
    /* The caller is worker 0, so T workers need only T-1 threads. */
    bench_pool_drain(pool, 0);
    pthread_mutex_lock(&pool->lock);
    while (pool->active > 0)
        pthread_cond_wait(&pool->done, &pool->lock);
    pthread_mutex_unlock(&pool->lock);
}

/* Starts workers-1 threads. Returns 0, or -1 (the threads started so far
 * keep running until bench_pool_free). */
static int bench_pool_init(bench_pool *pool, size_t workers)
{
    memset(pool, 0, sizeof *pool);
    pthread_mutex_init(&pool->lock, NULL);
    pthread_cond_init(&pool->wake, NULL);
    pthread_cond_init(&pool->done, NULL);
    atomic_init(&pool->next, 0);
    pool->threads = calloc(workers, sizeof *pool->threads);
    pool->args = calloc(workers, sizeof *pool->args);
    if (!pool->threads || !pool->args)
        return -1;
    for (size_t w = 1; w < workers; w++) {
        pool->args[w].pool = pool;
        pool->args[w].worker = w;
        if (pthread_create(&pool->threads[w - 1], NULL, bench_pool_main,
                           &pool->args[w]) != 0)
            return -1;
        pool->nthreads++;
    }
    return 0;
}

static void bench_pool_free(bench_pool *pool)
{
    pthread_mutex_lock(&pool->lock);
    pool->stop = 1;
    pthread_cond_broadcast(&pool->wake);
    pthread_mutex_unlock(&pool->lock);
    for (size_t t = 0; t < pool->nthreads; t++)
        pthread_join(pool->threads[t], NULL);
    free(pool->threads);
    free(pool->args);
}

/* -- the cases ------------------------------------------------------------- */

typedef struct bench_case {
    size_t n, d_model, h;
    attn_weights weights;
    const char *goal; /* NULL, or the goal this row is checked against */
} bench_case;

/* One attention problem with its inputs and outputs allocated. Self-attention
 * with W_O (d_out = d_model), no biases, no mask: the shapes that
 * torch.nn.functional.multi_head_attention_forward computes. */
typedef struct bench_problem {
    attn_params p;
    float *x, *w_q, *w_k, *w_v, *w_o, *out, *wts;
    size_t out_elems, wts_elems;
} bench_problem;

static void bench_problem_free(bench_problem *bp)
{
    free(bp->x);
    free(bp->w_q);
    free(bp->w_k);
    free(bp->w_v);
    free(bp->w_o);
    free(bp->out);
    free(bp->wts);
    memset(bp, 0, sizeof *bp);
}

/* Returns 0, or -1 with a message printed and nothing left allocated. */
static int bench_problem_init(bench_problem *bp, size_t n, size_t d_model,
                              size_t h, attn_weights weights,
                              const attn_executor *exec)
{
    memset(bp, 0, sizeof *bp);
    attn_dims d = {.B = 1, .n = n, .m = n, .d_model = d_model,
                   .d_mem = d_model, .h = h, .g = h, .d_k = d_model / h,
                   .d_v = d_model / h, .d_out = d_model};
    size_t ww = d_model * d_model;
    bp->x = malloc(n * d_model * sizeof(float));
    bp->w_q = malloc(ww * sizeof(float));
    bp->w_k = malloc(ww * sizeof(float));
    bp->w_v = malloc(ww * sizeof(float));
    bp->w_o = malloc(ww * sizeof(float));
    if (!bp->x || !bp->w_q || !bp->w_k || !bp->w_v || !bp->w_o)
        goto nomem;
    /* Weights scaled by 1/sqrt(d_model) keep the scores O(1), like a
     * trained layer's; the seed depends only on the shape. */
    float amp = 1.0f / sqrtf((float)d_model);
    uint64_t seed = (uint64_t)n * 1000003u + d_model * 31u + h;
    bench_fill(bp->x, n * d_model, 1.0f, seed + 1);
    bench_fill(bp->w_q, ww, amp, seed + 2);
    bench_fill(bp->w_k, ww, amp, seed + 3);
    bench_fill(bp->w_v, ww, amp, seed + 4);
    bench_fill(bp->w_o, ww, amp, seed + 5);
    bp->p = (attn_params){.dims = d, .x = bp->x, .w_q = bp->w_q,
                          .w_k = bp->w_k, .w_v = bp->w_v, .w_o = bp->w_o,
                          .mask = ATTN_MASK_NONE, .weights = weights,
                          .executor = exec};
    int rc = attn_output_sizes(&bp->p, &bp->out_elems, &bp->wts_elems);
    if (rc != ATTN_OK) {
        fprintf(stderr, "bench_lib: attn_output_sizes: %s\n",
                attn_strerror(rc));
        bench_problem_free(bp);
        return -1;
    }
    bp->out = malloc(bp->out_elems * sizeof(float));
    if (!bp->out)
        goto nomem;
    if (bp->wts_elems) {
        bp->wts = malloc(bp->wts_elems * sizeof(float));
        if (!bp->wts)
            goto nomem;
    }
    return 0;
nomem:
    fprintf(stderr, "bench_lib: out of memory for n = %zu\n", n);
    bench_problem_free(bp);
    return -1;
}

/* Largest |a - r| / (1 + |r|) over count values. */
static double bench_rel_err(const float *a, const float *r, size_t count,
                            double *max_abs)
{
    double worst = 0.0, worst_abs = 0.0;
    for (size_t i = 0; i < count; i++) {
        double e = fabs((double)a[i] - (double)r[i]);
        double rel = e / (1.0 + fabs((double)r[i]));
        if (!(rel <= worst)) /* also catches NaN */
            worst = isnan(rel) ? INFINITY : rel;
        if (e > worst_abs)
            worst_abs = e;
    }
    *max_abs = worst_abs;
    return worst;
}

/* Checks attn_forward against attn_forward_ref on a small problem with the
 * same configuration. Returns 0 when within BENCH_TOL, -1 otherwise. */
static int bench_check(const char *config, size_t n, size_t d_model, size_t h,
                       attn_weights weights, const attn_executor *exec)
{
    bench_problem fast, ref;
    if (bench_problem_init(&fast, n, d_model, h, weights, exec) != 0)
        return -1;
    if (bench_problem_init(&ref, n, d_model, h, weights, NULL) != 0) {
        bench_problem_free(&fast);
        return -1;
    }
    int rc = attn_forward(&fast.p, fast.out, fast.wts);
    int rc_ref = attn_forward_ref(&ref.p, ref.out, ref.wts);
    int status = -1;
    if (rc != ATTN_OK || rc_ref != ATTN_OK) {
        printf("  check %-4s n=%-5zu d_model=%-4zu h=%-2zu %-8s FAILED: "
               "attn_forward %s, attn_forward_ref %s\n",
               config, n, d_model, h,
               weights == ATTN_WEIGHTS_NONE ? "outputs" : "per_head",
               attn_strerror(rc), attn_strerror(rc_ref));
    } else {
        double abs_o, abs_w = 0.0;
        double rel_o = bench_rel_err(fast.out, ref.out, fast.out_elems, &abs_o);
        double rel_w = fast.wts_elems
                           ? bench_rel_err(fast.wts, ref.wts, fast.wts_elems,
                                           &abs_w)
                           : 0.0;
        status = (rel_o <= BENCH_TOL && rel_w <= BENCH_TOL) ? 0 : -1;
        printf("  check %-4s n=%-5zu d_model=%-4zu h=%-2zu %-8s max|err| "
               "output %.2e weights %.2e  max err/(1+|ref|) %.2e  %s\n",
               config, n, d_model, h,
               weights == ATTN_WEIGHTS_NONE ? "outputs" : "per_head", abs_o,
               abs_w, rel_o > rel_w ? rel_o : rel_w,
               status == 0 ? "ok" : "MISMATCH");
    }
    bench_problem_free(&fast);
    bench_problem_free(&ref);
    return status;
}

/* -- sgemm peak ------------------------------------------------------------ */

/* One C = A B at size s^3 (all s x s), in GFLOP/s, with OpenBLAS's current
 * thread count. */
static double bench_sgemm_once(int s, const float *a, const float *b,
                               float *c)
{
    double t0 = bench_now();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, s, s, s, 1.0f, a,
                s, b, s, 0.0f, c, s);
    return 2.0 * (double)s * s * s / (bench_now() - t0) * 1e-9;
}

/* Best of reps C = A B at size s^3, in GFLOP/s, with OpenBLAS's current
 * thread count. Returns 0.0 when out of memory. */
static double bench_sgemm_peak(int s, int reps)
{
    size_t cnt = (size_t)s * (size_t)s;
    float *a = malloc(cnt * sizeof(float)), *b = malloc(cnt * sizeof(float)),
          *c = malloc(cnt * sizeof(float));
    double best = 0.0;
    if (a && b && c) {
        bench_fill(a, cnt, 1.0f, 11);
        bench_fill(b, cnt, 1.0f, 12);
        memset(c, 0, cnt * sizeof(float));
        /* One untimed call: OpenBLAS allocates its buffers and wakes its
         * threads on first use. */
        bench_sgemm_once(s, a, b, c);
        for (int r = 0; r < reps; r++) {
            double gf = bench_sgemm_once(s, a, b, c);
            if (gf > best)
                best = gf;
        }
    }
    free(a);
    free(b);
    free(c);
    return best;
}

/* -- peak RSS of outputs-only n = 8192 in a fresh child --------------------- */

/* getrusage's peak RSS only grows, so the measurement runs in a child forked
 * before this process allocates anything large. Returns the child's peak RSS
 * in KiB, or -1 when the child failed. */
static long bench_rss_child(size_t n, int threads, int use_exec)
{
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        bench_pool pool;
        attn_executor ex;
        const attn_executor *exec = NULL;
        attn_blas_set_threads(use_exec ? 1 : threads);
        if (use_exec) {
            if (bench_pool_init(&pool, (size_t)threads) != 0)
                _exit(2);
            ex = (attn_executor){.run = bench_pool_run,
                                 .workers = (size_t)threads, .ctx = &pool};
            exec = &ex;
        }
        bench_problem bp;
        if (bench_problem_init(&bp, n, 256, 8, ATTN_WEIGHTS_NONE, exec) != 0)
            _exit(3);
        int rc = attn_forward(&bp.p, bp.out, NULL);
        _exit(rc == ATTN_OK ? 0 : 4);
    }
    int st = 0;
    struct rusage ru;
    if (wait4(pid, &st, 0, &ru) != pid || !WIFEXITED(st) ||
        WEXITSTATUS(st) != 0)
        return -1;
    return ru.ru_maxrss;
}

/* -- timing ---------------------------------------------------------------- */

typedef struct bench_opts {
    int quick;
    int threads;
    const char *csv;
} bench_opts;

typedef struct bench_result {
    int ran;
    int reps;
    double median_s, min_s, gflops;
    uint64_t flops;
} bench_result;

/* Times attn_forward on one case: one warm-up, then repetitions until both
 * a minimum count and a minimum total time are reached (capped at
 * BENCH_CAP_S); reports the median. Returns 0, or -1 when a call failed. */
static int bench_time(const bench_opts *o, const bench_case *c,
                      const attn_executor *exec, bench_result *res)
{
    bench_problem bp;
    memset(res, 0, sizeof *res);
    if (bench_problem_init(&bp, c->n, c->d_model, c->h, c->weights, exec) != 0)
        return -1;
    if (attn_flops(&bp.p, &res->flops) != ATTN_OK) {
        bench_problem_free(&bp);
        return -1;
    }
    int min_reps = o->quick ? 1 : 3, max_reps = o->quick ? 3 : 15;
    double min_total = o->quick ? 0.2 : 1.0;
    double samples[15];
    double total = 0.0;
    int reps = 0;
    double t_first = bench_now();
    int rc = attn_forward(&bp.p, bp.out, bp.wts);
    t_first = bench_now() - t_first;
    /* A call of seconds is its own warm-up: first-call costs (page faults,
     * OpenBLAS buffers) are lost in it, so it counts as a sample. Beyond
     * BENCH_CAP_S of samples, one more repetition says little more. */
    if (t_first >= 2.0) {
        samples[reps] = t_first;
        total += samples[reps++];
    }
    while (rc == ATTN_OK && reps < max_reps &&
           (reps < min_reps || total < min_total) &&
           !(reps >= 1 && total >= BENCH_CAP_S)) {
        double t0 = bench_now();
        rc = attn_forward(&bp.p, bp.out, bp.wts);
        samples[reps] = bench_now() - t0;
        total += samples[reps++];
    }
    bench_problem_free(&bp);
    if (rc != ATTN_OK) {
        fprintf(stderr, "bench_lib: attn_forward n = %zu: %s\n", c->n,
                attn_strerror(rc));
        return -1;
    }
    res->ran = 1;
    res->reps = reps;
    res->median_s = bench_median(samples, reps);
    res->min_s = samples[0];
    res->gflops = (double)res->flops / res->median_s * 1e-9;
    return 0;
}

/* -- sliding-window attention ---------------------------------------------- */

/* The median of reps calls of p (one warm-up first), in seconds; a
 * negative value when a call failed. */
static double bench_median_call(bench_problem *bp, int reps)
{
    double samples[15];
    int rc = attn_forward(&bp->p, bp->out, bp->wts);

    if (reps > 15)
        reps = 15;
    for (int r = 0; rc == ATTN_OK && r < reps; r++) {
        double t0 = bench_now();
        rc = attn_forward(&bp->p, bp->out, bp->wts);
        samples[r] = bench_now() - t0;
    }
    if (rc != ATTN_OK) {
        fprintf(stderr, "bench_lib: window case: %s\n", attn_strerror(rc));
        return -1.0;
    }
    return bench_median(samples, reps);
}

/* One size of the window case: the projections alone (no attention work
 * left: a window of 0 with no causal triangle is not what is timed; the
 * projections are timed as the same call with d_k-wide attention over a
 * one-key window, which costs O(n)), the call without a window and with
 * left = 255. Times in seconds through *t_none, *t_win, *t_proj. */
static int bench_window_size(const bench_opts *o, const attn_executor *ex,
                             size_t n, double *t_none, double *t_win,
                             double *t_proj)
{
    bench_problem bp;
    int reps = o->quick ? 3 : 7;
    uint64_t cost_none, cost_win;

    if (bench_problem_init(&bp, n, 256, 8, ATTN_WEIGHTS_NONE, ex) != 0)
        return -1;
    bp.p.mask = ATTN_MASK_CAUSAL;
    attn_cost(&bp.p, &cost_none);
    *t_none = bench_median_call(&bp, reps);
    bp.p.window.on = 1;
    bp.p.window.left = 255;
    bp.p.window.right = ATTN_UNBOUNDED;
    attn_cost(&bp.p, &cost_win);
    *t_win = bench_median_call(&bp, reps);
    bp.p.window.left = 0;
    *t_proj = bench_median_call(&bp, reps);
    bench_problem_free(&bp);
    printf("  n = %5zu: no window %8.2f ms, window 255 %7.2f ms, window 0 "
           "(projections and O(n) attention) %6.2f ms; attn_cost %.3g vs "
           "%.3g\n",
           n, *t_none * 1e3, *t_win * 1e3, *t_proj * 1e3, (double)cost_none,
           (double)cost_win);
    return *t_none < 0 || *t_win < 0 || *t_proj < 0 ? -1 : 0;
}

static int bench_window(const bench_opts *o)
{
    bench_pool pool;
    double n8[3], n16[3];
    int rc;

    attn_blas_set_threads(1);
    if (bench_pool_init(&pool, (size_t)o->threads) != 0) {
        fprintf(stderr, "bench_lib: cannot start the executor\n");
        bench_pool_free(&pool);
        return -1;
    }
    attn_executor ex = {.run = bench_pool_run, .workers = (size_t)o->threads,
                        .ctx = &pool};
    printf("sliding window: d_model 256, 8 heads (d_k 32), causal, outputs "
           "only, %d workers, OpenBLAS 1 thread; medians\n",
           o->threads);
    rc = bench_window_size(o, &ex, 8192, &n8[0], &n8[1], &n8[2]);
    if (rc == 0)
        rc = bench_window_size(o, &ex, 16384, &n16[0], &n16[1], &n16[2]);
    bench_pool_free(&pool);
    if (rc != 0)
        return -1;
    printf("  n = 8192: no window / window 255 = %.2fx (whole call), "
           "%.2fx (attention: the call minus the window-0 call)\n",
           n8[0] / n8[1], (n8[0] - n8[2]) / (n8[1] - n8[2]));
    printf("  window 255: n = 16384 / n = 8192 = %.2fx (whole call)\n",
           n16[1] / n8[1]);
    return 0;
}

/* -- the goal case paired with the peak ------------------------------------- */

#define BENCH_PAIRS 15

/* This machine's sgemm peak drifts by 2x within an hour under other load,
 * so a fraction of a peak read minutes earlier mixes that drift into the
 * figure. Here each attention call is paired with one cblas_sgemm 2048^3
 * run just before it (OpenBLAS on `threads` threads for the peak, as for
 * the start-of-run peak; the attention call in its own configuration), and
 * the two are compared on the same statistic over the same minutes. */
typedef struct bench_paired {
    int pairs;
    double att_median_s, att_min_s;     /* the attention call */
    double peak_median_gf, peak_max_gf; /* the sgemm beside it */
    uint64_t flops;
} bench_paired;

static void bench_sleep(double seconds)
{
    struct timespec ts = {(time_t)seconds,
                          (long)((seconds - (double)(time_t)seconds) * 1e9)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

static int bench_pair(const bench_opts *o, const bench_case *c,
                      const attn_executor *exec, bench_paired *res)
{
    const int s = 2048;
    size_t cnt = (size_t)s * (size_t)s;
    float *a = malloc(cnt * sizeof(float)), *b = malloc(cnt * sizeof(float)),
          *g = malloc(cnt * sizeof(float));
    double att[BENCH_PAIRS], peak[BENCH_PAIRS];
    int pairs = o->quick ? 3 : BENCH_PAIRS, rc = ATTN_ENOMEM;
    bench_problem bp;

    memset(res, 0, sizeof *res);
    if (!a || !b || !g ||
        bench_problem_init(&bp, c->n, c->d_model, c->h, c->weights, exec)) {
        free(a);
        free(b);
        free(g);
        return -1;
    }
    bench_fill(a, cnt, 1.0f, 11);
    bench_fill(b, cnt, 1.0f, 12);
    attn_flops(&bp.p, &res->flops);
    for (int r = -1; r < pairs; r++) { /* r = -1: both warm up */
        double t0, gf;
        attn_blas_set_threads(o->threads);
        /* the same pause before each kind of call (see below), and each
         * timed call follows an untimed one, as in the unpaired runs:
         * OpenBLAS's threads are awake and the operands in cache */
        bench_sleep(0.25);
        bench_sgemm_once(s, a, b, g);
        gf = bench_sgemm_once(s, a, b, g);
        if (r >= 0)
            peak[r] = gf;
        /* OpenBLAS's threads spin for a while after a call before they
         * sleep (its THREAD_TIMEOUT, about 2^28 cycles): left spinning,
         * they would take cores from the attention calls that follow. */
        bench_sleep(0.25);
        attn_blas_set_threads(exec ? 1 : o->threads);
        rc = attn_forward(&bp.p, bp.out, bp.wts);
        if (rc != ATTN_OK)
            break;
        t0 = bench_now();
        rc = attn_forward(&bp.p, bp.out, bp.wts);
        t0 = bench_now() - t0;
        if (rc != ATTN_OK)
            break;
        if (r >= 0)
            att[r] = t0;
    }
    bench_problem_free(&bp);
    free(a);
    free(b);
    free(g);
    if (rc != ATTN_OK)
        return -1;
    res->pairs = pairs;
    res->att_median_s = bench_median(att, pairs);
    res->att_min_s = att[0];
    res->peak_median_gf = bench_median(peak, pairs);
    res->peak_max_gf = peak[pairs - 1];
    return 0;
}

/* Least-squares slope of log t against log n. */
static double bench_slope(const double *n, const double *t, int count)
{
    double sx = 0, sy = 0, sxx = 0, sxy = 0;
    for (int i = 0; i < count; i++) {
        double x = log(n[i]), y = log(t[i]);
        sx += x;
        sy += y;
        sxx += x * x;
        sxy += x * y;
    }
    double den = count * sxx - sx * sx;
    return count >= 2 && den != 0.0 ? (count * sxy - sx * sy) / den : NAN;
}

static const size_t bench_scaling_n[] = {128, 512, 2048, 8192};
#define BENCH_NSCALE (sizeof bench_scaling_n / sizeof bench_scaling_n[0])

static const char *bench_mode_name(attn_weights w)
{
    return w == ATTN_WEIGHTS_NONE ? "outputs" : "per_head";
}

/* Runs the checks and the timed cases in one configuration; appends CSV rows.
 * Returns 0, or -1 on a wrong answer or a failed call. */
static int bench_config(const bench_opts *o, const char *config,
                        const attn_executor *exec, double peak, FILE *csv)
{
    int threads_now = attn_blas_set_threads(exec ? 1 : o->threads);
    printf("\n== config %s: OpenBLAS threads %d, %s\n", config, threads_now,
           exec ? "library tiles on a pthread executor"
                : "no executor (tiles on the calling thread)");
    if (exec)
        printf("   (executor workers: %zu)\n", exec->workers);

    /* Same configuration, smaller n: the reference is O(n^2 d) in float64. */
    int bad = 0;
    bad |= bench_check(config, 128, 256, 8, ATTN_WEIGHTS_PER_HEAD, exec);
    bad |= bench_check(config, 128, 256, 8, ATTN_WEIGHTS_NONE, exec);
    bad |= bench_check(config, 300, 256, 8, ATTN_WEIGHTS_NONE, exec);
    bad |= bench_check(config, 64, 768, 12, ATTN_WEIGHTS_PER_HEAD, exec);
    if (bad) {
        printf("  answers do not match the reference: not timing %s\n",
               config);
        return -1;
    }

    printf("  %-8s %6s %7s %3s %5s %11s %10s %9s %8s\n", "mode", "n",
           "d_model", "h", "reps", "median ms", "GFLOP/s", "of peak", "goal");
    uint64_t avail = bench_mem_available();
    for (int wi = 0; wi < 2; wi++) {
        attn_weights w = wi == 0 ? ATTN_WEIGHTS_PER_HEAD : ATTN_WEIGHTS_NONE;
        double ns[BENCH_NSCALE], ts[BENCH_NSCALE];
        int cnt = 0;
        for (size_t k = 0; k < BENCH_NSCALE; k++) {
            size_t n = bench_scaling_n[k];
            bench_case c = {n, 256, 8, w,
                            w == ATTN_WEIGHTS_NONE && n == 2048
                                ? ">=50% of sgemm peak"
                                : NULL};
            /* The per-head map alone is h n^2 floats (2 GiB at n = 8192);
             * run it only when it leaves most of the machine free. */
            double map_bytes = w == ATTN_WEIGHTS_PER_HEAD
                                   ? 8.0 * (double)n * (double)n * 4.0
                                   : 0.0;
            if (o->quick && n > 2048) {
                printf("  %-8s %6zu %7d %3d  skipped: quick run\n",
                       bench_mode_name(w), n, 256, 8);
                fprintf(csv, "%s,%d,%s,%zu,256,8,0,,,,,,skipped\n", config,
                        o->threads, bench_mode_name(w), n);
                continue;
            }
            if (map_bytes > 0 && (avail == 0 || 4.0 * map_bytes > (double)avail)) {
                printf("  %-8s %6zu %7d %3d  skipped: per-head map %.0f MiB, "
                       "MemAvailable %.0f MiB\n",
                       bench_mode_name(w), n, 256, 8, map_bytes / 1048576.0,
                       (double)avail / 1048576.0);
                fprintf(csv, "%s,%d,%s,%zu,256,8,0,,,,,,skipped\n", config,
                        o->threads, bench_mode_name(w), n);
                continue;
            }
            bench_result r;
            if (bench_time(o, &c, exec, &r) != 0)
                return -1;
            double frac = peak > 0 ? r.gflops / peak : NAN;
            const char *verdict = "";
            if (c.goal)
                verdict = frac >= 0.5 ? "MET" : "NOT MET";
            printf("  %-8s %6zu %7d %3d %5d %11.3f %10.1f %8.1f%% %8s%s%s\n",
                   bench_mode_name(w), n, 256, 8, r.reps, r.median_s * 1e3,
                   r.gflops, 100.0 * frac, verdict, c.goal ? "  <- goal " : "",
                   c.goal ? c.goal : "");
            fprintf(csv, "%s,%d,%s,%zu,256,8,%d,%.6f,%.6f,%llu,%.3f,%.4f,%s\n",
                    config, o->threads, bench_mode_name(w), n, r.reps,
                    r.median_s * 1e3, r.min_s * 1e3,
                    (unsigned long long)r.flops, r.gflops, frac,
                    c.goal ? (frac >= 0.5 ? "goal_met" : "goal_not_met")
                           : "ok");
            if (c.goal && exec) {
                bench_paired pr;
                if (bench_pair(o, &c, exec, &pr) != 0)
                    return -1;
                double gf_med = (double)pr.flops / pr.att_median_s * 1e-9;
                double gf_best = (double)pr.flops / pr.att_min_s * 1e-9;
                double f_med = gf_med / pr.peak_median_gf;
                double f_best = gf_best / pr.peak_max_gf;
                printf("  %-8s %6zu %7d %3d  paired with cblas_sgemm 2048^3, "
                       "%d alternations: median %.3f ms = %.1f GFLOP/s "
                       "against the sgemm's median %.1f: %.1f%% %s; best "
                       "%.3f ms = %.1f against its best %.1f: %.1f%%\n",
                       bench_mode_name(w), n, 256, 8, pr.pairs,
                       pr.att_median_s * 1e3, gf_med, pr.peak_median_gf,
                       100.0 * f_med, f_med >= 0.5 ? "MET" : "NOT MET",
                       pr.att_min_s * 1e3, gf_best, pr.peak_max_gf,
                       100.0 * f_best);
                fprintf(csv, "# paired_config=%s paired_n=%zu paired_pairs=%d "
                             "paired_att_median_ms=%.6f paired_att_min_ms=%.6f "
                             "paired_peak_median_gflops=%.3f "
                             "paired_peak_max_gflops=%.3f "
                             "paired_frac_median=%.4f paired_frac_best=%.4f\n",
                        config, n, pr.pairs, pr.att_median_s * 1e3,
                        pr.att_min_s * 1e3, pr.peak_median_gf,
                        pr.peak_max_gf, f_med, f_best);
            }
            ns[cnt] = (double)n;
            ts[cnt++] = r.median_s;
        }
        printf("  %-8s fitted log-log slope of time against n (%d points): "
               "%.2f\n",
               bench_mode_name(w), cnt, bench_slope(ns, ts, cnt));
    }

    /* The shape compared with PyTorch for the 1.5x goal. */
    bench_case g = {512, 768, 12, ATTN_WEIGHTS_PER_HEAD,
                    ">=1.5x faster than torch (see the driver's table)"};
    for (int wi = 0; wi < 2; wi++) {
        g.weights = wi == 0 ? ATTN_WEIGHTS_PER_HEAD : ATTN_WEIGHTS_NONE;
        bench_result r;
        if (bench_time(o, &g, exec, &r) != 0)
            return -1;
        double frac = peak > 0 ? r.gflops / peak : NAN;
        printf("  %-8s %6d %7d %3d %5d %11.3f %10.1f %8.1f%%\n",
               bench_mode_name(g.weights), 512, 768, 12, r.reps,
               r.median_s * 1e3, r.gflops, 100.0 * frac);
        fprintf(csv, "%s,%d,%s,512,768,12,%d,%.6f,%.6f,%llu,%.3f,%.4f,%s\n",
                config, o->threads, bench_mode_name(g.weights), r.reps,
                r.median_s * 1e3, r.min_s * 1e3, (unsigned long long)r.flops,
                r.gflops, frac, "ok");
    }
    return 0;
}

static void bench_usage(void)
{
    fprintf(stderr, "usage: bench_lib [--quick] [--threads T] [--csv PATH] "
                    "[--peak-only] [--coretype-hint] [--window]\n");
}

int main(int argc, char **argv)
{
    bench_opts o = {.quick = 0, .threads = 0, .csv = NULL};
    int peak_only = 0, window = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--quick") == 0) {
            o.quick = 1;
        } else if (strcmp(argv[i], "--window") == 0) {
            window = 1;
        } else if (strcmp(argv[i], "--peak-only") == 0) {
            peak_only = 1;
        } else if (strcmp(argv[i], "--coretype-hint") == 0) {
            /* For the drivers: the OPENBLAS_CORETYPE to give every program
             * they start (this one, torch, the peer), empty when OpenBLAS's
             * own choice stands. */
            const char *hint = attn_blas_coretype_hint();
            printf("%s\n", hint ? hint : "");
            return 0;
        } else if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc) {
            o.threads = atoi(argv[++i]);
        } else if (strcmp(argv[i], "--csv") == 0 && i + 1 < argc) {
            o.csv = argv[++i];
        } else {
            bench_usage();
            return 2;
        }
    }
    if (o.threads <= 0) {
        long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        o.threads = cpus > 0 ? (int)cpus : 1;
    }
    const char *env = getenv("OPENBLAS_NUM_THREADS");
    int peak_reps = o.quick ? 2 : 5;

    if (window)
        return bench_window(&o) == 0 ? 0 : 1;
    if (peak_only) {
        attn_blas_set_threads(o.threads);
        printf("%.3f\n", bench_sgemm_peak(2048, peak_reps));
        return 0;
    }

    const char *core = getenv("OPENBLAS_CORETYPE");
    printf("bench_lib: threads T = %d (OPENBLAS_NUM_THREADS=%s, "
           "OPENBLAS_CORETYPE=%s), %s run\n",
           o.threads, env ? env : "unset", core ? core : "unset",
           o.quick ? "quick" : "full");
    printf("OpenBLAS: %s\n", attn_blas_config());

    /* Peak RSS first, while this process is still small (see
     * bench_rss_child). */
    long base = bench_maxrss_kib();
    long rss_blas = bench_rss_child(8192, o.threads, 0);
    long rss_exec = bench_rss_child(8192, o.threads, 1);
    printf("peak RSS, outputs-only n=8192 d_model=256 h=8 (fresh child; "
           "parent was %.1f MiB at fork): blas %.1f MiB, exec %.1f MiB "
           "(the goal: < 1024 MiB): %s\n",
           base / 1024.0, rss_blas / 1024.0, rss_exec / 1024.0,
           rss_blas > 0 && rss_exec > 0 && rss_blas < 1024 * 1024 &&
                   rss_exec < 1024 * 1024
               ? "MET"
               : "NOT MET");

    attn_blas_set_threads(o.threads);
    double peak = bench_sgemm_peak(2048, peak_reps);
    attn_blas_set_threads(1);
    double peak1 = bench_sgemm_peak(2048, peak_reps);
    printf("cblas_sgemm 2048^3, best of %d: %.1f GFLOP/s with %d threads "
           "(the peak used below); %.1f GFLOP/s with 1 thread\n",
           peak_reps, peak, o.threads, peak1);

    FILE *csv = fopen(o.csv ? o.csv : "/dev/null", "w");
    if (!csv) {
        fprintf(stderr, "bench_lib: %s: %s\n", o.csv, strerror(errno));
        return 1;
    }
    fprintf(csv, "# sgemm_peak_gflops=%.3f threads=%d sgemm_1thread_gflops="
                 "%.3f rss_outputs_8192_kib=%ld,%ld\n",
            peak, o.threads, peak1, rss_blas, rss_exec);
    fprintf(csv, "config,threads,mode,n,d_model,heads,reps,median_ms,min_ms,"
                 "flops,gflops,frac_peak,status\n");

    int status = bench_config(&o, "blas", NULL, peak, csv);
    bench_pool pool;
    if (status == 0) {
        if (bench_pool_init(&pool, (size_t)o.threads) != 0) {
            fprintf(stderr, "bench_lib: cannot start the executor\n");
            bench_pool_free(&pool);
            status = -1;
        } else {
            attn_executor ex = {.run = bench_pool_run,
                                .workers = (size_t)o.threads, .ctx = &pool};
            status = bench_config(&o, "exec", &ex, peak, csv);
            bench_pool_free(&pool);
        }
    }
    /* Other work on a shared machine lowers a single peak reading; a second
     * one after the runs shows how much the machine moved meanwhile. */
    attn_blas_set_threads(o.threads);
    double peak_end = bench_sgemm_peak(2048, peak_reps);
    printf("\ncblas_sgemm 2048^3 again after the runs: %.1f GFLOP/s with %d "
           "threads (start: %.1f)\n",
           peak_end, o.threads, peak);
    fprintf(csv, "# sgemm_peak_end_gflops=%.3f\n", peak_end);
    fclose(csv);
    return status == 0 ? 0 : 1;
}
