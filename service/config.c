/* config.c: one table of options drives the environment, the flags and
 * --help, so the three can never disagree. */
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <sched.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <unistd.h>

typedef enum config__kind {
    CONFIG__HOST,   /* char[64], numeric address */
    CONFIG__SIZE,   /* size_t in [min, max] */
    CONFIG__U64,    /* uint64_t in [min, max] */
    CONFIG__UINT,   /* unsigned in [min, max] */
    CONFIG__SECS,   /* double seconds in [min, max] */
    CONFIG__BOOL,   /* bool; the flag takes no value */
    CONFIG__ORIGINS /* char[1024]: "*" or origins separated by commas */
} config__kind;

typedef struct config__option {
    const char *flag;
    const char *env;
    config__kind kind;
    size_t offset;
    uint64_t min, max;
    const char *help;
} config__option;

#define CONFIG__AT(field) offsetof(config, field)
#define CONFIG__LIM(field) (offsetof(config, limits) + offsetof(limits_config, field))

static const config__option config__options[] = {
    {"host", "ATTND_HOST", CONFIG__HOST, CONFIG__AT(host), 0, 0,
     "address to listen on (numeric IPv4 or IPv6)"},
    {"port", "PORT", CONFIG__UINT, CONFIG__AT(port), 0, 65535,
     "TCP port; 0 picks a free one"},
    {"threads", "ATTND_THREADS", CONFIG__SIZE, CONFIG__AT(threads), 0, 1024,
     "compute threads; 0 = usable cores (affinity and cgroup CPU quota)"},
    {"max-connections", "ATTND_MAX_CONNECTIONS", CONFIG__SIZE,
     CONFIG__AT(max_connections), 1, 1048576,
     "open connections; when full, the longest-idle keep-alive one is "
     "closed for a new one"},
    {"max-connections-per-ip", "ATTND_MAX_CONNECTIONS_PER_IP", CONFIG__SIZE,
     CONFIG__AT(max_connections_per_ip), 0, 1048576,
     "open connections from one address; 0 = no limit (behind a proxy)"},
    {"header-timeout", "ATTND_HEADER_TIMEOUT", CONFIG__UINT,
     CONFIG__AT(header_timeout_s), 1, 3600,
     "seconds from a request's first byte to the end of its headers (408)"},
    {"min-body-rate", "ATTND_MIN_BODY_RATE", CONFIG__SIZE,
     CONFIG__AT(min_body_rate), 0, SIZE_MAX,
     "bytes/s a request body must average over each rate window (408); 0 = off"},
    {"min-send-rate", "ATTND_MIN_SEND_RATE", CONFIG__SIZE,
     CONFIG__AT(min_send_rate), 0, SIZE_MAX,
     "bytes/s a client must read a response at over each rate window; 0 = off"},
    {"rate-window", "ATTND_RATE_WINDOW", CONFIG__UINT,
     CONFIG__AT(rate_window_s), 1, 3600,
     "seconds over which --min-body-rate and --min-send-rate are measured"},
    {"max-buffered-bytes", "ATTND_MAX_BUFFERED_BYTES", CONFIG__SIZE,
     CONFIG__AT(max_buffered_bytes), 0, SIZE_MAX,
     "bytes of all request bodies being received (503); auto = 1/4 of memory"},
    {"body-timeout", "ATTND_BODY_TIMEOUT", CONFIG__UINT,
     CONFIG__AT(body_timeout_s), 1, 86400,
     "seconds a request body may take to arrive; then the connection closes"},
    {"max-body-bytes", "ATTND_MAX_BODY_BYTES", CONFIG__SIZE,
     CONFIG__LIM(max_body_bytes), 1, SIZE_MAX, "request body size (413)"},
    {"max-dim", "ATTND_MAX_DIM", CONFIG__SIZE, CONFIG__LIM(max_dim), 1,
     SIZE_MAX, "any of n, m, d_model, d_mem, d_k, d_v, d_out (413)"},
    {"max-batch", "ATTND_MAX_BATCH", CONFIG__SIZE, CONFIG__LIM(max_batch), 1,
     SIZE_MAX, "batch size B (413)"},
    {"max-heads", "ATTND_MAX_HEADS", CONFIG__SIZE, CONFIG__LIM(max_heads), 1,
     SIZE_MAX, "query heads h (413)"},
    {"max-map-elems", "ATTND_MAX_MAP_ELEMS", CONFIG__SIZE,
     CONFIG__LIM(max_map_elems), 1, SIZE_MAX,
     "attention-map values returned per request (413)"},
    {"max-flops", "ATTND_MAX_FLOPS", CONFIG__U64, CONFIG__LIM(max_flops), 1,
     UINT64_MAX, "floating-point operations per request (413)"},
    {"max-in-flight", "ATTND_MAX_IN_FLIGHT", CONFIG__SIZE,
     CONFIG__LIM(max_in_flight), 1, 1000000,
     "POST /attend requests in progress; beyond: 503 with Retry-After"},
    {"max-in-flight-per-ip", "ATTND_MAX_IN_FLIGHT_PER_IP", CONFIG__SIZE,
     CONFIG__AT(max_in_flight_per_ip), 0, 1000000,
     "POST /attend requests in progress from one client address (503); "
     "auto = 3/4 of max-in-flight, 0 = no limit (behind a proxy)"},
    {"max-request-bytes", "ATTND_MAX_REQUEST_BYTES", CONFIG__SIZE,
     CONFIG__LIM(max_request_bytes), 0, SIZE_MAX,
     "working memory of one request (413); auto = 1/2 of memory / max-in-flight"},
    {"timeout", "ATTND_TIMEOUT", CONFIG__UINT, CONFIG__LIM(timeout_s), 1,
     86400, "seconds a connection may stay idle before it is closed"},
    {"cors-origins", "ATTND_CORS_ORIGINS", CONFIG__ORIGINS,
     CONFIG__AT(cors_origins), 0, 0,
     "\"*\" or comma-separated origins allowed by CORS"},
    {"tensor-store-bytes", "ATTND_TENSOR_STORE_BYTES", CONFIG__SIZE,
     CONFIG__AT(tensor_store_bytes), 0, SIZE_MAX,
     "bytes the tensor store may hold (POST /tensors, refs in /attend): "
     "values, and 256 a tensor; least recently used forgotten first; 0 "
     "turns it off"},
    {"drain-delay", "ATTND_DRAIN_DELAY", CONFIG__SECS,
     CONFIG__AT(drain_delay_s), 0, 3600,
     "seconds between SIGTERM (/readyz 503) and refusing new work"},
    {"shutdown-timeout", "ATTND_SHUTDOWN_TIMEOUT", CONFIG__SECS,
     CONFIG__AT(shutdown_timeout_s), 1, 86400,
     "seconds from SIGTERM to exit: then requests still running are cut off"},
    {"quiet", "ATTND_QUIET", CONFIG__BOOL, CONFIG__AT(quiet), 0, 1,
     "no per-request log lines"},
};

#define CONFIG__N_OPTIONS (sizeof config__options / sizeof config__options[0])

/* The options config_limits publishes: what a client sizes a request by.
 * --max-in-flight and --max-buffered-bytes bound the server's concurrency
 * (503), not one request, so they are not among them. */
static const size_t config__published[] = {
    CONFIG__LIM(max_body_bytes),  CONFIG__LIM(max_dim),
    CONFIG__LIM(max_batch),       CONFIG__LIM(max_heads),
    CONFIG__LIM(max_map_elems),   CONFIG__LIM(max_flops),
    CONFIG__LIM(max_request_bytes), CONFIG__AT(tensor_store_bytes),
};
_Static_assert(sizeof config__published / sizeof config__published[0] <=
                   CONFIG_LIMITS_MAX,
               "config_limits promises at most CONFIG_LIMITS_MAX limits");

void config_defaults(config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    strcpy(cfg->host, "0.0.0.0");
    cfg->port = 8080;
    cfg->threads = 0;
    /* An idle connection costs a descriptor and a few KiB, no thread;
     * server_start lowers this to what RLIMIT_NOFILE allows. */
    cfg->max_connections = 16384;
    cfg->max_connections_per_ip = 64;
    cfg->max_in_flight_per_ip = CONFIG_AUTO; /* see config_resolve */
    /* 64 MiB (the default body limit) in 120 s needs 0.5 MiB/s. */
    cfg->body_timeout_s = 120;
    cfg->header_timeout_s = 10;
    cfg->min_body_rate = 65536;
    cfg->min_send_rate = 65536;
    cfg->rate_window_s = 10;
    cfg->max_buffered_bytes = 0; /* auto: see config_resolve */
    cfg->shutdown_timeout_s = 25;
    limits_defaults(&cfg->limits);
    strcpy(cfg->cors_origins, "*");
    /* 256 MiB: the four d_model^2 projections of 27 layers at d_model 768
     * (9 MiB a layer), BERT-base's twelve twice over. */
    cfg->tensor_store_bytes = (size_t)256 << 20;
    cfg->quiet = false;
    cfg->drain_delay_s = 0;
    cfg->healthcheck = false;
}

/* Whether an option takes "auto" (sized by config_resolve). */
static bool config__auto(const config__option *o)
{
    return o->offset == CONFIG__AT(max_buffered_bytes) ||
           o->offset == CONFIG__LIM(max_request_bytes) ||
           o->offset == CONFIG__AT(max_in_flight_per_ip);
}

/* What "auto" is stored as: 0, or CONFIG_AUTO where 0 means no limit. */
static size_t config__auto_value(const config__option *o)
{
    return o->offset == CONFIG__AT(max_in_flight_per_ip) ? CONFIG_AUTO : 0;
}

/* The current value of an option as text, for --help's defaults. */
static void config__format(const config *cfg, const config__option *o,
                           char *buf, size_t cap)
{
    const char *p = (const char *)cfg + o->offset;
    switch (o->kind) {
    case CONFIG__HOST:
    case CONFIG__ORIGINS:
        snprintf(buf, cap, "%s", p);
        break;
    case CONFIG__UINT:
        snprintf(buf, cap, "%u", *(const unsigned *)(const void *)p);
        break;
    case CONFIG__SIZE:
        if (config__auto(o) &&
            *(const size_t *)(const void *)p == config__auto_value(o))
            snprintf(buf, cap, "auto");
        else
            snprintf(buf, cap, "%zu", *(const size_t *)(const void *)p);
        break;
    case CONFIG__U64:
        snprintf(buf, cap, "%" PRIu64, *(const uint64_t *)(const void *)p);
        break;
    case CONFIG__SECS:
        snprintf(buf, cap, "%g", *(const double *)(const void *)p);
        break;
    case CONFIG__BOOL:
        snprintf(buf, cap, "%s", *(const bool *)(const void *)p ? "on" : "off");
        break;
    }
}

static void config__usage(FILE *out)
{
    config def;
    config_defaults(&def);
    fprintf(out,
            "Usage: attnd [OPTION]...\n"
            "Serves transformer attention over HTTP (POST /attend).\n\n"
            "Each option also reads an environment variable; a flag wins over\n"
            "its variable. Values: --opt VALUE or --opt=VALUE.\n\n");
    for (size_t i = 0; i < CONFIG__N_OPTIONS; i++) {
        const config__option *o = &config__options[i];
        char val[64];
        config__format(&def, o, val, sizeof val);
        char left[48];
        snprintf(left, sizeof left, "--%s%s", o->flag,
                 o->kind == CONFIG__BOOL ? "" : " VALUE");
        fprintf(out, "  %-26s %s\n  %-26s env %s, default %s\n", left,
                o->help, "", o->env, val);
    }
    fprintf(out, "  %-26s %s\n  %-26s %s\n  %-26s %s\n", "--healthcheck",
            "probe http://127.0.0.1:PORT/healthz; exit 0 on 200, else 1",
            "--version", "print the version and exit", "--help",
            "print this help and exit");
    fprintf(out, "Bad values exit with status 2.\n");
}

/* Parses an unsigned decimal integer in [min, max]. */
static int config__parse_u64(const char *s, uint64_t min, uint64_t max,
                             uint64_t *out)
{
    if (*s < '0' || *s > '9')
        return -1;
    errno = 0;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end || v < min || v > max)
        return -1;
    *out = v;
    return 0;
}

/* 0 when s is a plain decimal number, digits with an optional fraction
 * ("2", "2.5"): strtod alone would also take blanks, a sign, an exponent,
 * "inf" and hexadecimal ("0x10" is 16 s). */
static int config__check_decimal(const char *s)
{
    size_t whole = strspn(s, "0123456789");
    if (whole == 0)
        return -1;
    if (s[whole] == '\0')
        return 0;
    if (s[whole] != '.')
        return -1;
    size_t frac = strspn(s + whole + 1, "0123456789");
    return frac > 0 && s[whole + 1 + frac] == '\0' ? 0 : -1;
}

static int config__parse_bool(const char *s, bool *out)
{
    static const char *yes[] = {"1", "true", "yes", "on"};
    static const char *no[] = {"0", "false", "no", "off", ""};
    for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++)
        if (!strcasecmp(s, yes[i])) {
            *out = true;
            return 0;
        }
    for (size_t i = 0; i < sizeof no / sizeof no[0]; i++)
        if (!strcasecmp(s, no[i])) {
            *out = false;
            return 0;
        }
    return -1;
}

/* Every origin must look like scheme://host[:port] so a typo cannot
 * silently disable CORS. */
static int config__check_origins(const char *s)
{
    if (!strcmp(s, "*"))
        return 0;
    const char *p = s;
    for (;;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        while (len && *p == ' ') {
            p++;
            len--;
        }
        while (len && p[len - 1] == ' ')
            len--;
        const char *sep = len ? memchr(p, ':', len) : NULL;
        if (!sep || (size_t)(sep - p) + 3 >= len || sep[1] != '/' ||
            sep[2] != '/')
            return -1;
        if (!comma)
            return 0;
        p = comma + 1;
    }
}

/* Stores text into the option's field; -1 when it is not a valid value. */
static int config__set(config *cfg, const config__option *o, const char *v)
{
    char *p = (char *)cfg + o->offset;
    uint64_t u;
    if (config__auto(o) && !strcmp(v, "auto")) {
        *(size_t *)(void *)p = config__auto_value(o);
        return 0;
    }
    switch (o->kind) {
    case CONFIG__HOST: {
        unsigned char addr[16];
        if (strlen(v) >= sizeof cfg->host ||
            (inet_pton(AF_INET, v, addr) != 1 &&
             inet_pton(AF_INET6, v, addr) != 1))
            return -1;
        strcpy(p, v);
        return 0;
    }
    case CONFIG__ORIGINS:
        if (strlen(v) >= sizeof cfg->cors_origins || config__check_origins(v))
            return -1;
        strcpy(p, v);
        return 0;
    case CONFIG__UINT:
        if (config__parse_u64(v, o->min, o->max, &u))
            return -1;
        *(unsigned *)(void *)p = (unsigned)u;
        return 0;
    case CONFIG__SIZE:
        if (config__parse_u64(v, o->min, o->max, &u) || u > SIZE_MAX)
            return -1;
        *(size_t *)(void *)p = (size_t)u;
        return 0;
    case CONFIG__U64:
        if (config__parse_u64(v, o->min, o->max, &u))
            return -1;
        *(uint64_t *)(void *)p = u;
        return 0;
    case CONFIG__SECS: {
        if (config__check_decimal(v))
            return -1;
        char *end;
        errno = 0;
        double d = strtod(v, &end);
        if (errno || end == v || *end || !isfinite(d) || d < (double)o->min ||
            d > (double)o->max)
            return -1;
        *(double *)(void *)p = d;
        return 0;
    }
    case CONFIG__BOOL:
        return config__parse_bool(v, (bool *)(void *)p);
    }
    return -1;
}

static void config__bad(FILE *err, const config__option *o, const char *from,
                        const char *v)
{
    const char *what = "a value";
    switch (o->kind) {
    case CONFIG__HOST:
        what = "a numeric IPv4 or IPv6 address";
        break;
    case CONFIG__ORIGINS:
        what = "\"*\" or comma-separated origins like https://example.com";
        break;
    case CONFIG__BOOL:
        what = "1/0, true/false, yes/no or on/off";
        break;
    case CONFIG__SECS:
        what = "a number of seconds";
        break;
    default:
        what = config__auto(o) ? "\"auto\" or an integer" : "an integer";
        break;
    }
    char range[64] = "";
    if (o->kind != CONFIG__HOST && o->kind != CONFIG__ORIGINS &&
        o->kind != CONFIG__BOOL)
        snprintf(range, sizeof range, " in [%" PRIu64 ", %" PRIu64 "]",
                 o->min, o->max);
    fprintf(err,
            "attnd: invalid %s for --%s (env %s): expected %s%s, found "
            "\"%s\"\n",
            from, o->flag, o->env, what, range, v);
}

config_result config_parse(config *cfg, int argc, char **argv, FILE *out,
                           FILE *err)
{
    config_defaults(cfg);
    /* The flags first: an option given as a flag never reads its variable,
     * so a variable the platform set for some other program (PORT, say)
     * cannot stop a process told otherwise on its command line, nor
     * --help and --version. */
    bool given[CONFIG__N_OPTIONS] = {false};
    for (int a = 1; a < argc; a++) {
        const char *arg = argv[a];
        if (!strcmp(arg, "--help") || !strcmp(arg, "-h")) {
            config__usage(out);
            return CONFIG_EXIT;
        }
        if (!strcmp(arg, "--version")) {
            fprintf(out, "attnd %s\n", CONFIG_VERSION);
            return CONFIG_EXIT;
        }
        if (!strcmp(arg, "--healthcheck")) {
            cfg->healthcheck = true;
            continue;
        }
        if (strncmp(arg, "--", 2)) {
            fprintf(err, "attnd: unexpected argument \"%s\" (try --help)\n",
                    arg);
            return CONFIG_ERROR;
        }
        const char *name = arg + 2;
        const char *eq = strchr(name, '=');
        size_t name_len = eq ? (size_t)(eq - name) : strlen(name);
        size_t index = CONFIG__N_OPTIONS;
        for (size_t i = 0; i < CONFIG__N_OPTIONS; i++)
            if (strlen(config__options[i].flag) == name_len &&
                !strncmp(config__options[i].flag, name, name_len))
                index = i;
        if (index == CONFIG__N_OPTIONS) {
            fprintf(err, "attnd: unknown option \"%s\" (try --help)\n", arg);
            return CONFIG_ERROR;
        }
        const config__option *o = &config__options[index];
        const char *v;
        if (eq)
            v = eq + 1;
        else if (o->kind == CONFIG__BOOL)
            v = "1";
        else if (a + 1 < argc)
            v = argv[++a];
        else {
            fprintf(err, "attnd: option --%s needs a value (try --help)\n",
                    o->flag);
            return CONFIG_ERROR;
        }
        if (config__set(cfg, o, v)) {
            config__bad(err, o, "value", v);
            return CONFIG_ERROR;
        }
        given[index] = true;
    }
    for (size_t i = 0; i < CONFIG__N_OPTIONS; i++) {
        const config__option *o = &config__options[i];
        const char *v = given[i] ? NULL : getenv(o->env);
        if (v && config__set(cfg, o, v)) {
            config__bad(err, o, "environment value", v);
            return CONFIG_ERROR;
        }
    }
    return CONFIG_RUN;
}

/* root/name, opened for reading; NULL when absent. */
static FILE *config__open_at(const char *root, const char *name)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", root, name);
    return fopen(path, "r");
}

/* The first number in root/name, or 0 when it cannot be read ("max"
 * too). */
static unsigned long long config__read_ull(const char *root,
                                           const char *name)
{
    unsigned long long v = 0;
    FILE *f = config__open_at(root, name);
    if (f) {
        if (fscanf(f, "%llu", &v) != 1)
            v = 0;
        fclose(f);
    }
    return v;
}

size_t config_cgroup_cpus(const char *root)
{
    long long quota = -1, period = 0;
    FILE *f = config__open_at(root, "cpu.max");
    if (f) {
        /* v2: "max 100000" or "<quota> <period>" */
        char q[32];
        if (fscanf(f, "%31s %lld", q, &period) == 2 && strcmp(q, "max"))
            quota = strtoll(q, NULL, 10);
        fclose(f);
    } else {
        /* v1: cpu.cfs_quota_us is -1 without a quota */
        f = config__open_at(root, "cpu/cpu.cfs_quota_us");
        if (f) {
            if (fscanf(f, "%lld", &quota) != 1)
                quota = -1;
            fclose(f);
        }
        f = config__open_at(root, "cpu/cpu.cfs_period_us");
        if (f) {
            if (fscanf(f, "%lld", &period) != 1)
                period = 0;
            fclose(f);
        }
    }
    if (quota <= 0 || period <= 0)
        return 0;
    return (size_t)((quota + period - 1) / period);
}

unsigned long long config_cgroup_memory(const char *root)
{
    /* v2 memory.max ("max": no limit), else v1 memory.limit_in_bytes,
     * which reports "no limit" as a huge number the callers' min ignores */
    unsigned long long lim = config__read_ull(root, "memory.max");
    if (!lim)
        lim = config__read_ull(root, "memory/memory.limit_in_bytes");
    return lim;
}

size_t config_usable_cores(void)
{
    size_t n = 1;
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0)
        n = (size_t)CPU_COUNT(&set);
    size_t quota = config_cgroup_cpus("/sys/fs/cgroup");
    if (quota && quota < n)
        n = quota;
    return n ? n : 1;
}

size_t config_memory_bytes(void)
{
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    unsigned long long mem = pages > 0 && page > 0
                                 ? (unsigned long long)pages *
                                       (unsigned long long)page
                                 : 1ULL << 30;
    unsigned long long lim = config_cgroup_memory("/sys/fs/cgroup");
    if (lim && lim < mem)
        mem = lim;
    /* An address-space limit (ulimit -v, prlimit) bounds it too. */
    struct rlimit as;
    if (getrlimit(RLIMIT_AS, &as) == 0 && as.rlim_cur != RLIM_INFINITY &&
        (unsigned long long)as.rlim_cur < mem)
        mem = (unsigned long long)as.rlim_cur;
    return mem > SIZE_MAX ? SIZE_MAX : (size_t)mem;
}

void config_resolve(config *cfg)
{
    size_t mem = config_memory_bytes();
    if (cfg->max_buffered_bytes == 0)
        cfg->max_buffered_bytes = mem / 4;
    if (cfg->limits.max_request_bytes == 0) {
        size_t n = cfg->limits.max_in_flight ? cfg->limits.max_in_flight : 1;
        cfg->limits.max_request_bytes = mem / 2 / n;
    }
    if (cfg->max_in_flight_per_ip == CONFIG_AUTO) {
        /* Most of the slots for one address (a load generator, a proxy),
         * and a quarter always left to the others. */
        size_t share = cfg->limits.max_in_flight * 3 / 4;
        cfg->max_in_flight_per_ip = share ? share : 1;
    }
}

static bool config__is_published(size_t offset)
{
    for (size_t i = 0; i < sizeof config__published / sizeof config__published[0];
         i++)
        if (config__published[i] == offset)
            return true;
    return false;
}

size_t config_limits(const config *cfg, config_limit *out, size_t cap)
{
    size_t n = 0;
    for (size_t i = 0; i < CONFIG__N_OPTIONS; i++) {
        const config__option *o = &config__options[i];
        if (!config__is_published(o->offset))
            continue;
        const char *p = (const char *)cfg + o->offset;
        /* only sizes are published: a size_t or a uint64_t */
        uint64_t v = o->kind == CONFIG__U64
                         ? *(const uint64_t *)(const void *)p
                         : (uint64_t)*(const size_t *)(const void *)p;
        if (n < cap)
            out[n] = (config_limit){.flag = o->flag, .value = v};
        n++;
    }
    return n;
}
