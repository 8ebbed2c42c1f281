/* store.h: the tensor store, a bounded, content-addressed, thread-safe LRU
 * cache of float32 tensors (the contract's "Uploads: the tensor store").
 *
 * A tensor is named by the SHA-256 of its raw little-endian float32 bytes
 * in row-major order, written "sha256:<64 lowercase hex>" (what
 * hashlib.sha256(a.astype("<f4").tobytes()).hexdigest() gives). The store
 * holds at most capacity_bytes, counting a tensor as its values (4 bytes
 * each) and STORE_ENTRY_OVERHEAD bytes of bookkeeping, so many tiny tensors
 * cannot hold more memory than the bound; it forgets least-recently-used
 * tensors to make room.
 *
 * Lookups and puts hand out held tensors: a held tensor is immutable and is
 * never freed under its holder, even when evicted meanwhile (it then leaves
 * the store at once and is freed at its last release). Every function is
 * thread-safe; the store must outlive every tensor it handed out. */
#ifndef ATTND_STORE_H
#define ATTND_STORE_H

#include <stddef.h>
#include <stdint.h>

typedef struct store store;

/* A stored tensor, immutable while held. */
typedef struct store_tensor {
    const float *data; size_t count; /* values, row-major */
    size_t shape[4]; int rank;        /* the shape of the first upload;
                                         shape[rank..3] are 0 */
    char ref[72];                     /* "sha256:<64 hex>" NUL-terminated */
} store_tensor;

/* What each tensor costs against the capacity besides its values: its
 * bookkeeping, in the same allocation as the values. */
#define STORE_ENTRY_OVERHEAD 256

/* Length of a ref without its NUL: "sha256:" and 64 hex digits. */
#define STORE_REF_LEN 71

/* A new, empty store of capacity_bytes. Capacity 0 turns the store off:
 * returns 0 with *out NULL (every function below accepts a NULL store as
 * an empty one). Returns -1 with *out NULL when out of memory. */
int store_new(size_t capacity_bytes, store **out);

/* Frees s and every tensor it holds; accepts NULL. No tensor may still be
 * held. */
void store_free(store *s);

/* Parses s[0..len), which must be exactly "sha256:" and 64 lowercase hex
 * digits, into hash. Returns 0, or -1 when malformed (hash unchanged). */
int store_ref_parse(const char *s, size_t len, unsigned char hash[32]);

/* Writes "sha256:<64 lowercase hex>" of hash, NUL-terminated, into ref. */
void store_ref_format(const unsigned char hash[32], char ref[72]);

/* SHA-256 (OpenSSL's libcrypto) of the little-endian float32 bytes of
 * data[0..count): the hash that names those values. Returns 0, or -1 when
 * libcrypto fails (out of memory). */
int store_hash(const float *data, size_t count, unsigned char hash[32]);

/* Held lookup: the tensor named hash, now the most recently used, counted
 * as a hit; release it with store_release. NULL on a miss (counted) or
 * when s is NULL. */
const store_tensor *store_get(store *s, const unsigned char hash[32]);

/* Gives back a tensor from store_get or store_put; accepts NULL. After the
 * call t may be freed (when it was evicted while held). */
void store_release(store *s, const store_tensor *t);

/* Stores a copy of data (count values, row-major, with shape[0..rank) of
 * rank 1..4 whose product is count) and hands it out held in *out.
 * *created is 1 when the tensor is new, 0 when these bytes were already
 * stored (then the stored shape stands and the tensor becomes the most
 * recently used). To make room it evicts least-recently-used tensors,
 * unheld ones first; a held one that must go leaves the store but lives on
 * until its last release. Concurrent puts of the same bytes store them
 * once. Neither a put nor the lookup inside it counts as a hit or a miss.
 * Returns 0, or -1 with *out NULL and nothing stored: errno EINVAL (s NULL,
 * no values, bad rank or a shape whose product is not count), EFBIG (4 *
 * count + STORE_ENTRY_OVERHEAD is over the capacity) or ENOMEM. */
int store_put(store *s, const float *data, size_t count, const size_t *shape,
              int rank, const store_tensor **out, int *created);

/* What the store holds now (entries, and bytes as charged against the
 * capacity: values plus STORE_ENTRY_OVERHEAD each), its capacity (from
 * store_new) and its lookups and evictions since store_new. All zero for a
 * NULL store. */
typedef struct store_stats {
    size_t entries;
    size_t bytes;
    size_t capacity;
    uint64_t hits, misses, evictions;
} store_stats;

void store_get_stats(store *s, store_stats *st);

#endif
