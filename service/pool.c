/* pool.c: fixed worker threads taking tasks from the active runs, the run
 * with the least work left first. */
#include "pool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>

/* One run() in progress, on its caller's stack. It sits in the pool's ring
 * while some of its tasks are unclaimed. */
typedef struct pool__job {
    void (*fn)(void *arg, size_t i, size_t worker);
    void *arg;
    size_t count, next, done;
    const atomic_bool *cancel; /* set: remaining tasks are skipped */
    pthread_cond_t finished;
    struct pool__job *prev, *succ; /* ring of jobs with unclaimed tasks */
} pool__job;

typedef struct pool__worker {
    pool *owner;
    size_t index;
    pthread_t thread;
} pool__worker;

struct pool {
    pthread_mutex_t mu;
    pthread_cond_t work;
    pool__job *ring; /* a run with unclaimed tasks, entry to the ring; NULL:
                        none */
    bool stopping;
    size_t n_workers, n_started;
    pool__worker *workers;
    attn_executor exec, inline_exec;
};

static _Thread_local bool pool__in_task;
static _Thread_local const atomic_bool *pool__cancel;

void pool_set_cancel(const atomic_bool *flag)
{
    pool__cancel = flag;
}

static bool pool__cancelled(const pool__job *j)
{
    return j->cancel && atomic_load_explicit(j->cancel, memory_order_relaxed);
}

static void pool__unlink(pool *p, pool__job *j)
{
    if (j->succ == j) {
        p->ring = NULL;
    } else {
        j->prev->succ = j->succ;
        j->succ->prev = j->prev;
        if (p->ring == j)
            p->ring = j->succ;
    }
    j->prev = j->succ = NULL;
}

/* The run with the fewest unclaimed tasks: shortest remaining work first,
 * so a small request finishes behind at most the tasks already running,
 * whatever large runs are queued. Runs are few (at most the requests in
 * flight), so a scan per task costs nothing next to the task. */
static pool__job *pool__pick(pool *p)
{
    pool__job *best = p->ring;
    for (pool__job *j = p->ring->succ; j != p->ring; j = j->succ)
        if (j->count - j->next < best->count - best->next)
            best = j;
    return best;
}

static void *pool__main(void *arg)
{
    pool__worker *w = arg;
    pool *p = w->owner;
    pool__in_task = true;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->ring && !p->stopping)
            pthread_cond_wait(&p->work, &p->mu);
        if (!p->ring)
            break; /* stopping and nothing left */
        pool__job *j = pool__pick(p);
        size_t i = j->next++;
        if (j->next == j->count)
            pool__unlink(p, j);
        pthread_mutex_unlock(&p->mu);
        if (!pool__cancelled(j))
            j->fn(j->arg, i, w->index);
        pthread_mutex_lock(&p->mu);
        /* The caller frees j once done == count, and only after taking the
         * mutex, so signalling under it is the last touch of j here. */
        if (++j->done == j->count)
            pthread_cond_signal(&j->finished);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

/* The tasks in order on the calling thread, as worker 0, skipping them
 * once the thread's cancel flag is set: pool_inline_executor's run, and
 * pool__run's from inside a task (a worker sets no cancel flag). */
static void pool__run_inline(void *ctx, size_t count,
                             void (*fn)(void *arg, size_t i, size_t worker),
                             void *arg)
{
    const atomic_bool *cancel = pool__cancel;
    (void)ctx;
    for (size_t i = 0; i < count; i++)
        if (!cancel || !atomic_load_explicit(cancel, memory_order_relaxed))
            fn(arg, i, 0);
}

static void pool__run(void *ctx, size_t count,
                      void (*fn)(void *arg, size_t i, size_t worker), void *arg)
{
    pool *p = ctx;
    if (count == 0)
        return;
    if (pool__in_task) {
        /* Waiting for other workers from inside a task could deadlock. */
        pool__run_inline(ctx, count, fn, arg);
        return;
    }
    pool__job j = {.fn = fn, .arg = arg, .count = count,
                   .cancel = pool__cancel};
    pthread_cond_init(&j.finished, NULL);
    pthread_mutex_lock(&p->mu);
    if (!p->ring) {
        j.prev = j.succ = &j;
        p->ring = &j;
    } else {
        j.succ = p->ring;
        j.prev = p->ring->prev;
        j.prev->succ = &j;
        j.succ->prev = &j;
    }
    if (count == 1)
        pthread_cond_signal(&p->work);
    else
        pthread_cond_broadcast(&p->work);
    while (j.done < j.count)
        pthread_cond_wait(&j.finished, &p->mu);
    pthread_mutex_unlock(&p->mu);
    pthread_cond_destroy(&j.finished);
}

int pool_new(size_t workers, pool **out)
{
    *out = NULL;
    if (workers == 0)
        return -1;
    pool *p = calloc(1, sizeof *p);
    if (!p)
        return -1;
    p->workers = calloc(workers, sizeof *p->workers);
    if (!p->workers || pthread_mutex_init(&p->mu, NULL)) {
        free(p->workers);
        free(p);
        return -1;
    }
    if (pthread_cond_init(&p->work, NULL)) {
        pthread_mutex_destroy(&p->mu);
        free(p->workers);
        free(p);
        return -1;
    }
    p->n_workers = workers;
    for (size_t i = 0; i < workers; i++) {
        p->workers[i].owner = p;
        p->workers[i].index = i;
        if (pthread_create(&p->workers[i].thread, NULL, pool__main,
                           &p->workers[i])) {
            pool_free(p);
            return -1;
        }
        p->n_started++;
    }
    p->exec.run = pool__run;
    p->exec.workers = workers;
    p->exec.ctx = p;
    p->inline_exec.run = pool__run_inline;
    p->inline_exec.workers = workers;
    p->inline_exec.ctx = p;
    *out = p;
    return 0;
}

void pool_free(pool *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->mu);
    p->stopping = true;
    pthread_cond_broadcast(&p->work);
    pthread_mutex_unlock(&p->mu);
    for (size_t i = 0; i < p->n_started; i++)
        pthread_join(p->workers[i].thread, NULL);
    pthread_cond_destroy(&p->work);
    pthread_mutex_destroy(&p->mu);
    free(p->workers);
    free(p);
}

const attn_executor *pool_executor(pool *p)
{
    return &p->exec;
}

const attn_executor *pool_inline_executor(pool *p)
{
    return &p->inline_exec;
}

size_t pool_runs_waiting(pool *p)
{
    size_t n = 0;
    pthread_mutex_lock(&p->mu);
    if (p->ring) {
        n = 1;
        for (pool__job *j = p->ring->succ; j != p->ring; j = j->succ)
            n++;
    }
    pthread_mutex_unlock(&p->mu);
    return n;
}

size_t pool_workers(const pool *p)
{
    return p->n_workers;
}
