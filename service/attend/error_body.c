/* error_body.c: the JSON error body {"error":{"code","message","field"}}.
 * "field" is omitted when there is no JSON Pointer to give (the contract:
 * "when there is one"). */
#include "attend/codec.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
