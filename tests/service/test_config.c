/* test_config.c: flags, environment variables, defaults, --help and the
 * refusal of bad values. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test_service.h"

/* Runs config_parse on a NULL-terminated argument list; usage and errors
 * land in the given buffers. */
static config_result parse(config *cfg, const char *const *args, char *out,
                           size_t out_cap, char *err, size_t err_cap)
{
    char *argv[32];
    int argc = 0;
    argv[argc++] = (char *)"attnd";
    for (const char *const *a = args; a && *a; a++)
        argv[argc++] = (char *)*a;
    argv[argc] = NULL;
    FILE *fo = fmemopen(out, out_cap, "w");
    FILE *fe = fmemopen(err, err_cap, "w");
    config_result r = config_parse(cfg, argc, argv, fo, fe);
    fclose(fo);
    fclose(fe);
    return r;
}

START_TEST(test_config_defaults)
{
    config cfg;
    char out[64], err[512];
    ck_assert_int_eq(parse(&cfg, NULL, out, sizeof out, err, sizeof err),
                     CONFIG_RUN);
    ck_assert_str_eq(cfg.host, "0.0.0.0");
    ck_assert_uint_eq(cfg.port, 8080);
    ck_assert_str_eq(cfg.cors_origins, "*");
    ck_assert(!cfg.quiet);
    ck_assert(cfg.drain_delay_s == 0);
    limits_config lim;
    limits_defaults(&lim);
    ck_assert_uint_eq(cfg.limits.max_body_bytes, lim.max_body_bytes);
    ck_assert_uint_eq(cfg.limits.max_in_flight, lim.max_in_flight);
}
END_TEST

START_TEST(test_config_flags_and_env)
{
    setenv("PORT", "9001", 1);
    setenv("ATTND_MAX_FLOPS", "12345", 1);
    setenv("ATTND_QUIET", "true", 1);
    setenv("ATTND_CORS_ORIGINS", "https://a.example,https://b.example", 1);
    config cfg;
    char out[64], err[512];
    ck_assert_int_eq(parse(&cfg, NULL, out, sizeof out, err, sizeof err),
                     CONFIG_RUN);
    ck_assert_uint_eq(cfg.port, 9001);
    ck_assert_uint_eq(cfg.limits.max_flops, 12345);
    ck_assert(cfg.quiet);
    ck_assert_str_eq(cfg.cors_origins, "https://a.example,https://b.example");
    /* A flag wins over its variable; both spellings of values work. */
    const char *args[] = {"--port", "9002", "--max-flops=99", "--host",
                          "::1", "--threads", "3", "--drain-delay", "2.5",
                          "--max-body-bytes", "1000", "--timeout=7",
                          "--max-in-flight", "4", "--max-dim", "64",
                          "--max-batch", "2", "--max-heads", "8",
                          "--max-map-elems", "100", "--max-connections", "10",
                          "--body-timeout", "5", NULL};
    ck_assert_int_eq(parse(&cfg, args, out, sizeof out, err, sizeof err),
                     CONFIG_RUN);
    ck_assert_uint_eq(cfg.port, 9002);
    ck_assert_uint_eq(cfg.limits.max_flops, 99);
    ck_assert_str_eq(cfg.host, "::1");
    ck_assert_uint_eq(cfg.threads, 3);
    ck_assert(cfg.drain_delay_s == 2.5);
    ck_assert_uint_eq(cfg.limits.max_body_bytes, 1000);
    ck_assert_uint_eq(cfg.limits.timeout_s, 7);
    ck_assert_uint_eq(cfg.limits.max_in_flight, 4);
    ck_assert_uint_eq(cfg.limits.max_dim, 64);
    ck_assert_uint_eq(cfg.limits.max_batch, 2);
    ck_assert_uint_eq(cfg.limits.max_heads, 8);
    ck_assert_uint_eq(cfg.limits.max_map_elems, 100);
    ck_assert_uint_eq(cfg.max_connections, 10);
    ck_assert_uint_eq(cfg.body_timeout_s, 5);
    unsetenv("PORT");
    unsetenv("ATTND_MAX_FLOPS");
    unsetenv("ATTND_QUIET");
    unsetenv("ATTND_CORS_ORIGINS");
}
END_TEST

START_TEST(test_config_bad_values_refused)
{
    static const char *const bad[][3] = {
        {"--port", "65536", NULL},       {"--port", "-1", NULL},
        {"--threads", "lots", NULL},     {"--max-body-bytes", "0", NULL},
        {"--max-flops", "1e9", NULL},    {"--host", "localhost", NULL},
        {"--drain-delay", "-2", NULL},   {"--drain-delay", "nan", NULL},
        {"--drain-delay", "0x10", NULL}, {"--drain-delay", " 5", NULL},
        {"--drain-delay", "+3", NULL},   {"--drain-delay", "1e3", NULL},
        {"--drain-delay", "2.", NULL},   {"--shutdown-timeout", ".5", NULL},
        {"--timeout", "0", NULL},        {"--cors-origins", "example.com", NULL},
        {"--no-such-flag", NULL, NULL},  {"--port", NULL, NULL},
        {"--quiet=maybe", NULL, NULL},   {"stray", NULL, NULL},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        config cfg;
        char out[64], err[512] = "";
        ck_assert_msg(parse(&cfg, bad[i], out, sizeof out, err, sizeof err) ==
                          CONFIG_ERROR,
                      "accepted %s %s", bad[i][0], bad[i][1] ? bad[i][1] : "");
        ck_assert_msg(strstr(err, "attnd:") != NULL, "no message for %s",
                      bad[i][0]);
    }
    /* The message names the option, its variable and what was found. */
    config cfg;
    char out[64], err[512] = "";
    const char *args[] = {"--max-in-flight", "zero", NULL};
    parse(&cfg, args, out, sizeof out, err, sizeof err);
    ck_assert_ptr_nonnull(strstr(err, "--max-in-flight"));
    ck_assert_ptr_nonnull(strstr(err, "ATTND_MAX_IN_FLIGHT"));
    ck_assert_ptr_nonnull(strstr(err, "\"zero\""));
    setenv("ATTND_TIMEOUT", "soon", 1);
    ck_assert_int_eq(parse(&cfg, NULL, out, sizeof out, err, sizeof err),
                     CONFIG_ERROR);
    unsetenv("ATTND_TIMEOUT");
}
END_TEST

/* A flag wins over its variable without reading it: PORT is honoured only
 * when there is no --port, so a PORT set for another program cannot stop a
 * process started with --port, and no variable can stop --help or
 * --version. */
START_TEST(test_config_flag_hides_its_variable)
{
    config cfg;
    char out[16384] = "", err[512] = "";
    setenv("PORT", "not-a-port", 1);
    const char *port[] = {"--port", "9003", NULL};
    ck_assert_msg(parse(&cfg, port, out, sizeof out, err, sizeof err) ==
                      CONFIG_RUN,
                  "--port 9003 with PORT=not-a-port: %s", err);
    ck_assert_uint_eq(cfg.port, 9003);
    setenv("PORT", "", 1);
    const char *port_eq[] = {"--port=9004", NULL};
    ck_assert_int_eq(parse(&cfg, port_eq, out, sizeof out, err, sizeof err),
                     CONFIG_RUN);
    ck_assert_uint_eq(cfg.port, 9004);
    /* Without the flag the variable is read, and a bad one still refused. */
    ck_assert_int_eq(parse(&cfg, NULL, out, sizeof out, err, sizeof err),
                     CONFIG_ERROR);
    ck_assert_ptr_nonnull(strstr(err, "PORT"));
    unsetenv("PORT");

    setenv("ATTND_MAX_DIM", "lots", 1);
    const char *dim[] = {"--max-dim", "64", NULL};
    ck_assert_int_eq(parse(&cfg, dim, out, sizeof out, err, sizeof err),
                     CONFIG_RUN);
    ck_assert_uint_eq(cfg.limits.max_dim, 64);
    const char *help[] = {"--help", NULL};
    ck_assert_int_eq(parse(&cfg, help, out, sizeof out, err, sizeof err),
                     CONFIG_EXIT);
    ck_assert_ptr_nonnull(strstr(out, "--max-dim"));
    const char *ver[] = {"--version", NULL};
    ck_assert_int_eq(parse(&cfg, ver, out, sizeof out, err, sizeof err),
                     CONFIG_EXIT);
    /* Another option's bad variable is still an error. */
    const char *other[] = {"--port", "9005", NULL};
    ck_assert_int_eq(parse(&cfg, other, out, sizeof out, err, sizeof err),
                     CONFIG_ERROR);
    ck_assert_ptr_nonnull(strstr(err, "ATTND_MAX_DIM"));
    unsetenv("ATTND_MAX_DIM");
}
END_TEST

START_TEST(test_config_help_lists_every_option)
{
    config cfg;
    char out[16384] = "", err[64];
    const char *args[] = {"--help", NULL};
    ck_assert_int_eq(parse(&cfg, args, out, sizeof out, err, sizeof err),
                     CONFIG_EXIT);
    static const char *want[] = {
        "--host", "ATTND_HOST", "--port", "PORT", "--threads", "ATTND_THREADS",
        "--max-connections", "ATTND_MAX_CONNECTIONS", "--body-timeout",
        "ATTND_BODY_TIMEOUT", "--max-body-bytes",
        "ATTND_MAX_BODY_BYTES", "--max-dim", "ATTND_MAX_DIM", "--max-batch",
        "ATTND_MAX_BATCH", "--max-heads", "ATTND_MAX_HEADS", "--max-map-elems",
        "ATTND_MAX_MAP_ELEMS", "--max-flops", "ATTND_MAX_FLOPS",
        "--max-in-flight", "ATTND_MAX_IN_FLIGHT", "--timeout", "ATTND_TIMEOUT",
        "--cors-origins", "ATTND_CORS_ORIGINS", "--drain-delay",
        "ATTND_DRAIN_DELAY", "--quiet", "ATTND_QUIET", "--healthcheck",
        "--version", "default 8080", "default 0.0.0.0",
        "--max-connections-per-ip", "ATTND_MAX_CONNECTIONS_PER_IP",
        "--header-timeout", "ATTND_HEADER_TIMEOUT", "--min-body-rate",
        "ATTND_MIN_BODY_RATE", "--min-send-rate", "ATTND_MIN_SEND_RATE",
        "--rate-window", "ATTND_RATE_WINDOW", "--max-buffered-bytes",
        "ATTND_MAX_BUFFERED_BYTES", "--max-request-bytes",
        "ATTND_MAX_REQUEST_BYTES", "--shutdown-timeout",
        "ATTND_SHUTDOWN_TIMEOUT", "--max-in-flight-per-ip",
        "ATTND_MAX_IN_FLIGHT_PER_IP", "default auto"};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        ck_assert_msg(strstr(out, want[i]) != NULL, "--help lacks %s", want[i]);
    const char *ver[] = {"--version", NULL};
    ck_assert_int_eq(parse(&cfg, ver, out, sizeof out, err, sizeof err),
                     CONFIG_EXIT);
    ck_assert_ptr_nonnull(strstr(out, CONFIG_VERSION));
}
END_TEST

START_TEST(test_config_connection_limits_and_auto_sizes)
{
    config cfg;
    char out[64], err[512];
    ck_assert_int_eq(parse(&cfg, NULL, out, sizeof out, err, sizeof err),
                     CONFIG_RUN);
    ck_assert_uint_eq(cfg.max_connections_per_ip, 64);
    ck_assert_uint_eq(cfg.header_timeout_s, 10);
    ck_assert_uint_eq(cfg.min_body_rate, 65536);
    ck_assert(cfg.shutdown_timeout_s == 25);
    /* 0 until resolved: sized from the memory the process may use. */
    ck_assert_uint_eq(cfg.max_buffered_bytes, 0);
    ck_assert_uint_eq(cfg.limits.max_request_bytes, 0);
    const char *args[] = {"--max-in-flight", "8", "--max-buffered-bytes",
                          "auto", "--max-connections-per-ip=0", NULL};
    ck_assert_int_eq(parse(&cfg, args, out, sizeof out, err, sizeof err),
                     CONFIG_RUN);
    ck_assert_uint_eq(cfg.max_connections_per_ip, 0);
    config_resolve(&cfg);
    size_t mem = config_memory_bytes();
    ck_assert_uint_gt(mem, 0);
    ck_assert_uint_eq(cfg.max_buffered_bytes, mem / 4);
    ck_assert_uint_eq(cfg.limits.max_request_bytes, mem / 2 / 8);
    /* Given values stay. */
    const char *given[] = {"--max-request-bytes", "1000", NULL};
    ck_assert_int_eq(parse(&cfg, given, out, sizeof out, err, sizeof err),
                     CONFIG_RUN);
    config_resolve(&cfg);
    ck_assert_uint_eq(cfg.limits.max_request_bytes, 1000);
}
END_TEST

/* --max-in-flight-per-ip: auto (the default, by flag or variable) is three
 * quarters of --max-in-flight once resolved, at least 1; 0 is no limit,
 * and stays 0; a number stays. */
START_TEST(test_config_in_flight_per_ip)
{
    config cfg;
    char out[16384] = "", err[512] = "";
    ck_assert_int_eq(parse(&cfg, NULL, out, sizeof out, err, sizeof err),
                     CONFIG_RUN);
    ck_assert_uint_eq(cfg.max_in_flight_per_ip, CONFIG_AUTO);
    config_resolve(&cfg);
    ck_assert_uint_eq(cfg.max_in_flight_per_ip, 48); /* of 64 */
    static const struct {
        const char *in_flight, *per_ip;
        size_t want;
    } cases[] = {
        {"8", "auto", 6}, {"4", "auto", 3}, {"3", "auto", 2},
        {"2", "auto", 1}, {"1", "auto", 1}, {"7", "auto", 5},
        {"8", "0", 0},    {"8", "5", 5},    {"8", "20", 20},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *args[] = {"--max-in-flight", cases[i].in_flight,
                              "--max-in-flight-per-ip", cases[i].per_ip,
                              NULL};
        ck_assert_int_eq(parse(&cfg, args, out, sizeof out, err, sizeof err),
                         CONFIG_RUN);
        config_resolve(&cfg);
        ck_assert_msg(cfg.max_in_flight_per_ip == cases[i].want,
                      "--max-in-flight %s --max-in-flight-per-ip %s: %zu, "
                      "expected %zu",
                      cases[i].in_flight, cases[i].per_ip,
                      cfg.max_in_flight_per_ip, cases[i].want);
    }
    /* The variable, with the same spellings. */
    setenv("ATTND_MAX_IN_FLIGHT_PER_IP", "0", 1);
    ck_assert_int_eq(parse(&cfg, NULL, out, sizeof out, err, sizeof err),
                     CONFIG_RUN);
    config_resolve(&cfg);
    ck_assert_uint_eq(cfg.max_in_flight_per_ip, 0);
    setenv("ATTND_MAX_IN_FLIGHT_PER_IP", "auto", 1);
    const char *eight[] = {"--max-in-flight=8", NULL};
    ck_assert_int_eq(parse(&cfg, eight, out, sizeof out, err, sizeof err),
                     CONFIG_RUN);
    config_resolve(&cfg);
    ck_assert_uint_eq(cfg.max_in_flight_per_ip, 6);
    setenv("ATTND_MAX_IN_FLIGHT_PER_IP", "half", 1);
    ck_assert_int_eq(parse(&cfg, NULL, out, sizeof out, err, sizeof err),
                     CONFIG_ERROR);
    ck_assert_ptr_nonnull(strstr(err, "ATTND_MAX_IN_FLIGHT_PER_IP"));
    ck_assert_ptr_nonnull(strstr(err, "\"auto\" or an integer"));
    unsetenv("ATTND_MAX_IN_FLIGHT_PER_IP");
    const char *help[] = {"--help", NULL};
    ck_assert_int_eq(parse(&cfg, help, out, sizeof out, err, sizeof err),
                     CONFIG_EXIT);
    const char *line = strstr(out, "--max-in-flight-per-ip");
    ck_assert_ptr_nonnull(line);
    ck_assert_ptr_nonnull(strstr(line, "env ATTND_MAX_IN_FLIGHT_PER_IP, "
                                       "default auto"));
}
END_TEST

#ifndef CONFIG_FIXTURES
#define CONFIG_FIXTURES "tests/fixtures/cgroup"
#endif

/* The CPU quota and memory limit as the cgroup files of each version
 * state them (tests/fixtures/cgroup/<case>/, copied from real mounts). */
START_TEST(test_config_cgroup_files)
{
    static const struct {
        const char *dir;
        size_t cpus;
        unsigned long long mem;
    } cases[] = {
        {"v2-quota", 2, 2147483648ULL},     /* cpu.max 150000 100000 */
        {"v2-max", 0, 0},                    /* cpu.max max 100000 */
        {"v2-exact", 4, 536870912ULL},       /* 400000 100000 */
        {"v1-quota", 3, 1073741824ULL},      /* 250000 / 100000 */
        {"v1-none", 0, 9223372036854771712ULL}, /* quota -1, no limit */
        {"empty", 0, 0},                     /* no cgroup files at all */
        {"garbage", 0, 0},                   /* unreadable values */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char root[256];
        snprintf(root, sizeof root, "%s/%s", CONFIG_FIXTURES, cases[i].dir);
        ck_assert_msg(config_cgroup_cpus(root) == cases[i].cpus,
                      "%s: %zu cpus, expected %zu", cases[i].dir,
                      config_cgroup_cpus(root), cases[i].cpus);
        ck_assert_msg(config_cgroup_memory(root) == cases[i].mem,
                      "%s: memory %llu, expected %llu", cases[i].dir,
                      config_cgroup_memory(root), cases[i].mem);
    }
    /* the machine's own: at least one, never more than are online */
    ck_assert_uint_ge(config_usable_cores(), 1);
    ck_assert_uint_le(config_usable_cores(),
                      (size_t)sysconf(_SC_NPROCESSORS_ONLN));
}
END_TEST

Suite *config_suite(void)
{
    Suite *s = suite_create("config");
    TCase *t = tcase_create("config");
    tcase_add_test(t, test_config_defaults);
    tcase_add_test(t, test_config_flags_and_env);
    tcase_add_test(t, test_config_bad_values_refused);
    tcase_add_test(t, test_config_flag_hides_its_variable);
    tcase_add_test(t, test_config_help_lists_every_option);
    tcase_add_test(t, test_config_cgroup_files);
    tcase_add_test(t, test_config_connection_limits_and_auto_sizes);
    tcase_add_test(t, test_config_in_flight_per_ip);
    suite_add_tcase(s, t);
    return s;
}
