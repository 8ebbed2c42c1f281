/* codec_error.c: the codec's error record (first error wins) and the JSON
 * error body {"error":{"code","message","field"}}. "field" is omitted when
 * there is no JSON Pointer to give (the contract: "when there is one"). */
#include "codec.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

char *codec_error_body(const codec_error *err, size_t *len)
{
    json_t *root, *obj;
    char *s;

    /* jansson escapes the message and pointer; messages may quote request
     * text (a bad enum value) that holds quotes or any UTF-8. */
    root = json_object();
    obj = json_object();
    if (root == NULL || obj == NULL || json_object_set_new(root, "error", obj)) {
        json_decref(root);
        if (root == NULL)
            json_decref(obj);
        return NULL;
    }
    if (json_object_set_new(obj, "code", json_string(errors_code(err->kind))) ||
        json_object_set_new(obj, "message",
                            json_stringn(err->message, strnlen(err->message,
                                                     sizeof err->message))) ||
        (err->field[0] != '\0' &&
         json_object_set_new(obj, "field",
                             json_stringn(err->field,
                                          strnlen(err->field,
                                                  sizeof err->field))))) {
        json_decref(root);
        return NULL;
    }
    s = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(root);
    if (s != NULL && len != NULL)
        *len = strlen(s);
    return s;
}
