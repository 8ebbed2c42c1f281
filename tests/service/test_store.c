/* test_store.c: the tensor store: names (SHA-256 against hashlib's values),
 * put/get/release, LRU eviction under a small capacity, held tensors
 * surviving eviction, concurrent puts of the same bytes, a concurrent
 * get/put/evict stress, and the /tensors endpoints over real HTTP. */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/store.h"
#include "test_service.h"

/* What a tensor of n values costs against a store's capacity. */
#define STORE_COST(n) (STORE_ENTRY_OVERHEAD + (n) * sizeof(float))

/* -- names ------------------------------------------------------------------ */

/* hashlib.sha256(struct.pack("<%df" % len(v), *v)).hexdigest() */
typedef struct store_vector {
    float v[4];
    size_t n;
    const char *hex;
} store_vector;

static const store_vector store_vectors[] = {
    {{1.0f, 2.0f, 3.0f}, 3,
     "8e628779e6a74ee0b36991c10158f63cafec7d340ad4e075592502c8708524dd"},
    {{0.0f}, 1,
     "df3f619804a92fdb4057192dc43dd748ea778adc52bc498ce80524c014b81119"},
    {{-0.0f}, 1,
     "6d58692645c9d1cfaf13541cbd258f86193ef63c2f1d38f6bbca9617372d7bd6"},
    {{0.5f, -1.25f, 3.0e-8f, 65504.0f}, 4,
     "deaa36ba761b8ff8c191eafe6ebe5cc8e72ec36fc6270dec3f9333390b5f3b2b"},
};

/* 1000 values (4000 bytes, many SHA-256 blocks): v[i] = ((i * 2654435761)
 * mod 1000) / 1000 - 0.5, computed in double and rounded to float, as
 * Python's struct.pack does. */
static void store_long_vector(float *v)
{
    for (uint64_t i = 0; i < 1000; i++)
        v[i] = (float)((double)(i * 2654435761u % 1000) / 1000.0 - 0.5);
}
static const char store_long_hex[] =
    "42cdf48ecbee98bd03dc6e6c7714d8571b353153db9ee5bd7e5a8df487308df0";

static void store_hex(const unsigned char h[32], char out[65])
{
    for (int i = 0; i < 32; i++)
        snprintf(out + 2 * i, 3, "%02x", h[i]);
}

START_TEST(test_store_sha256_vectors)
{
    unsigned char h[32];
    char hex[65], ref[72];
    for (size_t i = 0; i < sizeof store_vectors / sizeof store_vectors[0];
         i++) {
        ck_assert_int_eq(store_hash(store_vectors[i].v, store_vectors[i].n, h),
                         0);
        store_hex(h, hex);
        ck_assert_str_eq(hex, store_vectors[i].hex);
        store_ref_format(h, ref);
        ck_assert_str_eq(ref + 7, store_vectors[i].hex);
        ck_assert(!strncmp(ref, "sha256:", 7));
    }
    float *v = malloc(1000 * sizeof *v);
    store_long_vector(v);
    ck_assert_int_eq(store_hash(v, 1000, h), 0);
    store_hex(h, hex);
    ck_assert_str_eq(hex, store_long_hex);

    /* a put names its tensor the same way */
    store *s;
    ck_assert_int_eq(store_new(1 << 20, &s), 0);
    const store_tensor *t;
    int created;
    size_t shape[2] = {10, 100};
    ck_assert_int_eq(store_put(s, v, 1000, shape, 2, &t, &created), 0);
    ck_assert_str_eq(t->ref + 7, store_long_hex);
    store_release(s, t);
    store_free(s);
    free(v);
}
END_TEST

START_TEST(test_store_ref_parse)
{
    char ref[80];
    unsigned char h[32], back[32];
    snprintf(ref, sizeof ref, "sha256:%s", store_long_hex);
    ck_assert_int_eq(store_ref_parse(ref, strlen(ref), h), 0);
    char again[72];
    store_ref_format(h, again);
    ck_assert_str_eq(again, ref);

    memset(back, 7, sizeof back);
    /* wrong length, prefix, case or digit: malformed, hash unchanged */
    ck_assert_int_eq(store_ref_parse(ref, strlen(ref) - 1, back), -1);
    ck_assert_int_eq(store_ref_parse("sha256:xyz", 10, back), -1);
    char bad[80];
    snprintf(bad, sizeof bad, "SHA256:%s", store_long_hex);
    ck_assert_int_eq(store_ref_parse(bad, strlen(bad), back), -1);
    snprintf(bad, sizeof bad, "sha256:%s", store_long_hex);
    bad[20] = 'A';
    ck_assert_int_eq(store_ref_parse(bad, strlen(bad), back), -1);
    bad[20] = 'g';
    ck_assert_int_eq(store_ref_parse(bad, strlen(bad), back), -1);
    snprintf(bad, sizeof bad, "sha512:%s", store_long_hex);
    ck_assert_int_eq(store_ref_parse(bad, strlen(bad), back), -1);
    for (int i = 0; i < 32; i++)
        ck_assert_int_eq(back[i], 7);
}
END_TEST

/* -- put, get, release -------------------------------------------------------- */

/* n values that identify id: id + k / 1024. */
static float *store_values(unsigned id, size_t n)
{
    float *v = malloc(n * sizeof *v);
    ck_assert_ptr_nonnull(v);
    for (size_t k = 0; k < n; k++)
        v[k] = (float)id + (float)(k % 1024) / 1024.0f;
    return v;
}

/* Puts id's n values as a vector and returns the held tensor. */
static const store_tensor *store_put_id(store *s, unsigned id, size_t n,
                                        int *created)
{
    float *v = store_values(id, n);
    const store_tensor *t = NULL;
    int c;
    ck_assert_int_eq(store_put(s, v, n, &n, 1, &t, &c), 0);
    ck_assert_ptr_nonnull(t);
    free(v);
    if (created)
        *created = c;
    return t;
}

/* The hash of id's n values. */
static void store_hash_id(unsigned id, size_t n, unsigned char h[32])
{
    float *v = store_values(id, n);
    ck_assert_int_eq(store_hash(v, n, h), 0);
    free(v);
}

static int store_has(store *s, unsigned id, size_t n)
{
    unsigned char h[32];
    store_hash_id(id, n, h);
    const store_tensor *t = store_get(s, h);
    store_release(s, t);
    return t != NULL;
}

START_TEST(test_store_put_get_release)
{
    store *s;
    ck_assert_int_eq(store_new(1 << 20, &s), 0);
    ck_assert_ptr_nonnull(s);
    float v[6] = {1, 2, 3, 4, 5, 6};
    size_t shape23[2] = {2, 3}, shape6[1] = {6};
    const store_tensor *t, *u;
    int created;
    ck_assert_int_eq(store_put(s, v, 6, shape23, 2, &t, &created), 0);
    ck_assert_int_eq(created, 1);
    ck_assert_uint_eq(t->count, 6);
    ck_assert_int_eq(t->rank, 2);
    ck_assert_uint_eq(t->shape[0], 2);
    ck_assert_uint_eq(t->shape[1], 3);
    ck_assert_uint_eq(t->shape[2], 0);
    ck_assert(t->data != v);
    ck_assert_mem_eq(t->data, v, sizeof v);
    ck_assert_uint_eq(strlen(t->ref), STORE_REF_LEN);
    v[0] = 99; /* the store keeps its own copy */
    ck_assert_float_eq(t->data[0], 1);
    v[0] = 1;

    /* the same bytes again, with another shape: the first shape stands */
    ck_assert_int_eq(store_put(s, v, 6, shape6, 1, &u, &created), 0);
    ck_assert_int_eq(created, 0);
    ck_assert_ptr_eq(u, t);
    ck_assert_int_eq(u->rank, 2);
    store_release(s, u);

    unsigned char h[32];
    ck_assert_int_eq(store_ref_parse(t->ref, strlen(t->ref), h), 0);
    u = store_get(s, h);
    ck_assert_ptr_eq(u, t);
    store_release(s, u);
    h[0] ^= 1;
    ck_assert_ptr_null(store_get(s, h));

    store_stats st;
    store_get_stats(s, &st);
    ck_assert_uint_eq(st.entries, 1);
    ck_assert_uint_eq(st.bytes, STORE_COST(6));
    ck_assert_uint_eq(st.hits, 1);
    ck_assert_uint_eq(st.misses, 1);
    ck_assert_uint_eq(st.evictions, 0);

    /* bad arguments store nothing */
    size_t bad[2] = {4, 2};
    errno = 0;
    ck_assert_int_eq(store_put(s, v, 6, bad, 2, &u, &created), -1);
    ck_assert_int_eq(errno, EINVAL);
    ck_assert_ptr_null(u);
    ck_assert_int_eq(store_put(s, v, 6, shape6, 5, &u, &created), -1);
    ck_assert_int_eq(store_put(s, v, 6, shape6, 0, &u, &created), -1);
    size_t zero[2] = {0, 6};
    ck_assert_int_eq(store_put(s, v, 0, zero, 2, &u, &created), -1);
    store_get_stats(s, &st);
    ck_assert_uint_eq(st.entries, 1);

    store_release(s, t);
    store_release(s, NULL);
    store_free(s);
}
END_TEST

START_TEST(test_store_off)
{
    store *s = (store *)1;
    ck_assert_int_eq(store_new(0, &s), 0);
    ck_assert_ptr_null(s);
    unsigned char h[32] = {0};
    ck_assert_ptr_null(store_get(NULL, h));
    float v = 1;
    size_t n = 1;
    const store_tensor *t = (const store_tensor *)1;
    int created = 5;
    ck_assert_int_eq(store_put(NULL, &v, 1, &n, 1, &t, &created), -1);
    ck_assert_ptr_null(t);
    ck_assert_int_eq(created, 0);
    store_stats st;
    memset(&st, 0xff, sizeof st);
    store_get_stats(NULL, &st);
    ck_assert_uint_eq(st.entries + st.bytes + st.hits + st.misses +
                          st.evictions, 0);
    store_release(NULL, NULL);
    store_free(NULL);
}
END_TEST

/* -- eviction ------------------------------------------------------------------ */

START_TEST(test_store_lru_order)
{
    /* room for three tensors of 4 values */
    store *s;
    const size_t cap = 3 * STORE_COST(4);
    ck_assert_int_eq(store_new(cap, &s), 0);
    for (unsigned id = 1; id <= 3; id++)
        store_release(s, store_put_id(s, id, 4, NULL));
    /* a use makes 1 the most recent, so 2 is now the oldest */
    ck_assert(store_has(s, 1, 4));
    store_release(s, store_put_id(s, 4, 4, NULL));
    ck_assert(!store_has(s, 2, 4));
    ck_assert(store_has(s, 3, 4));
    ck_assert(store_has(s, 1, 4));
    ck_assert(store_has(s, 4, 4));
    /* a re-upload is a use too: 3 becomes the newest, 1 goes next... */
    int created;
    store_release(s, store_put_id(s, 3, 4, &created));
    ck_assert_int_eq(created, 0);
    /* ...and a tensor of 8 values evicts two: 1 and 4 */
    store_release(s, store_put_id(s, 5, 8, NULL));
    ck_assert(!store_has(s, 1, 4));
    ck_assert(!store_has(s, 4, 4));
    ck_assert(store_has(s, 3, 4));
    ck_assert(store_has(s, 5, 8));

    store_stats st;
    store_get_stats(s, &st);
    ck_assert_uint_eq(st.entries, 2);
    ck_assert_uint_eq(st.bytes, STORE_COST(4) + STORE_COST(8));
    ck_assert_uint_eq(st.evictions, 3);
    ck_assert_uint_eq(st.hits, 6);
    ck_assert_uint_eq(st.misses, 3);

    /* larger than the whole store: refused, nothing evicted */
    size_t n = (cap - STORE_ENTRY_OVERHEAD) / sizeof(float) + 1;
    float *big = store_values(9, n);
    const store_tensor *t;
    errno = 0;
    ck_assert_int_eq(store_put(s, big, n, &n, 1, &t, &created), -1);
    ck_assert_int_eq(errno, EFBIG);
    ck_assert_ptr_null(t);
    free(big);
    store_get_stats(s, &st);
    ck_assert_uint_eq(st.entries, 2);
    ck_assert_uint_eq(st.evictions, 3);
    /* exactly the capacity fits, evicting everything else */
    store_release(s, store_put_id(s, 10, n - 1, NULL));
    store_get_stats(s, &st);
    ck_assert_uint_eq(st.entries, 1);
    ck_assert_uint_eq(st.bytes, cap);
    store_free(s);
}
END_TEST

START_TEST(test_store_held_survives_eviction)
{
    store *s;
    ck_assert_int_eq(store_new(2 * STORE_COST(4), &s), 0);
    const store_tensor *a = store_put_id(s, 1, 4, NULL); /* held */
    store_release(s, store_put_id(s, 2, 4, NULL));
    /* 1 is older, but held: the unheld 2 goes first */
    store_release(s, store_put_id(s, 3, 4, NULL));
    ck_assert(!store_has(s, 2, 4));
    ck_assert(store_has(s, 3, 4));
    /* a held 4 pushes out the unheld 3, though 1 is older */
    const store_tensor *d = store_put_id(s, 4, 4, NULL);
    ck_assert(!store_has(s, 3, 4));
    /* 5 finds only held tensors: the oldest, 1, leaves the store but
     * stays readable for its holder */
    store_release(s, store_put_id(s, 5, 4, NULL));
    ck_assert(!store_has(s, 1, 4));
    ck_assert(store_has(s, 4, 4));
    float *want = store_values(1, 4);
    ck_assert_mem_eq(a->data, want, 4 * sizeof(float));

    /* while the evicted copy is held, the same bytes can be stored anew */
    int created;
    const store_tensor *a2 = store_put_id(s, 1, 4, &created);
    ck_assert_int_eq(created, 1);
    ck_assert_ptr_ne(a2, a);
    ck_assert_str_eq(a2->ref, a->ref);

    store_stats st;
    store_get_stats(s, &st);
    ck_assert_uint_eq(st.entries, 2);
    ck_assert_uint_eq(st.bytes, 2 * STORE_COST(4));
    /* the last release frees the evicted tensor (LeakSanitizer in the ASan
     * build would report it otherwise; ASan, any later use) */
    store_release(s, a);
    store_release(s, a2);
    store_release(s, d);
    free(want);
    store_free(s);
}
END_TEST

/* -- concurrency ------------------------------------------------------------------ */

#define STORE_THREADS 8

typedef struct store_same_arg {
    store *s;
    pthread_barrier_t *go;
    const float *v;
    size_t n;
    const store_tensor *t;
    int created;
} store_same_arg;

static void *store_same_worker(void *p)
{
    store_same_arg *a = p;
    pthread_barrier_wait(a->go);
    size_t shape[2] = {512, a->n / 512};
    if (store_put(a->s, a->v, a->n, shape, 2, &a->t, &a->created))
        a->t = NULL;
    return NULL;
}

/* The process's resident bytes: "VmRSS" or "VmHWM" (the peak) of
 * /proc/self/status; 0 when it cannot be read. */
static size_t store_test_vm(const char *field)
{
    char line[256];
    size_t kb = 0, len = strlen(field);
    FILE *f = fopen("/proc/self/status", "r");

    if (!f)
        return 0;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, field, len) == 0 && line[len] == ':')
            kb = strtoull(line + len + 1, NULL, 10);
    fclose(f);
    return kb * 1024;
}

/* A put makes room, evicting, before it copies the values: putting a
 * third 64 MiB tensor into a store with room for two frees the oldest
 * first, so the process's peak does not grow by a tensor. (It copied
 * first: 64 MiB over the capacity for each put in progress; 6 uploads of
 * 40 MB at once into a 256 MiB store peaked at 1407 MiB of RSS.) Values of
 * 64 MiB are mmap'ed by glibc, so their memory leaves with free; under a
 * sanitizer's allocator it does not, and the test has nothing to
 * measure. */
START_TEST(test_store_put_room_before_copy)
{
    size_t count = (size_t)16 << 20, shape[1] = {count};
    float *v = malloc(count * sizeof *v);
    const store_tensor *t;
    store *s;
    int created;

    ck_assert_ptr_nonnull(v);
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    /* the sanitizers' allocators keep freed memory (ASan's quarantine),
     * so an eviction does not lower the resident bytes this measures */
    free(v);
    (void)shape;
    (void)t;
    (void)s;
    (void)created;
    return;
#endif
    for (size_t i = 0; i < count; i++)
        v[i] = (float)(i % 1000);
    ck_assert_int_eq(store_new(2 * STORE_COST(count), &s), 0);
    for (int k = 0; k < 2; k++) {
        v[0] = (float)k;
        ck_assert_int_eq(store_put(s, v, count, shape, 1, &t, &created), 0);
        store_release(s, t);
    }
    v[0] = 2.0f;
    FILE *f = fopen("/proc/self/clear_refs", "w"); /* "5": VmHWM = VmRSS */
    int reset = f != NULL && fputs("5", f) >= 0;
    if (f != NULL && fclose(f) != 0)
        reset = 0;
    if (!reset) {
        store_free(s);
        free(v);
        return; /* no way to measure the peak here */
    }
    size_t before = store_test_vm("VmRSS");
    ck_assert_int_eq(store_put(s, v, count, shape, 1, &t, &created), 0);
    store_release(s, t);
    size_t peak = store_test_vm("VmHWM");
    ck_assert_uint_gt(before, 0);
    ck_assert_msg(peak < before + count * sizeof(float) / 2,
                  "the put raised the peak RSS by %zu bytes (a tensor is "
                  "%zu)", peak - before, count * sizeof(float));
    store_free(s);
    free(v);
}
END_TEST

START_TEST(test_store_concurrent_same_bytes)
{
    for (int round = 0; round < 20; round++) {
        store *s;
        ck_assert_int_eq(store_new(64 << 20, &s), 0);
        size_t n = 512 * 512; /* 1 MiB */
        float *v = store_values((unsigned)round, n);
        pthread_barrier_t go;
        pthread_barrier_init(&go, NULL, STORE_THREADS);
        pthread_t th[STORE_THREADS];
        store_same_arg args[STORE_THREADS];
        for (int i = 0; i < STORE_THREADS; i++) {
            args[i] = (store_same_arg){s, &go, v, n, NULL, -1};
            ck_assert_int_eq(
                pthread_create(&th[i], NULL, store_same_worker, &args[i]), 0);
        }
        int created = 0;
        for (int i = 0; i < STORE_THREADS; i++) {
            pthread_join(th[i], NULL);
            ck_assert_ptr_nonnull(args[i].t);
            ck_assert_ptr_eq(args[i].t, args[0].t);
            created += args[i].created;
        }
        ck_assert_int_eq(created, 1);
        store_stats st;
        store_get_stats(s, &st);
        ck_assert_uint_eq(st.entries, 1);
        ck_assert_uint_eq(st.bytes, STORE_COST(n));
        ck_assert_mem_eq(args[0].t->data, v, n * sizeof(float));
        for (int i = 0; i < STORE_THREADS; i++)
            store_release(s, args[i].t);
        pthread_barrier_destroy(&go);
        free(v);
        store_free(s);
    }
}
END_TEST

/* Stress: every thread puts, gets, holds and releases tensors drawn from a
 * pool of 48 (sizes 16 to 1024 values) in a store that fits a handful, so
 * evictions run constantly under held tensors. Each held tensor's values
 * are checked against its id (a freed one would differ, or trip ASan). */
#define STORE_STRESS_IDS 48
#define STORE_STRESS_OPS 3000

static size_t store_stress_n(unsigned id)
{
    return (size_t)16 << (id % 7);
}

typedef struct store_stress_arg {
    store *s;
    unsigned seed;
    unsigned char (*hashes)[32];
    uint64_t gets, bad;
} store_stress_arg;

static int store_stress_check(const store_tensor *t, unsigned id)
{
    size_t n = store_stress_n(id);
    if (t->count != n || t->rank != 1 || t->shape[0] != n)
        return 0;
    for (size_t k = 0; k < n; k += 7)
        if (t->data[k] != (float)id + (float)(k % 1024) / 1024.0f)
            return 0;
    return 1;
}

static void *store_stress_worker(void *p)
{
    store_stress_arg *a = p;
    const store_tensor *held[4] = {NULL};
    unsigned held_id[4] = {0};
    uint64_t x = a->seed * 0x9E3779B97F4A7C15u + 1;
    float *v = malloc(1024 * 64 * sizeof *v);
    for (int op = 0; op < STORE_STRESS_OPS; op++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        unsigned id = (unsigned)(x % STORE_STRESS_IDS);
        int slot = (int)((x >> 32) % 4);
        if (held[slot]) {
            if (!store_stress_check(held[slot], held_id[slot]))
                a->bad++;
            store_release(a->s, held[slot]);
            held[slot] = NULL;
        }
        const store_tensor *t = NULL;
        if ((x >> 40) % 3 == 0) {
            size_t n = store_stress_n(id);
            for (size_t k = 0; k < n; k++)
                v[k] = (float)id + (float)(k % 1024) / 1024.0f;
            int created;
            if (store_put(a->s, v, n, &n, 1, &t, &created))
                a->bad++;
        } else {
            t = store_get(a->s, a->hashes[id]);
            a->gets++;
        }
        if (t && !store_stress_check(t, id))
            a->bad++;
        if (t && (x >> 48) % 2) {
            held[slot] = t;
            held_id[slot] = id;
        } else {
            store_release(a->s, t);
        }
    }
    for (int i = 0; i < 4; i++) {
        if (held[i] && !store_stress_check(held[i], held_id[i]))
            a->bad++;
        store_release(a->s, held[i]);
    }
    free(v);
    return NULL;
}

START_TEST(test_store_concurrent_stress)
{
    store *s;
    /* about 8 tensors of the average size */
    ck_assert_int_eq(store_new(10 * 1024, &s), 0);
    unsigned char(*hashes)[32] = malloc(STORE_STRESS_IDS * sizeof *hashes);
    for (unsigned id = 0; id < STORE_STRESS_IDS; id++)
        store_hash_id(id, store_stress_n(id), hashes[id]);
    pthread_t th[STORE_THREADS];
    store_stress_arg args[STORE_THREADS];
    for (int i = 0; i < STORE_THREADS; i++) {
        args[i] = (store_stress_arg){s, (unsigned)i + 1, hashes, 0, 0};
        ck_assert_int_eq(
            pthread_create(&th[i], NULL, store_stress_worker, &args[i]), 0);
    }
    uint64_t gets = 0;
    for (int i = 0; i < STORE_THREADS; i++) {
        pthread_join(th[i], NULL);
        ck_assert_uint_eq(args[i].bad, 0);
        gets += args[i].gets;
    }
    store_stats st;
    store_get_stats(s, &st);
    ck_assert_uint_eq(st.hits + st.misses, gets);
    ck_assert_uint_le(st.bytes, 10 * 1024);
    ck_assert_uint_gt(st.evictions, 0);
    ck_assert_uint_gt(st.hits, 0);
    /* what is left is exactly what lookups find */
    size_t found = 0, bytes = 0;
    for (unsigned id = 0; id < STORE_STRESS_IDS; id++) {
        const store_tensor *t = store_get(s, hashes[id]);
        if (t) {
            ck_assert(store_stress_check(t, id));
            found++;
            bytes += STORE_COST(t->count);
        }
        store_release(s, t);
    }
    ck_assert_uint_eq(found, st.entries);
    ck_assert_uint_eq(bytes, st.bytes);
    free(hashes);
    store_free(s);
}
END_TEST

/* -- configuration ------------------------------------------------------------------ */

START_TEST(test_store_config_option)
{
    config cfg;
    char *argv0[] = {"attnd", NULL};
    unsetenv("ATTND_TENSOR_STORE_BYTES");
    ck_assert_int_eq(config_parse(&cfg, 1, argv0, stdout, stderr), CONFIG_RUN);
    ck_assert_uint_eq(cfg.tensor_store_bytes, (size_t)256 << 20);
    setenv("ATTND_TENSOR_STORE_BYTES", "4096", 1);
    ck_assert_int_eq(config_parse(&cfg, 1, argv0, stdout, stderr), CONFIG_RUN);
    ck_assert_uint_eq(cfg.tensor_store_bytes, 4096);
    char *argv1[] = {"attnd", "--tensor-store-bytes", "0", NULL};
    ck_assert_int_eq(config_parse(&cfg, 3, argv1, stdout, stderr), CONFIG_RUN);
    ck_assert_uint_eq(cfg.tensor_store_bytes, 0);
    unsetenv("ATTND_TENSOR_STORE_BYTES");
}
END_TEST

/* -- the endpoints over HTTP ------------------------------------------------------- */

static void store_post(uint16_t port, const char *path, const char *type,
                       const void *body, size_t len, ts_response *out)
{
    ts_request q = {.method = "POST", .path = path, .content_type = type,
                    .body = body, .body_len = len};
    ts_http(port, &q, out);
}

/* The string member name of a JSON object text (copied to buf). */
static const char *store_json_str(const char *text, const char *name,
                                  char *buf, size_t cap)
{
    json_error_t je;
    json_t *j = json_loads(text, 0, &je);
    ck_assert_msg(j != NULL, "not JSON: %s", text);
    const char *v = json_string_value(json_object_get(j, name));
    ck_assert_msg(v != NULL, "no string \"%s\" in %s", name, text);
    snprintf(buf, cap, "%s", v);
    json_decref(j);
    return buf;
}

/* Standard base64 with padding, decoded; the number of bytes. */
static size_t store_unbase64(const char *s, unsigned char *out)
{
    static const char a[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t n = 0;
    uint32_t acc = 0;
    int bits = 0;
    for (; *s && *s != '='; s++) {
        const char *p = strchr(a, *s);
        ck_assert_ptr_nonnull(p);
        acc = acc << 6 | (uint32_t)(p - a);
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out[n++] = (unsigned char)(acc >> bits);
        }
    }
    return n;
}

/* What the store of srv holds now. */
static store_stats store_stats_of(server *srv)
{
    store_stats st;
    store_get_stats(server_store(srv), &st);
    return st;
}

START_TEST(test_store_http_upload_and_get)
{
    config cfg;
    ts_config(&cfg);
    server *srv = ts_start(&cfg);
    uint16_t port = server_port(srv);
    ck_assert_ptr_nonnull(server_store(srv));
    /* struct.pack("<6f", 1, 2, 3, 4, 5, 6): base64 and hashlib's sha256 */
    static const char b64[] = "AACAPwAAAEAAAEBAAACAQAAAoEAAAMBA";
    static const char ref[] = "sha256:24ae2dfe8df57c1b80e54cef3d90ac3b417fd98"
                              "973345a5f616bbc9a75dcc202";
    static const char answer[] =
        "{\"ref\":\"sha256:24ae2dfe8df57c1b80e54cef3d90ac3b417fd98973345a5f616"
        "bbc9a75dcc202\",\"shape\":[2,3],\"bytes\":24}";
    ts_response r;
    char buf[256], path[128];

    /* a nested array: new, 201 with its place */
    const char arr[] = "[[1, 2, 3],\n [4, 5, 6.0]]";
    store_post(port, "/tensors", "application/json", arr, strlen(arr), &r);
    ck_assert_msg(r.status == 201, "%ld %s", r.status, r.body);
    ck_assert_str_eq(r.body, answer);
    snprintf(path, sizeof path, "/tensors/%s", ref);
    ck_assert_str_eq(ts_header(&r, "Location", buf, sizeof buf), path);
    ck_assert(!strncmp(ts_header(&r, "Content-Type", buf, sizeof buf),
                       "application/json", 16));
    ts_response_free(&r);
    /* the same again: 200 */
    store_post(port, "/tensors", "application/json", arr, strlen(arr), &r);
    ck_assert_int_eq(r.status, 200);
    ck_assert_str_eq(r.body, answer);
    ts_response_free(&r);
    /* the same bytes as a tensor object of another shape: the first
     * upload's shape stands */
    char obj[256];
    snprintf(obj, sizeof obj,
             "{\"dtype\":\"float32\",\"shape\":[6],\"data\":\"%s\"}", b64);
    store_post(port, "/tensors", "application/json; charset=utf-8", obj,
               strlen(obj), &r);
    ck_assert_int_eq(r.status, 200);
    ck_assert_str_eq(r.body, answer);
    ts_response_free(&r);
    /* and as raw bytes */
    const float six[6] = {1, 2, 3, 4, 5, 6};
    store_post(port, "/tensors?shape=6", "application/octet-stream", six,
               sizeof six, &r);
    ck_assert_int_eq(r.status, 200);
    ck_assert_str_eq(r.body, answer);
    ts_response_free(&r);

    /* a JSON body in the shape of ?shape= (as many values); another count
     * is 422 and stores nothing */
    const char flat[] = "[1, 2, 3, 4, 5, 6]";
    store_post(port, "/tensors?shape=2,3", "application/json", flat,
               strlen(flat), &r);
    ck_assert_int_eq(r.status, 200);
    ck_assert_str_eq(r.body, answer);
    ts_response_free(&r);
    store_post(port, "/tensors?shape=3,3", "application/json", flat,
               strlen(flat), &r);
    ts_assert_error(&r, 422, "invalid_request");
    ck_assert_msg(strstr(r.body, "?shape=3,3 holds 9 values") &&
                      strstr(r.body, "[6] holds 6"), "%s", r.body);
    ts_response_free(&r);
    store_post(port, "/tensors?shape=", "application/json", flat,
               strlen(flat), &r);
    ts_assert_error(&r, 422, "invalid_request");
    ts_response_free(&r);
    /* a key twice: the second would win in silence */
    snprintf(obj, sizeof obj,
             "{\"dtype\":\"float32\",\"shape\":[6],\"data\":\"%s\","
             "\"data\":\"%s\"}", b64, b64);
    store_post(port, "/tensors", "application/json", obj, strlen(obj), &r);
    ts_assert_error(&r, 422, "invalid_request");
    ck_assert_msg(strstr(r.body, "\"field\":\"/data\"") &&
                      strstr(r.body, "given twice"), "%s", r.body);
    ts_response_free(&r);

    /* a ref is not an upload, whether the store holds it or not, well
     * formed or not: 422 at the ref, the store not asked */
    const char *const by_ref[] = {
        "{\"ref\":\"sha256:24ae2dfe8df57c1b80e54cef3d90ac3b417fd98973345a5f616"
        "bbc9a75dcc202\"}",
        "{\"ref\":\"bogus\"}", "{\"ref\":7}",
        "{\"dtype\":\"float32\",\"shape\":[6],\"ref\":\"sha256:24ae2dfe8df5"
        "7c1b80e54cef3d90ac3b417fd98973345a5f616bbc9a75dcc202\"}"};
    for (size_t i = 0; i < sizeof by_ref / sizeof by_ref[0]; i++) {
        store_post(port, "/tensors", "application/json", by_ref[i],
                   strlen(by_ref[i]), &r);
        ts_assert_error(&r, 422, "invalid_request");
        ck_assert_msg(strstr(r.body, "\"field\":\"/ref\"") &&
                          strstr(r.body, "POST /tensors takes the tensor's "
                                         "values") &&
                          strstr(r.body, "not a ref"),
                      "%s: %s", by_ref[i], r.body);
        ts_response_free(&r);
    }

    /* GET: the upload's answer and the values, a tensor object's members */
    ts_request q = {.path = path};
    ts_http(port, &q, &r);
    ck_assert_int_eq(r.status, 200);
    snprintf(obj, sizeof obj,
             "%.*s,\"dtype\":\"float32\",\"data\":\"%s\"}",
             (int)strlen(answer) - 1, answer, b64);
    ck_assert_str_eq(r.body, obj);
    ts_response_free(&r);
    /* HEAD: the same headers, no body */
    q.method = "HEAD";
    ts_http(port, &q, &r);
    ck_assert_int_eq(r.status, 200);
    ck_assert_uint_eq(r.len, 0);
    char get_len[24];
    snprintf(get_len, sizeof get_len, "%zu", strlen(obj));
    ck_assert_str_eq(ts_header(&r, "Content-Length", buf, sizeof buf),
                     get_len);
    ck_assert(!strncmp(ts_header(&r, "Content-Type", buf, sizeof buf),
                       "application/json", 16));
    ts_response_free(&r);

    /* octet-stream of a 4-D tensor: GET gives back the very bytes */
    size_t n = 3 * 4 * 5 * 7;
    float *v = store_values(77, n);
    v[5] = -0.0f;
    v[6] = 1e-45f; /* subnormal */
    store_post(port, "/tensors?shape=3,4,5,7", "application/octet-stream", v,
               n * sizeof *v, &r);
    ck_assert_msg(r.status == 201, "%ld %s", r.status, r.body);
    char ref2[80];
    store_json_str(r.body, "ref", ref2, sizeof ref2);
    ck_assert(strstr(r.body, "\"shape\":[3,4,5,7],\"bytes\":1680}"));
    unsigned char h[32];
    char want[72];
    ck_assert_int_eq(store_hash(v, n, h), 0);
    store_ref_format(h, want);
    ck_assert_str_eq(ref2, want);
    ts_response_free(&r);
    snprintf(path, sizeof path, "/tensors/%s", ref2);
    q.method = NULL;
    ts_http(port, &q, &r);
    ck_assert_int_eq(r.status, 200);
    char *data = malloc(r.len);
    store_json_str(r.body, "data", data, r.len);
    unsigned char *bytes = malloc(r.len);
    ck_assert_uint_eq(store_unbase64(data, bytes), n * sizeof *v);
    ck_assert_mem_eq(bytes, v, n * sizeof *v);
    ck_assert(strstr(r.body, "\"shape\":[3,4,5,7]"));
    free(bytes);
    free(data);
    free(v);
    ts_response_free(&r);

    store_stats st = store_stats_of(srv);
    ck_assert_uint_eq(st.entries, 2);
    ck_assert_uint_eq(st.bytes, STORE_COST(6) + STORE_COST(420));
    ck_assert_uint_eq(st.hits, 3);
    server_stop(srv);
}
END_TEST

START_TEST(test_store_http_errors)
{
    config cfg;
    ts_config(&cfg);
    cfg.limits.max_body_bytes = 4096;
    cfg.tensor_store_bytes = STORE_COST(512);
    server *srv = ts_start(&cfg);
    uint16_t port = server_port(srv);
    ts_response r;
    float v[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    char path[128];

    /* octet-stream: length not 4 x the shape's product, or no shape */
    store_post(port, "/tensors?shape=3,3", "application/octet-stream", v,
               sizeof v, &r);
    ts_assert_error(&r, 422, "invalid_request");
    ck_assert(strstr(r.body, "32 bytes") && strstr(r.body, "[3,3]"));
    ts_response_free(&r);
    store_post(port, "/tensors?shape=7", "application/octet-stream", v,
               sizeof v - 2, &r);
    ts_assert_error(&r, 422, "invalid_request");
    ts_response_free(&r);
    store_post(port, "/tensors", "application/octet-stream", v, sizeof v, &r);
    ts_assert_error(&r, 422, "invalid_request");
    ts_response_free(&r);
    /* a shape given twice is not guessed, even when both would do */
    store_post(port, "/tensors?shape=8&shape=2,4", "application/octet-stream",
               v, sizeof v, &r);
    ts_assert_error(&r, 422, "invalid_request");
    ck_assert_msg(strstr(r.body, "given 2 times"), "%s", r.body);
    ts_response_free(&r);
    static const char *const bad_shapes[] = {
        "0,8", "8,", ",8", "2,x", "1,1,1,1,8", "-8", "99999999999999999999"};
    for (size_t i = 0; i < sizeof bad_shapes / sizeof bad_shapes[0]; i++) {
        snprintf(path, sizeof path, "/tensors?shape=%s", bad_shapes[i]);
        store_post(port, path, "application/octet-stream", v, sizeof v, &r);
        ts_assert_error(&r, 422, "invalid_request");
        ts_response_free(&r);
    }
    /* non-finite values, in each form */
    float nf[8];
    memcpy(nf, v, sizeof v);
    nf[3] = NAN;
    store_post(port, "/tensors?shape=8", "application/octet-stream", nf,
               sizeof nf, &r);
    ts_assert_error(&r, 422, "invalid_request");
    ck_assert(strstr(r.body, "value 3"));
    ts_response_free(&r);
    nf[3] = -INFINITY;
    store_post(port, "/tensors?shape=2,4", "application/octet-stream", nf,
               sizeof nf, &r);
    ts_assert_error(&r, 422, "invalid_request");
    ts_response_free(&r);
    const char big[] = "[[1, 2], [3, 1e39]]";
    store_post(port, "/tensors", "application/json", big, strlen(big), &r);
    ts_assert_error(&r, 422, "invalid_request");
    ts_response_free(&r);
    /* [1, inf]: 0x7f800000 is AACAfw== in base64 */
    const char inf[] =
        "{\"dtype\":\"float32\",\"shape\":[2],\"data\":\"AACAPwAAgH8=\"}";
    store_post(port, "/tensors", "application/json", inf, strlen(inf), &r);
    ts_assert_error(&r, 422, "invalid_request");
    ts_response_free(&r);
    /* not a tensor, or not JSON */
    static const char *const not_tensors[] = {"\"abc\"", "{}", "[]",
                                              "[[1], [2, 3]]",
                                              "[[[[[1]]]]]", "7"};
    for (size_t i = 0; i < sizeof not_tensors / sizeof not_tensors[0]; i++) {
        store_post(port, "/tensors", "application/json", not_tensors[i],
                   strlen(not_tensors[i]), &r);
        ts_assert_error(&r, 422, "invalid_request");
        ts_response_free(&r);
    }
    /* a syntax error is 400 wherever it lies, even after a value the
     * contract refuses ("[1, tru]": a boolean, but not JSON first) */
    static const char *const not_json[] = {
        "", "[1, 2", "[1] [2]", "abc", "[1, 2,]", "[1,,2]", "[1, NaN]",
        "[[1, 2], [3, Infinity]]", "[.5, 1]", "[+1, 2]", "[1, tru]",
        "[nan, 1]", "[[1], [2, 3], ]",
        "{\"dtype\":\"float32\",\"shape\":[1,],\"data\":\"AACAPw==\"}"};
    for (size_t i = 0; i < sizeof not_json / sizeof not_json[0]; i++) {
        store_post(port, "/tensors", "application/json", not_json[i],
                   strlen(not_json[i]), &r);
        ts_assert_error(&r, 400, "invalid_json");
        ts_response_free(&r);
    }
    store_post(port, "/tensors", "text/plain", "[1]", 3, &r);
    ts_assert_error(&r, 415, "unsupported_media_type");
    ts_response_free(&r);
    /* over --max-body-bytes, and over the whole store */
    char *body = malloc(8192);
    memset(body, ' ', 8192);
    body[0] = '[';
    memcpy(body + 8189, "1]", 2);
    store_post(port, "/tensors", "application/json", body, 8191, &r);
    ts_assert_error(&r, 413, "too_large");
    ts_response_free(&r);
    store_post(port, "/tensors?shape=1025", "application/octet-stream", body,
               4100, &r);
    ts_assert_error(&r, 413, "too_large");
    ts_response_free(&r);
    float *many = store_values(3, 513); /* one value too many */
    store_post(port, "/tensors?shape=513", "application/octet-stream", many,
               513 * sizeof(float), &r);
    ts_assert_error(&r, 413, "too_large");
    /* the message names the limit and its value, as every 413 does */
    char limit[96];
    snprintf(limit, sizeof limit,
             "--tensor-store-bytes (ATTND_TENSOR_STORE_BYTES) is %zu",
             (size_t)STORE_COST(512));
    ck_assert_msg(strstr(r.body, limit) != NULL, "%s", r.body);
    ts_response_free(&r);
    free(many);
    free(body);
    /* nothing was stored by any of the above */
    store_stats st = store_stats_of(srv);
    ck_assert_uint_eq(st.entries, 0);

    /* refs in the path: malformed (404, like any path that names nothing)
     * or not held (404) */
    static const char *const bad_refs[] = {
        "/tensors/sha256:xyz", "/tensors/", "/tensors/sha256:",
        "/tensors/SHA256:24ae2dfe8df57c1b80e54cef3d90ac3b417fd98973345a5f616b"
        "bc9a75dcc202",
        "/tensors/sha256:24AE2DFE8DF57C1B80E54CEF3D90AC3B417FD98973345A5F616B"
        "BC9A75DCC202",
        "/tensors/sha256:24ae2dfe8df57c1b80e54cef3d90ac3b417fd98973345a5f616b"
        "bc9a75dcc2021",
        "/tensors/sha256:24ae2dfe8df57c1b80e54cef3d90ac3b417fd98973345a5f616b"
        "bc9a75dcc202"};
    for (size_t i = 0; i < sizeof bad_refs / sizeof bad_refs[0]; i++) {
        ts_request q = {.path = bad_refs[i]};
        ts_http(port, &q, &r);
        ts_assert_error(&r, 404, "not_found");
        ts_response_free(&r);
    }
    st = store_stats_of(srv);
    ck_assert_uint_eq(st.misses, 1); /* only the well-formed ref looked up */

    /* methods */
    ts_request q = {.path = "/tensors"};
    ts_http(port, &q, &r);
    ts_assert_error(&r, 405, "method_not_allowed");
    char allow[64];
    ck_assert_str_eq(ts_header(&r, "Allow", allow, sizeof allow),
                     "POST, OPTIONS");
    ts_response_free(&r);
    store_post(port, bad_refs[6], "application/json", "[1]", 3, &r);
    ts_assert_error(&r, 405, "method_not_allowed");
    ck_assert_str_eq(ts_header(&r, "Allow", allow, sizeof allow),
                     "GET, HEAD, OPTIONS");
    ts_response_free(&r);
    server_stop(srv);
}
END_TEST

START_TEST(test_store_http_off)
{
    config cfg;
    ts_config(&cfg);
    cfg.tensor_store_bytes = 0;
    server *srv = ts_start(&cfg);
    uint16_t port = server_port(srv);
    ck_assert_ptr_null(server_store(srv));
    ts_response r;
    store_post(port, "/tensors", "application/json", "[1]", 3, &r);
    ts_assert_error(&r, 404, "not_found");
    ts_response_free(&r);
    ts_request q = {.path = "/tensors/sha256:24ae2dfe8df57c1b80e54cef3d90ac3"
                            "b417fd98973345a5f616bbc9a75dcc202"};
    ts_http(port, &q, &r);
    ts_assert_error(&r, 404, "not_found");
    ts_response_free(&r);
    /* /attend still reads a ref: a malformed one is invalid_request, as
     * with a store, and a well-formed one unknown_ref */
    static const char *const refs[][3] = {
        {"\"sha256:xyz\"", "invalid_request", "/w_k"},
        {"\"SHA256:24AE2DFE8DF57C1B80E54CEF3D90AC3B417FD98973345A5F616BBC9A75"
         "DCC202\"", "invalid_request", "/w_k"},
        {"\"sha256:24ae2dfe8df57c1b80e54cef3d90ac3b417fd98973345a5f616bbc9a"
         "75dcc202\"", "unknown_ref", "/w_k"},
        /* a key twice: the second would win in silence */
        {"\"sha256:xyz\", \"ref\": \"sha256:xyz\"", "invalid_request",
         "/w_k/ref"}};
    for (size_t i = 0; i < sizeof refs / sizeof refs[0]; i++) {
        char body[512], field[64];
        snprintf(body, sizeof body,
                 "{\"x\": [[1, 0], [0, 1]], \"w_q\": [[1, 0], [0, 1]], "
                 "\"w_k\": {\"ref\": %s}, \"w_v\": [[1, 0], [0, 1]], "
                 "\"num_heads\": 1}", refs[i][0]);
        store_post(port, "/attend", "application/json", body, strlen(body),
                   &r);
        ts_assert_error(&r, 422, refs[i][1]);
        snprintf(field, sizeof field, "\"field\":\"%s\"", refs[i][2]);
        ck_assert_msg(strstr(r.body, field), "%s: %s", body, r.body);
        ts_response_free(&r);
    }
    q.path = "/metrics";
    ts_http(port, &q, &r);
    ck_assert_double_eq(ts_metric(r.body, "attnd_tensor_store_entries"), 0);
    ck_assert_double_eq(ts_metric(r.body, "attnd_tensor_store_bytes"), 0);
    ts_response_free(&r);
    server_stop(srv);
}
END_TEST

START_TEST(test_store_http_metrics)
{
    config cfg;
    ts_config(&cfg);
    cfg.tensor_store_bytes = 3 * STORE_COST(4); /* three tensors of 4 values */
    server *srv = ts_start(&cfg);
    uint16_t port = server_port(srv);
    ts_response r;
    char refs[4][80];
    for (unsigned id = 0; id < 4; id++) {
        float *v = store_values(id, 4);
        store_post(port, "/tensors?shape=2,2", "application/octet-stream", v,
                   4 * sizeof *v, &r);
        ck_assert_int_eq(r.status, 201);
        store_json_str(r.body, "ref", refs[id], sizeof refs[id]);
        ts_response_free(&r);
        free(v);
    }
    char path[128];
    snprintf(path, sizeof path, "/tensors/%s", refs[0]); /* evicted */
    ck_assert_int_eq(ts_get_status(port, path), 404);
    snprintf(path, sizeof path, "/tensors/%s", refs[3]);
    ck_assert_int_eq(ts_get_status(port, path), 200);
    snprintf(path, sizeof path, "/tensors/%s", refs[1]);
    ck_assert_int_eq(ts_get_status(port, path), 200);

    ts_request q = {.path = "/metrics"};
    ts_http(port, &q, &r);
    ck_assert_int_eq(r.status, 200);
    ck_assert_double_eq(ts_metric(r.body, "attnd_tensor_store_entries"), 3);
    ck_assert_double_eq(ts_metric(r.body, "attnd_tensor_store_bytes"),
                        3 * STORE_COST(4));
    ck_assert_double_eq(ts_metric(r.body, "attnd_tensor_store_hits_total"), 2);
    ck_assert_double_eq(ts_metric(r.body, "attnd_tensor_store_misses_total"),
                        1);
    ck_assert_double_eq(
        ts_metric(r.body, "attnd_tensor_store_evictions_total"), 1);
    static const char *const families[] = {
        "attnd_tensor_store_entries gauge", "attnd_tensor_store_bytes gauge",
        "attnd_tensor_store_hits_total counter",
        "attnd_tensor_store_misses_total counter",
        "attnd_tensor_store_evictions_total counter"};
    for (size_t i = 0; i < 5; i++) {
        char line[96];
        snprintf(line, sizeof line, "# TYPE %s\n", families[i]);
        ck_assert_msg(strstr(r.body, line), "no %s", line);
        size_t name_len = strcspn(families[i], " ");
        snprintf(line, sizeof line, "# HELP %.*s ", (int)name_len,
                 families[i]);
        ck_assert_msg(strstr(r.body, line), "no %s", line);
    }
    ck_assert_double_eq(
        ts_metric(r.body,
                  "attnd_http_requests_total{path=\"/tensors\",status=\"201\"}"),
        4);
    ck_assert_double_eq(
        ts_metric(r.body, "attnd_http_requests_total{path=\"/tensors/{ref}\","
                          "status=\"404\"}"),
        1);
    ts_response_free(&r);
    server_stop(srv);
}
END_TEST

START_TEST(test_store_http_openapi)
{
    config cfg;
    ts_config(&cfg);
    server *srv = ts_start(&cfg);
    ts_response r;
    ts_request q = {.path = "/openapi.json"};
    ts_http(server_port(srv), &q, &r);
    ck_assert_int_eq(r.status, 200);
    json_error_t je;
    json_t *j = json_loads(r.body, 0, &je);
    ck_assert_ptr_nonnull(j);
    json_t *paths = json_object_get(j, "paths");
    json_t *up = json_object_get(json_object_get(paths, "/tensors"), "post");
    ck_assert(json_is_object(up));
    json_t *content =
        json_object_get(json_object_get(up, "requestBody"), "content");
    ck_assert(json_is_object(json_object_get(content, "application/json")));
    ck_assert(json_is_object(
        json_object_get(content, "application/octet-stream")));
    static const char *const codes[] = {"200", "201", "404", "413", "415",
                                        "422"};
    for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++)
        ck_assert_msg(json_object_get(json_object_get(up, "responses"),
                                      codes[i]),
                      "POST /tensors lacks %s", codes[i]);
    json_t *one = json_object_get(paths, "/tensors/{ref}");
    ck_assert(json_is_object(json_object_get(one, "get")));
    ck_assert(json_is_object(json_object_get(one, "head")));
    json_decref(j);
    ts_response_free(&r);
    server_stop(srv);
}
END_TEST

/* Eight clients upload the same tensor at once: one 201, seven 200, one
 * entry. */
typedef struct store_client_arg {
    uint16_t port;
    const float *v;
    size_t n;
    pthread_barrier_t *go;
    long status;
} store_client_arg;

static void *store_client(void *p)
{
    store_client_arg *a = p;
    pthread_barrier_wait(a->go);
    ts_response r;
    store_post(a->port, "/tensors?shape=256,256", "application/octet-stream",
               a->v, a->n * sizeof(float), &r);
    a->status = r.status;
    ts_response_free(&r);
    return NULL;
}

START_TEST(test_store_http_concurrent_uploads)
{
    config cfg;
    ts_config(&cfg);
    server *srv = ts_start(&cfg);
    size_t n = 256 * 256;
    float *v = store_values(5, n);
    pthread_barrier_t go;
    pthread_barrier_init(&go, NULL, STORE_THREADS);
    pthread_t th[STORE_THREADS];
    store_client_arg args[STORE_THREADS];
    for (int i = 0; i < STORE_THREADS; i++) {
        args[i] = (store_client_arg){server_port(srv), v, n, &go, 0};
        ck_assert_int_eq(pthread_create(&th[i], NULL, store_client, &args[i]),
                         0);
    }
    int created = 0, again = 0;
    for (int i = 0; i < STORE_THREADS; i++) {
        pthread_join(th[i], NULL);
        created += args[i].status == 201;
        again += args[i].status == 200;
    }
    ck_assert_int_eq(created, 1);
    ck_assert_int_eq(again, STORE_THREADS - 1);
    store_stats st = store_stats_of(srv);
    ck_assert_uint_eq(st.entries, 1);
    ck_assert_uint_eq(st.bytes, STORE_COST(n));
    pthread_barrier_destroy(&go);
    free(v);
    server_stop(srv);
}
END_TEST

Suite *store_suite(void)
{
    Suite *s = suite_create("store");
    TCase *t = tcase_create("store");
    tcase_add_test(t, test_store_sha256_vectors);
    tcase_add_test(t, test_store_ref_parse);
    tcase_add_test(t, test_store_put_get_release);
    tcase_add_test(t, test_store_off);
    tcase_add_test(t, test_store_lru_order);
    tcase_add_test(t, test_store_held_survives_eviction);
    tcase_add_test(t, test_store_put_room_before_copy);
    tcase_add_test(t, test_store_concurrent_same_bytes);
    tcase_add_test(t, test_store_concurrent_stress);
    suite_add_tcase(s, t);
    TCase *h = tcase_create("store_http");
    tcase_add_test(h, test_store_config_option);
    tcase_add_test(h, test_store_http_upload_and_get);
    tcase_add_test(h, test_store_http_errors);
    tcase_add_test(h, test_store_http_off);
    tcase_add_test(h, test_store_http_metrics);
    tcase_add_test(h, test_store_http_concurrent_uploads);
    tcase_add_test(h, test_store_http_openapi);
    suite_add_tcase(s, h);
    return s;
}
