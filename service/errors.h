/* errors.h: the one table that maps every failure to its HTTP status and
 * contract error code, the library-status mapping, and the error record
 * (codec_error) that every layer fills, first error wins. */
#ifndef ATTND_ERRORS_H
#define ATTND_ERRORS_H

#include <stddef.h>

/* X(name, http_status, contract code) */
#define ERRORS_MAP(X)                                                         \
    X(INVALID_JSON, 400, "invalid_json")                                      \
    X(INVALID_REQUEST, 422, "invalid_request")                                \
    X(UNKNOWN_REF, 422, "unknown_ref")                                        \
    X(TOO_LARGE, 413, "too_large")                                            \
    X(UNSUPPORTED_MEDIA_TYPE, 415, "unsupported_media_type")                  \
    X(METHOD_NOT_ALLOWED, 405, "method_not_allowed")                          \
    X(NOT_FOUND, 404, "not_found")                                            \
    X(UNAVAILABLE, 503, "unavailable")                                        \
    X(BAD_REQUEST, 400, "bad_request")                                        \
    X(REQUEST_TIMEOUT, 408, "request_timeout")                                \
    X(URI_TOO_LONG, 414, "too_large")                                         \
    X(HEADERS_TOO_LARGE, 431, "too_large")                                    \
    X(UNSUPPORTED_VERSION, 505, "unsupported_version")                        \
    X(INTERNAL, 500, "internal")

typedef enum errors_kind {
#define ERRORS__ENUM(name, status, code) ERRORS_##name,
    ERRORS_MAP(ERRORS__ENUM)
#undef ERRORS__ENUM
    ERRORS_COUNT
} errors_kind;

/* HTTP status and contract code of a kind (static strings). */
int errors_http_status(errors_kind kind);
const char *errors_code(errors_kind kind);

/* Kind for a negative attn_status from the library: ESHAPE/EINVAL and
 * ERANGE (finite inputs whose products overflow float32) are request errors
 * (422), EOVERFLOW is too_large (413), ENOMEM is 503
 * (transient), anything else internal (500). */
errors_kind errors_from_attn(int status);

/* One error, filled by the first failure (first error wins). Zero it
 * before the first call that may fill it. */
typedef struct codec_error {
    errors_kind kind;
    char message[512]; /* what was expected and what was found */
    char field[512];   /* JSON Pointer (RFC 6901) or "" when none */
} codec_error;

/* Fills err unless it already holds an error (first error wins).
 * field may be NULL. */
void codec_error_set(codec_error *err, errors_kind kind, const char *field,
                     const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#endif
