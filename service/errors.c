/* errors.c: the error table's lookups and the first-error-wins record. */
#include "errors.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "attn.h"

static const struct {
    int status;
    const char *code;
} errors__table[ERRORS_COUNT] = {
#define ERRORS__ROW(name, status, code) {status, code},
    ERRORS_MAP(ERRORS__ROW)
#undef ERRORS__ROW
};

int errors_http_status(errors_kind kind)
{
    if ((unsigned)kind >= ERRORS_COUNT)
        return 500;
    return errors__table[kind].status;
}

const char *errors_code(errors_kind kind)
{
    if ((unsigned)kind >= ERRORS_COUNT)
        return "internal";
    return errors__table[kind].code;
}

errors_kind errors_from_attn(int status)
{
    switch (status) {
    case ATTN_EINVAL:
    case ATTN_ESHAPE:
    case ATTN_ERANGE:
        return ERRORS_INVALID_REQUEST;
    case ATTN_EOVERFLOW:
        return ERRORS_TOO_LARGE;
    case ATTN_ENOMEM:
        return ERRORS_UNAVAILABLE;
    default:
        return ERRORS_INTERNAL;
    }
}

void codec_error_set(codec_error *err, errors_kind kind, const char *field,
                     const char *fmt, ...)
{
    va_list ap;

    if (err == NULL || err->message[0] != '\0')
        return;
    err->kind = kind;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof err->message, fmt, ap);
    va_end(ap);
    {
        /* a truncated message must not end inside a UTF-8 sequence */
        size_t n = strlen(err->message);
        if (n + 1 == sizeof err->message)
            while (n > 0 && ((unsigned char)err->message[n - 1] & 0x80))
                err->message[--n] = '\0';
    }
    if (err->message[0] == '\0')
        snprintf(err->message, sizeof err->message, "%s", errors_code(kind));
    snprintf(err->field, sizeof err->field, "%s", field ? field : "");
}
