/* config.h: attnd's configuration from command-line flags and environment
 * variables (a flag wins over its variable, a variable over the default). */
#ifndef ATTND_CONFIG_H
#define ATTND_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "attend/limits_config.h"

/* attnd's version, in --version and attnd_build_info. */
#define CONFIG_VERSION "0.1.0"

typedef struct config {
    char host[64];          /* --host ATTND_HOST, numeric IPv4 or IPv6 */
    unsigned port;          /* --port PORT (ATTND_PORT), 0: ephemeral */
    size_t threads;         /* --threads ATTND_THREADS, 0: usable cores */
    size_t max_connections; /* --max-connections ATTND_MAX_CONNECTIONS */
    size_t max_connections_per_ip; /* --max-connections-per-ip, 0: no limit */
    size_t max_in_flight_per_ip; /* --max-in-flight-per-ip: POST /attend
                                    slots one client address may hold; 0:
                                    no limit; CONFIG_AUTO until
                                    config_resolve sizes it */
    unsigned body_timeout_s; /* --body-timeout ATTND_BODY_TIMEOUT: seconds a
                                request body may take to arrive in full */
    unsigned header_timeout_s; /* --header-timeout: seconds from a request's
                                  first byte to the end of its headers */
    size_t min_body_rate;   /* --min-body-rate: bytes a second a body must
                               keep up over each --rate-window; 0: off */
    size_t min_send_rate;   /* --min-send-rate: the same for a response */
    unsigned rate_window_s; /* --rate-window: seconds of each rate check */
    size_t max_buffered_bytes; /* --max-buffered-bytes: all unfinished
                                  bodies together; 0: auto (a quarter of the
                                  memory the process may use) */
    double shutdown_timeout_s; /* --shutdown-timeout: SIGTERM to exit */
    limits_config limits;   /* --max-* and --timeout, see attend/limits_config.h */
    char cors_origins[1024]; /* --cors-origins ATTND_CORS_ORIGINS: "*" or a
                                comma-separated list of origins */
    size_t tensor_store_bytes; /* --tensor-store-bytes
                                  ATTND_TENSOR_STORE_BYTES: bytes the tensor
                                  store may hold; 0: no store */
    bool quiet;             /* --quiet ATTND_QUIET: no per-request log */
    double drain_delay_s;   /* --drain-delay ATTND_DRAIN_DELAY */
    bool healthcheck;       /* --healthcheck: probe a running attnd */
} config;

/* What "auto" is stored as in an option where 0 has a meaning of its own
 * (--max-in-flight-per-ip, where 0 is no limit); config_resolve replaces
 * it. */
#define CONFIG_AUTO SIZE_MAX

/* One limit a client sizes its requests by, as GET /limits publishes it:
 * the option's flag without its leading "--" ("max-body-bytes", static)
 * and the value in force. */
typedef struct config_limit {
    const char *flag;
    uint64_t value;
} config_limit;

/* How many limits config_limits fills at most. */
#define CONFIG_LIMITS_MAX 16

/* What config_parse asks of its caller. */
typedef enum config_result {
    CONFIG_RUN = 0,   /* serve (or probe, when cfg->healthcheck) */
    CONFIG_EXIT = 1,  /* --help or --version printed: exit 0 */
    CONFIG_ERROR = 2  /* bad flag or value, message printed: exit 2 */
} config_result;

/* Every option at its default (host 0.0.0.0, port 8080, limits_defaults). */
void config_defaults(config *cfg);

/* Fills cfg from argv[1..argc), then from the environment (getenv) for the
 * options no flag gave: a flag wins over its variable, which is then never
 * read. Usage (--help, --version) goes to out and errors to err, each message
 * naming the option, its variable and the value found. cfg is fully written
 * either way. */
config_result config_parse(config *cfg, int argc, char **argv, FILE *out,
                           FILE *err);

/* Usable cores: the affinity mask, capped by a cgroup CPU quota (v2
 * cpu.max, v1 cfs quota) rounded up; at least 1. */
size_t config_usable_cores(void);

/* The cgroup CPU quota in whole cores, rounded up, read under root (the
 * cgroup mount, "/sys/fs/cgroup"; tests pass fixture folders): v2's
 * cpu.max, else v1's cpu/cpu.cfs_quota_us over cpu/cpu.cfs_period_us.
 * 0 when there is no quota or the files cannot be read. */
size_t config_cgroup_cpus(const char *root);

/* The cgroup memory limit in bytes read under root: v2's memory.max, else
 * v1's memory/memory.limit_in_bytes; 0 when there is none ("max") or the
 * files cannot be read. */
unsigned long long config_cgroup_memory(const char *root);

/* Bytes of memory the process may use: the smallest of physical memory,
 * the cgroup memory limit (v2 memory.max, v1 memory.limit_in_bytes) and
 * the address-space limit (RLIMIT_AS), those that are set. */
size_t config_memory_bytes(void);

/* Replaces the automatic (0) values of --max-buffered-bytes and
 * --max-request-bytes by their sizes for this machine: a quarter of
 * config_memory_bytes() for the bodies being received, and half of it
 * shared by --max-in-flight requests for each request's working memory;
 * and an automatic (CONFIG_AUTO) --max-in-flight-per-ip by three quarters
 * of --max-in-flight, at least 1. */
void config_resolve(config *cfg);

/* The limits a client needs to size a request before sending it: each
 * limit answered with 413 and the tensor store's size (not timeouts or
 * connection counts), in --help's order, read from cfg, which should be
 * config_resolve'd so an automatic value is in bytes. Fills out[0..cap)
 * and returns how many there are (CONFIG_LIMITS_MAX at most); never
 * fails. */
size_t config_limits(const config *cfg, config_limit *out, size_t cap);

#endif
