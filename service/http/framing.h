/* framing.h: an HTTP/1.1 request stream cut into heads and bodies (RFC 9112),
 * strictly, without copying: guard.c feeds it what a client sends and
 * passes libmicrohttpd only the bytes this has classified, so a request
 * libmicrohttpd would read differently from a proxy never reaches it. */
#ifndef ATTND_FRAMING_H
#define ATTND_FRAMING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Longest request line (414 beyond) and header section (431 beyond). */
#define FRAMING_MAX_LINE 8192
#define FRAMING_MAX_HEAD 16384
/* Most fields in a header section, and in a trailer section (431 beyond):
 * libmicrohttpd keeps each in its connection's memory, which runs out near
 * 900 short ones, and then answers HTML of its own. */
#define FRAMING_MAX_FIELDS 256

typedef enum framing_state {
    FRAMING_HEAD,       /* a request's head, or nothing yet */
    FRAMING_BODY,       /* Content-Length body: left bytes to come */
    FRAMING_CHUNK_SIZE, /* a chunk-size line */
    FRAMING_CHUNK_DATA, /* left bytes of chunk data */
    FRAMING_CHUNK_END,  /* the CRLF after chunk data */
    FRAMING_TRAILER     /* trailer fields up to the empty line */
} framing_state;

typedef struct framing {
    framing_state state;
    uint64_t left;
    size_t scan;     /* bytes of an unfinished head or line already scanned */
    bool in_head;    /* the head of a request has begun (not just CRLFs) */
    size_t blank;    /* bytes of empty lines before it (at most 64) */
    size_t trailers; /* fields of the trailer section so far */
    char origin[256]; /* the last head's Origin, for a raw answer's CORS */
} framing;

/* A framing error: the answer to send and why. */
typedef struct framing_error {
    int status;       /* 0: none */
    const char *code; /* the contract's error code */
    char message[200];
} framing_error;

/* Classifies the front of buf[0..len): returns how many bytes are whole
 * parts of the stream (deliverable as they are); the rest is an unfinished
 * head or line to present again, with more bytes after it. When the
 * bytes after the returned count break the framing, err->status is set.
 * Body bytes are classified as they come. */
size_t framing_scan(framing *f, const char *buf, size_t len,
                    framing_error *err);

/* Body bytes that may be read straight into the reader's buffer now: the
 * rest of a Content-Length body or of a chunk's data, 0 elsewhere. */
uint64_t framing_direct(const framing *f);

/* Whether f is inside a request's body. */
bool framing_in_body(const framing *f);

#endif
