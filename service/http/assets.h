/* assets.h: the dashboard's static files, embedded in the binary at build
 * time (the table is generated under build/gen/ from web/). */
#ifndef ATTND_ASSETS_H
#define ATTND_ASSETS_H

#include <stddef.h>

typedef struct asset {
    const char *path;         /* URL path, "/" for index.html */
    const char *content_type; /* e.g. "text/html; charset=utf-8" */
    const unsigned char *data;
    size_t len;
} asset;

/* The asset served at path, or NULL. */
const asset *assets_find(const char *path);

#endif
