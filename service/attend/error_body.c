/* error_body.c: the JSON error body {"error":{"code","message","field"}}.
 * "field" is omitted when there is no JSON Pointer to give (the contract:
 * "when there is one"). */
#include "attend/codec.h"
#include "json/text.h"

#include <string.h>

char *codec_error_body(const codec_error *err, size_t *len)
{
    text_buf t = TEXT_BUF_INIT;
    const char *code = errors_code(err->kind);

    /* messages may quote request text (a bad enum value) that holds
     * quotes, control bytes or any UTF-8: text_json_string escapes them */
    text_puts(&t, "{\"error\":{\"code\":");
    text_json_string(&t, code, strlen(code));
    text_puts(&t, ",\"message\":");
    text_json_string(&t, err->message,
                     strnlen(err->message, sizeof err->message));
    if (err->field[0] != '\0') {
        text_puts(&t, ",\"field\":");
        text_json_string(&t, err->field,
                         strnlen(err->field, sizeof err->field));
    }
    text_puts(&t, "}}");
    return text_take(&t, len);
}
