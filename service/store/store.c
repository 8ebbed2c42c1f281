/* store.c: the tensor store: a hash table of entries keyed by SHA-256, an
 * LRU list through the same entries, and reference counts, all under one
 * mutex. The expensive work of a put (hashing, copying the values, freeing
 * evicted tensors) runs outside the mutex, so lookups by concurrent
 * requests never wait behind a multi-megabyte copy. A put makes room for
 * its copy, and reserves it, before copying: the stored tensors and the
 * copies being made stay within the capacity together. */
#include "store/store.h"

#include <errno.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "refs hash the little-endian bytes of float32 values; this host is not little-endian"
#endif

/* Values start this many bytes into their entry's allocation, aligned like
 * a cache line so vector loads over a stored weight never split one. */
#define STORE__ALIGN 64

/* One stored tensor and its bookkeeping, in one allocation with its values. */
typedef struct store__entry {
    store_tensor t; /* first: a handed-out store_tensor * is its entry */
    unsigned char hash[32];
    size_t refs;  /* holders (store_get, store_put) not yet released */
    bool linked;  /* in the table and the LRU list; false once evicted */
    struct store__entry *chain;      /* next in the bucket, or in a list of
                                        entries to free */
    struct store__entry *newer, *older; /* LRU list */
} store__entry;

#define STORE__HEADER \
    ((sizeof(store__entry) + STORE__ALIGN - 1) / STORE__ALIGN * STORE__ALIGN)
_Static_assert(STORE__HEADER <= STORE_ENTRY_OVERHEAD,
               "an entry's bookkeeping outgrew what store.h charges for it");

/* What a tensor of count values costs against the capacity. */
static size_t store__cost(size_t count)
{
    return STORE_ENTRY_OVERHEAD + count * sizeof(float);
}

struct store {
    pthread_mutex_t mu;
    size_t capacity;          /* bytes, as store__cost counts them */
    store__entry **buckets;   /* nbuckets, a power of two */
    size_t nbuckets;
    store__entry *newest, *oldest;
    size_t entries, bytes;
    size_t reserved;          /* bytes of the copies puts are making */
    pthread_cond_t room;      /* signalled when a reservation ends */
    uint64_t hits, misses, evictions;
};

/* Bytes neither stored nor reserved. bytes + reserved never exceeds the
 * capacity: a put reserves only what is free. */
static size_t store__free_bytes(const store *s)
{
    return s->capacity - s->bytes - s->reserved;
}

static const char store__hex[] = "0123456789abcdef";

/* -- names ------------------------------------------------------------------ */

int store_hash(const float *data, size_t count, unsigned char hash[32])
{
    static const float none = 0;
    unsigned int len = 0;
    if (count > SIZE_MAX / sizeof(float))
        return -1;
    /* The values are already little-endian float32 bytes (see the #error
     * above), so they are hashed in place. */
    if (EVP_Digest(count ? (const void *)data : (const void *)&none,
                   count * sizeof(float), hash, &len, EVP_sha256(),
                   NULL) != 1 || len != 32)
        return -1;
    return 0;
}

static int store__hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1; /* upper case too: a ref is written in lower case only */
}

int store_ref_parse(const char *s, size_t len, unsigned char hash[32])
{
    unsigned char h[32];
    if (len != STORE_REF_LEN || memcmp(s, "sha256:", 7))
        return -1;
    for (size_t i = 0; i < 32; i++) {
        int hi = store__hexval(s[7 + 2 * i]), lo = store__hexval(s[8 + 2 * i]);
        if (hi < 0 || lo < 0)
            return -1;
        h[i] = (unsigned char)(hi << 4 | lo);
    }
    memcpy(hash, h, sizeof h);
    return 0;
}

void store_ref_format(const unsigned char hash[32], char ref[72])
{
    memcpy(ref, "sha256:", 7);
    for (size_t i = 0; i < 32; i++) {
        ref[7 + 2 * i] = store__hex[hash[i] >> 4];
        ref[8 + 2 * i] = store__hex[hash[i] & 15];
    }
    ref[STORE_REF_LEN] = '\0';
}

/* -- table and LRU list (callers hold s->mu) --------------------------------- */

static size_t store__bucket(const store *s, const unsigned char hash[32])
{
    uint64_t k;
    memcpy(&k, hash, sizeof k); /* SHA-256 bits are uniform already */
    return (size_t)k & (s->nbuckets - 1);
}

static store__entry *store__find(const store *s, const unsigned char hash[32])
{
    store__entry *e = s->buckets[store__bucket(s, hash)];
    while (e && memcmp(e->hash, hash, 32))
        e = e->chain;
    return e;
}

static void store__lru_unlink(store *s, store__entry *e)
{
    if (e->newer)
        e->newer->older = e->older;
    else
        s->newest = e->older;
    if (e->older)
        e->older->newer = e->newer;
    else
        s->oldest = e->newer;
    e->newer = e->older = NULL;
}

static void store__lru_push(store *s, store__entry *e)
{
    e->newer = NULL;
    e->older = s->newest;
    if (s->newest)
        s->newest->newer = e;
    else
        s->oldest = e;
    s->newest = e;
}

static void store__touch(store *s, store__entry *e)
{
    if (s->newest != e) {
        store__lru_unlink(s, e);
        store__lru_push(s, e);
    }
}

/* Doubles the bucket array when the table is full; on failure the chains
 * simply grow longer. */
static void store__grow(store *s)
{
    if (s->entries < s->nbuckets || s->nbuckets > SIZE_MAX / 2 / sizeof(void *))
        return;
    size_t n = s->nbuckets * 2;
    store__entry **b = calloc(n, sizeof *b);
    if (!b)
        return;
    store__entry **old = s->buckets;
    size_t old_n = s->nbuckets;
    s->buckets = b;
    s->nbuckets = n;
    for (size_t i = 0; i < old_n; i++)
        for (store__entry *e = old[i], *next; e; e = next) {
            next = e->chain;
            size_t k = store__bucket(s, e->hash);
            e->chain = b[k];
            b[k] = e;
        }
    free(old);
}

static void store__insert(store *s, store__entry *e)
{
    store__grow(s);
    size_t k = store__bucket(s, e->hash);
    e->chain = s->buckets[k];
    s->buckets[k] = e;
    store__lru_push(s, e);
    e->linked = true;
    s->entries++;
    s->bytes += store__cost(e->t.count);
}

/* Takes e out of the table and the LRU list; its memory stays. */
static void store__remove(store *s, store__entry *e)
{
    store__entry **pp = &s->buckets[store__bucket(s, e->hash)];
    while (*pp != e)
        pp = &(*pp)->chain;
    *pp = e->chain;
    e->chain = NULL;
    store__lru_unlink(s, e);
    e->linked = false;
    s->entries--;
    s->bytes -= store__cost(e->t.count);
}

/* Evicts until need more bytes fit, oldest first: unheld tensors in a first
 * pass, then held ones (they leave the store and are freed at their last
 * release). Unheld evictees are chained onto *dead for the caller to free
 * after unlocking. need is at most the capacity, so this succeeds unless
 * other puts' reservations take the room. */
static void store__make_room(store *s, size_t need, store__entry **dead)
{
    for (int pass = 0; pass < 2 && store__free_bytes(s) < need; pass++)
        for (store__entry *e = s->oldest, *newer;
             e && store__free_bytes(s) < need; e = newer) {
            newer = e->newer;
            if (pass == 0 && e->refs)
                continue;
            store__remove(s, e);
            s->evictions++;
            if (!e->refs) {
                e->chain = *dead;
                *dead = e;
            }
        }
}

static void store__free_list(store__entry *e)
{
    while (e) {
        store__entry *next = e->chain;
        free(e);
        e = next;
    }
}

/* -- the store -------------------------------------------------------------- */

int store_new(size_t capacity_bytes, store **out)
{
    *out = NULL;
    if (capacity_bytes == 0)
        return 0;
    store *s = calloc(1, sizeof *s);
    if (!s)
        return -1;
    s->capacity = capacity_bytes;
    s->nbuckets = 64;
    s->buckets = calloc(s->nbuckets, sizeof *s->buckets);
    if (!s->buckets || pthread_mutex_init(&s->mu, NULL)) {
        free(s->buckets);
        free(s);
        return -1;
    }
    if (pthread_cond_init(&s->room, NULL)) {
        pthread_mutex_destroy(&s->mu);
        free(s->buckets);
        free(s);
        return -1;
    }
    *out = s;
    return 0;
}

void store_free(store *s)
{
    if (!s)
        return;
    store__entry *e = s->newest;
    while (e) {
        store__entry *older = e->older;
        free(e);
        e = older;
    }
    free(s->buckets);
    pthread_cond_destroy(&s->room);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

const store_tensor *store_get(store *s, const unsigned char hash[32])
{
    if (!s)
        return NULL;
    pthread_mutex_lock(&s->mu);
    store__entry *e = store__find(s, hash);
    if (e) {
        e->refs++;
        store__touch(s, e);
        s->hits++;
    } else {
        s->misses++;
    }
    pthread_mutex_unlock(&s->mu);
    return e ? &e->t : NULL;
}

void store_release(store *s, const store_tensor *t)
{
    if (!s || !t)
        return;
    store__entry *e = (store__entry *)(void *)t;
    pthread_mutex_lock(&s->mu);
    bool dead = --e->refs == 0 && !e->linked;
    pthread_mutex_unlock(&s->mu);
    if (dead)
        free(e);
}

/* Looks hash up for a put: held and most recently used when present. */
static store__entry *store__hold(store *s, const unsigned char hash[32])
{
    store__entry *e = store__find(s, hash);
    if (e) {
        e->refs++;
        store__touch(s, e);
    }
    return e;
}

int store_put(store *s, const float *data, size_t count, const size_t *shape,
              int rank, const store_tensor **out, int *created)
{
    *out = NULL;
    *created = 0;
    if (!s || rank < 1 || rank > 4 || count == 0 || !data) {
        errno = EINVAL;
        return -1;
    }
    size_t product = 1;
    for (int i = 0; i < rank; i++) {
        if (shape[i] == 0 || product > SIZE_MAX / shape[i]) {
            errno = EINVAL;
            return -1;
        }
        product *= shape[i];
    }
    if (product != count) {
        errno = EINVAL;
        return -1;
    }
    if (s->capacity < STORE_ENTRY_OVERHEAD ||
        count > (s->capacity - STORE_ENTRY_OVERHEAD) / sizeof(float)) {
        errno = EFBIG;
        return -1;
    }
    size_t bytes = count * sizeof(float), cost = store__cost(count);

    /* pass 1: name the values, and hold them if they are stored already;
     * else evict to make room for them and reserve it, waiting while
     * other puts' copies take it (each ends its reservation soon, with or
     * without a tensor) */
    unsigned char hash[32];
    if (store_hash(data, count, hash)) {
        errno = ENOMEM;
        return -1;
    }
    store__entry *dead = NULL;
    pthread_mutex_lock(&s->mu);
    store__entry *e = store__hold(s, hash);
    while (!e) {
        store__make_room(s, cost, &dead);
        if (store__free_bytes(s) >= cost) {
            s->reserved += cost;
            break;
        }
        pthread_cond_wait(&s->room, &s->mu);
        e = store__hold(s, hash);
    }
    pthread_mutex_unlock(&s->mu);
    store__free_list(dead);
    if (e) {
        *out = &e->t;
        return 0;
    }

    /* pass 2: copy them without the lock, into the room reserved. A
     * concurrent put of the same bytes may copy too; pass 3 keeps the
     * first to arrive. */
    store__entry *n = malloc(STORE__HEADER + bytes);
    if (!n) {
        pthread_mutex_lock(&s->mu);
        s->reserved -= cost;
        pthread_cond_broadcast(&s->room);
        pthread_mutex_unlock(&s->mu);
        errno = ENOMEM;
        return -1;
    }
    memset(n, 0, sizeof *n);
    float *values = (float *)(void *)((char *)n + STORE__HEADER);
    memcpy(values, data, bytes);
    n->t.data = values;
    n->t.count = count;
    n->t.rank = rank;
    for (int i = 0; i < rank; i++)
        n->t.shape[i] = shape[i];
    store_ref_format(hash, n->t.ref);
    memcpy(n->hash, hash, sizeof hash);
    n->refs = 1;

    /* pass 3: insert into the room reserved, unless another put got there
     * first */
    pthread_mutex_lock(&s->mu);
    s->reserved -= cost;
    e = store__hold(s, hash);
    if (!e)
        store__insert(s, n);
    pthread_cond_broadcast(&s->room);
    pthread_mutex_unlock(&s->mu);
    if (e) {
        free(n);
        *out = &e->t;
        return 0;
    }
    *out = &n->t;
    *created = 1;
    return 0;
}

void store_get_stats(store *s, store_stats *st)
{
    memset(st, 0, sizeof *st);
    if (!s)
        return;
    pthread_mutex_lock(&s->mu);
    st->entries = s->entries;
    st->bytes = s->bytes;
    st->capacity = s->capacity;
    st->hits = s->hits;
    st->misses = s->misses;
    st->evictions = s->evictions;
    pthread_mutex_unlock(&s->mu);
}
