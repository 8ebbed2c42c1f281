/* limits_config.h: per-request limits. Each has a command-line flag and an
 * environment variable (config.c) and is named in the 413 message. */
#ifndef ATTND_LIMITS_H
#define ATTND_LIMITS_H

#include <stddef.h>
#include <stdint.h>

typedef struct limits_config {
    size_t max_body_bytes;   /* --max-body-bytes   ATTND_MAX_BODY_BYTES */
    size_t max_dim;          /* --max-dim          ATTND_MAX_DIM: any of n, m,
                                d_model, d_mem, d_k, d_v, d_out */
    size_t max_batch;        /* --max-batch        ATTND_MAX_BATCH */
    size_t max_heads;        /* --max-heads        ATTND_MAX_HEADS */
    size_t max_map_elems;    /* --max-map-elems    ATTND_MAX_MAP_ELEMS:
                                attention-map values returned */
    uint64_t max_flops;      /* --max-flops        ATTND_MAX_FLOPS */
    size_t max_in_flight;    /* --max-in-flight    ATTND_MAX_IN_FLIGHT */
    size_t max_request_bytes; /* --max-request-bytes ATTND_MAX_REQUEST_BYTES:
                                 working memory of one request (projections,
                                 score tiles, maps, the response); 0 until
                                 config_resolve sizes it for the machine */
    unsigned timeout_s;      /* --timeout          ATTND_TIMEOUT: idle
                                connection timeout in seconds */
    size_t workers;          /* not an option: the compute pool's workers
                                (--threads resolved), each with score tiles
                                of its own in a request's workspace; 0
                                counts one */
} limits_config;

/* Defaults that admit the contract's realistic work (n = 512, d_model = 768,
 * 12 heads with per-head maps; n = 8192 outputs-only) and refuse a small body
 * that asks for gigabytes of maps. */
void limits_defaults(limits_config *lim);

#endif
