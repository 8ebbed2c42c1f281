/* shortest_all.c: codec_num_shortest_n against dragonbox's own loop
 * (codec_num_dragonbox_n) on every float32, 2^32 bit patterns: zeros,
 * subnormals, normals, infinities and NaNs of both signs. make test runs it
 * (test-shortest-all); about 30 s on two cores. Blocks of an odd length
 * put each lane of the 8-wide loop, and its partial last block, on every
 * kind of value. Where the CPU has no AVX-512, both sides are dragonbox and
 * it says so. Exit status 1 on any difference, with the first few printed. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "codec_num.h"

#define BLOCK 4093u

typedef struct span {
    uint64_t from, to;
    uint64_t bad;
} span;

static pthread_mutex_t print_lock = PTHREAD_MUTEX_INITIALIZER;

static void *check_span(void *arg)
{
    span *sp = arg;
    static _Thread_local float v[BLOCK];
    static _Thread_local uint32_t s1[BLOCK], s2[BLOCK];
    static _Thread_local int e1[BLOCK], e2[BLOCK];

    for (uint64_t b = sp->from; b < sp->to; b += BLOCK) {
        size_t n = sp->to - b < BLOCK ? (size_t)(sp->to - b) : BLOCK;
        for (size_t j = 0; j < n; j++) {
            uint32_t u = (uint32_t)(b + j);
            memcpy(&v[j], &u, sizeof u);
        }
        codec_num_shortest_n(v, n, s1, e1);
        codec_num_dragonbox_n(v, n, s2, e2);
        for (size_t j = 0; j < n; j++)
            if (s1[j] != s2[j] || e1[j] != e2[j]) {
                pthread_mutex_lock(&print_lock);
                if (sp->bad < 5)
                    printf("bits %08x: %ue%d, dragonbox %ue%d\n",
                           (unsigned)(b + j), s1[j], e1[j], s2[j], e2[j]);
                pthread_mutex_unlock(&print_lock);
                sp->bad++;
            }
    }
    return NULL;
}

int main(void)
{
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    size_t t, nt = cpus < 1 ? 1 : cpus > 16 ? 16 : (size_t)cpus;
    pthread_t th[16];
    int started[16];
    span sp[16];
    uint64_t total = UINT64_C(1) << 32, bad = 0;

    if (!codec_num_shortest_simd()) {
        printf("shortest-all: no AVX-512 here, codec_num_shortest_n is "
               "dragonbox itself: nothing to compare\n");
        return 0;
    }
    for (t = 0; t < nt; t++) {
        sp[t].from = total / nt * t;
        sp[t].to = t + 1 == nt ? total : total / nt * (t + 1);
        sp[t].bad = 0;
        started[t] = pthread_create(&th[t], NULL, check_span, &sp[t]) == 0;
        if (!started[t])
            check_span(&sp[t]); /* no thread: this one does it */
    }
    for (t = 0; t < nt; t++) {
        if (started[t])
            pthread_join(th[t], NULL);
        bad += sp[t].bad;
    }
    printf("shortest-all: %llu float32 bit patterns on %zu threads, %llu "
           "differ from dragonbox\n", (unsigned long long)total, nt,
           (unsigned long long)bad);
    return bad ? 1 : 0;
}
