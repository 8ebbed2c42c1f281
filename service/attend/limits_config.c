/* limits_config.c: default per-request limits. */
#include "attend/limits_config.h"

void limits_defaults(limits_config *lim)
{
    lim->max_body_bytes = (size_t)64 << 20;   /* 64 MiB of JSON */
    lim->max_dim = 16384;
    lim->max_batch = 256;
    lim->max_heads = 128;
    lim->max_map_elems = (size_t)16 << 20;    /* 16 Mi floats, ~64 MiB */
    lim->max_flops = UINT64_C(200000000000);  /* 2e11: a few seconds here */
    lim->max_in_flight = 64;
    lim->max_request_bytes = 0; /* auto: see config_resolve */
    lim->timeout_s = 30;
    lim->workers = 1; /* the server sets its pool's */
}
