/* bench_simdjson.h: simdjson On-Demand + fast_float walking a request body
 * (tests/bench/bench_simdjson.cc), for bench_codec.c's reader table. */
#ifndef ATTND_BENCH_SIMDJSON_H
#define ATTND_BENCH_SIMDJSON_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Parses body[0..len), an object of nested arrays of numbers and scalar
 * members; body must have cap >= len + bench_simdjson_padding() readable
 * bytes. The numbers of every array, as float32, go to out (room of them)
 * in order; *count is how many. Returns 0, or -1 on any error (syntax, a
 * ragged array, a non-finite value, out full). */
int bench_simdjson_parse(const char *body, size_t len, size_t cap, float *out,
                         size_t room, size_t *count);

/* The name of the kernel simdjson chose for this CPU ("icelake", "haswell",
 * ...). */
const char *bench_simdjson_impl(void);

/* Bytes simdjson may read past a body's end. */
size_t bench_simdjson_padding(void);

#ifdef __cplusplus
}
#endif

#endif
