/* json.h: the JSON reader and the numeric-array parser the request codec
 * is built on: a cursor over the body (reader.c), plain numbers and runs of
 * them (rows.c, numbers.c), nested arrays and base64 tensor objects into
 * owned float or boolean buffers (tensor.c, tensor_object.c). Knows
 * nothing of attention: errors are reported through the codec_error of
 * errors.h. */
#ifndef ATTND_JSON_H
#define ATTND_JSON_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "errors.h"
#include "json/numbers.h"

/* -- JSON reader (reader.c) --------------------------------------------- */

/* A cursor over the request body. Syntax errors are reported as
 * ERRORS_INVALID_JSON with line and column computed from the offset. */
typedef struct codec_refs codec_refs;
typedef struct codec_reader {
    const char *start, *p, *end;
    int depth;
    const codec_refs *refs; /* resolves {"ref": ...} tensors; NULL: none */
    /* non-NULL: a tensor object holding "ref" is refused, invalid_request
     * at its "ref" with this message, whatever refs is (where the values
     * themselves are wanted, as in an upload) */
    const char *ref_refused;
} codec_reader;

/* A reader at the start of body[0..len), resolving refs through refs
 * (may be NULL: a {"ref": ...} tensor is then an unknown ref). */
static inline void codec_reader_init(codec_reader *r, const char *body,
                                     size_t len, const codec_refs *refs)
{
    r->start = r->p = body;
    r->end = body + len;
    r->depth = 0;
    r->refs = refs;
    r->ref_refused = NULL;
}

/* Deepest nesting the reader accepts (jansson's limit is 2048). */
#define CODEC_MAX_DEPTH 512

/* Skips JSON whitespace. Inline: it runs twice per number in the arrays. */
static inline void codec_json_ws(codec_reader *r)
{
    const char *p = r->p, *end = r->end;
    while (p < end && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t'))
        p++;
    r->p = p;
}

/* Sets an invalid_json error at r->p: "<what> at line L, column C". */
void codec_json_syntax(const codec_reader *r, codec_error *err,
                       const char *what);

/* Reads a string at r->p (which must be '"'). On success *s and *len are the raw
 * content between the quotes (escapes not decoded) and *escaped tells whether
 * it holds any backslash. Validates escapes and UTF-8. Returns 0 or -1. */
int codec_json_string(codec_reader *r, const char **s, size_t *len,
                      int *escaped, codec_error *err);

/* Decodes the escapes of a raw string content into a malloc'd NUL-terminated
 * buffer (caller frees); NULL when out of memory. The content must have passed
 * codec_json_string. */
char *codec_json_unescape(const char *s, size_t len, size_t *out_len);

/* Scans a number at r->p per RFC 8259 and converts it to the nearest float32
 * (*finite is 0 when it is out of float32 range). Returns 0 or -1. */
int codec_json_number(codec_reader *r, float *out, int *finite,
                      codec_error *err);

/* The common case of codec_json_number in one pass, inline for the
 * numeric arrays' inner loop: a number of at most 19 significant digits
 * with an exponent of at most four
 * digits, converted by codec__f32_of_decimal. Digits are read eight bytes
 * at a time (SWAR) where the body has eight bytes left. Returns 1 with
 * *out and *e (the number's end) set, 0 otherwise (the number is left to
 * codec_json_number's fast_float path); never consumes. */
static inline uint64_t codec__load8(const char *p)
{
    uint64_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* How many of the (little-endian) bytes of v, from the first, are ASCII
 * digits: 0 to 8. A byte below '0' sets its high bit in v - '0' (a borrow
 * then only disturbs later bytes); a byte above '9' sets it in v + 0x46,
 * or, from 0xba up, in v - '0'. */
static inline int codec__digit_run(uint64_t v)
{
    uint64_t bad = ((v - UINT64_C(0x3030303030303030)) |
                    (v + UINT64_C(0x4646464646464646))) &
                   UINT64_C(0x8080808080808080);
    return bad ? __builtin_ctzll(bad) >> 3 : 8;
}

/* The value of eight digits (byte values 0 to 9, not ASCII), the most
 * significant in the lowest byte: pairs, then quads, then the two halves
 * combined by multiplication. */
static inline uint32_t codec__swar8(uint64_t v)
{
    v = (v * 10) + (v >> 8);
    v = (((v & UINT64_C(0x000000FF000000FF)) *
          (100 + (UINT64_C(1000000) << 32))) +
         (((v >> 16) & UINT64_C(0x000000FF000000FF)) *
          (1 + (UINT64_C(10000) << 32)))) >>
        32;
    return (uint32_t)v;
}

/* The value of k (1..8) leading digit bytes of v: the digits are moved to
 * the end of an eight-digit field padded with '0' and valued by
 * codec__swar8. */
static inline uint32_t codec__digits_value(uint64_t v, int k)
{
    if (k < 8)
        v = (v << (8 * (8 - k))) |
            (UINT64_C(0x3030303030303030) >> (8 * k));
    return codec__swar8(v - UINT64_C(0x3030303030303030));
}

/* Reads a run of digits at *pp into *mant, counting them in *count; returns
 * the number read. */
static inline int codec__read_digits(const char **pp, const char *end,
                                     uint64_t *mant, int *count)
{
    static const uint64_t pow10_8[9] = {1,      10,      100,      1000,
                                        10000,  100000,  1000000,  10000000,
                                        100000000};
    const char *p = *pp;
    int total = 0;

    while (end - p >= 8) {
        int k = codec__digit_run(codec__load8(p));
        if (k == 0)
            break;
        if (*count + k > 19) {
            *count += k; /* too many: the caller takes the slow path */
            return total + k;
        }
        *mant = *mant * pow10_8[k] + codec__digits_value(codec__load8(p), k);
        *count += k;
        total += k;
        p += k;
        if (k < 8)
            break;
    }
    if (end - p < 8)
        while (p < end && *p >= '0' && *p <= '9') {
            *mant = *mant * 10 + (uint64_t)(*p++ - '0');
            ++*count;
            total++;
        }
    *pp = p;
    return total;
}

/* 10^q for q in [-128, 127] (index q + 128), each the double nearest to it
 * (reader.c). */
extern const double codec__pow10_q[256];

/* How far, in units in the last place of a double, the double
 * codec__f32_of_decimal computes may lie from the decimal when it is not
 * Clinger's exact case: fl(mant) and fl(10^-q) are each within half a unit
 * of their values and the division adds half a unit, 3 * 2^-53 of
 * relative error, under 3.01 units of the result. Twice that is kept clear
 * of every float midpoint. */
#define CODEC__F32_SLACK 8

/* Stores at out the float32 nearest to (neg ? -1 : 1) * mant * 10^q, ties
 * to even, as fast_float would: 1, or 0 when this cannot be sure of it
 * (the caller then asks fast_float). mant has at most 19 digits.
 *
 * d = fl(mant) / fl(10^-q) is the double nearest to the decimal x when
 * mant <= 2^53 and -22 <= q <= 0 (both exact: Clinger's fast path), and
 * otherwise within CODEC__F32_SLACK units of it. Rounding to float32 keeps
 * the top 24 of a double's 53 significant bits; the float midpoints, where
 * the rounding of x turns, are the doubles whose 29 low bits are exactly
 * 1 << 28. When d's low bits are further than the error from that, no
 * midpoint lies between d and x, and (float)d is the float nearest to x:
 * the answer of Eisel-Lemire's 128-bit product, here from one division.
 * The window is 17 in 2^29 of a uniform spread; decimals written from
 * float32 values, with any number of digits, sit next to a float, never
 * in it. The float32 subnormal and overflow ranges, and exponents beyond
 * the table, are left to fast_float too. */
static inline int codec__f32_of_decimal(uint64_t mant, int q, unsigned neg,
                                        float *out)
{
    double d;
    uint64_t bits, low;
    uint32_t fbits;
    float f;

    if (mant == 0) {
        f = 0.0f;
    } else {
        if (q < -127 || q > 127)
            return 0;
        d = (double)mant / codec__pow10_q[128 - q];
        memcpy(&bits, &d, sizeof bits);
        low = bits & ((UINT64_C(1) << 29) - 1);
        if (mant <= (UINT64_C(1) << 53) && q >= -22 && q <= 0
                ? low == (UINT64_C(1) << 28)
                : low - ((UINT64_C(1) << 28) - CODEC__F32_SLACK) <=
                      2 * CODEC__F32_SLACK)
            return 0; /* on, or too near, a float midpoint */
        if (d < 0x1p-126 || d > 0x1.fffffep127)
            return 0; /* float subnormal or overflow */
        f = (float)d;
    }
    /* the sign as a bit, not a branch: signs are random in real weights */
    memcpy(&fbits, &f, sizeof fbits);
    fbits ^= (uint32_t)neg << 31;
    memcpy(out, &fbits, sizeof fbits);
    return 1;
}

static inline int codec_json_number_fast(const char *p, const char *end,
                                         float *out, const char **e)
{
    uint64_t mant = 0;
    int count = 0, frac;
    unsigned neg = 0;
    int exp = 0;

    if (p < end && *p == '-') {
        neg = 1;
        p++;
    }
    if (p >= end || *p < '0' || *p > '9')
        return 0;
    if (*p == '0')
        p++; /* a leading zero stands alone */
    else
        codec__read_digits(&p, end, &mant, &count);
    if (p < end && *p == '.') {
        const char *point = ++p;
        if (mant == 0) /* "0.000345...": the zeros are not digits to keep */
            while (p < end && *p == '0')
                p++;
        if (p - point > 1000)
            return 0;
        frac = (int)(p - point) + codec__read_digits(&p, end, &mant, &count);
        if (frac == 0)
            return 0;
        exp = -frac;
    }
    if (count > 19)
        return 0;
    if (p < end && (*p == 'e' || *p == 'E')) {
        int eneg = 0, ev = 0;
        p++;
        if (p < end && (*p == '+' || *p == '-'))
            eneg = *p++ == '-';
        if (p >= end || *p < '0' || *p > '9')
            return 0;
        while (p < end && *p >= '0' && *p <= '9') {
            if (ev > 1000)
                return 0;
            ev = ev * 10 + (*p++ - '0');
        }
        exp += eneg ? -ev : ev;
    }
    if (!codec__f32_of_decimal(mant, exp, neg, out))
        return 0;
    *e = p;
    return 1;
}

/* Reads a run of compact plain decimals "v,v,...,v" at *pp into out, at
 * most room of them, as long as each is one codec_json_number_fast takes
 * without an exponent, followed by ',' or ']'. Returns how many it read,
 * with *pp just past the last one (at its ',' or ']'); 0 and *pp unchanged
 * when it takes none. The values are exactly codec_json_number's.
 * out[k..room) may be left with scratch values. */
size_t codec_json_row(const char **pp, const char *end, float *out,
                      size_t room);

/* codec_json_row for every form a client writes: also with JSON
 * whitespace before each number (", " and the newline and indentation
 * of json.dumps(indent=2)) and exponents of one or two digits ("1e-05",
 * "3.4028235e+38"). A number followed by whitespace (the last of a row,
 * indented) ends the run, for codec_json_number. */
size_t codec_json_row_any(const char **pp, const char *end, float *out,
                          size_t room);

/* For tests: limits codec_json_row and codec_json_row_any to the loops
 * up to isa (3: AVX-512 at fixed strides, then the others; 2: AVX-512 then
 * SSSE3; 1: SSSE3; 0: none; when the CPU has them; a negative isa: all it
 * has). Returns the level now in use. */
int codec__row_isa(int isa);

/* The AVX-512 loop of codec_json_row (any 0) and codec_json_row_any (any
 * 1), json/rows_avx512.c: the same contract, for CPUs that have it
 * (codec__row_isa 2). */
size_t codec__row_avx512(const char **pp, const char *end, float *out,
                         size_t room, int any);

/* The same at fixed strides, for plain decimals (codec__row_isa 3). */
size_t codec__row_stride(const char **pp, const char *end, float *out,
                         size_t room, int any);

/* Like codec_json_number but to the nearest double. */
int codec_json_number_d(codec_reader *r, double *out, codec_error *err);

/* Walks the members of an object. Call with r->p just past its '{' and
 * *first set to 1. Each call returns 1 with the member's raw key (as
 * codec_json_string gives it) and r->p at its value, which the caller must
 * consume before the next call; 0 once the closing '}' is consumed; -1 on a
 * syntax error (err filled). */
int codec_json_member(codec_reader *r, int *first, const char **key,
                      size_t *len, int *escaped, codec_error *err);

/* Walks the elements of an array, like codec_json_member: call with r->p
 * just past its '[' and *first set to 1. Returns 1 with r->p at the next
 * element, which the caller consumes; 0 once the closing ']' is consumed;
 * -1 on a syntax error. */
int codec_json_element(codec_reader *r, int *first, codec_error *err);

/* What a Content-Type names: JSON (application/json or application/...+json)
 * or raw float32 bytes (application/octet-stream), parameters such as
 * charset allowed, case-insensitive; anything else (or NULL) is other. */
typedef enum codec_media {
    CODEC_MEDIA_OTHER = 0,
    CODEC_MEDIA_JSON = 1,
    CODEC_MEDIA_OCTETS = 2
} codec_media;
codec_media codec_media_of(const char *type);

/* The name of names[0..count) closest to key[0..len) within two edits
 * (insertions, deletions, substitutions, swaps of neighbours), for a "did
 * you mean" in messages; NULL when none is that close. */
const char *codec_json_closest(const char *key, size_t len,
                               const char *const *names, size_t count);

/* Writes into buf (cap bytes, NUL-terminated) the JSON Pointer (RFC 6901)
 * of the member key[0..len) (decoded, well-formed UTF-8) of the object at
 * the pointer `where`: where, '/', and the key with '~' written "~0" and
 * '/' written "~1". Every other character stays as it is, non-ASCII,
 * quotes and control characters included: a pointer is a Unicode string,
 * and whoever writes it into JSON escapes it. A pointer longer than cap,
 * or a key holding U+0000 (a C string cannot), is cut at a character
 * boundary. */
void codec_json_pointer(char *buf, size_t cap, const char *where,
                        const char *key, size_t len);

/* Most bytes of a key codec_json_quote_key shows. */
#define CODEC_QUOTE_KEY_MAX 64

/* s[0..len) (well-formed UTF-8) as a JSON string, quotes included, for
 * a message that shows request text: written by text_json_string (quotes
 * and control characters escaped, UTF-8 as it is), its first max bytes at
 * most (cut at a character boundary, then "..." after the closing quote).
 * Returns a malloc'd string the caller frees, or NULL when out of
 * memory. */
char *codec_json_quote(const char *s, size_t len, size_t max);

/* codec_json_quote of a key (or any short value), at most
 * CODEC_QUOTE_KEY_MAX bytes of it. */
char *codec_json_quote_key(const char *key, size_t len);

/* Skips one value of any kind, validating its syntax. Returns 0 or -1. */
int codec_json_skip(codec_reader *r, codec_error *err);

/* Consumes the literal lit ("true", "false", "null") at r->p. */
int codec_json_literal(codec_reader *r, const char *lit, codec_error *err);

/* A word naming the kind of value starting at r->p, for messages
 * ("a string", "an object", "a number", ...). */
const char *codec_json_kind(const codec_reader *r);

/* -- numeric arrays and tensors (tensor.c, tensor_object.c) ---------- */

/* An owned row-major array with its shape, as parsed from one field. */
typedef struct codec_array {
    void *data;       /* float (CODEC_LEAF_F32), uint8_t (CODEC_LEAF_BOOL)
                         or int64_t (CODEC_LEAF_INDEX) */
    size_t shape[4];
    int rank;
    size_t count;     /* product of shape */
    int tensor;       /* given as a tensor object (pointers differ) */
    const void *hold; /* non-NULL: data is borrowed from a stored tensor,
                         given back through refs->release */
    const codec_refs *refs;
    char ref[72];     /* the ref it was given by, or "" */
} codec_array;

typedef enum codec_leaf {
    CODEC_LEAF_F32 = 0,
    CODEC_LEAF_BOOL = 1,
    CODEC_LEAF_INDEX = 2 /* integers >= 0 (positions, token indices) */
} codec_leaf;

/* How a {"ref": "sha256:<hex>"} tensor finds its values. resolve fills a
 * (data borrowed, a->hold set, shape and count of the stored tensor) and
 * returns 0, or returns -1 with err filled (invalid_request for a malformed
 * ref, unknown_ref when it is not stored; ptr is the field's pointer).
 * release gives a hold back; put stores a tensor (for `store: true`). */
struct codec_refs {
    int (*resolve)(void *ctx, const char *ref, size_t len, const char *ptr,
                   codec_array *a, codec_error *err);
    void (*release)(void *ctx, const void *hold);
    /* Stores a copy of data (count values of the given shape) and writes
     * its ref, NUL-terminated, to ref; 0, or -1 when it cannot be kept. */
    int (*put)(void *ctx, const float *data, size_t count,
               const size_t *shape, int rank, char ref[72]);
    void *ctx;
};

/* Parses the value at r->p (a nested array, or for CODEC_LEAF_F32 also a
 * tensor object) whose rank must lie in [min_rank, max_rank]. ptr is the
 * field's JSON Pointer ("/x"); shape_doc describes the accepted shapes for
 * messages ("[n][d_model] or [B][n][d_model]"). On success *a owns its data;
 * on failure *a is empty, err is filled (invalid_json or invalid_request). */
int codec_array_parse(codec_reader *r, const char *ptr, const char *shape_doc,
                      codec_leaf leaf, int min_rank, int max_rank,
                      codec_array *a, codec_error *err);

/* Frees a's data (or gives its hold back) and empties it; accepts an empty
 * array. */
void codec_array_clear(codec_array *a);

/* Writes into buf the JSON Pointer of dimension k of a field (the first
 * element along that axis, or "/shape/k" for a tensor object). */
void codec_array_dim_ptr(const codec_array *a, const char *ptr, int k,
                         char *buf, size_t cap);

/* Standard base64 (RFC 4648, with padding) of n bytes taken as the
 * little-endian bytes of floats: encodes whole 3-byte groups of the byte
 * range [from, to) of the float array; writes 4 chars per group. to - from
 * must be a multiple of 3 unless to is the end (then padding is written).
 * Returns the number of chars written. */
size_t codec_base64_f32(const float *v, size_t total_bytes, size_t from,
                        size_t to, char *out);

#endif
