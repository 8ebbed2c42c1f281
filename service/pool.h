/* pool.h: the server's one compute pool, lent to the library as its
 * attn_executor, so all requests together never use more than W threads. */
#ifndef ATTND_POOL_H
#define ATTND_POOL_H

#include <stdatomic.h>
#include <stddef.h>

#include "attn.h"

typedef struct pool pool;

/* Starts workers threads (>= 1). Returns 0 and *out, or -1 (nothing leaks)
 * when threads or memory are unavailable. */
int pool_new(size_t workers, pool **out);

/* Stops and joins the workers; no run may be in progress. Accepts NULL. */
void pool_free(pool *p);

/* The executor view of p (borrowed; valid until pool_free). Its run blocks
 * the caller until all count tasks have returned. Concurrent runs (one per
 * request) share the workers task by task, the run with the fewest
 * unclaimed tasks first, so a small request waits only for the tasks
 * already running, never behind a large request's queue.
 * Worker indices are the pool threads' own, in [0, workers). A run called
 * from inside a task executes inline on that worker. */
const attn_executor *pool_executor(pool *p);

/* An executor of as many workers as p whose run executes the tasks on the
 * calling thread, in order (honouring pool_set_cancel), for a request
 * computed off the pool. The library splits a request by its executor's
 * worker count, and with some BLAS kernels (OpenBLAS's Haswell sgemm)
 * the rounding of a product depends on how its rows are split: computed
 * through this executor, a request gets the same bytes as on the pool. */
const attn_executor *pool_inline_executor(pool *p);

/* Cancellation of the calling thread's runs: while *flag is set, each run
 * this thread starts afterwards claims its remaining tasks without running
 * them, so a request whose client has gone stops at the next task (a tile
 * of rows, one head's block) and frees the workers for others. The skipped
 * tasks leave their outputs unwritten: the caller must discard the result.
 * NULL (the default) turns it off. The flag is borrowed; it must outlive
 * the runs. */
void pool_set_cancel(const atomic_bool *flag);

/* Runs that still have unclaimed tasks (queued work, for tests). */
size_t pool_runs_waiting(pool *p);

/* Number of worker threads. */
size_t pool_workers(const pool *p);

#endif
