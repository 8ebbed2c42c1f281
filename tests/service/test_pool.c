/* test_pool.c: the compute pool runs every task exactly once, with worker
 * indices that concurrent tasks never share, under concurrent runs. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "pool.h"
#include "test_service.h"

#define TASKS 2000

typedef struct tally {
    atomic_int hits[TASKS];
    atomic_int busy[8]; /* tasks running on each worker index right now */
    atomic_int clash;   /* a worker index used by two tasks at once */
    atomic_int bad_worker;
    size_t workers;
} tally;

static void count_task(void *arg, size_t i, size_t worker)
{
    tally *t = arg;
    if (worker >= t->workers) {
        atomic_store(&t->bad_worker, 1);
        return;
    }
    if (atomic_fetch_add(&t->busy[worker], 1) != 0)
        atomic_store(&t->clash, 1);
    atomic_fetch_add(&t->hits[i], 1);
    atomic_fetch_sub(&t->busy[worker], 1);
}

typedef struct runner {
    const attn_executor *exec;
    tally *t;
} runner;

static void *run_one(void *arg)
{
    runner *r = arg;
    r->exec->run(r->exec->ctx, TASKS, count_task, r->t);
    return NULL;
}

START_TEST(test_pool_each_task_once_concurrent_runs)
{
    pool *p;
    ck_assert_int_eq(pool_new(3, &p), 0);
    const attn_executor *e = pool_executor(p);
    ck_assert_uint_eq(e->workers, 3);
    ck_assert_uint_eq(pool_workers(p), 3);
    enum { RUNS = 4 };
    tally *t = calloc(RUNS, sizeof *t);
    runner r[RUNS];
    pthread_t th[RUNS];
    for (int k = 0; k < RUNS; k++) {
        t[k].workers = 3;
        r[k] = (runner){e, &t[k]};
        pthread_create(&th[k], NULL, run_one, &r[k]);
    }
    for (int k = 0; k < RUNS; k++)
        pthread_join(th[k], NULL);
    for (int k = 0; k < RUNS; k++) {
        for (size_t i = 0; i < TASKS; i++)
            ck_assert_int_eq(atomic_load(&t[k].hits[i]), 1);
        ck_assert_int_eq(atomic_load(&t[k].clash), 0);
        ck_assert_int_eq(atomic_load(&t[k].bad_worker), 0);
    }
    /* Empty runs return at once. */
    e->run(e->ctx, 0, count_task, &t[0]);
    free(t);
    pool_free(p);
    pool_free(NULL);
}
END_TEST

static void nested_task(void *arg, size_t i, size_t worker)
{
    (void)i;
    (void)worker;
    runner *r = arg;
    r->exec->run(r->exec->ctx, 10, count_task, r->t);
}

START_TEST(test_pool_nested_run_does_not_deadlock)
{
    pool *p;
    ck_assert_int_eq(pool_new(2, &p), 0);
    tally *t = calloc(1, sizeof *t);
    t->workers = 2;
    runner r = {pool_executor(p), t};
    r.exec->run(r.exec->ctx, 4, nested_task, &r);
    for (size_t i = 0; i < 10; i++)
        ck_assert_int_eq(atomic_load(&t->hits[i]), 4);
    free(t);
    pool_free(p);
}
END_TEST

/* Order of execution on a one-worker pool. */
typedef struct order {
    atomic_int gate;     /* the big run's first task waits for it */
    atomic_int big_started; /* the big run's first task is running */
    atomic_int big_done; /* big tasks finished */
    atomic_int small_at; /* big tasks finished when the small one ran */
} order;

static void big_task(void *arg, size_t i, size_t worker)
{
    (void)worker;
    order *o = arg;
    if (i == 0) {
        atomic_store(&o->big_started, 1);
        while (!atomic_load(&o->gate))
            ;
    }
    atomic_fetch_add(&o->big_done, 1);
}

static void small_task(void *arg, size_t i, size_t worker)
{
    (void)i;
    (void)worker;
    order *o = arg;
    atomic_store(&o->small_at, atomic_load(&o->big_done));
}

typedef struct order_run {
    pool *p;
    order *o;
    int big;
} order_run;

static void *order_thread(void *arg)
{
    order_run *r = arg;
    const attn_executor *e = pool_executor(r->p);
    if (r->big)
        e->run(e->ctx, 100, big_task, r->o);
    else
        e->run(e->ctx, 1, small_task, r->o);
    return NULL;
}

START_TEST(test_pool_small_run_not_queued_behind_big)
{
    pool *p;
    ck_assert_int_eq(pool_new(1, &p), 0);
    order o = {0};
    atomic_store(&o.small_at, -1);
    order_run big = {p, &o, 1}, small = {p, &o, 0};
    pthread_t tb, ts;
    pthread_create(&tb, NULL, order_thread, &big);
    /* the only worker is inside the big run's first task before the small
     * run arrives, so the order below is the pool's choice, not a race */
    while (!atomic_load(&o.big_started))
        ;
    pthread_create(&ts, NULL, order_thread, &small);
    while (pool_runs_waiting(p) < 2)
        ;
    atomic_store(&o.gate, 1);
    pthread_join(ts, NULL);
    pthread_join(tb, NULL);
    /* The only worker finished the big run's first task, then took the
     * small run (1 task left) before the big one's 99. */
    ck_assert_int_eq(atomic_load(&o.small_at), 1);
    ck_assert_int_eq(atomic_load(&o.big_done), 100);
    pool_free(p);
}
END_TEST

/* Counts its calls, and those that began with the cancel flag already
 * set; the third call sets the flag. */
typedef struct cancel_probe {
    atomic_size_t calls, late;
    atomic_bool *flag;
} cancel_probe;

static void cancel_task(void *arg, size_t i, size_t worker)
{
    (void)i;
    (void)worker;
    cancel_probe *p = arg;
    if (atomic_load(p->flag))
        atomic_fetch_add(&p->late, 1);
    if (atomic_fetch_add(&p->calls, 1) + 1 == 3)
        atomic_store(p->flag, true);
}

START_TEST(test_pool_cancel_skips_the_remaining_tasks)
{
    pool *p;
    ck_assert_int_eq(pool_new(2, &p), 0);
    const attn_executor *ex = pool_executor(p);
    atomic_bool flag;
    atomic_init(&flag, false);
    cancel_probe probe = {.flag = &flag};
    atomic_init(&probe.calls, 0);
    atomic_init(&probe.late, 0);
    pool_set_cancel(&flag);
    ex->run(ex->ctx, 1000, cancel_task, &probe);
    /* The run returns, and no task began once a worker had seen the flag:
     * with 2 workers, the only one that can begin after it is set is the
     * other worker's, checked just before. How many ran before it was set
     * is the scheduler's: the worker setting it may be preempted between
     * its count and its store while the other goes on. */
    ck_assert_uint_le(atomic_load(&probe.late), 1);
    ck_assert_uint_ge(atomic_load(&probe.calls), 3);
    /* A later run on a cancelled flag runs nothing; without one, all. */
    atomic_store(&probe.calls, 0);
    ex->run(ex->ctx, 100, cancel_task, &probe);
    ck_assert_uint_eq(atomic_load(&probe.calls), 0);
    pool_set_cancel(NULL);
    ex->run(ex->ctx, 100, cancel_task, &probe);
    ck_assert_uint_eq(atomic_load(&probe.calls), 100);
    pool_free(p);
}
END_TEST

START_TEST(test_pool_zero_workers_refused)
{
    pool *p = (pool *)1;
    ck_assert_int_eq(pool_new(0, &p), -1);
    ck_assert_ptr_null(p);
}
END_TEST

Suite *pool_suite(void)
{
    Suite *s = suite_create("pool");
    TCase *t = tcase_create("pool");
    tcase_add_test(t, test_pool_each_task_once_concurrent_runs);
    tcase_add_test(t, test_pool_nested_run_does_not_deadlock);
    tcase_add_test(t, test_pool_small_run_not_queued_behind_big);
    tcase_add_test(t, test_pool_zero_workers_refused);
    tcase_add_test(t, test_pool_cancel_skips_the_remaining_tasks);
    suite_add_tcase(s, t);
    return s;
}
