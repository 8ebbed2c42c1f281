/* errors.c: the error table's lookups. */
#include "errors.h"

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
