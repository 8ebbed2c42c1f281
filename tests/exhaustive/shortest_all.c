/* shortest_all.c: the AVX-512 number formatting against the scalar one on
 * every float32, 2^32 bit patterns (zeros, subnormals, normals, infinities
 * and NaNs of both signs): codec_num_shortest_n's digits against dragonbox's
 * own loop (codec_num_dragonbox_n), and codec_num_text_n's texts against
 * codec_num_layout's of dragonbox's digits. make test runs it
 * (test-shortest-all), the texts for every fourth block of values: about a
 * minute on two cores; `shortest_all all` checks every text (2 min 15 s).
 * Runs of odd lengths put each lane of the 8-wide loops, and their partial
 * last groups, on every kind of value. Where the CPU has no
 * AVX-512, both sides are the scalar code and it says so. Exit status 1 on
 * any difference, with the first few printed. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "json/numbers.h"

#define BLOCK 4093u

typedef struct span {
    uint64_t from, to;
    uint64_t bad;
} span;

static pthread_mutex_t print_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t text_every = 4;

static void *check_span(void *arg)
{
    span *sp = arg;
    static _Thread_local float v[BLOCK];
    static _Thread_local uint32_t s1[BLOCK], s2[BLOCK];
    static _Thread_local int e1[BLOCK], e2[BLOCK];
    static _Thread_local char text[CODEC_NUM_RUN][16];
    static _Thread_local unsigned char len[CODEC_NUM_RUN];

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
        /* texts in runs of 64, 63, ..., 1, 64, ... values, in one block
         * of text_every (scientific notation makes the scalar side slow) */
        if (b / BLOCK % text_every != 0)
            continue;
        for (size_t j = 0, run = CODEC_NUM_RUN - b / BLOCK % CODEC_NUM_RUN;
             j < n; j += run, run = run > 1 ? run - 1 : CODEC_NUM_RUN) {
            size_t m = n - j < run ? n - j : run;
            codec_num_text_n(v + j, m, text, len);
            for (size_t i = 0; i < m; i++) {
                char want[CODEC_NUM_BUF];
                size_t wl = codec_num_layout(v[j + i], s2[j + i], e2[j + i],
                                             want);
                if (wl != len[i] || memcmp(want, text[i], wl) != 0) {
                    pthread_mutex_lock(&print_lock);
                    if (sp->bad < 5)
                        printf("bits %08x: '%.*s', scalar '%.*s'\n",
                               (unsigned)(b + j + i), (int)len[i], text[i],
                               (int)wl, want);
                    pthread_mutex_unlock(&print_lock);
                    sp->bad++;
                }
            }
        }
    }
    return NULL;
}

int main(int argc, char **argv)
{
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    size_t t, nt = cpus < 1 ? 1 : cpus > 16 ? 16 : (size_t)cpus;
    pthread_t th[16];
    int started[16];
    span sp[16];
    uint64_t total = UINT64_C(1) << 32, bad = 0;

    if (argc > 1 && strcmp(argv[1], "all") == 0)
        text_every = 1;
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
    printf("shortest-all: %llu float32 bit patterns (texts of 1 in %llu) on "
           "%zu threads, %llu differ from the scalar digits or text\n",
           (unsigned long long)total, (unsigned long long)text_every, nt,
           (unsigned long long)bad);
    return bad ? 1 : 0;
}
