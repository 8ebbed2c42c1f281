/* json/numbers.h: float32 <-> shortest decimal text for the codec. The
 * conversions are Debian's dragonbox (shortest round-trip digits) and
 * fast_float (correctly rounded parsing), reached through one C++ shim,
 * json/numbers_cc.cc; the text layout is C, in json/numbers.c, as are the AVX-512
 * runs (digits and texts of eight values at once) that dragonbox checks. */
#ifndef ATTND_CODEC_NUM_H
#define ATTND_CODEC_NUM_H

#include <stddef.h>
#include <stdint.h>

/* Longest text codec_num_format writes, without a NUL. */
#define CODEC_NUM_MAX 16
/* Room codec_num_format needs at buf: it stores eight digits at a time and
 * may write scratch bytes beyond the text it returns. */
#define CODEC_NUM_BUF 32

/* Writes the shortest decimal that reads back (strtof) to the same float32;
 * "null" for a non-finite value (never produced by codec_run). No NUL.
 * buf must have CODEC_NUM_BUF bytes of room. Returns the length, at most
 * CODEC_NUM_MAX. */
size_t codec_num_format(float v, char *buf);

/* codec_num_format of a value whose shortest digits are already known:
 * sig and exp as codec_num_shortest_n gives them for v (sig 0 for zero and
 * non-finite values). */
size_t codec_num_layout(float v, uint32_t sig, int exp, char *buf);

/* The digits codec_num_dragonbox_n gives, eight values at a time with
 * AVX-512 where the CPU has it (json/numbers.c), by dragonbox otherwise. */
void codec_num_shortest_n(const float *v, size_t n, uint32_t *sig, int *exp);
/* 1 when codec_num_shortest_n runs the AVX-512 loop, 0 when dragonbox. */
int codec_num_shortest_simd(void);

/* Most values codec_num_text_n takes in one call. */
#define CODEC_NUM_RUN 64
/* codec_num_format of v[0..n), n <= CODEC_NUM_RUN: the text of v[i] is
 * the first len[i] bytes of text[i], the rest scratch. Both arrays need
 * CODEC_NUM_RUN entries: the AVX-512 loop writes whole groups of eight. */
void codec_num_text_n(const float *v, size_t n, char (*text)[16],
                      unsigned char *len);

/* codec_num_format without the SSSE3 layout: the same text, for machines
 * without it and for the tests that compare the two. */
size_t codec_num_format_portable(float v, char *buf);

/* The C++ shim (json/numbers_cc.cc): Debian's dragonbox and fast_float. */
#ifdef __cplusplus
extern "C" {
#endif
/* Shortest decimal significand and exponent of a finite, nonzero |v|:
 * |v| == *sig * 10^*exp, read back exactly. */
void codec_num_shortest(float v, uint32_t *sig, int *exp);
/* codec_num_shortest of v[0..n), into sig[] and exp[]; sig[i] = 0 (and
 * exp[i] = 0) where v[i] is zero or not finite. dragonbox's own loop: the
 * reference for codec_num_shortest_n. */
void codec_num_dragonbox_n(const float *v, size_t n, uint32_t *sig, int *exp);
/* Nearest float32 / double to the decimal text [first, last), which must be a
 * valid JSON number. Returns 0, or -1 when the text is not all consumed. */
int codec_num_parse_f32(const char *first, const char *last, float *out);
int codec_num_parse_f64(const char *first, const char *last, double *out);
#ifdef __cplusplus
}
#endif

#endif
