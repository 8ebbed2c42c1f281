/* main.c: attnd's entry point: configuration, start, wait for SIGTERM or
 * SIGINT, drain, exit. Everything else lives in http/server.c so tests can link
 * all but this file. */
#include <arpa/inet.h>
#include <errno.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <netinet/in.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "attn.h"
#include "attn_coretype.h"
#include "config.h"
#include "log.h"
#include "json/text.h"
#include "http/server.h"

/* --healthcheck: GET /healthz on the configured port with a plain socket
 * (the container image has no curl). Returns 0 on a 200 answer, else 1. */
static int main__healthcheck(const config *cfg)
{
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    socklen_t ss_len;
    struct sockaddr_in *v4 = (struct sockaddr_in *)&ss;
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)&ss;
    /* A wildcard listener is probed on loopback; a specific one directly. */
    if (!strcmp(cfg->host, "0.0.0.0") || !strcmp(cfg->host, "::")) {
        v4->sin_family = AF_INET;
        v4->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        v4->sin_port = htons((uint16_t)cfg->port);
        ss_len = sizeof *v4;
    } else if (inet_pton(AF_INET, cfg->host, &v4->sin_addr) == 1) {
        v4->sin_family = AF_INET;
        v4->sin_port = htons((uint16_t)cfg->port);
        ss_len = sizeof *v4;
    } else if (inet_pton(AF_INET6, cfg->host, &v6->sin6_addr) == 1) {
        v6->sin6_family = AF_INET6;
        v6->sin6_port = htons((uint16_t)cfg->port);
        ss_len = sizeof *v6;
    } else {
        return 1;
    }
    int fd = socket(ss.ss_family, SOCK_STREAM, 0);
    if (fd < 0)
        return 1;
    struct timeval tv = {.tv_sec = 5};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    static const char req[] =
        "GET /healthz HTTP/1.0\r\nHost: localhost\r\n\r\n";
    char buf[64];
    size_t got = 0;
    if (connect(fd, (struct sockaddr *)&ss, ss_len) == 0 &&
        send(fd, req, sizeof req - 1, MSG_NOSIGNAL) == (ssize_t)sizeof req - 1) {
        while (got < sizeof buf - 1) {
            ssize_t n = recv(fd, buf + got, sizeof buf - 1 - got, 0);
            if (n <= 0)
                break;
            got += (size_t)n;
        }
    }
    close(fd);
    buf[got] = '\0';
    /* "HTTP/1.x 200 " */
    return got >= 13 && !strncmp(buf, "HTTP/1.", 7) && !strncmp(buf + 8, " 200", 4)
               ? 0
               : 1;
}

static void main__sleep(double seconds)
{
    struct timespec ts = {.tv_sec = (time_t)seconds,
                          .tv_nsec = (long)((seconds - (double)(time_t)seconds) * 1e9)};
    while (nanosleep(&ts, &ts) && errno == EINTR)
        ;
}

/* OpenBLAS reads OPENBLAS_NUM_THREADS and OPENBLAS_CORETYPE when it loads,
 * before main: when either is missing, set it and re-execute (same pid) so
 * OpenBLAS starts no idle threads beside the pool and uses the fast kernels
 * that 0.3.21 fails to pick on recent Intel CPUs. The variables being set
 * afterwards is what ends the loop. Returns only when no re-exec happened. */
static void main__reexec_for_blas(char **argv)
{
    const char *coretype = attn_blas_coretype_hint();
    bool set_coretype = coretype && !getenv("OPENBLAS_CORETYPE");
    bool set_threads = !getenv("OPENBLAS_NUM_THREADS");
    if (!set_coretype && !set_threads)
        return;
    if (set_coretype)
        setenv("OPENBLAS_CORETYPE", coretype, 1);
    if (set_threads)
        setenv("OPENBLAS_NUM_THREADS", "1", 1);
    /* The resolved path, not /proc/self/exe, so the process keeps its name
     * (ps, top) instead of becoming "exe". */
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n > 0) {
        self[n] = '\0';
        execv(self, argv);
    }
    /* Not fatal: attn_blas_set_threads(1) still applies, at some speed. */
    log_event("warn", "re-exec for OpenBLAS settings failed", NULL);
}

/* A request's buffers (tensors, the library's workspace, the response
 * text) are megabytes each and freed when it ends. With glibc's defaults
 * they are mmap'd fresh or trimmed back to the kernel, and every request
 * pays the page faults of zeroed pages again: 2048 x 256 outputs-only
 * computed in 51 ms instead of 46. Here they come from the heap up to
 * 32 MiB each, and up to 64 MiB of free heap stays mapped per malloc arena
 * for the next request, with at most 4 arenas. Larger buffers are still
 * mmap'd and returned when freed. GLIBC_TUNABLES naming a malloc setting
 * overrides this. */
static void main__tune_malloc(void)
{
#ifdef __GLIBC__
    const char *t = getenv("GLIBC_TUNABLES");
    if (t != NULL && strstr(t, "glibc.malloc.") != NULL)
        return;
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    mallopt(M_TRIM_THRESHOLD, 64 << 20);
    /* each arena keeps its own free heap: a few arenas bound what is kept
     * (glibc's default is 8 per core, one per busy connection thread) */
    mallopt(M_ARENA_MAX, 4);
#endif
}

static int main__sig_pipe[2];

/* Async-signal-safe: one write(2), errno preserved. */
static void main__on_signal(int sig)
{
    int saved = errno;
    unsigned char b = (unsigned char)sig;
    ssize_t n = write(main__sig_pipe[1], &b, 1);
    (void)n; /* a full pipe already holds a pending stop */
    errno = saved;
}

int main(int argc, char **argv)
{
    config cfg;
    switch (config_parse(&cfg, argc, argv, stdout, stderr)) {
    case CONFIG_EXIT:
        return 0;
    case CONFIG_ERROR:
        return 2;
    case CONFIG_RUN:
        break;
    }
    if (cfg.healthcheck)
        return main__healthcheck(&cfg);
    main__reexec_for_blas(argv);
    main__tune_malloc();

    /* A handler, not sigwait: OpenBLAS may have started threads before
     * main (when OPENBLAS_NUM_THREADS is set), and a signal those threads
     * did not block would take the default action and kill the process.
     * The handler only writes the signal number to a pipe. */
    if (pipe(main__sig_pipe)) {
        fprintf(stderr, "attnd: pipe: %s\n", strerror(errno));
        return 1;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = main__on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    server *srv;
    char err[256];
    if (server_start(&cfg, &srv, err, sizeof err)) {
        fprintf(stderr, "attnd: %s\n", err);
        return 1;
    }
    text_buf extra = TEXT_BUF_INIT;
    const char *coretype = getenv("OPENBLAS_CORETYPE");
    const config *in_force = server_config(srv);
    text_printf(&extra, "\"version\":\"%s\",\"host\":", CONFIG_VERSION);
    text_json_string(&extra, cfg.host, strlen(cfg.host));
    text_printf(&extra,
                ",\"port\":%u,\"compute_threads\":%zu,"
                "\"blas_threads\":1,\"blas_coretype\":",
                (unsigned)server_port(srv), server_threads(srv));
    if (coretype == NULL)
        coretype = "auto";
    text_json_string(&extra, coretype, strlen(coretype));
    text_puts(&extra, ",\"blas_config\":");
    text_json_string(&extra, attn_blas_config(), strlen(attn_blas_config()));
    text_printf(&extra,
                ",\"max_connections\":%zu,\"max_buffered_bytes\":%zu,"
                "\"max_request_bytes\":%zu,\"max_in_flight_per_ip\":%zu",
                in_force->max_connections, in_force->max_buffered_bytes,
                in_force->limits.max_request_bytes,
                in_force->max_in_flight_per_ip);
    if (!text_failed(&extra))
        log_event("info", "listening", extra.data);
    text_free(&extra);

    unsigned char sig = 0;
    while (read(main__sig_pipe[0], &sig, 1) < 0 && errno == EINTR)
        ;
    /* The whole drain, delay included, ends by --shutdown-timeout after
     * the signal: then whatever still runs is cut off, so the process exits
     * before an orchestrator's grace period runs out. */
    struct timespec deadline;
    clock_gettime(CLOCK_MONOTONIC, &deadline);
    double limit = cfg.shutdown_timeout_s;
    deadline.tv_sec += (time_t)limit;
    deadline.tv_nsec += (long)((limit - (double)(time_t)limit) * 1e9);
    if (deadline.tv_nsec >= 1000000000L) {
        deadline.tv_sec++;
        deadline.tv_nsec -= 1000000000L;
    }
    char stop[160];
    snprintf(stop, sizeof stop,
             "\"signal\":\"%s\",\"drain_delay_s\":%g,"
             "\"shutdown_timeout_s\":%g",
             sig == SIGINT ? "SIGINT" : "SIGTERM", cfg.drain_delay_s,
             cfg.shutdown_timeout_s);
    log_event("info", "shutting down", stop);
    server_begin_shutdown(srv);
    double delay = cfg.drain_delay_s < limit ? cfg.drain_delay_s : limit;
    if (delay > 0)
        main__sleep(delay);
    server_quiesce(srv);
    if (!server_wait_until(srv, &deadline)) {
        log_event("warn", "shutdown timeout: cutting off what is left", NULL);
        server_cut_off(srv);
    }
    /* The connections closed last linger until their clients have the
     * answers, by the same deadline. */
    server_stop_by(srv, &deadline);
    log_event("info", "stopped", NULL);
    return 0;
}
